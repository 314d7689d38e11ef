//! The gRPC `Sidecar` service: admits runs and drives each run's stream.
//!
//! Ownership: every run is a task in the sidecar's [`TaskTracker`]. The task
//! owns the guest, the inbound stream and the outbound sender. It ends when the
//! script ends, when the backend cancels, breaks the protocol or goes away
//! (inbound stream ends, or nobody reads the outbound stream), at the run's
//! deadline, or at sidecar shutdown — and dropping the guest's future frees its
//! instance, slot and waiting place at once.

use crate::calls::{CallPort, CallPortSetup, CallStats, Outbound, PendingCalls};
use crate::config::SidecarConfig;
use crate::cpu::{CpuMeter, Metered};
use crate::engine::SandboxEngine;
use crate::error::{LimitExceeded, RejectRun, RunEnd};
use crate::memory::MemoryBudget;
use crate::output::CapturedOutput;
use crate::run::{self, RunPlan};
use crate::slots::{Capacity, GaugePlace};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tether_proto::pb::{self, backend_message, sidecar_server};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

/// Messages a run may have in flight to a slow reader before it waits.
const OUTBOUND_BUFFER: usize = 64;

/// State shared by the service and every run task.
#[derive(Debug)]
pub struct Shared {
    pub(crate) engine: SandboxEngine,
    pub(crate) config: SidecarConfig,
    pub(crate) capacity: Arc<Capacity>,
    pub(crate) memory: Arc<MemoryBudget>,
    pub(crate) tasks: TaskTracker,
    pub(crate) shutdown: CancellationToken,
}

/// The `tether.v1.Sidecar` gRPC service.
#[derive(Debug, Clone)]
pub struct SidecarService {
    shared: Arc<Shared>,
}

impl SidecarService {
    /// The service over `shared`.
    pub fn new(shared: Arc<Shared>) -> Self {
        SidecarService { shared }
    }
}

#[tonic::async_trait]
impl sidecar_server::Sidecar for SidecarService {
    type RunStream = ReceiverStream<Result<pb::SidecarMessage, Status>>;

    async fn run(&self, request: Request<Streaming<pb::BackendMessage>>) -> Result<Response<Self::RunStream>, Status> {
        let mut inbound = request.into_inner();
        let start = match inbound.message().await? {
            Some(pb::BackendMessage { kind: Some(backend_message::Kind::Start(start)) }) => start,
            Some(_) => return Err(RejectRun::Protocol("the first message of a run must be `Start`".into()).into()),
            None => return Err(RejectRun::Protocol("the stream ended before `Start`".into()).into()),
        };
        let plan = RunPlan::new(start, &self.shared.config.limits)?;
        if self.shared.engine.runtime(&plan.language).is_none() {
            return Err(RejectRun::UnknownLanguage(plan.language).into());
        }
        let capacity = &self.shared.capacity;
        let queued = capacity.queued().try_enter().ok_or(RejectRun::QueueFull(self.shared.config.max_queued_runs))?;
        let live = capacity.live().try_enter().ok_or_else(|| Status::internal("live-run count overflow"))?;

        let (outbound, receiver) = mpsc::channel(OUTBOUND_BUFFER);
        let span = tracing::info_span!("run", run_id = %plan.run_id, turn_id = %plan.turn_id, language = %plan.language);
        let task = RunTask { shared: self.shared.clone(), plan, outbound, queued, _live: live };
        self.shared.tasks.spawn(task.drive(inbound).instrument(span));
        Ok(Response::new(ReceiverStream::new(receiver)))
    }

    async fn describe(&self, _: Request<pb::DescribeRequest>) -> Result<Response<pb::DescribeResponse>, Status> {
        let shared = &self.shared;
        Ok(Response::new(pb::DescribeResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            protocol: tether_proto::PROTOCOL.to_owned(),
            runtimes: shared.engine.runtime_names(),
            limits: Some(shared.config.limits.to_proto()),
            slots: shared.capacity.slot_count() as u32,
            live_runs: shared.capacity.live().current() as u32,
        }))
    }
}

/// One admitted run and everything it holds.
struct RunTask {
    shared: Arc<Shared>,
    plan: RunPlan,
    outbound: Outbound,
    queued: GaugePlace,
    _live: GaugePlace,
}

/// Why the inbound side ended a run.
enum InboundEnd {
    /// The backend sent `Cancel`.
    Cancelled(String),
    /// The backend broke the protocol; the stream fails with this status.
    Protocol(Status),
    /// The backend closed or lost its stream: nobody is left to tell.
    Gone,
}

impl RunTask {
    async fn drive(self, inbound: Streaming<pb::BackendMessage>) {
        let RunTask { shared, plan, outbound, queued, _live } = self;
        let started = Instant::now();
        let output = CapturedOutput::new(plan.limits.output_bytes as usize);
        let pending = PendingCalls::default();
        let stats = Arc::new(CallStats::default());
        let cpu = Arc::new(CpuMeter::default());
        let peak_memory = AtomicU64::new(0);

        let guest = async {
            let slot = shared.capacity.acquire_slot().await;
            drop(queued);
            let setup = CallPortSetup {
                parent_call_id: plan.parent_call_id.clone(),
                max_calls: plan.limits.max_calls,
                args_bytes: plan.limits.args_bytes,
                result_bytes: plan.limits.result_bytes,
            };
            let port = CallPort::new(setup, outbound.clone(), pending.clone(), shared.capacity.clone(), slot, output.clone(), stats.clone());
            let Some(pre) = shared.engine.runtime(&plan.language) else {
                return RunEnd::Internal(format!("runtime `{}` vanished", plan.language));
            };
            let meters = run::Meters { cpu: cpu.clone(), memory: shared.memory.clone(), peak_memory: &peak_memory };
            run::execute(pre, &plan, port, &output, meters).await
        };
        let guest = Metered::new(guest, cpu.clone());
        let deadline = tokio::time::sleep(plan.limits.deadline);

        let end = tokio::select! {
            end = guest => Ok(end),
            end = read_inbound(inbound, &pending) => Err(end),
            () = outbound.closed() => Err(InboundEnd::Gone),
            () = deadline => Ok(RunEnd::Limit(LimitExceeded::Deadline { limit: plan.limits.deadline })),
            () = shared.shutdown.cancelled() => Err(InboundEnd::Protocol(Status::unavailable("the sidecar is shutting down; retry on another"))),
        };
        // The guest future is dropped here: the instance, slot and waiting place are free.
        let run_end = match end {
            Ok(end) => end,
            Err(InboundEnd::Cancelled(reason)) => RunEnd::Cancelled(reason),
            Err(InboundEnd::Protocol(status)) => {
                tracing::warn!(status = %status.message(), "run ended: protocol error");
                let _ = outbound.send(Err(status)).await;
                return;
            }
            Err(InboundEnd::Gone) => {
                tracing::info!("run ended: the backend went away");
                return;
            }
        };
        match &run_end {
            RunEnd::Internal(cause) => tracing::error!(%cause, "run failed in the sidecar"),
            RunEnd::GuestFault(cause) => tracing::warn!(%cause, "the guest crashed"),
            other => tracing::info!(end = other.kind(), "run ended"),
        }
        let stats = pb::RunStats {
            calls: stats.calls.load(Ordering::Relaxed),
            calls_refused_by_cap: stats.refused_by_cap.load(Ordering::Relaxed),
            cpu_time_us: cpu.used().as_micros() as u64,
            wait_time_us: stats.wait_us.load(Ordering::Relaxed),
            wall_time_us: started.elapsed().as_micros() as u64,
            peak_memory_bytes: peak_memory.load(Ordering::Relaxed),
        };
        // Output not yet forwarded goes out before `Finished`, which carries all of it too.
        let finished = run_end.into_finished(output.contents(), stats);
        let message = pb::SidecarMessage { kind: Some(pb::sidecar_message::Kind::Finished(finished)) };
        // A failed send means the backend is gone; there is no one left to tell.
        let _ = outbound.send(Ok(message)).await;
    }
}

/// Reads the backend's messages after `Start` until one ends the run.
async fn read_inbound(mut inbound: Streaming<pb::BackendMessage>, pending: &PendingCalls) -> InboundEnd {
    loop {
        let message = match inbound.message().await {
            Ok(Some(message)) => message,
            Ok(None) => return InboundEnd::Gone,
            // A vanished peer and an unreadable message (e.g. over the size
            // limit) look alike here; telling a vanished peer costs nothing.
            Err(status) => {
                tracing::info!(status = %status, "the backend's stream failed");
                let message = format!("reading the backend's stream failed: {}", status.message());
                return InboundEnd::Protocol(Status::new(status.code(), message));
            }
        };
        match message.kind {
            Some(backend_message::Kind::ToolResult(result)) => {
                if result.outcome.is_none() {
                    return protocol(format!("`ToolResult` `{}` has neither `value_json` nor `failure`", result.id));
                }
                if let Err(result) = pending.deliver(result) {
                    return protocol(format!("`ToolResult` for unknown call id `{}`", result.id));
                }
            }
            Some(backend_message::Kind::Cancel(cancel)) => return InboundEnd::Cancelled(cancel.reason),
            Some(backend_message::Kind::Start(_)) => return protocol("`Start` may be sent only once per run".into()),
            None => return protocol("a backend message with no content".into()),
        }
    }
}

fn protocol(message: String) -> InboundEnd {
    InboundEnd::Protocol(RejectRun::Protocol(message).into())
}
