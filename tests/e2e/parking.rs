//! Parked runs (`docs/parking.md`): a run whose calls wait hands its sealed
//! state to the backend and ends; the client resumes it on a new stream with
//! the results. Everything the run had carries across: its result, output,
//! call count (the cap), CPU and wall time. A state that is cut, altered,
//! forged or from another run resumes nothing and harms nothing else.

use crate::support::*;
use std::time::Duration;
use tether_backend::pb::{self, backend_message, sidecar_client::SidecarClient as RawClient, sidecar_message};
use tether_sidecar::{ParkConfig, SidecarConfig};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// A sidecar that parks a run at every call: `park_after` zero, so a run
/// parks as soon as a batch is sent (its answers cannot be in yet).
/// Results of at most 1 MiB, so the `Start` resuming a gather of three fits
/// the 5 MiB the sidecar then accepts in one message.
fn parking_config() -> SidecarConfig {
    let limits = tether_sidecar::Limits { result_bytes: 1 << 20, ..tether_sidecar::Limits::default() };
    SidecarConfig { limits, park: ParkConfig { after: Duration::ZERO, ..ParkConfig::default() }, ..test_config() }
}

/// Fifty-one calls: loops, a dict, output between calls, a sleep; the last
/// call passes the 50-call cap.
const FIFTY_CALLS: &str = r#"
import asyncio
seen = {}
total = 0
for i in range(51):
    r = call("echo", n=i, tag=f"t{i % 3}")
    if r["ok"]:
        total += r["value"]["n"]
        seen[r["value"]["tag"]] = seen.get(r["value"]["tag"], 0) + 1
    else:
        seen["refused"] = r["error"]["code"]
    if i % 10 == 0:
        print("at", i, total)
    if i == 25:
        await asyncio.sleep(0.01)
{"total": total, "seen": seen}
"#;

async fn run(client: &tether_backend::SidecarClient, source: &str, may_park: bool) -> tether_backend::RunOutcome {
    let recorder = Recorder::new();
    let request = tether_backend::RunRequest { may_park, ..demo_request(source) };
    client.run(request, recorder.as_ref()).await.unwrap()
}

#[tokio::test]
async fn a_run_parked_at_each_of_its_calls_ends_as_one_never_parked() {
    let (_sidecar, client) = sidecar_with(parking_config()).await;
    let parked = run(&client, FIFTY_CALLS, true).await;
    let live = run(&client, FIFTY_CALLS, false).await;
    assert!(live.is_ok(), "{live:?}");
    assert_eq!(live.parks, 0, "a run that may not park never does");
    assert_eq!(parked.parks, 50, "one park per forwarded call; the refused 51st waits on nothing");
    assert_eq!(parked.result, live.result);
    assert_eq!(parked.result.as_ref().unwrap()["seen"]["refused"], "script_call_cap_reached", "the cap carried");
    assert_eq!(parked.stdout, live.stdout, "all output, repeated in `Finished` across parks");
    assert_eq!((parked.stats.calls, parked.stats.calls_refused_by_cap), (51, 1));
    assert_eq!((live.stats.calls, live.stats.calls_refused_by_cap), (51, 1));
    assert!(parked.stats.cpu_time_us > 0 && parked.stats.wall_time_us >= parked.stats.cpu_time_us);
}

#[tokio::test]
async fn a_gathered_batch_parks_once_and_resumes_with_every_result_in_order() {
    let (_sidecar, client) = sidecar_with(parking_config()).await;
    let source = r#"
import asyncio
rs = await asyncio.gather(call_async("echo", n=1), call_async("echo", n=2), call_async("echo", n=3))
one = await call_async("echo", n=4)
[r["value"]["n"] for r in rs] + [one["value"]["n"]]
"#;
    let parked = run(&client, source, true).await;
    assert!(parked.is_ok(), "{parked:?}");
    assert_eq!(parked.result, Some(serde_json::json!([1, 2, 3, 4])));
    assert_eq!(parked.parks, 2, "one park per batch");
}

#[tokio::test]
async fn a_batch_whose_resume_would_not_fit_one_message_waits_on_instead() {
    // Default limits: results of up to 4 MiB, 8 MiB accepted in one message.
    let config = SidecarConfig { park: ParkConfig { after: Duration::ZERO, ..ParkConfig::default() }, ..test_config() };
    let (_sidecar, client) = sidecar_with(config).await;
    let source = r#"
import asyncio
rs = await asyncio.gather(call_async("echo", n=1), call_async("echo", n=2))
one = call("echo", n=3)
[r["value"]["n"] for r in rs] + [one["value"]["n"]]
"#;
    let outcome = run(&client, source, true).await;
    assert_eq!(outcome.result, Some(serde_json::json!([1, 2, 3])), "{outcome:?}");
    assert_eq!(outcome.parks, 1, "the gather of two waits live (2 x 4 MiB of results); the one call parks");
}

#[tokio::test]
async fn a_run_that_may_park_but_whose_calls_answer_in_time_never_parks() {
    let config =
        SidecarConfig { park: ParkConfig { after: Duration::from_secs(60), ..ParkConfig::default() }, ..test_config() };
    let (_sidecar, client) = sidecar_with(config).await;
    let outcome = run(&client, "[call('echo', n=i)['value']['n'] for i in range(5)]", true).await;
    assert_eq!(outcome.result, Some(serde_json::json!([0, 1, 2, 3, 4])));
    assert_eq!(outcome.parks, 0);
}

/// A raw stream: `Start` of `source` that may park.
fn start(run_id: &str, source: &str, resume: Option<pb::Resume>) -> pb::BackendMessage {
    let request = demo_request(source);
    pb::BackendMessage {
        kind: Some(backend_message::Kind::Start(pb::Start {
            run_id: run_id.into(),
            turn_id: "turn-1".into(),
            parent_call_id: "p".into(),
            source: request.source,
            language: "python".into(),
            input_json: request.input.to_string(),
            may_park: true,
            resume,
            ..Default::default()
        })),
    }
}

/// Opens a raw run and reads until it parks or finishes.
async fn open(
    raw: &mut RawClient<tonic::transport::Channel>,
    message: pb::BackendMessage,
) -> (mpsc::Sender<pb::BackendMessage>, sidecar_message::Kind) {
    let (tx, rx) = mpsc::channel(8);
    tx.send(message).await.unwrap();
    let mut inbound = raw.run(ReceiverStream::new(rx)).await.unwrap().into_inner();
    loop {
        match inbound.message().await.unwrap().and_then(|m| m.kind) {
            Some(end @ (sidecar_message::Kind::Parked(_) | sidecar_message::Kind::Finished(_))) => return (tx, end),
            Some(_) => {}
            None => panic!("the stream ended without `Parked` or `Finished`"),
        }
    }
}

fn echo_result(id: &str) -> pb::ToolResult {
    pb::ToolResult { id: id.into(), outcome: Some(pb::tool_result::Outcome::ValueJson(r#"{"n": 7}"#.into())) }
}

#[tokio::test]
async fn a_parked_state_resumes_only_its_own_run_and_whole() {
    let (sidecar, client) = sidecar_with(parking_config()).await;
    let mut raw = RawClient::connect(sidecar.url()).await.unwrap();
    let source = "print('before')\nr = call('echo', n=1)\nprint('after')\nr['value']['n'] * 6";
    let (_tx, end) = open(&mut raw, start("r1", source, None)).await;
    let sidecar_message::Kind::Parked(parked) = end else { panic!("the run must park: {end:?}") };
    assert_eq!(parked.awaiting, vec!["p/1".to_owned()]);
    assert!(parked.state.len() < 16 << 10, "a parked run is kilobytes: {} bytes", parked.state.len());
    // The sidecar holds nothing of a parked run (its task ends just after `Parked`).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while client.describe().await.unwrap().live_runs != 0 {
        assert!(tokio::time::Instant::now() < deadline, "a parked run is still live in the sidecar");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let refused = |finished: &sidecar_message::Kind| match finished {
        sidecar_message::Kind::Finished(f) => (f.status(), f.error.clone().unwrap_or_default().kind),
        other => panic!("expected `Finished`, got {other:?}"),
    };
    let resume = |state: Vec<u8>| Some(pb::Resume { state, results: vec![echo_result("p/1")] });
    // Cut, altered, or another run's: refused, and nothing of the script runs.
    let mut altered = parked.state.clone();
    let middle = altered.len() / 2;
    altered[middle] ^= 0x20;
    for (what, run_id, state) in [
        ("cut", "r1", parked.state[..parked.state.len() - 1].to_vec()),
        ("altered", "r1", altered),
        ("another run's", "r2", parked.state.clone()),
        ("empty", "r1", Vec::new()),
    ] {
        let (_tx, end) = open(&mut raw, start(run_id, source, resume(state))).await;
        let (status, kind) = refused(&end);
        assert_eq!((status, kind.as_str()), (pb::RunStatus::ResumeRefused, "parked_state_invalid"), "{what}");
    }
    // Another parent call: its call ids would not go on from the parked run's.
    let mut other_parent = start("r1", source, resume(parked.state.clone()));
    if let Some(backend_message::Kind::Start(start)) = &mut other_parent.kind {
        start.parent_call_id = "q".into();
    }
    let (_tx, end) = open(&mut raw, other_parent).await;
    assert_eq!(refused(&end).1, "parked_state_invalid", "another parent call");
    // Results that do not answer exactly what the run waits on: refused at admission.
    let tx_rx = mpsc::channel(2);
    tx_rx.0.send(start("r1", source, Some(pb::Resume { state: parked.state.clone(), results: vec![] }))).await.unwrap();
    let status = raw.run(ReceiverStream::new(tx_rx.1)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("no result for `p/1`"), "{status:?}");

    // The real state, with its result: the run goes on from its call.
    let (_tx, end) = open(&mut raw, start("r1", source, resume(parked.state.clone()))).await;
    let sidecar_message::Kind::Finished(finished) = end else { panic!("{end:?}") };
    assert_eq!(finished.status(), pb::RunStatus::Ok, "{finished:?}");
    assert_eq!(finished.result_json, "42");
    assert_eq!(String::from_utf8_lossy(&finished.stdout), "before\nafter\n", "output from before the park too");
    assert_eq!(finished.stats.unwrap().calls, 1);
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_state_sealed_by_another_sidecar_key_is_refused() {
    let key = |byte| ParkConfig {
        after: Duration::ZERO,
        key: Some(tether_sidecar::ParkKey::from_secret(&[byte; 32]).unwrap()),
        ..ParkConfig::default()
    };
    let (first, _) = sidecar_with(SidecarConfig { park: key(1), ..test_config() }).await;
    let (same_key, _) = sidecar_with(SidecarConfig { park: key(1), ..test_config() }).await;
    let (other_key, _) = sidecar_with(SidecarConfig { park: key(2), ..test_config() }).await;
    let source = "call('echo', n=1)['value']['n']";
    let (_tx, end) = open(&mut RawClient::connect(first.url()).await.unwrap(), start("r1", source, None)).await;
    let sidecar_message::Kind::Parked(parked) = end else { panic!("{end:?}") };
    let resume = Some(pb::Resume { state: parked.state, results: vec![echo_result("p/1")] });

    let (_tx, end) =
        open(&mut RawClient::connect(other_key.url()).await.unwrap(), start("r1", source, resume.clone())).await;
    let sidecar_message::Kind::Finished(finished) = end else { panic!("{end:?}") };
    assert_eq!(finished.error.unwrap().kind, "parked_state_invalid");
    // Any sidecar with the same key resumes it: the run is the backend's, not the sidecar's.
    let (_tx, end) = open(&mut RawClient::connect(same_key.url()).await.unwrap(), start("r1", source, resume)).await;
    let sidecar_message::Kind::Finished(finished) = end else { panic!("{end:?}") };
    assert_eq!((finished.status(), finished.result_json.as_str()), (pb::RunStatus::Ok, "7"), "{finished:?}");
}

#[tokio::test]
async fn a_call_awaiting_a_person_parks_the_run_at_once() {
    // `park_after` an hour: only `AwaitingPerson` can park this run.
    let config = SidecarConfig {
        park: ParkConfig { after: Duration::from_secs(3600), ..ParkConfig::default() },
        ..test_config()
    };
    let (sidecar, _client) = sidecar_with(config).await;
    let mut raw = RawClient::connect(sidecar.url()).await.unwrap();
    let (tx, rx) = mpsc::channel(8);
    tx.send(start("r1", "call('echo', n=1)", None)).await.unwrap();
    let mut inbound = raw.run(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let call = loop {
        if let Some(sidecar_message::Kind::ToolCall(call)) = inbound.message().await.unwrap().and_then(|m| m.kind) {
            break call;
        }
    };
    let awaiting = pb::AwaitingPerson { id: call.id.clone() };
    tx.send(pb::BackendMessage { kind: Some(backend_message::Kind::AwaitingPerson(awaiting)) }).await.unwrap();
    let parked = loop {
        match inbound.message().await.unwrap().and_then(|m| m.kind) {
            Some(sidecar_message::Kind::Parked(parked)) => break parked,
            Some(sidecar_message::Kind::Output(_)) => {}
            other => panic!("expected `Parked`, got {other:?}"),
        }
    };
    assert_eq!(parked.awaiting, vec![call.id]);
    assert!(inbound.message().await.unwrap().is_none(), "the stream ends after `Parked`");
}

#[tokio::test]
async fn a_drain_parks_every_waiting_run_and_another_sidecar_resumes_it() {
    // Only the drain can park these runs: `park_after` is an hour.
    let park = || ParkConfig {
        after: Duration::from_secs(3600),
        key: Some(tether_sidecar::ParkKey::from_secret(b"a deployment's shared park key, 32+ bytes").unwrap()),
        ..ParkConfig::default()
    };
    let (old, _) = sidecar_with(SidecarConfig { park: park(), ..test_config() }).await;
    let (new, _) = sidecar_with(SidecarConfig { park: park(), ..test_config() }).await;
    let mut raw = RawClient::connect(old.url()).await.unwrap();
    let (tx, rx) = mpsc::channel(8);
    tx.send(start("r1", "print('asked')\nr = call('echo', n=1)\nr['value']['n'] + 1", None)).await.unwrap();
    let mut inbound = raw.run(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let call = loop {
        if let Some(sidecar_message::Kind::ToolCall(call)) = inbound.message().await.unwrap().and_then(|m| m.kind) {
            break call;
        }
    };
    // A deploy: the old sidecar drains with a deadline far past the test.
    let drain = tokio::spawn({
        let sidecar = old.sidecar.clone();
        async move { sidecar.drain(Duration::from_secs(600)).await }
    });
    let parked = loop {
        match inbound.message().await.unwrap().and_then(|m| m.kind) {
            Some(sidecar_message::Kind::Parked(parked)) => break parked,
            Some(sidecar_message::Kind::Output(_)) => {}
            other => panic!("a draining sidecar parks a waiting run: {other:?}"),
        }
    };
    let report = tokio::time::timeout(Duration::from_secs(60), drain).await.unwrap().unwrap();
    assert_eq!(
        (report.runs_at_start, report.cancelled),
        (1, 0),
        "the drain ends when the run parks, cancelling nothing"
    );
    assert_eq!(parked.awaiting, vec![call.id.clone()]);

    let resume = Some(pb::Resume { state: parked.state, results: vec![echo_result(&call.id)] });
    let (_tx, end) = open(
        &mut RawClient::connect(new.url()).await.unwrap(),
        start("r1", "print('asked')\nr = call('echo', n=1)\nr['value']['n'] + 1", resume),
    )
    .await;
    let sidecar_message::Kind::Finished(finished) = end else { panic!("{end:?}") };
    assert_eq!((finished.status(), finished.result_json.as_str()), (pb::RunStatus::Ok, "8"), "{finished:?}");
    assert_eq!(String::from_utf8_lossy(&finished.stdout), "asked\n");
}

/// Approves every call after `delay`, as a person would.
struct SlowPerson {
    delay: Duration,
}

#[async_trait::async_trait]
impl tether_backend::turn::Approver for SlowPerson {
    async fn decide(&self, _: &tether_backend::turn::ApprovalRequest) -> tether_backend::turn::ApprovalDecision {
        tokio::time::sleep(self.delay).await;
        tether_backend::turn::ApprovalDecision::approve("a person")
    }
}

#[tokio::test]
async fn a_script_call_waiting_on_a_person_parks_its_run_and_the_effect_happens_once() {
    use tether_backend::turn::{CallOrigin, CallRequest, ScriptTool, ToolOutput, ToolSpec, Turn, executor_fn};
    // `park_after` an hour: only the turn's word that a person decides parks the run.
    let config = SidecarConfig {
        park: ParkConfig { after: Duration::from_secs(3600), ..ParkConfig::default() },
        ..test_config()
    };
    let (sidecar, client) = sidecar_with(config).await;
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let wire = {
        let sent = sent.clone();
        executor_fn(move |_, args: serde_json::Value| {
            let sent = sent.clone();
            async move {
                sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(ToolOutput::new(serde_json::json!({"wired": args["amount"]})))
            }
        })
    };
    let schema = serde_json::json!({"type": "object"});
    let turn = Turn::builder("turn-park")
        .approver(std::sync::Arc::new(SlowPerson { delay: Duration::from_millis(300) }))
        .approval_timeout(Duration::from_secs(60))
        .add_tool(ScriptTool::new(client.clone()).parking(true).into_tool().unwrap())
        .tool(ToolSpec::new("wire", "Wires money.", schema).requires_approval(), wire)
        .build()
        .unwrap();
    let source = "r = call('wire', amount=5)\nprint('wired')\nr['value']";
    let args = serde_json::json!({"code": source});
    let result = turn.execute(CallRequest::new("s1", "run_script", args), CallOrigin::Model).await;
    let tether_backend::turn::CallOutcome::Ok(output) = &result.outcome else { panic!("{result:?}") };
    assert_eq!(output["result"], serde_json::json!({"wired": 5}), "{output}");
    assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1, "the approved effect ran once");
    let metrics = sidecar.sidecar.metrics_text();
    let parked = metrics.lines().find(|line| line.starts_with("tether_sidecar_runs_total{status=\"parked\"}"));
    assert_eq!(parked, Some("tether_sidecar_runs_total{status=\"parked\"} 1"), "{metrics}");
    assert!(metrics.contains("tether_sidecar_runs_resumed_total 1"), "{metrics}");
}

#[tokio::test]
async fn the_demo_script_parks_in_under_8_kib_at_every_call() {
    let (sidecar, client) = sidecar_with(parking_config()).await;
    let outcome = run(&client, tether_cli::demo::SCRIPT, true).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    let live = run(&client, tether_cli::demo::SCRIPT, false).await;
    assert_eq!((outcome.result.as_ref(), outcome.stdout.as_str()), (live.result.as_ref(), live.stdout.as_str()));
    assert_eq!(outcome.parks, outcome.stats.calls, "a park at every call");
    // Every sealed state the backend got, from the sidecar's histogram.
    let metrics = sidecar.sidecar.metrics_text();
    let value = |name: &str| {
        metrics.lines().find_map(|line| line.strip_prefix(name)).and_then(|v| v.trim().parse::<f64>().ok()).unwrap()
    };
    let (count, sum) =
        (value("tether_sidecar_parked_state_bytes_count "), value("tether_sidecar_parked_state_bytes_sum "));
    let at_most_8_kib = value("tether_sidecar_parked_state_bytes_bucket{le=\"8192\"} ");
    assert_eq!(count, f64::from(outcome.parks));
    assert_eq!(at_most_8_kib, count, "every parked state is at most 8 KiB (mean {} bytes)", sum / count);
    eprintln!("the demo script parked {count} times, {:.0} bytes on average", sum / count);
}
