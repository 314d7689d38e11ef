//! The sidecar process itself: its resident memory with runs waiting live on
//! a call nobody answers (each keeps its Wasm instance), and its start-up
//! until readiness says SERVING. Runs that park instead: `parking`.

use crate::process::{SidecarProcess, sidecar_binary};
use anyhow::Context;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tether_backend::{CallHandler, ClientError, RunOutcome, RunRequest, ScriptCall, SidecarClient, ToolOutcome};
use tokio::task::JoinSet;

/// The script of every waiting and parked run: one call.
pub(crate) const ONE_CALL: &str = "call('x')";

/// How long waiting runs may take to all reach their call.
const WAIT_WAIT: Duration = Duration::from_secs(600);

/// MiB of guest memory the sidecar accounts for each waiting run: its
/// initial 7 MiB, and room (`--total-memory-mib`, 8 GiB by default, fits
/// about 1,100 of them).
const MIB_PER_WAITING_RUN: usize = 8;

/// Holds every call until [`Gate::open`] (a gate never opened never
/// answers), counting the calls that wait.
pub(crate) struct Gate {
    waiting: AtomicUsize,
    open: tokio::sync::watch::Sender<bool>,
}

impl Gate {
    fn new() -> Gate {
        Gate { waiting: AtomicUsize::new(0), open: tokio::sync::watch::Sender::new(false) }
    }

    /// Answers every call waiting, and every later one at once.
    pub(crate) fn open(&self) {
        self.open.send_replace(true);
    }
}

#[async_trait::async_trait]
impl CallHandler for Gate {
    async fn call(&self, _call: ScriptCall) -> ToolOutcome {
        let mut open = self.open.subscribe();
        self.waiting.fetch_add(1, Ordering::Relaxed);
        // The sender lives as long as the gate, so this ends only when it opens.
        let _ = open.wait_for(|open| *open).await;
        ToolOutcome::Ok(serde_json::Value::Null)
    }
}

/// Runs waiting live on their call, and the gate that holds them.
pub(crate) struct Waiting {
    /// What answers their calls once opened.
    pub(crate) gate: Arc<Gate>,
    /// The runs (dropping them drops their streams: the runs end).
    pub(crate) runs: JoinSet<Result<RunOutcome, ClientError>>,
}

/// `count` runs of [`ONE_CALL`] over `clients` (run `i` on connection `i %
/// clients.len()`), once every one waits on its call: runs that may not
/// park, so each keeps its instance.
///
/// # Errors
/// If a run ends before its call is answered, or they do not all reach
/// their call in time.
pub(crate) async fn waiting_runs(clients: &[SidecarClient], count: usize) -> anyhow::Result<Waiting> {
    let gate = Arc::new(Gate::new());
    let mut runs = JoinSet::new();
    for i in 0..count {
        let (client, gate) = (clients[i % clients.len()].clone(), gate.clone());
        runs.spawn(async move { client.run(RunRequest::python(format!("wait-{i}"), ONE_CALL), &*gate).await });
    }
    let give_up = Instant::now() + WAIT_WAIT;
    while gate.waiting.load(Ordering::Relaxed) < count {
        if let Some(ended) = runs.try_join_next() {
            anyhow::bail!("a waiting run ended before its call was answered: {:?}", ended.context("run task")?);
        }
        anyhow::ensure!(
            Instant::now() < give_up,
            "only {} of {count} runs reached their call within {WAIT_WAIT:?}",
            gate.waiting.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(Waiting { gate, runs })
}

/// The sidecar's idle RSS, KiB: half a second after four runs of `1 + 1`
/// on `client`, one at a time.
///
/// # Errors
/// If a run fails or `/proc` cannot be read.
pub(crate) async fn idle_rss(sidecar: &SidecarProcess, client: &SidecarClient) -> anyhow::Result<u64> {
    let gate = Gate::new();
    for i in 0..4 {
        let outcome = client.run(RunRequest::python(format!("warm-{i}"), "1 + 1"), &gate).await?;
        anyhow::ensure!(outcome.is_ok(), "a warm-up run failed: {outcome:?}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(sidecar.sample()?.rss_kib)
}

/// The sidecar's resident memory, KiB: idle (after a few runs), then with
/// each of `counts` runs waiting live on an unanswered call (runs that may
/// not park: each keeps its instance), on a fresh sidecar process each time
/// (the compile cache in `cache_dir`, already filled), with room for them
/// all (`--max-waiting-runs`, `--total-memory-mib`).
///
/// # Errors
/// If the sidecar cannot start or the runs do not all reach their call in time.
pub(crate) async fn live_rss(cache_dir: &Path, counts: &[usize]) -> anyhow::Result<(u64, Vec<u64>)> {
    let binary = sidecar_binary(None)?;
    let mut idle = 0;
    let mut waiting = Vec::new();
    for &count in counts {
        let room = count + 16;
        let flags: Vec<String> = vec![
            "--cache-dir".into(),
            cache_dir.display().to_string(),
            "--max-waiting-runs".into(),
            room.to_string(),
            "--max-queued-runs".into(),
            room.to_string(),
            "--total-memory-mib".into(),
            (room * MIB_PER_WAITING_RUN).max(8192).to_string(),
        ];
        let sidecar = SidecarProcess::start(&binary, &flags)?;
        let clients = sidecar.connections(8).await?;
        idle = idle_rss(&sidecar, &clients[0]).await?;
        let runs = waiting_runs(&clients, count).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        waiting.push(sidecar.sample()?.rss_kib);
        drop(runs);
    }
    Ok((idle, waiting))
}

/// From starting the sidecar process to readiness answering SERVING, `samples`
/// times with an empty compile cache (`cold`) and as many with the cache the
/// first start filled (`cached`).
///
/// # Errors
/// If the sidecar cannot start or never becomes ready.
pub(crate) async fn start_up(samples: usize) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let binary = sidecar_binary(None)?;
    let (mut cold, mut cached) = (Vec::new(), Vec::new());
    for _ in 0..samples.max(1) {
        let cache = tempfile::tempdir().context("a compile cache folder")?;
        cold.push(time_to_serving(&binary, cache.path()).await?);
        cached.push(time_to_serving(&binary, cache.path()).await?);
    }
    Ok((cold, cached))
}

async fn time_to_serving(binary: &Path, cache_dir: &Path) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let sidecar = SidecarProcess::start(binary, &["--cache-dir".into(), cache_dir.display().to_string()])?;
    let client = SidecarClient::connect(&sidecar.url).await?;
    // Readiness polled every millisecond (`wait_ready` sleeps 20 ms between looks).
    while client.wait_ready(Duration::ZERO).await.is_err() {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(300), "the sidecar was not ready after 300 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(started.elapsed())
}

/// A compile cache that one started sidecar has filled.
pub(crate) async fn filled_cache() -> anyhow::Result<tempfile::TempDir> {
    let cache = tempfile::tempdir().context("a compile cache folder")?;
    time_to_serving(&sidecar_binary(None)?, cache.path()).await?;
    Ok(cache)
}
