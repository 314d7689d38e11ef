//! The steps of the one execution path. The failure codes themselves, their
//! display names and messages are defined once for the whole system, in
//! `tether_codes` (`Code`, `Reason`).

use std::fmt;

/// The step of the one execution path, in the order the steps run.
///
/// A call refused at one step never reaches a later one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// 0: refused in the sidecar before it reached the turn (the per-script
    /// cap, arguments not an object or too large, too many waiting runs); the
    /// turn only records it.
    Sidecar,
    /// 1: the turn is still running, the turn-wide call cap has room, the
    /// call is not nested too deep, and (scripts) the run's refusal cap has room.
    Budget,
    /// 2: the tool is in the turn's current list and activated.
    Lookup,
    /// 3: the tool may be called from where the call comes from: a script may
    /// not call excluded tools, and no tool that nests is called at the
    /// deepest level.
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
            Step::Sidecar => "sidecar",
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
    pub const ALL: [Step; 9] = [
        Step::Sidecar,
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

#[cfg(test)]
mod tests {
    use super::*;

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
