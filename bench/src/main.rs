//! `tether-bench`: Tether measured, alone and side by side with its peers.
//!
//! - default (no subcommand): Tether over TCP, a Unix socket, embedded, and
//!   embedded on one thread, pydantic-monty, CPython, Pyodide and eryx on the same
//!   four workloads, p50/p99 and throughput; and the sidecar alone — its RSS
//!   with runs waiting live and parked, parked state bytes, park and resume
//!   times, start-up: the two tables of `docs/benchmarks.md` (`compare`;
//!   `./x bench` installs the peers first)
//! - `runs`: medians of whole runs over real gRPC on loopback, against an
//!   embedded sidecar — a trivial run (`1 + 1`), one call round trip (a run
//!   making N calls to a no-op tool minus a run making none, divided by N),
//!   and a 20-call batch under `asyncio.gather` against 20 sequential calls
//!   to a 1 ms tool, as a ratio; `--one-thread` puts client, sidecar and
//!   tools on one current-thread runtime (`runs`)
//! - `turn-calls`: calls per second through a `Turn` with an audit store
//!   (SQLite by default, any with `--store URL`) — a read-only tool, a tool
//!   with effects (ledger rows), and the latter from concurrent callers
//!   (`turn_calls`)
//! - `load`: 1,000 concurrent runs x 50 calls over gRPC against a real
//!   sidecar process; errors, and its RSS before, at the peak and after
//!   (`load`)
//! - `soak --minutes N`: normal and hostile runs mixed against a real sidecar
//!   process; its RSS, open fds and threads sampled, and their drift (`soak`)
//!
//! The default, `load` and `soak` start the `tether-sidecar` binary beside
//! this one (or `--sidecar-bin`); they are commands, not CI tests.

mod compare;
mod load;
mod process;
mod runs;
mod soak;
mod turn_calls;

use clap::{Parser, Subcommand};
use std::future::Future;

/// Tether measured, alone and side by side with pydantic-monty, CPython,
/// Pyodide and eryx; without a command, the tables of docs/benchmarks.md (`./x bench`
/// installs the peers first).
#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    compare: compare::Args,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A trivial run, a call round trip and a gathered batch, on an embedded sidecar.
    Runs(runs::Args),
    /// Calls per second through `Turn::execute` with an audit store
    /// (SQLite by default; `--store postgres://…` for PostgreSQL).
    TurnCalls(turn_calls::Args),
    /// Concurrent runs x calls against a real sidecar process: errors and RSS.
    Load(load::Args),
    /// Mixed normal and hostile runs for minutes: RSS, fds and threads drift.
    Soak(soak::Args),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Cli::parse();
    match args.command {
        None => compare::run(args.compare).await,
        Some(Command::Runs(runs)) => runs::run(runs).await,
        Some(Command::TurnCalls(turn)) => turn_calls::run(turn).await,
        Some(Command::Load(load)) => load::run(load).await,
        Some(Command::Soak(soak)) => soak::run(soak).await,
    }
}

/// Runs the future `work` makes on a current-thread runtime of a thread of
/// its own, so none of its messages changes threads (a runtime cannot start
/// inside another one's thread); blocks the calling thread until it ends.
///
/// # Errors
/// What `work` returns, or that it panicked.
pub(crate) fn on_one_thread<F, T>(work: impl FnOnce() -> F + Send) -> anyhow::Result<T>
where
    F: Future<Output = anyhow::Result<T>>,
    T: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(work()))
            .join()
            .map_err(|_| anyhow::anyhow!("the one-thread measurement panicked"))?
    })
}
