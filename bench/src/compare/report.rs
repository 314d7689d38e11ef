//! The machine, the versions, and the one table, as Markdown: printed, and
//! written between two markers in `docs/benchmarks.md` so the prose around
//! them (what the table means, where the time goes) survives a rerun.

use super::stats::{Measured, human, rate, three_figures};
use super::workload::Workload;
use super::{LEVELS, System};
use anyhow::Context;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// Where the generated part of `docs/benchmarks.md` starts and ends.
const BEGIN: &str = "<!-- tether-bench: generated from here; `./x bench` rewrites it -->";
const END: &str = "<!-- tether-bench: generated up to here -->";

/// Everything one bench run measured.
#[derive(Debug, Default)]
pub(crate) struct Figures {
    /// Latency: each system on each workload, one run at a time.
    pub(crate) latency: BTreeMap<(System, Workload), Measured>,
    /// Runs per second at each concurrency.
    pub(crate) throughput: BTreeMap<(System, Workload, usize), f64>,
    /// The sidecar's RSS, KiB: idle, then with each count of parked runs.
    pub(crate) rss: Option<(u64, Vec<(usize, u64)>)>,
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
    let lock = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock")).unwrap_or_default();
    let needle = format!("name = \"{package}\"\nversion = \"");
    lock.split_once(&needle)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or_else(|| "unknown".into(), |(version, _)| version.to_owned())
}

/// The machine and the versions, one line each.
fn header(figures: &Figures) -> String {
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
    let version = |system: System| figures.versions.get(&system).map_or("not measured", String::as_str).to_owned();
    let mut out = String::new();
    let _ = writeln!(out, "- Date: {}", command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]));
    let _ = writeln!(out, "- Machine: {cores} cores (`nproc`), {cpu}, Linux {kernel}");
    let _ = writeln!(
        out,
        "- Versions: {}, wasmtime {}, monty guest {}, pydantic-monty {}, CPython {}, Pyodide {} on node {}",
        command_line("rustc", &["--version"]),
        locked_version("wasmtime"),
        locked_version("monty"),
        version(System::MontyWarm),
        version(System::Cpython),
        version(System::PyodideWarm),
        command_line("node", &["--version"]),
    );
    if figures.quick {
        let _ = writeln!(out, "- **`--quick`: a smoke check with few samples; its figures are not worth comparing.**");
    }
    out
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
    if let Some((idle, parked)) = &figures.rss {
        let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
        row("sidecar RSS, idle".into(), &|system| (system == System::TetherTcp).then(|| mib(*idle)));
        for &(count, kib) in parked {
            row(format!("sidecar RSS, {count} runs parked on a call"), &|system| {
                (system == System::TetherTcp).then(|| mib(kib))
            });
        }
    }
    if let Some((cold, cached)) = &figures.start_up {
        let median = |samples: &Vec<Duration>| {
            let mut sorted = samples.clone();
            sorted.sort();
            sorted.get(sorted.len() / 2).copied().map(human)
        };
        row("sidecar start-up to SERVING, cold cache (median)".into(), &|system| {
            (system == System::TetherTcp).then(|| median(cold)).flatten()
        });
        row("sidecar start-up to SERVING, cached (median)".into(), &|system| {
            (system == System::TetherTcp).then(|| median(cached)).flatten()
        });
    }
    out
}

/// The generated Markdown: header and table, between the markers.
pub(crate) fn render(figures: &Figures) -> String {
    format!("{BEGIN}\n{}\n{}{END}\n", header(figures), table(figures))
}

/// Writes `generated` into `path`: between the markers if the page has
/// them (the prose around them is kept); a page that does not exist yet
/// gets the generated part alone.
///
/// # Errors
/// If the page cannot be read or written, or exists without the markers.
pub(crate) fn write(path: &Path, generated: &str) -> anyhow::Result<()> {
    let page = match std::fs::read_to_string(path) {
        Ok(page) => splice(&page, generated).with_context(|| {
            format!("`{}` lacks the markers `{BEGIN}` … `{END}`: put them back where the table goes", path.display())
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => generated.to_owned(),
        Err(e) => return Err(e).with_context(|| format!("cannot read `{}`", path.display())),
    };
    std::fs::write(path, page).with_context(|| format!("cannot write `{}`", path.display()))
}

fn splice(page: &str, generated: &str) -> Option<String> {
    let (before, rest) = page.split_once(BEGIN)?;
    let (_, after) = rest.split_once(END)?;
    let after = after.strip_prefix('\n').unwrap_or(after);
    Some(format!("{before}{generated}{after}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rerun_replaces_only_the_generated_part() {
        let page = format!("# Title\n{BEGIN}\nold figures\n{END}\n## Where the time goes\n");
        let new = splice(&page, &format!("{BEGIN}\nnew figures\n{END}\n")).unwrap();
        assert_eq!(new, format!("# Title\n{BEGIN}\nnew figures\n{END}\n## Where the time goes\n"));
        assert_eq!(splice("no markers", "x"), None);
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
