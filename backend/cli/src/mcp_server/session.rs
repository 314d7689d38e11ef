//! One MCP session is one turn. [`Session`] is rmcp's server handler for a
//! client: `tools/list` answers what the session's turn offers its model,
//! and `tools/call` runs the call through that turn's one execution path
//! (`Turn::execute`, origin model) — the checks, repeat refusal, caps,
//! depth, approval and audit a direct call gets anywhere else. The turn is
//! opened (its id claimed in the audit store) at the session's first
//! request, through the CLI's [`TurnSetup::open`], with the session's own
//! approver (the client, [`ClientApprover`]) and event sink (progress).
//!
//! A call ends early two ways: the client cancels its request
//! (`notifications/cancelled`), and the call's future is dropped — the
//! script's stream with it, so the sidecar ends the script at once; the
//! call is recorded `cancelled` by its caller, and its script's calls still
//! in flight as stopped with it; or the client goes
//! away (stdin closed), and the whole turn is cancelled: each call ends as
//! `cancelled`, recorded.

use super::Shared;
use super::approval::ClientApprover;
use super::progress::SessionEvents;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool as McpTool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tether_backend::turn::{
    CallOrigin, CallRequest, CallResult, ListedTool, Turn, describe_tools_tool, search_tools_tool,
};
use tokio::sync::OnceCell;
use tracing::Instrument as _;

/// The protocol versions served: those with an `initialize` handshake, in
/// which a server may ask its client (elicitation) in the middle of a call.
/// `2026-07-28` answers that with a result that ends the request
/// (`InputRequiredResult`), which a script waiting on its approval does not
/// fit yet; a client that offers it falls back to `2025-11-25`.
const SERVED_UP_TO: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// One client's session: its turn, once opened, and its calls.
pub(crate) struct Session {
    shared: Arc<Shared>,
    turn: OnceCell<Turn>,
    /// The session's span (`mcp_session`, its turn and client), made when
    /// the turn opens; each call's span is its child.
    span: std::sync::OnceLock<tracing::Span>,
    events: Arc<SessionEvents>,
    calls: AtomicU64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("turn", &self.turn.get().map(Turn::id)).finish_non_exhaustive()
    }
}

impl Session {
    /// A session over `shared`'s tools; its turn opens at its first request.
    pub(crate) fn new(shared: Arc<Shared>) -> Session {
        Session {
            shared,
            turn: OnceCell::new(),
            span: std::sync::OnceLock::new(),
            events: Arc::default(),
            calls: AtomicU64::new(0),
        }
    }

    /// The session's turn, opened at the first request that needs it.
    async fn turn(&self, peer: &Peer<RoleServer>) -> Result<Turn, McpError> {
        let turn = self
            .turn
            .get_or_try_init(|| async {
                let shared = &self.shared;
                let mut setup = shared.setup.clone();
                setup.approver = Arc::new(ClientApprover::new(peer.clone(), shared.fallback));
                setup.events = self.events.clone();
                let own = [search_tools_tool(), describe_tools_tool()].into_iter().collect::<Result<Vec<_>, _>>();
                let own = own.map_err(|error| internal("cannot make search_tools", &error))?;
                let id = crate::wiring::turn_id("mcp");
                let turn = setup
                    .open(&id, &shared.backend.tools, &shared.backend.script, own)
                    .await
                    .map_err(|error| internal("cannot open the session's turn", &error))?;
                let client = peer.peer_info().map(|info| info.client_info.name.clone()).unwrap_or_default();
                let span = tracing::info_span!(parent: None, "mcp_session", turn_id = %id, %client);
                span.in_scope(|| tracing::info!("session opened"));
                let _ = self.span.set(span);
                eprintln!("tether mcp: client `{client}`'s session is turn {id} ({})", shared.backend.audit_hint(&id));
                shared.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(turn.clone());
                Ok::<Turn, McpError>(turn)
            })
            .await?;
        Ok(turn.clone())
    }

    /// The session turn's tools as the client gets them: those the turn
    /// offers its model ([`Turn::tools_for_model`], per the offer
    /// [`Shared`] chose), deferred tools left out.
    fn served(turn: &Turn) -> Vec<McpTool> {
        turn.tools_for_model()
            .into_iter()
            .filter_map(|listed| match listed {
                ListedTool::Full(def) => {
                    let schema = match def.input_schema() {
                        Value::Object(schema) => schema.clone(),
                        _ => serde_json::Map::new(),
                    };
                    Some(McpTool::new(def.name().to_owned(), def.description().to_owned(), Arc::new(schema)))
                }
                ListedTool::NameOnly(_) => None,
            })
            .collect()
    }

    async fn call(
        &self,
        turn: Turn,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let _in_flight = self.shared.tracker.token();
        let name = request.name.to_string();
        let call_id = format!("call_{}", self.calls.fetch_add(1, Ordering::Relaxed) + 1);
        let args = Value::Object(request.arguments.unwrap_or_default());
        let token = context.meta.get_progress_token();
        let mut watch = self.events.watch(&call_id);
        // `None`: the client cancelled the request.
        let ended = {
            // The client's cancellation of this request is this call's alone.
            let request = CallRequest::new(&call_id, &name, args).cancelled_by(context.ct.clone());
            let execute = turn.execute(request, CallOrigin::Model);
            tokio::pin!(execute);
            tokio::select! {
                biased;
                () = self.shared.disconnect.cancelled() => {
                    // The client went away: the turn ends, every call of it
                    // as `cancelled`, recorded.
                    turn.cancel();
                    Some(execute.await)
                }
                () = context.ct.cancelled() => None,
                result = &mut execute => Some(result),
                never = watch.forward(&context.peer, token.as_ref()) => match never {},
            }
        };
        watch.finish(&context.peer, token.as_ref()).await;
        match ended {
            None => {
                tracing::info!(%call_id, "cancelled by the client");
                CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(format!(
                    "call {call_id} was cancelled by the client; `tether audit --turn {}` shows it",
                    turn.id()
                ))]))
            }
            Some(result) => CallToolResponse::Complete(answer(&turn, &call_id, &result)),
        }
    }
}

/// What the client gets for a call: the result as a model gets it
/// (`{"ok", "value"}` or `{"ok": false, "error": {"code", "message"}}`),
/// with the turn and call ids to read it back by (`tether audit --turn`).
fn answer(turn: &Turn, call_id: &str, result: &CallResult) -> CallToolResult {
    let mut value = result.to_model_value();
    let ok = value.get("ok") == Some(&Value::Bool(true));
    if let Value::Object(fields) = &mut value {
        fields.insert("turn_id".to_owned(), Value::String(turn.id().to_owned()));
        fields.insert("call_id".to_owned(), Value::String(call_id.to_owned()));
    }
    let content = vec![ContentBlock::text(value.to_string())];
    if ok { CallToolResult::success(content) } else { CallToolResult::error(content) }
}

/// A host fault, logged whole; the client gets `what`.
fn internal(what: &str, error: &dyn std::fmt::Display) -> McpError {
    tracing::error!(%error, "{what}");
    McpError::internal_error(format!("{what}: {error}"), None)
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_protocol_version(SERVED_UP_TO)
            .with_server_info(Implementation::new("tether", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Write one Python script with `run_script` instead of calling tools one at a time: its \
                 description lists the tools a script calls as typed functions (`search_tools` and \
                 `describe_tools` find and describe them). Every call the script makes is checked, approved \
                 and audited like a direct one.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&SERVED_UP_TO))
    }

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
        Err(McpError::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: `{}`; this server serves tools (`tools/list`, `tools/call`)", request.method),
            None,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let turn = self.turn(&context.peer).await?;
        Ok(ListToolsResult::with_all_items(Session::served(&turn)))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let turn = self.turn(&context.peer).await?;
        let name = request.name.to_string();
        if !Session::served(&turn).iter().any(|tool| tool.name == name) {
            return Err(McpError::invalid_params(
                format!("no tool `{name}` is served here; `tools/list` lists those that are"),
                None,
            ));
        }
        let span = match self.span.get() {
            Some(session) => tracing::info_span!(parent: session, "mcp_call", tool = %name),
            None => tracing::info_span!("mcp_call", turn_id = %turn.id(), tool = %name),
        };
        Ok(self.call(turn, request, context).instrument(span).await)
    }
}
