//! The example Rust guest breaking the `tether_v1` ABI and the machine:
//! traps, panics, stack exhaustion, out-of-bounds buffers, documents that
//! are not JSON or not UTF-8, a guest that never calls `finish`. The guest
//! is blamed (`guest_fault`, or the limit it passed), the message says what
//! it did wrong, and neighbours and the next run are unharmed.

use super::*;

/// Runs the example guest's `script` alongside a bystander.
async fn hostile(script: &str, limits: pb::Limits) -> (RunOutcome, Arc<Recorder>) {
    let client = shared_client().await;
    let mut request = rust(script);
    request.limits = limits;
    let result = alongside(&client, run(&client, request)).await;
    assert_still_works(&client).await;
    result
}

#[track_caller]
fn assert_guest_fault(outcome: &RunOutcome, mentions: &[&str]) {
    assert_failed(outcome, pb::RunStatus::ScriptError, "guest_fault", &["the guest crashed"]);
    assert_failed(outcome, pb::RunStatus::ScriptError, "guest_fault", mentions);
}

#[tokio::test]
async fn a_trap_is_a_guest_fault() {
    let (outcome, _) = hostile("trap", Default::default()).await;
    assert_guest_fault(&outcome, &["unreachable"]);
}

#[tokio::test]
async fn a_panic_is_a_guest_fault_with_its_message_on_stderr() {
    let (outcome, _) = hostile("print before\npanic the guest gives up", Default::default()).await;
    assert_guest_fault(&outcome, &["unreachable"]);
    assert_eq!(outcome.stdout, "before\n");
    assert!(outcome.stderr.contains("the guest gives up"), "{:?}", outcome.stderr);
}

#[tokio::test]
async fn stack_exhaustion_ends_at_the_stack_limit() {
    let (outcome, _) = hostile("recurse", Default::default()).await;
    assert_failed(&outcome, pb::RunStatus::LimitExceeded, "stack_limit", &["stack overflowed", "recursion"]);
}

#[tokio::test]
async fn a_spinning_guest_ends_at_the_cpu_limit() {
    let (outcome, _) = hostile("spin", pb::Limits { cpu_time_ms: 500, ..Default::default() }).await;
    assert_failed(&outcome, pb::RunStatus::LimitExceeded, "cpu_time_limit", &["cpu_time_ms"]);
}

#[tokio::test]
async fn an_allocation_past_the_memory_cap_ends_at_the_memory_limit() {
    let (outcome, _) = hostile("alloc 200", pb::Limits { memory_bytes: 64 << 20, ..Default::default() }).await;
    assert_failed(&outcome, pb::RunStatus::LimitExceeded, "memory_limit", &["memory_bytes"]);
}

#[tokio::test]
async fn taking_a_response_into_an_out_of_bounds_buffer_is_a_guest_fault() {
    let (outcome, recorder) = hostile("oob-response", Default::default()).await;
    assert_guest_fault(&outcome, &["take_response", "out of bounds"]);
    assert_eq!(recorder.names(), ["ping"], "the call itself was made and answered");
}

#[tokio::test]
async fn taking_a_response_with_the_wrong_length_is_a_guest_fault() {
    let (outcome, _) = hostile("short-take", Default::default()).await;
    assert_guest_fault(&outcome, &["take_response", "bytes but"]);
}

#[tokio::test]
async fn a_call_buffer_out_of_bounds_is_a_guest_fault() {
    let (outcome, recorder) = hostile("bad-pointer", Default::default()).await;
    assert_guest_fault(&outcome, &["out of bounds"]);
    assert!(recorder.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_call_document_that_is_not_json_is_a_guest_fault() {
    let (outcome, recorder) = hostile("raw-call this is not json", Default::default()).await;
    assert_guest_fault(&outcome, &["tether_v1.call", "unreadable batch"]);
    assert!(recorder.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_call_document_of_the_wrong_shape_is_a_guest_fault() {
    let (outcome, _) = hostile(r#"raw-call {"calls": 5}"#, Default::default()).await;
    assert_guest_fault(&outcome, &["unreadable batch"]);
}

#[tokio::test]
async fn a_call_document_that_is_not_utf8_is_a_guest_fault() {
    let (outcome, recorder) = hostile("raw-call-invalid-utf8", Default::default()).await;
    assert_guest_fault(&outcome, &["unreadable batch"]);
    assert!(recorder.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn arguments_nested_past_the_parser_limit_are_a_guest_fault_not_a_host_crash() {
    // 100,000 levels: a recursive parser without a limit would overflow the
    // host's stack and take every run down with it.
    let (outcome, recorder) = hostile("raw-call-nested 100000", Default::default()).await;
    assert_guest_fault(&outcome, &["unreadable batch", "recursion limit"]);
    assert!(recorder.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn arguments_nested_deep_but_readable_come_back_refused_as_a_result() {
    // Readable by the host, but the echoed result nests past what a guest is
    // handed: the call fails as a value, the run completes.
    let (outcome, _) = hostile("raw-call-nested 110", Default::default()).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:#?}");
    let response = outcome.result.unwrap()[0].as_str().unwrap().to_owned();
    let response: serde_json::Value = serde_json::from_str(&response).unwrap();
    assert_eq!(response["results"][0]["error"]["code"], json!("invalid_result"), "{response}");
}

#[tokio::test]
async fn arguments_that_are_not_an_object_fail_that_call_only() {
    let (outcome, recorder) = hostile(
        r#"raw-call {"calls": [{"name": "echo", "args": [1, 2]}, {"name": "echo", "args": {"ok": 1}}]}"#,
        Default::default(),
    )
    .await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:#?}");
    let response: serde_json::Value = serde_json::from_str(outcome.result.unwrap()[0].as_str().unwrap()).unwrap();
    assert_eq!(response["results"][0]["error"]["code"], json!("invalid_arguments"), "{response}");
    assert_eq!(response["results"][1], json!({"ok": true, "value": {"ok": 1}}));
    assert_eq!(recorder.names(), ["echo"], "only the valid call is forwarded");
}

#[tokio::test]
async fn giant_arguments_from_a_raw_guest_are_refused_by_size() {
    let (outcome, recorder) = hostile("big-args echo 3000000", Default::default()).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:#?}");
    assert_eq!(outcome.result.unwrap()[0]["error"]["code"], json!("arguments_too_large"));
    assert!(recorder.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_unreadable_outcome_is_a_guest_fault() {
    let (outcome, _) = hostile("bad-finish", Default::default()).await;
    assert_guest_fault(&outcome, &["tether_v1.finish", "unreadable outcome"]);
}

#[tokio::test]
async fn a_guest_that_exits_without_finish_is_a_guest_fault() {
    let (outcome, _) = hostile("print bye\nexit 0", Default::default()).await;
    assert_guest_fault(&outcome, &["without reporting an outcome", "finish"]);
    assert_eq!(outcome.stdout, "bye\n", "its output is kept");
}

#[tokio::test]
async fn a_guest_that_exits_with_an_error_code_is_a_guest_fault_naming_it() {
    let (outcome, _) = hostile("exit 7", Default::default()).await;
    assert_guest_fault(&outcome, &["7"]);
}
