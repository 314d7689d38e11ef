//! What one backend can hold of the sidecar through its runs, against the
//! real process (`docs/security.md`, "What a peer can hold"): a backend that
//! stops reading its run's stream holds no execution slot and loses the run
//! at the stall timeout; the `Start` bytes held for runs stay within
//! `--max-start-mib`; a stream that never sends `Start` is let go at
//! `--start-timeout-seconds`. Each asserts that a legitimate client is served
//! meanwhile and that RSS stays within a stated bound.

use crate::metrics::Metrics;
use crate::support::{PATIENCE, Run, SidecarProcess, shared_cache, start};
use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use prost::Message as _;
use std::time::{Duration, Instant};
use tether_proto::pb::{self, backend_message, sidecar_message};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic_health::pb::health_check_response::ServingStatus;

/// The sidecar's resident memory now (`VmRSS`), KiB.
fn rss_kib(sidecar: &SidecarProcess) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", sidecar.pid())).unwrap();
    let line = status.lines().find_map(|line| line.strip_prefix("VmRSS:")).unwrap();
    line.trim().trim_end_matches("kB").trim().parse().unwrap()
}

/// Polls the metrics at `url` until `condition` holds of them.
async fn until(url: &str, what: &str, condition: impl Fn(&Metrics) -> bool) -> Metrics {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let metrics = Metrics::scrape(url).await;
        if condition(&metrics) {
            return metrics;
        }
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `message` as one gRPC frame.
fn frame(message: &pb::BackendMessage) -> Bytes {
    let body = message.encode_to_vec();
    let mut framed = BytesMut::with_capacity(5 + body.len());
    framed.put_u8(0);
    framed.put_u32(body.len() as u32);
    framed.extend_from_slice(&body);
    framed.freeze()
}

/// A run opened over raw HTTP/2 whose response stream nobody reads: the
/// client's window (64 KiB) fills and stays full. Its request side stays
/// open, so the run is not cancelled.
struct Unread {
    _send: h2::SendStream<Bytes>,
    body: h2::RecvStream,
    _client: h2::client::SendRequest<Bytes>,
}

impl Unread {
    async fn open(address: &str, first: pb::BackendMessage) -> Unread {
        let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
        let (client, connection) = h2::client::Builder::new()
            .initial_window_size(65_535)
            .initial_connection_window_size(65_535)
            .handshake::<_, Bytes>(tcp)
            .await
            .unwrap();
        // Driven (it answers PINGs and SETTINGS), but nobody reads the body.
        tokio::spawn(connection);
        let mut client = client.ready().await.unwrap();
        let request = http::Request::builder()
            .method("POST")
            .uri(format!("http://{address}/tether.v1.Sidecar/Run"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (response, mut send) = client.send_request(request, false).unwrap();
        send.send_data(frame(&first), false).unwrap();
        let response = response.await.unwrap();
        assert_eq!(response.status(), 200);
        Unread { _send: send, body: response.into_body(), _client: client }
    }

    /// Reads everything the stream still has: its messages, then the
    /// `grpc-status` and `grpc-message` it ends with.
    async fn read_to_end(mut self) -> (Vec<pb::SidecarMessage>, String, String) {
        let mut buffer = BytesMut::new();
        while let Some(chunk) = self.body.data().await {
            let chunk = chunk.unwrap();
            let _ = self.body.flow_control().release_capacity(chunk.len());
            buffer.extend_from_slice(&chunk);
        }
        let trailers = self.body.trailers().await.unwrap().unwrap_or_default();
        let header = |name: &str| trailers.get(name).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        let mut bytes = buffer.freeze();
        let mut messages = Vec::new();
        while bytes.remaining() >= 5 {
            let _compressed = bytes.get_u8();
            let len = bytes.get_u32() as usize;
            messages.push(pb::SidecarMessage::decode(bytes.split_to(len)).unwrap());
        }
        (messages, header("grpc-status"), header("grpc-message"))
    }
}

/// Prints about 1 MiB, then computes until its CPU limit.
const PRINTS_AND_LOOPS: &str = "line = 'x' * 1000\nwhile True:\n    print(line)\n";
/// Prints about 1 MiB, then calls a tool and waits for its result.
const PRINTS_THEN_CALLS: &str = "line = 'x' * 1000\nfor i in range(1100):\n    print(line)\ncall('echo', i=1)\n";

#[tokio::test]
async fn a_backend_that_stops_reading_holds_no_slot_and_loses_its_run_at_the_stall_timeout() {
    // The default placement (runs driven by their streams) and workers.
    for workers in ["0", "2"] {
        stops_reading(workers).await;
    }
}

async fn stops_reading(workers: &str) {
    let sidecar = SidecarProcess::start(
        &shared_cache(),
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--slots",
            "2",
            "--worker-threads",
            workers,
            "--cpu-seconds",
            "4",
            "--stall-timeout-seconds",
            "3",
        ],
    );
    let url = sidecar.metrics_url.clone().unwrap();
    sidecar.wait_for_health("", ServingStatus::Serving).await;
    let mut client = sidecar.client().await;
    Run::open(&mut client, "warm", "1").await.unwrap().finished().await;
    let baseline = rss_kib(&sidecar);

    // Two runs on a 2-slot sidecar whose backend never reads their streams.
    let loops = Unread::open(&sidecar.address, start("loops", PRINTS_AND_LOOPS)).await;
    let waits = Unread::open(&sidecar.address, start("waits", PRINTS_THEN_CALLS)).await;
    until(&url, "both unread runs admitted", |m| m.value("tether_sidecar_runs_live", &[]) >= 2.0).await;

    // A legitimate backend is served meanwhile, run after run.
    for i in 0..5 {
        let run = async {
            let mut run = Run::open(&mut client, &format!("legit-{i}"), "1 + 1").await.unwrap();
            run.finished().await
        };
        let finished = tokio::time::timeout(PATIENCE, run).await.expect("a legitimate run is served");
        assert_eq!(finished.status, pb::RunStatus::Ok as i32, "{finished:?}");
        assert_eq!(finished.result_json, "2");
    }
    let during = rss_kib(&sidecar);

    // The computing one ends at its CPU limit, the waiting one at the stall
    // timeout; neither holds a slot or a place after.
    let started = Instant::now();
    let ended = until(&url, "both unread runs end", |m| {
        m.value("tether_sidecar_runs_live", &[]) == 0.0 && m.value("tether_sidecar_slots_in_use", &[]) == 0.0
    })
    .await;
    eprintln!(
        "worker threads {workers}: both unread runs ended {:?} after the legitimate runs; RSS {baseline} KiB before, {during} KiB during",
        started.elapsed()
    );
    // The computing one may stall first (its output fills the window before
    // its CPU limit, on a loaded machine): either end is an end.
    let stalled = ended.value("tether_sidecar_runs_total", &[("status", "stream_stalled")]);
    let at_limit = ended.value("tether_sidecar_runs_total", &[("status", "limit_exceeded")]);
    assert!(stalled >= 1.0 && stalled + at_limit == 2.0, "{stalled} stalled, {at_limit} at their limit");
    assert_eq!(ended.value("tether_sidecar_runs_waiting_on_tools", &[]), 0.0);
    assert!(during <= baseline + 128 * 1024, "RSS {during} KiB with two unread runs, {baseline} KiB before");

    // Reading again, each backend learns how its run ended.
    let (messages, status, message) = waits.read_to_end().await;
    assert_eq!(status, "4", "DEADLINE_EXCEEDED: {message}");
    assert!(message.contains("stall-timeout-seconds"), "{message}");
    assert!(!messages.iter().any(|m| matches!(m.kind, Some(sidecar_message::Kind::Finished(_)))));
    let (messages, status, message) = loops.read_to_end().await;
    let finished = messages.iter().find_map(|m| match &m.kind {
        Some(sidecar_message::Kind::Finished(finished)) => Some(finished.clone()),
        _ => None,
    });
    match finished {
        Some(finished) => {
            assert_eq!(status, "0", "{message}");
            assert_eq!(finished.status, pb::RunStatus::LimitExceeded as i32);
            assert_eq!(finished.error.unwrap().limit, "cpu_time_ms");
        }
        None => assert!(status == "4" && message.contains("stall-timeout-seconds"), "{status}: {message}"),
    }
}

/// A Python run of `source` with `input_bytes` of input (a JSON string).
fn with_input(run_id: &str, source: &str, input_bytes: usize) -> pb::BackendMessage {
    let mut message = start(run_id, source);
    if let Some(backend_message::Kind::Start(start)) = &mut message.kind {
        start.input_json = format!("\"{}\"", "x".repeat(input_bytes));
    }
    message
}

/// A run whose stream stays open, its `Start` sent; `Err` if refused.
async fn open(
    client: &mut pb::sidecar_client::SidecarClient<tonic::transport::Channel>,
    first: pb::BackendMessage,
) -> Result<(mpsc::Sender<pb::BackendMessage>, tonic::Streaming<pb::SidecarMessage>), tonic::Status> {
    let (to_sidecar, receiver) = mpsc::channel(4);
    to_sidecar.send(first).await.unwrap();
    let from_sidecar = client.run(ReceiverStream::new(receiver)).await?.into_inner();
    Ok((to_sidecar, from_sidecar))
}

/// The budget of `Start` bytes the test sets, MiB, and the input of each
/// queued run (about the 7 MB).
const START_BUDGET_MIB: u64 = 64;
const BIG_INPUT: usize = 7_000_000;
const BIG_RUNS: usize = 30;

#[tokio::test]
async fn starts_past_the_byte_budget_are_refused_and_rss_stays_within_it() {
    let budget = START_BUDGET_MIB.to_string();
    let sidecar = SidecarProcess::start(
        &shared_cache(),
        &["--metrics-listen", "127.0.0.1:0", "--slots", "1", "--cpu-seconds", "600", "--max-start-mib", &budget],
    );
    let url = sidecar.metrics_url.clone().unwrap();
    sidecar.wait_for_health("", ServingStatus::Serving).await;
    let mut client = sidecar.client().await;
    Run::open(&mut client, "warm", "1").await.unwrap().finished().await;
    let baseline = rss_kib(&sidecar);

    // The one slot computes; every other run queues behind it.
    let busy = Run::open(&mut client, "busy", "while True:\n    pass\n").await.unwrap();
    until(&url, "the busy run holds the slot", |m| m.value("tether_sidecar_slots_in_use", &[]) == 1.0).await;

    // One `Start` after another, each with 7 MB of input.
    let (mut queued, mut refused) = (Vec::new(), 0);
    for i in 0..BIG_RUNS {
        match open(&mut client, with_input(&format!("big-{i}"), "1", BIG_INPUT)).await {
            Ok(run) => queued.push(run),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                assert!(status.message().contains("--max-start-mib"), "{}", status.message());
                refused += 1;
            }
        }
    }
    let held = Metrics::scrape(&url).await;
    let start_bytes = held.value("tether_sidecar_start_bytes", &[]);
    let rss = rss_kib(&sidecar);
    eprintln!(
        "{} of {BIG_RUNS} runs with {BIG_INPUT}-byte inputs queued, {refused} refused; `start_bytes` {start_bytes}; RSS {baseline} KiB before, {rss} KiB with them queued",
        queued.len()
    );
    assert!(!queued.is_empty() && refused > 0, "{} queued, {refused} refused", queued.len());
    assert_eq!(held.value("tether_sidecar_runs_queued", &[]), queued.len() as f64);
    assert_eq!(held.value("tether_sidecar_runs_refused_total", &[("reason", "start_bytes")]), refused as f64);
    assert!(start_bytes <= (START_BUDGET_MIB << 20) as f64, "{start_bytes}");
    // The budget, one `Start` being received, and room for malloc's own.
    let bound = baseline + (START_BUDGET_MIB << 10) + 64 * 1024;
    assert!(rss <= bound, "RSS {rss} KiB with the budget full, over {bound} KiB ({baseline} KiB before)");

    // A legitimate run with a small `Start` is admitted meanwhile and
    // served once the slot is free.
    let mut legit = Run::open(&mut client, "legit", "1 + 1").await.expect("a small `Start` fits beside them");
    busy.to_sidecar
        .send(pb::BackendMessage { kind: Some(backend_message::Kind::Cancel(pb::Cancel { reason: "done".into() })) })
        .await
        .unwrap();
    let finished = tokio::time::timeout(PATIENCE, legit.finished()).await.unwrap();
    assert_eq!(finished.result_json, "2", "{finished:?}");
    for (_, mut from_sidecar) in queued {
        while let Some(message) = from_sidecar.message().await.unwrap() {
            if let Some(sidecar_message::Kind::Finished(finished)) = message.kind {
                assert_eq!(finished.status, pb::RunStatus::Ok as i32, "{finished:?}");
            }
        }
    }
    until(&url, "every `Start` byte given back", |m| m.value("tether_sidecar_start_bytes", &[]) == 0.0).await;
}

/// Streams opened that never send `Start`.
const SILENT_STREAMS: usize = 50;

#[tokio::test]
async fn a_stream_that_sends_no_start_is_counted_and_refused_at_the_start_timeout() {
    let sidecar =
        SidecarProcess::start(&shared_cache(), &["--metrics-listen", "127.0.0.1:0", "--start-timeout-seconds", "2"]);
    let url = sidecar.metrics_url.clone().unwrap();
    sidecar.wait_for_health("", ServingStatus::Serving).await;
    let client = sidecar.client().await;

    let opened = Instant::now();
    let mut silent = tokio::task::JoinSet::new();
    for _ in 0..SILENT_STREAMS {
        let mut client = client.clone();
        silent.spawn(async move {
            let (to_sidecar, receiver) = mpsc::channel::<pb::BackendMessage>(1);
            let refused = client.run(ReceiverStream::new(receiver)).await;
            drop(to_sidecar);
            refused.map(|_| ()).unwrap_err()
        });
    }
    until(&url, "the silent streams counted", |m| {
        m.value("tether_sidecar_streams_awaiting_start", &[]) == SILENT_STREAMS as f64
    })
    .await;

    // Served meanwhile.
    let mut legit = Run::open(&mut client.clone(), "legit", "1 + 1").await.unwrap();
    assert_eq!(legit.finished().await.result_json, "2");

    while let Some(status) = silent.join_next().await {
        let status = status.unwrap();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
        assert!(status.message().contains("--start-timeout-seconds"), "{}", status.message());
    }
    eprintln!("{SILENT_STREAMS} streams that sent no `Start` were let go {:?} after they opened", opened.elapsed());
    let after = Metrics::scrape(&url).await;
    assert_eq!(after.value("tether_sidecar_streams_awaiting_start", &[]), 0.0);
    assert_eq!(after.value("tether_sidecar_runs_refused_total", &[("reason", "no_start")]), SILENT_STREAMS as f64);
}
