//! The agent loop: ask the model, run every tool call it makes through
//! [`Turn::execute`], feed the results back (failure values included), and
//! repeat until it answers without tool calls or a limit trips.
//!
//! Limits: the turn's own (call cap, depth, deadline, cancellation — every
//! call meets them in the one execution path, and the loop stops the moment
//! the turn ends), and [`AgentLoop::max_iterations`]. Seed 004: once an
//! approval-required action may have run in the turn, a failed model call is
//! never retried — the loop stops and reports the actions.

use super::chat::{AssistantMessage, ChatEndpoint, ModelToolCall};
use super::error::AgentError;
use super::events::{AgentEvent, AgentEventSink, NoAgentEvents};
use super::merge::AGENT_TOOL_PREFIX;
use super::park::{AgentPark, NestedAt, WaitsOn};
use serde_json::{Value, json};
use std::sync::Arc;
use tether_turn::{CallOrigin, CallRequest, Code, LedgerEntry, ListedTool, OwedCall, PendingCall, Turn};

/// The default bound on model rounds in one turn.
pub const DEFAULT_MAX_ITERATIONS: u32 = 16;

const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant. Use the tools when they help; \
a tool result with \"ok\": false is a failure value: read its code and message and adapt.";

/// Drives one turn against a chat-completions endpoint. Cheap to clone.
#[derive(Clone)]
pub struct AgentLoop {
    endpoint: ChatEndpoint,
    system_prompt: Option<String>,
    max_iterations: u32,
    model_retries: u32,
    events: Arc<dyn AgentEventSink>,
    /// Where the model's calls sit: `None` at the top (origin `Model`, depth
    /// 0); inside an agent tool, under the agent tool's call.
    nested: Option<Nested>,
    /// Set: a call that waits for a person who answers from elsewhere parks
    /// the turn in its audit store, with this as the record's owner context.
    parking: Option<Value>,
}

impl std::fmt::Debug for AgentLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLoop")
            .field("endpoint", &self.endpoint)
            .field("max_iterations", &self.max_iterations)
            .field("nested", &self.nested)
            .finish_non_exhaustive()
    }
}

/// How an agent turn went: the answer or why there is none, and the
/// approval-required actions that may have run (tell the user about these
/// when there is no answer; do not re-run the turn blindly).
#[derive(Debug)]
pub struct AgentRun {
    /// The model's final text, or why it gave none.
    pub result: Result<String, AgentError>,
    /// Approval-required calls of the turn that reached execution (read
    /// when the turn ended without an answer; empty otherwise).
    pub possibly_executed: Vec<LedgerEntry>,
    /// Chat-completions requests made.
    pub model_requests: u32,
    /// The conversation, the final answer included.
    pub messages: Vec<Value>,
}

/// What a model is sent each round besides the conversation: the system
/// prompt and the function tools, exactly as the request carries them
/// (`tether prompt` prints it).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelPrompt {
    /// The system message's text: the agent's prompt (or the default), and
    /// the names of deferred tools with how to activate them.
    pub system_prompt: String,
    /// The chat-completions `tools`: each `{"type": "function", "function":
    /// {name, description, parameters}}`.
    pub tools: Vec<Value>,
}

impl ModelPrompt {
    /// The offer of `turn` to a model whose calls are at `depth`, with
    /// `system_prompt` (`None`: the default one): the turn's own list
    /// ([`Turn::tools_for_model_at`]), full tools as functions, deferred
    /// ones by name in the prompt.
    pub fn of(turn: &Turn, depth: u32, system_prompt: Option<&str>) -> ModelPrompt {
        let mut tools = Vec::new();
        let mut deferred = Vec::new();
        for tool in turn.tools_for_model_at(depth) {
            match tool {
                ListedTool::Full(def) => tools.push(json!({
                    "type": "function",
                    "function": {"name": def.name(), "description": def.description(), "parameters": def.input_schema()}
                })),
                ListedTool::NameOnly(name) => deferred.push(name),
            }
        }
        let mut prompt = system_prompt.unwrap_or(DEFAULT_SYSTEM_PROMPT).to_owned();
        if !deferred.is_empty() {
            prompt.push_str(&format!(
                "\n\nMore tools exist but are not active yet; activate them with `activate_tools` before calling them: {}.",
                deferred.join(", ")
            ));
        }
        ModelPrompt { system_prompt: prompt, tools }
    }
}

/// An agent tool's nested loop: the agent tool's call in the enclosing turn
/// (its calls are that call's children, one level deeper) and where the
/// nested turn sits, for its record if it parks.
#[derive(Debug, Clone)]
pub(crate) struct Nested {
    pub(crate) call: OwedCall,
    pub(crate) at: NestedAt,
}

/// How the loop's rounds stopped short of an answer.
enum Stop {
    Failed(AgentError),
    /// A call waits for a person who answers from elsewhere.
    Parked(Box<AgentPark>, Option<Box<PendingCall>>),
}

impl From<AgentError> for Stop {
    fn from(error: AgentError) -> Self {
        Stop::Failed(error)
    }
}

/// A model's call, made: its tool message, or what it waits on.
enum Called {
    Answered(String),
    Waits(WaitsOn, Option<Box<PendingCall>>),
}

impl AgentLoop {
    /// A loop on `endpoint` with the default system prompt, 16 rounds, one
    /// retry of a failed model call (none once an approval-required action
    /// may have run), and no events.
    pub fn new(endpoint: ChatEndpoint) -> Self {
        AgentLoop {
            endpoint,
            system_prompt: None,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            model_retries: 1,
            events: Arc::new(NoAgentEvents),
            nested: None,
            parking: None,
        }
    }

    /// Parks the turn when a call of the model's waits for a person who
    /// answers from outside this process (the turn's approver
    /// [defers](tether_turn::Approver::defers)): a direct call needing
    /// approval, a `run_script` call whose run parked, or an agent tool's
    /// call whose nested turn parked. The loop's position is stored in the
    /// turn's audit store ([`AgentPark`]) with `owner` (what the application
    /// needs to resume it elsewhere), and [`run`](Self::run) returns
    /// [`AgentError::Parked`]; any process then answers the call and goes on
    /// with [`resume`](Self::resume). Agent tools' nested loops park with it
    /// when their [`PeerAgents`](super::PeerAgents) are set to
    /// ([`PeerAgents::set_parking`](super::PeerAgents::set_parking)).
    pub fn parking(mut self, owner: Value) -> Self {
        self.parking = Some(owner);
        self
    }

    /// The system prompt.
    pub fn system_prompt(mut self, prompt: Option<String>) -> Self {
        self.system_prompt = prompt;
        self
    }

    /// The most model rounds (requests that are answered with tool calls
    /// count; the last one answers).
    pub fn max_iterations(mut self, max: u32) -> Self {
        self.max_iterations = max.max(1);
        self
    }

    /// Retries of a failed model request (only while no approval-required
    /// action may have run in the turn).
    pub fn model_retries(mut self, retries: u32) -> Self {
        self.model_retries = retries;
        self
    }

    /// Where events go.
    pub fn events(mut self, events: Arc<dyn AgentEventSink>) -> Self {
        self.events = events;
        self
    }

    /// Runs as an agent tool's nested turn: the model's calls are children of
    /// the agent tool's call, one level below it.
    pub(crate) fn nested(mut self, nested: Nested) -> Self {
        self.nested = Some(nested);
        self
    }

    fn depth(&self) -> u32 {
        self.nested.as_ref().map_or(0, |nested| nested.call.origin.depth() + 1)
    }

    fn origin(&self) -> CallOrigin {
        match &self.nested {
            None => CallOrigin::Model,
            Some(nested) => CallOrigin::Tool { parent_call_id: nested.call.call_id.clone(), depth: self.depth() },
        }
    }

    /// What this loop's model is sent each round besides the conversation
    /// ([`ModelPrompt`]; under [`tether_turn::ModelOffer::ScriptOnly`], the
    /// script tool alone).
    pub fn offer(&self, turn: &Turn) -> ModelPrompt {
        ModelPrompt::of(turn, self.depth(), self.system_prompt.as_deref())
    }

    /// Runs the turn from `conversation` (user and earlier messages, no
    /// system message) until the model answers without tool calls or a limit
    /// trips. Never calls the model after the turn ended.
    ///
    /// # Cancel safety
    /// Dropping the future drops the model request and the calls in flight
    /// (the turn records them as abandoned).
    pub async fn run(&self, turn: &Turn, conversation: Vec<Value>) -> AgentRun {
        self.go_on(turn, conversation, 0, Vec::new(), 0).await
    }

    /// Goes on with a turn parked at `park` in another process (or this
    /// one): `answer` — what the call that waited came to, as the model
    /// reads it — becomes its tool message, the calls after it are made, and
    /// the loop goes on as [`run`](Self::run) would have. `turn` is the turn
    /// built again from the record's snapshot.
    pub async fn resume(&self, turn: &Turn, park: AgentPark, answer: &Value) -> AgentRun {
        let mut messages = park.messages;
        messages.push(json!({"role": "tool", "tool_call_id": park.waiting.id, "content": answer.to_string()}));
        self.go_on(turn, messages, park.iteration, park.rest, park.model_requests).await
    }

    async fn go_on(
        &self,
        turn: &Turn,
        mut messages: Vec<Value>,
        iteration: u32,
        calls: Vec<ModelToolCall>,
        mut requests: u32,
    ) -> AgentRun {
        let stopped = self.rounds(turn, &mut messages, &mut requests, iteration, calls).await;
        let result = match stopped {
            Ok(answer) => Ok(answer),
            Err(Stop::Failed(error)) => Err(error),
            Err(Stop::Parked(park, pending)) => self.park(turn, *park, pending).await,
        };
        let possibly_executed = match &result {
            Ok(_) | Err(AgentError::Parked { .. }) => Vec::new(),
            Err(_) => turn.possibly_executed_approval_actions().await.unwrap_or_else(|error| {
                tracing::error!(%error, turn_id = turn.id(), "cannot read the ledger after a failed agent turn");
                Vec::new()
            }),
        };
        AgentRun { result, possibly_executed, model_requests: requests, messages }
    }

    /// Stores the loop's position with the turn, durably; the turn then
    /// waits in the store, not here. A nested loop's record also holds the
    /// agent tool's call, whose row the enclosing turn owes.
    async fn park(
        &self,
        turn: &Turn,
        mut park: AgentPark,
        pending: Option<Box<PendingCall>>,
    ) -> Result<String, AgentError> {
        let owner = self.parking.clone().unwrap_or(Value::Null);
        let (call_id, tool) = (park.waiting.id.clone(), park.waiting.name.clone());
        park.nested = self.nested.as_ref().map(|nested| nested.at.clone());
        let mut record = park.record(turn, pending.map(|call| *call), owner);
        record.call = self.nested.as_ref().map(|nested| nested.call.clone());
        turn.park(&record).await?;
        tracing::info!(turn_id = turn.id(), call_id, "the agent turn is parked in the audit store");
        Err(AgentError::Parked { call_id, tool })
    }

    /// The model's answers and their calls, from round `iteration` with the
    /// calls `calls` of its answer still to make.
    async fn rounds(
        &self,
        turn: &Turn,
        messages: &mut Vec<Value>,
        requests: &mut u32,
        mut iteration: u32,
        mut calls: Vec<ModelToolCall>,
    ) -> Result<String, Stop> {
        loop {
            let mut left = calls.into_iter();
            while let Some(call) = left.next() {
                match self.call_tool(turn, &call).await {
                    Called::Answered(content) => {
                        messages.push(json!({"role": "tool", "tool_call_id": call.id, "content": content}));
                    }
                    Called::Waits(on, pending) => {
                        let park = AgentPark {
                            messages: messages.clone(),
                            waiting: call,
                            on,
                            rest: left.collect(),
                            iteration,
                            model_requests: *requests,
                            nested: None,
                        };
                        return Err(Stop::Parked(Box::new(park), pending));
                    }
                }
            }
            if iteration >= self.max_iterations {
                return Err(AgentError::MaxIterations { max: self.max_iterations }.into());
            }
            iteration += 1;
            let answer = self.ask(turn, messages, iteration, requests).await?;
            messages.push(answer.to_message());
            if answer.tool_calls.is_empty() {
                return Ok(answer.content);
            }
            calls = answer.tool_calls;
        }
    }

    /// One model request, retried as allowed; stops at once when the turn ends.
    async fn ask(
        &self,
        turn: &Turn,
        messages: &[Value],
        iteration: u32,
        requests: &mut u32,
    ) -> Result<AssistantMessage, AgentError> {
        let mut attempt = 0;
        loop {
            if let Some(code) = turn.end_reason() {
                return Err(AgentError::TurnEnded { code });
            }
            let ModelPrompt { system_prompt, tools } = self.offer(turn);
            let mut full = Vec::with_capacity(messages.len() + 1);
            full.push(json!({"role": "system", "content": system_prompt}));
            full.extend_from_slice(messages);
            self.events.emit(&AgentEvent::ModelRequest { turn_id: turn.id().to_owned(), iteration });
            *requests += 1;
            let on_token = |text: &str| {
                self.events.emit(&AgentEvent::Token { turn_id: turn.id().to_owned(), text: text.to_owned() });
            };
            let outcome = tokio::select! {
                code = turn.ended() => return Err(AgentError::TurnEnded { code }),
                outcome = self.endpoint.complete(&full, &tools, on_token) => outcome,
            };
            let error = match outcome {
                Ok(answer) => return Ok(answer),
                Err(error) => error,
            };
            attempt += 1;
            if attempt > self.model_retries {
                return Err(error);
            }
            // Seed 004: after an approval-required action may have run, do not
            // call the model again to recover; stop and report.
            if !turn.possibly_executed_approval_actions().await?.is_empty() {
                tracing::warn!(turn_id = turn.id(), %error, "model call failed after an approval-required action ran; not retrying");
                return Err(error);
            }
            tracing::warn!(turn_id = turn.id(), %error, attempt, "model call failed; retrying");
        }
    }

    /// Runs one of the model's tool calls through the turn; returns the
    /// tool message's content (the value or the failure value, as JSON
    /// text), or, when the loop parks, what the call waits on.
    async fn call_tool(&self, turn: &Turn, call: &ModelToolCall) -> Called {
        let origin = self.origin();
        self.events.emit(&AgentEvent::ToolCallStarted {
            turn_id: turn.id().to_owned(),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            depth: origin.depth(),
        });
        let raw = if call.arguments.trim().is_empty() { "{}" } else { call.arguments.as_str() };
        let request = CallRequest::new(call.id.clone(), call.name.clone(), Value::Null);
        let result = match serde_json::from_str::<Value>(raw) {
            Ok(args) if self.parks() => match turn.execute_or_hand_off(CallRequest { args, ..request }, origin).await {
                // Only the script tool and agent tools (their prefix is
                // reserved) park.
                Ok(result) if result.failure().is_some_and(|failure| failure.code == Code::RunParked) => {
                    let on = if call.name.starts_with(AGENT_TOOL_PREFIX) { WaitsOn::Agent } else { WaitsOn::Run };
                    return Called::Waits(on, None);
                }
                Ok(result) => result,
                Err(pending) => return Called::Waits(WaitsOn::Person, Some(Box::new(pending))),
            },
            Ok(args) => turn.execute(CallRequest { args, ..request }, origin).await,
            Err(error) => {
                // Recorded like any refused call, so the audit log shows it.
                let reason = tether_turn::Reason::ArgumentsNotJson { error: error.to_string() };
                let failure = tether_turn::Failure::new(&reason, tether_turn::Step::Arguments);
                let request = CallRequest { args: Value::String(call.arguments.clone()), ..request };
                turn.record_refused(request, origin, failure).await
            }
        };
        self.events.emit(&AgentEvent::ToolCallFinished {
            turn_id: turn.id().to_owned(),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            status: result.status(),
            code: result.error_code().map(str::to_owned),
        });
        Called::Answered(result.to_model_value().to_string())
    }

    fn parks(&self) -> bool {
        self.parking.is_some()
    }
}
