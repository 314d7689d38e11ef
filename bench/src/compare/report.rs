//! The machine, the versions, and the two tables, as Markdown: printed, and
//! each written between its two markers in `docs/benchmarks.md` so the prose
//! around them (what the tables mean, where the time goes) survives a rerun,
//! and a run that measured one table leaves the other as it was.
//!
//! - the side-by-side table: a column per system measured, a row per figure
//! - the sidecar's table (`--only sidecar`): its memory with runs waiting
//!   live and parked, parked state bytes, park and resume times, start-up

use super::parking::{Histogram, OneThread, ParkedRss, Spans};
use super::stats::{Measured, human, rate, three_figures};
use super::workload::Workload;
use super::{LEVELS, System};
use anyhow::Context;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// Where the generated side-by-side table of `docs/benchmarks.md` starts and ends.
const BEGIN: &str = "<!-- tether-bench: generated from here; `./x bench` rewrites it -->";
const END: &str = "<!-- tether-bench: generated up to here -->";

/// Where the generated sidecar table of `docs/benchmarks.md` starts and ends.
const SIDECAR_BEGIN: &str =
    "<!-- tether-bench sidecar: generated from here; `./x bench` (or `./x bench --only sidecar`) rewrites it -->";
const SIDECAR_END: &str = "<!-- tether-bench sidecar: generated up to here -->";

/// The targets of issue 24 (`docs/parking.md`).
const PARKED_10K_TARGET_MIB: u64 = 64;
const STATE_TARGET_BYTES: usize = 8 << 10;
const PARK_RESUME_TARGET: Duration = Duration::from_micros(300);

/// Everything one bench run measured.
#[derive(Debug, Default)]
pub(crate) struct Figures {
    /// Latency: each system on each workload, one run at a time.
    pub(crate) latency: BTreeMap<(System, Workload), Measured>,
    /// Runs per second at each concurrency.
    pub(crate) throughput: BTreeMap<(System, Workload, usize), f64>,
    /// The sidecar's RSS, KiB: idle, then with each count of runs waiting
    /// live on a call (each keeping its instance).
    pub(crate) live_rss: Option<(u64, Vec<(usize, u64)>)>,
    /// The sidecar's RSS as runs park.
    pub(crate) parked_rss: Option<ParkedRss>,
    /// Park, resume and round trips on one thread, and the demo's states.
    pub(crate) one_thread: Option<OneThread>,
    /// Start-up to SERVING: cold (empty compile cache) and cached.
    pub(crate) start_up: Option<(Vec<Duration>, Vec<Duration>)>,
    /// Each peer's version, by system.
    pub(crate) versions: BTreeMap<System, String>,
    /// Whether this was a `--quick` run.
    pub(crate) quick: bool,
}

/// The first line of a command's output, or `unknown`.
fn command_line(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

/// The version of `package` in the workspace's `Cargo.lock`.
fn locked_version(package: &str) -> String {
    locked_version_in("../Cargo.lock", package)
}

/// The version of `package` in `lock` (a path from the bench crate).
fn locked_version_in(lock: &str, package: &str) -> String {
    let lock = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(lock)).unwrap_or_default();
    let needle = format!("name = \"{package}\"\nversion = \"");
    lock.split_once(&needle)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or_else(|| "unknown".into(), |(version, _)| version.to_owned())
}

/// The date and the machine, one line each.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned()))
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".into(), |k| k.trim().to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut out = String::new();
    let _ = writeln!(out, "- Date: {}", command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]));
    let _ = writeln!(out, "- Machine: {cores} cores (`nproc`), {cpu}, Linux {kernel}");
    out
}

/// The machine and the versions, one line each.
fn header(figures: &Figures) -> String {
    let version = |system: System| figures.versions.get(&system).map_or("not measured", String::as_str).to_owned();
    let mut out = machine();
    let _ = writeln!(
        out,
        "- Versions: {}, wasmtime {}, monty guest {}, pydantic-monty {}, CPython {}, Pyodide {} on node {}, eryx {} on wasmtime {}",
        command_line("rustc", &["--version"]),
        locked_version("wasmtime"),
        locked_version("monty"),
        version(System::MontyWarm),
        version(System::Cpython),
        version(System::PyodideWarm),
        command_line("node", &["--version"]),
        version(System::Eryx),
        locked_version_in("peers/eryx/Cargo.lock", "wasmtime"),
    );
    out.push_str(quick_line(figures));
    out
}

/// The warning a `--quick` run's tables carry, or nothing.
fn quick_line(figures: &Figures) -> &'static str {
    if figures.quick {
        "- **`--quick`: a smoke check with few samples; its figures are not worth comparing.**\n"
    } else {
        ""
    }
}

/// The one table: a column per system measured, a row per figure.
fn table(figures: &Figures) -> String {
    let systems: Vec<System> =
        System::ALL.into_iter().filter(|s| figures.latency.keys().any(|(measured, _)| measured == s)).collect();
    let baseline = |workload: Workload| figures.latency.get(&(System::TetherTcp, workload)).map(|m| m.quantile(0.5));
    let mut out = String::new();
    let _ = write!(out, "| |");
    for system in &systems {
        let _ = write!(out, " {} |", system.label());
    }
    let _ = write!(out, "\n|---|");
    for _ in &systems {
        let _ = write!(out, "---|");
    }
    out.push('\n');
    let mut row = |name: String, cell: &dyn Fn(System) -> Option<String>| {
        let _ = write!(out, "| {name} |");
        for &system in &systems {
            let _ = write!(out, " {} |", cell(system).unwrap_or_else(|| "—".into()));
        }
        out.push('\n');
    };
    for workload in Workload::ALL {
        row(format!("{} p50", workload.label()), &|system| {
            let p50 = figures.latency.get(&(system, workload))?.quantile(0.5);
            let ratio = match baseline(workload) {
                Some(tether) if system != System::TetherTcp && !tether.is_zero() => {
                    format!(" ({}×)", three_figures(p50.as_secs_f64() / tether.as_secs_f64()))
                }
                _ => String::new(),
            };
            Some(format!("{}{ratio}", human(p50)))
        });
        row(format!("{} p99", workload.label()), &|system| {
            Some(human(figures.latency.get(&(system, workload))?.quantile(0.99)))
        });
    }
    for workload in Workload::THROUGHPUT {
        for level in LEVELS {
            row(format!("{} runs/s, {level} at once", workload.label()), &|system| {
                figures.throughput.get(&(system, workload, level)).copied().map(rate)
            });
        }
    }
    out
}
/// `n` with a comma every three digits.
fn count(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// KiB as MiB, one decimal.
fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// `kib` as MiB, and how far above `base` (called `what`) it is, or below.
fn above(kib: u64, base: u64, what: &str) -> String {
    format!("{} ({:+.1} MiB over {what})", mib(kib), (kib as f64 - base as f64) / 1024.0)
}

/// Bytes as KiB, two decimals.
fn kib(bytes: f64) -> String {
    format!("{:.2} KiB", bytes / 1024.0)
}

/// A histogram of seconds: its mean, and the buckets its p50 and p99 fall in.
fn seconds(histogram: &Histogram) -> String {
    let at = |seconds: f64| human(Duration::from_secs_f64(seconds.min(1e6)));
    let bound = |q: f64| match histogram.quantile_bound(q) {
        Some(le) if le.is_finite() => format!("≤ {}", at(le)),
        Some(_) => "over the last bucket".into(),
        None => "—".into(),
    };
    match histogram.mean() {
        Some(mean) => format!(
            "mean {}; p50 {}, p99 {} (of {})",
            at(mean),
            bound(0.5),
            bound(0.99),
            count(histogram.count() as usize)
        ),
        None => "no parks".into(),
    }
}

/// Wall p50 and p99, and the thread's CPU time at each.
fn p50_p99(spans: &Spans) -> String {
    let at = |q: f64| format!("{} (CPU {})", human(spans.wall.quantile(q)), human(spans.cpu.quantile(q)));
    format!("p50 {}, p99 {}", at(0.5), at(0.99))
}

/// `a`'s p50 over `b`'s, wall and CPU.
fn ratio(a: &Spans, b: &Spans) -> String {
    let of = |a: &Measured, b: &Measured| {
        three_figures(a.quantile(0.5).as_secs_f64() / b.quantile(0.5).as_secs_f64().max(f64::MIN_POSITIVE))
    };
    format!("{}× (CPU {}×)", of(&a.wall, &b.wall), of(&a.cpu, &b.cpu))
}

/// Whether a target was met, as the table says it.
fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**missed**" }
}

/// A target and whether it was met.
fn target(what: &str, met: bool) -> String {
    format!("{what}: {}", verdict(met))
}

/// A time target judged on the thread's CPU time at p50 and on the wall time.
fn time_target(spans: &Spans, limit: Duration) -> String {
    let (cpu, wall) = (spans.cpu.quantile(0.5) <= limit, spans.wall.quantile(0.5) <= limit);
    format!("≤ {} (p50): {} on CPU time, {} on wall time", human(limit), verdict(cpu), verdict(wall))
}

/// The sidecar's own table: memory with runs waiting live and parked, the
/// parked states' bytes, park and resume times, start-up; `None` when none
/// of it was measured.
fn sidecar_table(figures: &Figures) -> Option<String> {
    let measured = figures.live_rss.is_some()
        || figures.parked_rss.is_some()
        || figures.one_thread.is_some()
        || figures.start_up.is_some();
    if !measured {
        return None;
    }
    let mut out = String::from("| | measured | target |\n|---|---|---|\n");
    let mut row = |name: String, value: String, target: String| {
        let _ = writeln!(out, "| {name} | {value} | {target} |");
    };
    if let Some((idle, live)) = &figures.live_rss {
        row("sidecar RSS, idle (after 4 runs)".into(), mib(*idle), String::new());
        for &(runs, rss) in live {
            let per_run = rss.saturating_sub(*idle) as f64 / runs.max(1) as f64;
            row(
                format!("sidecar RSS, {} runs waiting live on a call (each keeps its Wasm instance)", count(runs)),
                format!("{}, {per_run:.0} KiB a run", above(rss, *idle, "idle")),
                String::new(),
            );
        }
    }
    if let Some(parked) = &figures.parked_rss {
        let in_flight = super::parking::IN_FLIGHT;
        row(
            "sidecar RSS, idle, default bounds (another process, after 4 runs)".into(),
            mib(parked.idle_kib),
            String::new(),
        );
        row(
            format!(
                "the same, just after {in_flight} runs waited live at once on a call and were answered (the pool slots runs in flight warm; nothing held)"
            ),
            mib(parked.burst_kib),
            String::new(),
        );
        row(
            format!(
                "the same, once idle {} s: the pool and malloc's free memory given back",
                super::parking::IDLE_RELEASE.as_secs()
            ),
            mib(parked.given_back_kib),
            String::new(),
        );
        for &(runs, rss, given_back, held) in &parked.at {
            let holds = format!(
                "just after the last park {}; once idle {}; slots in use {}, runs live {}, waiting on tools {}, guest memory {} B",
                above(rss, parked.burst_kib, "the burst"),
                above(given_back, parked.given_back_kib, "idle after it"),
                held.slots_in_use,
                held.runs_live,
                held.runs_waiting_on_tools,
                held.guest_memory_bytes
            );
            let goal = (runs == 10_000).then(|| {
                let limit = PARKED_10K_TARGET_MIB << 10;
                let no_slot = held.slots_in_use == 0.0 && held.runs_live == 0.0;
                let at_once = rss.saturating_sub(parked.burst_kib) <= limit;
                let once_idle = given_back.saturating_sub(parked.given_back_kib) <= limit;
                target(&format!("≤ {PARKED_10K_TARGET_MIB} MiB above idle, no slot"), at_once && once_idle && no_slot)
            });
            row(format!("sidecar RSS, {} runs parked so far", count(runs)), holds, goal.unwrap_or_default());
        }
        let sizes = &parked.state_bytes;
        let total: usize = sizes.iter().sum();
        if let (Some(min), Some(max)) = (sizes.iter().min(), sizes.iter().max()) {
            row(
                format!("sealed state per parked run, `{}` (`Parked.state`)", super::sidecar::ONE_CALL),
                format!("mean {:.0} B (min {min}, max {max})", total as f64 / sizes.len() as f64),
                String::new(),
            );
        }
        row(
            format!("sealed states the bench holds for the {} runs (the backend's cost)", count(sizes.len())),
            format!("{:.1} MiB", total as f64 / f64::from(1 << 20)),
            String::new(),
        );
        let rate = sizes.len() as f64 / parked.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        row(
            format!(
                "parking, {} at a time over {} connections: parks/s; the sidecar's `park_duration_seconds`",
                super::parking::IN_FLIGHT,
                super::parking::CONNECTIONS
            ),
            format!("{}/s; {}", super::stats::rate(rate), seconds(&parked.park)),
            String::new(),
        );
        row(
            "times the idle parking sidecar gave its warm instance pool back".into(),
            parked.pool_releases.to_string(),
            String::new(),
        );
    }
    if let Some(one) = &figures.one_thread {
        let states = &one.demo_states;
        if let Some(&max) = states.iter().max() {
            let mean = states.iter().sum::<usize>() as f64 / states.len() as f64;
            row(
                format!("sealed state, demo script (`examples/contracts.py`), at each of its {} calls", states.len()),
                format!("mean {}, max {}", kib(mean), kib(max as f64)),
                target("≤ 8 KiB", max <= STATE_TARGET_BYTES),
            );
        }
        let park_mean = one.park.mean().map(Duration::from_secs_f64);
        row(
            "park, one thread: the sidecar's `park_duration_seconds` (its decision to its sealed state queued, wall)"
                .into(),
            seconds(&one.park),
            target(
                &format!("≤ {} (mean)", human(PARK_RESUME_TARGET)),
                park_mean.is_some_and(|m| m <= PARK_RESUME_TARGET),
            ),
        );
        row(
            "park, one thread: the call reaches the handler, which says it waits for a person → `Parked` reaches the client"
                .into(),
            p50_p99(&one.park_seen),
            time_target(&one.park_seen, PARK_RESUME_TARGET),
        );
        row(
            "resume, one thread: the resuming `Start` sent → the run's next call reaches the handler".into(),
            format!("{}; {} a fresh run's start", p50_p99(&one.resume), ratio(&one.resume, &one.fresh_start)),
            time_target(&one.resume, PARK_RESUME_TARGET),
        );
        row(
            "fresh run, one thread: `Start` sent → its first call reaches the handler".into(),
            p50_p99(&one.fresh_start),
            String::new(),
        );
        row(
            "a call's round trip, one thread, answered at once (live): the call reaches the handler → the next one does"
                .into(),
            p50_p99(&one.live_round_trip),
            String::new(),
        );
        row(
            "the same, the call parked, handed off and resumed with its answer at once".into(),
            format!(
                "{}; {} live",
                p50_p99(&one.parked_round_trip),
                ratio(&one.parked_round_trip, &one.live_round_trip)
            ),
            String::new(),
        );
    }
    if let Some((cold, cached)) = &figures.start_up {
        let median = |samples: &Vec<Duration>| {
            let mut sorted = samples.clone();
            sorted.sort();
            sorted.get(sorted.len() / 2).copied().map_or_else(|| "—".into(), human)
        };
        row("sidecar start-up to SERVING, cold cache (median)".into(), median(cold), String::new());
        row("sidecar start-up to SERVING, cached (median)".into(), median(cached), String::new());
    }
    Some(out)
}

/// One generated part of the page, between its markers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Region {
    begin: &'static str,
    end: &'static str,
    markdown: String,
}

impl Region {
    /// The part with its markers, as the page holds it.
    fn generated(&self) -> String {
        format!("{}\n{}{}\n", self.begin, self.markdown, self.end)
    }
}

/// The generated Markdown of every table measured: the side-by-side table
/// with the machine and the versions, and the sidecar's table with the
/// machine, each between its markers.
pub(crate) fn render(figures: &Figures) -> Vec<Region> {
    let mut regions = Vec::new();
    if !figures.latency.is_empty() {
        regions.push(Region { begin: BEGIN, end: END, markdown: format!("{}\n{}", header(figures), table(figures)) });
    }
    if let Some(sidecar) = sidecar_table(figures) {
        let versions = format!(
            "- Versions: {}, wasmtime {}, monty guest {}\n",
            command_line("rustc", &["--version"]),
            locked_version("wasmtime"),
            locked_version("monty")
        );
        let markdown = format!("{}{versions}{}\n{sidecar}", machine(), quick_line(figures));
        regions.push(Region { begin: SIDECAR_BEGIN, end: SIDECAR_END, markdown });
    }
    regions
}

/// The regions as printed.
pub(crate) fn printed(regions: &[Region]) -> String {
    regions.iter().map(Region::generated).collect::<Vec<_>>().join("\n")
}

/// Writes each of `regions` into `path` between its markers (the prose
/// around them, and any region not measured, are kept); a page that does
/// not exist yet gets the regions alone.
///
/// # Errors
/// If the page cannot be read or written, or exists without a region's markers.
pub(crate) fn write(path: &Path, regions: &[Region]) -> anyhow::Result<()> {
    let page = match std::fs::read_to_string(path) {
        Ok(mut page) => {
            for region in regions {
                page = splice(&page, region).with_context(|| {
                    format!(
                        "`{}` lacks the markers `{}` … `{}`: put them back where the table goes",
                        path.display(),
                        region.begin,
                        region.end
                    )
                })?;
            }
            page
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => printed(regions),
        Err(e) => return Err(e).with_context(|| format!("cannot read `{}`", path.display())),
    };
    std::fs::write(path, page).with_context(|| format!("cannot write `{}`", path.display()))
}

fn splice(page: &str, region: &Region) -> Option<String> {
    let (before, rest) = page.split_once(region.begin)?;
    let (_, after) = rest.split_once(region.end)?;
    let after = after.strip_prefix('\n').unwrap_or(after);
    Some(format!("{before}{}{after}", region.generated()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rerun_replaces_only_the_generated_parts_it_measured() {
        let page = format!(
            "# Title\n{BEGIN}\nold figures\n{END}\n## Sidecar\n{SIDECAR_BEGIN}\nold sidecar\n{SIDECAR_END}\nprose\n"
        );
        let sidecar = Region { begin: SIDECAR_BEGIN, end: SIDECAR_END, markdown: "new sidecar\n".into() };
        let new = splice(&page, &sidecar).unwrap();
        assert_eq!(
            new,
            format!(
                "# Title\n{BEGIN}\nold figures\n{END}\n## Sidecar\n{SIDECAR_BEGIN}\nnew sidecar\n{SIDECAR_END}\nprose\n"
            )
        );
        assert_eq!(splice("no markers", &sidecar), None);
    }

    #[test]
    fn the_sidecar_table_prints_without_a_tether_column() {
        let figures = Figures { live_rss: Some((36 << 10, vec![(1_000, 560 << 10)])), ..Figures::default() };
        let regions = render(&figures);
        assert_eq!(regions.len(), 1, "no side-by-side table without systems: {regions:?}");
        let text = printed(&regions);
        assert!(text.contains("| sidecar RSS, 1,000 runs waiting live on a call"), "{text}");
        assert!(text.contains("560.0 MiB (+524.0 MiB over idle), 537 KiB a run"), "{text}");
        assert_eq!((count(100_000), count(999), count(1_000)), ("100,000".into(), "999".into(), "1,000".into()));
    }

    #[test]
    fn peers_get_their_ratio_to_tether_over_tcp() {
        let measured = |us: u64| Measured {
            samples: vec![Duration::from_micros(us)],
            elapsed: Duration::from_secs(1),
            result: serde_json::Value::Null,
        };
        let mut figures = Figures::default();
        figures.latency.insert((System::TetherTcp, Workload::Trivial), measured(400));
        figures.latency.insert((System::MontyWarm, Workload::Trivial), measured(200));
        let table = table(&figures);
        assert!(table.contains("| W1 `1 + 1` p50 | 400 µs | 200 µs (0.50×) |"), "{table}");
        assert!(!table.contains("Pyodide"), "systems not measured get no column: {table}");
        assert_eq!(
            (three_figures(0.484), three_figures(16.66), three_figures(4794.7)),
            ("0.48".into(), "16.7".into(), "4795".into())
        );
    }
}
