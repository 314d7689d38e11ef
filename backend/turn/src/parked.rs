//! Durable parked runs: what a turn hands to its audit store when a script's
//! run parks with every call it waits on waiting for a person, so that any
//! backend process sharing the store can answer the calls and resume the run
//! (`docs/parking.md`, "Durable turns").
//!
//! The records here are the turn's side: the pending calls, the check state
//! the turn needs to go on ([`TurnSnapshot`]), and the script tool's call
//! whose audit row is owed. The transport's part (the sealed state and the
//! request that resumes it) travels as opaque bytes.

use super::approval::ApprovalRequest;
use super::origin::CallOrigin;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;

/// A script run parked in the audit store, waiting for people to answer its
/// calls — or an agent turn's model loop, waiting on a call of its own
/// ([`model_loop`](Self::model_loop)). One per `(turn_id, run_id)`; resumed
/// at most once at a time (a resume first claims it:
/// [`AuditStore::claim_parked`](super::AuditStore::claim_parked)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParkedRun {
    /// The turn the run belongs to.
    pub turn_id: String,
    /// The run (a model loop's: [`model_loop_run_id`]).
    pub run_id: String,
    /// The script tool's call that started the run: its audit row is written
    /// by whoever resumes the run to its end. `None` for a model loop (no
    /// tool call started it).
    pub call: Option<OwedCall>,
    /// What resumes the run on a sidecar (the transport's request, without the
    /// state): opaque to the turn. Empty for a model loop.
    #[serde(with = "base64_bytes", default)]
    pub request: Vec<u8>,
    /// The sealed state the sidecar handed over: opaque, integrity-checked by
    /// the sidecar that resumes it. Empty for a model loop.
    #[serde(with = "base64_bytes", default)]
    pub state: Vec<u8>,
    /// For an agent turn's model loop: where the loop stands (the
    /// conversation, the model call it waits on, the calls after it), opaque
    /// to the turn — the agent loop's to read. `None` for a script run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_loop: Option<Value>,
    /// The ids of the calls the run waits on, in the order the sidecar gave them.
    pub awaiting: Vec<String>,
    /// The calls of `awaiting` that wait for a person.
    pub pending: Vec<PendingCall>,
    /// Answers to calls of `awaiting`, as they are decided and run: a call
    /// answered here is never run again. In a model loop's record, each is
    /// `Ok` with the value the model reads (a failure value included).
    pub answered: HashMap<String, ParkedAnswer>,
    /// Calls of the run refused so far (the run's refusal cap counts on).
    pub refused: u32,
    /// What the turn's checks had when the run parked.
    pub turn: TurnSnapshot,
    /// The application's own context for resuming (the CLI keeps its config
    /// and demo database here); the turn does not read it.
    pub owner: Value,
    /// When the run parked, Unix milliseconds.
    pub parked_at_ms: i64,
}

/// The run id of turn `turn_id`'s model loop record: one per agent turn.
pub fn model_loop_run_id(turn_id: &str) -> String {
    format!("{turn_id}/model")
}

/// The run id of the record of turn `turn_id`'s direct call `call_id` that
/// waits for a person ([`Turn::park_direct`](super::Turn::park_direct)).
pub fn direct_call_run_id(turn_id: &str, call_id: &str) -> String {
    format!("{turn_id}/direct/{call_id}")
}

impl ParkedRun {
    /// True for an agent turn's model loop, false for a script run.
    pub fn is_model_loop(&self) -> bool {
        self.model_loop.is_some()
    }

    /// True for a direct call's record: no script run, no model loop — the
    /// one call it waits on is all there is to answer.
    pub fn is_direct_call(&self) -> bool {
        self.model_loop.is_none() && self.call.is_none()
    }

    /// The pending call `call_id`, if the run waits on it for a person.
    pub fn pending_call(&self, call_id: &str) -> Option<&PendingCall> {
        self.pending.iter().find(|call| call.request.call_id == call_id)
    }

    /// The pending calls not answered yet.
    pub fn unanswered(&self) -> impl Iterator<Item = &PendingCall> {
        self.pending.iter().filter(|call| !self.answered.contains_key(&call.request.call_id))
    }

    /// The record as stored: JSON.
    ///
    /// # Errors
    /// Never for a record built by the turn (every field has a JSON form).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// A record read back from a store.
    ///
    /// # Errors
    /// If `json` is not a parked run's record.
    pub fn from_json(json: &str) -> Result<ParkedRun, serde_json::Error> {
        serde_json::from_str(json)
    }
}

/// Which of turn `turn_id`'s parked runs `runs` an answer to `call_id`
/// resumes: the one that waits on it — or, without a call id, every one.
/// What `tether approve` / `deny` and the Python package's `tether.answer`
/// pick.
///
/// # Errors
/// [`CallNotWaiting`], naming the calls that do wait, when none of `runs`
/// waits on `call_id`.
pub fn runs_waiting_on<'a>(
    runs: &'a [ParkedRun],
    turn_id: &str,
    call_id: Option<&str>,
) -> Result<Vec<&'a ParkedRun>, CallNotWaiting> {
    let Some(call) = call_id else { return Ok(runs.iter().collect()) };
    match runs.iter().find(|run| run.unanswered().any(|c| c.request.call_id == call)) {
        Some(run) => Ok(vec![run]),
        None => Err(CallNotWaiting {
            turn_id: turn_id.to_owned(),
            call_id: call.to_owned(),
            waiting: runs.iter().flat_map(|run| run.unanswered().map(|c| c.request.call_id.clone())).collect(),
        }),
    }
}

/// No parked run of the turn waits on the call named ([`runs_waiting_on`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("call `{call_id}` does not wait in turn `{turn_id}`; {}", waiting_text(waiting))]
pub struct CallNotWaiting {
    /// The turn.
    pub turn_id: String,
    /// The call named.
    pub call_id: String,
    /// The calls of the turn that do wait for a person.
    pub waiting: Vec<String>,
}

fn waiting_text(waiting: &[String]) -> String {
    if waiting.is_empty() {
        return "none of its calls waits for a person now".to_owned();
    }
    let ids: Vec<String> = waiting.iter().map(|id| format!("`{id}`")).collect();
    format!("these do: {}", ids.join(", "))
}

/// The script tool's call whose run parked: what its audit row needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwedCall {
    /// The call's id.
    pub call_id: String,
    /// The script tool's name.
    pub tool: String,
    /// The call's arguments (the script and its input).
    pub args: Value,
    /// Who made it.
    pub origin: CallOrigin,
    /// When it arrived, Unix milliseconds.
    pub started_at_ms: i64,
}

/// A call waiting for a person's approval in a parked run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingCall {
    /// What the approver is shown: the tool, its description and the exact
    /// arguments that will be sent.
    #[serde(with = "approval_request")]
    pub request: ApprovalRequest,
    /// Whether the call needs its result under a size (the run's `max_result_bytes`).
    pub max_result_bytes: Option<u64>,
    /// When it started waiting, Unix milliseconds: the approval wait limit
    /// counts from here, across processes.
    pub since_ms: i64,
}

impl PendingCall {
    /// The call as the places that list what waits show it (`tether pending
    /// --json`, the Python package's `tether.pending`): its id, tool, exact
    /// arguments, why it needs approval, and since when (Unix ms).
    pub fn listing(&self) -> Value {
        serde_json::json!({
            "call_id": self.request.call_id,
            "tool": self.request.tool,
            "args": self.request.args,
            "reason": self.request.reason,
            "since_ms": self.since_ms,
        })
    }
}

/// How a call of a parked run was answered: what the script gets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkedAnswer {
    /// The tool ran and returned this value.
    Ok(Value),
    /// The call produced no value.
    Failed {
        /// The code the script gets.
        code: String,
        /// The message the script gets.
        message: String,
    },
}

/// What a turn's checks remember, carried with a parked run so the turn that
/// resumes it goes on under the same counts: the tool-call cap, the
/// approval cap and the repeat rule's memory, the run counter, and the time
/// left until the deadline.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TurnSnapshot {
    /// Slots of the turn-wide tool-call cap taken.
    pub calls_used: u32,
    /// Approval-required calls counted against their cap.
    pub approval_calls: u32,
    /// The repeat rule's memory: canonical call key → the call id it passed under.
    pub seen: HashMap<String, String>,
    /// Script runs the turn started.
    pub runs: u64,
    /// Time that was left until the turn's deadline, milliseconds; `None`
    /// without a deadline. A resumed turn's deadline is this much after it
    /// resumes: time parked counts toward the approval wait limit instead.
    pub remaining_ms: Option<u64>,
}

/// Bytes as base64 text in JSON (a sealed state as a number array would triple).
mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// An [`ApprovalRequest`] as stored (the request itself stays free of serde).
mod approval_request {
    use super::{ApprovalRequest, CallOrigin};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    #[derive(Serialize, Deserialize)]
    struct Stored {
        turn_id: String,
        call_id: String,
        tool: String,
        description: String,
        args: Value,
        origin: CallOrigin,
        reason: Option<String>,
    }

    pub(super) fn serialize<S: Serializer>(request: &ApprovalRequest, serializer: S) -> Result<S::Ok, S::Error> {
        Stored {
            turn_id: request.turn_id.clone(),
            call_id: request.call_id.clone(),
            tool: request.tool.clone(),
            description: request.description.clone(),
            args: request.args.clone(),
            origin: request.origin.clone(),
            reason: request.reason.clone(),
        }
        .serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ApprovalRequest, D::Error> {
        let stored = Stored::deserialize(deserializer)?;
        Ok(ApprovalRequest {
            turn_id: stored.turn_id,
            call_id: stored.call_id,
            tool: stored.tool,
            description: stored.description,
            args: stored.args,
            origin: stored.origin,
            reason: stored.reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_parked_run_round_trips_through_its_json() {
        let request = ApprovalRequest {
            turn_id: "t".into(),
            call_id: "c/3".into(),
            tool: "send_email".into(),
            description: "Send".into(),
            args: json!({"to": "dana@example.com"}),
            origin: CallOrigin::Script { run_id: "t/run-1".into(), parent_call_id: "c".into(), depth: 1 },
            reason: Some("emails leave the company".into()),
        };
        let run = ParkedRun {
            turn_id: "t".into(),
            run_id: "t/run-1".into(),
            call: Some(OwedCall {
                call_id: "c".into(),
                tool: "run_script".into(),
                args: json!({"code": "1"}),
                origin: CallOrigin::Model,
                started_at_ms: 1,
            }),
            request: vec![0, 1, 2, 255],
            state: vec![9; 100],
            awaiting: vec!["c/3".into(), "c/4".into()],
            pending: vec![PendingCall { request, max_result_bytes: Some(10), since_ms: 5 }],
            answered: HashMap::from([("c/4".to_owned(), ParkedAnswer::Ok(json!([1])))]),
            refused: 2,
            turn: TurnSnapshot {
                calls_used: 4,
                approval_calls: 1,
                runs: 1,
                remaining_ms: Some(9),
                ..Default::default()
            },
            model_loop: None,
            owner: json!({"config": null}),
            parked_at_ms: 7,
        };
        let json = run.to_json().unwrap();
        assert!(json.contains("\"state\":\"CQkJ"), "bytes as base64: {json}");
        assert!(!json.contains("model_loop"), "a script run's record has no model loop: {json}");
        // A model loop's record: no call, request or state.
        let model = ParkedRun {
            run_id: model_loop_run_id("t"),
            call: None,
            request: Vec::new(),
            state: Vec::new(),
            model_loop: Some(json!({"messages": []})),
            ..run.clone()
        };
        let back = ParkedRun::from_json(&model.to_json().unwrap()).unwrap();
        assert!(back.is_model_loop() && !run.is_model_loop());
        assert_eq!((back.run_id.as_str(), back.call), ("t/model", None));
        assert_eq!(ParkedRun::from_json(&json).unwrap(), run);
        assert_eq!(run.unanswered().count(), 1);
        assert!(ParkedRun::from_json("{\"turn_id\": 1}").is_err());

        let runs = [run];
        assert_eq!(runs_waiting_on(&runs, "t", Some("c/3")).unwrap().len(), 1);
        assert_eq!(runs_waiting_on(&runs, "t", None).unwrap().len(), 1);
        let other = runs_waiting_on(&runs, "t", Some("c/4")).unwrap_err();
        assert_eq!(other.to_string(), "call `c/4` does not wait in turn `t`; these do: `c/3`");
    }
}
