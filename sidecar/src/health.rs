//! The standard gRPC health service (`grpc.health.v1.Health`), answered from
//! the sidecar's [`Phase`].
//!
//! | service | meaning | SERVING when |
//! |---|---|---|
//! | `""`, `tether.v1.Sidecar` | readiness: send runs here | [`Phase::Ready`] |
//! | `liveness` | liveness: the process is alive | always |
//!
//! Hand-written over tonic-health's generated server rather than its
//! `HealthReporter`, for two reasons: every status is computed from the one
//! phase, so no second copy of the state can disagree with it; and a `Watch`
//! stream ends once the sidecar has stopped, where the reporter's streams
//! never end and would hold the server's graceful shutdown open.
//!
//! `Watch` streams open at once are bounded over every listener together
//! (`ConnectionLimits::max_health_watches`): each holds a permit of one
//! semaphore, given back when its stream is dropped (the client cancelled
//! it, or its connection closed). Past the bound a `Watch` gets
//! RESOURCE_EXHAUSTED; a `Check` is never refused.

use crate::lifecycle::Phase;
use futures::Stream;
use std::pin::Pin;
use std::sync::Arc;
use tether_proto::pb::sidecar_server::SidecarServer;
use tokio::sync::{Semaphore, watch};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// The health service name that reports liveness.
pub const LIVENESS_SERVICE: &str = "liveness";

/// The health service names that report readiness: the whole server (`""`)
/// and `tether.v1.Sidecar`.
pub const READINESS_SERVICES: [&str; 2] = ["", <SidecarServer<crate::SidecarService> as NamedService>::NAME];

/// The status of health service `service` in `phase`; `None` for a service
/// this sidecar does not report.
fn status(service: &str, phase: Phase) -> Option<ServingStatus> {
    let serving = |yes: bool| if yes { ServingStatus::Serving } else { ServingStatus::NotServing };
    if READINESS_SERVICES.contains(&service) {
        Some(serving(phase.is_ready()))
    } else if service == LIVENESS_SERVICE {
        Some(ServingStatus::Serving)
    } else {
        None
    }
}

/// `grpc.health.v1.Health`, following a sidecar's phase.
#[derive(Debug, Clone)]
pub(crate) struct HealthService {
    phase: watch::Receiver<Phase>,
    watches: Arc<Semaphore>,
}

/// The `Watch` streams that may be open at once, shared by every health
/// service of one sidecar.
pub(crate) fn watch_permits(max: usize) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS)))
}

impl HealthService {
    /// The gRPC server for the health of the sidecar whose phase `phase`
    /// follows; each `Watch` holds one of `watches` while it is open.
    pub(crate) fn server(phase: watch::Receiver<Phase>, watches: Arc<Semaphore>) -> HealthServer<HealthService> {
        HealthServer::new(HealthService { phase, watches })
    }
}

fn response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse { status: status as i32 }
}

fn unknown(service: &str) -> Status {
    Status::not_found(format!(
        "no health service `{service}`; ask `` or `tether.v1.Sidecar` (readiness) or `{LIVENESS_SERVICE}` (liveness)"
    ))
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(&self, request: Request<HealthCheckRequest>) -> Result<Response<HealthCheckResponse>, Status> {
        let service = request.into_inner().service;
        let status = status(&service, *self.phase.borrow()).ok_or_else(|| unknown(&service))?;
        Ok(Response::new(response(status)))
    }

    type WatchStream = WatchStream;

    /// Sends the status now, then each change; ends after the sidecar stops.
    /// RESOURCE_EXHAUSTED when as many `Watch` streams as allowed are open.
    async fn watch(&self, request: Request<HealthCheckRequest>) -> Result<Response<WatchStream>, Status> {
        let service = request.into_inner().service;
        if status(&service, *self.phase.borrow()).is_none() {
            return Err(unknown(&service));
        }
        let Ok(permit) = self.watches.clone().try_acquire_owned() else {
            return Err(Status::resource_exhausted(
                "as many health `Watch` streams are open as the sidecar allows (`--max-health-watches`); use `Check`, or close a `Watch` first",
            ));
        };
        let mut phase = self.phase.clone();
        phase.mark_changed();
        // The permit lives in the stream's state: dropping the stream gives it back.
        let changes = futures::stream::unfold((phase, None, false, permit), move |(mut phase, last, ended, permit)| {
            let service = service.clone();
            async move {
                if ended {
                    return None;
                }
                loop {
                    // A closed channel means the sidecar is gone: end the stream.
                    phase.changed().await.ok()?;
                    let now = *phase.borrow_and_update();
                    let stopped = now == Phase::Stopped;
                    let current = status(&service, now)?;
                    if last != Some(current) {
                        return Some((Ok(response(current)), (phase, Some(current), stopped, permit)));
                    }
                    if stopped {
                        return None;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(changes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_phase_and_liveness_stays_serving() {
        for (phase, ready) in
            [(Phase::Loading, false), (Phase::Ready, true), (Phase::Draining, false), (Phase::Stopped, false)]
        {
            for service in ["", "tether.v1.Sidecar"] {
                let expected = if ready { ServingStatus::Serving } else { ServingStatus::NotServing };
                assert_eq!(status(service, phase), Some(expected), "{service:?} in {phase:?}");
            }
            assert_eq!(status(LIVENESS_SERVICE, phase), Some(ServingStatus::Serving), "liveness in {phase:?}");
            assert_eq!(status("tether.v1.Other", phase), None);
        }
    }

    #[tokio::test]
    async fn a_watch_sends_each_change_once_and_ends_when_the_sidecar_stops() {
        use futures::StreamExt as _;
        let (phase, receiver) = watch::channel(Phase::Loading);
        let service = HealthService { phase: receiver, watches: watch_permits(1) };
        let request = Request::new(HealthCheckRequest { service: String::new() });
        let mut stream = service.watch(request).await.unwrap().into_inner();
        let mut next = async || stream.next().await.map(|r| ServingStatus::try_from(r.unwrap().status).unwrap());
        assert_eq!(next().await, Some(ServingStatus::NotServing));
        phase.send_replace(Phase::Ready);
        assert_eq!(next().await, Some(ServingStatus::Serving));
        phase.send_replace(Phase::Draining);
        assert_eq!(next().await, Some(ServingStatus::NotServing));
        phase.send_replace(Phase::Stopped);
        assert_eq!(next().await, None, "no repeat of NOT_SERVING, and the stream ends");
    }

    #[tokio::test]
    async fn watches_past_the_bound_are_refused_and_a_dropped_watch_gives_its_place_back() {
        let (_phase, receiver) = watch::channel(Phase::Ready);
        let service = HealthService { phase: receiver, watches: watch_permits(2) };
        let watch = || service.watch(Request::new(HealthCheckRequest { service: String::new() }));
        let (first, second) = (watch().await.unwrap(), watch().await.unwrap());
        let refused = watch().await.err().expect("a third watch is refused");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
        drop(first);
        let third = watch().await.expect("a dropped watch gave its place back");
        drop((second, third));
        let check = service.check(Request::new(HealthCheckRequest { service: String::new() })).await;
        assert!(check.is_ok(), "a check is never refused");
    }
}
