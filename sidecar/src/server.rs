//! The sidecar as a whole: engine, capacity, lifecycle and runs, served
//! over TCP or a Unix socket with gRPC health and reflection beside
//! `tether.v1`, plus a health-only listener and a Prometheus endpoint.

use crate::auth::{AccessError, Gate};
use crate::config::SidecarConfig;
use crate::connections::{self, Admission, Admitted, Handshake};
use crate::driven::{DrivenRuns, SWEEP_TICK};
use crate::engine::{EngineError, SandboxEngine};
use crate::health::{self, HealthService};
use crate::idle;
use crate::lifecycle::{DrainReport, Lifecycle, Phase};
use crate::loader::EngineCell;
use crate::memory::MemoryBudget;
use crate::metrics::{Gauges, Metrics};
use crate::metrics_endpoint;
use crate::park::ParkKey;
use crate::service::{Shared, SidecarService};
use crate::slots::Capacity;
use crate::unix_authority::AuthorityRewrite;
use crate::workers::{Placement, Runtimes};
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tether_proto::pb::sidecar_server::SidecarServer;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;
use tokio_stream::StreamExt as _;
use tonic::service::InterceptorLayer;
use tonic::transport::server::Router;
use tower::layer::util::{Identity, Stack};

/// A run listener's services behind its [`Gate`].
type GatedRouter = Router<Stack<InterceptorLayer<Gate>, Identity>>;

/// Errors starting or serving a sidecar.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    /// The sandbox engine could not be built.
    #[error(transparent)]
    Engine(Arc<EngineError>),
    /// The thread that loads the guests in the background could not start.
    #[error("failed to start the thread that loads the guests: {0}")]
    Loader(std::io::Error),
    /// The thread that gives memory back when the sidecar is idle could not
    /// start.
    #[error(
        "failed to start the thread that gives memory back when the sidecar is idle: {0}; pass `--idle-release-seconds 0` (`SidecarConfig::idle_release` zero) to go without it"
    )]
    IdleRelease(std::io::Error),
    /// The thread that ends stalled runs could not start.
    #[error("failed to start the thread that ends runs whose stream the backend no longer reads: {0}")]
    Sweeper(std::io::Error),
    /// The gRPC server failed.
    #[error("the gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The gRPC reflection service could not be built from the embedded
    /// descriptors (a bug in this build).
    #[error("the gRPC reflection service cannot be built: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The configuration cannot work.
    #[error("invalid sidecar configuration: {0}")]
    Config(String),
    /// The listener may not be served with the configured access (e.g. TCP
    /// without a token or mTLS).
    #[error(transparent)]
    Access(#[from] AccessError),
    /// The threads that serve a listener's connections could not start.
    #[error("failed to start the sidecar's worker threads (check the process's thread and file limits): {0}")]
    Workers(std::io::Error),
    /// No park key was given and none could be made at random.
    #[error("could not make a random park key ({0}); give one with `--park-key-file`")]
    ParkKey(std::io::Error),
}

impl From<EngineError> for SidecarError {
    fn from(error: EngineError) -> Self {
        SidecarError::Engine(Arc::new(error))
    }
}

/// A sidecar: build it once, then serve it on one or more listeners.
///
/// Dropping it does not stop runs in progress; [`Sidecar::drain`] and
/// [`Sidecar::shutdown`] do, and every server of it then stops.
#[derive(Debug, Clone)]
pub struct Sidecar {
    shared: Arc<Shared>,
    /// The health `Watch` streams that may be open, over every listener.
    watches: Arc<Semaphore>,
}

impl Sidecar {
    /// Builds the engine (loading compiled guests from the cache, compiling on
    /// a miss) and the sidecar's capacity. The sidecar is ready (readiness
    /// SERVING) when this returns.
    ///
    /// # Errors
    /// If the configuration cannot work (e.g. limits that would make a message
    /// too large to send), wasmtime cannot be set up, or a guest does not load.
    pub fn new(config: SidecarConfig) -> Result<Sidecar, SidecarError> {
        config.check().map_err(SidecarError::Config)?;
        let engine = EngineCell::ready(SandboxEngine::new(&config)?);
        Sidecar::assemble(config, engine, Phase::Ready)
    }

    /// Checks the configuration and returns at once; the engine is built on a
    /// background thread. Until it is, readiness is NOT_SERVING and new runs
    /// are refused with UNAVAILABLE, so a server can listen (and answer
    /// health checks) while a cold cache compiles the Python guest.
    /// [`Sidecar::ready`] says when it is built, or why it could not be.
    ///
    /// # Errors
    /// If the configuration cannot work, or the loading thread cannot start.
    pub fn load_in_background(config: SidecarConfig) -> Result<Sidecar, SidecarError> {
        config.check().map_err(SidecarError::Config)?;
        let sidecar = Sidecar::assemble(config.clone(), EngineCell::loading(), Phase::Loading)?;
        // A weak reference: a sidecar dropped while loading is not kept alive.
        let weak = Arc::downgrade(&sidecar.shared);
        let on_ready = move || {
            if let Some(shared) = weak.upgrade() {
                shared.lifecycle.advance_to(Phase::Ready);
            }
        };
        sidecar.shared.engine.load_in_background(config, on_ready).map_err(SidecarError::Loader)?;
        Ok(sidecar)
    }

    fn assemble(config: SidecarConfig, engine: EngineCell, phase: Phase) -> Result<Sidecar, SidecarError> {
        let capacity = Arc::new(Capacity::new(
            config.slots,
            config.max_queued_runs,
            config.max_waiting_runs,
            config.max_start_bytes,
        ));
        let memory = MemoryBudget::new(config.total_memory_bytes);
        let lifecycle = Lifecycle::new(phase);
        let idle_release = config.idle_release;
        let driven = Arc::new(DrivenRuns::default());
        let metrics = Arc::new(Metrics::new());
        let watches = health::watch_permits(config.connections.max_health_watches);
        let park_key = match &config.park.key {
            Some(key) => key.clone(),
            None => ParkKey::random().map_err(SidecarError::ParkKey)?,
        };
        let shared = Arc::new(Shared { engine, config, capacity, memory, lifecycle, metrics, driven, park_key });
        idle::spawn(Arc::downgrade(&shared), idle_release).map_err(SidecarError::IdleRelease)?;
        spawn_sweeper(Arc::downgrade(&shared)).map_err(SidecarError::Sweeper)?;
        Ok(Sidecar { shared, watches })
    }

    /// Completes when the engine is built (at once for [`Sidecar::new`]).
    ///
    /// # Errors
    /// Why the engine could not be built; the sidecar then refuses every run.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only waits.
    pub async fn ready(&self) -> Result<(), SidecarError> {
        self.shared.engine.loaded().await.map(|_| ()).map_err(SidecarError::Engine)
    }

    /// Where the sidecar is in its life now.
    pub fn phase(&self) -> Phase {
        self.shared.lifecycle.phase()
    }

    /// Drains the sidecar for shutdown: readiness goes NOT_SERVING at once and
    /// new runs are refused with UNAVAILABLE ("the sidecar is draining for
    /// shutdown; open the run on another sidecar"); the runs in flight —
    /// waiting on tool results and approvals included — go on until they end
    /// or `deadline` passes. Then the rest are cancelled (`Finished` status
    /// CANCELLED, "sidecar shutting down"), every server of this sidecar
    /// stops, and this returns.
    ///
    /// Calling [`Sidecar::shutdown`] meanwhile cuts the drain short: runs are
    /// cancelled at once.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the sidecar draining: no new runs, the
    /// runs in flight go on with no deadline.
    pub async fn drain(&self, deadline: Duration) -> DrainReport {
        let capacity = self.shared.capacity.clone();
        self.shared.lifecycle.drain(deadline, move || capacity.live()).await
    }

    /// Ends every run now (each gets `Finished` status CANCELLED, "sidecar
    /// shutting down"), waits until all have let go of their resources, and
    /// stops every server of this sidecar.
    pub async fn shutdown(&self) {
        self.shared.lifecycle.stop().await;
    }

    /// The `tether.v1` gRPC service, with message size limits set from the config.
    /// Each run is driven by its response stream on the runtime that serves the request.
    pub fn service(&self) -> SidecarServer<SidecarService> {
        self.service_placed(None)
    }

    /// The `tether.v1` service, its runs placed by `placement`.
    fn service_placed(&self, placement: Option<Placement>) -> SidecarServer<SidecarService> {
        let max = self.shared.config.max_message_bytes();
        SidecarServer::new(SidecarService::new(self.shared.clone(), placement))
            .max_decoding_message_size(max)
            .max_encoding_message_size(max)
    }

    /// Every service of a run listener — `tether.v1`, health and reflection —
    /// behind `gate`, over TLS when `tls` is set, with the configured HTTP/2
    /// keepalive and streams per connection; runs are placed on the
    /// listener's workers by `placement`.
    fn routes(
        &self,
        gate: Gate,
        tls: Option<tonic::transport::ServerTlsConfig>,
        placement: Option<Placement>,
    ) -> Result<GatedRouter, SidecarError> {
        let reflection = || {
            [tether_proto::FILE_DESCRIPTOR_SET, tonic_health::pb::FILE_DESCRIPTOR_SET]
                .into_iter()
                .fold(tonic_reflection::server::Builder::configure(), |builder, set| {
                    builder.register_encoded_file_descriptor_set(set)
                })
        };
        let config = &self.shared.config;
        let runs = config.max_queued_runs + config.max_waiting_runs + config.slots;
        let streams = config.connections.streams_per_run_connection(runs);
        let mut server = self.http2_server(streams);
        if let Some(tls) = tls {
            server = server.tls_config(tls)?;
        }
        Ok(server
            .layer(InterceptorLayer::new(gate))
            .add_service(self.health_service())
            // v1 for current clients, v1alpha for older grpcurl and grpcui.
            .add_service(reflection().build_v1()?)
            .add_service(reflection().build_v1alpha()?)
            .add_service(self.service_placed(placement)))
    }

    /// A gRPC server with the configured HTTP/2 keepalive (a peer that stops
    /// answering PINGs is closed) and at most `streams` concurrent streams
    /// per connection (SETTINGS_MAX_CONCURRENT_STREAMS; a client past it
    /// gets REFUSED_STREAM).
    fn http2_server(&self, streams: u32) -> tonic::transport::Server {
        let config = &self.shared.config;
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(config.keepalive_interval))
            .http2_keepalive_timeout(Some(config.keepalive_timeout))
            .max_concurrent_streams(Some(streams))
    }

    /// `grpc.health.v1`, its `Watch` streams bounded with every other
    /// listener's.
    fn health_service(&self) -> tonic_health::pb::health_server::HealthServer<HealthService> {
        HealthService::server(self.shared.lifecycle.subscribe(), self.watches.clone())
    }

    /// The admission of a listener called `name`: at most `max`
    /// connections, each with the configured handshake deadline.
    fn admission(&self, name: &'static str, max: usize) -> Admission {
        Admission::new(name, max, self.shared.config.connections.handshake_timeout)
    }

    /// Serves runs, health and reflection on `listener` until `signal`
    /// completes or the sidecar stops (see [`Sidecar::drain`]); then stops
    /// every run. Clients prove themselves as `config.access.tcp` says
    /// (token, mTLS, or nothing on an insecure loopback).
    ///
    /// # Errors
    /// If `config.access.tcp` does not allow serving on this address
    /// ([`TcpAccess::check`](crate::TcpAccess::check)), the TLS files are
    /// invalid, or the server fails.
    pub async fn serve_tcp(&self, listener: TcpListener, signal: impl Future<Output = ()>) -> Result<(), SidecarError> {
        let access = &self.shared.config.access.tcp;
        access.check(
            listener.local_addr().map_err(|e| SidecarError::Config(format!("the TCP listener has no address: {e}")))?,
        )?;
        let gate = Gate::tcp(access, self.shared.metrics.clone());
        let tls = access.tls.as_ref().map(|tls| tls.server_config());
        let handshake = if tls.is_some() { Handshake::Tls } else { Handshake::Http2 };
        let admission = self.admission("run", self.shared.config.connections.max_connections);
        let closing = admission.clone();
        // TCP_NODELAY is set as each connection is accepted (`connections`).
        let incoming = connections::admitted(listener, admission)
            .map(|admitted| admitted.try_map(tokio::net::TcpStream::into_std));
        let bind = move |admitted: Admitted<std::net::TcpStream>| {
            Ok(admitted.try_map(tokio::net::TcpStream::from_std)?.guard(handshake))
        };
        self.serve(gate, tls, incoming, bind, signal, closing).await
    }

    /// Serves runs, health and reflection on a Unix socket until `signal`
    /// completes or the sidecar stops; then stops every run. Only peers
    /// `config.access.unix` allows get in (default: the sidecar's own uid).
    ///
    /// Each connection's `:authority` is mended on the way in, so clients
    /// that send the socket's path there (grpc-python) work with their
    /// default options; see `unix_authority`.
    ///
    /// # Errors
    /// If the server fails.
    pub async fn serve_unix(
        &self,
        listener: UnixListener,
        signal: impl Future<Output = ()>,
    ) -> Result<(), SidecarError> {
        let admission = self.admission("run", self.shared.config.connections.max_connections);
        let closing = admission.clone();
        let incoming = connections::admitted(listener, admission)
            .map(|admitted| admitted.try_map(tokio::net::UnixStream::into_std));
        // The handshake is read below the rewrite, as the client sent it.
        let bind = |admitted: Admitted<std::os::unix::net::UnixStream>| {
            let guarded = admitted.try_map(tokio::net::UnixStream::from_std)?.guard(Handshake::Http2);
            Ok(AuthorityRewrite::new(guarded))
        };
        let gate = Gate::unix(&self.shared.config.access.unix, self.shared.metrics.clone());
        self.serve(gate, None, incoming, bind, signal, closing).await
    }

    /// Serves ONLY `grpc.health.v1` on `listener` (no runs), for probes when
    /// runs go over a Unix socket, until `signal` completes or the sidecar
    /// stops. Ending it does not stop runs. It asks for no credentials:
    /// probes cannot send them, and it tells only the phase. It holds at
    /// most `connections.max_probe_connections` connections with
    /// `connections.max_probe_streams_per_connection` streams each, the
    /// same handshake deadline and HTTP/2 keepalive as a run listener, and
    /// its `Watch` streams count with every other listener's.
    ///
    /// # Errors
    /// If the server fails.
    pub async fn serve_health_tcp(
        &self,
        listener: TcpListener,
        signal: impl Future<Output = ()>,
    ) -> Result<(), SidecarError> {
        let lifecycle = &self.shared.lifecycle;
        let limits = &self.shared.config.connections;
        let admission = self.admission("health", limits.max_probe_connections);
        let closing = admission.clone();
        let incoming = connections::admitted(listener, admission)
            .map(|admitted| Ok::<_, std::io::Error>(admitted.guard(Handshake::Http2)));
        self.http2_server(limits.max_probe_streams_per_connection)
            .add_service(self.health_service())
            .serve_with_incoming_shutdown(incoming, async {
                tokio::select! {
                    () = signal => {}
                    () = lifecycle.stopped() => {}
                }
                closing.close();
            })
            .await?;
        Ok(())
    }

    /// Serves the Prometheus metrics ([`Sidecar::metrics_text`]) at
    /// `GET /metrics` on `listener` until `signal` completes or the sidecar
    /// stops. Ending it does not stop runs. It holds at most
    /// `connections.max_probe_connections` connections, and closes one whose
    /// request header has not arrived within `connections.handshake_timeout`
    /// (an idle keep-alive connection included).
    pub async fn serve_metrics(&self, listener: TcpListener, signal: impl Future<Output = ()>) {
        let sidecar = self.clone();
        let lifecycle = &self.shared.lifecycle;
        let stop = async {
            tokio::select! {
                () = signal => {}
                () = lifecycle.stopped() => {}
            }
        };
        let limits = &self.shared.config.connections;
        let incoming = connections::admitted(listener, self.admission("metrics", limits.max_probe_connections));
        metrics_endpoint::serve(incoming, limits.handshake_timeout, move || sidecar.metrics_text(), stop).await;
    }

    /// Every metric in the Prometheus text format (version 0.0.4), for an
    /// embedder that serves them itself. `docs/operating.md` lists them.
    pub fn metrics_text(&self) -> String {
        let shared = &self.shared;
        let capacity = &shared.capacity;
        let phase = shared.lifecycle.phase();
        shared.metrics.encode(Gauges {
            slots_total: capacity.slot_count(),
            slots_in_use: capacity.slot_count().saturating_sub(capacity.free_slots()),
            runs_live: capacity.live(),
            runs_waiting_on_tools: capacity.waiting(),
            runs_queued: capacity.queued(),
            start_bytes: capacity.start_bytes(),
            streams_awaiting_start: capacity.streams_awaiting_start(),
            guest_memory_bytes: shared.memory.used(),
            ready: phase.is_ready(),
            draining: phase >= Phase::Draining,
        })
    }

    /// Accepts connections from `incoming` and hands each to one of the
    /// listener's workers (`workers`; with `config.worker_threads` 0, serves
    /// them on this runtime), until `signal` completes or the sidecar stops;
    /// then stops the workers' servers (gracefully), ends every run, and ends
    /// the workers.
    ///
    /// Connections cross as std sockets and `bind` registers each with its
    /// worker's own reactor, on the worker: a socket registered with the
    /// accepting runtime would have every read woken from there (a hand-off
    /// between threads per message). `incoming` has already admitted each
    /// (see `connections`); one that could not cross is dropped, giving its
    /// place back. When serving stops, `admission` is closed: connections
    /// still in their handshake close at once.
    async fn serve<S, A, B, IO>(
        &self,
        gate: Gate,
        tls: Option<tonic::transport::ServerTlsConfig>,
        incoming: S,
        bind: B,
        signal: impl Future<Output = ()>,
        admission: Admission,
    ) -> Result<(), SidecarError>
    where
        S: tokio_stream::Stream<Item = std::io::Result<Admitted<A>>>,
        A: Send + 'static,
        B: Fn(Admitted<A>) -> std::io::Result<IO> + Clone + Send + 'static,
        IO: tonic::transport::server::Connected + tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        IO::ConnectInfo: Clone + Send + Sync + 'static,
    {
        let lifecycle = &self.shared.lifecycle;
        let workers = self.shared.config.worker_threads;
        if workers == 0 {
            let incoming = incoming.map(move |accepted| accepted.and_then(&bind));
            let result = self
                .routes(gate, tls, None)?
                .serve_with_incoming_shutdown(incoming, async {
                    tokio::select! {
                        () = signal => {}
                        () = lifecycle.stopped() => {}
                    }
                    admission.close();
                })
                .await;
            self.shutdown().await;
            return Ok(result?);
        }
        let runtimes = Runtimes::build(workers).map_err(SidecarError::Workers)?;
        let routes = self.routes(gate, tls, Some(runtimes.placement()))?;
        let mut workers = runtimes
            .start(|connections, stop| routes.clone().serve_with_incoming_shutdown(connections.map(bind.clone()), stop))
            .map_err(SidecarError::Workers)?;
        {
            // Dropped when accepting stops: a TCP listener closes at once.
            let mut incoming = std::pin::pin!(incoming);
            let mut signal = std::pin::pin!(signal);
            loop {
                tokio::select! {
                    () = &mut signal => break,
                    () = lifecycle.stopped() => break,
                    accepted = incoming.next() => match accepted {
                        Some(Ok(connection)) => workers.dispatch(connection),
                        Some(Err(error)) => tracing::debug!(%error, "an accepted connection could not be handed over"),
                        None => break,
                    },
                }
            }
        }
        admission.close();
        let result = workers.stop_serving().await;
        self.shutdown().await;
        workers.release().await;
        Ok(result?)
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

/// Starts the sweeper of `shared`'s driven runs (`driven`): every
/// [`SWEEP_TICK`] it moves runs whose streams stalled to tasks of their own,
/// and ends runs past their deadline. It stops when the sidecar is dropped.
///
/// # Errors
/// If the thread cannot be started.
fn spawn_sweeper(shared: Weak<Shared>) -> std::io::Result<()> {
    std::thread::Builder::new().name("tether-run-sweeper".into()).spawn(move || {
        loop {
            std::thread::sleep(SWEEP_TICK);
            let Some(shared) = shared.upgrade() else { return };
            shared.driven.sweep(Instant::now(), shared.lifecycle.cancelling());
        }
    })?;
    Ok(())
}
