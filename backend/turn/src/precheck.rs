//! Step 6: the pre-execution check, which judges AND records in one step.
//!
//! It remembers each call that passes and refuses the same call (same tool,
//! same canonical arguments) when it comes again in the turn — by default for
//! every tool that is not read-only (see `RepeatRule`) — and counts calls that
//! need approval against their cap. Judging without recording would let a
//! script repeat an identical call any number of times, or slip past the
//! approval cap, by racing its own calls. Here one lock covers both.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use tether_codes::Reason;

/// What the check remembers of the turn: the calls that passed it (for the
/// repeat rule) and how many approval-required calls passed.
#[derive(Debug)]
pub struct PreExecutionCheck {
    max_approval_calls: u32,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Each call that passed, by its canonical key: the id it passed under.
    seen: HashMap<String, String>,
    approval_calls: u32,
}

impl PreExecutionCheck {
    /// A check allowing `max_approval_calls` approval-required calls per turn.
    pub fn new(max_approval_calls: u32) -> Self {
        PreExecutionCheck { max_approval_calls, state: Mutex::new(State::default()) }
    }

    /// Judges call `call_id` and, if it passes, records it, under one lock.
    ///
    /// Refuses with [`Reason::RepeatedCall`] (naming the earlier call) when
    /// `refuse_repeat` is set and an identical call (same tool, same
    /// arguments up to key order) passed before; with [`Reason::ApprovalCap`]
    /// when `needs_approval` is set and the cap is spent. A call that passes
    /// is remembered, and counted against the approval cap whatever the
    /// approver later decides. A refused call is not remembered.
    pub fn judge_and_record(
        &self,
        call_id: &str,
        tool: &str,
        args: &Value,
        refuse_repeat: bool,
        needs_approval: bool,
    ) -> Result<(), Reason> {
        let key = call_key(tool, args);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if refuse_repeat && let Some(earlier) = state.seen.get(&key) {
            return Err(Reason::RepeatedCall { tool: tool.to_owned(), earlier_call_id: earlier.clone() });
        }
        if needs_approval && state.approval_calls >= self.max_approval_calls {
            return Err(Reason::ApprovalCap { max: self.max_approval_calls });
        }
        state.seen.entry(key).or_insert_with(|| call_id.to_owned());
        if needs_approval {
            state.approval_calls += 1;
        }
        Ok(())
    }

    /// The cap on approval-required calls.
    pub fn max_approval_calls(&self) -> u32 {
        self.max_approval_calls
    }

    /// What the check remembers, for a parked run's snapshot: each call key
    /// that passed with the id it passed under, and the approval-required
    /// calls counted.
    pub fn remembered(&self) -> (HashMap<String, String>, u32) {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (state.seen.clone(), state.approval_calls)
    }

    /// A check that remembers what [`remembered`](Self::remembered) gave:
    /// the turn a parked run resumes in goes on under the same memory.
    pub fn restored(max_approval_calls: u32, seen: HashMap<String, String>, approval_calls: u32) -> Self {
        PreExecutionCheck { max_approval_calls, state: Mutex::new(State { seen, approval_calls }) }
    }
}

/// `tool` + the arguments in canonical form (object keys sorted at every
/// level), so `{"a":1,"b":2}` and `{"b":2,"a":1}` are the same call.
fn call_key(tool: &str, args: &Value) -> String {
    let mut out = String::with_capacity(tool.len() + 64);
    out.push_str(tool);
    out.push('\0');
    canonical(args, &mut out);
    out
}

fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tether_codes::Code;

    fn code(result: Result<(), Reason>) -> Option<Code> {
        result.err().map(|r| r.code())
    }

    #[test]
    fn an_identical_repeat_is_refused_only_where_the_tool_says_so() {
        let check = PreExecutionCheck::new(10);
        let args = json!({"a": 1, "b": {"x": [1, 2], "y": null}});
        let reordered: Value = serde_json::from_str(r#"{"b": {"y": null, "x": [1, 2]}, "a": 1}"#).unwrap();
        assert_eq!(check.judge_and_record("c1", "t", &args, true, false), Ok(()));
        let repeat = check.judge_and_record("c2", "t", &reordered, true, false);
        assert_eq!(repeat, Err(Reason::RepeatedCall { tool: "t".into(), earlier_call_id: "c1".into() }));
        assert!(repeat.unwrap_err().message().contains("`c1`"), "the refusal names the earlier call");
        assert_eq!(check.judge_and_record("c3", "t", &json!({"a": 2}), true, false), Ok(()));
        assert_eq!(check.judge_and_record("c4", "u", &args, true, false), Ok(()), "another tool is another call");
        assert_eq!(
            check.judge_and_record("c5", "t", &args, false, false),
            Ok(()),
            "a tool without the rule allows repeats"
        );
    }

    #[test]
    fn approval_required_calls_are_counted_when_they_pass() {
        let check = PreExecutionCheck::new(2);
        assert_eq!(check.judge_and_record("c1", "mail", &json!({"n": 1}), false, true), Ok(()));
        assert_eq!(check.judge_and_record("c2", "read", &json!({}), false, false), Ok(()), "not counted");
        assert_eq!(check.judge_and_record("c3", "mail", &json!({"n": 2}), false, true), Ok(()));
        assert_eq!(
            code(check.judge_and_record("c4", "mail", &json!({"n": 3}), false, true)),
            Some(Code::ApprovalCapReached)
        );
        assert_eq!(check.judge_and_record("c5", "read", &json!({}), false, false), Ok(()));
    }

    #[test]
    fn a_refused_call_is_not_remembered_and_does_not_count() {
        let check = PreExecutionCheck::new(1);
        assert_eq!(check.judge_and_record("c1", "mail", &json!({}), true, true), Ok(()));
        assert_eq!(code(check.judge_and_record("c2", "mail", &json!({}), true, true)), Some(Code::RepeatedCall));
        let capped = check.judge_and_record("c3", "mail", &json!({"n": 2}), true, true);
        assert_eq!(code(capped), Some(Code::ApprovalCapReached));
        let cap = PreExecutionCheck::new(0);
        assert!(cap.judge_and_record("c1", "mail", &json!({}), true, true).is_err());
        assert_eq!(
            cap.judge_and_record("c2", "mail", &json!({}), true, false),
            Ok(()),
            "the capped call was not remembered"
        );
    }
}
