//! The nested-call summary in the script tool's host-only metadata:
//! `nested_calls` (at most 32 entries) and `nested_calls_truncated`.

use super::audit::cut;
use super::call::{CallOutcome, CallResult, CallStatus};
use serde_json::{Map, Value, json};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries kept in `nested_calls`; later calls are only counted.
pub const MAX_NESTED_ENTRIES: usize = 32;
/// Bytes of a nested call's serialized arguments kept (payload capture only).
pub const NESTED_ARGS_BYTES: usize = 1024;
/// Bytes of a nested call's error kept (payload capture only, except for
/// abandoned calls, whose error is always given).
pub const NESTED_ERROR_BYTES: usize = 256;

/// Collects one run's nested calls as they start and settle. A call that
/// starts and never settles (the run ended first) is `abandoned`.
#[derive(Debug)]
pub struct NestedSummary {
    capture: bool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: Vec<Entry>,
    truncated: usize,
}

#[derive(Debug)]
struct Entry {
    id: String,
    name: String,
    started: Instant,
    args: Option<String>,
    settled: Option<(CallStatus, Duration, Option<String>)>,
}

/// The handle of one started entry; `None` when past the entry cap.
#[derive(Debug, Clone, Copy)]
pub struct Slot(Option<usize>);

impl NestedSummary {
    /// A summary that keeps arguments and errors when `capture` is on.
    pub fn new(capture: bool) -> Self {
        NestedSummary { capture, state: Mutex::new(State::default()) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that call `id` to `name` started.
    pub fn begin(&self, id: &str, name: &str) -> Slot {
        let mut state = self.state();
        if state.entries.len() >= MAX_NESTED_ENTRIES {
            state.truncated += 1;
            return Slot(None);
        }
        state.entries.push(Entry {
            id: id.to_owned(),
            name: name.to_owned(),
            started: Instant::now(),
            args: None,
            settled: None,
        });
        Slot(Some(state.entries.len() - 1))
    }

    /// Notes how the call in `slot` settled, with its arguments as the
    /// turn recorded them (already redacted).
    pub fn settle(&self, slot: Slot, result: &CallResult) {
        let Slot(Some(index)) = slot else { return };
        let mut state = self.state();
        let Some(entry) = state.entries.get_mut(index) else { return };
        entry.args = self.capture.then(|| cut(&result.recorded_args, NESTED_ARGS_BYTES).0);
        let error = match &result.outcome {
            CallOutcome::Ok(_) => None,
            CallOutcome::ToolError { code, message } => Some(format!("{code}: {message}")),
            CallOutcome::Failed(failure) => Some(format!("{}: {}", failure.code, failure.message)),
        };
        entry.settled = Some((result.status(), entry.started.elapsed(), error));
    }

    /// `{"nested_calls": [...]}`, plus `"nested_calls_truncated": n` when
    /// calls past the cap were left out.
    pub fn to_json(&self) -> Value {
        let state = self.state();
        let calls: Vec<Value> = state
            .entries
            .iter()
            .map(|e| {
                let (status, duration, error) = match &e.settled {
                    Some((status, duration, error)) => {
                        (*status, *duration, if self.capture { error.clone() } else { None })
                    }
                    None => {
                        (CallStatus::Abandoned, e.started.elapsed(), Some("parent settled before the call".to_owned()))
                    }
                };
                let mut entry = Map::new();
                entry.insert("id".into(), json!(e.id));
                entry.insert("name".into(), json!(e.name));
                entry.insert("status".into(), json!(status.as_str()));
                entry.insert("duration_ms".into(), json!(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)));
                if let Some(args) = &e.args {
                    entry.insert("args".into(), json!(args));
                }
                if let Some(error) = error.filter(|e| !e.is_empty()) {
                    entry.insert("error".into(), json!(cut(&error, NESTED_ERROR_BYTES).0));
                }
                Value::Object(entry)
            })
            .collect();
        let mut summary = Map::new();
        summary.insert("nested_calls".into(), Value::Array(calls));
        if state.truncated > 0 {
            summary.insert("nested_calls_truncated".into(), json!(state.truncated));
        }
        Value::Object(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Failure;
    use crate::step::Step;

    fn result(outcome: CallOutcome, args: Value) -> CallResult {
        let recorded_args = args.to_string();
        CallResult { call_id: "x".into(), tool: "t".into(), outcome, metadata: None, approval: None, recorded_args }
    }

    #[test]
    fn statuses_caps_and_truncation() {
        let summary = NestedSummary::new(true);
        let ok = summary.begin("p/1", "leaf");
        let big = summary.begin("p/2", "ghost");
        let _abandoned = summary.begin("p/3", "hold");
        let tool_error = summary.begin("p/4", "get_contract");
        summary.settle(ok, &result(CallOutcome::Ok(json!(1)), json!({"n": 7})));
        let not_found = Failure::reported("tool_not_found", Step::Lookup, "é".repeat(300));
        summary.settle(big, &result(CallOutcome::Failed(not_found), json!({"blob": "x".repeat(4000)})));
        let error = CallOutcome::ToolError { code: "not_found".into(), message: "no".into() };
        summary.settle(tool_error, &result(error, json!({})));
        for n in 5..=40 {
            summary.begin(&format!("p/{n}"), "leaf");
        }
        let json = summary.to_json();
        let calls = json["nested_calls"].as_array().unwrap();
        assert_eq!(calls.len(), MAX_NESTED_ENTRIES);
        assert_eq!(json["nested_calls_truncated"], json!(40 - MAX_NESTED_ENTRIES));
        assert_eq!(calls[0]["status"], "ok");
        assert_eq!(calls[0]["args"], r#"{"n":7}"#);
        assert!(calls[0].get("error").is_none());
        assert_eq!(calls[1]["status"], "failed");
        assert_eq!(calls[1]["args"].as_str().unwrap().len(), NESTED_ARGS_BYTES);
        let error = calls[1]["error"].as_str().unwrap();
        assert!(error.starts_with("tool_not_found: "), "{error}");
        assert!(error.len() <= NESTED_ERROR_BYTES && error.len() > NESTED_ERROR_BYTES - 2, "cut at a char boundary");
        assert_eq!(calls[2]["status"], "abandoned");
        assert_eq!(calls[3]["status"], "error");
        assert_eq!(calls[3]["error"], "not_found: no");
    }

    #[test]
    fn without_capture_only_abandoned_calls_carry_an_error() {
        let summary = NestedSummary::new(false);
        let failed = summary.begin("p/1", "ghost");
        summary.begin("p/2", "hold");
        let not_found = Failure::reported("tool_not_found", Step::Lookup, "no");
        summary.settle(failed, &result(CallOutcome::Failed(not_found), json!({"secret": 1})));
        let json = summary.to_json();
        let calls = json["nested_calls"].as_array().unwrap();
        assert!(calls[0].get("args").is_none() && calls[0].get("error").is_none(), "{json}");
        assert_eq!(calls[1]["status"], "abandoned");
        assert!(calls[1]["error"].is_string());
        assert!(json.get("nested_calls_truncated").is_none());
    }
}
