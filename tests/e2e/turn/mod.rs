//! The turn's one execution path, end to end: the same call issued by the
//! model and by a Python script in the real sidecar is refused at the same
//! step, with the same code, display name and audit row (apart from origin),
//! and never reaches a later step.
//!
//! - `steps`: one refusal per step, model and script alike
//! - `refusals`: every refusal kind a script can meet, sidecar-made ones
//!   included, has ONE code in what the script saw, the audit log and events
//! - `list`: the one list, the one pool, approval inside scripts
//! - `cancel`: cancellation and crashes
//! - `refused_scripts`: a script that cannot run is refused before its first call, audited

mod cancel;
mod list;
mod refusals;
mod refused_scripts;
mod steps;
mod stubs;

use crate::support::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tether_backend::turn::{
    AdminPolicy, ArgMatch, AuditRecord, AuditStore, CallOrigin, CallOutcome, CallPattern, CallRequest, CallResult,
    CallStatus, Code, EventLog, LedgerState, ListedTool, ModelOffer, PolicyApprover, ScriptTool, SqliteAuditStore,
    Step, ToolError, ToolEvent, ToolExecutor, ToolOutput, ToolSpec, Turn, TurnBuilder, TurnLimits, UserPermissions,
    activate_tools_tool, executor_fn,
};
use tether_backend::{SidecarClient, ToolOutcome};
use tether_cli::demo::DemoWorld;
use tokio::sync::Semaphore;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// What the tools saw: executions per tool, the demo world's outbox, and a
/// gate that `hold` and `send_slow` wait on.
pub(super) struct Probe {
    pub(super) world: DemoWorld,
    pub(super) runs: Mutex<HashMap<String, u32>>,
    pub(super) holding: AtomicU32,
    pub(super) gate: Semaphore,
}

impl Probe {
    pub(super) fn new() -> Arc<Probe> {
        Arc::new(Probe {
            world: DemoWorld::default(),
            runs: Mutex::default(),
            holding: AtomicU32::new(0),
            gate: Semaphore::new(0),
        })
    }

    pub(super) fn runs(&self, tool: &str) -> u32 {
        self.runs.lock().unwrap().get(tool).copied().unwrap_or(0)
    }

    pub(super) fn holding(&self) -> u32 {
        self.holding.load(Ordering::SeqCst)
    }

    pub(super) fn release(&self) {
        self.gate.add_permits(1000);
    }
}

pub(super) struct World {
    pub(super) turn: Turn,
    pub(super) probe: Arc<Probe>,
    pub(super) events: Arc<EventLog>,
    pub(super) approver: Arc<PolicyApprover>,
    /// The SQLite file, for a world on the default store.
    pub(super) db: Option<std::path::PathBuf>,
    pub(super) _dir: Option<tempfile::TempDir>,
}

pub(super) fn object_schema() -> Value {
    json!({"type": "object"})
}

pub(super) fn executor(probe: &Arc<Probe>, name: &'static str) -> Arc<dyn ToolExecutor> {
    let probe = probe.clone();
    executor_fn(move |context, args: Value| {
        let probe = probe.clone();
        async move {
            *probe.runs.lock().unwrap().entry(name.to_owned()).or_default() += 1;
            match name {
                "hold" | "send_slow" => {
                    probe.holding.fetch_add(1, Ordering::SeqCst);
                    if let Ok(permit) = probe.gate.acquire().await {
                        permit.forget();
                    }
                    Ok(ToolOutput::new(json!("released")))
                }
                "slow" => std::future::pending().await,
                "load_crm" => {
                    context
                        .turn
                        .activate("crm_lookup")
                        .map_err(|e| ToolError::new("activation_failed", e.to_string()))?;
                    Ok(ToolOutput::new(json!("crm loaded")))
                }
                "crm_lookup" => Ok(ToolOutput::new(json!({"crm": args["customer_id"]}))),
                "list_issues" | "get_contract" | "send_email" => match probe.world.execute(name, &args) {
                    ToolOutcome::Ok(value) => Ok(ToolOutput::new(value)),
                    ToolOutcome::Failed { code, message } => Err(ToolError::new(code, message)),
                },
                _ => Ok(ToolOutput::new(json!({"tool": name}))),
            }
        }
    })
}

/// A turn over the demo tools, test tools and `run_script`, with a SQLite
/// audit store in a fresh directory.
pub(super) fn world(
    client: &SidecarClient,
    approver: PolicyApprover,
    configure: impl FnOnce(TurnBuilder) -> TurnBuilder,
) -> World {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let mut world = world_on(client, approver, Arc::new(SqliteAuditStore::new(&db)), configure);
    world.db = Some(db);
    world._dir = Some(dir);
    world
}

/// The same turn as [`world`], with the audit store `store`.
pub(super) fn world_on(
    client: &SidecarClient,
    approver: PolicyApprover,
    store: Arc<dyn AuditStore>,
    configure: impl FnOnce(TurnBuilder) -> TurnBuilder,
) -> World {
    let probe = Probe::new();
    let events = Arc::new(EventLog::new());
    let approver = Arc::new(approver);
    let mut builder = Turn::builder("turn-1")
        .audit_store(store)
        .events(events.clone())
        .approver(approver.clone())
        .add_tool(ScriptTool::new(client.clone()).into_tool().unwrap())
        .add_tool(activate_tools_tool().unwrap());
    for def in DemoWorld::tools() {
        let name: &'static str = match def.name() {
            "list_issues" => "list_issues",
            "get_contract" => "get_contract",
            _ => "send_email",
        };
        let mut spec = ToolSpec::new(def.name(), def.description(), def.input_schema().clone());
        spec = if name == "send_email" { spec.requires_approval() } else { spec.read_only() };
        builder = builder.tool(spec, executor(&probe, name));
    }
    let ping_schema =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": false});
    let tools = [
        (ToolSpec::new("ping", "Answers pong.", ping_schema).read_only().concurrency_safe(), "ping"),
        (ToolSpec::new("hold", "Waits until released.", object_schema()).concurrency_safe().allow_repeats(), "hold"),
        (ToolSpec::new("send_slow", "Sends, slowly.", object_schema()).requires_approval().concurrency_safe().allow_repeats(), "send_slow"),
        (ToolSpec::new("slow", "Never finishes.", object_schema()).requires_approval().allow_repeats().time_limit(Duration::from_millis(200)), "slow"),
        (ToolSpec::new("ask_user", "Asks the user.", object_schema()).asks_user(), "ask_user"),
        (ToolSpec::new("on_device", "Reads a file on the user's PC.", object_schema()).runs_on_device(), "on_device"),
        (ToolSpec::new("once", "Has effects: refuses an identical repeat by default.", object_schema()), "once"),
        (ToolSpec::new("load_crm", "Activates crm_lookup.", object_schema()).allow_repeats(), "load_crm"),
        (
            ToolSpec::new(
                "crm_lookup",
                "Looks a customer up in the CRM.",
                json!({"type": "object", "properties": {"customer_id": {"type": "string"}}, "required": ["customer_id"]}),
            )
            .deferred()
            .read_only(),
            "crm_lookup",
        ),
    ];
    for (spec, name) in tools {
        builder = builder.tool(spec, executor(&probe, name));
    }
    let turn = configure(builder.approval_timeout(Duration::from_millis(300))).build().unwrap();
    World { turn, probe, events, approver, db: None, _dir: None }
}

impl World {
    pub(super) async fn model(&self, id: &str, tool: &str, args: Value) -> CallResult {
        self.turn.execute(CallRequest::new(id, tool, args), CallOrigin::Model).await
    }

    /// The model runs `source` with `input` as call `s1`; returns the result
    /// of the `run_script` call.
    pub(super) async fn script(&self, source: &str, input: Value) -> CallResult {
        self.model("s1", "run_script", json!({"code": source, "input": input})).await
    }

    pub(super) async fn audit(&self) -> Vec<AuditRecord> {
        self.turn.audit_log().await.unwrap()
    }

    pub(super) async fn audit_row(&self, call_id: &str) -> AuditRecord {
        let rows = self.audit().await;
        let matching: Vec<_> = rows.iter().filter(|r| r.call.call_id == call_id).cloned().collect();
        assert_eq!(matching.len(), 1, "one audit row for `{call_id}`: {rows:#?}");
        matching[0].clone()
    }

    pub(super) fn terminal_event(&self, call_id: &str) -> ToolEvent {
        let events: Vec<_> =
            self.events.events().into_iter().filter(|e| e.call_id() == call_id && e.is_terminal()).collect();
        assert_eq!(events.len(), 1, "one terminal event for `{call_id}`: {events:?}");
        events[0].clone()
    }
}

/// The script's result value (the run must have completed).
pub(super) fn script_value(result: &CallResult) -> Value {
    match &result.outcome {
        CallOutcome::Ok(value) => value["result"].clone(),
        other => panic!("the script did not complete: {other:?}"),
    }
}

/// Makes the `pre` calls, then the target call, and returns the target's result.
pub(super) const CALLS_SCRIPT: &str = "\
for p in input['pre']:
    call(p[0], p[1])
call(input['tool'], input['args'])
";

/// The audit row without what differs by origin: ids, origin, timings.
pub(super) fn origin_free(row: &AuditRecord) -> AuditRecord {
    let mut call = row.call.clone();
    call.call_id = String::new();
    call.parent_call_id = None;
    call.script_run_id = None;
    call.origin = String::new();
    call.depth = 0;
    AuditRecord { call, started_at_ms: 0, finished_at_ms: 0, duration_us: 0, ..row.clone() }
}

/// Issues `pre` then `tool(args)` as the model in `model_world`, and the same
/// calls from one script in `script_world`; asserts the target is refused at
/// `step` with `code` the same way for both. Returns the two refusals'
/// messages (model, script).
pub(super) async fn refused_both_ways(
    model_world: &World,
    script_world: &World,
    pre: &[(&str, Value)],
    tool: &str,
    args: Value,
    step: Step,
    code: Code,
) -> (String, String) {
    // The model's calls.
    for (n, (name, args)) in pre.iter().enumerate() {
        model_world.model(&format!("m{n}"), name, args.clone()).await;
    }
    let model = model_world.model("m-target", tool, args.clone()).await;
    let failure = model.failure().unwrap_or_else(|| panic!("the model's call was not refused: {model:?}")).clone();
    assert_eq!((failure.code, failure.step), (code, step), "{failure}");
    assert_eq!(failure.display_name(), code.display_name());
    assert_eq!(model.to_model_value()["error"]["code"], code.as_str());

    // The script's calls, over the real sidecar.
    let pre_json: Vec<Value> = pre.iter().map(|(name, args)| json!([name, args])).collect();
    let run = script_world.script(CALLS_SCRIPT, json!({"pre": pre_json, "tool": tool, "args": args})).await;
    let seen = script_value(&run);
    assert_eq!(seen["ok"], json!(false), "{seen}");
    assert_eq!(seen["value"], Value::Null);
    assert_eq!(seen["error"]["code"], code.as_str(), "the script sees the same code: {seen}");
    let script_message = seen["error"]["message"].as_str().unwrap_or_default().to_owned();

    // The same audit row apart from origin.
    let target = format!("s1/{}", pre.len() + 1);
    let model_row = model_world.audit_row("m-target").await;
    let script_row = script_world.audit_row(&target).await;
    assert_eq!(origin_free(&model_row), origin_free(&script_row));
    assert_eq!(
        (model_row.step, model_row.code.as_deref(), model_row.status),
        (Some(step), Some(code.as_str()), CallStatus::Failed)
    );
    assert_eq!(model_row.display_name(), Some(code.display_name()));
    assert_eq!(script_row.display_name(), Some(code.display_name()));
    assert_eq!(
        (
            model_row.call.origin.as_str(),
            model_row.call.parent_call_id.as_deref(),
            model_row.call.script_run_id.as_deref()
        ),
        ("model", None, None)
    );
    assert_eq!((script_row.call.origin.as_str(), script_row.call.parent_call_id.as_deref()), ("script", Some("s1")));
    assert!(script_row.call.script_run_id.is_some());
    assert_eq!((model_row.call.depth, script_row.call.depth), (0, 1), "the model's call is depth 0, a script's 1");

    // The same terminal event, the script's naming its parent.
    for (world, id, parent) in [(model_world, "m-target", None), (script_world, target.as_str(), Some("s1"))] {
        match world.terminal_event(id) {
            ToolEvent::ToolFailed { code: c, step: s, parent_call_id, .. } => {
                assert_eq!((c, s, parent_call_id.as_deref()), (code, step, parent));
            }
            other => panic!("expected ToolFailed for `{id}`: {other:?}"),
        }
    }
    (failure.message, script_message)
}

pub(super) async fn two_worlds(
    client: &SidecarClient,
    approver: impl Fn() -> PolicyApprover,
    configure: impl Fn(TurnBuilder) -> TurnBuilder,
) -> (World, World) {
    (world(client, approver(), &configure), world(client, approver(), &configure))
}
