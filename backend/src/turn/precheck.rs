//! Step 6: the pre-execution check, which judges AND records in one step.
//!
//! Judging without recording would let a script repeat an identical call any
//! number of times, or slip past the approval cap, by racing its own calls.
//! Here one lock covers both the judgement and the record.

use super::codes::Code;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Mutex;

/// What the check remembers of the turn: the calls that passed it (for the
/// repeat rule) and how many approval-required calls passed.
#[derive(Debug)]
pub struct PreExecutionCheck {
    max_approval_calls: u32,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    seen: HashSet<String>,
    approval_calls: u32,
}

impl PreExecutionCheck {
    /// A check allowing `max_approval_calls` approval-required calls per turn.
    pub fn new(max_approval_calls: u32) -> Self {
        PreExecutionCheck { max_approval_calls, state: Mutex::new(State::default()) }
    }

    /// Judges the call and, if it passes, records it, under one lock.
    ///
    /// Refuses with [`Code::RepeatedCall`] when `refuse_repeat` is set and an
    /// identical call (same tool, same arguments up to key order) passed
    /// before; with [`Code::ApprovalCapReached`] when `needs_approval` is set
    /// and the cap is spent. A call that passes is remembered, and counted
    /// against the approval cap whatever the approver later decides.
    pub fn judge_and_record(
        &self,
        tool: &str,
        args: &Value,
        refuse_repeat: bool,
        needs_approval: bool,
    ) -> Result<(), Code> {
        let key = call_key(tool, args);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if refuse_repeat && state.seen.contains(&key) {
            return Err(Code::RepeatedCall);
        }
        if needs_approval && state.approval_calls >= self.max_approval_calls {
            return Err(Code::ApprovalCapReached);
        }
        state.seen.insert(key);
        if needs_approval {
            state.approval_calls += 1;
        }
        Ok(())
    }

    /// The cap on approval-required calls.
    pub fn max_approval_calls(&self) -> u32 {
        self.max_approval_calls
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

    #[test]
    fn an_identical_repeat_is_refused_only_where_the_tool_says_so() {
        let check = PreExecutionCheck::new(10);
        let args = json!({"a": 1, "b": {"x": [1, 2], "y": null}});
        let reordered: Value = serde_json::from_str(r#"{"b": {"y": null, "x": [1, 2]}, "a": 1}"#).unwrap();
        assert_eq!(check.judge_and_record("t", &args, true, false), Ok(()));
        assert_eq!(check.judge_and_record("t", &reordered, true, false), Err(Code::RepeatedCall));
        assert_eq!(check.judge_and_record("t", &json!({"a": 2}), true, false), Ok(()));
        assert_eq!(check.judge_and_record("u", &args, true, false), Ok(()), "another tool is another call");
        assert_eq!(check.judge_and_record("t", &args, false, false), Ok(()), "a tool without the rule allows repeats");
    }

    #[test]
    fn approval_required_calls_are_counted_when_they_pass() {
        let check = PreExecutionCheck::new(2);
        assert_eq!(check.judge_and_record("mail", &json!({"n": 1}), false, true), Ok(()));
        assert_eq!(check.judge_and_record("read", &json!({}), false, false), Ok(()), "not counted");
        assert_eq!(check.judge_and_record("mail", &json!({"n": 2}), false, true), Ok(()));
        assert_eq!(check.judge_and_record("mail", &json!({"n": 3}), false, true), Err(Code::ApprovalCapReached));
        assert_eq!(check.judge_and_record("read", &json!({}), false, false), Ok(()));
    }

    #[test]
    fn a_refused_repeat_does_not_count_against_the_approval_cap() {
        let check = PreExecutionCheck::new(1);
        assert_eq!(check.judge_and_record("mail", &json!({}), true, true), Ok(()));
        assert_eq!(check.judge_and_record("mail", &json!({}), true, true), Err(Code::RepeatedCall));
    }
}
