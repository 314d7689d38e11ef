//! [`RunErrorKind`]: why a whole run failed, as `Finished.error.kind` says it.

use std::fmt;

/// Why a run failed. A run that completes has no error; a script whose calls
/// failed still completes (failures are values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunErrorKind {
    /// The script did not compile.
    SyntaxError,
    /// The script raised an exception it did not catch.
    RuntimeError,
    /// The guest broke the `tether_v1` ABI or trapped on its own.
    GuestFault,
    /// The guest does not speak the host's ABI version.
    UnsupportedAbi,
    /// The script computed past its CPU budget.
    CpuTimeLimit,
    /// The script needed more memory than its cap (or the sidecar's budget).
    MemoryLimit,
    /// The script's call stack overflowed.
    StackLimit,
    /// The script slept past its sleep budget.
    SleepLimit,
    /// The run passed its wall deadline (the turn's deadline).
    Deadline,
    /// The script source (or another size the run is held to) is too large.
    SizeLimit,
    /// The backend cancelled the run (or half-closed its stream), or the
    /// sidecar is shutting down.
    Cancelled,
    /// The backend broke the stream rules (an unknown or repeated result id,
    /// an unreadable message, a second `Start`).
    ProtocolError,
    /// The sidecar failed; its logs have the cause.
    Internal,
    /// Backend side only (`run_script`'s error code, never in `Finished`):
    /// the sidecar could not be reached or refused the run before it began,
    /// so nothing of the script ran.
    SandboxUnavailable,
    /// Backend side only (`run_script`'s error code, never in `Finished`):
    /// the sidecar went away mid-run (it crashed, or the connection broke or
    /// stalled past its keepalive), so the script stopped without `Finished`
    /// and calls it had started may have run.
    SidecarLost,
}

impl RunErrorKind {
    /// Every kind.
    pub const ALL: [RunErrorKind; 15] = [
        RunErrorKind::SyntaxError,
        RunErrorKind::RuntimeError,
        RunErrorKind::GuestFault,
        RunErrorKind::UnsupportedAbi,
        RunErrorKind::CpuTimeLimit,
        RunErrorKind::MemoryLimit,
        RunErrorKind::StackLimit,
        RunErrorKind::SleepLimit,
        RunErrorKind::Deadline,
        RunErrorKind::SizeLimit,
        RunErrorKind::Cancelled,
        RunErrorKind::ProtocolError,
        RunErrorKind::Internal,
        RunErrorKind::SandboxUnavailable,
        RunErrorKind::SidecarLost,
    ];

    /// The stable name in `RunError.kind`, e.g. `"cpu_time_limit"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunErrorKind::SyntaxError => "syntax_error",
            RunErrorKind::RuntimeError => "runtime_error",
            RunErrorKind::GuestFault => "guest_fault",
            RunErrorKind::UnsupportedAbi => "unsupported_abi",
            RunErrorKind::CpuTimeLimit => "cpu_time_limit",
            RunErrorKind::MemoryLimit => "memory_limit",
            RunErrorKind::StackLimit => "stack_limit",
            RunErrorKind::SleepLimit => "sleep_limit",
            RunErrorKind::Deadline => "deadline",
            RunErrorKind::SizeLimit => "size_limit",
            RunErrorKind::Cancelled => "cancelled",
            RunErrorKind::ProtocolError => "protocol_error",
            RunErrorKind::Internal => "internal",
            RunErrorKind::SandboxUnavailable => "sandbox_unavailable",
            RunErrorKind::SidecarLost => "sidecar_lost",
        }
    }

    /// The kind named `name` by [`RunErrorKind::as_str`], if any.
    pub fn parse(name: &str) -> Option<RunErrorKind> {
        RunErrorKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

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

impl fmt::Display for RunErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
    }
}
