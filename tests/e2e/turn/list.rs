//! The one list, the one pool, approval inside scripts.

use super::*;
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
    assert!(w.turn.tools_for_model().iter().any(|t| matches!(t, ListedTool::Full(d) if d.name() == "crm_lookup")));
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
    assert_eq!(
        possibly.iter().map(|e| (e.call.call_id.as_str(), e.state)).collect::<Vec<_>>(),
        [("s1/1", LedgerState::Settled)]
    );
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
