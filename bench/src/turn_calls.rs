//! Calls per second through [`Turn::execute`] with the SQLite audit store
//! (WAL, `synchronous=FULL`) in a temporary directory, origin `Model`:
//!
//! 1. a read-only tool, one caller (an audit row per call, no ledger row)
//! 2. a tool with effects, one caller (`started` durable before the tool
//!    runs, `settled` after, and the audit row)
//! 3. the same tool with effects from `--callers` concurrent callers
//!
//! Each prints calls per second (calls / wall time), the median latency of
//! one `Turn::execute`, and the transactions the store committed for it
//! (one fsync each). The tools themselves do nothing.

use anyhow::Context;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tether_backend::turn::{
    AuditStore, CallOrigin, CallRequest, CallStatus, SqliteAuditStore, ToolOutput, ToolSpec, Turn, executor_fn,
};

/// The `turn-calls` options.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Calls per measurement.
    #[arg(long, default_value_t = 2000)]
    calls: usize,
    /// Concurrent callers in the third measurement.
    #[arg(long, default_value_t = 16)]
    callers: usize,
    /// Where to put the database (default: a fresh temporary directory,
    /// removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// One measurement's figures.
struct Figures {
    calls_per_second: f64,
    median: Duration,
    /// Transactions the store committed during the measurement.
    commits: u64,
}

fn turn(id: &str, store: &Arc<dyn AuditStore>, calls: usize) -> anyhow::Result<Turn> {
    let schema = json!({"type": "object"});
    let noop = || executor_fn(|_, _| async { Ok(ToolOutput::new(Value::Null)) });
    Ok(Turn::builder(id)
        .audit_store(store.clone())
        .max_tool_calls(u32::try_from(calls).unwrap_or(u32::MAX))
        .tool(ToolSpec::new("look", "a read-only no-op", schema.clone()).read_only(), noop())
        .tool(ToolSpec::new("act", "a no-op with effects", schema), noop())
        .build()?)
}

/// `calls` calls of `tool` split over `callers` concurrent callers.
async fn measure(
    store: &SqliteAuditStore,
    turn: &Turn,
    tool: &'static str,
    calls: usize,
    callers: usize,
) -> anyhow::Result<Figures> {
    let callers = callers.max(1);
    // Writes of earlier calls still queued are counted here too: make them land first.
    turn.ledger().await?;
    let commits_before = store.stats().commits;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..callers {
        let turn = turn.clone();
        let share = calls / callers + usize::from(caller < calls % callers);
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(share);
            for n in 0..share {
                // Distinct ids and arguments: no call repeats another.
                let request = CallRequest::new(format!("{tool}-{caller}-{n}"), tool, json!({"caller": caller, "n": n}));
                let at = Instant::now();
                let result = turn.execute(request, CallOrigin::Model).await;
                latencies.push(at.elapsed());
                anyhow::ensure!(result.status() == CallStatus::Ok, "a bench call failed: {result:?}");
            }
            Ok(latencies)
        });
    }
    let mut latencies = Vec::with_capacity(calls);
    while let Some(joined) = tasks.join_next().await {
        latencies.extend(joined.context("a caller panicked")??);
    }
    let wall = started.elapsed();
    // Count the commits of this measurement's own rows.
    turn.ledger().await?;
    let commits = store.stats().commits - commits_before;
    latencies.sort();
    let median = latencies.get(latencies.len() / 2).copied().unwrap_or_default();
    Ok(Figures { calls_per_second: latencies.len() as f64 / wall.as_secs_f64(), median, commits })
}

/// Runs the three measurements and prints them.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let temp = tempfile::tempdir().context("creating a temporary directory")?;
    let dir = args.dir.clone().unwrap_or_else(|| temp.path().to_owned());
    let path = dir.join(format!("tether-bench-{}.db", std::process::id()));
    let sqlite = Arc::new(SqliteAuditStore::new(&path));
    let store: Arc<dyn AuditStore> = sqlite.clone();

    // Warm up: open the database, create the tables, fill the caches.
    let warm = turn("warm-up", &store, 200)?;
    measure(&sqlite, &warm, "look", 100, 1).await?;
    measure(&sqlite, &warm, "act", 100, 1).await?;

    let calls = args.calls;
    let read_only = measure(&sqlite, &turn("read-only", &store, calls)?, "look", calls, 1).await?;
    let effects = measure(&sqlite, &turn("effects", &store, calls)?, "act", calls, 1).await?;
    let concurrent = measure(&sqlite, &turn("concurrent", &store, calls)?, "act", calls, args.callers).await?;

    println!(
        "calls through Turn::execute, origin model, SQLite store at {} (WAL, synchronous=FULL), {calls} calls each:",
        path.display()
    );
    for (what, figures) in [
        ("read-only tool, 1 caller".to_owned(), read_only),
        ("tool with effects, 1 caller".to_owned(), effects),
        (format!("tool with effects, {} callers", args.callers), concurrent),
    ] {
        println!(
            "  {what:<32} {:>9.0} calls/s   median {:>8.1} µs per call   {:>6} commits",
            figures.calls_per_second,
            figures.median.as_secs_f64() * 1e6,
            figures.commits
        );
    }
    drop((warm, store, sqlite));
    if args.dir.is_some() {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
    Ok(())
}
