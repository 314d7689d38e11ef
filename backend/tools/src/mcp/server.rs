//! One MCP server's connection and its lifecycle.
//!
//! Ownership: the [`ToolSet`](crate::ToolSet) owns each
//! [`McpServer`] (an `Arc`); each of the server's tools holds a clone, so the
//! server lives as long as the set or any turn that still lists its tools.
//! The connection (`rmcp`'s running service, which owns the spawned
//! process or the HTTP session) lives in the server's state. It ends:
//! - on [`McpServer::close`] (the set's `shutdown`): closed, and a stdio
//!   server's process ended (stdin closed, then SIGTERM, then SIGKILL to its
//!   process group);
//! - on drop: rmcp's drop guard cancels the service, which ends the process
//!   the same way (within the runtime);
//! - when the server dies: the next call notices and starts it again once;
//!   if that fails the call gets a failure value saying the call was not made.
//!
//! A stdio server's stderr is read by a task the connection owns (aborted
//! with it): each line is logged at debug level and its tail kept, with the
//! process's exit status once it is reaped, for the message of a call that
//! finds the server gone ([`Leavings`]).

use super::ServerConfig;
use super::Transport;
use super::client::{Client, ProgressSink};
use super::exit::RecordsExit;
use crate::command::STDERR_TAIL_BYTES;
use crate::text::Tail;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ServiceError, ServiceExt};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::sync::watch;

/// How long [`McpServer::close`] waits for a server to end cleanly.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// How long a call that lost its server waits for the process's exit status
/// to be known, so that its message can say it.
const EXIT_STATUS_WAIT: Duration = Duration::from_secs(2);

/// A server's state as `tether tools` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    /// The server's name (`[mcp.<name>]`).
    pub name: String,
    /// How it is reached: the command, or the URL.
    pub transport: String,
    /// Why it is not running, if it is not.
    pub error: Option<String>,
}

/// How a call to the server came out when it produced no result.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The server is down and could not be (re)started: the call was not made.
    Unavailable(String),
    /// The server answered with a JSON-RPC error (e.g. unknown tool, bad arguments).
    Rejected(String),
    /// The connection ended while the call was on its way: it may have run.
    Lost(String),
}

struct Connection {
    service: RunningService<RoleClient, Client>,
    peer: Peer<RoleClient>,
    /// Counts (re)starts, so a failed call forgets only the connection it used.
    generation: u64,
    left: Option<Leavings>,
    _stderr_reader: Option<AbortOnDrop>,
}

/// What a call needs of the live connection, taken out of the lock.
struct Reached {
    peer: Peer<RoleClient>,
    client: Client,
    generation: u64,
    left: Option<Leavings>,
}

impl Connection {
    fn reached(&self) -> Reached {
        Reached {
            peer: self.peer.clone(),
            client: self.service.service().clone(),
            generation: self.generation,
            left: self.left.clone(),
        }
    }
}

/// What a stdio server leaves to say why it stopped: the end of its stderr
/// and, once its process is reaped, how it exited.
#[derive(Clone)]
struct Leavings {
    tail: Arc<Mutex<Tail>>,
    /// Whether stderr was read to its end.
    read_all: watch::Receiver<bool>,
    exit: watch::Receiver<Option<String>>,
}

impl Leavings {
    fn tail(&self) -> String {
        self.tail.lock().unwrap_or_else(|p| p.into_inner()).text()
    }

    /// `; it exited with status 3; its stderr ends: …` (the parts known),
    /// waiting up to `wait` for the exit status and the end of stderr.
    async fn describe(&self, wait: Duration) -> String {
        let (mut exit, mut read_all) = (self.exit.clone(), self.read_all.clone());
        // The `Ref`s the waits give are dropped at once: they are not `Send`.
        let exited = async { exit.wait_for(Option::is_some).await.is_ok() };
        let drained = async { read_all.wait_for(|done| *done).await.is_ok() };
        let settled = async { tokio::join!(exited, drained) };
        let _ = tokio::time::timeout(wait, settled).await;
        let status = self.exit.borrow().clone();
        let mut detail = String::new();
        if let Some(status) = status {
            detail.push_str(&format!("; it {status}"));
        }
        let tail = self.tail();
        if !tail.is_empty() {
            detail.push_str(&format!("; its stderr ends: {tail}"));
        }
        detail
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Default)]
struct State {
    connection: Option<Connection>,
    generations: u64,
    /// Why the server is not running, once it stopped or failed to start.
    error: Option<String>,
    closed: bool,
}

/// One configured MCP server: its connection, started again when it died.
pub(crate) struct McpServer {
    pub(crate) config: ServerConfig,
    http: Option<reqwest::Client>,
    /// Held only to look at or replace the connection — across a (re)start,
    /// so two calls never start the server twice — never across a call.
    state: tokio::sync::Mutex<State>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer").field("name", &self.config.name).finish_non_exhaustive()
    }
}

/// How often a broken response stream is resumed before the call fails:
/// rmcp's default retries forever, so a server that died mid-call would hold
/// the call until its time limit. Three tries within two seconds ride out a
/// blip; a dead server fails the call as lost.
fn reconnect_policy() -> ExponentialBackoff {
    let mut policy = ExponentialBackoff::default();
    policy.max_times = Some(3);
    policy.base_duration = Duration::from_millis(250);
    policy.max_delay = Some(Duration::from_secs(1));
    policy
}

impl McpServer {
    /// A server not started yet; `http` is the client for a streamable HTTP one.
    pub(crate) fn new(config: ServerConfig, http: Option<reqwest::Client>) -> McpServer {
        McpServer { config, http, state: tokio::sync::Mutex::new(State::default()) }
    }

    /// Starts the server and lists its tools. On failure the server stays
    /// down (its tools' calls try again) and the error says why.
    ///
    /// # Errors
    /// Why the server could not be started or would not list its tools.
    pub(crate) async fn start(&self) -> Result<Vec<rmcp::model::Tool>, String> {
        let mut state = self.state.lock().await;
        let peer = self.ensure(&mut state).await?.peer;
        let listed = tokio::time::timeout(self.config.startup_timeout, peer.list_all_tools()).await;
        match listed {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(e)) => Err(self.forget_locked(&mut state, format!("it would not list its tools: {e}"))),
            Err(_) => Err(self.forget_locked(
                &mut state,
                format!("it did not list its tools within `{:?}` (startup_timeout)", self.config.startup_timeout),
            )),
        }
    }

    /// The server's state for a listing.
    pub(crate) async fn status(&self) -> ServerStatus {
        let state = self.state.lock().await;
        let alive = state.connection.as_ref().is_some_and(|c| !c.peer.is_transport_closed());
        ServerStatus {
            name: self.config.name.clone(),
            transport: match &self.config.transport {
                Transport::Stdio(argv) => format!("stdio: {}", argv.argv.join(" ")),
                Transport::Http { url, .. } => format!("streamable HTTP: {url}"),
            },
            error: if alive { None } else { Some(state.error.clone().unwrap_or_else(|| "not running".into())) },
        }
    }

    /// Calls the server's tool `name` with `args` (a JSON object); the
    /// progress the server reports for it goes to `progress` while it runs.
    ///
    /// # Cancel safety
    /// Dropping the future cancels the request (rmcp sends
    /// `notifications/cancelled`); the server may still have acted.
    pub(crate) async fn call(
        &self,
        name: &str,
        args: Value,
        progress: ProgressSink,
    ) -> Result<CallToolResult, CallError> {
        let Reached { peer, client, generation, left } = {
            let mut state = self.state.lock().await;
            self.ensure(&mut state).await.map_err(CallError::Unavailable)?
        };
        let mut params = CallToolRequestParams::new(name.to_owned());
        if let Value::Object(map) = args {
            params = params.with_arguments(map);
        }
        match client.call_tool(&peer, params, progress).await {
            Ok(result) => Ok(result),
            Err(ServiceError::McpError(error)) => Err(CallError::Rejected(error.message.into_owned())),
            Err(error) => {
                let mut detail = format!("{error}");
                if let Some(left) = &left {
                    detail.push_str(&left.describe(EXIT_STATUS_WAIT).await);
                }
                tracing::warn!(server = %self.config.name, tool = name, %detail, "the MCP server's connection ended during a call");
                let mut state = self.state.lock().await;
                if state.connection.as_ref().is_some_and(|c| c.generation == generation) {
                    self.forget_locked(&mut state, format!("it stopped during a call: {detail}"));
                }
                Err(CallError::Lost(detail))
            }
        }
    }

    /// Closes the connection and waits (a bounded time) for it to end; later
    /// calls are refused as not made.
    pub(crate) async fn close(&self) {
        let mut state = self.state.lock().await;
        state.closed = true;
        state.error = Some("the tool set was shut down".into());
        if let Some(mut connection) = state.connection.take() {
            match connection.service.close_with_timeout(CLOSE_WAIT).await {
                Ok(Some(_)) => tracing::debug!(server = %self.config.name, "MCP server closed"),
                Ok(None) => {
                    tracing::warn!(server = %self.config.name, "the MCP server did not close in time; it is killed")
                }
                Err(error) => {
                    tracing::warn!(server = %self.config.name, %error, "the MCP server's task failed while closing")
                }
            }
        }
    }

    /// The live connection, started (again) if there is none.
    async fn ensure(&self, state: &mut State) -> Result<Reached, String> {
        if state.closed {
            return Err("the tool set was shut down".into());
        }
        if let Some(connection) = &state.connection {
            if !connection.peer.is_transport_closed() {
                return Ok(connection.reached());
            }
            let left = match &connection.left {
                Some(left) => left.describe(Duration::ZERO).await,
                None => String::new(),
            };
            self.forget_locked(state, format!("it stopped{left}"));
        }
        let started = tokio::time::timeout(self.config.startup_timeout, self.connect(state.generations + 1)).await;
        match started {
            Ok(Ok(connection)) => {
                if state.generations > 0 {
                    tracing::info!(server = %self.config.name, "MCP server started again");
                }
                state.generations = connection.generation;
                let handle = connection.reached();
                state.connection = Some(connection);
                state.error = None;
                Ok(handle)
            }
            Ok(Err(error)) => {
                state.generations += 1;
                Err(self.note(state, error))
            }
            Err(_) => {
                state.generations += 1;
                Err(self.note(
                    state,
                    format!("it did not start within `{:?}` (startup_timeout)", self.config.startup_timeout),
                ))
            }
        }
    }

    fn note(&self, state: &mut State, error: String) -> String {
        tracing::warn!(server = %self.config.name, %error, "MCP server not available");
        state.error = Some(error.clone());
        error
    }

    /// Drops the connection (ending its process) and notes why.
    fn forget_locked(&self, state: &mut State, why: String) -> String {
        state.connection = None;
        self.note(state, why)
    }

    async fn connect(&self, generation: u64) -> Result<Connection, String> {
        match &self.config.transport {
            Transport::Stdio(argv) => {
                let (exit_sender, exit) = watch::channel(None);
                let mut command = argv.command();
                command.wrap(RecordsExit(exit_sender));
                let (transport, stderr) = TokioChildProcess::builder(command)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot start `{}`: {e}", argv.argv[0]))?;
                let tail = Arc::new(Mutex::new(Tail::new(STDERR_TAIL_BYTES)));
                let (read_all_sender, read_all) = watch::channel(false);
                let reader = stderr.map(|stderr| {
                    let (tail, server) = (tail.clone(), self.config.name.clone());
                    AbortOnDrop(tokio::spawn(async move {
                        let mut lines = tokio::io::BufReader::new(stderr).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            tracing::debug!(server = %server, "stderr: {line}");
                            let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                            tail.push(line.as_bytes());
                            tail.push(b"\n");
                        }
                        read_all_sender.send_replace(true);
                    }))
                });
                let left = Leavings { tail, read_all, exit };
                let service = match Client::new().serve(transport).await {
                    Ok(service) => service,
                    Err(e) => {
                        return Err(format!("it did not initialize: {e}{}", left.describe(EXIT_STATUS_WAIT).await));
                    }
                };
                let peer = service.peer().clone();
                Ok(Connection { service, peer, generation, left: Some(left), _stderr_reader: reader })
            }
            Transport::Http { url, headers } => {
                let Some(client) = self.http.clone() else {
                    return Err("no HTTP client was set up for it".into());
                };
                let mut config =
                    StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(headers.clone());
                config.retry_config = Arc::new(reconnect_policy());
                let transport = StreamableHttpClientTransport::with_client(client, config);
                let service =
                    Client::new().serve(transport).await.map_err(|e| format!("it did not initialize: {e}"))?;
                let peer = service.peer().clone();
                Ok(Connection { service, peer, generation, left: None, _stderr_reader: None })
            }
        }
    }
}
