//! The CLI's turn: the configured tools and `run_script` in ONE tool list,
//! so the script's calls go through the same checks, approval and audit log
//! as the model's.

use crate::paint::{Tone, paint};
use std::sync::Arc;
use tether_backend::tools::{ToolSet, TurnSection};
use tether_backend::turn::{
    Approver, AuditStore, EventSink, SCRIPT_TOOL_NAME, Tool, ToolEvent, Turn, TurnBuilder, TurnError, TurnSnapshot,
};

/// What the CLI's turns are built with. Cheap to clone.
#[derive(Clone)]
pub struct TurnSetup {
    /// Decides approval-required calls.
    pub approver: Arc<dyn Approver>,
    /// Where audit rows and ledger entries go.
    pub audit: Arc<dyn AuditStore>,
    /// Where call events go.
    pub events: Arc<dyn EventSink>,
    /// The config file's `[turn]`: the limits of every turn, and the
    /// deadline of each top-level turn (nested turns share their parent's).
    pub turn: TurnSection,
}

impl std::fmt::Debug for TurnSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnSetup").finish_non_exhaustive()
    }
}

impl TurnSetup {
    /// `builder` with this setup's approver, audit store and events, every
    /// tool of `tools`, and `script` (the `run_script` tool). Nested agent
    /// turns are equipped with this too; their limits and deadline are set by
    /// the turn that encloses them.
    pub fn equip(&self, builder: TurnBuilder, tools: &ToolSet, script: &Tool) -> TurnBuilder {
        let builder =
            builder.approver(self.approver.clone()).audit_store(self.audit.clone()).events(self.events.clone());
        tools.add_to(builder).add_tool(script.clone())
    }

    /// A top-level turn with id `turn_id`, opened (the id claimed in the
    /// audit store): `[turn]`'s limits (payloads captured for the live view)
    /// and deadline, the tools of `tools`, `script` (the `run_script` tool,
    /// `Backend::script`), and `extra` (agent tools).
    ///
    /// # Errors
    /// If two tools share a name (a tool set's are unique; `run_script` is
    /// taken), or the audit store already holds `turn_id` or cannot claim it.
    pub async fn open(
        &self,
        turn_id: &str,
        tools: &ToolSet,
        script: &Tool,
        extra: Vec<Tool>,
    ) -> Result<Turn, TurnError> {
        let mut builder = Turn::builder(turn_id).limits(self.turn.limits.clone()).capture_payloads(true);
        if let Some(deadline) = self.turn.deadline {
            builder = builder.deadline_in(deadline);
        }
        extra.into_iter().fold(self.equip(builder, tools, script), TurnBuilder::add_tool).open().await
    }

    /// The top-level turn `turn_id` again, from a parked run's snapshot, in
    /// this process: the same tools and limits, the counts it had, its id
    /// already claimed (`docs/parking.md`).
    ///
    /// # Errors
    /// If two tools share a name.
    pub fn resume(
        &self,
        turn_id: &str,
        snapshot: TurnSnapshot,
        tools: &ToolSet,
        script: &Tool,
    ) -> Result<Turn, TurnError> {
        let builder = Turn::builder(turn_id).limits(self.turn.limits.clone()).capture_payloads(true).resumed(snapshot);
        self.equip(builder, tools, script).build()
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
                // A script is the main thing to see: whole, before it runs.
                let code = args.as_ref().filter(|_| tool == SCRIPT_TOOL_NAME).and_then(|a| a.get("code")?.as_str());
                if let Some(code) = code {
                    eprintln!("{indent}→ {call_id} {tool}:");
                    for line in code.lines() {
                        eprintln!("{indent}    │ {line}");
                    }
                    return;
                }
                let args = args.as_ref().map(|a| shorten(&a.to_string())).unwrap_or_default();
                eprintln!("{indent}→ {call_id} {tool} {args}");
            }
            ToolEvent::ToolCompleted { call_id, error_code, duration, .. } => {
                let status = match error_code.as_deref() {
                    None => paint(Tone::Ok, "ok"),
                    Some(code) => paint(Tone::Warn, &format!("tool error `{code}`")),
                };
                eprintln!("{indent}← {call_id} {status} ({:.1} ms)", duration.as_secs_f64() * 1000.0);
            }
            ToolEvent::ToolFailed { call_id, code, message, .. } => {
                let failed = paint(Tone::Failed, &format!("✗ {call_id} {}", code.display_name()));
                eprintln!("{indent}{failed} — {message}");
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
