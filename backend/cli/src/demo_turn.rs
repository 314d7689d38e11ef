//! The demo's turn: the demo tools and `run_script` in ONE tool list, so the
//! script's calls go through the same checks, approval and audit log as the
//! model's. `send_email` needs approval; the lookups are read-only.

use crate::demo::DemoWorld;
use std::sync::Arc;
use tether_backend::turn::{
    Approver, AuditStore, EventSink, ScriptTool, ToolError, ToolEvent, ToolOutput, ToolSpec, Turn, TurnError,
    executor_fn,
};
use tether_backend::{SidecarClient, ToolOutcome};

/// What the demo turn is built with.
pub struct DemoTurn {
    /// Decides approval-required calls (`send_email`).
    pub approver: Arc<dyn Approver>,
    /// Where audit rows and ledger entries go.
    pub audit: Arc<dyn AuditStore>,
    /// Where call events go.
    pub events: Arc<dyn EventSink>,
}

impl std::fmt::Debug for DemoTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoTurn").finish_non_exhaustive()
    }
}

impl DemoTurn {
    /// A turn with id `turn_id` over `world`, whose `run_script` runs on the
    /// sidecar behind `client`.
    ///
    /// # Errors
    /// If a tool's schema does not compile (they are fixed, so never in practice).
    pub fn build(self, turn_id: &str, world: Arc<DemoWorld>, client: SidecarClient) -> Result<Turn, TurnError> {
        let mut builder =
            Turn::builder(turn_id).approver(self.approver).audit_store(self.audit).events(self.events).capture_payloads(true);
        for tool in DemoWorld::tools() {
            let mut spec = ToolSpec::new(tool.name.clone(), tool.description, tool.input_schema);
            spec = if tool.name == "send_email" { spec.requires_approval() } else { spec.read_only().concurrency_safe() };
            let (world, name) = (world.clone(), tool.name);
            let executor = executor_fn(move |_, args| {
                let outcome = world.execute(&name, &args);
                async move {
                    match outcome {
                        ToolOutcome::Ok(value) => Ok(ToolOutput::new(value)),
                        ToolOutcome::Failed { code, message } => Err(ToolError::new(code, message)),
                    }
                }
            });
            builder = builder.tool(spec, executor);
        }
        builder.add_tool(ScriptTool::new(client).into_tool()?).build()
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
