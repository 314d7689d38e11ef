//! What an agent turn reports while it runs, for a live view: tokens as they
//! stream, each tool call the model makes, and nested agent turns. (The
//! calls scripts make are reported by the turn's own
//! [`EventSink`](tether_turn::EventSink).)

use std::sync::Mutex;
use tether_turn::CallStatus;
use tokio::time::Instant;

/// One thing that happened in an agent turn.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// A chat-completions request is sent (`iteration` counts from 1).
    ModelRequest {
        /// The turn.
        turn_id: String,
        /// Which round of the loop.
        iteration: u32,
    },
    /// Text the model streamed.
    Token {
        /// The turn.
        turn_id: String,
        /// The text.
        text: String,
    },
    /// A tool call of the model's starts through the turn.
    ToolCallStarted {
        /// The turn.
        turn_id: String,
        /// The call's id (the model's).
        call_id: String,
        /// The tool.
        tool: String,
        /// The call's depth.
        depth: u32,
    },
    /// A tool call of the model's settled.
    ToolCallFinished {
        /// The turn.
        turn_id: String,
        /// The call's id.
        call_id: String,
        /// The tool.
        tool: String,
        /// How it ended.
        status: CallStatus,
        /// The failure or tool error code, if it did not succeed.
        code: Option<String>,
    },
    /// An agent tool's nested turn starts.
    NestedTurnStarted {
        /// The calling turn.
        parent_turn_id: String,
        /// The nested turn.
        turn_id: String,
        /// The target agent.
        agent: String,
        /// The depth of the nested model's calls.
        depth: u32,
        /// The nested turn's deadline: always the calling turn's.
        deadline: Option<Instant>,
    },
    /// An agent tool's nested turn ended.
    NestedTurnFinished {
        /// The nested turn.
        turn_id: String,
        /// The target agent.
        agent: String,
        /// Whether it answered.
        answered: bool,
    },
}

/// Receives agent events. Called inline, so it must be quick and must not
/// block (a channel sender is fine).
pub trait AgentEventSink: Send + Sync {
    /// Handles one event.
    fn emit(&self, event: &AgentEvent);
}

/// Discards events (the default).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoAgentEvents;

impl AgentEventSink for NoAgentEvents {
    fn emit(&self, _event: &AgentEvent) {}
}

/// Events into an unbounded channel: a live view reads the receiver. A
/// closed receiver drops events.
impl AgentEventSink for tokio::sync::mpsc::UnboundedSender<AgentEvent> {
    fn emit(&self, event: &AgentEvent) {
        let _ = self.send(event.clone());
    }
}

/// Keeps every event in memory, in order.
#[derive(Debug, Default)]
pub struct AgentEventLog {
    events: Mutex<Vec<AgentEvent>>,
}

impl AgentEventLog {
    /// An empty log.
    pub fn new() -> Self {
        AgentEventLog::default()
    }

    /// The events so far.
    pub fn events(&self) -> Vec<AgentEvent> {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl AgentEventSink for AgentEventLog {
    fn emit(&self, event: &AgentEvent) {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).push(event.clone());
    }
}
