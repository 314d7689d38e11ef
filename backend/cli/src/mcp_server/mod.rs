//! `tether mcp`: Tether as an MCP server, so an MCP client (Claude Desktop,
//! Claude Code, Cursor, VS Code…) gets code mode over the configured tools —
//! `run_script`, whose description carries the tools' typed stubs, with
//! `search_tools` and `describe_tools` (and, with `[serve] direct_tools`,
//! the tools themselves) — while every call, a script's or a direct one, is
//! checked, approved and audited by the session's turn
//! (`docs/mcp-server.md`).
//!
//! Who owns what:
//! - this module: the command — it starts the [`Backend`] (tools, sidecar,
//!   audit store) once, serves sessions over it, and ends it; the
//!   `Shared` state every session reads
//! - `session`: one MCP session is one turn — rmcp's handler, listing and
//!   calling through `Turn::execute`, cancellation and disconnection
//! - `approval`: an approval asked through the client (elicitation), or
//!   the configured fallback
//! - `progress`: the turn's events as `notifications/progress`
//! - `stdio`: stdio with every bad line answered by a JSON-RPC error
//! - `http`: streamable HTTP with a bearer token, or loopback only
//!
//! Considered and not done: one turn per call (a session's caps, repeat
//! refusal and audit would be cut in pieces), and a second execution path
//! for direct calls (they go through the same turn as a script's).

mod approval;
mod http;
mod progress;
mod session;
mod stdio;

pub use http::ListenError;

use crate::turn::TurnSetup;
use crate::wiring::{Approval, Backend, BackendArgs, Source};
use anyhow::Context as _;
use rmcp::ServiceExt as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tether_backend::tools::ApprovalFallback;
use tether_backend::turn::{ModelOffer, Turn};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The largest request a client may send, by default: 4 MiB (a script's
/// source is held to 256 KiB by the sidecar, a call's arguments to 1 MiB).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 << 20;

/// How long the server waits, once a client went away, for its calls to
/// end and be recorded (they are cancelled at once; this bounds a tool that
/// ignores it).
const DRAIN_WAIT: Duration = Duration::from_secs(10);

/// How `tether mcp` serves, from its flags (each one given overrides
/// `[serve]`).
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// `--listen`: streamable HTTP on this address instead of stdio.
    pub listen: Option<SocketAddr>,
    /// `--token-file`: the bearer token HTTP clients must send.
    pub token_file: Option<PathBuf>,
    /// `--direct-tools`: serve the configured tools too.
    pub direct_tools: bool,
    /// `--approval-fallback`: who decides when a client cannot elicit.
    pub fallback: Option<ApprovalFallback>,
    /// `--max-request-bytes` (default [`DEFAULT_MAX_REQUEST_BYTES`]).
    pub max_request_bytes: Option<usize>,
}

/// What every session of one server shares.
pub(crate) struct Shared {
    /// The tools, the sidecar, the audit store.
    backend: Backend,
    /// The turns' setup: the offer chosen for MCP clients; each session
    /// sets its own approver and events.
    setup: TurnSetup,
    /// Who decides when a client cannot elicit.
    fallback: ApprovalFallback,
    /// Cancelled when the (stdio) client went away: its calls end at once.
    disconnect: CancellationToken,
    /// The calls in flight, waited for before the server ends.
    tracker: TaskTracker,
    /// Every session's turn, for the summary at the end.
    sessions: Mutex<Vec<Turn>>,
}

/// Serves MCP over stdio (or HTTP with `--listen`) until the client goes
/// away (stdin ends) or Ctrl-C / SIGTERM, over `source`'s tools.
///
/// # Errors
/// If the backend cannot start (tools, sidecar, audit store), the token
/// file cannot be read, or the HTTP address cannot be served.
pub async fn serve(flags: &BackendArgs, source: Source, options: ServeOptions) -> anyhow::Result<()> {
    let serve = source.config.serve;
    let fallback = options.fallback.unwrap_or(serve.approval_fallback);
    let direct_tools = options.direct_tools || serve.direct_tools;
    let token = match &options.token_file {
        Some(path) => Some(tether_sidecar::BearerToken::from_file(path)?),
        None => None,
    };
    let max_request_bytes = options.max_request_bytes.unwrap_or(DEFAULT_MAX_REQUEST_BYTES);
    // The backend's own approver is never asked (each session has the
    // client's); its choice makes a `park` fallback's runs durable.
    let approval = match fallback {
        ApprovalFallback::Deny => Approval::Deny,
        ApprovalFallback::AllowAll => Approval::AllowAll,
        ApprovalFallback::Park => Approval::Later,
    };
    let flags = BackendArgs { approval: Some(approval), ..flags.clone() };
    let backend = Backend::start(&flags, source, approval).await?;
    let mut setup = backend.setup.clone();
    setup.turn.limits.model_offer = match setup.turn.limits.model_offer {
        ModelOffer::Search => ModelOffer::Search,
        _ if direct_tools => ModelOffer::Every,
        _ => ModelOffer::ScriptOnly,
    };
    let shared = Arc::new(Shared {
        backend,
        setup,
        fallback,
        disconnect: CancellationToken::new(),
        tracker: TaskTracker::new(),
        sessions: Mutex::new(Vec::new()),
    });
    let served = match options.listen {
        Some(address) => serve_http(&shared, address, token, max_request_bytes).await,
        None => serve_stdio(&shared, max_request_bytes).await,
    };
    // Whatever ended the server, its calls end now, each recorded.
    shared.disconnect.cancel();
    shared.tracker.close();
    if tokio::time::timeout(DRAIN_WAIT, shared.tracker.wait()).await.is_err() {
        tracing::warn!("calls still running {DRAIN_WAIT:?} after the client went away");
    }
    let turns = shared.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    for turn in &turns {
        // Reading the log back waits for its rows to be written.
        let rows = turn.audit_log().await.map(|rows| rows.len()).unwrap_or_default();
        eprintln!("tether mcp: turn {} ended with {rows} audit rows", turn.id());
    }
    drop(turns);
    match Arc::try_unwrap(shared) {
        Ok(shared) => shared.backend.stop_reporting(false).await?,
        // An HTTP session rmcp has not dropped yet: the process ends anyway.
        Err(_) => tracing::warn!("a session outlived the server; its tools end with the process"),
    }
    served
}

/// One session on stdin and stdout, until stdin ends or a signal.
async fn serve_stdio(shared: &Arc<Shared>, max_request_bytes: usize) -> anyhow::Result<()> {
    let transport =
        stdio::GuardedStdio::new(tokio::io::stdin(), tokio::io::stdout(), max_request_bytes, shared.disconnect.clone());
    let session = session::Session::new(shared.clone());
    let running = session.serve(transport).await.context("the MCP client's initialize failed")?;
    let ended = tokio::select! {
        quit = running.waiting() => quit.map(|reason| format!("{reason:?}")).unwrap_or_else(|error| error.to_string()),
        signal = crate::interrupt::signal() => {
            shared.disconnect.cancel();
            signal.to_owned()
        }
    };
    tracing::info!(%ended, "the MCP session ended");
    Ok(())
}

/// Sessions over streamable HTTP, until a signal.
async fn serve_http(
    shared: &Arc<Shared>,
    address: SocketAddr,
    token: Option<tether_sidecar::BearerToken>,
    max_request_bytes: usize,
) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let server = http::serve(shared.clone(), address, token, max_request_bytes, stop.clone());
    tokio::pin!(server);
    tokio::select! {
        served = &mut server => served?,
        signal = crate::interrupt::signal() => {
            tracing::info!(%signal, "stopping the MCP HTTP server");
            stop.cancel();
            shared.disconnect.cancel();
            server.await?;
        }
    }
    Ok(())
}
