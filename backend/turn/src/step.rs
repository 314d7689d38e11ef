//! The steps of the one execution path. The failure codes themselves, their
//! display names and messages are defined once for the whole system, in
//! `tether_codes` (`Code`, `Reason`).

use tether_codes::string_enum;

string_enum! {
    /// The step of the one execution path, in the order the steps run:
    /// [`Step::ALL`] holds every step, in execution order, and `Ord` compares
    /// them in it. Each has a stable name ([`Step::as_str`]) stored in the
    /// audit log, e.g. `"pre_execution"`.
    ///
    /// A call refused at one step never reaches a later one.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Step {
        /// 0: refused in the sidecar before it reached the turn (the per-script
        /// cap, arguments not an object or too large, too many waiting runs); the
        /// turn only records it.
        Sidecar => "sidecar",
        /// 1: the turn is still running, the turn-wide call cap has room, the
        /// call is not nested too deep, and (scripts) the run's refusal cap has room.
        Budget => "budget",
        /// 2: the tool is in the turn's current list and activated.
        Lookup => "lookup",
        /// 3: the tool may be called from where the call comes from: a script may
        /// not call excluded tools, and no tool that nests is called at the
        /// deepest level.
        ScriptExclusion => "script_exclusion",
        /// 4: the arguments match the tool's input JSON Schema.
        Arguments => "arguments",
        /// 5: the administrator's policy and the user's permission blocks.
        Policy => "policy",
        /// 6: the pre-execution check, which judges and records in one step.
        PreExecution => "pre_execution",
        /// 7: the approver's decision, within the turn's approval wait limit.
        Approval => "approval",
        /// 8: the tool runs under its time limit and the turn's deadline.
        Execution => "execution",
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
        // The names are stored in audit logs: they never change.
        let names = [
            "sidecar",
            "budget",
            "lookup",
            "script_exclusion",
            "arguments",
            "policy",
            "pre_execution",
            "approval",
            "execution",
        ];
        assert_eq!(Step::ALL.map(Step::as_str), names);
    }
}
