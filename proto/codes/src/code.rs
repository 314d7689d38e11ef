//! [`Code`]: the one list of call failure codes and their display names.

use std::fmt;

/// Why a tool call produced no value: a refusal, a denial, a time-out, a
/// cancellation, or a fault around the tool. Each has a stable machine code
/// ([`Code::as_str`]) and a display name ([`Code::display_name`]), fixed here
/// and nowhere else. A refused call carries the same code whether the model or
/// a script issued it, and whether the sidecar or the turn refused it.
///
/// A tool that runs and reports its own failure is not a `Code`: it keeps the
/// tool's own code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// The turn was cancelled, or the run ended while the call waited.
    Cancelled,
    /// The turn's deadline passed.
    TurnDeadlineExceeded,
    /// The turn-wide tool-call cap is spent (calls in flight count).
    ToolCallCapReached,
    /// The call is nested deeper than the turn allows.
    DepthLimitExceeded,
    /// The script passed its per-script call cap (refused by the sidecar).
    ScriptCallCapReached,
    /// The script had too many calls refused; later calls are not evaluated.
    RefusalCapReached,
    /// Too many runs wait on tool results in the sidecar.
    SidecarBusy,
    /// No tool of that name is in the turn's list.
    ToolNotFound,
    /// The tool is deferred (listed by name only) and not activated yet.
    ToolNotActivated,
    /// The tool may not be called from a script (asks the user, runs on the
    /// user's device, is the script tool, or is a meta tool).
    NotCallableFromScript,
    /// The arguments are not a JSON object, or do not match the tool's schema.
    InvalidArguments,
    /// The arguments are over the size limit.
    ArgumentsTooLarge,
    /// The administrator's policy blocks the call.
    PolicyDenied,
    /// The user's permissions block the call.
    PermissionDenied,
    /// An identical call already passed the pre-execution check in this turn.
    RepeatedCall,
    /// The turn's cap on approval-required calls is spent.
    ApprovalCapReached,
    /// The approver said no.
    ApprovalDenied,
    /// The approver did not answer within the approval wait limit.
    ApprovalTimeout,
    /// The effect ledger could not record `started`, so the tool was not run.
    LedgerUnavailable,
    /// The effect ledger already holds this call id; a tool with effects never
    /// runs twice under one id.
    ReplayedCall,
    /// The tool ran past its own time limit.
    ToolTimeout,
    /// The tool failed: inside the host (its executor panicked), in what runs
    /// it (an MCP server that is down or died, a command that could not
    /// start), or it reported a failure with no code of its own (an MCP
    /// `isError` result, an HTTP error status, a command's nonzero exit).
    ToolFailed,
    /// The tool ran, but its result is over the size limit: the effect
    /// happened and the result was not handed back.
    ResultTooLarge,
    /// The tool ran, but its result cannot be handed back (not JSON, or nested
    /// too deep).
    InvalidResult,
    /// The call was dropped because its parent settled first.
    ParentSettled,
    /// A fault in Tether itself (a guest runtime got no result for a call).
    Internal,
}

impl Code {
    /// Every code, in the order the docs list them.
    pub const ALL: [Code; 26] = [
        Code::Cancelled,
        Code::TurnDeadlineExceeded,
        Code::ToolCallCapReached,
        Code::DepthLimitExceeded,
        Code::ScriptCallCapReached,
        Code::RefusalCapReached,
        Code::SidecarBusy,
        Code::ToolNotFound,
        Code::ToolNotActivated,
        Code::NotCallableFromScript,
        Code::InvalidArguments,
        Code::ArgumentsTooLarge,
        Code::PolicyDenied,
        Code::PermissionDenied,
        Code::RepeatedCall,
        Code::ApprovalCapReached,
        Code::ApprovalDenied,
        Code::ApprovalTimeout,
        Code::LedgerUnavailable,
        Code::ReplayedCall,
        Code::ToolTimeout,
        Code::ToolFailed,
        Code::ResultTooLarge,
        Code::InvalidResult,
        Code::ParentSettled,
        Code::Internal,
    ];

    /// The stable machine code, e.g. `"policy_denied"`.
    pub fn as_str(self) -> &'static str {
        self.names().0
    }

    /// The name shown to a person, e.g. `"Blocked by policy"`.
    pub fn display_name(self) -> &'static str {
        self.names().1
    }

    /// The code named `code` by [`Code::as_str`], if any.
    pub fn parse(code: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// True when the tool ran (its effect may have happened) even though the
    /// caller got no value: the call must not be repeated blindly.
    pub fn tool_ran(self) -> bool {
        matches!(self, Code::ResultTooLarge | Code::InvalidResult)
    }

    /// True when the call was refused because a cap was reached: the
    /// script's call cap, the sidecar's cap on runs waiting on tools, or the
    /// turn's caps on tool calls, refused calls and approvals. Operators watch
    /// these apart from other refusals (the sidecar's `cap_refusals` metric).
    pub fn is_cap(self) -> bool {
        matches!(
            self,
            Code::ScriptCallCapReached
                | Code::SidecarBusy
                | Code::ToolCallCapReached
                | Code::RefusalCapReached
                | Code::ApprovalCapReached
        )
    }

    fn names(self) -> (&'static str, &'static str) {
        match self {
            Code::Cancelled => ("cancelled", "Cancelled"),
            Code::TurnDeadlineExceeded => ("turn_deadline_exceeded", "Turn deadline passed"),
            Code::ToolCallCapReached => ("tool_call_cap_reached", "Tool call limit reached"),
            Code::DepthLimitExceeded => ("depth_limit_exceeded", "Nested too deep"),
            Code::ScriptCallCapReached => ("script_call_cap_reached", "Script call limit reached"),
            Code::RefusalCapReached => ("refusal_cap_reached", "Too many refused calls"),
            Code::SidecarBusy => ("sidecar_busy", "Script sandbox busy"),
            Code::ToolNotFound => ("tool_not_found", "Unknown tool"),
            Code::ToolNotActivated => ("tool_not_activated", "Tool not activated"),
            Code::NotCallableFromScript => ("not_callable_from_script", "Not available in scripts"),
            Code::InvalidArguments => ("invalid_arguments", "Invalid arguments"),
            Code::ArgumentsTooLarge => ("arguments_too_large", "Arguments too large"),
            Code::PolicyDenied => ("policy_denied", "Blocked by policy"),
            Code::PermissionDenied => ("permission_denied", "Blocked by your permissions"),
            Code::RepeatedCall => ("repeated_call", "Repeated call refused"),
            Code::ApprovalCapReached => ("approval_cap_reached", "Approval limit reached"),
            Code::ApprovalDenied => ("approval_denied", "Approval denied"),
            Code::ApprovalTimeout => ("approval_timeout", "Approval timed out"),
            Code::LedgerUnavailable => ("ledger_unavailable", "Effect ledger unavailable"),
            Code::ReplayedCall => ("replayed_call", "Replayed call refused"),
            Code::ToolTimeout => ("tool_timeout", "Tool timed out"),
            Code::ToolFailed => ("tool_failed", "Tool failed"),
            Code::ResultTooLarge => ("result_too_large", "Result too large"),
            Code::InvalidResult => ("invalid_result", "Unreadable result"),
            Code::ParentSettled => ("parent_settled", "Stopped with its parent"),
            Code::Internal => ("internal", "Internal error"),
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_and_display_names_are_unique_and_round_trip() {
        let codes: HashSet<_> = Code::ALL.iter().map(|c| c.as_str()).collect();
        let names: HashSet<_> = Code::ALL.iter().map(|c| c.display_name()).collect();
        assert_eq!(codes.len(), Code::ALL.len());
        assert_eq!(names.len(), Code::ALL.len());
        for code in Code::ALL {
            assert_eq!(Code::parse(code.as_str()), Some(code));
            assert!(code.as_str().chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{code}");
        }
        assert_eq!(Code::parse("nope"), None);
    }

    #[test]
    fn caps_are_the_codes_named_for_a_cap_or_a_busy_sidecar() {
        let caps: Vec<_> = Code::ALL.into_iter().filter(|code| code.is_cap()).collect();
        for code in &caps {
            assert!(code.as_str().ends_with("_cap_reached") || *code == Code::SidecarBusy, "{code}");
        }
        assert_eq!(caps.len(), Code::ALL.iter().filter(|c| c.as_str().ends_with("_cap_reached")).count() + 1);
    }

    #[test]
    fn the_docs_list_every_code() {
        let docs = include_str!("../../../docs/results.md");
        for code in Code::ALL {
            assert!(docs.contains(&format!("`{code}`")), "docs/results.md does not list `{code}`");
            assert!(docs.contains(code.display_name()), "docs/results.md does not name `{}`", code.display_name());
        }
    }
}
