//! How a run ended.

use serde_json::Value;
use tether_proto::pb;

/// The end of a run, from the sidecar's `Finished`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// How the run ended.
    pub status: pb::RunStatus,
    /// The script's result (the value of its last expression) when `status` is OK.
    pub result: Option<Value>,
    /// What the script printed (within the output limit), decoded as UTF-8
    /// (a sequence cut at the limit, or not UTF-8, shows as U+FFFD).
    pub stdout: String,
    /// What the script wrote to stderr, decoded the same way.
    pub stderr: String,
    /// True when output was dropped at the limit.
    pub output_truncated: bool,
    /// Why the run failed, unless it completed.
    pub error: Option<pb::RunError>,
    /// What the run used.
    pub stats: pb::RunStats,
    /// The limits the run ran under.
    pub limits: pb::Limits,
    /// Times the run parked and was resumed on a new stream
    /// (`RunRequest::may_park`; `docs/parking.md`).
    pub parks: u32,
    /// The run parked waiting only on calls its handler handed off
    /// ([`CallHandler::hand_off`](crate::CallHandler::hand_off)): it is not over, and
    /// this is what resumes it, in any process. `status` is then
    /// `UNSPECIFIED`.
    pub handed_off: Option<HandedOff>,
}

/// A parked run whose awaited calls were handed off: what resumes it with
/// [`SidecarClient::resume_until`](crate::SidecarClient::resume_until).
#[derive(Debug, Clone, PartialEq)]
pub struct HandedOff {
    /// The run's `Start`, without `resume`.
    pub start: pb::Start,
    /// What the sidecar handed over: the sealed state, the ids awaited, the stats so far.
    pub parked: pb::Parked,
    /// Results of awaited calls already served before the run parked.
    pub answered: Vec<pb::ToolResult>,
}

impl RunOutcome {
    pub(crate) fn from_finished(finished: pb::Finished) -> RunOutcome {
        let status = pb::RunStatus::try_from(finished.status).unwrap_or(pb::RunStatus::Unspecified);
        let result =
            if finished.result_json.is_empty() { None } else { serde_json::from_str(&finished.result_json).ok() };
        RunOutcome {
            status,
            result,
            stdout: String::from_utf8_lossy(&finished.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&finished.stderr).into_owned(),
            output_truncated: finished.output_truncated,
            error: finished.error,
            stats: finished.stats.unwrap_or_default(),
            limits: finished.limits.unwrap_or_default(),
            parks: 0,
            handed_off: None,
        }
    }

    /// A run handed off while parked.
    pub(crate) fn from_hand_off(handed_off: HandedOff, parks: u32) -> RunOutcome {
        RunOutcome {
            status: pb::RunStatus::Unspecified,
            result: None,
            stdout: String::new(),
            stderr: String::new(),
            output_truncated: false,
            error: None,
            stats: handed_off.parked.stats.unwrap_or_default(),
            limits: pb::Limits::default(),
            parks,
            handed_off: Some(handed_off),
        }
    }

    /// The end of a run cancelled while it was parked: nothing of it is
    /// left anywhere, and its output went to the handler as it was printed.
    pub(crate) fn cancelled_while_parked(parked: pb::Parked, parks: u32) -> RunOutcome {
        RunOutcome {
            status: pb::RunStatus::Cancelled,
            result: None,
            stdout: String::new(),
            stderr: String::new(),
            output_truncated: false,
            error: Some(pb::RunError {
                kind: tether_codes::RunErrorKind::Cancelled.as_str().to_owned(),
                message: "the backend cancelled the run while it was parked".to_owned(),
                ..Default::default()
            }),
            stats: parked.stats.unwrap_or_default(),
            limits: pb::Limits::default(),
            parks,
            handed_off: None,
        }
    }

    /// True when the script completed.
    pub fn is_ok(&self) -> bool {
        self.status == pb::RunStatus::Ok
    }

    /// The error kind (`"runtime_error"`, `"cpu_time_limit"`, …), or `""`.
    pub fn error_kind(&self) -> &str {
        self.error.as_ref().map_or("", |e| e.kind.as_str())
    }
}
