//! `tether-bench load`: many concurrent runs, each making many calls, over
//! real gRPC against a real sidecar process; counts errors and compares the
//! sidecar's resident memory before, at the peak, after, and after an idle
//! wait (`--idle-seconds`, past the sidecar's `--idle-release-seconds`).

use crate::process::{Echo, ProcSample, SidecarProcess, drift, sidecar_binary};
use anyhow::Context;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tether_backend::{RunRequest, SidecarClient};
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
    /// Rounds of `--runs` runs, one after another: RSS that grows from
    /// round to round is a leak, RSS that stays is the pool's warm slots.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// The sidecar binary (default: `tether-sidecar` beside this one).
    #[arg(long)]
    sidecar_bin: Option<PathBuf>,
    /// One more flag for the sidecar, e.g. `--sidecar-arg=--pool-keep-resident-kib=0`
    /// (repeatable).
    #[arg(long = "sidecar-arg", allow_hyphen_values = true)]
    sidecar_args: Vec<String>,
    /// After the last round, wait this long with no run in flight and look
    /// at the sidecar's RSS again (past `--idle-release-seconds`, the
    /// sidecar gives its instance pool back). 0: don't wait.
    #[arg(long, default_value_t = 0.0)]
    idle_seconds: f64,
}

/// Runs the load once and prints errors and RSS.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let binary = sidecar_binary(args.sidecar_bin.clone())?;
    // Room for every run to wait on a call at once, and to queue for a slot.
    let capacity = (args.runs + 16).to_string();
    let mut flags = vec![
        "--max-waiting-runs".into(),
        capacity.clone(),
        "--max-queued-runs".into(),
        capacity,
        "--max-calls".into(),
        args.calls.to_string(),
    ];
    flags.extend(args.sidecar_args.iter().cloned());
    let sidecar = SidecarProcess::start(&binary, &flags)?;
    let clients = sidecar.connections(args.connections).await?;
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
    let mut afters = Vec::new();
    let mut failed = 0;
    for round in 1..=args.rounds.max(1) {
        let (errors, elapsed, peak) = one_round(&args, &clients, &sidecar, &source, &expected, before).await?;
        // Let the sidecar's allocator and pool settle, then look again.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = sidecar.sample()?;
        let calls = args.runs as u64 * u64::from(args.calls);
        println!(
            "round {round}: {} runs x {} calls = {calls} calls over {} connections in {:.1} s ({:.0} calls/s), {} errors",
            args.runs,
            args.calls,
            clients.len(),
            elapsed.as_secs_f64(),
            calls as f64 / elapsed.as_secs_f64(),
            errors.len()
        );
        for error in errors.iter().take(5) {
            println!("  {error:#}");
        }
        println!("  sidecar peak:  {peak}");
        println!("  sidecar after: {after}");
        failed += errors.len();
        afters.push(after);
    }
    report_rss(&before, &afters);
    if args.idle_seconds > 0.0 {
        let idle =
            Duration::try_from_secs_f64(args.idle_seconds).context("--idle-seconds must be a positive number")?;
        after_idle(&sidecar, &clients[0], idle, before).await?;
    }
    anyhow::ensure!(failed == 0, "{failed} runs failed");
    Ok(())
}

/// Opens `args.runs` runs at once and waits for all of them: the errors, the
/// time it took and the sidecar's peak sample.
async fn one_round(
    args: &Args,
    clients: &[SidecarClient],
    sidecar: &Arc<SidecarProcess>,
    source: &str,
    expected: &Value,
    before: ProcSample,
) -> anyhow::Result<(Vec<anyhow::Error>, Duration, ProcSample)> {
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
        let (source, expected) = (source.to_owned(), expected.clone());
        runs.spawn(async move {
            let run_started = Instant::now();
            one_run(&client, &format!("load-{i}"), &source, &expected).await.map(|()| run_started.elapsed())
        });
    }
    let mut errors = Vec::new();
    let mut durations = Vec::with_capacity(args.runs);
    while let Some(joined) = runs.join_next().await {
        match joined.context("a run task failed").and_then(|result| result) {
            Ok(duration) => durations.push(duration),
            Err(error) => errors.push(error),
        }
    }
    let elapsed = started.elapsed();
    durations.sort();
    if let (Some(&p50), Some(&p99)) = (durations.get(durations.len() / 2), durations.get(durations.len() * 99 / 100)) {
        // All runs start at once, so a run's time includes its wait for a
        // slot: p99 against p50 says how evenly the sidecar serves them.
        println!(
            "  run time, all {} started at once: p50 {:.1} ms, p99 {:.1} ms (p99 = {:.1}x p50)",
            durations.len(),
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            p99.as_secs_f64() / p50.as_secs_f64().max(f64::MIN_POSITIVE)
        );
    }
    sampler.abort();
    let peak = *peak.lock().map_err(|_| anyhow::anyhow!("the sampler panicked"))?;
    Ok((errors, elapsed, peak))
}

/// Waits `idle` with no run in flight, then reports the sidecar's RSS against
/// the baseline, and times the first trivial runs after the wait: past
/// `--idle-release-seconds` the first takes a cold pool slot.
async fn after_idle(
    sidecar: &SidecarProcess,
    client: &SidecarClient,
    idle: Duration,
    before: ProcSample,
) -> anyhow::Result<()> {
    tokio::time::sleep(idle).await;
    let idle_sample = sidecar.sample()?;
    let drift_from_baseline = drift(before.rss_kib, idle_sample.rss_kib);
    let verdict = if drift_from_baseline <= 10.0 { "within" } else { "NOT within" };
    println!("sidecar after {:.0} s idle: {idle_sample}", idle.as_secs_f64());
    println!("RSS after the idle wait vs before: {drift_from_baseline:+.1}% ({verdict} 10% of the baseline)");
    let trivial = Value::from(2);
    let mut times = Vec::new();
    for i in 0..21 {
        let started = Instant::now();
        one_run(client, &format!("after-idle-{i}"), "1 + 1", &trivial).await?;
        times.push(started.elapsed());
    }
    let first = times.remove(0);
    times.sort();
    println!(
        "trivial run after the idle wait: first {:.2} ms, median of the next {} {:.2} ms; then {}",
        first.as_secs_f64() * 1e3,
        times.len(),
        times[times.len() / 2].as_secs_f64() * 1e3,
        sidecar.sample()?
    );
    Ok(())
}

/// RSS after the last round against the baseline, and against the first
/// round: memory a leak holds grows with every round, while the instance
/// pool's warm slots (`--pool-keep-resident-kib`) plateau after the first.
fn report_rss(before: &ProcSample, afters: &[ProcSample]) {
    let (Some(first), Some(last)) = (afters.first(), afters.last()) else { return };
    let drift_from_baseline = drift(before.rss_kib, last.rss_kib);
    let verdict = if drift_from_baseline <= 10.0 { "within" } else { "NOT within" };
    println!(
        "RSS after vs before: {drift_from_baseline:+.1}% ({verdict} 10% of the baseline; the sidecar gives its pool back \
         once idle past --idle-release-seconds: see --idle-seconds)"
    );
    if afters.len() > 1 {
        println!("RSS after the last round vs after the first: {:+.1}%", drift(first.rss_kib, last.rss_kib));
    }
}

/// One run of `source`; an error unless it completes with `expected`.
async fn one_run(client: &SidecarClient, id: &str, source: &str, expected: &Value) -> anyhow::Result<()> {
    let outcome = client.run(RunRequest::python(id, source), &Echo).await.with_context(|| format!("run `{id}`"))?;
    anyhow::ensure!(outcome.is_ok() && outcome.result.as_ref() == Some(expected), "run `{id}` ended with {outcome:?}");
    Ok(())
}
