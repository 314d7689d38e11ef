//! `tether-bench soak`: normal and hostile runs mixed, for minutes, against a
//! real sidecar process; samples its resident memory, open file descriptors
//! and threads, and reports how they drifted.

use crate::process::{Echo, SidecarProcess, drift, sidecar_binary};
use anyhow::Context;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tether_backend::{RunRequest, SidecarClient};
use tokio::task::JoinSet;

/// Flags of `soak`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// How long to run, in minutes.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Runs in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds between samples of the sidecar process.
    #[arg(long, default_value_t = 10)]
    sample_seconds: u64,
    /// The sidecar binary (default: `tether-sidecar` beside this one).
    #[arg(long)]
    sidecar_bin: Option<PathBuf>,
}

/// The scripts, in turn: normal ones, and hostile ones taken from the
/// hostile suite (`tests/e2e/hostile/`) — each must end with its own clear
/// status, never a transport error.
const SCRIPTS: [(&str, &str); 12] = [
    ("calls", "sum(call('echo', i=i)['value'] for i in range(20))"),
    ("gather", "import asyncio\nlen(await asyncio.gather(*[call_async('echo', {'i': i}) for i in range(20)]))"),
    ("trivial", "1 + 1"),
    ("infinite_loop", "while True:\n    pass\n"),
    ("string_bomb", "s = 'x'\nwhile True:\n    s = s + s\n"),
    ("list_bomb", "items = []\nwhile True:\n    items.append([0] * 1000)\n"),
    ("deep_recursion", "def f(n):\n    return f(n + 1)\nf(0)\n"),
    ("output_flood", "while True:\n    print('x' * 1000)\n"),
    ("call_flood", "[call('echo', i=i)['ok'] for i in range(1000)]"),
    ("batch_flood", "import asyncio\nlen(await asyncio.gather(*[call_async('echo', {'i': i}) for i in range(10000)]))"),
    ("imports", "import socket\n"),
    ("syntax", "def (:\n"),
];

/// Runs the soak and prints samples and drift.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let binary = sidecar_binary(args.sidecar_bin)?;
    // Short CPU and memory limits, so the hostile scripts end quickly.
    let limits = ["--cpu-seconds", "1", "--memory-mib", "64"].map(String::from);
    let sidecar = SidecarProcess::start(&binary, &limits)?;
    let client = sidecar.connect().await?;
    let duration = Duration::try_from_secs_f64(args.minutes * 60.0).context("--minutes must be a positive number")?;

    // One round of every script first: the pool and caches are warm before the baseline.
    let outcomes = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    for (i, (name, source)) in SCRIPTS.iter().enumerate() {
        one_run(&client, i, name, source, &outcomes, &errors).await;
    }
    let first = sidecar.sample()?;
    println!("{:>6}  {first}", "0 s");

    let started = Instant::now();
    let mut workers = JoinSet::new();
    let concurrency = args.concurrency;
    for worker in 0..concurrency {
        let (client, outcomes, errors) = (client.clone(), outcomes.clone(), errors.clone());
        workers.spawn(async move {
            let mut i = worker;
            while started.elapsed() < duration {
                let (name, source) = SCRIPTS[i % SCRIPTS.len()];
                one_run(&client, i, name, source, &outcomes, &errors).await;
                i += concurrency;
            }
        });
    }
    let mut samples = vec![first];
    while started.elapsed() < duration {
        tokio::time::sleep(Duration::from_secs(args.sample_seconds).min(duration.saturating_sub(started.elapsed())))
            .await;
        let now = sidecar.sample()?;
        println!("{:>4} s  {now}", started.elapsed().as_secs());
        samples.push(now);
    }
    while workers.join_next().await.is_some() {}
    tokio::time::sleep(Duration::from_secs(3)).await;
    let last = sidecar.sample()?;
    println!("after   {last}");

    let outcomes = outcomes.lock().map_err(|_| anyhow::anyhow!("a worker panicked"))?.clone();
    let runs: u64 = outcomes.values().sum();
    println!("{runs} runs in {:.0} s; outcomes:", started.elapsed().as_secs_f64());
    for (outcome, count) in &outcomes {
        println!("  {outcome}: {count}");
    }
    // The baseline is the first sample taken under load, so the drift is that of the soak itself.
    let baseline = samples.get(1).copied().unwrap_or(first);
    println!(
        "drift from the first sample under load to after: RSS {:+.1}%, fds {:+}, threads {:+}",
        drift(baseline.rss_kib, last.rss_kib),
        last.fds as i64 - baseline.fds as i64,
        last.threads as i64 - baseline.threads as i64
    );
    let errors = errors.lock().map_err(|_| anyhow::anyhow!("a worker panicked"))?;
    println!("transport errors: {}", errors.len());
    for error in errors.iter().take(5) {
        println!("  {error}");
    }
    anyhow::ensure!(errors.is_empty(), "{} runs failed at the transport", errors.len());
    Ok(())
}

/// One run; counts its outcome (`name: status/kind`) or records its error.
async fn one_run(
    client: &SidecarClient,
    i: usize,
    name: &str,
    source: &str,
    outcomes: &Mutex<BTreeMap<String, u64>>,
    errors: &Mutex<Vec<String>>,
) {
    match client.run(RunRequest::python(format!("soak-{i}"), source), &Echo).await {
        Ok(outcome) => {
            let kind = outcome.error.as_ref().map_or("ok", |error| error.kind.as_str()).to_owned();
            if let Ok(mut outcomes) = outcomes.lock() {
                *outcomes.entry(format!("{name}: {kind}")).or_default() += 1;
            }
        }
        Err(error) => {
            if let Ok(mut errors) = errors.lock() {
                errors.push(format!("{name}: {error}"));
            }
        }
    }
}
