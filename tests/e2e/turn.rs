//! The turn's one execution path, end to end: the same call issued by the
//! model and by a Python script in the real sidecar is refused at the same
//! step, with the same code, display name and audit row (apart from origin),
//! and never reaches a later step.

use crate::support::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tether_backend::turn::{
    AdminPolicy, ArgMatch, AuditRecord, CallIdentity, CallOrigin, CallOutcome, CallPattern, CallRequest, CallResult, CallStatus,
    Code, EventLog, LedgerState, ListedTool, PolicyApprover, ScriptTool, SqliteAuditStore, Step, ToolError, ToolEvent,
    ToolExecutor, ToolOutput, ToolSpec, Turn, TurnBuilder, UserPermissions, activate_tools_tool, executor_fn,
};
use tether_backend::{SidecarClient, ToolOutcome};
use tether_cli::demo::DemoWorld;
use tokio::sync::Semaphore;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// What the tools saw: executions per tool, the demo world's outbox, and a
/// gate that `hold` and `send_slow` wait on.
struct Probe {
    world: DemoWorld,
    runs: Mutex<HashMap<String, u32>>,
    holding: AtomicU32,
    gate: Semaphore,
}

impl Probe {
    fn runs(&self, tool: &str) -> u32 {
        self.runs.lock().unwrap().get(tool).copied().unwrap_or(0)
    }

    fn holding(&self) -> u32 {
        self.holding.load(Ordering::SeqCst)
    }

    fn release(&self) {
        self.gate.add_permits(1000);
    }
}

struct World {
    turn: Turn,
    probe: Arc<Probe>,
    events: Arc<EventLog>,
    approver: Arc<PolicyApprover>,
    db: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn object_schema() -> Value {
    json!({"type": "object"})
}

fn executor(probe: &Arc<Probe>, name: &'static str) -> Arc<dyn ToolExecutor> {
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
fn world(
    client: &SidecarClient,
    approver: PolicyApprover,
    configure: impl FnOnce(TurnBuilder) -> TurnBuilder,
) -> World {
    let probe = Arc::new(Probe {
        world: DemoWorld::default(),
        runs: Mutex::default(),
        holding: AtomicU32::new(0),
        gate: Semaphore::new(0),
    });
    let events = Arc::new(EventLog::new());
    let approver = Arc::new(approver);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let mut builder = Turn::builder("turn-1")
        .audit_store(Arc::new(SqliteAuditStore::new(&db)))
        .events(events.clone())
        .approver(approver.clone())
        .add_tool(ScriptTool::new(client.clone()).into_tool().unwrap())
        .add_tool(activate_tools_tool().unwrap());
    for def in DemoWorld::tools() {
        let name: &'static str = match def.name.as_str() {
            "list_issues" => "list_issues",
            "get_contract" => "get_contract",
            _ => "send_email",
        };
        let mut spec = ToolSpec::new(def.name, def.description, def.input_schema);
        if name == "send_email" {
            spec = spec.requires_approval();
        }
        builder = builder.tool(spec, executor(&probe, name));
    }
    let ping_schema =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": false});
    let tools = [
        (ToolSpec::new("ping", "Answers pong.", ping_schema).read_only().concurrency_safe(), "ping"),
        (ToolSpec::new("hold", "Waits until released.", object_schema()).concurrency_safe(), "hold"),
        (ToolSpec::new("send_slow", "Sends, slowly.", object_schema()).requires_approval().concurrency_safe(), "send_slow"),
        (ToolSpec::new("slow", "Never finishes.", object_schema()).requires_approval().time_limit(Duration::from_millis(200)), "slow"),
        (ToolSpec::new("ask_user", "Asks the user.", object_schema()).asks_user(), "ask_user"),
        (ToolSpec::new("on_device", "Reads a file on the user's PC.", object_schema()).runs_on_device(), "on_device"),
        (ToolSpec::new("once", "Refuses an identical repeat.", object_schema()).refuse_identical_repeat(), "once"),
        (ToolSpec::new("load_crm", "Activates crm_lookup.", object_schema()), "load_crm"),
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
    World { turn, probe, events, approver, db, _dir: dir }
}

impl World {
    async fn model(&self, id: &str, tool: &str, args: Value) -> CallResult {
        self.turn.execute(CallRequest::new(id, tool, args), CallOrigin::Model).await
    }

    /// The model runs `source` with `input` as call `s1`; returns the result
    /// of the `run_script` call.
    async fn script(&self, source: &str, input: Value) -> CallResult {
        self.model("s1", "run_script", json!({"code": source, "input": input})).await
    }

    async fn audit(&self) -> Vec<AuditRecord> {
        self.turn.audit_log().await.unwrap()
    }

    async fn audit_row(&self, call_id: &str) -> AuditRecord {
        let rows = self.audit().await;
        let matching: Vec<_> = rows.iter().filter(|r| r.call.call_id == call_id).cloned().collect();
        assert_eq!(matching.len(), 1, "one audit row for `{call_id}`: {rows:#?}");
        matching[0].clone()
    }

    fn terminal_event(&self, call_id: &str) -> ToolEvent {
        let events: Vec<_> =
            self.events.events().into_iter().filter(|e| e.call_id() == call_id && e.is_terminal()).collect();
        assert_eq!(events.len(), 1, "one terminal event for `{call_id}`: {events:?}");
        events[0].clone()
    }
}

/// The script's result value (the run must have completed).
fn script_value(result: &CallResult) -> Value {
    match &result.outcome {
        CallOutcome::Ok(value) => value["result"].clone(),
        other => panic!("the script did not complete: {other:?}"),
    }
}

/// Makes the `pre` calls, then the target call, and returns the target's result.
const CALLS_SCRIPT: &str = "\
for p in input['pre']:
    call(p[0], p[1])
call(input['tool'], input['args'])
";

/// The audit row without what differs by origin: ids, origin, depth, timings.
fn origin_free(row: &AuditRecord) -> AuditRecord {
    AuditRecord {
        call: CallIdentity {
            call_id: String::new(),
            parent_call_id: None,
            script_run_id: None,
            origin: String::new(),
            depth: 0,
            ..row.call.clone()
        },
        started_at_ms: 0,
        finished_at_ms: 0,
        duration_us: 0,
        ..row.clone()
    }
}

/// Issues `pre` then `tool(args)` as the model in `model_world`, and the same
/// calls from one script in `script_world`; asserts the target is refused at
/// `step` with `code` the same way for both. Returns the two refusals'
/// messages (model, script).
async fn refused_both_ways(
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
            model_row.call.script_run_id.as_deref(),
            model_row.call.depth
        ),
        ("model", None, None, 0)
    );
    assert_eq!(
        (script_row.call.origin.as_str(), script_row.call.parent_call_id.as_deref(), script_row.call.depth),
        ("script", Some("s1"), 1)
    );
    assert!(script_row.call.script_run_id.is_some());

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

async fn two_worlds(
    client: &SidecarClient,
    approver: impl Fn() -> PolicyApprover,
    configure: impl Fn(TurnBuilder) -> TurnBuilder,
) -> (World, World) {
    (world(client, approver(), &configure), world(client, approver(), &configure))
}

// ---------------------------------------------------------------------------
// One refusal per step, model and script alike
// ---------------------------------------------------------------------------

#[tokio::test]
async fn step_1_budget_refuses_past_the_turn_wide_cap() {
    let (_sidecar, client) = sidecar().await;
    // The script's world counts its run_script call too: one more slot.
    let model = world(&client, PolicyApprover::approve_all(), |b| b.max_tool_calls(1));
    let script = world(&client, PolicyApprover::approve_all(), |b| b.max_tool_calls(2));
    let pre = [("ping", json!({}))];
    refused_both_ways(&model, &script, &pre, "ping", json!({}), Step::Budget, Code::ToolCallCapReached).await;
    assert_eq!((model.probe.runs("ping"), script.probe.runs("ping")), (1, 1), "the refused call never ran");
}

#[tokio::test]
async fn step_2_lookup_refuses_an_unknown_tool() {
    let (_sidecar, client) = sidecar().await;
    // The policy would deny it too: lookup comes first.
    let (model, script) = two_worlds(&client, PolicyApprover::approve_all, |b| {
        b.policy(AdminPolicy::default().deny(CallPattern::tool("gh*"), "no ghosts"))
    })
    .await;
    let (m, s) = refused_both_ways(&model, &script, &[], "ghost", json!({}), Step::Lookup, Code::ToolNotFound).await;
    assert_eq!(m, s);
}

#[tokio::test]
async fn step_2_lookup_refuses_a_deferred_tool_with_the_activation_message() {
    let (_sidecar, client) = sidecar().await;
    let (model, script) = two_worlds(&client, PolicyApprover::approve_all, |b| {
        b.policy(AdminPolicy::default().deny(CallPattern::tool("crm_lookup"), "later step"))
    })
    .await;
    let args = json!({"customer_id": "c1"});
    let (m, s) =
        refused_both_ways(&model, &script, &[], "crm_lookup", args, Step::Lookup, Code::ToolNotActivated).await;
    assert_eq!(m, s);
    assert!(m.contains("activate it outside the script first"), "{m}");
    assert_eq!(model.probe.runs("crm_lookup") + script.probe.runs("crm_lookup"), 0);
    // The model sees it by name only; the script was started without it.
    assert!(model.turn.tools_for_model().contains(&ListedTool::NameOnly("crm_lookup".into())));
    assert!(script.turn.script_tools().iter().all(|t| t.name != "crm_lookup"));
}

#[tokio::test]
async fn step_3_script_exclusions_refuse_only_script_calls() {
    let (_sidecar, client) = sidecar().await;
    let w = world(&client, PolicyApprover::approve_all(), |b| b);
    let source = "\
results = [
    ask_user(question='ok?'),
    on_device(path='/home'),
    activate_tools(names=['crm_lookup']),
    run_script(code='1 + 1'),
]
[[r['ok'], r['error']['code'], r['error']['message']] for r in results]
";
    let run = w.script(source, Value::Null).await;
    let seen = script_value(&run);
    let excluded = ["ask_user", "on_device", "activate_tools", "run_script"];
    for (n, tool) in excluded.iter().enumerate() {
        assert_eq!(seen[n][0], json!(false), "{tool}: {seen}");
        assert_eq!(seen[n][1], json!("not_callable_from_script"), "{tool}: {seen}");
        let row = w.audit_row(&format!("s1/{}", n + 1)).await;
        assert_eq!((row.call.tool.as_str(), row.step, row.status), (*tool, Some(Step::ScriptExclusion), CallStatus::Failed));
        assert_eq!(row.display_name(), Some("Not available in scripts"));
    }
    assert!(seen[3][2].as_str().unwrap().contains("a script cannot run a script"), "{seen}");
    assert_eq!(w.probe.runs("ask_user") + w.probe.runs("on_device"), 0, "excluded tools never ran");
    assert!(!w.turn.script_tools().iter().any(|t| t.name == "crm_lookup"), "activate_tools never ran");
    let runs = w.audit().await.into_iter().filter(|r| r.call.tool == "run_script").count();
    assert_eq!(runs, 2, "the model's run and the refused nested one; no second run happened");

    // The model may call every one of them.
    for (n, tool) in ["ask_user", "on_device"].into_iter().enumerate() {
        let result = w.model(&format!("m{n}"), tool, json!({})).await;
        assert_eq!(result.status(), CallStatus::Ok, "{result:?}");
    }
    let activated = w.model("m-act", "activate_tools", json!({"names": ["crm_lookup"]})).await;
    assert_eq!(activated.status(), CallStatus::Ok, "{activated:?}");
    assert!(w.turn.script_tools().iter().any(|t| t.name == "crm_lookup"));
}

#[tokio::test]
async fn step_4_arguments_are_checked_against_the_schema() {
    let (_sidecar, client) = sidecar().await;
    // The policy would deny it too: argument validation comes first.
    let (model, script) = two_worlds(&client, PolicyApprover::approve_all, |b| {
        b.policy(AdminPolicy::default().deny(CallPattern::tool("get_contract"), "later step"))
    })
    .await;
    let args = json!({"customer": "c1"});
    let (m, s) =
        refused_both_ways(&model, &script, &[], "get_contract", args, Step::Arguments, Code::InvalidArguments).await;
    assert_eq!(m, s);
    assert!(m.contains("customer_id"), "the message names the problem: {m}");
    assert_eq!(model.probe.runs("get_contract") + script.probe.runs("get_contract"), 0);
}

#[tokio::test]
async fn step_5_policy_denies_by_argument_pattern_before_approval() {
    let (_sidecar, client) = sidecar().await;
    let (model, script) = two_worlds(&client, PolicyApprover::approve_all, |b| {
        b.policy(AdminPolicy::default().deny(
            CallPattern::tool("send_email").when("/to", ArgMatch::Glob("*@competitor.com".into())),
            "no mail to competitors",
        ))
    })
    .await;
    let args = json!({"to": "x@competitor.com", "subject": "hi", "body": "hello"});
    let (m, s) = refused_both_ways(&model, &script, &[], "send_email", args, Step::Policy, Code::PolicyDenied).await;
    assert_eq!(m, s);
    assert!(m.contains("no mail to competitors"), "{m}");
    for w in [&model, &script] {
        assert!(w.approver.asked().is_empty(), "a denied call never reaches the approver");
        assert!(w.probe.world.outbox().is_empty(), "and never runs");
        assert!(w.turn.ledger().await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn step_5_user_permissions_block_the_call() {
    let (_sidecar, client) = sidecar().await;
    let (model, script) = two_worlds(&client, PolicyApprover::approve_all, |b| {
        b.permissions(UserPermissions::new().block(
            CallPattern::tool("get_contract").when("/customer_id", ArgMatch::Prefix("c8".into())),
            "not your account",
        ))
    })
    .await;
    let args = json!({"customer_id": "c8"});
    let (m, s) =
        refused_both_ways(&model, &script, &[], "get_contract", args, Step::Policy, Code::PermissionDenied).await;
    assert_eq!(m, s);
    assert_eq!(model.probe.runs("get_contract") + script.probe.runs("get_contract"), 0);
}

#[tokio::test]
async fn step_6_pre_execution_refuses_an_identical_repeat() {
    let (_sidecar, client) = sidecar().await;
    let (model, script) = two_worlds(&client, PolicyApprover::approve_all, |b| b).await;
    let pre = [("once", json!({"n": 1}))];
    let (m, s) =
        refused_both_ways(&model, &script, &pre, "once", json!({"n": 1}), Step::PreExecution, Code::RepeatedCall).await;
    assert_eq!(m, s);
    assert_eq!((model.probe.runs("once"), script.probe.runs("once")), (1, 1), "only the first ran");
}

#[tokio::test]
async fn step_6_pre_execution_caps_approval_required_calls() {
    let (_sidecar, client) = sidecar().await;
    let (model, script) = two_worlds(&client, PolicyApprover::approve_all, |b| b.max_approval_calls(1)).await;
    let first = json!({"to": "a@example.com", "subject": "1", "body": "b"});
    let second = json!({"to": "b@example.com", "subject": "2", "body": "b"});
    let pre = [("send_email", first)];
    let (m, s) =
        refused_both_ways(&model, &script, &pre, "send_email", second, Step::PreExecution, Code::ApprovalCapReached)
            .await;
    assert_eq!(m, s);
    for w in [&model, &script] {
        assert_eq!(w.approver.asked().len(), 1, "the capped call never reached the approver");
        assert_eq!(w.probe.world.outbox().len(), 1);
    }
}

#[tokio::test]
async fn step_7_approval_denied_from_the_model_and_from_a_script() {
    let (_sidecar, client) = sidecar().await;
    let (model, script) = two_worlds(&client, PolicyApprover::deny_all, |b| b).await;
    let args = json!({"to": "dana@example.com", "subject": "s", "body": "b"});
    let (m, s) =
        refused_both_ways(&model, &script, &[], "send_email", args.clone(), Step::Approval, Code::ApprovalDenied).await;
    assert_eq!(m, s);
    for w in [&model, &script] {
        assert!(w.probe.world.outbox().is_empty(), "a denied call never runs");
        assert!(w.turn.ledger().await.unwrap().is_empty(), "nor gets a ledger row");
        let asked = w.approver.asked();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].args, args, "the approver saw the exact arguments");
    }
    // The script's request says where it came from.
    assert!(
        matches!(&script.approver.asked()[0].origin, CallOrigin::Script { parent_call_id, index: 1, .. } if parent_call_id == "s1")
    );
    assert_eq!(script.audit_row("s1/1").await.decided_by.as_deref(), Some("policy"));
}

#[tokio::test]
async fn step_7_approval_times_out_with_the_same_wait_limit() {
    let (_sidecar, client) = sidecar().await;
    let (model, script) = two_worlds(&client, PolicyApprover::never_answer, |b| b).await;
    let args = json!({"to": "dana@example.com", "subject": "s", "body": "b"});
    let (m, s) =
        refused_both_ways(&model, &script, &[], "send_email", args, Step::Approval, Code::ApprovalTimeout).await;
    assert_eq!(m, s, "the same wait limit for both origins");
    for w in [&model, &script] {
        assert!(w.probe.world.outbox().is_empty());
        let row = w.audit().await.into_iter().find(|r| r.call.tool == "send_email").unwrap();
        assert_eq!(row.decided_by.as_deref(), Some("timeout"));
    }
}

#[tokio::test]
async fn step_8_execution_ends_a_tool_past_its_time_limit() {
    let (_sidecar, client) = sidecar().await;
    let (model, script) = two_worlds(&client, PolicyApprover::approve_all, |b| b).await;
    let (m, s) = refused_both_ways(&model, &script, &[], "slow", json!({}), Step::Execution, Code::ToolTimeout).await;
    assert_eq!(m, s);
    // It did start, so its effect may have happened: the ledger says so.
    for (w, id) in [(&model, "m-target"), (&script, "s1/1")] {
        let possibly = w.turn.possibly_executed_approval_actions().await.unwrap();
        assert_eq!(possibly.iter().map(|e| e.call.call_id.as_str()).collect::<Vec<_>>(), [id]);
    }
}

// ---------------------------------------------------------------------------
// The one list, the one pool, approval inside scripts
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_tool_activated_mid_turn_is_callable_from_the_running_script() {
    let (_sidecar, client) = sidecar().await;
    let w = world(&client, PolicyApprover::approve_all(), |b| b);
    let source = "\
before = call('crm_lookup', {'customer_id': 'c1'})
loaded = load_crm()
after = call('crm_lookup', {'customer_id': 'c1'})
[before['ok'], before['error']['code'], loaded['ok'], after['ok'], after['value']]
";
    let run = w.script(source, Value::Null).await;
    assert_eq!(script_value(&run), json!([false, "tool_not_activated", true, true, {"crm": "c1"}]));
    assert_eq!(w.probe.runs("crm_lookup"), 1);
    assert!(w.turn.tools_for_model().iter().any(|t| matches!(t, ListedTool::Full(d) if d.name == "crm_lookup")));
}

#[tokio::test]
async fn the_turn_wide_cap_counts_calls_in_flight() {
    let (_sidecar, client) = sidecar().await;
    let w = Arc::new(world(&client, PolicyApprover::approve_all(), |b| b.max_tool_calls(2)));
    // A model call holds a slot while it runs.
    let held = {
        let w = w.clone();
        tokio::spawn(async move { w.model("m1", "hold", json!({})).await })
    };
    eventually(Duration::from_secs(10), "the hold call runs", || w.probe.holding() == 1).await;
    // run_script takes the second slot; the script's call is the third.
    let run = w.script("r = ping()\n[r['ok'], r['error']['code']]", Value::Null).await;
    assert_eq!(script_value(&run), json!([false, "tool_call_cap_reached"]));
    assert_eq!(w.probe.runs("ping"), 0);
    w.probe.release();
    assert_eq!(held.await.unwrap().status(), CallStatus::Ok);
    assert_eq!(w.turn.calls_used(), 2, "the refused call gave its slot back");
}

#[tokio::test]
async fn approval_granted_inside_a_script_runs_and_settles() {
    let (_sidecar, client) = sidecar().await;
    let w = world(&client, PolicyApprover::approve_all(), |b| b);
    let source = "r = send_email(to='dana@example.com', subject='s', body='b')\n[r['ok'], r['value']]";
    let run = w.script(source, Value::Null).await;
    assert_eq!(script_value(&run), json!([true, {"message_id": "msg-1"}]));
    assert_eq!(w.probe.world.outbox().len(), 1);
    let row = w.audit_row("s1/1").await;
    assert_eq!(
        (row.status, row.approval.map(|a| a.as_str()), row.decided_by.as_deref()),
        (CallStatus::Ok, Some("approved"), Some("policy"))
    );
    let ledger = w.turn.ledger().await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(
        (ledger[0].call.call_id.as_str(), ledger[0].call.origin.as_str(), ledger[0].state),
        ("s1/1", "script", LedgerState::Settled)
    );
    assert!(ledger[0].approval_required);
    // The email the script sent ran: a cancelled or failed turn must report it.
    let possibly = w.turn.possibly_executed_approval_actions().await.unwrap();
    assert_eq!(possibly.iter().map(|e| (e.call.call_id.as_str(), e.state)).collect::<Vec<_>>(), [("s1/1", LedgerState::Settled)]);
}

#[tokio::test]
async fn the_script_result_carries_a_capped_nested_call_summary() {
    let (_sidecar, client) = sidecar().await;
    let w = world(&client, PolicyApprover::approve_all(), |b| b.capture_payloads(true));
    let source = "\
call('ping', {'n': 0})
call('ghost', {})
get_contract(customer_id='c8')
for i in range(37):
    ping(n=i + 1)
'done'
";
    let run = w.script(source, Value::Null).await;
    assert_eq!(script_value(&run), json!("done"));
    let metadata = run.metadata.clone().expect("run_script has host-only metadata");
    let calls = metadata["nested_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 32);
    assert_eq!(metadata["nested_calls_truncated"], json!(40 - 32));
    let statuses: Vec<&str> = calls[..3].iter().map(|c| c["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["ok", "failed", "error"]);
    assert_eq!(calls[0]["id"], "s1/1");
    assert_eq!(calls[0]["args"], r#"{"n":0}"#);
    assert!(calls[1]["error"].as_str().unwrap().starts_with("tool_not_found"), "{}", calls[1]);
    assert!(calls[2]["error"].as_str().unwrap().starts_with("not_found"), "{}", calls[2]);
    // The metadata is host-only: the model's view of the call does not carry it.
    assert!(run.to_model_value().get("metadata").is_none());
    assert!(run.to_model_value()["value"].get("nested_calls").is_none());
    // Every nested event names its parent.
    let nested: Vec<_> = w.events.events().into_iter().filter(|e| e.call_id().starts_with("s1/")).collect();
    assert_eq!(nested.len(), 80);
    assert!(nested.iter().all(|e| e.parent_call_id() == Some("s1")));
}

// ---------------------------------------------------------------------------
// Cancellation and crashes
// ---------------------------------------------------------------------------

#[tokio::test]
async fn cancelling_the_turn_ends_everything_in_flight_with_one_terminal_event_each() {
    let (sidecar, client) = sidecar().await;
    let w = Arc::new(world(&client, PolicyApprover::approve_all(), |b| b));
    let source = "\
import asyncio
await asyncio.gather(call_async('hold', {}), call_async('hold', {}), call_async('send_slow', {'to': 'x'}))
";
    let run = {
        let w = w.clone();
        tokio::spawn(async move { w.script(source, Value::Null).await })
    };
    let direct = {
        let w = w.clone();
        tokio::spawn(async move { w.model("m1", "send_slow", json!({"to": "y"})).await })
    };
    eventually(Duration::from_secs(20), "four calls hold", || w.probe.holding() == 4).await;
    assert_eq!(sidecar.sidecar.live_runs(), 1);
    w.turn.cancel();

    for result in [run.await.unwrap(), direct.await.unwrap()] {
        let failure = result.failure().unwrap_or_else(|| panic!("not cancelled: {result:?}"));
        assert_eq!(failure.code, Code::Cancelled);
    }
    // The sidecar saw the stream drop and ended the script.
    eventually(Duration::from_secs(10), "the run ends", || sidecar.sidecar.live_runs() == 0).await;

    // Exactly one terminal event per start, each ended by the cancellation.
    assert_eq!(w.events.unpaired(), Vec::<String>::new());
    let terminal: Vec<_> = w.events.events().into_iter().filter(ToolEvent::is_terminal).collect();
    assert_eq!(terminal.len(), 5, "{terminal:?}");
    for event in &terminal {
        assert!(matches!(event, ToolEvent::ToolFailed { code: Code::Cancelled, .. }), "{event:?}");
    }
    // One audit row per call; nothing settled; both approval-required sends may have run.
    let audit = w.audit().await;
    assert_eq!(audit.len(), 5, "{audit:#?}");
    assert!(audit.iter().all(|r| r.code.as_deref() == Some("cancelled")));
    let mut possibly: Vec<String> =
        w.turn.possibly_executed_approval_actions().await.unwrap().into_iter().map(|e| e.call.call_id).collect();
    possibly.sort();
    assert_eq!(possibly, ["m1", "s1/3"], "the model's send and the script's");
    assert!(w.turn.ledger().await.unwrap().iter().all(|e| e.state == LedgerState::Started));
}

#[tokio::test]
async fn a_crash_between_started_and_settled_leaves_a_started_row() {
    let (sidecar, client) = sidecar().await;
    let w = world(&client, PolicyApprover::approve_all(), |b| b);
    {
        // The backend "dies" while the script's send runs: the whole turn's
        // future is dropped mid-execution, no cancellation path involved.
        let run = w.script("send_slow(to='dana@example.com')", Value::Null);
        tokio::pin!(run);
        let probe = w.probe.clone();
        tokio::select! {
            result = &mut run => panic!("the run ended: {result:?}"),
            () = eventually(Duration::from_secs(20), "the send runs", move || probe.holding() == 1) => {}
        }
    }
    eventually(Duration::from_secs(10), "the run ends", || sidecar.sidecar.live_runs() == 0).await;

    let possibly = w.turn.possibly_executed_approval_actions().await.unwrap();
    assert_eq!(possibly.len(), 1);
    assert_eq!((possibly[0].call.call_id.as_str(), possibly[0].call.tool.as_str()), ("s1/1", "send_slow"));
    assert_eq!((possibly[0].call.origin.as_str(), possibly[0].call.parent_call_id.as_deref()), ("script", Some("s1")));

    // After a restart, a fresh store on the same file sees the same row.
    let reopened = SqliteAuditStore::new(&w.db);
    let rows = tether_backend::turn::AuditStore::ledger(&reopened, "turn-1").await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, LedgerState::Started);
    // The dropped calls still have one terminal event each ("parent settled").
    assert_eq!(w.events.unpaired(), Vec::<String>::new());
    assert!(matches!(w.terminal_event("s1/1"), ToolEvent::ToolFailed { code: Code::ParentSettled, .. }));
}
