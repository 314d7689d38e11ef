//! Calls per second through [`Turn::execute`] with an audit store — by
//! default SQLite (WAL, `synchronous=FULL`) in a temporary directory; any
//! store with `--store URL` (`postgres://…` for PostgreSQL) — origin `Model`:
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
    AuditStore, AuditStoreUrl, CallOrigin, CallRequest, CallStatus, ToolOutput, ToolSpec, Turn, executor_fn,
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
    /// Where to put the SQLite database (default: a fresh temporary
    /// directory, removed afterwards).
    #[arg(long, conflicts_with = "store")]
    dir: Option<PathBuf>,
    /// The audit store, as a URL (`postgres://USER@HOST:PORT/DATABASE`,
    /// `sqlite:PATH`, …; default: SQLite in `--dir`). Each run writes turns
    /// of its own (ids carry the process id), so a database may be reused.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
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
    store: &Arc<dyn AuditStore>,
    turn: &Turn,
    tool: &'static str,
    calls: usize,
    callers: usize,
) -> anyhow::Result<Figures> {
    let callers = callers.max(1);
    // Writes of earlier calls still queued are counted here too: make them land first.
    turn.ledger().await?;
    let commits_before = commits(store);
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
    let commits = commits(store) - commits_before;
    latencies.sort();
    let median = latencies.get(latencies.len() / 2).copied().unwrap_or_default();
    Ok(Figures { calls_per_second: latencies.len() as f64 / wall.as_secs_f64(), median, commits })
}

/// Transactions `store` has committed (0 for a store that does not count).
fn commits(store: &Arc<dyn AuditStore>) -> u64 {
    store.stats().unwrap_or_default().commits
}

/// Runs the three measurements and prints them.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let temp = tempfile::tempdir().context("creating a temporary directory")?;
    let dir = args.dir.clone().unwrap_or_else(|| temp.path().to_owned());
    let url = match &args.store {
        Some(url) => AuditStoreUrl::parse(url)?,
        None => AuditStoreUrl::Sqlite(dir.join(format!("tether-bench-{}.db", std::process::id()))),
    };
    let store = url.open().await.with_context(|| format!("cannot open the audit store `{url}`"))?;
    // Turn ids of this run only: the tables may hold earlier runs' rows.
    let id = |name: &str| format!("{name}-{}", std::process::id());

    // Warm up: open the database, create the tables, fill the caches.
    let warm = turn(&id("warm-up"), &store, 200)?;
    measure(&store, &warm, "look", 100, 1).await?;
    measure(&store, &warm, "act", 100, 1).await?;

    let calls = args.calls;
    let read_only = measure(&store, &turn(&id("read-only"), &store, calls)?, "look", calls, 1).await?;
    let effects = measure(&store, &turn(&id("effects"), &store, calls)?, "act", calls, 1).await?;
    let concurrent = measure(&store, &turn(&id("concurrent"), &store, calls)?, "act", calls, args.callers).await?;

    let what = match &url {
        AuditStoreUrl::Sqlite(_) => "SQLite (WAL, synchronous=FULL)",
        AuditStoreUrl::Postgres(_) => "PostgreSQL (synchronous_commit on)",
        AuditStoreUrl::Memory => "in memory",
    };
    println!("calls through Turn::execute, origin model, {what} store at {url}, {calls} calls each:");
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
    drop((warm, store));
    if let (Some(_), AuditStoreUrl::Sqlite(path)) = (&args.dir, &url) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
    Ok(())
}
