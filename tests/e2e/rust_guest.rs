//! The example Rust guest, built with guest-sdk, runs and calls tools.

use crate::support::*;
use serde_json::json;
use tether_backend::{RunRequest, pb};
use tether_cli::demo::DemoWorld;

#[tokio::test]
async fn the_rust_guest_calls_tools_singly_and_in_a_batch() {
    let (_sidecar, client) = sidecar().await;
    let script = "print hello from rust\n\
                  call get_contract {\"customer_id\": \"c1\"}\n\
                  batch get_contract {\"customer_id\": \"c2\"} | get_contract {\"customer_id\": \"c8\"}\n";
    let request = RunRequest {
        language: RUST_GUEST.into(),
        parent_call_id: "call_9".into(),
        tools: DemoWorld::tools(),
        ..RunRequest::python("rust-run", script)
    };
    let recorder = Recorder::new();
    let outcome = client.run(request, recorder.as_ref()).await.unwrap();
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");
    let results = outcome.result.unwrap();
    assert_eq!(results[0]["value"]["customer"], json!("Acme Corp"));
    assert_eq!(results[1]["value"]["customer"], json!("Globex"));
    assert_eq!(
        results[2],
        json!({"ok": false, "error": {"code": "not_found", "message": "no contract on file for customer `c8`"}})
    );
    assert_eq!(outcome.stdout, "hello from rust\n");

    let calls = recorder.calls.lock().unwrap().clone();
    assert_eq!(calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["call_9/1", "call_9/2", "call_9/3"]);
    assert_eq!((calls[1].batch, calls[2].batch), (2, 2), "the batch shares a number");
    assert_eq!(calls[0].batch_size, 1);
    assert_eq!(calls[1].batch_size, 2);
}

#[tokio::test]
async fn a_crashing_guest_is_a_script_error_and_harms_nothing() {
    let (_sidecar, client) = sidecar().await;
    let request = RunRequest { language: RUST_GUEST.into(), ..RunRequest::python("crash", "print before\ntrap") };
    let outcome = client.run(request, Recorder::new().as_ref()).await.unwrap();
    assert_eq!(outcome.status, pb::RunStatus::ScriptError, "{outcome:?}");
    assert_eq!(outcome.error_kind(), "guest_fault");
    assert!(outcome.error.unwrap().message.contains("the guest crashed"));
    assert_eq!(outcome.stdout, "before\n", "output up to the crash is kept");
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_guest_that_breaks_the_abi_is_stopped_and_harms_nothing() {
    let (_sidecar, client) = sidecar().await;
    for (script, mentions) in [("bad-pointer", "out of bounds"), ("bad-take", "no response staged")] {
        let request = RunRequest { language: RUST_GUEST.into(), ..RunRequest::python("bad", script) };
        let outcome = client.run(request, Recorder::new().as_ref()).await.unwrap();
        assert_eq!(outcome.error_kind(), "guest_fault", "{script}: {outcome:?}");
        let message = outcome.error.unwrap().message;
        assert!(message.contains(mentions), "{script}: {message}");
    }
    assert_still_works(&client).await;
}
