//! A parked agent turn: where the model loop stands when a call of the
//! model's waits for a person who answers from outside this process
//! (`--approval later`; `docs/parking.md`, "Agent turns").
//!
//! The loop makes the model's calls one at a time, so when one waits, the
//! calls before it have their results in the conversation and the calls
//! after it have not started: the record is the conversation, the call that
//! waits, and the calls after it. It is stored as the turn's model-loop
//! record ([`model_loop_run_id`]) beside the parked runs, so any process
//! sharing the audit store answers the call and goes on
//! ([`AgentLoop::resume`](super::AgentLoop::resume)).
//!
//! An agent tool's nested turn parks the same way, under its own turn id
//! ([`nested_turn_id`](super::nested_turn_id)): its record holds the agent
//! tool's call, whose row in the enclosing turn is owed ([`NestedAt`]), and
//! the enclosing loop's record waits on it ([`WaitsOn::Agent`]). Answering
//! goes from the innermost turn out: the nested loop's answer is the agent
//! tool's result ([`PeerAgents::resume_nested`](super::PeerAgents::resume_nested)).

use super::chat::ModelToolCall;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::SystemTime;
use tether_turn::{ParkedRun, PendingCall, Turn, model_loop_run_id, unix_ms};

/// Where a parked agent turn's model loop stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentPark {
    /// The conversation so far (no system message): it ends with the
    /// model's answer that made `waiting`, and the tool messages of the
    /// calls before it.
    pub messages: Vec<Value>,
    /// The model's call that waits.
    pub waiting: ModelToolCall,
    /// What it waits on.
    pub on: WaitsOn,
    /// The calls of the same answer after `waiting`, not started.
    pub rest: Vec<ModelToolCall>,
    /// The model round the call belongs to (the loop's bound counts on).
    pub iteration: u32,
    /// Chat-completions requests made so far.
    pub model_requests: u32,
    /// For an agent tool's nested turn: where it sits. `None` at the top.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested: Option<NestedAt>,
}

/// Where a parked nested agent turn sits: the turn whose agent-tool call
/// started it, and which agent it runs. The agent tool's call itself is the
/// record's [`ParkedRun::call`]: its row in the enclosing turn is written
/// when the nested turn answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NestedAt {
    /// The turn that made the agent tool's call.
    pub parent_turn_id: String,
    /// The agent the nested turn runs.
    pub agent: String,
    /// The agents whose turns enclose the nested turn, outermost first (the
    /// agent tools it is offered follow from them: none of the chain).
    pub chain: Vec<String>,
}

/// What a parked model loop's call waits on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum WaitsOn {
    /// A person's answer to the call itself (a direct call that needs
    /// approval): it is the record's pending call.
    Person,
    /// The script run the call started (`run_script`), parked in the store
    /// with the calls it waits on: the run's result is the call's.
    Run,
    /// The nested turn the call started (an agent tool), parked in the store
    /// under [`nested_turn_id`](super::nested_turn_id) with its own
    /// model-loop record: the nested agent's answer is the call's.
    Agent,
}

impl AgentPark {
    /// The turn's model-loop record: this position, the call that waits for
    /// a person (`pending`, for [`WaitsOn::Person`]), the turn's counts, and
    /// `owner` (the application's context for resuming).
    pub fn record(&self, turn: &Turn, pending: Option<PendingCall>, owner: Value) -> ParkedRun {
        let awaiting = pending.iter().map(|call| call.request.call_id.clone()).collect();
        ParkedRun {
            turn_id: turn.id().to_owned(),
            run_id: model_loop_run_id(turn.id()),
            call: None,
            request: Vec::new(),
            state: Vec::new(),
            model_loop: Some(serde_json::to_value(self).unwrap_or(Value::Null)),
            awaiting,
            pending: pending.into_iter().collect(),
            answered: Default::default(),
            refused: 0,
            turn: turn.snapshot(),
            owner,
            parked_at_ms: unix_ms(SystemTime::now()),
        }
    }

    /// The position a model-loop record holds.
    ///
    /// # Errors
    /// If `run` is not a model loop's record, or its position does not
    /// read (a record from an incompatible version).
    pub fn of(run: &ParkedRun) -> Result<AgentPark, String> {
        let Some(position) = &run.model_loop else {
            return Err(format!("`{}` of turn `{}` is a script run, not a model loop", run.run_id, run.turn_id));
        };
        serde_json::from_value(position.clone())
            .map_err(|error| format!("the model loop of turn `{}` does not read: {error}", run.turn_id))
    }
}
