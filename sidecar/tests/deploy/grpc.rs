//! Reaching a sidecar in a container from outside: a gRPC channel over TCP
//! or a Unix socket, and its readiness as `grpc.health.v1` reports it.

use crate::docker::Container;
use hyper_util::rt::TokioIo;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

/// The health service name of the sidecar's readiness (and Kubernetes'
/// readiness and startup probes).
pub const READINESS: &str = "tether.v1.Sidecar";

/// A channel to `address`: `http://host:port`, or `unix:/path`.
pub async fn channel(address: &str) -> Result<Channel, tonic::transport::Error> {
    match address.strip_prefix("unix:") {
        Some(path) => {
            let path = PathBuf::from(path);
            // The URI is unused for a Unix socket; tonic needs one all the same.
            Endpoint::from_static("http://tether.sidecar")
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
                }))
                .await
        }
        None => Endpoint::from_shared(address.to_owned()).expect("a valid address").connect().await,
    }
}

/// The status `service` reports at `address`, or why there is none.
pub async fn health(address: &str, service: &str) -> Result<ServingStatus, String> {
    let channel = channel(address).await.map_err(|e| format!("{e:?}"))?;
    let request = HealthCheckRequest { service: service.to_owned() };
    let response = HealthClient::new(channel).check(request).await.map_err(|status| format!("{status:?}"))?;
    Ok(response.into_inner().status())
}

/// Waits until readiness at `address` is SERVING and returns how long that
/// took from `docker run`.
///
/// # Panics
/// If the container stops or `timeout` passes first, with its logs.
pub async fn wait_ready(container: &Container, address: &str, timeout: Duration) -> Duration {
    wait_status(container, address, ServingStatus::Serving, timeout).await;
    container.started.elapsed()
}

/// Waits until readiness at `address` is `wanted`.
///
/// # Panics
/// If the container stops or `timeout` passes first, with its logs.
pub async fn wait_status(container: &Container, address: &str, wanted: ServingStatus, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        match health(address, READINESS).await {
            Ok(status) if status == wanted => return,
            Ok(status) => last = format!("{status:?}"),
            Err(error) => last = error,
        }
        if !container.running() {
            container
                .fail(&format!("the container stopped before readiness at `{address}` was {wanted:?} (last: {last})"));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    container.fail(&format!("readiness at `{address}` was not {wanted:?} within {timeout:?} (last: {last})"));
}
