//! Step 9's records: one audit row per call, and the effect ledger
//! (`started` durable before a tool with effects runs, `settled` after).
//! Both carry the call's [`CallIdentity`].
//!
//! Where they go: the [`AuditStore`](super::AuditStore) trait (`store.rs`).

use super::approval::ApprovalVerdict;
use super::call::CallStatus;
use super::origin::CallOrigin;
use super::step::Step;
use serde_json::Value;
use std::sync::Arc;
use tether_codes::{Code, string_enum};

/// Default cap on the arguments stored in an audit or ledger row: 4 KiB.
/// Arguments over it are stored as a [marked cut](record_args); the script
/// tool's `code` is always stored whole.
pub const DEFAULT_AUDIT_ARGS_BYTES: usize = 4096;

/// The key that marks a cut in recorded arguments: `{"$truncated": true,
/// "bytes", "sha256", "head"}` (see [`record_args`]).
pub const TRUNCATED_KEY: &str = "$truncated";

/// Rewrites a call's arguments before they reach any host-side record (audit
/// row, ledger row, events, nested-call summary): `(tool, args) -> args`.
/// The tool itself always receives the original arguments.
pub type Redactor = Arc<dyn Fn(&str, &Value) -> Value + Send + Sync>;

/// Who made a call and what it asked: the part an audit row and a ledger row
/// share. Both tables of every SQL store keep it in the same columns
/// (`identity_columns!` in `audit.rs`, in this order); each store maps them in one place
/// (`sqlite/schema.rs`, `postgres/schema.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallIdentity {
    /// The turn.
    pub turn_id: String,
    /// The call's id; a ledger row's `(turn_id, call_id)` is unique.
    pub call_id: String,
    /// The immediate parent's call id (a script's calls: the `run_script` call).
    pub parent_call_id: Option<String>,
    /// The script run, for a script's call.
    pub script_run_id: Option<String>,
    /// The tool named.
    pub tool: String,
    /// `"model"` or `"script"`.
    pub origin: String,
    /// How deep in the tree of calls: 0 for a call the model made, 1 for a
    /// script's call, deeper for calls made by tools that call tools.
    pub depth: u32,
    /// The arguments as JSON text, redacted; always valid JSON. Over the
    /// turn's cap they are a marked cut ([`record_args`]), except the script
    /// tool's `code`, which is kept whole.
    pub args: String,
    /// True when [`CallIdentity::args`] holds a marked cut.
    pub args_truncated: bool,
}

impl CallIdentity {
    /// The identity of call `call_id` to `tool` in turn `turn_id`, issued by
    /// `origin`, with `args` as recorded (redacted and cut) and whether they
    /// were cut.
    pub(crate) fn new(turn_id: &str, call_id: &str, tool: &str, origin: &CallOrigin, args: (String, bool)) -> Self {
        CallIdentity {
            turn_id: turn_id.to_owned(),
            call_id: call_id.to_owned(),
            parent_call_id: origin.parent_call_id().map(str::to_owned),
            script_run_id: origin.run_id().map(str::to_owned),
            tool: tool.to_owned(),
            origin: origin.kind().to_owned(),
            depth: origin.depth(),
            args: args.0,
            args_truncated: args.1,
        }
    }
}

/// The columns a [`CallIdentity`] is stored in, in the order of its fields:
/// the same names in both tables of every SQL store (`tether-stores`).
#[macro_export]
macro_rules! identity_columns {
    () => {
        "turn_id, call_id, parent_call_id, script_run_id, tool, origin, depth, args, args_truncated"
    };
}

/// How many columns [`identity_columns!`](crate::identity_columns) names.
pub const IDENTITY_COLUMNS: usize = 9;

/// One row per call, written when the call ends, whatever the outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    /// Who made the call and what it asked.
    pub call: CallIdentity,
    /// The step that refused or ended the call; `None` when the tool returned.
    pub step: Option<Step>,
    /// The failure code: a [`Code`], or the tool's own code for status `error`.
    pub code: Option<String>,
    /// The approval verdict, when the call reached the approval step.
    pub approval: Option<ApprovalVerdict>,
    /// Who decided the approval.
    pub decided_by: Option<String>,
    /// The approver's reason for its answer, if it gave one.
    pub approval_reason: Option<String>,
    /// What went wrong, for the operator: a tool error's full text — e.g.
    /// the exception a tool raised, with its message, never shown to the
    /// model ([`ToolError::detail`](super::ToolError::detail)) — or, when the
    /// tool gave none, the message the model got (an HTTP error's status
    /// and body). `None` for a call that did not fail in its tool.
    pub detail: Option<String>,
    /// How the call ended.
    pub status: CallStatus,
    /// When the call arrived, Unix milliseconds.
    pub started_at_ms: i64,
    /// When it ended, Unix milliseconds.
    pub finished_at_ms: i64,
    /// How long it took, microseconds (monotonic clock).
    pub duration_us: i64,
}

impl AuditRecord {
    /// The display name of [`AuditRecord::code`], when it is a [`Code`].
    pub fn display_name(&self) -> Option<&'static str> {
        self.code.as_deref().and_then(Code::parse).map(Code::display_name)
    }
}

string_enum! {
    /// Whether a ledger row's call is known to have finished; stored by its
    /// name ([`LedgerState::as_str`]), `"started"` or `"settled"`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum LedgerState {
        /// Recorded before the tool ran; the effect may or may not have happened.
        Started => "started",
        /// The tool returned; [`LedgerEntry::outcome`] says how.
        Settled => "settled",
    }
}

impl LedgerState {
    /// The state a store read as `name`. The tables allow nothing else, but
    /// an unknown name counts as `Started`: the state that says the effect
    /// may have happened.
    pub fn from_stored(name: &str) -> LedgerState {
        LedgerState::parse(name).unwrap_or(LedgerState::Started)
    }
}

/// One effect-ledger row: a call of a tool with effects.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerEntry {
    /// Who made the call and what it asked.
    pub call: CallIdentity,
    /// True when the call needed approval (and got it).
    pub approval_required: bool,
    /// Started or settled.
    pub state: LedgerState,
    /// When `started` was recorded, Unix milliseconds.
    pub started_at_ms: i64,
    /// When `settled` was recorded.
    pub settled_at_ms: Option<i64>,
    /// The status the tool returned with (`ok` or `error`), once settled.
    pub outcome: Option<CallStatus>,
    /// What the tool returned, once settled, as [`RecordedResult`] JSON
    /// text — kept for calls of a resumed turn (the only calls a later
    /// resume replays); `None` otherwise, or when it was over
    /// [`LEDGER_RESULT_MAX_BYTES`]. A turn resumed after a crash answers a
    /// replay of the call from it instead of running the tool again.
    pub result: Option<String>,
}

impl LedgerEntry {
    /// A row `started` now (`started_at_ms`), not settled.
    pub fn started(call: CallIdentity, approval_required: bool, started_at_ms: i64) -> Self {
        LedgerEntry {
            call,
            approval_required,
            state: LedgerState::Started,
            started_at_ms,
            settled_at_ms: None,
            outcome: None,
            result: None,
        }
    }
}

/// The most bytes of a settled call's result the effect ledger keeps
/// ([`LedgerEntry::result`]); a larger result is not kept, and a replay of
/// the call is refused as `replayed_call` instead of answered from it.
pub const LEDGER_RESULT_MAX_BYTES: usize = 64 * 1024;

/// What a tool returned, as the effect ledger keeps it: its value, or its
/// error's code and message (never the error's private detail).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordedResult {
    /// The tool's value.
    Ok(Value),
    /// The tool's error.
    Error {
        /// Its code.
        code: String,
        /// Its message, as the caller got it.
        message: String,
    },
}

impl RecordedResult {
    /// `returned` as the ledger keeps it: JSON text, or `None` over
    /// [`LEDGER_RESULT_MAX_BYTES`].
    pub fn record(returned: &Result<crate::ToolOutput, crate::ToolError>) -> Option<String> {
        let recorded = match returned {
            Ok(output) => RecordedResult::Ok(output.value.clone()),
            Err(error) => RecordedResult::Error { code: error.code.clone(), message: error.message.clone() },
        };
        serde_json::to_string(&recorded).ok().filter(|text| text.len() <= LEDGER_RESULT_MAX_BYTES)
    }

    /// The result a ledger row keeps, if it is readable.
    pub fn parse(text: &str) -> Option<RecordedResult> {
        serde_json::from_str(text).ok()
    }

    /// As the tool returned it.
    pub fn into_returned(self) -> Result<crate::ToolOutput, crate::ToolError> {
        match self {
            RecordedResult::Ok(value) => Ok(crate::ToolOutput::new(value)),
            RecordedResult::Error { code, message } => Err(crate::ToolError::new(code, message)),
        }
    }
}

/// The arguments `args` as an audit or ledger row records them: valid JSON
/// text, and whether anything was cut.
///
/// - JSON text of at most `max` bytes is kept whole.
/// - Over `max`, the arguments are replaced by a marked cut: `{"$truncated":
///   true, "bytes": <size of the whole JSON text>, "sha256": <lowercase hex
///   digest of it>, "head": <its first bytes, as a string>}`, the head sized
///   so that the marker fits in `max` where `max` allows.
/// - With `whole_code` (the script tool), an object's string member `code`
///   is kept whole whatever its size, and only the other members count
///   against `max`: over it, each of them becomes a marked cut, sharing `max`.
pub fn record_args(args: &Value, max: usize, whole_code: bool) -> (String, bool) {
    let text = args.to_string();
    if text.len() <= max {
        return (text, false);
    }
    if whole_code
        && let Value::Object(members) = args
        && members.get("code").is_some_and(Value::is_string)
    {
        let rest: serde_json::Map<String, Value> =
            members.iter().filter(|(k, _)| *k != "code").map(|(k, v)| (k.clone(), v.clone())).collect();
        if Value::Object(rest.clone()).to_string().len() <= max {
            return (text, false);
        }
        let share = max / rest.len().max(1);
        let kept = members
            .iter()
            .map(|(key, value)| match key.as_str() {
                "code" => (key.clone(), value.clone()),
                _ => {
                    let member = value.to_string();
                    let value = if member.len() <= share { value.clone() } else { marked_cut(&member, share) };
                    (key.clone(), value)
                }
            })
            .collect();
        return (Value::Object(kept).to_string(), true);
    }
    (marked_cut(&text, max).to_string(), true)
}

/// The marked cut of JSON text `text` (see [`record_args`]), at most `max`
/// bytes as JSON where the marker's fixed part allows.
fn marked_cut(text: &str, max: usize) -> Value {
    use sha2::{Digest, Sha256};
    let sha256 = format!("{:x}", Sha256::digest(text.as_bytes()));
    let marker =
        |head: &str| serde_json::json!({TRUNCATED_KEY: true, "bytes": text.len(), "sha256": sha256, "head": head});
    // The head is escaped in the marker (quotes, backslashes, controls):
    // shrink it by what the marker is over until it fits.
    let mut budget = max.saturating_sub(marker("").to_string().len());
    loop {
        let (head, _) = cut(text, budget);
        let value = marker(&head);
        let over = value.to_string().len().saturating_sub(max);
        if over == 0 || head.is_empty() {
            return value;
        }
        budget = budget.saturating_sub(over.max(1));
    }
}

/// `text` cut to at most `max` bytes at a character boundary; `true` if cut.
pub fn cut(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_owned(), true)
}

/// Milliseconds since the Unix epoch (0 if the clock is before it): the
/// time every record and parked run is stamped with.
pub fn unix_ms(at: std::time::SystemTime) -> i64 {
    at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(recorded: &(String, bool)) -> Value {
        serde_json::from_str(&recorded.0).unwrap_or_else(|e| panic!("not JSON ({e}): {}", recorded.0))
    }

    #[test]
    fn arguments_within_the_cap_are_kept_whole() {
        let args = json!({"to": "dana@example.com"});
        assert_eq!(record_args(&args, 4096, false), (args.to_string(), false));
    }

    #[test]
    fn arguments_over_the_cap_are_a_marked_cut_that_is_valid_json_with_size_and_hash() {
        // Quotes and non-ASCII in the text: the head is escaped, and cut at a character boundary.
        let args = json!({"body": "\"é\" ".repeat(2000)});
        let text = args.to_string();
        let recorded = record_args(&args, 512, false);
        assert!(recorded.1, "marked as cut");
        assert!(recorded.0.len() <= 512, "the marker fits the cap: {} bytes", recorded.0.len());
        let cut = parsed(&recorded);
        assert_eq!(cut[TRUNCATED_KEY], json!(true));
        assert_eq!(cut["bytes"], json!(text.len()));
        use sha2::{Digest, Sha256};
        assert_eq!(cut["sha256"], json!(format!("{:x}", Sha256::digest(text.as_bytes()))));
        let head = cut["head"].as_str().unwrap();
        assert!(!head.is_empty() && text.starts_with(head), "{head}");
        // A cap too small for the marker still gives valid JSON.
        assert_eq!(parsed(&record_args(&args, 3, false))["head"], json!(""));
    }

    #[test]
    fn the_script_tools_code_is_never_cut_and_its_other_arguments_are_marked() {
        let code = "x = 1\n".repeat(1200); // 7.2 KB
        let small = json!({"code": code, "input": {"n": 1}});
        assert_eq!(record_args(&small, 4096, true), (small.to_string(), false), "whole, nothing cut");
        let big = json!({"code": code, "input": "y".repeat(9000)});
        let recorded = record_args(&big, 4096, true);
        let kept = parsed(&recorded);
        assert!(recorded.1);
        assert_eq!(kept["code"], json!(code), "the whole script");
        assert_eq!((kept["input"][TRUNCATED_KEY].clone(), kept["input"]["bytes"].clone()), (json!(true), json!(9002)));
        // Any other tool's `code` is cut like any argument.
        assert_eq!(parsed(&record_args(&small, 4096, false))[TRUNCATED_KEY], json!(true));
    }

    #[test]
    fn cutting_respects_character_boundaries() {
        assert_eq!(cut("abc", 5), ("abc".into(), false));
        assert_eq!(cut("abcdef", 3), ("abc".into(), true));
        // "é" is two bytes: cutting inside it backs off to the boundary.
        assert_eq!(cut("aé", 2), ("a".into(), true));
    }
}
