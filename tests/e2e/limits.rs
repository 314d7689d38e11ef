//! Sidecar limits, each as an obeyed/violated pair where that makes sense.

use crate::support::*;
use serde_json::json;
use std::time::Duration;
use tether_backend::{RunRequest, pb};
use tether_sidecar::{Limits, SidecarConfig};

fn config_with(limits: Limits) -> SidecarConfig {
    SidecarConfig { limits, ..test_config() }
}

#[tokio::test]
async fn the_51st_call_is_refused_and_later_calls_never_reach_the_backend() {
    let (_sidecar, client) = sidecar().await;
    // Unknown tools: refused by the backend, but counted all the same.
    let source = "results = [call('no_such_tool') for _ in range(200)]\n[r['error']['code'] for r in results]";
    let (outcome, recorder) = run_demo(&client, source).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");
    let codes = outcome.result.unwrap();
    let codes = codes.as_array().unwrap();
    assert!(codes[..50].iter().all(|c| c == "tool_not_found"));
    assert!(codes[50..].iter().all(|c| c == "script_call_cap_reached"), "{:?}", &codes[50..]);
    assert_eq!(recorder.calls.lock().unwrap().len(), 50, "calls 51..200 never reached the backend");
    let refused = recorder.refused.lock().unwrap().clone();
    assert_eq!(refused.len(), 1, "the backend hears of the breach once");
    assert_eq!((refused[0].id.as_str(), refused[0].code.as_str()), ("call_1/51", "script_call_cap_reached"));
    assert_eq!((outcome.stats.calls, outcome.stats.calls_refused_by_cap), (200, 150));
}

#[tokio::test]
async fn batched_calls_count_one_each_against_the_cap() {
    let (_sidecar, client) = sidecar().await;
    let mut request = demo_request(
        "import asyncio\nrs = await asyncio.gather(*[call_async('echo', i=i) for i in range(5)])\n[r['ok'] for r in rs]",
    );
    request.limits.max_calls = 3;
    let recorder = Recorder::new();
    let outcome = client.run(request, recorder.as_ref()).await.unwrap();
    assert_eq!(outcome.result, Some(json!([true, true, true, false, false])), "{outcome:?}");
    assert_eq!(recorder.calls.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_waiting_run_gives_back_its_only_slot() {
    let (_sidecar, client) = sidecar_with(SidecarConfig { slots: 1, ..test_config() }).await;
    let (a, holder) = spawn_held(&client, demo_request("hold()\n'a done'")).await;
    // A is parked on its call; B must get the one slot and finish.
    let (b, _) = run_demo(&client, "'b done'").await;
    assert_eq!(b.result, Some(json!("b done")));
    assert!(!a.is_finished());
    holder.release();
    let a = a.await.unwrap().unwrap();
    assert_eq!(a.result, Some(json!("a done")), "{a:?}");
}

#[tokio::test]
async fn past_the_waiting_runs_cap_a_call_is_refused_with_call_it_directly() {
    let (_sidecar, client) = sidecar_with(SidecarConfig { max_waiting_runs: 1, ..test_config() }).await;
    let (a, holder) = spawn_held(&client, demo_request("hold()\n'a done'")).await;
    let (b, b_calls) =
        run_demo(&client, "r = get_contract(customer_id='c1')\n[r['ok'], r['error']['code'], r['error']['message']]")
            .await;
    let b = b.result.unwrap();
    assert_eq!(b[0], json!(false));
    assert_eq!(b[1], json!("sidecar_busy"));
    assert!(b[2].as_str().unwrap().contains("call it directly in your next response"), "{b}");
    assert!(b_calls.calls.lock().unwrap().is_empty(), "the refused call never reached the backend");

    holder.release();
    assert_eq!(a.await.unwrap().unwrap().result, Some(json!("a done")));
    let (c, _) = run_demo(&client, "get_contract(customer_id='c1')['ok']").await;
    assert_eq!(c.result, Some(json!(true)), "calls are accepted again");
}

#[tokio::test]
async fn waiting_on_a_tool_does_not_count_as_cpu_time() {
    let limits = Limits { cpu_time: Duration::from_secs(1), ..Limits::default() };
    let (_sidecar, client) = sidecar_with(config_with(limits)).await;
    let (run, holder) = spawn_held(&client, demo_request("hold()\n'done'")).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    holder.release();
    let outcome = run.await.unwrap().unwrap();
    assert_eq!(outcome.result, Some(json!("done")), "{outcome:?}");
    assert!(outcome.stats.wait_time_us >= 3_000_000, "{:?}", outcome.stats);
    assert!(outcome.stats.cpu_time_us < 1_000_000, "{:?}", outcome.stats);
}

#[tokio::test]
async fn a_spinning_script_ends_at_its_cpu_limit() {
    let limits = Limits { cpu_time: Duration::from_secs(1), ..Limits::default() };
    let (_sidecar, client) = sidecar_with(config_with(limits)).await;
    let (outcome, _) = run_demo(&client, "while True:\n    pass\n").await;
    assert_eq!(outcome.status, pb::RunStatus::LimitExceeded, "{outcome:?}");
    let error = outcome.error.unwrap();
    assert_eq!((error.kind.as_str(), error.limit.as_str()), ("cpu_time_limit", "cpu_time_ms"));
    // Past the limit by at most the CPU used between two epoch ticks: one
    // 10 ms tick on an idle machine; the bound leaves room for a starved
    // ticker thread on a loaded one.
    let cpu = Duration::from_micros(outcome.stats.cpu_time_us);
    assert!(cpu >= Duration::from_secs(1) && cpu < Duration::from_secs(2), "{cpu:?}");
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_per_run_cpu_limit_only_tightens() {
    let (_sidecar, client) = sidecar().await;
    let mut request = demo_request("while True:\n    pass\n");
    request.limits.cpu_time_ms = 300;
    let outcome = client.run(request, Recorder::new().as_ref()).await.unwrap();
    assert_eq!(outcome.error_kind(), "cpu_time_limit");
    assert!(outcome.stats.cpu_time_us < 1_000_000, "{:?}", outcome.stats);
}

async fn assert_limit(config: SidecarConfig, request: RunRequest, kind: &str, limit: &str) {
    let (_sidecar, client) = sidecar_with(config).await;
    let outcome = client.run(request, Recorder::new().as_ref()).await.unwrap();
    assert_eq!(outcome.status, pb::RunStatus::LimitExceeded, "{outcome:?}");
    let error = outcome.error.unwrap();
    assert_eq!((error.kind.as_str(), error.limit.as_str()), (kind, limit), "{error:?}");
    assert!(!error.message.is_empty());
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_memory_bomb_ends_at_the_memory_limit() {
    let limits = Limits { memory_bytes: 64 << 20, ..Limits::default() };
    let bomb = demo_request("x = 'a' * 1000\nparts = []\nwhile True:\n    parts.append(x * 1000)\n");
    assert_limit(config_with(limits), bomb, "memory_limit", "memory_bytes").await;
}

#[tokio::test]
async fn a_rust_guest_memory_bomb_ends_at_the_memory_limit() {
    let limits = Limits { memory_bytes: 32 << 20, ..Limits::default() };
    let request = RunRequest { language: RUST_GUEST.into(), ..RunRequest::python("r", "alloc 64") };
    assert_limit(config_with(limits), request, "memory_limit", "memory_bytes").await;
}

#[tokio::test]
async fn a_memory_use_under_the_limit_is_fine() {
    let limits = Limits { memory_bytes: 64 << 20, ..Limits::default() };
    let (_sidecar, client) = sidecar_with(config_with(limits)).await;
    let request = RunRequest { language: RUST_GUEST.into(), ..RunRequest::python("r", "alloc 16") };
    let outcome = client.run(request, Recorder::new().as_ref()).await.unwrap();
    assert_eq!(outcome.result, Some(json!([16u64 << 20])), "{outcome:?}");
    assert!(outcome.stats.peak_memory_bytes >= 16 << 20);
}

#[tokio::test]
async fn runaway_recursion_in_the_guest_ends_at_the_stack_limit() {
    let request = RunRequest { language: RUST_GUEST.into(), ..RunRequest::python("r", "recurse") };
    assert_limit(test_config(), request, "stack_limit", "stack").await;
}

#[tokio::test]
async fn deep_python_recursion_is_a_clean_error() {
    let (_sidecar, client) = sidecar().await;
    let (outcome, _) = run_demo(&client, "def f(n):\n    return f(n + 1)\nf(0)\n").await;
    assert!(!outcome.is_ok(), "{outcome:?}");
    let error = outcome.error.unwrap();
    let text = format!("{} {} {}", error.exception_type, error.message, error.limit);
    assert!(text.contains("Recursion") || text.contains("stack"), "{error:?}");
    assert_still_works(&client).await;
}

#[tokio::test]
async fn an_output_flood_is_truncated_and_marked() {
    let limits = Limits { output_bytes: 10_000, ..Limits::default() };
    let (_sidecar, client) = sidecar_with(config_with(limits)).await;
    let (outcome, _) = run_demo(&client, "for i in range(100000):\n    print('flood', i)\n'survived'").await;
    assert_eq!(outcome.result, Some(json!("survived")), "{outcome:?}");
    assert!(outcome.output_truncated);
    assert!(outcome.stdout.len() + outcome.stderr.len() <= 10_000);
    assert!(outcome.stdout.starts_with("flood 0\n"));
}

#[tokio::test]
async fn oversized_arguments_are_refused_without_reaching_the_backend() {
    let limits = Limits { args_bytes: 1000, ..Limits::default() };
    let (_sidecar, client) = sidecar_with(config_with(limits)).await;
    let (outcome, recorder) =
        run_demo(&client, "r = call('echo', data='x' * 5000)\n[r['error']['code'], r['error']['message']]").await;
    let result = outcome.result.unwrap();
    assert_eq!(result[0], json!("arguments_too_large"));
    assert!(result[1].as_str().unwrap().contains("max_args_bytes"));
    assert!(recorder.calls.lock().unwrap().is_empty());
    let (small, _) = run_demo(&client, "call('echo', data='x' * 500)['ok']").await;
    assert_eq!(small.result, Some(json!(true)));
}

#[tokio::test]
async fn an_oversized_result_is_refused() {
    let limits = Limits { result_bytes: 1000, ..Limits::default() };
    let (_sidecar, client) = sidecar_with(config_with(limits)).await;
    // `echo` returns its arguments: 800 bytes of args fit the args limit but not the result limit with room.
    let (outcome, _) =
        run_demo(&client, "r = call('echo', data='x' * 990)\n[r['ok'], r['error']['code'] if not r['ok'] else None]")
            .await;
    assert_eq!(outcome.result, Some(json!([false, "result_too_large"])), "{outcome:?}");
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_result_nested_too_deep_for_the_guest_fails_that_call_only() {
    let (_sidecar, client) = sidecar().await;
    let source = "ok = deep(depth=50)\nbad = deep(depth=300)\n[ok['ok'], bad['ok'], bad['error']['code']]";
    let (outcome, _) = run_demo(&client, source).await;
    assert_eq!(outcome.result, Some(json!([true, false, "invalid_result"])), "{outcome:?}");
}

#[tokio::test]
async fn an_oversized_script_is_refused_naming_the_limit() {
    let limits = Limits { script_bytes: 1000, ..Limits::default() };
    let script = format!("x = 1\n{}", "# padding\n".repeat(200));
    assert_limit(config_with(limits), demo_request(&script), "size_limit", "max_script_bytes").await;
}

#[tokio::test]
async fn the_deadline_stops_a_waiting_run() {
    let (_sidecar, client) = sidecar().await;
    let mut request = demo_request("hold()\n");
    request.limits.deadline_ms = 500;
    let outcome = client.run(request, Recorder::new().as_ref()).await.unwrap();
    assert_eq!(outcome.error_kind(), "deadline", "{outcome:?}");
}

#[tokio::test]
async fn cancel_ends_a_computing_run() {
    let (sidecar, client) = sidecar().await;
    let recorder = Recorder::new();
    let cancel = tokio_util::sync::CancellationToken::new();
    let run = {
        let (client, recorder, cancel) = (client.clone(), recorder.clone(), cancel.clone());
        tokio::spawn(async move {
            client.run_until(demo_request("ping()\nwhile True:\n    pass\n"), recorder.as_ref(), cancel).await
        })
    };
    tokio::time::timeout(Duration::from_secs(60), recorder.entered.notified()).await.unwrap();
    cancel.cancel();
    let outcome = run.await.unwrap().unwrap();
    assert_eq!(outcome.status, pb::RunStatus::Cancelled, "{outcome:?}");
    let counters = &sidecar.sidecar;
    eventually(Duration::from_secs(5), "the run is gone", || counters.live_runs() == 0).await;
}

#[tokio::test]
async fn a_cpu_bound_script_on_every_slot_does_not_stop_describe_or_other_calls() {
    let (sidecar, client) = sidecar_with(SidecarConfig { slots: 2, ..test_config() }).await;
    // Run C parks on a call first, then both slots fill with spinners.
    let (c, holder) = spawn_held(&client, demo_request("hold()\n'c done'")).await;
    // Spinners that end themselves at a 2 s CPU limit.
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let client = client.clone();
            let mut spin = demo_request("while True:\n    pass\n");
            spin.limits.cpu_time_ms = 2000;
            tokio::spawn(async move { client.run(spin, Recorder::new().as_ref()).await })
        })
        .collect();
    let counters = &sidecar.sidecar;
    eventually(Duration::from_secs(30), "both slots compute", || counters.free_slots() == 0).await;

    let description = tokio::time::timeout(Duration::from_secs(5), client.describe()).await;
    assert!(description.is_ok(), "Describe is served while every slot computes");
    assert_eq!(description.unwrap().unwrap().live_runs, 3);
    // C's result is taken in while the slots compute; C resumes when one frees.
    holder.release();
    for spinner in spinners {
        let outcome = spinner.await.unwrap().unwrap();
        assert_eq!(outcome.error_kind(), "cpu_time_limit");
    }
    let c = tokio::time::timeout(Duration::from_secs(30), c).await.unwrap().unwrap().unwrap();
    assert_eq!(c.result, Some(json!("c done")));
}

#[tokio::test]
async fn past_the_admission_queue_a_run_is_refused_with_resource_exhausted() {
    let config = SidecarConfig { slots: 1, max_queued_runs: 1, ..test_config() };
    let (sidecar, client) = sidecar_with(config).await;
    // A computes on the only slot until the test drops it; B waits in the one queue place.
    let a = {
        let (client, request) = (client.clone(), demo_request("while True:\n    pass\n"));
        tokio::spawn(async move { client.run(request, Recorder::new().as_ref()).await })
    };
    let counters = &sidecar.sidecar;
    eventually(Duration::from_secs(30), "A computes", || counters.free_slots() == 0).await;
    let b = {
        let client = client.clone();
        tokio::spawn(async move { client.run(demo_request("'b done'"), Recorder::new().as_ref()).await })
    };
    eventually(Duration::from_secs(30), "B is queued", || counters.queued_runs() == 1).await;

    let refused = client.run(demo_request("'c'"), Recorder::new().as_ref()).await.unwrap_err();
    match refused {
        tether_backend::ClientError::Status(status) => {
            assert_eq!(status.code(), tonic::Code::ResourceExhausted);
            assert!(status.message().contains("queued"), "{status:?}");
        }
        other => panic!("expected RESOURCE_EXHAUSTED, got {other:?}"),
    }
    a.abort();
    assert_eq!(b.await.unwrap().unwrap().result, Some(json!("b done")), "the queued run ran once the slot freed");
}

#[tokio::test]
async fn runs_share_the_sidecar_memory_budget() {
    let config = SidecarConfig { total_memory_bytes: 96 << 20, ..test_config() };
    let (sidecar, client) = sidecar_with(config).await;
    let rust = |script: &str| RunRequest {
        language: RUST_GUEST.into(),
        tools: test_tools(),
        ..RunRequest::python("r", script)
    };
    // A takes 64 MiB and keeps it while it waits on a tool.
    let (a, holder) = spawn_held(&client, rust("alloc 64\ncall hold {}")).await;
    assert!(sidecar.sidecar.guest_memory_bytes() >= 64 << 20);

    let b = client.run(rust("alloc 64"), Recorder::new().as_ref()).await.unwrap();
    assert_eq!(b.status, pb::RunStatus::LimitExceeded, "{b:?}");
    let error = b.error.unwrap();
    assert_eq!((error.kind.as_str(), error.limit.as_str()), ("memory_limit", "total_memory_bytes"), "{error:?}");

    holder.release();
    assert!(a.await.unwrap().unwrap().is_ok());
    let counters = &sidecar.sidecar;
    eventually(Duration::from_secs(5), "A's memory is given back", || counters.guest_memory_bytes() == 0).await;
    let b_again = client.run(rust("alloc 64"), Recorder::new().as_ref()).await.unwrap();
    assert!(b_again.is_ok(), "{b_again:?}");
}
