//! `tether-bench`: two measurements, one command each.
//!
//! - default (no subcommand): medians of whole runs over real gRPC on
//!   loopback, against an embedded sidecar — a trivial run (`1 + 1`), one
//!   call round trip (a run making N calls to a no-op tool minus a run making
//!   none, divided by N), and a 20-call batch under `asyncio.gather` against
//!   20 sequential calls to a 1 ms tool, as a ratio (`runs`)
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
//! `load` and `soak` start the `tether-sidecar` binary beside this one (or
//! `--sidecar-bin`); they are commands, not CI tests.

mod load;
mod process;
mod runs;
mod soak;
mod turn_calls;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
struct Args {
    /// Samples per measurement.
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// Calls per run in the round-trip measurement.
    #[arg(long, default_value_t = 50)]
    calls: usize,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
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
    let args = Args::parse();
    match args.command {
        None => runs::run(args.samples, args.calls).await,
        Some(Command::TurnCalls(turn)) => turn_calls::run(turn).await,
        Some(Command::Load(load)) => load::run(load).await,
        Some(Command::Soak(soak)) => soak::run(soak).await,
    }
}
