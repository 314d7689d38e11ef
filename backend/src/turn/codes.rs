//! Every failure code and display name of the one execution path, in one place.
//!
//! A refused call carries the same [`Code`] (and so the same machine code and
//! display name) whether the model or a script issued it; only the audit
//! row's origin differs.

use std::fmt;

/// The step of the one execution path, in the order the steps run.
///
/// A call refused at one step never reaches a later one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// 1: the turn is still running and the turn-wide call cap has room.
    Budget,
    /// 2: the tool is in the turn's current list and activated.
    Lookup,
    /// 3: script origin only: the tool may be called from a script.
    ScriptExclusion,
    /// 4: the arguments match the tool's input JSON Schema.
    Arguments,
    /// 5: the administrator's policy and the user's permission blocks.
    Policy,
    /// 6: the pre-execution check, which judges and records in one step.
    PreExecution,
    /// 7: the approver's decision, within the turn's approval wait limit.
    Approval,
    /// 8: the tool runs under its time limit and the turn's deadline.
    Execution,
}

impl Step {
    /// The stable name stored in the audit log, e.g. `"pre_execution"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Budget => "budget",
            Step::Lookup => "lookup",
            Step::ScriptExclusion => "script_exclusion",
            Step::Arguments => "arguments",
            Step::Policy => "policy",
            Step::PreExecution => "pre_execution",
            Step::Approval => "approval",
            Step::Execution => "execution",
        }
    }

    /// The step named `name` by [`Step::as_str`], if any.
    pub fn parse(name: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Every step, in execution order.
    pub const ALL: [Step; 8] = [
        Step::Budget,
        Step::Lookup,
        Step::ScriptExclusion,
        Step::Arguments,
        Step::Policy,
        Step::PreExecution,
        Step::Approval,
        Step::Execution,
    ];
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a call produced no value: a refusal, a denial, a time-out, a
/// cancellation, or a fault around the tool. Each has a stable machine code
/// ([`Code::as_str`]) and a display name ([`Code::display_name`]), both fixed
/// here and nowhere else.
///
/// A tool that runs and reports its own failure is not a `Code`: it keeps the
/// tool's own code (see `CallOutcome::ToolError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// The turn was cancelled.
    Cancelled,
    /// The turn's deadline passed.
    TurnDeadlineExceeded,
    /// The turn-wide tool-call cap is spent (calls in flight count).
    ToolCallCapReached,
    /// No tool of that name is in the turn's list.
    ToolNotFound,
    /// The tool is deferred (listed by name only) and not activated yet.
    ToolNotActivated,
    /// The tool may not be called from a script (asks the user, runs on the
    /// user's device, is the script tool, or is a meta tool).
    NotCallableFromScript,
    /// The arguments do not match the tool's input schema.
    InvalidArguments,
    /// The administrator's policy blocks the call.
    PolicyDenied,
    /// The user's permissions block the call.
    PermissionDenied,
    /// The tool refuses an identical repeat and this call repeats an earlier one.
    RepeatedCall,
    /// The turn's cap on approval-required calls is spent.
    ApprovalCapReached,
    /// The approver said no.
    ApprovalDenied,
    /// The approver did not answer within the approval wait limit.
    ApprovalTimeout,
    /// The effect ledger could not record `started`, so the tool was not run.
    LedgerUnavailable,
    /// The effect ledger already holds this call id and the tool may not run
    /// again under it, so the tool was not run.
    ReplayedCall,
    /// The tool ran past its own time limit.
    ToolTimeout,
    /// The tool's executor panicked.
    ToolFailed,
    /// The call was dropped because its parent settled first.
    ParentSettled,
    /// The script passed its per-script call cap (audited once per run by the
    /// backend; the sidecar refuses the calls themselves).
    ScriptCallCapReached,
}

impl Code {
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

    fn names(self) -> (&'static str, &'static str) {
        match self {
            Code::Cancelled => ("cancelled", "Cancelled"),
            Code::TurnDeadlineExceeded => ("turn_deadline_exceeded", "Turn deadline passed"),
            Code::ToolCallCapReached => ("tool_call_cap_reached", "Tool call limit reached"),
            Code::ToolNotFound => ("tool_not_found", "Unknown tool"),
            Code::ToolNotActivated => ("tool_not_activated", "Tool not activated"),
            Code::NotCallableFromScript => ("not_callable_from_script", "Not available in scripts"),
            Code::InvalidArguments => ("invalid_arguments", "Invalid arguments"),
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
            Code::ParentSettled => ("parent_settled", "Stopped with its parent"),
            Code::ScriptCallCapReached => ("script_call_cap_reached", "Script call limit reached"),
        }
    }

    /// Every code.
    pub const ALL: [Code; 19] = [
        Code::Cancelled,
        Code::TurnDeadlineExceeded,
        Code::ToolCallCapReached,
        Code::ToolNotFound,
        Code::ToolNotActivated,
        Code::NotCallableFromScript,
        Code::InvalidArguments,
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
        Code::ParentSettled,
        Code::ScriptCallCapReached,
    ];
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
    fn steps_round_trip_in_order() {
        for pair in Step::ALL.windows(2) {
            assert!(pair[0] < pair[1]);
        }
        for step in Step::ALL {
            assert_eq!(Step::parse(step.as_str()), Some(step));
        }
    }
}
