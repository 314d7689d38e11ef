//! The sidecar client: one bidirectional stream per script run.
//!
//! [`SidecarClient::run`] sends `Start`, hands every `ToolCall` to the
//! [`CallHandler`] (the calls of a batch concurrently), answers each with a
//! `ToolResult`, and returns when `Finished` arrives. Everything the run owns —
//! the stream and the calls in flight — lives inside that future: dropping it
//! drops the stream, and the sidecar ends the script at once.

use crate::error::ClientError;
use crate::handler::{CallHandler, RefusedCall, ScriptCall, ToolOutcome};
use crate::outcome::{HandedOff, RunOutcome};
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use tether_codes::Reason;
use tether_proto::pb::{self, backend_message, sidecar_client, sidecar_message};
use tether_telemetry::TraceContext;
use tether_turn::{OnAwaitingPerson, ToolDef};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Uri};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// The health-check service name whose status is the sidecar's readiness.
const READINESS_SERVICE: &str = "tether.v1.Sidecar";

/// Messages the client may queue to the sidecar before waiting.
const OUTBOUND_BUFFER: usize = 64;

/// How long the client tries to resume a parked run on a sidecar that
/// refuses it as UNAVAILABLE (draining, or still loading).
const RESUME_PATIENCE: Duration = Duration::from_secs(60);

/// HTTP/2 keepalive on the connection to the sidecar: a PING every
/// `interval` (idle or not), and the connection is closed when one is not
/// answered within `timeout`. A run on a connection that stalls (a sidecar
/// host that vanished, a proxy that stopped forwarding) then ends with
/// [`ClientError::Lost`] after at most about `interval + timeout`, instead
/// of waiting for its deadline. The sidecar pings its side too
/// (`--keepalive-interval-seconds`, `docs/operating.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Time between PINGs. Default 30 s.
    pub interval: Duration,
    /// How long a PING may go unanswered. Default 20 s.
    pub timeout: Duration,
}

impl Default for Keepalive {
    fn default() -> Self {
        Keepalive { interval: Duration::from_secs(30), timeout: Duration::from_secs(20) }
    }
}

/// How [`SidecarClient::connect_with`] connects: credentials and keepalive.
/// The default sends no credentials and uses [`Keepalive::default`].
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// How the client proves it may open runs.
    pub auth: ClientAuth,
    /// HTTP/2 keepalive on the connection.
    pub keepalive: Keepalive,
}

/// A connection to a sidecar. Cheap to clone; clones share the connection.
#[derive(Debug, Clone)]
pub struct SidecarClient {
    grpc: sidecar_client::SidecarClient<Channel>,
    /// The sidecar's gRPC health service, on the same connection.
    health: HealthClient<Channel>,
    /// `Bearer <token>`, sent as `authorization` with every call.
    authorization: Option<MetadataValue<Ascii>>,
}

/// How the client proves to a sidecar that it may open runs (see the
/// sidecar's `docs/security.md`). The default sends nothing: right for a
/// Unix socket, where the sidecar checks the client's uid.
#[derive(Clone, Default)]
pub struct ClientAuth {
    /// The sidecar's shared token, sent as `authorization: Bearer <token>`.
    pub token: Option<String>,
    /// mTLS: needs an `https://` address.
    pub tls: Option<ClientTls>,
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAuth")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// The client's side of mTLS, all PEM.
#[derive(Clone)]
pub struct ClientTls {
    /// The CA that signed the sidecar's certificate.
    pub ca_pem: Vec<u8>,
    /// The client's certificate, signed by the CA the sidecar trusts.
    pub cert_pem: Vec<u8>,
    /// The client's private key.
    pub key_pem: Vec<u8>,
    /// The name the sidecar's certificate must carry. Default: the
    /// address's host.
    pub domain: Option<String>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").field("domain", &self.domain).finish_non_exhaustive()
    }
}

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// The backend's id for the run.
    pub run_id: String,
    /// The turn that owns the run.
    pub turn_id: String,
    /// The tool call that started the script; nested ids are `<this>/<n>`.
    pub parent_call_id: String,
    /// The script.
    pub source: String,
    /// The runtime, `"python"` unless the sidecar has others.
    pub language: String,
    /// The value the script reads as `input`.
    pub input: Value,
    /// The tools the script may call (the turn's list as the model sees it,
    /// less what a script may not call).
    pub tools: Vec<ToolDef>,
    /// Limits for this run; unset fields use the sidecar's.
    pub limits: pb::Limits,
    /// The run may park (`docs/parking.md`): while its calls wait, the
    /// sidecar hands back its suspended state and frees its instance, and
    /// the client resumes it on a new stream once the results are in — the
    /// caller sees one run either way ([`RunOutcome::parks`] counts).
    pub may_park: bool,
}

impl RunRequest {
    /// A Python run of `source` with id `run_id`.
    pub fn python(run_id: impl Into<String>, source: impl Into<String>) -> Self {
        RunRequest { run_id: run_id.into(), source: source.into(), language: "python".into(), ..Default::default() }
    }

    fn into_start(self) -> pb::Start {
        pb::Start {
            run_id: self.run_id,
            turn_id: self.turn_id,
            parent_call_id: self.parent_call_id,
            source: self.source,
            language: self.language,
            input_json: self.input.to_string(),
            tools: self
                .tools
                .into_iter()
                .map(|t| pb::ToolSpec {
                    name: t.name().to_owned(),
                    description: t.description().to_owned(),
                    input_schema_json: t.input_schema_json().to_owned(),
                })
                .collect(),
            limits: Some(self.limits),
            may_park: self.may_park,
            resume: None,
        }
    }
}

impl SidecarClient {
    /// Connects to a sidecar at `address`: `http://host:port` for TCP, or
    /// `unix:/path/to/socket`, or `unix-abstract:name` for a Linux abstract
    /// socket (an embedded sidecar's `local_url`), with the default
    /// [`Keepalive`].
    ///
    /// # Errors
    /// If the address is invalid or the sidecar cannot be reached.
    pub async fn connect(address: &str) -> Result<SidecarClient, ClientError> {
        SidecarClient::connect_with(address, &ConnectOptions::default()).await
    }

    /// Connects to a sidecar at `address` with `options`: credentials (a
    /// token and/or mTLS for TCP, `https://host:port` for mTLS) and HTTP/2
    /// keepalive.
    ///
    /// # Errors
    /// If the address or the credentials are invalid, or the sidecar cannot
    /// be reached (a TLS handshake the sidecar refuses fails here).
    pub async fn connect_with(address: &str, options: &ConnectOptions) -> Result<SidecarClient, ClientError> {
        let ConnectOptions { auth, keepalive } = options;
        let authorization = auth
            .token
            .as_deref()
            .map(|token| {
                MetadataValue::try_from(format!("Bearer {}", token.trim()))
                    .map_err(|_| ClientError::Credentials("the token must be printable ASCII".into()))
            })
            .transpose()?;
        let invalid = |reason: String| ClientError::Address { address: address.to_owned(), reason };
        let unreachable = |cause: tonic::transport::Error| ClientError::Connect { address: address.to_owned(), cause };
        let configure = |endpoint: Endpoint| {
            endpoint
                .http2_keep_alive_interval(keepalive.interval)
                .keep_alive_timeout(keepalive.timeout)
                .keep_alive_while_idle(true)
        };
        let channel = if let Some(name) = address.strip_prefix("unix-abstract:") {
            let name = name.to_owned();
            // The URI is unused for a Unix socket; tonic needs one all the same.
            configure(Endpoint::from_static("http://tether.sidecar"))
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let connected = connect_abstract(&name);
                    async move { Ok::<_, std::io::Error>(TokioIo::new(connected?)) }
                }))
                .await
                .map_err(unreachable)?
        } else if let Some(path) = address.strip_prefix("unix:") {
            let path = PathBuf::from(path);
            configure(Endpoint::from_static("http://tether.sidecar"))
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
                }))
                .await
                .map_err(unreachable)?
        } else {
            let mut endpoint =
                configure(Endpoint::from_shared(address.to_owned()).map_err(|e| invalid(e.to_string()))?);
            if let Some(tls) = &auth.tls {
                if !address.starts_with("https://") {
                    return Err(ClientError::Credentials(format!("mTLS needs an `https://` address, not `{address}`")));
                }
                let mut config = ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(&tls.ca_pem))
                    .identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem));
                if let Some(domain) = &tls.domain {
                    config = config.domain_name(domain.clone());
                }
                endpoint = endpoint.tls_config(config).map_err(unreachable)?;
            }
            endpoint.connect().await.map_err(unreachable)?
        };
        Ok(SidecarClient { authorization, ..SidecarClient::from_channel(channel) })
    }

    /// `message` as a request carrying the client's credentials.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(authorization) = &self.authorization {
            request.metadata_mut().insert("authorization", authorization.clone());
        }
        request
    }

    /// A client over an existing channel.
    pub fn from_channel(channel: Channel) -> SidecarClient {
        let health = HealthClient::new(channel.clone());
        let grpc = sidecar_client::SidecarClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        SidecarClient { grpc, health, authorization: None }
    }

    /// Waits until the sidecar admits runs: its gRPC health check for
    /// `tether.v1.Sidecar` reports SERVING (a sidecar that was just started
    /// compiles or loads its runtimes first, and refuses runs meanwhile).
    ///
    /// # Errors
    /// [`ClientError::NotReady`] if it is not SERVING within `timeout` (the
    /// error says what it reported last); a failed health call that is not
    /// UNAVAILABLE (e.g. a refused token) at once.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), ClientError> {
        let give_up = tokio::time::Instant::now() + timeout;
        loop {
            let request = self.request(HealthCheckRequest { service: READINESS_SERVICE.into() });
            let last = match self.health.clone().check(request).await {
                Ok(response) if response.get_ref().status() == ServingStatus::Serving => return Ok(()),
                Ok(response) => format!("{:?}", response.get_ref().status()),
                Err(status) if status.code() == tonic::Code::Unavailable => status.message().to_owned(),
                Err(status) => return Err(status.into()),
            };
            if tokio::time::Instant::now() >= give_up {
                return Err(ClientError::NotReady { waited: timeout, last });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Asks the sidecar for its version, runtimes and limits.
    ///
    /// # Errors
    /// If the call fails.
    pub async fn describe(&self) -> Result<pb::DescribeResponse, ClientError> {
        Ok(self.grpc.clone().describe(self.request(pb::DescribeRequest {})).await?.into_inner())
    }

    /// Runs a script, serving its calls through `handler`, until it ends.
    ///
    /// # Errors
    /// If the sidecar refuses the run, the stream fails, or the sidecar breaks
    /// the protocol. A script that fails is an `Ok` outcome with that status.
    ///
    /// # Cancel safety
    /// Dropping the future drops the stream: the sidecar ends the script, and
    /// calls still being handled are dropped with it.
    pub async fn run(&self, request: RunRequest, handler: &dyn CallHandler) -> Result<RunOutcome, ClientError> {
        self.run_until(request, handler, CancellationToken::new()).await
    }

    /// Like [`run`](Self::run), and when `cancel` fires sends `Cancel` and
    /// waits for the sidecar's `Finished` (status CANCELLED).
    ///
    /// # Errors
    /// As for [`run`](Self::run).
    pub async fn run_until(
        &self,
        request: RunRequest,
        handler: &dyn CallHandler,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, ClientError> {
        // The sidecar's span for the run becomes a child of the caller's span
        // (for a `Turn`, the `run_script` call's): its trace context goes
        // along as request metadata.
        self.drive(request.into_start(), None, handler, cancel).await
    }

    /// Resumes a parked run that was handed off ([`RunOutcome::handed_off`]),
    /// in this process or any other: `start` is the run's `Start`, `resume`
    /// its sealed state and one result per awaited call. Then as
    /// [`run_until`](Self::run_until).
    ///
    /// # Errors
    /// As for [`run`](Self::run); a sidecar that refuses the state ends the
    /// run with status `RESUME_REFUSED` (an `Ok` outcome).
    pub async fn resume_until(
        &self,
        start: pb::Start,
        resume: pb::Resume,
        handler: &dyn CallHandler,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, ClientError> {
        self.drive(start, Some(resume), handler, cancel).await
    }

    /// Runs `start` (resuming it with `resume`) to its end, or to a park
    /// the handler hands off.
    async fn drive(
        &self,
        start: pb::Start,
        mut resume: Option<pb::Resume>,
        handler: &dyn CallHandler,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, ClientError> {
        let trace_context = TraceContext::of(&tracing::Span::current());
        let start = pb::Start { resume: None, ..start };
        // Calls being served; refusals being recorded (these finish even
        // after `Finished`: they are part of the run's record). Both live
        // across a park: a call served while the run is parked answers it
        // on the stream that resumes it.
        let mut in_flight: FuturesUnordered<BoxFuture<'_, pb::ToolResult>> = FuturesUnordered::new();
        let mut recording: FuturesUnordered<BoxFuture<'_, ()>> = FuturesUnordered::new();
        // The results of the batch the script waits on, kept until its next
        // batch: a run that parks may have been sealed before they arrived.
        let mut batch = BatchResults { keep: start.may_park, ..BatchResults::default() };
        // Ids of calls that started waiting for a person, from the handler.
        let (person_tx, mut person_rx) = mpsc::unbounded_channel();
        let mut parks = 0;
        loop {
            let stream = match resume.take() {
                None => self.open_stream(&start, None, &trace_context).await?,
                Some(resume) => self.open_resumed(&start, resume, &trace_context).await?,
            };
            let calls = Calls { handler, person: &person_tx };
            let ends = drive_stream(stream, calls, &cancel, &mut in_flight, &mut recording, &mut batch, &mut person_rx);
            match ends.await? {
                StreamEnd::Finished(finished) => {
                    while recording.next().await.is_some() {}
                    return Ok(RunOutcome { parks, ..RunOutcome::from_finished(*finished) });
                }
                StreamEnd::Parked(parked) => {
                    parks += 1;
                    tracing::debug!(awaiting = ?parked.awaiting, state_bytes = parked.state.len(), "the run parked");
                    let unanswered: Vec<String> =
                        parked.awaiting.iter().filter(|id| !batch.results.contains_key(*id)).cloned().collect();
                    if !unanswered.is_empty() && handler.hand_off(&unanswered) {
                        while recording.next().await.is_some() {}
                        let answered = parked.awaiting.iter().filter_map(|id| batch.results.get(id).cloned()).collect();
                        let handed = HandedOff { start, parked, answered };
                        return Ok(RunOutcome::from_hand_off(handed, parks));
                    }
                    let Some(results) =
                        batch.collect(&parked.awaiting, &mut in_flight, &mut recording, &cancel).await?
                    else {
                        while recording.next().await.is_some() {}
                        return Ok(RunOutcome::cancelled_while_parked(parked, parks));
                    };
                    resume = Some(pb::Resume { state: parked.state, results });
                }
            }
        }
    }

    /// Opens the stream that resumes a parked run. A sidecar that is
    /// draining (it may be the one that parked the run, for a rolling
    /// restart) refuses it with UNAVAILABLE: the client tries again, with
    /// back-off, for [`RESUME_PATIENCE`] — behind a load balancer, a new
    /// connection reaches another sidecar.
    async fn open_resumed(
        &self,
        start: &pb::Start,
        resume: pb::Resume,
        trace_context: &TraceContext,
    ) -> Result<OpenStream, ClientError> {
        let give_up = tokio::time::Instant::now() + RESUME_PATIENCE;
        let mut pause = Duration::from_millis(50);
        loop {
            match self.open_stream(start, Some(resume.clone()), trace_context).await {
                Err(ClientError::Status(status))
                    if status.code() == tonic::Code::Unavailable && tokio::time::Instant::now() + pause < give_up =>
                {
                    tracing::info!(reason = %status.message(), "no sidecar takes the parked run yet; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                opened => return opened,
            }
        }
    }

    /// Opens a run stream and sends `start` (with `resume`, to resume a parked run).
    async fn open_stream(
        &self,
        start: &pb::Start,
        resume: Option<pb::Resume>,
        trace_context: &TraceContext,
    ) -> Result<OpenStream, ClientError> {
        let (outbound, receiver) = mpsc::channel(OUTBOUND_BUFFER);
        let start = pb::Start { resume, ..start.clone() };
        let start = pb::BackendMessage { kind: Some(backend_message::Kind::Start(start)) };
        outbound.send(start).await.map_err(|_| ClientError::Protocol("the outbound queue closed".into()))?;
        let mut run = self.request(ReceiverStream::new(receiver));
        trace_context.inject(run.metadata_mut());
        let inbound = self.grpc.clone().run(run).await?.into_inner();
        Ok(OpenStream { outbound, inbound })
    }
}

/// One run stream: the backend's side and the sidecar's.
struct OpenStream {
    outbound: mpsc::Sender<pb::BackendMessage>,
    inbound: tonic::Streaming<pb::SidecarMessage>,
}

/// How a run stream ended.
enum StreamEnd {
    /// The run is over.
    Finished(Box<pb::Finished>),
    /// The run parked; resume it with the results of `awaiting`.
    Parked(pb::Parked),
}

/// Who serves a run's calls, and where they say they wait for a person.
#[derive(Clone, Copy)]
struct Calls<'h, 'p> {
    handler: &'h dyn CallHandler,
    person: &'p mpsc::UnboundedSender<String>,
}

/// The results served for the batch a script waits on, by call id, and the
/// calls still being served.
#[derive(Default)]
struct BatchResults {
    /// Results are kept only for a run that may park.
    keep: bool,
    batch: u32,
    results: std::collections::HashMap<String, pb::ToolResult>,
    serving: std::collections::HashSet<String>,
}

impl BatchResults {
    /// Call `id` of `batch` came: results of earlier batches are no longer needed.
    fn call_of(&mut self, batch: u32, id: &str) {
        if batch != self.batch {
            self.batch = batch;
            self.results.clear();
        }
        self.serving.insert(id.to_owned());
    }

    fn served(&mut self, result: &pb::ToolResult) {
        self.serving.remove(&result.id);
        if self.keep {
            self.results.insert(result.id.clone(), result.clone());
        }
    }

    /// The results of every call in `awaiting`, waiting for those still
    /// being served (a parked run waits the same: only its state is gone);
    /// `None` when `cancel` fires first.
    async fn collect(
        &mut self,
        awaiting: &[String],
        in_flight: &mut FuturesUnordered<BoxFuture<'_, pb::ToolResult>>,
        recording: &mut FuturesUnordered<BoxFuture<'_, ()>>,
        cancel: &CancellationToken,
    ) -> Result<Option<Vec<pb::ToolResult>>, ClientError> {
        while awaiting.iter().any(|id| !self.results.contains_key(id)) {
            tokio::select! {
                // Refusals go on being recorded while the run is parked.
                Some(()) = recording.next() => {}
                served = in_flight.next() => match served {
                    Some(result) => self.served(&result),
                    None => {
                        let missing: Vec<_> = awaiting.iter().filter(|id| !self.results.contains_key(*id)).collect();
                        return Err(ClientError::Protocol(format!(
                            "the sidecar parked the run waiting on {missing:?}, calls it never sent"
                        )));
                    }
                },
                () = cancel.cancelled() => return Ok(None),
            }
        }
        Ok(Some(awaiting.iter().filter_map(|id| self.results.get(id).cloned()).collect()))
    }
}

/// Serves one run stream until it ends with `Finished` or `Parked`.
async fn drive_stream<'h>(
    stream: OpenStream,
    calls: Calls<'h, '_>,
    cancel: &CancellationToken,
    in_flight: &mut FuturesUnordered<BoxFuture<'h, pb::ToolResult>>,
    recording: &mut FuturesUnordered<BoxFuture<'h, ()>>,
    batch: &mut BatchResults,
    awaiting_person: &mut mpsc::UnboundedReceiver<String>,
) -> Result<StreamEnd, ClientError> {
    let OpenStream { outbound, mut inbound } = stream;
    let handler = calls.handler;
    let mut cancel_sent = false;
    loop {
        tokio::select! {
            // Biased: a refusal already received is recorded (its
            // first, synchronous part) before later calls start, so
            // the run's records follow the script's order.
            biased;
            Some(()) = recording.next() => {}
            Some(id) = awaiting_person.recv() => {
                // Only for a call still being served: the sidecar refuses
                // the mark for one it has its answer to.
                if batch.serving.contains(&id) {
                    let awaiting = pb::AwaitingPerson { id };
                    let _ = outbound.send(pb::BackendMessage { kind: Some(backend_message::Kind::AwaitingPerson(awaiting)) }).await;
                }
            }
            Some(result) = in_flight.next() => {
                batch.served(&result);
                let message = pb::BackendMessage { kind: Some(backend_message::Kind::ToolResult(result)) };
                // A closed queue means the stream is over; `Finished` or an error follows.
                let _ = outbound.send(message).await;
            }
            message = inbound.message() => {
                let message = message.map_err(|status| ClientError::Lost {
                    reason: format!("{} ({:?})", status.message(), status.code()),
                })?;
                let Some(message) = message else {
                    return Err(ClientError::Lost { reason: "the stream ended without `Finished`".into() });
                };
                match message.kind {
                    Some(sidecar_message::Kind::ToolCall(call)) => {
                        batch.call_of(call.batch, &call.id);
                        let person = calls.person.clone();
                        in_flight.push(Box::pin(serve(handler, call, person)));
                    }
                    Some(sidecar_message::Kind::CallRefused(refused)) => {
                        recording.push(Box::pin(record_refusal(handler, refused)));
                    }
                    Some(sidecar_message::Kind::Output(output)) => {
                        handler.output(output.stream(), &output.data);
                    }
                    Some(sidecar_message::Kind::Finished(finished)) => return Ok(StreamEnd::Finished(Box::new(finished))),
                    Some(sidecar_message::Kind::Parked(parked)) => return Ok(StreamEnd::Parked(parked)),
                    None => return Err(ClientError::Protocol("a sidecar message with no content".into())),
                }
            }
            () = cancel.cancelled(), if !cancel_sent => {
                cancel_sent = true;
                let message = pb::BackendMessage { kind: Some(backend_message::Kind::Cancel(pb::Cancel { reason: "cancelled by the backend".into() })) };
                let _ = outbound.send(message).await;
            }
        }
    }
}

/// Connects to the abstract Unix socket `name` (Linux; no file on disk). A
/// connect to a listening Unix socket completes at once (it waits only while
/// the listener's backlog is full), so the blocking call is kept.
fn connect_abstract(name: &str) -> std::io::Result<tokio::net::UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let stream = std::os::unix::net::UnixStream::connect_addr(&address)?;
    stream.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(stream)
}

/// Serves one call. The handler makes its own span for the call (the turn's
/// is a child of the sidecar's call span, whose context the call carries).
async fn serve(handler: &dyn CallHandler, call: pb::ToolCall, person: mpsc::UnboundedSender<String>) -> pb::ToolResult {
    let outcome = match serde_json::from_str(&call.args_json) {
        Ok(args) => {
            let script_call = ScriptCall {
                id: call.id.clone(),
                name: call.name,
                args,
                batch: call.batch,
                batch_size: call.batch_size,
                max_result_bytes: call.max_result_bytes,
                trace_context: TraceContext::from_headers(call.trace_context),
                on_awaiting_person: {
                    let id = call.id.clone();
                    // A closed channel means the run is over: nothing to tell.
                    OnAwaitingPerson::new(move || drop(person.send(id.clone())))
                },
            };
            handler.call(script_call).await
        }
        Err(error) => {
            let reason = Reason::ArgumentsNotJson { error: error.to_string() };
            tracing::warn!(call_id = %call.id, tool = %call.name, "the sidecar sent arguments that are not JSON");
            ToolOutcome::failed(reason.code().as_str(), reason.message())
        }
    };
    outcome.into_proto(call.id)
}

async fn record_refusal(handler: &dyn CallHandler, refused: pb::CallRefused) {
    let failure = refused.failure.unwrap_or_default();
    let call = RefusedCall {
        id: refused.id,
        name: refused.name,
        args_json: refused.args_json,
        args_truncated: refused.args_truncated,
        code: failure.code,
        message: failure.message,
        trace_context: TraceContext::from_headers(refused.trace_context),
    };
    handler.refused(call).await;
}
