//! The CLI's turn: the configured tools and `run_script` in ONE tool list,
//! so the script's calls go through the same checks, approval and audit log
//! as the model's.

use crate::paint::{Tone, paint, spinner};
use std::sync::Arc;
use tether_backend::tools::{ToolSet, TurnSection};
use tether_backend::turn::{
    Approver, AuditStore, EventSink, SCRIPT_TOOL_NAME, Tool, ToolEvent, ToolProgress, Turn, TurnBuilder, TurnError,
    TurnSnapshot,
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
    /// this process: the same tools and limits (`extra`: its agent tools),
    /// the counts it had, its id already claimed (`docs/parking.md`).
    ///
    /// # Errors
    /// If two tools share a name.
    pub fn resume(
        &self,
        turn_id: &str,
        snapshot: TurnSnapshot,
        tools: &ToolSet,
        script: &Tool,
        extra: Vec<Tool>,
    ) -> Result<Turn, TurnError> {
        let builder = Turn::builder(turn_id).limits(self.turn.limits.clone()).capture_payloads(true).resumed(snapshot);
        extra.into_iter().fold(self.equip(builder, tools, script), TurnBuilder::add_tool).build()
    }
}

/// Prints every call of the turn as it starts and ends, nested calls
/// indented; on a terminal, a spinner names the call still working (the
/// latest started) with the progress it reported, e.g. an MCP server's.
#[derive(Debug, Default)]
pub struct PrintEvents {
    /// The calls started and not ended, oldest first.
    working: std::sync::Mutex<Vec<Working>>,
}

/// A call that started and has not ended, as the spinner tells of it.
#[derive(Debug)]
struct Working {
    call_id: String,
    parent_call_id: Option<String>,
    /// `    call_1/1 count`: its indent, id and tool.
    head: String,
    /// What it last said of its progress.
    progress: Option<String>,
    since: std::time::Instant,
}

impl PrintEvents {
    /// Spins for the latest call still working (nothing when none is). A
    /// call waiting on its own nested call (a script on its tools) is not
    /// counted apart: the nested call is its work.
    fn spin(&self, working: &[Working]) {
        let leaves: Vec<&Working> = working
            .iter()
            .filter(|w| !working.iter().any(|other| other.parent_call_id.as_deref() == Some(w.call_id.as_str())))
            .collect();
        let Some(latest) = leaves.last() else { return spinner().stop() };
        let mut label = format!("{} working", latest.head);
        if let Some(progress) = &latest.progress {
            label = format!("{label}: {progress}");
        }
        if leaves.len() > 1 {
            label = format!("{label} (and {} more working)", leaves.len() - 1);
        }
        spinner().start_since(&label, latest.since);
    }
}

impl EventSink for PrintEvents {
    fn emit(&self, event: &ToolEvent) {
        let indent = if event.parent_call_id().is_some() { "    " } else { "" };
        let mut working = self.working.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(event, ToolEvent::ToolProgress { .. }) {
            spinner().stop();
        }
        match event {
            ToolEvent::ToolStarted { call_id, tool, args, .. } => {
                working.push(Working {
                    call_id: call_id.clone(),
                    parent_call_id: event.parent_call_id().map(str::to_owned),
                    head: format!("{indent}  {call_id} {tool}"),
                    progress: None,
                    since: std::time::Instant::now(),
                });
                // A script is the main thing to see: whole, before it runs.
                let code = args.as_ref().filter(|_| tool == SCRIPT_TOOL_NAME).and_then(|a| a.get("code")?.as_str());
                if let Some(code) = code {
                    eprintln!("{indent}→ {call_id} {tool}:");
                    for line in code.lines() {
                        eprintln!("{indent}    │ {line}");
                    }
                } else {
                    let args = args.as_ref().map(|a| shorten(&a.to_string())).unwrap_or_default();
                    eprintln!("{indent}→ {call_id} {tool} {args}");
                }
            }
            ToolEvent::ToolProgress { call_id, progress, .. } => {
                if let Some(call) = working.iter_mut().find(|w| &w.call_id == call_id) {
                    call.progress = Some(progress_text(progress));
                }
            }
            ToolEvent::ToolCompleted { call_id, error_code, duration, .. } => {
                working.retain(|w| &w.call_id != call_id);
                let status = match error_code.as_deref() {
                    None => paint(Tone::Ok, "ok"),
                    Some(code) => paint(Tone::Warn, &format!("tool error `{code}`")),
                };
                eprintln!("{indent}← {call_id} {status} ({:.1} ms)", duration.as_secs_f64() * 1000.0);
            }
            ToolEvent::ToolFailed { call_id, code, message, .. } => {
                working.retain(|w| &w.call_id != call_id);
                let failed = paint(Tone::Failed, &format!("✗ {call_id} {}", code.display_name()));
                eprintln!("{indent}{failed} — {message}");
            }
        }
        self.spin(&working);
    }
}

/// `3/10 (30%) copying` — what a progress report says, shortly.
pub fn progress_text(progress: &ToolProgress) -> String {
    let done = match progress.total {
        Some(total) if total > 0.0 => {
            format!("{}/{} ({:.0}%)", progress.progress, total, 100.0 * progress.progress / total)
        }
        _ => format!("{}", progress.progress),
    };
    match progress.message.as_deref().filter(|m| !m.is_empty()) {
        Some(message) => format!("{done} {}", shorten(message)),
        None => done,
    }
}

fn shorten(text: &str) -> String {
    const MAX: usize = 100;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
