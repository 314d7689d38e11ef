//! Call events for a host's UI and exporters: `ToolStarted`, then any number
//! of `ToolProgress` (what a slow tool says of its work, e.g. an MCP server's
//! progress notifications), then exactly one of `ToolCompleted` /
//! `ToolFailed`, each carrying the immediate parent's call id (a script's
//! calls name the `run_script` call).

use super::origin::CallOrigin;
use super::step::Step;
use serde_json::Value;
use std::sync::Mutex;
use std::time::Duration;
use tether_codes::Code;

/// What happened to a call. Every `ToolStarted` is followed by exactly one
/// terminal event (`ToolCompleted` or `ToolFailed`) with the same call id,
/// also when the call is dropped mid-way (then `ToolFailed` with
/// `cancelled`, `turn_deadline_exceeded` or `parent_settled`).
#[derive(Debug, Clone, PartialEq)]
pub enum ToolEvent {
    /// The call arrived at the turn.
    ToolStarted {
        /// The turn.
        turn_id: String,
        /// The call's id.
        call_id: String,
        /// The immediate parent's call id, for a script's call.
        parent_call_id: Option<String>,
        /// The tool named.
        tool: String,
        /// Who issued it.
        origin: CallOrigin,
        /// The (redacted) arguments, only when payload capture is on.
        args: Option<Value>,
    },
    /// The tool ran and returned (a value, or its own error).
    ToolCompleted {
        /// The turn.
        turn_id: String,
        /// The call's id.
        call_id: String,
        /// The immediate parent's call id.
        parent_call_id: Option<String>,
        /// The tool.
        tool: String,
        /// The tool's own error code, when it reported a failure.
        error_code: Option<String>,
        /// The tool's own error message, with `error_code`: what the caller reads.
        error_message: Option<String>,
        /// How long the call took.
        duration: Duration,
        /// The tool's host-only metadata (e.g. `nested_calls`).
        metadata: Option<Value>,
    },
    /// The tool, still working, said how far it got (never after the
    /// call's terminal event).
    ToolProgress {
        /// The turn.
        turn_id: String,
        /// The call's id.
        call_id: String,
        /// The immediate parent's call id.
        parent_call_id: Option<String>,
        /// The tool.
        tool: String,
        /// The progress so far (it grows, even when the total is unknown).
        progress: ToolProgress,
    },
    /// The call was refused, denied, timed out, cancelled or dropped.
    ToolFailed {
        /// The turn.
        turn_id: String,
        /// The call's id.
        call_id: String,
        /// The immediate parent's call id.
        parent_call_id: Option<String>,
        /// The tool named.
        tool: String,
        /// Why.
        code: Code,
        /// The step that refused or ended it.
        step: Step,
        /// The reason.
        message: String,
        /// How long the call took.
        duration: Duration,
    },
}

impl ToolEvent {
    /// The call the event is about.
    pub fn call_id(&self) -> &str {
        match self {
            ToolEvent::ToolStarted { call_id, .. }
            | ToolEvent::ToolProgress { call_id, .. }
            | ToolEvent::ToolCompleted { call_id, .. }
            | ToolEvent::ToolFailed { call_id, .. } => call_id,
        }
    }

    /// The immediate parent's call id.
    pub fn parent_call_id(&self) -> Option<&str> {
        match self {
            ToolEvent::ToolStarted { parent_call_id, .. }
            | ToolEvent::ToolProgress { parent_call_id, .. }
            | ToolEvent::ToolCompleted { parent_call_id, .. }
            | ToolEvent::ToolFailed { parent_call_id, .. } => parent_call_id.as_deref(),
        }
    }

    /// True for `ToolCompleted` and `ToolFailed`.
    pub fn is_terminal(&self) -> bool {
        matches!(self, ToolEvent::ToolCompleted { .. } | ToolEvent::ToolFailed { .. })
    }
}

/// How far a tool that is still working got, as it reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolProgress {
    /// The work done so far.
    pub progress: f64,
    /// The whole work, when the tool knows it.
    pub total: Option<f64>,
    /// What it is doing, in its words.
    pub message: Option<String>,
}

/// Receives call events. `emit` is called inline on the call's path (also
/// from `Drop`), so it must be quick and must not block.
pub trait EventSink: Send + Sync {
    /// Handles one event.
    fn emit(&self, event: &ToolEvent);
}

/// Discards events (the default sink).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: &ToolEvent) {}
}

/// Keeps every event in memory, in order.
#[derive(Debug, Default)]
pub struct EventLog {
    events: Mutex<Vec<ToolEvent>>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        EventLog::default()
    }

    /// The events so far.
    pub fn events(&self) -> Vec<ToolEvent> {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Call ids whose start is not followed by exactly one terminal event, or
    /// that have a terminal event without a start (empty when all is well).
    pub fn unpaired(&self) -> Vec<String> {
        let mut counts: std::collections::BTreeMap<String, (u32, u32)> = Default::default();
        for event in self.events() {
            let entry = counts.entry(event.call_id().to_owned()).or_default();
            match event {
                ToolEvent::ToolStarted { .. } => entry.0 += 1,
                ToolEvent::ToolProgress { .. } => {}
                ToolEvent::ToolCompleted { .. } | ToolEvent::ToolFailed { .. } => entry.1 += 1,
            }
        }
        counts.into_iter().filter(|(_, (s, t))| (*s, *t) != (1, 1)).map(|(id, _)| id).collect()
    }
}

impl EventSink for EventLog {
    fn emit(&self, event: &ToolEvent) {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).push(event.clone());
    }
}
