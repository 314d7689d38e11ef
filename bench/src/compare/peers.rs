//! The peers, each measured by its driver under `bench/peers/` in a process
//! of its own: the driver runs the workload and prints one JSON object
//! (`samples_us`, `elapsed_s`, `result`, `version`), read here. eryx's
//! driver is a program of its own (`bench/peers/eryx/`, built by
//! `tools/bench/peers.sh`).

use super::stats::Measured;
use super::workload::Workload;
use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the peers are installed (`tools/bench/peers.sh` prints these).
#[derive(Debug, Clone)]
pub(crate) struct Installed {
    /// The venv's python: pydantic-monty's host, and the CPython peer.
    pub(crate) python: PathBuf,
    /// The `node_modules` holding `pyodide`.
    pub(crate) node_modules: PathBuf,
    /// eryx's peer program and its compiled sandbox component, when built.
    pub(crate) eryx: Option<(PathBuf, PathBuf)>,
}

impl Installed {
    /// From `TETHER_BENCH_PYTHON` and `TETHER_BENCH_NODE_MODULES`, which `./x bench` sets, and
    /// `TETHER_BENCH_ERYX` / `TETHER_BENCH_ERYX_RUNTIME`, which it sets unless `--only` leaves eryx out.
    pub(crate) fn from_env() -> anyhow::Result<Installed> {
        let var = |name: &str| {
            std::env::var_os(name).map(PathBuf::from).with_context(|| {
                format!("`{name}` is not set: run the bench with `./x bench`, which installs the peers (tools/bench/peers.sh) and sets it")
            })
        };
        let eryx = var("TETHER_BENCH_ERYX").ok().zip(var("TETHER_BENCH_ERYX_RUNTIME").ok());
        Ok(Installed { python: var("TETHER_BENCH_PYTHON")?, node_modules: var("TETHER_BENCH_NODE_MODULES")?, eryx })
    }
}

/// One peer in one mode: a driver and the program that runs it (or a
/// program that is its own driver), and flags of its own.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    program: PathBuf,
    driver: Option<PathBuf>,
    mode: &'static str,
    node_modules: Option<PathBuf>,
    extra: Vec<std::ffi::OsString>,
}

/// What a driver prints.
#[derive(Debug, Deserialize)]
struct Report {
    samples_us: Vec<f64>,
    elapsed_s: f64,
    result: Value,
    version: String,
}

fn driver(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers").join(name)
}

impl Peer {
    /// pydantic-monty's pool, `mode` `warm` (one session reused) or `fresh` (a checkout per run).
    pub(crate) fn monty(installed: &Installed, mode: &'static str) -> Peer {
        Peer {
            program: installed.python.clone(),
            driver: Some(driver("monty_peer.py")),
            mode,
            node_modules: None,
            extra: Vec::new(),
        }
    }

    /// CPython, one subprocess per script, run by `python`.
    pub(crate) fn cpython(python: &Path) -> Peer {
        Peer {
            program: python.to_owned(),
            driver: Some(driver("cpython_peer.py")),
            mode: "subprocess",
            node_modules: None,
            extra: Vec::new(),
        }
    }

    /// Pyodide in node, `mode` `warm` (one instance) or `cold` (an instance per run).
    pub(crate) fn pyodide(installed: &Installed, mode: &'static str) -> Peer {
        Peer {
            program: "node".into(),
            driver: Some(driver("pyodide_peer.mjs")),
            mode,
            node_modules: Some(installed.node_modules.clone()),
            extra: Vec::new(),
        }
    }

    /// eryx, a fresh instance per run (`Sandbox::execute`), or `None` when
    /// it was not built.
    pub(crate) fn eryx(installed: &Installed) -> Option<Peer> {
        let (program, runtime) = installed.eryx.clone()?;
        Some(Peer {
            program,
            driver: None,
            mode: "execute",
            node_modules: None,
            extra: vec!["--runtime".into(), runtime.into_os_string()],
        })
    }

    /// Runs `workload` `samples` times (after `warmup` untimed runs), at most
    /// `concurrency` at once; the demo data is read from `world`. Returns the
    /// measurement and the peer's version.
    ///
    /// # Errors
    /// If the driver cannot start, fails (its stderr is in the error), or
    /// prints no report.
    pub(crate) async fn measure(
        &self,
        workload: Workload,
        world: &Path,
        samples: usize,
        warmup: usize,
        concurrency: usize,
    ) -> anyhow::Result<(Measured, String)> {
        let mut command = std::process::Command::new(&self.program);
        command
            .args(&self.driver)
            .args(&self.extra)
            .arg("--script")
            .arg(workload.script())
            .args(["--input", &workload.input().to_string()])
            .arg("--world")
            .arg(world)
            .args(["--samples", &samples.to_string(), "--warmup", &warmup.to_string()])
            .args(["--concurrency", &concurrency.to_string(), "--mode", self.mode]);
        if let Some(modules) = &self.node_modules {
            command.arg("--node-modules").arg(modules);
        }
        let driver = self.driver.as_deref().map_or_else(String::new, |driver| format!(" {}", driver.display()));
        let name = format!("`{}{driver}` ({})", self.program.display(), self.mode);
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .context("the driver's waiting thread failed")?
            .with_context(|| format!("cannot start the peer driver {name}"))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect();
            bail!("the peer driver {name} failed ({}):\n{}", output.status, tail.join("\n"));
        }
        parse(&String::from_utf8_lossy(&output.stdout))
            .with_context(|| format!("reading what the peer driver {name} printed"))
    }
}

/// The report on the last line of a driver's stdout.
fn parse(stdout: &str) -> anyhow::Result<(Measured, String)> {
    let line = stdout.lines().rev().find(|line| !line.trim().is_empty()).context("the driver printed nothing")?;
    let report: Report = serde_json::from_str(line).context("its last line is not the report JSON")?;
    let duration = |seconds: f64| {
        Duration::try_from_secs_f64(seconds).with_context(|| format!("`{seconds}` is not a duration in seconds"))
    };
    let samples = report.samples_us.iter().map(|us| duration(us / 1e6)).collect::<anyhow::Result<_>>()?;
    Ok((Measured { samples, elapsed: duration(report.elapsed_s)?, result: report.result }, report.version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_read_from_the_last_line() {
        let stdout =
            "noise\n{\"samples_us\": [250.0, 1500.5], \"elapsed_s\": 0.5, \"result\": 2, \"version\": \"1.4.0\"}\n";
        let (measured, version) = parse(stdout).unwrap();
        assert_eq!(measured.samples, [Duration::from_micros(250), Duration::from_nanos(1_500_500)]);
        assert_eq!(measured.elapsed, Duration::from_millis(500));
        assert_eq!((measured.result, version.as_str()), (Value::from(2), "1.4.0"));
        assert!(parse("").is_err());
        assert!(parse("{\"samples_us\": [-1], \"elapsed_s\": 1, \"result\": null, \"version\": \"x\"}").is_err());
    }

    /// The CPython driver needs only the standard library: its flags and
    /// report are checked end to end on the smallest workload (~0.5 s).
    #[tokio::test]
    async fn the_cpython_driver_runs_a_workload_and_refuses_bad_flags() {
        let python = std::env::var_os("TETHER_PYTHON").map_or_else(|| PathBuf::from("python3"), PathBuf::from);
        let world = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(world.path(), super::super::workload::world_json().to_string()).unwrap();
        let peer = Peer::cpython(&python);
        let (measured, version) = peer.measure(Workload::Trivial, world.path(), 2, 0, 1).await.unwrap();
        assert_eq!(measured.samples.len(), 2);
        assert_eq!(measured.result, Value::from(2));
        assert!(version.starts_with('3'), "a CPython version: {version}");
        let (demo, _) = peer.measure(Workload::DemoSequential, world.path(), 1, 0, 1).await.unwrap();
        let week = tether_cli::demo::DemoWorld::default()
            .issues()
            .iter()
            .filter(|issue| issue.opened.as_str() >= tether_cli::demo::WEEK_START)
            .count();
        assert_eq!(demo.result["checked"], Value::from(week), "the demo sees last week's issues: {}", demo.result);

        let error = peer.measure(Workload::Trivial, world.path(), 0, 0, 1).await.unwrap_err();
        assert!(format!("{error:#}").contains("--samples"), "{error:#}");
    }
}
