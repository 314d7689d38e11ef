//! `tether-bench load`: many concurrent runs, each making many calls, over
//! real gRPC against a real sidecar process; counts errors and compares the
//! sidecar's resident memory before, at the peak, and after.

use crate::process::{ProcSample, SidecarProcess, drift, sidecar_binary};
use anyhow::Context;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tether_backend::{CallHandler, RunRequest, ScriptCall, SidecarClient, ToolOutcome};
use tokio::task::JoinSet;

/// Flags of `load`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Runs open at once.
    #[arg(long, default_value_t = 1000)]
    runs: usize,
    /// Calls each run makes (one after another).
    #[arg(long, default_value_t = 50)]
    calls: u32,
    /// HTTP/2 connections the runs are spread over.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// The sidecar binary (default: `tether-sidecar` beside this one).
    #[arg(long)]
    sidecar_bin: Option<PathBuf>,
}

/// Answers `echo` with its `i` argument.
struct Echo;

#[async_trait::async_trait]
impl CallHandler for Echo {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        ToolOutcome::Ok(call.args["i"].clone())
    }
}

/// Runs the load once and prints errors and RSS.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let binary = sidecar_binary(args.sidecar_bin)?;
    // Room for every run to wait on a call at once, and to queue for a slot.
    let capacity = (args.runs + 16).to_string();
    let sidecar = SidecarProcess::start(
        &binary,
        &[
            "--max-waiting-runs".into(),
            capacity.clone(),
            "--max-queued-runs".into(),
            capacity,
            "--max-calls".into(),
            args.calls.to_string(),
        ],
    )?;
    let mut clients = Vec::new();
    for _ in 0..args.connections.max(1) {
        clients.push(connect(&sidecar.url).await?);
    }
    let source = format!("sum(call('echo', i=i)['value'] for i in range({}))", args.calls);
    let expected = Value::from((0..u64::from(args.calls)).sum::<u64>());

    // Warm up (the compile cache, the instance pool, the connections), then the baseline.
    for client in &clients {
        for _ in 0..4 {
            one_run(client, "warm", &source, &expected).await?;
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = sidecar.sample()?;
    println!("sidecar before: {before}");

    let sidecar = Arc::new(sidecar);
    let peak = Arc::new(std::sync::Mutex::new(before));
    let sampler = {
        let (sidecar, peak) = (sidecar.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if let (Ok(now), Ok(mut peak)) = (sidecar.sample(), peak.lock())
                    && now.rss_kib > peak.rss_kib
                {
                    *peak = now;
                }
            }
        })
    };
    let started = Instant::now();
    let mut runs = JoinSet::new();
    for i in 0..args.runs {
        let client = clients[i % clients.len()].clone();
        let (source, expected) = (source.clone(), expected.clone());
        runs.spawn(async move { one_run(&client, &format!("load-{i}"), &source, &expected).await });
    }
    let mut errors = Vec::new();
    while let Some(joined) = runs.join_next().await {
        if let Err(error) = joined.context("a run task failed").and_then(|result| result) {
            errors.push(error);
        }
    }
    let elapsed = started.elapsed();
    sampler.abort();
    let peak = *peak.lock().map_err(|_| anyhow::anyhow!("the sampler panicked"))?;

    // Let the sidecar's allocator and pool settle, then look again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = sidecar.sample()?;
    let calls = args.runs as u64 * u64::from(args.calls);
    println!(
        "{} runs x {} calls = {calls} calls over {} connections in {:.1} s ({:.0} calls/s)",
        args.runs,
        args.calls,
        clients.len(),
        elapsed.as_secs_f64(),
        calls as f64 / elapsed.as_secs_f64()
    );
    println!("errors: {}", errors.len());
    for error in errors.iter().take(5) {
        println!("  {error:#}");
    }
    println!("sidecar peak:  {peak}");
    println!("sidecar after: {after}");
    report_rss(&before, &after);
    anyhow::ensure!(errors.is_empty(), "{} runs failed", errors.len());
    Ok(())
}

fn report_rss(before: &ProcSample, after: &ProcSample) {
    let drift = drift(before.rss_kib, after.rss_kib);
    let verdict = if drift <= 10.0 { "within" } else { "NOT within" };
    println!("RSS after vs before: {drift:+.1}% ({verdict} 10% of the baseline)");
}

async fn connect(url: &str) -> anyhow::Result<SidecarClient> {
    SidecarClient::connect(url).await.with_context(|| format!("cannot reach the sidecar at {url}"))
}

/// One run of `source`; an error unless it completes with `expected`.
async fn one_run(client: &SidecarClient, id: &str, source: &str, expected: &Value) -> anyhow::Result<()> {
    let outcome = client.run(RunRequest::python(id, source), &Echo).await.with_context(|| format!("run `{id}`"))?;
    anyhow::ensure!(outcome.is_ok() && outcome.result.as_ref() == Some(expected), "run `{id}` ended with {outcome:?}");
    Ok(())
}
