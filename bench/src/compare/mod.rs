//! `tether-bench` (no subcommand): Tether side by side with its peers, and
//! the sidecar alone — the two tables of `docs/benchmarks.md`.
//!
//! - `workload`: the four workloads, their scripts, input and tools
//! - `tether`: Tether measured here, over TCP, a Unix socket, or embedded
//! - `peers`: pydantic-monty, CPython, Pyodide and eryx, each through its driver in `bench/peers/`
//! - `sidecar`: the sidecar process's RSS with runs waiting live, and its start-up
//! - `parking`: parked runs — the sidecar's RSS with them, their sealed
//!   states, park and resume times (`docs/parking.md`)
//! - `stats`: a measurement and its percentiles
//! - `report`: the machine, the versions and the tables, as Markdown

mod parking;
mod peers;
mod report;
mod sidecar;
mod stats;
mod tether;
mod workload;

use anyhow::Context;
use peers::{Installed, Peer};
use report::Figures;
use stats::Measured;
use std::path::{Path, PathBuf};
use tether_cli::embedded::EmbeddedSidecar;
use tether_sidecar::SidecarConfig;
use workload::Workload;

/// The concurrencies throughput is measured at.
pub(crate) const LEVELS: [usize; 4] = [1, 2, 8, 64];

/// Runs waiting live on an unanswered call while the sidecar's RSS is read
/// (each holds its instance: 10,000 take about 6 GiB), and in `--quick`.
const LIVE: [usize; 3] = [100, 1_000, 10_000];
const LIVE_QUICK: [usize; 1] = [100];

/// Runs parked so far when the parking sidecar's RSS is read, and in `--quick`.
const PARKED: [usize; 3] = [1_000, 10_000, 100_000];
const PARKED_QUICK: [usize; 2] = [100, 1_000];

/// Live and parked runs timed in turn on one thread, and in `--quick`.
const PAIRS: usize = 300;
const PAIRS_QUICK: usize = 20;

/// Flags of the side-by-side bench.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Few samples of everything: a smoke check (writes nothing unless --out).
    #[arg(long)]
    quick: bool,
    /// Measure only these systems (repeatable); a partial run writes nothing unless --out, and
    /// then only the tables it measured.
    #[arg(long, value_enum)]
    only: Vec<Group>,
    /// Where to write the tables (default: docs/benchmarks.md, on a full run).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The systems `--only` picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Group {
    /// Tether over TCP, a Unix socket, embedded and on one thread.
    Tether,
    /// The sidecar alone: its RSS with runs waiting live and parked, parked
    /// state bytes, park and resume times, start-up (a table of its own).
    Sidecar,
    /// pydantic-monty's pool, warm session and fresh checkout.
    Monty,
    /// CPython, a subprocess per script.
    Cpython,
    /// Pyodide in node, warm and cold.
    Pyodide,
    /// eryx: CPython 3.14 in wasmtime, a fresh instance per run (`bench/peers/eryx/`).
    Eryx,
}

/// One column of the side-by-side table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum System {
    /// A sidecar process over gRPC on TCP (the ratios' baseline).
    TetherTcp,
    /// The same process over its Unix socket.
    TetherUnix,
    /// A sidecar embedded in this process.
    TetherEmbedded,
    /// A sidecar embedded in this process, its client and its tools on one
    /// current-thread runtime, as the `tether` CLI runs them.
    TetherOneThread,
    /// pydantic-monty, one session reused.
    MontyWarm,
    /// pydantic-monty, a checkout per run.
    MontyFresh,
    /// CPython, a subprocess per script.
    Cpython,
    /// Pyodide, one instance reused.
    PyodideWarm,
    /// Pyodide, an instance per run.
    PyodideCold,
    /// eryx, a fresh instance of its pre-initialised interpreter per run.
    Eryx,
}

impl System {
    /// Every system, in column order.
    pub(crate) const ALL: [System; 10] = [
        System::TetherTcp,
        System::TetherUnix,
        System::TetherEmbedded,
        System::TetherOneThread,
        System::MontyWarm,
        System::MontyFresh,
        System::Cpython,
        System::PyodideWarm,
        System::PyodideCold,
        System::Eryx,
    ];

    /// Its column header.
    pub(crate) fn label(self) -> &'static str {
        match self {
            System::TetherTcp => "Tether TCP",
            System::TetherUnix => "Tether Unix",
            System::TetherEmbedded => "Tether embedded",
            System::TetherOneThread => "Tether one thread",
            System::MontyWarm => "monty warm",
            System::MontyFresh => "monty fresh",
            System::Cpython => "CPython",
            System::PyodideWarm => "Pyodide warm",
            System::PyodideCold => "Pyodide cold",
            System::Eryx => "eryx",
        }
    }

    fn group(self) -> Group {
        match self {
            System::TetherTcp | System::TetherUnix | System::TetherEmbedded | System::TetherOneThread => Group::Tether,
            System::MontyWarm | System::MontyFresh => Group::Monty,
            System::Cpython => Group::Cpython,
            System::PyodideWarm | System::PyodideCold => Group::Pyodide,
            System::Eryx => Group::Eryx,
        }
    }

    /// Timed runs per workload, and untimed runs before them.
    fn samples(self, quick: bool) -> (usize, usize) {
        let (full, smoke) = match self {
            System::TetherTcp | System::TetherUnix | System::TetherEmbedded | System::TetherOneThread => (300, 20),
            System::MontyWarm | System::MontyFresh => (300, 20),
            System::Cpython => (40, 4),
            System::PyodideWarm => (100, 5),
            System::PyodideCold => (5, 1),
            System::Eryx => (100, 10),
        };
        let samples = if quick { smoke } else { full };
        let warmup = if self == System::PyodideCold { 0 } else { (samples / 5).clamp(2, 20) };
        (samples, warmup)
    }

    /// The most runs it may have in flight (node runs one Pyodide at a time).
    fn max_concurrency(self) -> usize {
        match self {
            System::PyodideWarm | System::PyodideCold => 1,
            _ => usize::MAX,
        }
    }
}

/// Something that runs a workload and times it.
enum Runner<'a> {
    Tether(&'a tether::Tether),
    Peer(&'a Peer, &'a Path),
}

impl Runner<'_> {
    async fn measure(
        &self,
        workload: Workload,
        samples: usize,
        warmup: usize,
        concurrency: usize,
    ) -> anyhow::Result<(Measured, Option<String>)> {
        match self {
            Runner::Tether(tether) => Ok((tether.measure(workload, samples, warmup, concurrency).await?, None)),
            Runner::Peer(peer, world) => {
                let (measured, version) = peer.measure(workload, world, samples, warmup, concurrency).await?;
                Ok((measured, Some(version)))
            }
        }
    }
}

/// Measures every system picked, prints the tables and writes them.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let picked = |group: Group| args.only.is_empty() || args.only.contains(&group);
    let mut figures = Figures { quick: args.quick, ..Figures::default() };

    if picked(Group::Tether) {
        let socket_dir = tempfile::tempdir().context("a folder for the sidecar's socket")?;
        let process = tether::start_sidecar(&socket_dir.path().join("sidecar.sock"))?;
        let tcp = tether::Tether::new(process.connect().await?);
        measure_system(&mut figures, System::TetherTcp, &Runner::Tether(&tcp), args.quick).await?;
        let unix_url = process.unix_url.clone().context("the sidecar announced no Unix socket")?;
        let unix = tether::Tether::new(process.connect_to(&unix_url).await?);
        measure_system(&mut figures, System::TetherUnix, &Runner::Tether(&unix), args.quick).await?;
        drop(process);

        measure_embedded(&mut figures, System::TetherEmbedded, args.quick).await?;
        // Client, sidecar and tools on one current-thread runtime, as the `tether` CLI runs them.
        crate::on_one_thread(|| measure_embedded(&mut figures, System::TetherOneThread, args.quick))?;
    }

    if picked(Group::Sidecar) {
        measure_sidecar(&mut figures, args.quick).await?;
    }

    let wants_peers = [Group::Monty, Group::Cpython, Group::Pyodide, Group::Eryx].into_iter().any(picked);
    if wants_peers {
        let installed = Installed::from_env()?;
        let world_dir = tempfile::tempdir().context("a folder for the demo data")?;
        let world = world_dir.path().join("world.json");
        std::fs::write(&world, workload::world_json().to_string()).context("writing the demo data for the peers")?;
        let peers = [
            (System::MontyWarm, Some(Peer::monty(&installed, "warm"))),
            (System::MontyFresh, Some(Peer::monty(&installed, "fresh"))),
            (System::Cpython, Some(Peer::cpython(&installed.python))),
            (System::PyodideWarm, Some(Peer::pyodide(&installed, "warm"))),
            (System::PyodideCold, Some(Peer::pyodide(&installed, "cold"))),
            (System::Eryx, Peer::eryx(&installed)),
        ];
        for (system, peer) in &peers {
            if picked(system.group()) {
                let peer = peer.as_ref().context(
                    "eryx is not installed: `TETHER_BENCH_ERYX` is not set (`./x bench` builds it with \
                     tools/bench/peers.sh unless --only leaves it out)",
                )?;
                measure_system(&mut figures, *system, &Runner::Peer(peer, &world), args.quick).await?;
            }
        }
    }

    check_results(&figures)?;
    let generated = report::render(&figures);
    println!("{}", report::printed(&generated));
    let full = !args.quick && args.only.is_empty();
    let out = args.out.or_else(|| full.then(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/benchmarks.md")));
    match out {
        Some(path) => {
            report::write(&path, &generated)?;
            eprintln!("tether-bench: wrote the tables measured to `{}`", path.display());
        }
        None => eprintln!("tether-bench: a partial or --quick run: nothing written (give --out FILE to keep it)"),
    }
    Ok(())
}

/// The sidecar alone, on processes and an embedded sidecar of its own: RSS
/// with runs waiting live, then with runs parked (and their states), park
/// and resume on one thread, start-up.
async fn measure_sidecar(figures: &mut Figures, quick: bool) -> anyhow::Result<()> {
    let (live, parked, pairs) =
        if quick { (&LIVE_QUICK[..], &PARKED_QUICK[..], PAIRS_QUICK) } else { (&LIVE[..], &PARKED[..], PAIRS) };
    let cache = sidecar::filled_cache().await?;
    eprintln!("tether-bench: the sidecar's RSS with {live:?} runs waiting live");
    let (idle, rss) = sidecar::live_rss(cache.path(), live).await?;
    figures.live_rss = Some((idle, live.iter().copied().zip(rss).collect()));
    eprintln!("tether-bench: the sidecar's RSS as {parked:?} runs park");
    figures.parked_rss = Some(parking::parked_rss(cache.path(), parked).await?);
    eprintln!("tether-bench: park and resume on one thread, {pairs} live and parked runs in turn");
    figures.one_thread = Some(parking::one_thread(pairs)?);
    eprintln!("tether-bench: the sidecar's start-up");
    figures.start_up = Some(sidecar::start_up(if quick { 1 } else { 3 }).await?);
    Ok(())
}

/// Measures `system` on a sidecar embedded in this process, on the current
/// runtime, reached over its local socket as its own process's clients are.
async fn measure_embedded(figures: &mut Figures, system: System, quick: bool) -> anyhow::Result<()> {
    let embedded = EmbeddedSidecar::start(SidecarConfig::default()).await.context("starting the embedded sidecar")?;
    let client = tether_backend::SidecarClient::connect(&embedded.local_url()).await?;
    client.wait_ready(std::time::Duration::from_secs(300)).await?;
    measure_system(figures, system, &Runner::Tether(&tether::Tether::new(client)), quick).await?;
    embedded.stop().await?;
    Ok(())
}

/// Every workload one run at a time, then the throughput workloads at each level.
async fn measure_system(figures: &mut Figures, system: System, runner: &Runner<'_>, quick: bool) -> anyhow::Result<()> {
    let (samples, warmup) = system.samples(quick);
    for workload in Workload::ALL {
        eprintln!("tether-bench: {} — {}", system.label(), workload.label());
        let (measured, version) = runner
            .measure(workload, workload.samples(samples), warmup, 1)
            .await
            .with_context(|| format!("{} on {}", system.label(), workload.label()))?;
        if let Some(version) = version {
            figures.versions.insert(system, version);
        }
        figures.latency.insert((system, workload), measured);
    }
    for workload in Workload::THROUGHPUT {
        for level in LEVELS.into_iter().filter(|&level| level <= system.max_concurrency()) {
            eprintln!("tether-bench: {} — {}, {level} at once", system.label(), workload.label());
            let runs = samples.max(4 * level);
            let (measured, _) = runner
                .measure(workload, runs, warmup, level)
                .await
                .with_context(|| format!("{} on {}, {level} at once", system.label(), workload.label()))?;
            figures.throughput.insert((system, workload, level), measured.throughput());
        }
    }
    Ok(())
}

/// Every system must compute what Tether computes: a peer that skipped the
/// work would look fast.
fn check_results(figures: &Figures) -> anyhow::Result<()> {
    for ((system, workload), measured) in &figures.latency {
        let reference = System::ALL.iter().find_map(|s| figures.latency.get(&(*s, *workload)));
        if let Some(reference) = reference {
            anyhow::ensure!(
                measured.result == reference.result,
                "{} computed {} on {}, not {} as the first system measured: the bench is not comparing like with like",
                system.label(),
                measured.result,
                workload.label(),
                reference.result
            );
        }
    }
    Ok(())
}
