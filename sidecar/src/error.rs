//! How runs fail, who is to blame, and what the backend is told.
//!
//! [`RunEnd`] is every way a run can end; [`RunEnd::into_finished`] turns it
//! into the `Finished` message. [`RejectRun`] is every way the stream itself
//! fails; its `From` impl is the ONE place that maps to a gRPC status. Those
//! two are the only places that decide what a backend sees.
//!
//! Blame: the guest (a limit, a script error, a fault), the caller (a
//! cancellation, a protocol error, a backend that went away), or the host
//! (internal: a generic message, the cause in the logs).

use std::time::Duration;
use tether_codes::RunErrorKind;
use tether_guest::ScriptError;
use tether_proto::pb;
use tonic::Status;

/// A limit a guest passed. Carried as the error inside a wasmtime trap so the
/// run can tell it from a guest fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LimitExceeded {
    /// The script computed for longer than its CPU budget.
    #[error("the script used more than its `{}` ms of CPU time; make it do less work, or split it", limit.as_millis())]
    CpuTime {
        /// The budget.
        limit: Duration,
    },
    /// The guest tried to grow its memory past the cap.
    #[error("the script needed more than its `{limit_bytes}` bytes of memory; process data in smaller pieces")]
    Memory {
        /// The cap.
        limit_bytes: u64,
    },
    /// The sidecar's guest memory for all runs together is in use.
    #[error(
        "the sidecar's `{total_bytes}` bytes of guest memory are in use by other runs; retry later or use less memory"
    )]
    SidecarMemory {
        /// The sidecar's budget.
        total_bytes: u64,
    },
    /// The run's wall deadline passed (the turn's deadline).
    #[error("the run passed its deadline of `{}` ms (the turn's deadline)", limit.as_millis())]
    Deadline {
        /// The deadline, measured from `Start`.
        limit: Duration,
    },
    /// The script's own result is too large to send back.
    #[error(
        "the script's result is `{size}` bytes of JSON, over the `{limit}`-byte limit (max_script_result_bytes); return less (a summary, or the ids) and fetch details with tools"
    )]
    ScriptResult {
        /// The result's size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The script source is too large.
    #[error("the script is `{size}` bytes, over the `{limit}`-byte limit")]
    ScriptSize {
        /// The source's size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The guest's wasm call stack overflowed (usually runaway recursion).
    #[error("the script's call stack overflowed; is there runaway recursion?")]
    Stack,
}

impl LimitExceeded {
    /// The run error kind and the `RunError.limit` name of this limit.
    fn names(&self) -> (RunErrorKind, &'static str) {
        match self {
            LimitExceeded::CpuTime { .. } => (RunErrorKind::CpuTimeLimit, "cpu_time_ms"),
            LimitExceeded::Memory { .. } => (RunErrorKind::MemoryLimit, "memory_bytes"),
            LimitExceeded::SidecarMemory { .. } => (RunErrorKind::MemoryLimit, "total_memory_bytes"),
            LimitExceeded::Deadline { .. } => (RunErrorKind::Deadline, "deadline_ms"),
            LimitExceeded::ScriptSize { .. } => (RunErrorKind::SizeLimit, "max_script_bytes"),
            LimitExceeded::ScriptResult { .. } => (RunErrorKind::SizeLimit, "max_script_result_bytes"),
            LimitExceeded::Stack => (RunErrorKind::StackLimit, "stack"),
        }
    }
}

/// Who cancelled a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CancelledBy {
    /// The backend sent `Cancel` with this reason.
    Backend(String),
    /// The backend half-closed its stream before `Finished`.
    HalfClose,
    /// The sidecar is shutting down.
    Shutdown,
}

/// Every way a run ends.
#[derive(Debug)]
pub(crate) enum RunEnd {
    /// The script completed with this JSON result.
    Completed(serde_json::Value),
    /// The script raised or did not compile.
    ScriptFailed(ScriptError),
    /// The script passed a limit.
    Limit(LimitExceeded),
    /// The run was cancelled.
    Cancelled(CancelledBy),
    /// The backend broke the stream rules; what it did.
    ProtocolError(String),
    /// The guest broke the ABI or trapped on its own (an out-of-bounds access,
    /// `unreachable`, an abort). The guest is untrusted code, so this is its
    /// fault, reported to the backend as a script error with the trap.
    GuestFault(String),
    /// The backend stopped reading the stream: nobody is left to tell, so no
    /// `Finished` is sent. The caller's doing, not the guest's.
    BackendGone,
    /// The backend read none of the run's messages for the stall timeout:
    /// no `Finished` (it would not be read); the stream ends with
    /// [`RejectRun::Stalled`]. The caller's doing.
    Stalled,
    /// The sidecar failed.
    Internal(String),
    /// The guest parked: the service seals this and sends `Parked`, not
    /// `Finished`.
    Parked(Box<crate::park::ParkedGuest>),
    /// `Start.resume` could not resume the run: nothing of the script ran.
    ResumeRefused(crate::park::ResumeRefused),
}

impl RunEnd {
    /// A short name for logs: `completed`, `script_failed`, a limit's kind, …
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            RunEnd::Completed(_) => "completed",
            RunEnd::ScriptFailed(_) => "script_failed",
            RunEnd::Limit(limit) => limit.names().0.as_str(),
            RunEnd::Cancelled(_) => "cancelled",
            RunEnd::ProtocolError(_) => "protocol_error",
            RunEnd::GuestFault(_) => "guest_fault",
            RunEnd::BackendGone => "backend_gone",
            RunEnd::Stalled => "stream_stalled",
            RunEnd::Internal(_) => "internal",
            RunEnd::Parked(_) => "parked",
            RunEnd::ResumeRefused(refused) => refused.kind().as_str(),
        }
    }

    /// The `Finished` message for this end, with output and stats attached.
    pub(crate) fn into_finished(
        self,
        output: (Vec<u8>, Vec<u8>, bool),
        stats: pb::RunStats,
        limits: pb::Limits,
    ) -> pb::Finished {
        let (stdout, stderr, output_truncated) = output;
        let (status, result_json, error) = match self {
            RunEnd::Completed(value) => (pb::RunStatus::Ok, value.to_string(), None),
            RunEnd::ScriptFailed(e) => {
                // A limit the guest enforces itself (e.g. the sleep budget) is a limit like any other.
                let status = if RunErrorKind::parse(&e.kind).is_some_and(RunErrorKind::is_limit) {
                    pb::RunStatus::LimitExceeded
                } else {
                    pb::RunStatus::ScriptError
                };
                let error = pb::RunError {
                    kind: e.kind,
                    message: e.message,
                    exception_type: e.exception_type,
                    traceback: e.traceback,
                    line: e.line,
                    limit: e.limit,
                };
                (status, String::new(), Some(error))
            }
            RunEnd::Limit(limit) => {
                let (kind, name) = limit.names();
                (pb::RunStatus::LimitExceeded, String::new(), Some(plain_error(kind, limit.to_string(), name)))
            }
            RunEnd::Cancelled(by) => {
                let message = match by {
                    CancelledBy::Backend(reason) if reason.is_empty() => "the backend cancelled the run".to_owned(),
                    CancelledBy::Backend(reason) => format!("the backend cancelled the run: {reason}"),
                    CancelledBy::HalfClose => {
                        "the backend closed its side of the stream before `Finished`, which cancels the run".to_owned()
                    }
                    CancelledBy::Shutdown => "sidecar shutting down".to_owned(),
                };
                (pb::RunStatus::Cancelled, String::new(), Some(plain_error(RunErrorKind::Cancelled, message, "")))
            }
            RunEnd::ProtocolError(what) => {
                (pb::RunStatus::ProtocolError, String::new(), Some(plain_error(RunErrorKind::ProtocolError, what, "")))
            }
            RunEnd::GuestFault(cause) => (
                pb::RunStatus::ScriptError,
                String::new(),
                Some(plain_error(RunErrorKind::GuestFault, format!("the guest crashed: {}", cut(&cause, 1024)), "")),
            ),
            RunEnd::ResumeRefused(refused) => (
                pb::RunStatus::ResumeRefused,
                String::new(),
                Some(plain_error(refused.kind(), refused.to_string(), "")),
            ),
            // Never sent (nobody reads the stream, or `Parked` is sent
            // instead); kept total for the type's sake.
            RunEnd::BackendGone | RunEnd::Stalled | RunEnd::Internal(_) | RunEnd::Parked(_) => (
                pb::RunStatus::Internal,
                String::new(),
                Some(plain_error(
                    RunErrorKind::Internal,
                    "the sidecar failed to run the script; its logs have the cause".to_owned(),
                    "",
                )),
            ),
        };
        pb::Finished {
            status: status as i32,
            result_json,
            stdout,
            stderr,
            output_truncated,
            error,
            stats: Some(stats),
            limits: Some(limits),
        }
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
pub(crate) fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn plain_error(kind: RunErrorKind, message: String, limit: &str) -> pb::RunError {
    pb::RunError { kind: kind.as_str().to_owned(), message, limit: limit.to_owned(), ..Default::default() }
}

/// Why a run could not be admitted, or why its stream failed: the caller broke
/// the protocol, the sidecar is loading, full or draining, or the stream could
/// not be read.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum RejectRun {
    /// A malformed or out-of-order message.
    #[error("{0}")]
    Protocol(String),
    /// `Start` names a runtime the sidecar does not have.
    #[error("unknown language `{0}`; `Describe` lists the runtimes this sidecar has")]
    UnknownLanguage(String),
    /// The admission queue is full.
    #[error("the sidecar is at capacity: `{0}` runs are already queued for an execution slot; retry later")]
    QueueFull(usize),
    /// The run's `Start` would pass the sidecar's budget of `Start` bytes.
    #[error(
        "the sidecar holds `{held}` bytes of `Start` messages for other runs, and this run's `{asked}` would pass its `{budget}`-byte budget (`--max-start-mib`); retry when runs have ended, pass large data through a tool call instead of `Start.input_json`, or raise `--max-start-mib`"
    )]
    StartBytes {
        /// Bytes held for other runs.
        held: u64,
        /// Bytes this run would hold (twice its `Start`).
        asked: u64,
        /// The budget.
        budget: u64,
    },
    /// The stream did not deliver `Start` in time.
    #[error(
        "no `Start` arrived within `{}` ms of opening the run stream (`--start-timeout-seconds`); send `Start` as the stream's first message, at once", .0.as_millis()
    )]
    NoStart(Duration),
    /// The backend read none of the run's messages for this long: the run
    /// was ended, and this is all its stream still says.
    #[error(
        "the sidecar ended the run: its stream took none of the messages waiting for it for `{}` ms (`--stall-timeout-seconds`); read a run's stream while the run lasts", .0.as_millis()
    )]
    Stalled(Duration),
    /// The sidecar is draining for shutdown (or has stopped).
    #[error("the sidecar is draining for shutdown; open the run on another sidecar")]
    Draining,
    /// The sidecar is still compiling or loading its guests.
    #[error(
        "the sidecar is still loading its runtimes; retry in a few seconds, or wait until its gRPC health check for `tether.v1.Sidecar` reports SERVING"
    )]
    Loading,
    /// The sidecar could not load its runtimes (the cause is in its logs).
    #[error("the sidecar could not load its runtimes; its logs have the cause; open the run on another sidecar")]
    LoadFailed,
    /// Reading the backend's stream failed (a message over the size limit,
    /// undecodable bytes, a reset).
    #[error("reading the backend's stream failed: {}", .0.message())]
    Unreadable(Status),
    /// The client did not prove it may open runs (peer uid/gid not allowed,
    /// bearer token missing or wrong). One message for every cause, so a
    /// prober learns nothing; the sidecar logs the cause.
    #[error("this client may not open runs on the sidecar; its operator decides who may (docs/security.md)")]
    Unauthenticated,
}

impl From<crate::slots::Refused> for RejectRun {
    fn from(refused: crate::slots::Refused) -> RejectRun {
        match refused {
            crate::slots::Refused::QueueFull(queued) => RejectRun::QueueFull(queued),
            crate::slots::Refused::StartBytes { held, asked, budget } => RejectRun::StartBytes { held, asked, budget },
        }
    }
}

impl RejectRun {
    /// The `reason` label of the `runs_refused` metric.
    pub(crate) fn metric_reason(&self) -> &'static str {
        match self {
            RejectRun::Draining => "draining",
            RejectRun::Loading => "loading",
            RejectRun::QueueFull(_) => "queue_full",
            RejectRun::StartBytes { .. } => "start_bytes",
            RejectRun::NoStart(_) => "no_start",
            RejectRun::Stalled(_) => "stalled",
            RejectRun::LoadFailed => "internal",
            RejectRun::Unauthenticated => "unauthenticated",
            RejectRun::Protocol(_) | RejectRun::UnknownLanguage(_) | RejectRun::Unreadable(_) => "invalid",
        }
    }
}

impl From<RejectRun> for Status {
    fn from(reject: RejectRun) -> Status {
        let message = reject.to_string();
        match reject {
            RejectRun::Protocol(_) | RejectRun::UnknownLanguage(_) => Status::invalid_argument(message),
            RejectRun::QueueFull(_) | RejectRun::StartBytes { .. } => Status::resource_exhausted(message),
            RejectRun::NoStart(_) | RejectRun::Stalled(_) => Status::deadline_exceeded(message),
            RejectRun::Draining | RejectRun::Loading => Status::unavailable(message),
            RejectRun::LoadFailed => Status::internal(message),
            RejectRun::Unauthenticated => Status::unauthenticated(message),
            RejectRun::Unreadable(status) => match status.code() {
                // Over the message size limit.
                tonic::Code::OutOfRange | tonic::Code::ResourceExhausted => Status::resource_exhausted(message),
                // Undecodable bytes are the caller's fault, whatever the decoder said.
                tonic::Code::Internal | tonic::Code::InvalidArgument => Status::invalid_argument(message),
                code => Status::new(code, message),
            },
        }
    }
}
