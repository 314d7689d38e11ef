//! Tether's three ways to be reached, measured in this process: a sidecar
//! process over gRPC on TCP and on a Unix socket, and a sidecar embedded in
//! this process (served on loopback, as `tether demo` and the Python
//! package's default do).

use super::stats::Measured;
use super::workload::{self, Workload};
use crate::process::SidecarProcess;
use anyhow::Context;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tether_backend::{CallHandler, RunRequest, ScriptCall, SidecarClient, ToolDef, ToolOutcome};
use tether_cli::demo::DemoWorld;
use tokio::sync::Mutex;
use tokio::task::JoinSet;

/// The tools every workload may call, answered in memory: `noop` and the
/// demo's three (`DemoWorld::execute`, the data the peers get too).
struct BenchTools {
    world: DemoWorld,
}

#[async_trait::async_trait]
impl CallHandler for BenchTools {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        match call.name.as_str() {
            "noop" => ToolOutcome::Ok(Value::Null),
            name => self.world.execute(name, &call.args),
        }
    }
}

/// A client of one Tether sidecar and what answers its runs' calls.
pub(crate) struct Tether {
    client: SidecarClient,
    tools: Arc<BenchTools>,
    defs: Arc<Vec<ToolDef>>,
}

impl Tether {
    /// Runs against the sidecar `client` talks to.
    pub(crate) fn new(client: SidecarClient) -> Tether {
        Tether {
            client,
            tools: Arc::new(BenchTools { world: DemoWorld::default() }),
            defs: Arc::new(workload::tools()),
        }
    }

    /// Runs `workload` `samples` times (after `warmup` untimed runs), at most
    /// `concurrency` at once, each timed from submitting the script to its result.
    ///
    /// # Errors
    /// If a run fails or does not end OK.
    pub(crate) async fn measure(
        &self,
        workload: Workload,
        samples: usize,
        warmup: usize,
        concurrency: usize,
    ) -> anyhow::Result<Measured> {
        let source: Arc<str> = workload.source()?.into();
        let input = workload.input();
        for _ in 0..warmup {
            self.one(&source, &input).await?;
        }
        let next = Arc::new(AtomicUsize::new(0));
        let times = Arc::new(Mutex::new(Vec::with_capacity(samples)));
        let last = Arc::new(Mutex::new(Value::Null));
        let started = Instant::now();
        let mut runners = JoinSet::new();
        for _ in 0..concurrency.max(1) {
            let (this, source, input) = (self.clone_handle(), source.clone(), input.clone());
            let (next, times, last) = (next.clone(), times.clone(), last.clone());
            runners.spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < samples {
                    let run_started = Instant::now();
                    let result = this.one(&source, &input).await?;
                    times.lock().await.push(run_started.elapsed());
                    *last.lock().await = result;
                }
                anyhow::Ok(())
            });
        }
        while let Some(joined) = runners.join_next().await {
            joined.context("a runner task failed")??;
        }
        let elapsed = started.elapsed();
        let samples = std::mem::take(&mut *times.lock().await);
        let result = std::mem::take(&mut *last.lock().await);
        Ok(Measured { samples, elapsed, result })
    }

    fn clone_handle(&self) -> Tether {
        Tether { client: self.client.clone(), tools: self.tools.clone(), defs: self.defs.clone() }
    }

    /// One run: its result, or an error unless it ended OK.
    async fn one(&self, source: &str, input: &Value) -> anyhow::Result<Value> {
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let id = format!("bench-{}", RUNS.fetch_add(1, Ordering::Relaxed));
        let request =
            RunRequest { input: input.clone(), tools: (*self.defs).clone(), ..RunRequest::python(id, source) };
        let outcome = self.client.run(request, &*self.tools).await?;
        anyhow::ensure!(outcome.is_ok(), "the workload failed on Tether: {outcome:?}");
        Ok(outcome.result.unwrap_or(Value::Null))
    }
}

/// A sidecar process serving TCP and a Unix socket, with room for the most
/// concurrent runs the bench opens.
pub(crate) fn start_sidecar(socket: &std::path::Path) -> anyhow::Result<SidecarProcess> {
    let binary = crate::process::sidecar_binary(None)?;
    let flags: Vec<String> = vec![
        "--socket".into(),
        socket.display().to_string(),
        "--max-queued-runs".into(),
        "1024".into(),
        "--max-waiting-runs".into(),
        "1024".into(),
    ];
    SidecarProcess::start(&binary, &flags)
}
