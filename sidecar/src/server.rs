//! The sidecar as a whole: engine, capacity and run tasks, served over TCP or
//! a Unix socket with the standard gRPC health service beside `tether.v1`.

use crate::config::SidecarConfig;
use crate::engine::{EngineError, SandboxEngine};
use crate::memory::MemoryBudget;
use crate::service::{Shared, SidecarService};
use crate::slots::Capacity;
use crate::unix_authority::AuthorityRewrite;
use std::future::Future;
use std::sync::Arc;
use tether_proto::pb::sidecar_server::SidecarServer;
use tokio::net::{TcpListener, UnixListener};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::server::TcpIncoming;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Errors starting or serving a sidecar.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    /// The sandbox engine could not be built.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The gRPC server failed.
    #[error("the gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The configuration cannot work.
    #[error("invalid sidecar configuration: {0}")]
    Config(String),
}

/// A sidecar: build it once, then serve it on one or more listeners.
///
/// Dropping it does not stop runs in progress; [`Sidecar::shutdown`] does.
#[derive(Debug, Clone)]
pub struct Sidecar {
    shared: Arc<Shared>,
}

impl Sidecar {
    /// Builds the engine (loading compiled guests from the cache, compiling on
    /// a miss) and the sidecar's capacity.
    ///
    /// # Errors
    /// If the configuration cannot work (e.g. limits that would make a message
    /// too large to send), wasmtime cannot be set up, or a guest does not load.
    pub fn new(config: SidecarConfig) -> Result<Sidecar, SidecarError> {
        config.check().map_err(SidecarError::Config)?;
        let engine = SandboxEngine::new(&config)?;
        let capacity = Arc::new(Capacity::new(config.slots, config.max_queued_runs, config.max_waiting_runs));
        let memory = MemoryBudget::new(config.total_memory_bytes);
        let shared =
            Shared { engine, config, capacity, memory, tasks: TaskTracker::new(), shutdown: CancellationToken::new() };
        Ok(Sidecar { shared: Arc::new(shared) })
    }

    /// The gRPC service, with message size limits set from the config.
    pub fn service(&self) -> SidecarServer<SidecarService> {
        let max = self.shared.config.max_message_bytes();
        SidecarServer::new(SidecarService::new(self.shared.clone()))
            .max_decoding_message_size(max)
            .max_encoding_message_size(max)
    }

    /// Serves on `listener` until `signal` completes, then stops every run.
    ///
    /// # Errors
    /// If the server fails.
    pub async fn serve_tcp(&self, listener: TcpListener, signal: impl Future<Output = ()>) -> Result<(), SidecarError> {
        // Without TCP_NODELAY, Nagle's algorithm and delayed ACKs add ~40 ms
        // to every small message of a run's stream.
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        self.serve(incoming, signal).await
    }

    /// Serves on a Unix socket until `signal` completes, then stops every run.
    ///
    /// Each connection's `:authority` is mended on the way in, so clients
    /// that send the socket's path there (grpc-python) work with their
    /// default options; see `unix_authority`.
    ///
    /// # Errors
    /// If the server fails.
    pub async fn serve_unix(&self, listener: UnixListener, signal: impl Future<Output = ()>) -> Result<(), SidecarError> {
        let incoming = UnixListenerStream::new(listener).map(|accepted| accepted.map(AuthorityRewrite::new));
        self.serve(incoming, signal).await
    }

    async fn serve<S, IO, E>(&self, incoming: S, signal: impl Future<Output = ()>) -> Result<(), SidecarError>
    where
        S: tokio_stream::Stream<Item = Result<IO, E>> + Send + 'static,
        IO: tonic::transport::server::Connected + tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        IO::ConnectInfo: Clone + Send + Sync + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_serving::<SidecarServer<SidecarService>>().await;
        let shutdown = self.shared.shutdown.clone();
        let result = tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(self.service())
            .serve_with_incoming_shutdown(incoming, async move {
                tokio::select! {
                    () = signal => {}
                    () = shutdown.cancelled() => {}
                }
            })
            .await;
        self.shutdown().await;
        Ok(result?)
    }

    /// Ends every run now (each fails with UNAVAILABLE) and waits until all
    /// have let go of their resources.
    pub async fn shutdown(&self) {
        self.shared.shutdown.cancel();
        self.shared.tasks.close();
        self.shared.tasks.wait().await;
    }

    /// Runs admitted and not yet finished.
    pub fn live_runs(&self) -> usize {
        self.shared.capacity.live()
    }

    /// Runs waiting on tool results now.
    pub fn waiting_runs(&self) -> usize {
        self.shared.capacity.waiting()
    }

    /// Runs queued for their first execution slot now.
    pub fn queued_runs(&self) -> usize {
        self.shared.capacity.queued()
    }

    /// Guest memory held by live runs now, in bytes.
    pub fn guest_memory_bytes(&self) -> u64 {
        self.shared.memory.used()
    }

    /// Execution slots free now.
    pub fn free_slots(&self) -> usize {
        self.shared.capacity.free_slots()
    }

    /// The configuration the sidecar runs with.
    pub fn config(&self) -> &SidecarConfig {
        &self.shared.config
    }
}
