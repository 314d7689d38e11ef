//! [`Reason`]: a failure code with the facts its message needs. The message
//! (the `Display`) is written for the model that reads it: what happened and
//! what to do next. Every message of every code is here, next to its code.

use crate::Code;
use std::time::Duration;

/// Why a call produced no value, with what its message says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// The turn was cancelled.
    #[error("the turn was cancelled; the call was not completed")]
    TurnCancelled,
    /// Whoever made the call cancelled it (e.g. an MCP client's
    /// `notifications/cancelled`); the turn goes on.
    #[error(
        "the call was cancelled by whoever made it; it was not completed, and any effect it had started may have happened"
    )]
    CallCancelled,
    /// The run ended (cancelled, deadline, backend gone) while the call waited.
    #[error("the run ended before the tool answered")]
    RunEnded,
    /// The turn's deadline passed.
    #[error("the turn's deadline passed; the call was not completed")]
    TurnDeadline,
    /// The turn-wide cap is spent.
    #[error(
        "this turn's cap of `{max}` tool calls is spent (calls still running count); finish with the results you have"
    )]
    ToolCallCap {
        /// The cap.
        max: u32,
    },
    /// The call is nested deeper than allowed.
    #[error(
        "`{tool}` would run at nesting depth `{depth}`, past this turn's limit of `{max}`; call it from a shallower level (directly, or from the script itself)"
    )]
    DepthLimit {
        /// The tool.
        tool: String,
        /// The call's depth.
        depth: u32,
        /// The deepest allowed.
        max: u32,
    },
    /// The script passed its per-script call cap.
    #[error(
        "this script has used its `{max}` tool calls; narrow the scope, batch the work differently, or split it across scripts"
    )]
    ScriptCallCap {
        /// The cap.
        max: u32,
    },
    /// The script had too many calls refused.
    #[error(
        "this script has had `{max}` calls refused, so later calls are refused without being evaluated; fix the script (tool names, arguments, permissions) before running it again"
    )]
    RefusalCap {
        /// The cap.
        max: u32,
    },
    /// Too many runs wait on tool results.
    #[error("the script sidecar has too many scripts waiting on tools; call it directly in your next response")]
    SidecarBusy,
    /// A tool name longer than any tool's.
    #[error(
        "no tool has a name that long (`{length}` bytes; names are at most `{max}`); call a tool of this turn by its name"
    )]
    ToolNameTooLong {
        /// The name's length in bytes.
        length: usize,
        /// The longest name allowed.
        max: usize,
    },
    /// No such tool.
    #[error("there is no tool `{tool}` in this turn")]
    ToolNotFound {
        /// The name asked for.
        tool: String,
    },
    /// A deferred tool not activated.
    #[error(
        "the tool `{tool}` is listed by name only and is not activated; activate it outside the script first, then call it"
    )]
    ToolNotActivated {
        /// The tool.
        tool: String,
    },
    /// Excluded from scripts.
    #[error("`{tool}` cannot be called from a script ({why}); call it directly in your next response")]
    NotCallableFromScript {
        /// The tool.
        tool: String,
        /// Why, from the tool's metadata.
        why: String,
    },
    /// The arguments fail the tool's schema.
    #[error("the arguments of `{tool}` do not match its schema: {errors}")]
    ArgumentsMismatch {
        /// The tool.
        tool: String,
        /// The schema errors.
        errors: String,
    },
    /// The arguments are not a JSON object.
    #[error("tool arguments must be a JSON object (keyword arguments)")]
    ArgumentsNotObject,
    /// The arguments are not JSON at all.
    #[error("the arguments are not valid JSON: {error}")]
    ArgumentsNotJson {
        /// The parser's complaint.
        error: String,
    },
    /// The arguments are over the size limit.
    #[error(
        "the arguments are `{size}` bytes, over the `{limit}`-byte limit (max_args_bytes); pass less data per call"
    )]
    ArgumentsTooLarge {
        /// Their size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The administrator's policy blocks the call.
    #[error("the administrator's policy blocks this call to `{tool}`{}", suffix(reason))]
    PolicyDenied {
        /// The tool.
        tool: String,
        /// The rule's reason, if it gives one.
        reason: Option<String>,
    },
    /// The user's permissions block the call.
    #[error("the user's permissions do not allow this call to `{tool}`: {reason}")]
    PermissionDenied {
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
    },
    /// An identical call passed before.
    #[error(
        "an identical call to `{tool}` was already made in this turn as `{earlier_call_id}`; use its result instead of repeating it"
    )]
    RepeatedCall {
        /// The tool.
        tool: String,
        /// The earlier call's id.
        earlier_call_id: String,
    },
    /// The approval cap is spent.
    #[error("this turn's cap of `{max}` approval-required calls is spent; the call was not made")]
    ApprovalCap {
        /// The cap.
        max: u32,
    },
    /// The approver said no.
    #[error("approval for `{tool}` was denied by `{decided_by}`{}; the call was not made", parenthesized(reason))]
    ApprovalDenied {
        /// The tool.
        tool: String,
        /// Who decided.
        decided_by: String,
        /// Their reason, if any.
        reason: Option<String>,
    },
    /// The approver did not answer in time.
    #[error("no approval for `{tool}` within `{wait:?}`; the call was not made")]
    ApprovalTimeout {
        /// The tool.
        tool: String,
        /// The wait limit.
        wait: Duration,
    },
    /// `started` could not be recorded.
    #[error("`{tool}` was not run: the effect ledger could not record it")]
    LedgerUnavailable {
        /// The tool.
        tool: String,
    },
    /// The ledger already holds this call id.
    #[error(
        "call id `{call_id}` already {} in this turn; a tool with effects never runs twice under one call id, so use the earlier result",
        if *settled { "ran" } else { "started (it may have run)" }
    )]
    ReplayedCall {
        /// The call id.
        call_id: String,
        /// True when the earlier run settled; false when it is still `started`.
        settled: bool,
    },
    /// The call was started by a process that ended before it settled.
    #[error(
        "`{tool}` (call `{call_id}`) was started by a backend process that ended before it finished: it may have run, so it is not run again — check its effect before doing it another way"
    )]
    PossiblyExecuted {
        /// The tool.
        tool: String,
        /// The call id.
        call_id: String,
    },
    /// The script run parked, its calls waiting for a person.
    #[error(
        "the script run `{run_id}` is parked: {waiting} of its calls wait for a person's approval; it goes on from where it stopped once they are answered"
    )]
    RunParked {
        /// The run.
        run_id: String,
        /// How many calls wait for a person.
        waiting: usize,
    },
    /// An agent tool's nested turn parked: a call of that agent's waits for
    /// a person, and the agent answers once it is answered.
    #[error(
        "agent `{agent}` is parked in its turn `{turn_id}`: a call of its waits for a person's approval; it goes on from where it stopped once that is answered"
    )]
    AgentParked {
        /// The agent.
        agent: String,
        /// Its nested turn.
        turn_id: String,
    },
    /// The tool ran past its time limit.
    #[error("`{tool}` did not finish within its time limit of `{limit:?}`; it may have had effects")]
    ToolTimeout {
        /// The tool.
        tool: String,
        /// Its time limit.
        limit: Duration,
    },
    /// The tool's executor panicked.
    #[error("`{tool}` failed inside the host; the cause is in the host's logs")]
    ToolFailed {
        /// The tool.
        tool: String,
    },
    /// A tool failure that carries no code of its own: an MCP server's
    /// `isError` result, an HTTP error status, a command's nonzero exit.
    #[error("`{tool}` reported a failure: {detail}")]
    ToolReported {
        /// The tool.
        tool: String,
        /// What it said (an error text, a status and body, a stderr tail).
        detail: String,
    },
    /// What runs the tool (an MCP server, a command, an HTTP endpoint)
    /// could not be reached or started, so the call was not made.
    #[error(
        "`{tool}` was not run: {provider} is not available ({error}); the call was not made, so it is safe to try again later"
    )]
    ProviderUnavailable {
        /// The tool.
        tool: String,
        /// What runs it, e.g. ``the MCP server `files` ``.
        provider: String,
        /// Why it is not available.
        error: String,
    },
    /// What runs the tool stopped, or its connection broke, while the call
    /// was on its way: the call may have run.
    #[error(
        "{provider} stopped while `{tool}` was running ({detail}); the call may have run, so check for its effect before calling it again"
    )]
    ProviderLost {
        /// The tool.
        tool: String,
        /// What runs it, e.g. ``the MCP server `files` ``.
        provider: String,
        /// What is known of how it stopped.
        detail: String,
    },
    /// The tool ran; its output is over the tool's own output cap.
    #[error(
        "`{tool}` ran and its effect happened, but its output is over this tool's `{limit}`-byte limit (max_output_bytes in its config), so it was not handed back; do not call it again for the same thing: ask for less data next time"
    )]
    OutputTooLarge {
        /// The tool.
        tool: String,
        /// The tool's cap.
        limit: u64,
    },
    /// The tool ran; its result is too large to hand back.
    #[error(
        "`{tool}` ran and its effect happened, but its result is `{size}` bytes, over the `{limit}`-byte limit (max_result_bytes), so it was not handed back; do not call it again for the same thing: ask for less data next time"
    )]
    ResultTooLarge {
        /// The tool.
        tool: String,
        /// The result's size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The tool ran; its result cannot be handed back.
    #[error(
        "`{tool}` ran and its effect happened, but its result cannot be handed back ({problem}); do not call it again for the same thing"
    )]
    InvalidResult {
        /// The tool.
        tool: String,
        /// What is wrong with the result.
        problem: String,
    },
    /// The parent settled first.
    #[error("parent settled: the call was dropped before it settled")]
    ParentSettled,
    /// A guest runtime got no result for a call.
    #[error("the host returned no result for this call")]
    MissingResult,
}

fn suffix(reason: &Option<String>) -> String {
    reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
}

fn parenthesized(reason: &Option<String>) -> String {
    reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
}

impl Reason {
    /// The code this reason carries.
    pub fn code(&self) -> Code {
        match self {
            Reason::TurnCancelled | Reason::CallCancelled | Reason::RunEnded => Code::Cancelled,
            Reason::TurnDeadline => Code::TurnDeadlineExceeded,
            Reason::ToolCallCap { .. } => Code::ToolCallCapReached,
            Reason::DepthLimit { .. } => Code::DepthLimitExceeded,
            Reason::ScriptCallCap { .. } => Code::ScriptCallCapReached,
            Reason::RefusalCap { .. } => Code::RefusalCapReached,
            Reason::SidecarBusy => Code::SidecarBusy,
            Reason::ToolNotFound { .. } | Reason::ToolNameTooLong { .. } => Code::ToolNotFound,
            Reason::ToolNotActivated { .. } => Code::ToolNotActivated,
            Reason::NotCallableFromScript { .. } => Code::NotCallableFromScript,
            Reason::ArgumentsMismatch { .. } | Reason::ArgumentsNotObject | Reason::ArgumentsNotJson { .. } => {
                Code::InvalidArguments
            }
            Reason::ArgumentsTooLarge { .. } => Code::ArgumentsTooLarge,
            Reason::PolicyDenied { .. } => Code::PolicyDenied,
            Reason::PermissionDenied { .. } => Code::PermissionDenied,
            Reason::RepeatedCall { .. } => Code::RepeatedCall,
            Reason::ApprovalCap { .. } => Code::ApprovalCapReached,
            Reason::ApprovalDenied { .. } => Code::ApprovalDenied,
            Reason::ApprovalTimeout { .. } => Code::ApprovalTimeout,
            Reason::LedgerUnavailable { .. } => Code::LedgerUnavailable,
            Reason::ReplayedCall { .. } => Code::ReplayedCall,
            Reason::PossiblyExecuted { .. } => Code::PossiblyExecuted,
            Reason::RunParked { .. } | Reason::AgentParked { .. } => Code::RunParked,
            Reason::ToolTimeout { .. } => Code::ToolTimeout,
            Reason::ToolFailed { .. }
            | Reason::ToolReported { .. }
            | Reason::ProviderUnavailable { .. }
            | Reason::ProviderLost { .. } => Code::ToolFailed,
            Reason::ResultTooLarge { .. } | Reason::OutputTooLarge { .. } => Code::ResultTooLarge,
            Reason::InvalidResult { .. } => Code::InvalidResult,
            Reason::ParentSettled => Code::ParentSettled,
            Reason::MissingResult => Code::Internal,
        }
    }

    /// The message: the same text as `to_string()`.
    pub fn message(&self) -> String {
        self.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_that_cannot_be_handed_back_says_the_tool_ran() {
        for reason in [
            Reason::ResultTooLarge { tool: "send_email".into(), size: 10, limit: 5 },
            Reason::InvalidResult { tool: "send_email".into(), problem: "nested too deep".into() },
        ] {
            assert!(reason.code().tool_ran());
            let message = reason.message();
            assert!(message.contains("ran and its effect happened"), "{message}");
            assert!(message.contains("do not call it again"), "{message}");
        }
    }

    #[test]
    fn a_failure_around_a_tool_says_whether_the_call_was_made() {
        let unavailable = Reason::ProviderUnavailable {
            tool: "read".into(),
            provider: "the MCP server `files`".into(),
            error: "exited".into(),
        };
        assert_eq!(unavailable.code(), Code::ToolFailed);
        assert!(unavailable.message().contains("the call was not made"), "{unavailable}");
        let lost = Reason::ProviderLost {
            tool: "write".into(),
            provider: "the MCP server `files`".into(),
            detail: "x".into(),
        };
        assert_eq!(lost.code(), Code::ToolFailed);
        assert!(lost.message().contains("may have run"), "{lost}");
        assert_eq!(Reason::OutputTooLarge { tool: "t".into(), limit: 1 }.code(), Code::ResultTooLarge);
    }

    #[test]
    fn optional_parts_read_naturally() {
        let plain = Reason::PolicyDenied { tool: "t".into(), reason: None };
        assert_eq!(plain.message(), "the administrator's policy blocks this call to `t`");
        let why = Reason::PolicyDenied { tool: "t".into(), reason: Some("no".into()) };
        assert_eq!(why.message(), "the administrator's policy blocks this call to `t`: no");
        let denied = Reason::ApprovalDenied { tool: "t".into(), decided_by: "dana".into(), reason: Some("x".into()) };
        assert_eq!(denied.message(), "approval for `t` was denied by `dana` (x); the call was not made");
    }
}
