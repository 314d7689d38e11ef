//! Faults, with real processes and real sockets: the sidecar killed with
//! SIGKILL mid-run, the backend killed mid-call, a tool that hangs, an
//! approval that never comes, and a connection that stalls (a TCP proxy in
//! the test stops forwarding without closing). Each fault ends the run on
//! both sides with a clear value, loses no record, and frees what the run
//! held.

use crate::metrics::Metrics;
use crate::support::{PATIENCE, SidecarProcess, shared_cache};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tether_backend::turn::{
    CallOrigin, CallOutcome, CallRequest, CallResult, LedgerState, PolicyApprover, ScriptTool, SqliteAuditStore,
    ToolOutput, ToolSpec, Turn, executor_fn,
};
use tether_backend::{CallHandler, ConnectOptions, Keepalive, RunRequest, ScriptCall, SidecarClient, ToolOutcome};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tonic_health::pb::health_check_response::ServingStatus;

/// The generous bound on anything a fault must bring about (not a speed
/// assertion; the measured time is printed).
const PROMPTLY: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// A backend turn over the sidecar process, with a SQLite store on disk
// ---------------------------------------------------------------------------

/// A turn whose tools are: `send` (approval required, answers at once),
/// `send_slow` (approval required, never finishes), `lookup` (read-only,
/// never finishes), `hang` (read-only, never finishes, 300 ms time limit)
/// and `ping` (answers `"pong"`).
struct Backend {
    turn: Turn,
    db: PathBuf,
    /// Calls of `send_slow` and `lookup` in progress.
    hanging: Arc<AtomicU32>,
    _dir: tempfile::TempDir,
}

impl Backend {
    fn new(client: SidecarClient, approver: PolicyApprover) -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("audit.db");
        let hanging = Arc::new(AtomicU32::new(0));
        let schema = json!({"type": "object"});
        let never = |hanging: &Arc<AtomicU32>| {
            let hanging = hanging.clone();
            executor_fn(move |_, _| {
                let hanging = hanging.clone();
                async move {
                    hanging.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<Result<ToolOutput, _>>().await
                }
            })
        };
        let turn = Turn::builder("turn-faults")
            .audit_store(Arc::new(SqliteAuditStore::new(&db)))
            .approver(Arc::new(approver))
            .approval_timeout(Duration::from_millis(300))
            .add_tool(ScriptTool::new(client).into_tool().unwrap())
            .tool(
                ToolSpec::new("send", "Sends an email.", schema.clone()).requires_approval().allow_repeats(),
                executor_fn(|_, args: Value| async move { Ok(ToolOutput::new(json!({"sent": args["to"]}))) }),
            )
            .tool(
                ToolSpec::new("send_slow", "Sends, never done.", schema.clone()).requires_approval().concurrency_safe(),
                never(&hanging),
            )
            .tool(
                ToolSpec::new("lookup", "Looks up, never done.", schema.clone()).read_only().concurrency_safe(),
                never(&hanging),
            )
            .tool(
                ToolSpec::new("hang", "Never done.", schema.clone()).read_only().time_limit(Duration::from_millis(300)),
                executor_fn(|_, _| std::future::pending()),
            )
            .tool(
                ToolSpec::new("ping", "Answers pong.", schema).read_only(),
                executor_fn(|_, _| async { Ok(ToolOutput::new(json!("pong"))) }),
            )
            .build()
            .unwrap();
        Backend { turn, db, hanging, _dir: dir }
    }

    /// The model's `run_script` call `s1` of `source`.
    async fn script(&self, source: &str) -> CallResult {
        self.turn.execute(CallRequest::new("s1", "run_script", json!({"code": source})), CallOrigin::Model).await
    }
}

async fn backend_on(sidecar: &SidecarProcess, approver: PolicyApprover) -> Backend {
    sidecar.wait_for_health("", ServingStatus::Serving).await;
    let client = SidecarClient::connect(&format!("http://{}", sidecar.address)).await.unwrap();
    Backend::new(client, approver)
}

/// Polls `condition` every 5 ms until it holds; the time it took. Panics
/// after [`PROMPTLY`].
async fn within<F: Future<Output = bool>>(what: &str, mut condition: impl FnMut() -> F) -> Duration {
    let start = Instant::now();
    while !condition().await {
        assert!(start.elapsed() < PROMPTLY, "not within {PROMPTLY:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

/// True when the sidecar at `url` holds no run, slot or waiting place.
async fn all_freed(url: &str) -> bool {
    let metrics = Metrics::scrape(url).await;
    [
        "tether_sidecar_runs_live",
        "tether_sidecar_runs_waiting_on_tools",
        "tether_sidecar_slots_in_use",
        "tether_sidecar_guest_memory_bytes",
    ]
    .iter()
    .all(|gauge| metrics.value(gauge, &[]) == 0.0)
}

/// Asserts a run can still be carried out on `sidecar`.
async fn next_run_succeeds(sidecar: &SidecarProcess) {
    let backend = backend_on(sidecar, PolicyApprover::approve_all()).await;
    let result = backend.script("call('ping')['value']").await;
    assert_eq!(result.outcome, CallOutcome::Ok(json!({"result": "pong", "stdout": "", "stderr": ""})), "{result:?}");
}

// ---------------------------------------------------------------------------
// The sidecar killed mid-run
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_sidecar_killed_mid_run_fails_the_script_call_and_the_ledger_keeps_every_started_call() {
    let sidecar = SidecarProcess::start(&shared_cache(), &[]);
    let backend = backend_on(&sidecar, PolicyApprover::approve_all()).await;
    let source = "\
import asyncio
call('send', to='dana@example.com')
await asyncio.gather(call_async('send_slow', {'to': 'erin@example.com'}), call_async('lookup', {}))
";
    let run = backend.script(source);
    tokio::pin!(run);
    let hanging = backend.hanging.clone();
    tokio::select! {
        result = &mut run => panic!("the run ended before the kill: {result:?}"),
        _ = within("both slow calls run", || { let hanging = hanging.clone(); async move { hanging.load(Ordering::SeqCst) == 2 } }) => {}
    }
    sidecar.signal(Signal::SIGKILL);
    let killed = Instant::now();
    let result = tokio::time::timeout(PROMPTLY, run).await.expect("the script call ends once the sidecar is gone");
    println!("the script call ended {:?} after SIGKILL", killed.elapsed());

    let CallOutcome::ToolError { code, message } = &result.outcome else { panic!("not a failure: {result:?}") };
    assert_eq!(code, "sidecar_lost", "{message}");
    assert!(message.contains("went away mid-run") && message.contains("may already have taken effect"), "{message}");
    let metadata = result.metadata.as_ref().unwrap();
    assert!(metadata["run"]["error"].as_str().unwrap().contains("the sidecar went away mid-run"), "{metadata}");

    // Every call that started has its audit row, the script call's last.
    let audit = backend.turn.audit_log().await.unwrap();
    let ids: Vec<&str> = audit.iter().map(|row| row.call.call_id.as_str()).collect();
    for id in ["s1/1", "s1/2", "s1/3", "s1"] {
        assert!(ids.contains(&id), "no audit row for `{id}`: {audit:#?}");
    }
    assert_eq!(audit.last().unwrap().code.as_deref(), Some("sidecar_lost"));

    // Both approval-required calls may have had their effect: the one that
    // settled, and the one cut off while it ran.
    let possibly = backend.turn.possibly_executed_approval_actions().await.unwrap();
    let listed: Vec<(&str, &str, LedgerState)> =
        possibly.iter().map(|e| (e.call.call_id.as_str(), e.call.tool.as_str(), e.state)).collect();
    assert_eq!(listed, [("s1/1", "send", LedgerState::Settled), ("s1/2", "send_slow", LedgerState::Started)]);

    // On disk: a fresh store on the same file (a restarted backend) agrees.
    let reopened = SqliteAuditStore::new(&backend.db);
    let rows = tether_backend::turn::AuditStore::ledger(&reopened, "turn-faults").await.unwrap();
    let on_disk: Vec<(&str, LedgerState)> =
        rows.iter().filter(|e| e.approval_required).map(|e| (e.call.call_id.as_str(), e.state)).collect();
    assert_eq!(on_disk, [("s1/1", LedgerState::Settled), ("s1/2", LedgerState::Started)]);

    // A new sidecar serves the next run.
    next_run_succeeds(&SidecarProcess::start(&shared_cache(), &[])).await;
}

// ---------------------------------------------------------------------------
// The backend killed mid-call
// ---------------------------------------------------------------------------

/// The environment variable that makes [`backend_child`] a backend of the
/// sidecar it names.
const CHILD_SIDECAR: &str = "TETHER_FAULTS_CHILD_SIDECAR";
/// What [`backend_child`] prints once its script waits on a tool result.
const CHILD_WAITING: &str = "backend child: the script waits on call ";

/// A call handler that never answers.
struct NeverAnswers;

#[async_trait::async_trait]
impl CallHandler for NeverAnswers {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        println!("{CHILD_WAITING}{}", call.id);
        std::future::pending().await
    }
}

/// Not a test of its own: the backend process of
/// [`a_backend_killed_mid_call_frees_the_run_slot_and_waiting_place`], which
/// runs this test binary again with only this test and [`CHILD_SIDECAR`] set.
#[tokio::test]
#[ignore = "the backend child process of `a_backend_killed_mid_call_…`; that test starts it"]
async fn backend_child() {
    let address =
        std::env::var(CHILD_SIDECAR).expect("run by `a_backend_killed_mid_call_…`, which sets the sidecar's address");
    let client = SidecarClient::connect(&address).await.unwrap();
    let outcome = client.run(RunRequest::python("child-run", "call('hold')"), &NeverAnswers).await;
    panic!("the run was to be killed while waiting, yet ended: {outcome:?}");
}

#[tokio::test]
async fn a_backend_killed_mid_call_frees_the_run_slot_and_waiting_place() {
    let sidecar = SidecarProcess::start(&shared_cache(), &["--metrics-listen", "127.0.0.1:0"]);
    let url = sidecar.metrics_url.clone().unwrap();
    sidecar.wait_for_health("", ServingStatus::Serving).await;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["faults::backend_child", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_SIDECAR, format!("http://{}", sidecar.address))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let waiting = tokio::task::spawn_blocking(move || {
        stdout.lines().map_while(Result::ok).find(|line| line.starts_with(CHILD_WAITING))
    });
    let line = tokio::time::timeout(PATIENCE, waiting).await.unwrap().unwrap();
    assert!(line.is_some(), "the backend child ended before its script waited: {:?}", child.wait());

    let held = Metrics::scrape(&url).await;
    assert_eq!(held.value("tether_sidecar_runs_live", &[]), 1.0);
    assert_eq!(held.value("tether_sidecar_runs_waiting_on_tools", &[]), 1.0);
    child.kill().unwrap(); // SIGKILL
    let killed = Instant::now();
    child.wait().unwrap();
    within("the sidecar frees the run, its slot and waiting place", || all_freed(&url)).await;
    println!("the sidecar freed the run {:?} after SIGKILL of its backend", killed.elapsed());

    let after = Metrics::scrape(&url).await;
    assert_eq!(after.value("tether_sidecar_runs_total", &[("status", "backend_gone")]), 1.0);
    next_run_succeeds(&sidecar).await;
}

// ---------------------------------------------------------------------------
// A tool that hangs, an approval that never comes
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_hanging_tool_and_a_missing_approval_end_at_their_limits_and_the_script_goes_on() {
    let sidecar = SidecarProcess::start(&shared_cache(), &[]);
    let backend = backend_on(&sidecar, PolicyApprover::never_answer()).await;
    let source = "\
h = call('hang')
s = call('send', to='dana@example.com')
[h['error']['code'], s['error']['code'], call('ping')['value']]
";
    let result = backend.script(source).await;
    let CallOutcome::Ok(value) = &result.outcome else { panic!("the script failed: {result:?}") };
    assert_eq!(value["result"], json!(["tool_timeout", "approval_timeout", "pong"]), "{value}");

    let audit = backend.turn.audit_log().await.unwrap();
    let codes: Vec<(&str, Option<&str>)> = audit.iter().map(|r| (r.call.tool.as_str(), r.code.as_deref())).collect();
    assert_eq!(
        codes,
        [("hang", Some("tool_timeout")), ("send", Some("approval_timeout")), ("ping", None), ("run_script", None)]
    );
    // The send never reached execution: nothing may have happened.
    assert!(backend.turn.possibly_executed_approval_actions().await.unwrap().is_empty());
}

// ---------------------------------------------------------------------------
// A stalled connection
// ---------------------------------------------------------------------------

/// A TCP proxy that forwards both ways until [`StallingProxy::stall`]; then it
/// neither reads nor writes, and keeps every connection open.
struct StallingProxy {
    address: String,
    stall: CancellationToken,
    _tasks: JoinSet<()>,
}

impl StallingProxy {
    async fn to(upstream: &str) -> StallingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let stall = CancellationToken::new();
        let stalled = stall.clone();
        let upstream = upstream.to_owned();
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            // Owns the connections' pumps: they end with the proxy.
            let mut pumps = JoinSet::new();
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = TcpStream::connect(&upstream).await else { continue };
                let (in_read, in_write) = inbound.into_split();
                let (out_read, out_write) = outbound.into_split();
                pumps.spawn(pump(in_read, out_write, stalled.clone()));
                pumps.spawn(pump(out_read, in_write, stalled.clone()));
            }
        });
        StallingProxy { address, stall, _tasks: tasks }
    }

    fn stall(&self) {
        self.stall.cancel();
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalled: CancellationToken,
) {
    let mut buffer = vec![0; 16 << 10];
    loop {
        tokio::select! {
            () = stalled.cancelled() => {
                // Hold both halves open, forwarding nothing, until the proxy is dropped.
                std::future::pending::<()>().await;
            }
            read = from.read(&mut buffer) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => if to.write_all(&buffer[..n]).await.is_err() { return },
            },
        }
    }
}

#[tokio::test]
async fn a_stalled_connection_is_found_by_keepalive_and_the_run_ends_on_both_sides() {
    let sidecar = SidecarProcess::start(
        &shared_cache(),
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--keepalive-interval-seconds",
            "0.5",
            "--keepalive-timeout-seconds",
            "0.5",
        ],
    );
    let url = sidecar.metrics_url.clone().unwrap();
    sidecar.wait_for_health("", ServingStatus::Serving).await;
    let proxy = StallingProxy::to(&sidecar.address).await;
    let keepalive = Keepalive { interval: Duration::from_millis(500), timeout: Duration::from_millis(500) };
    let client = SidecarClient::connect_with(
        &format!("http://{}", proxy.address),
        &ConnectOptions { keepalive, ..Default::default() },
    )
    .await
    .unwrap();
    let backend = Backend::new(client, PolicyApprover::approve_all());

    let run = backend.script("call('lookup')");
    tokio::pin!(run);
    let hanging = backend.hanging.clone();
    tokio::select! {
        result = &mut run => panic!("the run ended before the stall: {result:?}"),
        _ = within("the lookup runs", || { let hanging = hanging.clone(); async move { hanging.load(Ordering::SeqCst) == 1 } }) => {}
    }
    assert_eq!(Metrics::scrape(&url).await.value("tether_sidecar_runs_waiting_on_tools", &[]), 1.0);
    proxy.stall();
    let stalled = Instant::now();

    // The backend's side: the script call fails, saying the sidecar went away.
    let result = tokio::time::timeout(PROMPTLY, run).await.expect("the backend's keepalive ends the run");
    println!("the backend ended the run {:?} after the stall (keepalive 0.5 s + 0.5 s)", stalled.elapsed());
    assert_eq!(result.error_code(), Some("sidecar_lost"), "{result:?}");
    // The sidecar's side: the run ends, freeing everything. hyper closes a
    // connection whose PING went unanswered with a NO_ERROR reset, which the
    // run's request stream reports as a clean end — a half-close — unless
    // the closed response stream is noticed first: either way the run is
    // over and was not counted as ending by itself.
    within("the sidecar frees the run", || all_freed(&url)).await;
    println!("the sidecar freed the run {:?} after the stall", stalled.elapsed());
    let after = Metrics::scrape(&url).await;
    let ended_as = |status| after.value("tether_sidecar_runs_total", &[("status", status)]);
    assert_eq!(ended_as("backend_gone") + ended_as("cancelled"), 1.0, "the run ends once, as the backend leaving");
    assert_eq!(ended_as("ok"), 0.0);
    next_run_succeeds(&sidecar).await;
}
