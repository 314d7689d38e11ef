//! The script tool, `run_script`: a tool of the turn whose executor opens a
//! sidecar run with the tools the script may call and serves every call the
//! script makes through [`Turn::execute`](tether_turn::Turn::execute) with origin
//! `Script` — the same path, the same checks, the same records as a call the
//! model makes. Calls the sidecar refused by itself are recorded through the
//! same guard.
//!
//! This is the ONE place the turn meets the sidecar client (the transport):
//! the rest of the turn knows nothing of gRPC.
//!
//! Here too: the run's refusal cap (a script gets at most
//! `TurnLimits::max_refused_script_calls` refused calls; later ones are
//! refused without being evaluated).

use crate::client::{RunRequest, SidecarClient};
use crate::error::ClientError;
use crate::handler::{CallHandler, RefusedCall, ScriptCall, ToolOutcome};
use crate::outcome::{HandedOff, RunOutcome};
use prost::Message as _;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tether_codes::{Code, Reason, RunErrorKind};
use tether_proto::pb;
use tether_turn::CallOrigin;
use tether_turn::NestedSummary;
use tether_turn::Step;
use tether_turn::Tool;
use tether_turn::TurnError;
use tether_turn::ended_reason;
use tether_turn::{ApprovalDecision, OwedCall, ParkedAnswer, ParkedRun, PendingCall, StoreError, Turn};
use tether_turn::{CallOutcome, CallRequest, CallResult, Failure};
use tether_turn::{ToolContext, ToolExecutor, TurnAccess};
use tether_turn::{ToolError, ToolMeta, ToolOutput, ToolSpec, unix_ms};

/// The script tool's default name.
pub const SCRIPT_TOOL_NAME: &str = "run_script";

const DESCRIPTION: &str = "Run a Python script that calls this turn's tools, to chain dependent calls in one step. \
Inside the script: one function per tool, named as the tool, with keyword arguments (the stubs below), \
or `call(name, args)`; \
`call_async` with `asyncio.gather` runs calls together. Every call returns {\"ok\": bool, \"value\": ..., \
\"error\": {\"code\", \"message\"} or None} and never raises; `unwrap(r)` returns the value or raises. \
`input` holds the `input` argument. The value of the last expression is the result. \
Every call is checked, approved and audited like a direct call. Tools that ask the user, run on the \
user's device, or activate tools cannot be called from a script; deferred tools must be activated first.";

/// What the Python runtime does differently from CPython: the file its
/// README's table is checked against (`tether-python`'s `differences`
/// module); the fourth cell of each row is what the model is told.
const PYTHON_DIFFERENCES: &str = include_str!("../../../guest-sdk/python/differences.tsv");

/// The tool's description for scripts in `language`: [`DESCRIPTION`], and
/// for Python one sentence of what differs from CPython, made from
/// [`PYTHON_DIFFERENCES`] so it says what the runtime's README says.
fn description(language: &str) -> String {
    if language != "python" {
        return DESCRIPTION.to_owned();
    }
    let phrases: Vec<&str> = PYTHON_DIFFERENCES
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split('\t').nth(3))
        .filter(|phrase| !phrase.is_empty())
        .collect();
    format!("{DESCRIPTION} The Python is monty, not CPython: {}.", phrases.join("; "))
}

/// Builds the `run_script` tool over a sidecar connection. Defaults: name
/// `run_script`, language `python`, the sidecar's own limits, and a time
/// limit of 30 minutes (a script may wait on approvals; the turn's deadline
/// still applies).
#[derive(Debug, Clone)]
pub struct ScriptTool {
    client: SidecarClient,
    name: String,
    language: String,
    limits: pb::Limits,
    time_limit: Duration,
    may_park: bool,
    owner: Value,
}

impl ScriptTool {
    /// The script tool over `client`.
    pub fn new(client: SidecarClient) -> Self {
        ScriptTool {
            client,
            name: SCRIPT_TOOL_NAME.into(),
            language: "python".into(),
            limits: pb::Limits::default(),
            time_limit: Duration::from_secs(30 * 60),
            may_park: false,
            owner: Value::Null,
        }
    }

    /// What the application needs to resume a parked run in another process
    /// (the CLI: its config file and demo database), stored with every run
    /// this tool parks in the audit store ([`ParkedRun::owner`]).
    pub fn owner(mut self, owner: Value) -> Self {
        self.owner = owner;
        self
    }

    /// Lets the tool's runs park while their calls wait
    /// ([`RunRequest::may_park`]): a run waiting on a slow tool or on an
    /// approval then holds no instance in the sidecar. Off by default.
    pub fn parking(mut self, may_park: bool) -> Self {
        self.may_park = may_park;
        self
    }

    /// Renames the tool.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The sidecar runtime to run scripts in.
    pub fn language(mut self, language: impl Into<String>) -> Self {
        self.language = language.into();
        self
    }

    /// Limits for every run (each may only tighten the sidecar's); the
    /// deadline is further tightened to the turn's remaining time.
    pub fn limits(mut self, limits: pb::Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The tool's own time limit.
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.time_limit = limit;
        self
    }

    /// The spec as the model sees it; metadata: the script tool (it nests),
    /// read-only (its effects are its nested calls', each in the ledger), safe
    /// to run alongside other calls.
    pub fn spec(&self) -> ToolSpec {
        let schema = json!({
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "Python source; the value of the last expression is the result"},
                "input": {"description": "any JSON value; the script reads it as `input`"}
            },
            "required": ["code"],
            "additionalProperties": false
        });
        ToolSpec::new(self.name.clone(), description(&self.language), schema).meta(ToolMeta {
            is_script_tool: true,
            nests: true,
            read_only: true,
            concurrency_safe: true,
            time_limit: Some(self.time_limit),
            ..ToolMeta::default()
        })
    }

    /// The tool, ready for [`TurnBuilder::add_tool`](tether_turn::TurnBuilder::add_tool).
    ///
    /// # Errors
    /// Never in practice (the schema is fixed); kept for symmetry with [`Tool::new`].
    pub fn into_tool(self) -> Result<Tool, TurnError> {
        let spec = self.spec();
        Tool::new(spec, Arc::new(ScriptExecutor { tool: self }))
    }
}

struct ScriptExecutor {
    tool: ScriptTool,
}

#[async_trait::async_trait]
impl ToolExecutor for ScriptExecutor {
    async fn execute(&self, context: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let Some(source) = args.get("code").and_then(Value::as_str) else {
            return Err(ToolError::new(Code::InvalidArguments.as_str(), "`code` must be a string"));
        };
        let turn = context.turn.clone();
        let run_id = turn.next_run_id();
        // This runs in the `run_script` call's span: it names the run it starts.
        tracing::Span::current().record("run_id", run_id.as_str());
        // The script's calls are one level below the call that started it.
        let depth = context.depth() + 1;
        let mut limits = self.tool.limits;
        // Whether the run's deadline is the turn's: then a run ended at its
        // deadline ended at the turn's, whichever clock noticed first.
        let mut turn_deadline_bounds = false;
        if let Some(remaining) = turn.remaining() {
            let ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX).max(1);
            turn_deadline_bounds = limits.deadline_ms == 0 || ms <= limits.deadline_ms;
            limits.deadline_ms = if limits.deadline_ms == 0 { ms } else { limits.deadline_ms.min(ms) };
        }
        let request = RunRequest {
            run_id: run_id.clone(),
            turn_id: turn.id().to_owned(),
            parent_call_id: context.call_id.clone(),
            source: source.to_owned(),
            language: self.tool.language.clone(),
            input: args.get("input").cloned().unwrap_or(Value::Null),
            // What the script may call at its depth; tools activated later
            // are still callable by name (`call(...)`): the lookup reads the
            // live list.
            tools: turn.callable_tools(depth),
            limits,
            may_park: self.tool.may_park,
        };
        let owed = OwedCall {
            call_id: context.call_id.clone(),
            tool: self.tool.name.clone(),
            args: args.clone(),
            origin: context.origin.clone(),
            started_at_ms: unix_ms(std::time::SystemTime::now()),
        };
        let handler = ScriptCalls::new(turn, run_id, context.call_id, depth, 0);
        let outcome = self.tool.client.run(request, &handler).await;
        self.tool.conclude(outcome, &handler, &owed, turn_deadline_bounds).await
    }
}

impl ScriptTool {
    /// What the run's outcome gives the script tool's caller: its result,
    /// or the run's failure; a run handed off while parked is stored with
    /// its turn, and the caller gets `run_parked`.
    async fn conclude(
        &self,
        outcome: Result<RunOutcome, ClientError>,
        handler: &ScriptCalls,
        owed: &OwedCall,
        turn_deadline_bounds: bool,
    ) -> Result<ToolOutput, ToolError> {
        let run_id = handler.run_id.clone();
        let mut metadata = match handler.summary.to_json() {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::error!(%error, %run_id, "the sidecar failed the run");
                metadata.insert("run".into(), json!({"run_id": run_id, "error": error.to_string()}));
                let (kind, message) = match error {
                    // Calls may have run: say so, so nothing is repeated blindly.
                    ClientError::Lost { .. } => (
                        RunErrorKind::SidecarLost,
                        "the script sandbox went away mid-run and the script stopped; calls it had \
                         started may already have taken effect (see the nested calls) — check before \
                         repeating any of them, then call the tools directly",
                    ),
                    _ => (
                        RunErrorKind::SandboxUnavailable,
                        "the script could not be run in the sandbox; call the tools directly instead",
                    ),
                };
                return Err(ToolError::new(kind.as_str(), message).with_metadata(Value::Object(metadata)));
            }
        };
        if let Some(handed) = outcome.handed_off {
            return self.park_handed(handed, handler, owed).await;
        }
        metadata.insert(
            "run".into(),
            json!({
                "run_id": run_id,
                "status": outcome.status.as_str_name(),
                "calls": outcome.stats.calls,
                "calls_refused_by_cap": outcome.stats.calls_refused_by_cap,
                "cpu_time_us": outcome.stats.cpu_time_us,
                "wait_time_us": outcome.stats.wait_time_us,
                "wall_time_us": outcome.stats.wall_time_us,
                "parks": outcome.parks,
            }),
        );
        let metadata = Value::Object(metadata);
        if outcome.is_ok() {
            let mut value = json!({
                "result": outcome.result,
                "stdout": outcome.stdout,
                "stderr": outcome.stderr,
            });
            if outcome.output_truncated {
                value["output_truncated"] = json!(true);
            }
            Ok(ToolOutput::new(value).with_metadata(metadata))
        } else {
            let error = outcome.error.clone().unwrap_or_default();
            if turn_deadline_bounds && error.kind == RunErrorKind::Deadline.as_str() {
                // One code for one cause: the turn's deadline, as when the turn's own clock ends the call.
                return Err(ToolError::around(&ended_reason(Code::TurnDeadlineExceeded)).with_metadata(metadata));
            }
            let kind = if error.kind.is_empty() { "script_failed".to_owned() } else { error.kind.clone() };
            let mut message = error.message.clone();
            if !error.traceback.is_empty() {
                message = format!("{message}\n{}", error.traceback);
            }
            if !outcome.stdout.is_empty() {
                message = format!("{message}\nstdout:\n{}", outcome.stdout);
            }
            Err(ToolError::new(kind, message).with_metadata(metadata))
        }
    }

    /// Stores a run handed off while parked with its turn, durably, and
    /// tells the caller it is parked.
    async fn park_handed(
        &self,
        handed: HandedOff,
        handler: &ScriptCalls,
        owed: &OwedCall,
    ) -> Result<ToolOutput, ToolError> {
        let pending = handler.handed.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or_default();
        let waiting = pending.len();
        let run = ParkedRun {
            turn_id: handler.turn.id().to_owned(),
            run_id: handler.run_id.clone(),
            call: Some(owed.clone()),
            request: handed.start.encode_to_vec(),
            state: handed.parked.state,
            model_loop: None,
            awaiting: handed.parked.awaiting,
            pending,
            answered: handed.answered.into_iter().map(|result| (result.id.clone(), answer_of_proto(result))).collect(),
            refused: handler.refused.load(Ordering::Relaxed),
            turn: handler.turn.snapshot(),
            owner: self.owner.clone(),
            parked_at_ms: unix_ms(std::time::SystemTime::now()),
        };
        match handler.turn.park(&run).await {
            Ok(()) => {
                tracing::info!(run_id = %run.run_id, waiting, "the run is parked in the audit store");
                Err(ToolError::around(&Reason::RunParked { run_id: run.run_id, waiting }))
            }
            Err(error) => {
                tracing::error!(%error, run_id = %run.run_id, "the run parked, but the audit store could not keep it");
                let message = format!(
                    "the script run parked waiting for approvals, but the audit store could not keep it ({error}); \
                     the calls waiting for approval were not made — run the script again"
                );
                Err(ToolError::new(RunErrorKind::SandboxUnavailable.as_str(), message))
            }
        }
    }

    /// Resumes `run`, a parked run of `turn` that this process claimed
    /// ([`AuditStore::claim_parked`](tether_turn::AuditStore::claim_parked) as
    /// `claimant`; `turn` built from its snapshot with
    /// [`TurnBuilder::resumed`](tether_turn::TurnBuilder::resumed), with this
    /// tool in it). Each pending call with an answer in `answers`, or whose
    /// approval wait has run out, is answered through the turn
    /// ([`Turn::answer_pending`]) and the answer stored before the next, so
    /// a process that dies here loses no answer and repeats no effect. When
    /// every call the run waits on is answered, the run goes on, on this
    /// tool's sidecar, to its end or its next park, and the script tool's
    /// call gets its one audit row ([`Turn::settle_resumed`]).
    ///
    /// # Errors
    /// If the store fails, another process took the run over, or the stored
    /// request does not decode.
    pub async fn resume_parked(
        &self,
        turn: &Turn,
        mut run: ParkedRun,
        answers: &Answers,
        claimant: &str,
    ) -> Result<Resumed, TurnError> {
        let Some(owed) = run.call.clone().filter(|_| !run.is_model_loop()) else {
            let message = format!(
                "`{}` is the model loop of agent turn `{}`, not a script run: the agent loop resumes it",
                run.run_id, run.turn_id
            );
            return Err(StoreError::Other(message).into());
        };
        let store = turn.audit_store().clone();
        for pending in run.pending.clone() {
            let id = pending.request.call_id.clone();
            if run.answered.contains_key(&id) {
                continue;
            }
            let decision = answers.get(&id);
            if decision.is_none() && !turn.approval_left(&pending).is_zero() {
                continue;
            }
            let result = turn.answer_pending(&pending, decision).await;
            run.answered.insert(id, answer_of(script_outcome(result)));
            store.update_parked(&run, claimant).await?;
        }
        if run.awaiting.iter().any(|id| !run.answered.contains_key(id)) {
            // Parked again as it is, its answers kept and the claim released.
            store.park_run(&run).await?;
            return Ok(Resumed::Waiting(run.unanswered().cloned().collect()));
        }
        let start = pb::Start::decode(run.request.as_slice()).map_err(|error| {
            StoreError::Other(format!("the parked run `{}`'s request does not decode: {error}", run.run_id))
        })?;
        let results = run
            .awaiting
            .iter()
            .filter_map(|id| run.answered.get(id).map(|answer| outcome_of(answer.clone()).into_proto(id.clone())))
            .collect();
        let depth = owed.origin.depth() + 1;
        let handler =
            ScriptCalls::new(Arc::new(turn.clone()), run.run_id.clone(), owed.call_id.clone(), depth, run.refused);
        let resume = pb::Resume { state: run.state.clone(), results };
        let bounds = turn.remaining().is_some();
        // Why the sidecar could not take the run to an end, if it could not.
        let interrupted = std::sync::Mutex::new(None);
        let result = turn
            .settle_resumed(&owed, async {
                let outcome = self.client.resume_until(start, resume, &handler, turn.cancel_token()).await;
                match outcome {
                    // The run stays parked, as before this resume: its
                    // `run_script` row is still owed, so none is written.
                    Err(error) => {
                        tracing::warn!(%error, run_id = %run.run_id, "the resumed run did not reach its end; it stays parked");
                        let message = format!("the resumed run did not reach its end: {error}");
                        *interrupted.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
                        Err(ToolError::new(Code::RunParked.as_str(), message))
                    }
                    outcome => self.conclude(outcome, &handler, &owed, bounds).await,
                }
            })
            .await;
        if let Some(error) = interrupted.into_inner().unwrap_or_else(|p| p.into_inner()) {
            // Parked again from the same state, every answer kept; the calls
            // the run made meanwhile are in the ledger, and the next resume
            // is answered from it.
            store.park_run(&run).await?;
            return Ok(Resumed::Interrupted(error));
        }
        if result.failure().map(|failure| failure.code) != Some(Code::RunParked) {
            store.unpark(&run.turn_id, &run.run_id, claimant).await?;
        }
        Ok(Resumed::Settled(result))
    }
}

/// How the calls of a parked run are answered ([`ScriptTool::resume_parked`]):
/// per call, or one answer for every call.
#[derive(Debug, Clone, Default)]
pub struct Answers {
    by_call: std::collections::HashMap<String, ApprovalDecision>,
    every: Option<ApprovalDecision>,
}

impl Answers {
    /// No answers: only calls whose wait ran out are answered (timed out).
    pub fn none() -> Self {
        Answers::default()
    }

    /// `decision` for every pending call.
    pub fn every(decision: ApprovalDecision) -> Self {
        Answers { every: Some(decision), ..Answers::default() }
    }

    /// `decision` for call `call_id`.
    pub fn call(mut self, call_id: impl Into<String>, decision: ApprovalDecision) -> Self {
        self.by_call.insert(call_id.into(), decision);
        self
    }

    /// The answer to call `call_id`, if there is one.
    pub fn get(&self, call_id: &str) -> Option<ApprovalDecision> {
        self.by_call.get(call_id).or(self.every.as_ref()).cloned()
    }
}

/// How [`ScriptTool::resume_parked`] ended.
#[derive(Debug)]
pub enum Resumed {
    /// These calls have no answer yet: the run stays parked, with every
    /// answer given so far.
    Waiting(Vec<PendingCall>),
    /// The run went on: the script tool's call's result — `run_parked` if
    /// it parked again, waiting on calls made since.
    Settled(CallResult),
    /// The sidecar could not take the run to its end (it went away mid-run,
    /// could not be reached, or refused the resume): the run is parked again
    /// as it was, with every answer, and the claim released. Resume it again
    /// — on another sidecar if this one is gone: the calls it made meanwhile
    /// are answered from the effect ledger, none runs twice.
    Interrupted(ClientError),
}

fn answer_of(outcome: ToolOutcome) -> ParkedAnswer {
    match outcome {
        ToolOutcome::Ok(value) => ParkedAnswer::Ok(value),
        ToolOutcome::Failed { code, message } => ParkedAnswer::Failed { code, message },
    }
}

fn outcome_of(answer: ParkedAnswer) -> ToolOutcome {
    match answer {
        ParkedAnswer::Ok(value) => ToolOutcome::Ok(value),
        ParkedAnswer::Failed { code, message } => ToolOutcome::Failed { code, message },
    }
}

/// A result the client served before the run parked, as stored.
fn answer_of_proto(result: pb::ToolResult) -> ParkedAnswer {
    answer_of(ToolOutcome::from_proto(result))
}

/// Serves one run's calls: each through the one execution path with origin
/// `Script`, and records the calls the sidecar refused by itself.
struct ScriptCalls {
    turn: Arc<dyn TurnAccess>,
    run_id: String,
    parent_call_id: String,
    /// The depth of the script's calls.
    depth: u32,
    summary: NestedSummary,
    /// Calls of this run refused so far (by the sidecar or the turn).
    refused: AtomicU32,
    max_refused: u32,
    /// The calls handed off when the run parked, for its record.
    handed: std::sync::Mutex<Option<Vec<PendingCall>>>,
}

impl ScriptCalls {
    fn new(turn: Arc<dyn TurnAccess>, run_id: String, parent_call_id: String, depth: u32, refused: u32) -> Self {
        ScriptCalls {
            max_refused: turn.limits().max_refused_script_calls,
            summary: NestedSummary::new(turn.limits().capture_payloads),
            turn,
            run_id,
            parent_call_id,
            depth,
            refused: AtomicU32::new(refused),
            handed: std::sync::Mutex::new(None),
        }
    }

    fn origin(&self) -> CallOrigin {
        CallOrigin::Script {
            run_id: self.run_id.clone(),
            parent_call_id: self.parent_call_id.clone(),
            depth: self.depth,
        }
    }

    /// Counts `result` against the refusal cap when it is a refusal or a
    /// denial (not a tool's own failure, a time-out, or the turn ending).
    fn count_refusal(&self, result: &CallResult) {
        if let CallOutcome::Failed(failure) = &result.outcome {
            self.count_if_refusal(failure);
        }
    }

    /// The one rule of what the refusal cap counts.
    fn count_if_refusal(&self, failure: &Failure) {
        if failure.step < Step::Execution
            && !matches!(failure.code, Code::Cancelled | Code::TurnDeadlineExceeded | Code::SidecarBusy)
        {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[async_trait::async_trait]
impl CallHandler for ScriptCalls {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        let slot = self.summary.begin(&call.id, &call.name);
        let mut request = CallRequest::new(call.id, call.name, call.args)
            .trace_context(call.trace_context)
            .on_awaiting_person(call.on_awaiting_person);
        if call.max_result_bytes > 0 {
            request = request.max_result_bytes(call.max_result_bytes);
        }
        let result = if self.refused.load(Ordering::Relaxed) >= self.max_refused {
            let failure = Failure::new(&Reason::RefusalCap { max: self.max_refused }, Step::Budget);
            self.turn.record_refused(request, self.origin(), failure).await
        } else {
            let result = self.turn.execute(request, self.origin()).await;
            self.count_refusal(&result);
            result
        };
        self.summary.settle(slot, &result);
        script_outcome(result)
    }

    async fn refused(&self, call: RefusedCall) {
        let failure = Failure::reported(&call.code, Step::Sidecar, call.message);
        // Counted before the first await, so calls the script made later see it.
        self.count_if_refusal(&failure);
        let slot = self.summary.begin(&call.id, &call.name);
        // The arguments as far as the sidecar reported them; cut ones stay text.
        let args = serde_json::from_str(&call.args_json).unwrap_or(Value::String(call.args_json));
        let request = CallRequest::new(call.id, call.name, args).trace_context(call.trace_context);
        let result = self.turn.record_refused(request, self.origin(), failure).await;
        self.summary.settle(slot, &result);
    }

    fn hand_off(&self, awaiting: &[String]) -> bool {
        match self.turn.hand_off(awaiting) {
            Some(calls) => {
                *self.handed.lock().unwrap_or_else(|p| p.into_inner()) = Some(calls);
                true
            }
            None => false,
        }
    }
}

/// What the script receives: the value, or the failure-shaped result with the
/// same code and message the model would get.
fn script_outcome(result: CallResult) -> ToolOutcome {
    match result.outcome {
        CallOutcome::Ok(value) => ToolOutcome::Ok(value),
        CallOutcome::ToolError { code, message } => ToolOutcome::Failed { code, message },
        CallOutcome::Failed(failure) => {
            ToolOutcome::Failed { code: failure.code.as_str().to_owned(), message: failure.message }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_python_description_tells_the_model_every_difference_the_runtime_lists() {
        let text = description("python");
        assert!(text.starts_with(DESCRIPTION), "{text}");
        let rows: Vec<&str> = PYTHON_DIFFERENCES.lines().filter(|line| !line.starts_with('#')).collect();
        assert!(rows.len() >= 10, "the differences file lost its rows");
        let phrases: Vec<&str> =
            rows.iter().filter_map(|row| row.split('\t').nth(3)).filter(|p| !p.is_empty()).collect();
        assert!(phrases.len() >= 5, "{phrases:?}");
        for phrase in phrases {
            assert!(text.contains(phrase), "`{phrase}` missing from the description: {text}");
        }
        assert!(text.contains("class inheritance"), "{text}");
        // Short enough to sit in every turn's tool list.
        assert!(text.len() < 2_000, "{} bytes: {text}", text.len());
    }

    #[test]
    fn another_language_gets_no_python_note() {
        assert_eq!(description("javascript"), DESCRIPTION);
    }
}
