//! The CLI's turn: the configured tools and `run_script` in ONE tool list,
//! so the script's calls go through the same checks, approval and audit log
//! as the model's.

use std::sync::Arc;
use tether_backend::SidecarClient;
use tether_backend::tools::ToolSet;
use tether_backend::turn::{Approver, AuditStore, EventSink, ScriptTool, ToolEvent, Turn, TurnError};

/// What the CLI's turn is built with.
pub struct TurnSetup {
    /// Decides approval-required calls.
    pub approver: Arc<dyn Approver>,
    /// Where audit rows and ledger entries go.
    pub audit: Arc<dyn AuditStore>,
    /// Where call events go.
    pub events: Arc<dyn EventSink>,
}

impl std::fmt::Debug for TurnSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnSetup").finish_non_exhaustive()
    }
}

impl TurnSetup {
    /// A turn with id `turn_id` over the tools of `tools`, whose `run_script`
    /// runs on the sidecar behind `client`.
    ///
    /// # Errors
    /// If two tools share a name (a tool set's are unique; `run_script` is taken).
    pub fn build(self, turn_id: &str, tools: &ToolSet, client: SidecarClient) -> Result<Turn, TurnError> {
        let builder =
            Turn::builder(turn_id).approver(self.approver).audit_store(self.audit).events(self.events).capture_payloads(true);
        tools.add_to(builder).add_tool(ScriptTool::new(client).into_tool()?).build()
    }
}

/// Prints every call of the turn as it starts and ends, nested calls indented.
#[derive(Debug, Default, Clone, Copy)]
pub struct PrintEvents;

impl EventSink for PrintEvents {
    fn emit(&self, event: &ToolEvent) {
        let indent = if event.parent_call_id().is_some() { "    " } else { "" };
        match event {
            ToolEvent::ToolStarted { call_id, tool, args, .. } => {
                let args = args.as_ref().map(|a| shorten(&a.to_string())).unwrap_or_default();
                eprintln!("{indent}→ {call_id} {tool} {args}");
            }
            ToolEvent::ToolCompleted { call_id, error_code, duration, .. } => {
                let status = error_code.as_deref().map_or("ok".to_owned(), |code| format!("tool error `{code}`"));
                eprintln!("{indent}← {call_id} {status} ({:.1} ms)", duration.as_secs_f64() * 1000.0);
            }
            ToolEvent::ToolFailed { call_id, code, message, .. } => {
                eprintln!("{indent}✗ {call_id} {} — {message}", code.display_name());
            }
        }
    }
}

fn shorten(text: &str) -> String {
    const MAX: usize = 100;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
