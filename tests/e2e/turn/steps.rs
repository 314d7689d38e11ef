//! One refusal per step, model and script alike.

use super::*;
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
    assert!(script.turn.callable_tools(1).iter().all(|t| t.name() != "crm_lookup"));
}

#[tokio::test]
async fn step_3_script_exclusions_refuse_only_script_calls() {
    let (_sidecar, client) = sidecar().await;
    let w = world(&client, PolicyApprover::approve_all(), |b| b);
    // The script is started without these tools (no function for them),
    // so it names them through `call`.
    let source = "\
results = [
    call('ask_user', question='ok?'),
    call('on_device', path='/home'),
    call('activate_tools', names=['crm_lookup']),
    call('run_script', code='1 + 1'),
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
        assert_eq!(
            (row.call.tool.as_str(), row.step, row.status),
            (*tool, Some(Step::ScriptExclusion), CallStatus::Failed)
        );
        assert_eq!(row.display_name(), Some("Not available in scripts"));
    }
    assert!(seen[3][2].as_str().unwrap().contains("a script cannot run a script"), "{seen}");
    assert_eq!(w.probe.runs("ask_user") + w.probe.runs("on_device"), 0, "excluded tools never ran");
    assert!(!w.turn.callable_tools(1).iter().any(|t| t.name() == "crm_lookup"), "activate_tools never ran");
    let runs = w.audit().await.into_iter().filter(|r| r.call.tool == "run_script").count();
    assert_eq!(runs, 2, "the model's run and the refused nested one; no second run happened");

    // The model may call every one of them.
    for (n, tool) in ["ask_user", "on_device"].into_iter().enumerate() {
        let result = w.model(&format!("m{n}"), tool, json!({})).await;
        assert_eq!(result.status(), CallStatus::Ok, "{result:?}");
    }
    let activated = w.model("m-act", "activate_tools", json!({"names": ["crm_lookup"]})).await;
    assert_eq!(activated.status(), CallStatus::Ok, "{activated:?}");
    assert!(w.turn.callable_tools(1).iter().any(|t| t.name() == "crm_lookup"));

    // A script has no function for an excluded tool: it was never offered.
    let named = w.model("s2", "run_script", json!({"code": "run_script(code='1')"})).await;
    assert!(
        matches!(&named.outcome, CallOutcome::ToolError { code, message } if code == "runtime_error" && message.contains("NameError")),
        "{named:?}"
    );
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
    assert!(m.contains("as `m0`") && s.contains("as `s1/1`"), "each names the earlier call: {m} / {s}");
    assert_eq!(m.replace("`m0`", "`s1/1`"), s, "the same message otherwise");
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
        matches!(&script.approver.asked()[0].origin, CallOrigin::Script { parent_call_id, depth: 1, .. } if parent_call_id == "s1")
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
