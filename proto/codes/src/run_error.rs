//! [`RunErrorKind`]: why a whole run failed, as `Finished.error.kind` says it.

use crate::string_enum;

string_enum! {
    /// Why a run failed. A run that completes has no error; a script whose calls
    /// failed still completes (failures are values). [`RunErrorKind::as_str`]
    /// is the stable name in `RunError.kind`, e.g. `"cpu_time_limit"`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum RunErrorKind {
        /// The script did not compile.
        SyntaxError => "syntax_error",
        /// The script was refused before it ran: it uses what the runtime
        /// lacks (a construct the interpreter does not have, a module it
        /// does not ship) or calls a tool with a keyword or a literal its
        /// input schema rules out. Nothing of it ran and no tool was called;
        /// the message names each line and how to write it instead.
        ScriptRefused => "script_refused",
        /// The script raised an exception it did not catch.
        RuntimeError => "runtime_error",
        /// The guest broke the `tether_v1` ABI or trapped on its own.
        GuestFault => "guest_fault",
        /// The guest does not speak the host's ABI version.
        UnsupportedAbi => "unsupported_abi",
        /// The script computed past its CPU budget.
        CpuTimeLimit => "cpu_time_limit",
        /// The script needed more memory than its cap (or the sidecar's budget).
        MemoryLimit => "memory_limit",
        /// The script's call stack overflowed.
        StackLimit => "stack_limit",
        /// The script slept past its sleep budget.
        SleepLimit => "sleep_limit",
        /// The run passed its wall deadline (the turn's deadline).
        Deadline => "deadline",
        /// The script source (or another size the run is held to) is too large.
        SizeLimit => "size_limit",
        /// The backend cancelled the run (or half-closed its stream), or the
        /// sidecar is shutting down.
        Cancelled => "cancelled",
        /// The backend broke the stream rules (an unknown or repeated result id,
        /// an unreadable message, a second `Start`).
        ProtocolError => "protocol_error",
        /// The sidecar failed; its logs have the cause.
        Internal => "internal",
        /// A run could not resume from its parked state: the state is
        /// truncated, altered, sealed with another park key, or bound to
        /// another turn or run. Nothing of the script ran.
        ParkedStateInvalid => "parked_state_invalid",
        /// A run could not resume: it was parked by another build of its
        /// runtime (or a sidecar of another park format). Resume it on a
        /// sidecar running that build. Nothing of the script ran.
        ParkedByOtherBuild => "parked_by_other_build",
        /// Backend side only (`run_script`'s error code, never in `Finished`):
        /// the sidecar could not be reached or refused the run before it began,
        /// so nothing of the script ran.
        SandboxUnavailable => "sandbox_unavailable",
        /// Backend side only (`run_script`'s error code, never in `Finished`):
        /// the sidecar went away mid-run (it crashed, or the connection broke or
        /// stalled past its keepalive), so the script stopped without `Finished`
        /// and calls it had started may have run.
        SidecarLost => "sidecar_lost",
    }
}

impl RunErrorKind {
    /// True for the kinds that mean the run passed one of its limits
    /// (`Finished.status` LIMIT_EXCEEDED).
    pub fn is_limit(self) -> bool {
        matches!(
            self,
            RunErrorKind::CpuTimeLimit
                | RunErrorKind::MemoryLimit
                | RunErrorKind::StackLimit
                | RunErrorKind::SleepLimit
                | RunErrorKind::Deadline
                | RunErrorKind::SizeLimit
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_the_docs_list_them() {
        let docs = include_str!("../../../docs/results.md");
        for kind in RunErrorKind::ALL {
            assert_eq!(RunErrorKind::parse(kind.as_str()), Some(kind));
            assert!(docs.contains(&format!("`{kind}`")), "docs/results.md does not list run error `{kind}`");
        }
        assert_eq!("cpu_time_limit".parse(), Ok(RunErrorKind::CpuTimeLimit));
        assert_eq!(RunErrorKind::ALL.len(), 18);
    }
}
