//! Every refusal kind a script can meet — the turn's and the sidecar's — has
//! ONE code: the same in what the script saw, in the audit row and in the
//! terminal event. And every call a script makes is audited, in order, the
//! per-script cap's breach once.
//!
//! The script is the example Rust guest (one call per line), so each call is
//! exactly the one written, non-object arguments included.

use super::*;
use tether_backend::pb;
use tether_sidecar::SidecarConfig;

/// A turn whose `run_script` runs the example Rust guest, over tools that
/// let a script meet every refusal.
fn refusal_world(
    client: &SidecarClient,
    limits: pb::Limits,
    configure: impl FnOnce(TurnBuilder) -> TurnBuilder,
) -> World {
    let probe = Probe::new();
    let events = Arc::new(EventLog::new());
    let approver = Arc::new(PolicyApprover::deny_all());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let script_tool = ScriptTool::new(client.clone()).language(RUST_GUEST).limits(limits);
    let ping_schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let builder = Turn::builder("turn-r")
        .audit_store(Arc::new(SqliteAuditStore::new(&db)))
        .events(events.clone())
        .approver(approver.clone())
        .add_tool(script_tool.into_tool().unwrap())
        .tool(ToolSpec::new("ping", "", ping_schema).read_only(), executor(&probe, "ping"))
        .tool(ToolSpec::new("once", "", object_schema()), executor(&probe, "once"))
        .tool(ToolSpec::new("send_email", "", object_schema()).requires_approval(), executor(&probe, "mail"))
        .tool(ToolSpec::new("ask_user", "", object_schema()).asks_user(), executor(&probe, "ask_user"))
        .tool(ToolSpec::new("crm_lookup", "", object_schema()).deferred().read_only(), executor(&probe, "crm"))
        .tool(ToolSpec::new("blocked", "", object_schema()).read_only(), executor(&probe, "blocked"))
        .tool(ToolSpec::new("secret", "", object_schema()).read_only(), executor(&probe, "secret"))
        .tool(ToolSpec::new("nest", "", object_schema()).read_only().nests(), executor(&probe, "nest"))
        .tool(ToolSpec::new("big", "", object_schema()), big_result(&probe))
        .policy(AdminPolicy::default().deny(CallPattern::tool("blocked"), "not today"))
        .permissions(UserPermissions::new().block(CallPattern::tool("secret"), "not yours"))
        .max_approval_calls(1)
        .max_depth(1)
        .approval_timeout(Duration::from_secs(5));
    let turn = configure(builder).build().unwrap();
    World { turn, probe, events, approver, db: Some(db), _dir: Some(dir) }
}

/// A tool with effects whose result is 10 KB.
fn big_result(probe: &Arc<Probe>) -> Arc<dyn ToolExecutor> {
    let probe = probe.clone();
    executor_fn(move |_, _| {
        let probe = probe.clone();
        async move {
            *probe.runs.lock().unwrap().entry("big".to_owned()).or_default() += 1;
            Ok(ToolOutput::new(json!("x".repeat(10_000))))
        }
    })
}

/// What the script saw of each call, in order: the error code, or "ok".
fn codes_seen(result: &CallResult) -> Vec<String> {
    script_value(result)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| if r["ok"] == json!(true) { "ok".to_owned() } else { r["error"]["code"].as_str().unwrap().to_owned() })
        .collect()
}

#[tokio::test]
async fn every_refusal_has_one_code_in_the_script_the_audit_log_and_the_events() {
    let (_sidecar, client) = sidecar().await;
    let limits = pb::Limits { max_calls: 16, max_args_bytes: 200, max_result_bytes: 1_000, ..Default::default() };
    let w = refusal_world(&client, limits, |b| b.max_refused_script_calls(100));
    let lines = [
        ("call ghost {}", "tool_not_found"),
        (r#"call crm_lookup {"customer_id": "c1"}"#, "tool_not_activated"),
        ("call ask_user {}", "not_callable_from_script"),
        (r#"call ping {"n": "x"}"#, "invalid_arguments"),
        ("call blocked {}", "policy_denied"),
        ("call secret {}", "permission_denied"),
        (r#"call once {"a": 1}"#, "ok"),
        (r#"call once {"a": 1}"#, "repeated_call"),
        (r#"call send_email {"to": "a"}"#, "approval_denied"),
        (r#"call send_email {"to": "b"}"#, "approval_cap_reached"),
        ("call nest {}", "depth_limit_exceeded"),
        ("call big {}", "result_too_large"),
        ("call ping [1]", "invalid_arguments"),
        (&format!(r#"call ping {{"blob": "{}"}}"#, "y".repeat(300)), "arguments_too_large"),
        (r#"call ping {"n": 1}"#, "ok"),
        (r#"call ping {"n": 2}"#, "ok"),
        (r#"call ping {"n": 3}"#, "script_call_cap_reached"),
        (r#"call ping {"n": 4}"#, "script_call_cap_reached"),
    ];
    let source = lines.iter().map(|(line, _)| *line).collect::<Vec<_>>().join("\n");
    let run = w.script(&source, Value::Null).await;
    let seen = codes_seen(&run);
    let expected: Vec<&str> = lines.iter().map(|(_, code)| *code).collect();
    assert_eq!(seen, expected, "what the script saw");

    let rows = w.audit().await;
    for (n, code) in expected.iter().enumerate() {
        let id = format!("s1/{}", n + 1);
        if n + 1 == 18 {
            // Past the cap the breach is audited once: the 18th call is not.
            assert!(rows.iter().all(|r| r.call.call_id != id), "call {id} past the breach is not audited");
            continue;
        }
        let row = w.audit_row(&id).await;
        let event = w.terminal_event(&id);
        let event_code = match &event {
            ToolEvent::ToolFailed { code, .. } => code.as_str().to_owned(),
            ToolEvent::ToolCompleted { error_code: None, .. } => "ok".to_owned(),
            other => panic!("{other:?}"),
        };
        let row_code = row.code.clone().unwrap_or_else(|| "ok".to_owned());
        assert_eq!((row_code.as_str(), event_code.as_str()), (*code, *code), "one code for call {id}: {row:?}");
        if *code != "ok" {
            let known = Code::parse(code).unwrap();
            assert_eq!(row.display_name(), Some(known.display_name()), "{id}");
        }
        assert_eq!((row.call.origin.as_str(), row.call.parent_call_id.as_deref()), ("script", Some("s1")), "{id}");
    }
    // The sidecar's refusals are recorded at the step before the turn's.
    for (id, step) in
        [("s1/13", Step::Sidecar), ("s1/14", Step::Sidecar), ("s1/17", Step::Sidecar), ("s1/4", Step::Arguments)]
    {
        assert_eq!(w.audit_row(id).await.step, Some(step), "{id}");
    }
    // The tool whose result was too large ran once, and the records say so.
    assert_eq!(w.probe.runs("big"), 1);
    let big = w.audit_row("s1/12").await;
    assert_eq!(big.status, CallStatus::Undelivered);
    let ledger = w.turn.ledger().await.unwrap();
    let big_ledger: Vec<_> = ledger.iter().filter(|e| e.call.call_id == "s1/12").collect();
    assert_eq!(big_ledger.len(), 1);
    assert_eq!((big_ledger[0].state, big_ledger[0].outcome), (LedgerState::Settled, Some(CallStatus::Ok)));
    assert_eq!(w.events.unpaired(), Vec::<String>::new());
}

#[tokio::test]
async fn past_the_refusal_cap_calls_are_refused_without_being_evaluated() {
    let (_sidecar, client) = sidecar().await;
    let w = refusal_world(&client, pb::Limits::default(), |b| b.max_refused_script_calls(3));
    let source = "call ghost {}\ncall ghost {}\ncall ping [1]\ncall ping {}\ncall ping {}";
    let run = w.script(source, Value::Null).await;
    assert_eq!(
        codes_seen(&run),
        ["tool_not_found", "tool_not_found", "invalid_arguments", "refusal_cap_reached", "refusal_cap_reached"],
        "the sidecar's refusal counts too; a good call after the cap is not evaluated"
    );
    assert_eq!(w.probe.runs("ping"), 0);
    let row = w.audit_row("s1/4").await;
    assert_eq!((row.step, row.code.as_deref()), (Some(Step::Budget), Some("refusal_cap_reached")));
    let message = script_value(&run)[3]["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("fix the script"), "{message}");
}

#[tokio::test]
async fn a_call_refused_because_the_sidecar_is_busy_is_audited_with_the_sidecars_code() {
    let config = SidecarConfig { max_waiting_runs: 0, ..test_config() };
    let (_sidecar, client) = sidecar_with(config).await;
    let w = refusal_world(&client, pb::Limits::default(), |b| b);
    let run = w.script("call ping {}", Value::Null).await;
    assert_eq!(codes_seen(&run), ["sidecar_busy"]);
    let row = w.audit_row("s1/1").await;
    assert_eq!(
        (row.step, row.code.as_deref(), row.status),
        (Some(Step::Sidecar), Some("sidecar_busy"), CallStatus::Failed)
    );
    assert_eq!(w.probe.runs("ping"), 0);
}

#[tokio::test]
async fn a_script_is_started_without_the_tools_it_may_not_call() {
    let (_sidecar, client) = sidecar().await;
    let w = refusal_world(&client, pb::Limits::default(), |b| b.max_depth(3));
    let listed: Vec<String> = w.turn.callable_tools(1).into_iter().map(|t| t.name().to_owned()).collect();
    assert!(!listed.iter().any(|n| n == "run_script" || n == "ask_user" || n == "crm_lookup"), "{listed:?}");
    assert!(listed.iter().any(|n| n == "nest"), "a nesting tool is offered above the deepest level");
    let deepest: Vec<String> = w.turn.callable_tools(3).into_iter().map(|t| t.name().to_owned()).collect();
    assert!(!deepest.iter().any(|n| n == "nest"), "{deepest:?}");
}
