//! Memory after a burst: the idle sidecar gives its instance pool and
//! malloc's free memory back (`--idle-release-seconds`), while runs that
//! keep coming keep the pool warm. RSS is read from `/proc`.

use crate::metrics::Metrics;
use crate::support::{PATIENCE, SidecarProcess, shared_cache};
use serde_json::Value;
use std::time::Duration;
use tether_backend::{CallHandler, RunRequest, ScriptCall, SidecarClient, ToolOutcome};
use tokio::task::JoinSet;
use tonic_health::pb::health_check_response::ServingStatus;

/// Runs open at once in the burst, and the calls each makes.
const BURST_RUNS: usize = 200;
const BURST_CALLS: u64 = 10;

/// Answers `echo` with its `i` argument.
struct Echo;

#[async_trait::async_trait]
impl CallHandler for Echo {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        ToolOutcome::Ok(call.args["i"].clone())
    }
}

/// The sidecar's resident memory now (`VmRSS`), KiB.
fn rss_kib(sidecar: &SidecarProcess) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", sidecar.pid())).unwrap();
    let line = status.lines().find_map(|line| line.strip_prefix("VmRSS:")).unwrap();
    line.trim().trim_end_matches("kB").trim().parse().unwrap()
}

/// One run making `calls` calls; panics unless it returns their sum.
async fn one_run(client: &SidecarClient, id: String, calls: u64) {
    let source = format!("sum(call('echo', i=i)['value'] for i in range({calls}))");
    let outcome = client.run(RunRequest::python(id, source), &Echo).await.unwrap();
    assert_eq!(outcome.result, Some(Value::from((0..calls).sum::<u64>())), "{outcome:?}");
}

/// `BURST_RUNS` runs at once, each waiting on its calls (so each holds a
/// pool slot at the peak).
async fn burst(client: &SidecarClient) {
    let mut runs = JoinSet::new();
    for i in 0..BURST_RUNS {
        let client = client.clone();
        runs.spawn(async move { one_run(&client, format!("burst-{i}"), BURST_CALLS).await });
    }
    while let Some(joined) = runs.join_next().await {
        joined.unwrap();
    }
}

async fn pool_releases(url: &str) -> f64 {
    Metrics::scrape(url).await.value("tether_sidecar_pool_releases_total", &[])
}

#[tokio::test]
async fn an_idle_sidecar_gives_a_bursts_memory_back_and_runs_that_keep_coming_keep_it() {
    // The guest compiled beforehand, so the baseline holds no compiler
    // garbage (a sidecar that compiles on a cold cache starts far larger).
    let prepared = std::process::Command::new(env!("CARGO_BIN_EXE_tether-sidecar"))
        .arg("--prepare-cache")
        .arg("--cache-dir")
        .arg(shared_cache())
        .status()
        .unwrap();
    assert!(prepared.success());
    let capacity = (BURST_RUNS + 16).to_string();
    let sidecar = SidecarProcess::start(
        &shared_cache(),
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--idle-release-seconds",
            "3",
            "--max-waiting-runs",
            &capacity,
            "--max-queued-runs",
            &capacity,
        ],
    );
    let url = sidecar.metrics_url.clone().unwrap();
    sidecar.wait_for_health("", ServingStatus::Serving).await;
    let client = SidecarClient::connect(&format!("http://{}", sidecar.address)).await.unwrap();
    for i in 0..4 {
        one_run(&client, format!("warm-{i}"), 2).await;
    }
    let baseline = rss_kib(&sidecar);

    burst(&client).await;
    let after_burst = rss_kib(&sidecar);
    assert!(
        after_burst > baseline * 2,
        "the burst grows the pool ({baseline} KiB before, {after_burst} KiB after), or this test shows nothing"
    );

    // Runs keep coming, each well inside the idle time (3 s): the pool stays warm.
    for i in 0..12 {
        one_run(&client, format!("steady-{i}"), 1).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(pool_releases(&url).await, 0.0, "no release while runs keep coming");
    let steady = rss_kib(&sidecar);
    assert!(steady > baseline * 2, "the warm slots stay: {steady} KiB against {baseline} KiB before the burst");

    // Idle: the pool is given back, and RSS is back within 10% of the baseline.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while pool_releases(&url).await < 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "the idle sidecar never gave its pool back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let released = rss_kib(&sidecar);
    eprintln!(
        "RSS: {baseline} KiB before the burst, {after_burst} KiB after, {steady} KiB while runs kept coming, {released} KiB after the idle release"
    );
    assert!(
        released <= baseline + baseline / 10,
        "RSS after the idle release: {released} KiB, baseline {baseline} KiB, after the burst {after_burst} KiB"
    );

    // The fresh engine runs scripts, calls included.
    one_run(&client, "after-release".into(), BURST_CALLS).await;
    assert_eq!(pool_releases(&url).await, 1.0, "a pool with no more warm slots than execution slots is kept");
}
