//! [`Code`]: the one list of call failure codes and their display names.

use crate::string_enum;

string_enum! {
    /// Why a tool call produced no value: a refusal, a denial, a time-out, a
    /// cancellation, or a fault around the tool. Each has a stable machine code
    /// ([`Code::as_str`]) and a display name ([`Code::display_name`]), fixed here
    /// and nowhere else. A refused call carries the same code whether the model or
    /// a script issued it, and whether the sidecar or the turn refused it.
    ///
    /// A tool that runs and reports its own failure is not a `Code`: it keeps the
    /// tool's own code.
    ///
    /// [`Code::ALL`] lists the codes in the order `docs/results.md` does.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Code {
        /// The turn was cancelled, or the run ended while the call waited.
        Cancelled => "cancelled",
        /// The turn's deadline passed.
        TurnDeadlineExceeded => "turn_deadline_exceeded",
        /// The turn-wide tool-call cap is spent (calls in flight count).
        ToolCallCapReached => "tool_call_cap_reached",
        /// The call is nested deeper than the turn allows.
        DepthLimitExceeded => "depth_limit_exceeded",
        /// The script passed its per-script call cap (refused by the sidecar).
        ScriptCallCapReached => "script_call_cap_reached",
        /// The script had too many calls refused; later calls are not evaluated.
        RefusalCapReached => "refusal_cap_reached",
        /// Too many runs wait on tool results in the sidecar.
        SidecarBusy => "sidecar_busy",
        /// No tool of that name is in the turn's list.
        ToolNotFound => "tool_not_found",
        /// The tool is deferred (listed by name only) and not activated yet.
        ToolNotActivated => "tool_not_activated",
        /// The tool may not be called from a script (asks the user, runs on the
        /// user's device, is the script tool, or is a meta tool).
        NotCallableFromScript => "not_callable_from_script",
        /// The arguments are not a JSON object, or do not match the tool's schema.
        InvalidArguments => "invalid_arguments",
        /// The arguments are over the size limit.
        ArgumentsTooLarge => "arguments_too_large",
        /// The administrator's policy blocks the call.
        PolicyDenied => "policy_denied",
        /// The user's permissions block the call.
        PermissionDenied => "permission_denied",
        /// An identical call already passed the pre-execution check in this turn.
        RepeatedCall => "repeated_call",
        /// The turn's cap on approval-required calls is spent.
        ApprovalCapReached => "approval_cap_reached",
        /// The approver said no.
        ApprovalDenied => "approval_denied",
        /// The approver did not answer within the approval wait limit.
        ApprovalTimeout => "approval_timeout",
        /// The effect ledger could not record `started`, so the tool was not run.
        LedgerUnavailable => "ledger_unavailable",
        /// The effect ledger already holds this call id; a tool with effects never
        /// runs twice under one id.
        ReplayedCall => "replayed_call",
        /// The call was started by a process that ended before it settled: it
        /// may have run, so it is not run again.
        PossiblyExecuted => "possibly_executed",
        /// The script run is parked: calls it waits on wait for a person's
        /// approval, and the run resumes when they are answered
        /// (`docs/parking.md`). What the caller of the script tool — or of an
        /// agent tool whose nested turn parked — gets in the process that
        /// parked it.
        RunParked => "run_parked",
        /// The tool ran past its own time limit.
        ToolTimeout => "tool_timeout",
        /// The tool failed: inside the host (its executor panicked), in what runs
        /// it (an MCP server that is down or died, a command that could not
        /// start), or it reported a failure with no code of its own (an MCP
        /// `isError` result, an HTTP error status, a command's nonzero exit).
        ToolFailed => "tool_failed",
        /// The tool ran, but its result is over the size limit: the effect
        /// happened and the result was not handed back.
        ResultTooLarge => "result_too_large",
        /// The tool ran, but its result cannot be handed back (not JSON, or nested
        /// too deep).
        InvalidResult => "invalid_result",
        /// The call was dropped because its parent settled first.
        ParentSettled => "parent_settled",
        /// A fault in Tether itself (a guest runtime got no result for a call).
        Internal => "internal",
    }
}

impl Code {
    /// The name shown to a person, e.g. `"Blocked by policy"`.
    pub fn display_name(self) -> &'static str {
        match self {
            Code::Cancelled => "Cancelled",
            Code::TurnDeadlineExceeded => "Turn deadline passed",
            Code::ToolCallCapReached => "Tool call limit reached",
            Code::DepthLimitExceeded => "Nested too deep",
            Code::ScriptCallCapReached => "Script call limit reached",
            Code::RefusalCapReached => "Too many refused calls",
            Code::SidecarBusy => "Script sandbox busy",
            Code::ToolNotFound => "Unknown tool",
            Code::ToolNotActivated => "Tool not activated",
            Code::NotCallableFromScript => "Not available in scripts",
            Code::InvalidArguments => "Invalid arguments",
            Code::ArgumentsTooLarge => "Arguments too large",
            Code::PolicyDenied => "Blocked by policy",
            Code::PermissionDenied => "Blocked by your permissions",
            Code::RepeatedCall => "Repeated call refused",
            Code::ApprovalCapReached => "Approval limit reached",
            Code::ApprovalDenied => "Approval denied",
            Code::ApprovalTimeout => "Approval timed out",
            Code::LedgerUnavailable => "Effect ledger unavailable",
            Code::ReplayedCall => "Replayed call refused",
            Code::PossiblyExecuted => "May have run",
            Code::RunParked => "Parked for approval",
            Code::ToolTimeout => "Tool timed out",
            Code::ToolFailed => "Tool failed",
            Code::ResultTooLarge => "Result too large",
            Code::InvalidResult => "Unreadable result",
            Code::ParentSettled => "Stopped with its parent",
            Code::Internal => "Internal error",
        }
    }

    /// True when the tool ran (its effect may have happened) even though the
    /// caller got no value: the call must not be repeated blindly.
    pub fn tool_ran(self) -> bool {
        matches!(self, Code::ResultTooLarge | Code::InvalidResult | Code::PossiblyExecuted)
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
        assert_eq!("policy_denied".parse(), Ok(Code::PolicyDenied));
        let error = "Policy_Denied".parse::<Code>().unwrap_err();
        assert_eq!(error.name, "Policy_Denied");
        assert_eq!(error.expected, Code::ALL.map(Code::as_str));
        assert!(error.to_string().starts_with("unknown `Code` `Policy_Denied`: expected one of `cancelled`, "));
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
