//! Why an agent turn ended without an answer.

use tether_turn::{Code, TurnError};

/// Why [`AgentLoop::run`](super::AgentLoop::run) produced no answer.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The endpoint could not be reached, answered with an error status, or
    /// sent a stream that could not be read.
    #[error("the model endpoint {endpoint} failed: {message}")]
    Model {
        /// The chat-completions URL.
        endpoint: String,
        /// What went wrong, with the status and body when there was one.
        message: String,
    },
    /// The turn was cancelled or its deadline passed.
    #[error("the turn ended ({}): {}", code.display_name(), match code {
        Code::TurnDeadlineExceeded => "its deadline passed; ask for less, or give the turn more time",
        _ => "it was cancelled",
    })]
    TurnEnded {
        /// `cancelled` or `turn_deadline_exceeded`.
        code: Code,
    },
    /// The model kept calling tools past the loop's bound.
    #[error("the model called tools for {max} rounds without answering (max_iterations); ask a narrower question")]
    MaxIterations {
        /// The bound.
        max: u32,
    },
    /// The agent could not be set up (its API key variable is unset, or the
    /// HTTP client could not be built).
    #[error("agent `{agent}` cannot be used: {reason}")]
    Setup {
        /// The agent.
        agent: String,
        /// Why, and what to fix.
        reason: String,
    },
    /// No answer yet: a call of the model's waits for a person who answers
    /// from outside this process, and the turn is parked in its audit store
    /// ([`AgentLoop::parking`](super::AgentLoop::parking)). Answering the call
    /// resumes the turn, in any process sharing the store.
    #[error(
        "the turn is parked in its audit store: the model's call `{call_id}` ({tool}) waits for a person; \
         answering it resumes the turn"
    )]
    Parked {
        /// The call that waits (a direct call, or the `run_script` call whose run waits).
        call_id: String,
        /// Its tool.
        tool: String,
    },
    /// The turn's records could not be read.
    #[error(transparent)]
    Turn(#[from] TurnError),
}
