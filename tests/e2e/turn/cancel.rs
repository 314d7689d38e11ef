//! Cancellation and crashes.

use super::*;
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
    let reopened = SqliteAuditStore::new(w.db.as_ref().unwrap());
    let rows = tether_backend::turn::AuditStore::ledger(&reopened, "turn-1").await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, LedgerState::Started);
    // The dropped calls still have one terminal event each ("parent settled").
    assert_eq!(w.events.unpaired(), Vec::<String>::new());
    assert!(matches!(w.terminal_event("s1/1"), ToolEvent::ToolFailed { code: Code::ParentSettled, .. }));
}
