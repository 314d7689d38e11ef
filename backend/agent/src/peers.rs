//! Peer agents as tools. Each agent of a caller's effective list
//! becomes a tool `agent_<name>` with one parameter, `request`; a call runs
//! ONE stateless inference turn on the target — no session, no memory, its
//! own nested [`Turn`] whose model calls sit one level below the agent
//! tool's call, under the calling turn's deadline and cancellation — and
//! returns the target's text. An unreachable agent, a time-out or an error
//! is a failure value (`tool_failed`, naming the agent and why).
//!
//! Runners (endpoint + config) are built at first use and cached per agent;
//! [`PeerAgents::set_config`] evicts the agents whose config changed.
//!
//! With [`PeerAgents::set_parking`], a nested turn whose call waits for a
//! person who answers from elsewhere parks in the audit store as a top-level
//! agent turn does (`park.rs`), and the agent tool's call ends `run_parked`:
//! the enclosing loop parks on it. [`PeerAgents::resumed_turn`] and
//! [`PeerAgents::resume_nested`] go on from there in any process.

use super::chat::ChatEndpoint;
use super::config::{AgentConfig, AgentsConfig};
use super::error::AgentError;
use super::events::{AgentEvent, AgentEventSink};
use super::merge::{agent_tool_name, effective_agent_tools};
use super::park::{AgentPark, NestedAt};
use super::run::{AgentLoop, AgentRun, DEFAULT_MAX_ITERATIONS, Nested};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;
use tether_turn::{
    CallResult, Code, OwedCall, ParkedRun, Reason, Tool, ToolContext, ToolError, ToolExecutor, ToolOutput, ToolSpec,
    Turn, TurnAccess, TurnBuilder, TurnError, unix_ms,
};

/// What the host adds to an agent tool's nested turn, given the target
/// agent's name: the audit store, approver, event sink, policy, and the
/// target's own tools (e.g. the script tool). The deadline, cancellation,
/// limits and agent tools are then set by [`PeerAgents`] and cannot be
/// loosened here.
pub type NestedTurnSetup = Arc<dyn Fn(&str, TurnBuilder) -> TurnBuilder + Send + Sync>;

/// The configured agents, offered to each other as tools. Cheap to clone;
/// clones share the config and the runner cache.
#[derive(Clone)]
pub struct PeerAgents {
    inner: Arc<Inner>,
}

struct Inner {
    config: RwLock<AgentsConfig>,
    runners: Mutex<HashMap<String, Arc<Runner>>>,
    setup: NestedTurnSetup,
    events: Arc<dyn AgentEventSink>,
    max_iterations: u32,
    /// Set: nested turns park as the top-level one does, with this owner context.
    parking: RwLock<Option<Value>>,
}

/// One agent, ready to run: its config and endpoint.
struct Runner {
    config: AgentConfig,
    endpoint: ChatEndpoint,
}

impl fmt::Debug for PeerAgents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerAgents").field("cached", &self.cached_runners()).finish_non_exhaustive()
    }
}

impl PeerAgents {
    /// The agents of `config`; nested turns are set up by `setup`, and
    /// every agent loop (nested ones included) reports to `events`.
    pub fn new(config: AgentsConfig, setup: NestedTurnSetup, events: Arc<dyn AgentEventSink>) -> Self {
        PeerAgents {
            inner: Arc::new(Inner {
                config: RwLock::new(config),
                runners: Mutex::default(),
                setup,
                events,
                max_iterations: DEFAULT_MAX_ITERATIONS,
                parking: RwLock::new(None),
            }),
        }
    }

    fn config(&self) -> AgentsConfig {
        self.inner.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn runners(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Runner>>> {
        self.inner.runners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the config. Cached runners of agents whose config changed or
    /// went away are evicted; a changed global agent-tool list evicts all.
    pub fn set_config(&self, config: AgentsConfig) {
        let mut current = self.inner.config.write().unwrap_or_else(|p| p.into_inner());
        let globals_changed = current.agent_tools != config.agent_tools;
        self.runners().retain(|name, runner| {
            let keep = !globals_changed && config.agents.get(name) == Some(&runner.config);
            if !keep {
                tracing::debug!(agent = %name, "agent config changed; runner evicted");
            }
            keep
        });
        *current = config;
    }

    /// Nested turns park in the audit store when a call of theirs waits for
    /// a person who answers from elsewhere, with `owner` as their record's
    /// owner context — set it with the top-level loop's
    /// [`AgentLoop::parking`] — or, with `None`, wait where they are.
    pub fn set_parking(&self, owner: Option<Value>) {
        *self.inner.parking.write().unwrap_or_else(|p| p.into_inner()) = owner;
    }

    fn parking(&self) -> Option<Value> {
        self.inner.parking.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The agents whose runner is built and cached, sorted.
    pub fn cached_runners(&self) -> Vec<String> {
        let mut names: Vec<String> = self.runners().keys().cloned().collect();
        names.sort();
        names
    }

    /// The cached runner of `agent`, built now if there is none.
    fn runner(&self, agent: &str) -> Result<Arc<Runner>, AgentError> {
        if let Some(runner) = self.runners().get(agent) {
            return Ok(runner.clone());
        }
        let setup = |reason: String| AgentError::Setup { agent: agent.to_owned(), reason };
        let config =
            self.config().agents.get(agent).cloned().ok_or_else(|| setup("no such agent is configured".into()))?;
        let api_key = match &config.api_key_env {
            None => None,
            Some(var) => Some(
                std::env::var(var)
                    .map_err(|_| setup(format!("set the environment variable `{var}` to its API key")))?,
            ),
        };
        let endpoint =
            ChatEndpoint::new(&config.base_url, config.model.clone(), api_key).map_err(|e| setup(e.to_string()))?;
        let runner = Arc::new(Runner { config, endpoint });
        Ok(self.runners().entry(agent.to_owned()).or_insert(runner).clone())
    }

    /// The loop that runs `agent` as the model of a top-level turn: its
    /// endpoint, system prompt and the shared events.
    ///
    /// # Errors
    /// [`AgentError::Setup`]: no such agent, its key variable is unset, or
    /// the HTTP client cannot be built.
    pub fn agent_loop(&self, agent: &str) -> Result<AgentLoop, AgentError> {
        let runner = self.runner(agent)?;
        Ok(AgentLoop::new(runner.endpoint.clone())
            .system_prompt(runner.config.system_prompt.clone())
            .max_iterations(self.inner.max_iterations)
            .events(self.inner.events.clone()))
    }

    /// The agent tools `caller` is offered (its effective list; `None`: a
    /// turn no configured agent runs), ready for
    /// [`TurnBuilder::add_tool`](tether_turn::TurnBuilder::add_tool).
    ///
    /// # Errors
    /// Never in practice (the schema is fixed).
    pub fn tools_for(&self, caller: Option<&str>) -> Result<Vec<Tool>, TurnError> {
        self.tools_for_chain(caller.map(|c| vec![c.to_owned()]).unwrap_or_default())
    }

    /// The agent tools for the last agent of `chain` (the agents whose turns
    /// enclose this one, outermost first): none of the chain is offered, so
    /// A → B → A cannot be asked for.
    fn tools_for_chain(&self, chain: Vec<String>) -> Result<Vec<Tool>, TurnError> {
        let config = self.config();
        effective_agent_tools(&config, chain.last().map(String::as_str))
            .into_iter()
            .filter(|entry| !chain.contains(&entry.agent))
            .map(|entry| {
                let spec = ToolSpec::new(
                    agent_tool_name(&entry.agent),
                    entry.description,
                    json!({
                        "type": "object",
                        "properties": {"request": {"type": "string", "description": "The request to send to the agent."}},
                        "required": ["request"],
                        "additionalProperties": false
                    }),
                )
                .nests()
                .read_only()
                .allow_repeats()
                .concurrency_safe();
                let executor = AgentTool { peers: self.clone(), target: entry.agent, chain: chain.clone() };
                Tool::new(spec, Arc::new(executor))
            })
            .collect()
    }
}

impl PeerAgents {
    /// `builder` set up as a nested turn of `target` under `parent`: the
    /// host's setup, the parent's limits, cancellation and deadline, and the
    /// agent tools of `chain` (the agents enclosing it, `target` last).
    fn nested_builder(
        &self,
        parent: &dyn TurnAccess,
        target: &str,
        chain: Vec<String>,
        builder: TurnBuilder,
    ) -> Result<TurnBuilder, TurnError> {
        let mut builder = (self.inner.setup)(target, builder)
            .limits(parent.limits().clone())
            .cancel_token(parent.cancel_token().child_token());
        if let Some(deadline) = parent.deadline() {
            builder = builder.deadline(deadline);
        }
        Ok(self.tools_for_chain(chain)?.into_iter().fold(builder, TurnBuilder::add_tool))
    }

    /// The loop that runs `target`'s model in a nested turn under `call`
    /// (the agent tool's call), parking as [`set_parking`](Self::set_parking) says.
    fn nested_loop(&self, runner: &Runner, call: OwedCall, at: NestedAt) -> AgentLoop {
        let agent_loop = AgentLoop::new(runner.endpoint.clone())
            .system_prompt(runner.config.system_prompt.clone())
            .max_iterations(self.inner.max_iterations)
            .events(self.inner.events.clone())
            .nested(Nested { call, at });
        match self.parking() {
            Some(owner) => agent_loop.parking(owner),
            None => agent_loop,
        }
    }

    /// The nested turn of a parked agent tool's call, built again in this
    /// process from its model-loop record `record` (read with
    /// [`AgentPark::of`]; its `nested` says where it sits), under `parent`,
    /// the turn that made the call, itself resumed: its counts are the
    /// record's, its tools those `target` is offered there.
    ///
    /// # Errors
    /// [`AgentError::Setup`] if `record` is not a nested turn's, or its turn
    /// cannot be set up.
    pub fn resumed_turn(&self, parent: &Turn, record: &ParkedRun) -> Result<Turn, AgentError> {
        let at = nested_at(record)?;
        let setup = |reason: String| AgentError::Setup { agent: at.agent.clone(), reason };
        let mut chain = at.chain.clone();
        chain.push(at.agent.clone());
        let builder = Turn::builder(record.turn_id.clone()).resumed(record.turn.clone());
        let builder = self.nested_builder(parent, &at.agent, chain, builder).map_err(|e| setup(e.to_string()))?;
        builder.build().map_err(|e| setup(format!("its turn cannot be set up: {e}")))
    }

    /// Goes on with the nested turn `turn` (from [`resumed_turn`](Self::resumed_turn))
    /// parked at its model-loop record `record`: `answer` — what the call
    /// its model waited on came to — goes to its model, and its loop goes on
    /// to its answer, which is the result of the agent tool's call in
    /// `parent`; that call gets its one row there ([`Turn::settle_resumed`]).
    /// When the nested loop parks again (its record replaced), the result is
    /// `run_parked` and no row is written yet.
    ///
    /// # Errors
    /// [`AgentError::Setup`] if `record` is not a nested turn's model-loop
    /// record (nothing is written then).
    pub async fn resume_nested(
        &self,
        parent: &Turn,
        turn: &Turn,
        record: &ParkedRun,
        answer: &Value,
    ) -> Result<CallResult, AgentError> {
        let at = nested_at(record)?;
        let setup = |reason: String| AgentError::Setup { agent: at.agent.clone(), reason };
        let park = AgentPark::of(record).map_err(setup)?;
        let owed = record
            .call
            .clone()
            .ok_or_else(|| setup(format!("the parked turn `{}` names no agent tool call", record.turn_id)))?;
        let resumed = async {
            let runner = self.runner(&at.agent).map_err(|error| {
                ToolError::new(Code::ToolFailed.as_str(), format!("agent `{}` failed: {error}", at.agent))
            })?;
            let run = self.nested_loop(&runner, owed.clone(), at.clone()).resume(turn, park, answer).await;
            nested_outcome(&at.agent, turn.id(), run)
        };
        Ok(parent.settle_resumed(&owed, resumed).await)
    }
}

/// Where the nested turn of model-loop record `record` sits.
fn nested_at(record: &ParkedRun) -> Result<NestedAt, AgentError> {
    let setup = |reason: String| AgentError::Setup { agent: String::new(), reason };
    AgentPark::of(record)
        .map_err(setup)?
        .nested
        .ok_or_else(|| setup(format!("`{}` is a top-level turn's record, not a nested turn's", record.turn_id)))
}

/// What a nested turn of `agent` came to, as the agent tool's result: its
/// answer, `run_parked` when it parked, else a failure naming the agent (with
/// the approval-required actions that may have run).
fn nested_outcome(agent: &str, turn_id: &str, run: AgentRun) -> Result<ToolOutput, ToolError> {
    let metadata = json!({"agent": agent, "turn_id": turn_id, "model_requests": run.model_requests});
    match run.result {
        Ok(text) => Ok(ToolOutput::new(Value::String(text)).with_metadata(metadata)),
        Err(AgentError::Parked { .. }) => {
            Err(ToolError::around(&Reason::AgentParked { agent: agent.to_owned(), turn_id: turn_id.to_owned() }))
        }
        Err(error) => {
            let mut why = error.to_string();
            if !run.possibly_executed.is_empty() {
                let actions: Vec<String> =
                    run.possibly_executed.iter().map(|e| format!("{} ({})", e.call.tool, e.call.call_id)).collect();
                why.push_str(&format!("; approval-required actions that may have run: {}", actions.join(", ")));
            }
            Err(ToolError::new(Code::ToolFailed.as_str(), format!("agent `{agent}` failed: {why}"))
                .with_metadata(metadata))
        }
    }
}

/// The id of the nested turn an agent tool's call `call_id` in turn
/// `turn_id` runs: `<turn_id>/<call_id>`. Its audit rows are read under this
/// id (`tether audit` shows them under the call).
pub fn nested_turn_id(turn_id: &str, call_id: &str) -> String {
    format!("{turn_id}/{call_id}")
}

/// Runs one call of an agent tool: one stateless nested turn on the target.
struct AgentTool {
    peers: PeerAgents,
    target: String,
    /// The agents whose turns enclose the call, outermost first.
    chain: Vec<String>,
}

impl AgentTool {
    fn failed(&self, why: impl fmt::Display) -> ToolError {
        ToolError::new(Code::ToolFailed.as_str(), format!("agent `{}` failed: {why}", self.target))
    }

    fn nested_turn(&self, context: &ToolContext) -> Result<Turn, ToolError> {
        let parent = &*context.turn;
        let mut chain = self.chain.clone();
        chain.push(self.target.clone());
        let builder = Turn::builder(nested_turn_id(parent.id(), &context.call_id));
        let builder = self.peers.nested_builder(parent, &self.target, chain, builder).map_err(|e| self.failed(e))?;
        builder.build().map_err(|e| self.failed(format!("its turn cannot be set up: {e}")))
    }
}

#[async_trait::async_trait]
impl ToolExecutor for AgentTool {
    async fn execute(&self, context: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        // The dispatch-level cycle guard: the list never offers an enclosing agent.
        if self.chain.contains(&self.target) {
            return Err(self.failed("it is already working on this request further up (a cycle); answer without it"));
        }
        let request = args.get("request").and_then(Value::as_str).unwrap_or_default().to_owned();
        let runner = self.peers.runner(&self.target).map_err(|e| self.failed(e))?;
        let turn = self.nested_turn(&context)?;
        let depth = context.depth() + 1;
        let events = &self.peers.inner.events;
        events.emit(&AgentEvent::NestedTurnStarted {
            parent_turn_id: context.turn.id().to_owned(),
            turn_id: turn.id().to_owned(),
            agent: self.target.clone(),
            depth,
            deadline: turn.deadline(),
        });
        let call = OwedCall {
            call_id: context.call_id.clone(),
            tool: context.tool.clone(),
            args: args.clone(),
            origin: context.origin.clone(),
            started_at_ms: unix_ms(SystemTime::now()),
        };
        let at = NestedAt {
            parent_turn_id: context.turn.id().to_owned(),
            agent: self.target.clone(),
            chain: self.chain.clone(),
        };
        let agent_loop = self.peers.nested_loop(&runner, call, at);
        let run = agent_loop.run(&turn, vec![json!({"role": "user", "content": request})]).await;
        events.emit(&AgentEvent::NestedTurnFinished {
            turn_id: turn.id().to_owned(),
            agent: self.target.clone(),
            answered: run.result.is_ok(),
        });
        nested_outcome(&self.target, turn.id(), run)
    }
}
