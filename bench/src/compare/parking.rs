//! Parked runs (`docs/parking.md`) measured: what a run waiting on a person
//! costs when it parks, against one that waits live holding its Wasm
//! instance (`sidecar::live_rss`).
//!
//! - [`parked_rss`]: a `tether-sidecar` process's resident memory as runs
//!   park on a call that waits for a person, a bounded number at a time, up
//!   to 100,000; its gauges say it holds none of them. The bench keeps their
//!   sealed states, as a backend's store would: their bytes are the
//!   backend's cost, not the sidecar's.
//! - [`one_thread`]: client, embedded sidecar and handler on one
//!   current-thread runtime, a live run and a parked one in turn: a fresh
//!   run's start to its first call, the park, the resuming `Start` to the
//!   run's next message, and a call's round trip live against parked and
//!   resumed; and the demo script's sealed state at each of its calls.
//!
//! Every run parks at once, not after `--park-after-ms`: its handler says
//! each call waits for a person (`AwaitingPerson`, as the turn does for an
//! approver that asks one) and hands the run off (`CallHandler::hand_off`,
//! as the script tool does for an approver that defers), so the run ends in
//! the bench with its `Parked` and the bench resumes it when it wants to.

use super::sidecar::{self, ONE_CALL, Waiting};
use super::stats::Measured;
use crate::process::{SidecarProcess, sidecar_binary};
use anyhow::Context;
use nix::time::{ClockId, clock_gettime};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tether_backend::client::HandedOff;
use tether_backend::pb;
use tether_backend::{CallHandler, RunRequest, ScriptCall, SidecarClient, ToolOutcome};
use tether_cli::demo::DemoWorld;
use tether_cli::embedded::EmbeddedSidecar;
use tether_sidecar::SidecarConfig;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Connections the parking runs are spread over.
pub(crate) const CONNECTIONS: usize = 8;

/// Runs in flight at once while parking, over all the connections: within
/// the sidecar's default bounds (`--max-waiting-runs` 256,
/// `--max-queued-runs` 1,024), which the parked sidecar runs with.
pub(crate) const IN_FLIGHT: usize = 64;

/// The script of the timed runs: the first call is answered at once (live)
/// or waits for a person (parked); the second is answered at once.
const TWO_CALLS: &str = "call('first')\ncall('second')";

/// Untimed pairs before the timed ones.
const WARMUP_PAIRS: usize = 20;

/// Every call waits for a person who answers later, elsewhere: the handler
/// says so (`AwaitingPerson`), so a run that may park parks at once, and
/// takes the calls out of this process: the run ends with its sealed state
/// (`RunOutcome::handed_off`). With `remember`, each call's tool and
/// arguments are kept by id, for the bench to answer them.
#[derive(Default)]
struct Deferred {
    remember: bool,
    calls: Mutex<HashMap<String, (String, Value)>>,
}

#[async_trait::async_trait]
impl CallHandler for Deferred {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        if self.remember
            && let Ok(mut calls) = self.calls.lock()
        {
            calls.insert(call.id.clone(), (call.name.clone(), call.args.clone()));
        }
        call.on_awaiting_person.notify();
        std::future::pending().await
    }

    fn hand_off(&self, _awaiting: &[String]) -> bool {
        true
    }
}

/// Runs `request` (which may park) to its hand-off, and gives back what
/// resumes it.
///
/// # Errors
/// If the run fails to start, or ends instead of parking.
async fn park(client: &SidecarClient, request: RunRequest, handler: &dyn CallHandler) -> anyhow::Result<HandedOff> {
    let outcome = client.run(RunRequest { may_park: true, ..request }, handler).await?;
    match outcome.handed_off {
        Some(handed) => Ok(handed),
        None => anyhow::bail!(
            "the run ended ({:?}, {}) instead of parking on its call: {:?}",
            outcome.status,
            outcome.error_kind(),
            outcome.error
        ),
    }
}

/// A call's outcome as the resuming `Start` carries it.
fn result_of(id: String, outcome: ToolOutcome) -> pb::ToolResult {
    use pb::tool_result::Outcome;
    let outcome = match outcome {
        ToolOutcome::Ok(value) => Outcome::ValueJson(value.to_string()),
        ToolOutcome::Failed { code, message } => Outcome::Failure(pb::Failure { code, message }),
    };
    pb::ToolResult { id, outcome: Some(outcome) }
}

/// A Prometheus histogram read from the text format.
#[derive(Debug, Clone, Default)]
pub(crate) struct Histogram {
    /// `(le, cumulative count)`, in order; the last bound is `+Inf`.
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Histogram {
    /// The histogram `name` (e.g. `tether_sidecar_park_duration_seconds`) in `text`.
    ///
    /// # Errors
    /// If `text` lacks its count or sum.
    pub(crate) fn parse(text: &str, name: &str) -> anyhow::Result<Histogram> {
        let bucket = format!("{name}_bucket{{le=\"");
        let mut histogram = Histogram { sum: f64::NAN, count: f64::NAN, ..Histogram::default() };
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix(&bucket)
                && let Some((le, count)) = rest.split_once("\"} ")
            {
                let le = if le == "+Inf" { f64::INFINITY } else { le.parse()? };
                histogram.buckets.push((le, count.trim().parse()?));
            } else if let Some(sum) = sample(line, &format!("{name}_sum")) {
                histogram.sum = sum;
            } else if let Some(count) = sample(line, &format!("{name}_count")) {
                histogram.count = count;
            }
        }
        anyhow::ensure!(!histogram.sum.is_nan() && !histogram.count.is_nan(), "the metrics have no histogram `{name}`");
        Ok(histogram)
    }

    /// Observations.
    pub(crate) fn count(&self) -> f64 {
        self.count
    }

    /// The mean observation, if there was one.
    pub(crate) fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// The upper bound of the bucket that holds the `q`-quantile (0..=1).
    pub(crate) fn quantile_bound(&self, q: f64) -> Option<f64> {
        let rank = (self.count * q.clamp(0.0, 1.0)).ceil().max(1.0);
        self.buckets.iter().find(|(_, cumulative)| *cumulative >= rank).map(|(le, _)| *le)
    }
}

/// The value of the sample `name` (no labels) on `line`, if it is that sample.
fn sample(line: &str, name: &str) -> Option<f64> {
    line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok()
}

/// The value of the unlabelled sample `name` in `text`.
fn gauge(text: &str, name: &str) -> anyhow::Result<f64> {
    text.lines().find_map(|line| sample(line, name)).with_context(|| format!("the metrics have no `{name}`"))
}

/// What a sidecar's gauges say it holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Held {
    /// Execution slots held by runs.
    pub(crate) slots_in_use: f64,
    /// Runs admitted and not yet ended.
    pub(crate) runs_live: f64,
    /// Runs waiting on tool results.
    pub(crate) runs_waiting_on_tools: f64,
    /// Guest memory held by live runs, bytes.
    pub(crate) guest_memory_bytes: f64,
}

impl Held {
    fn read(metrics: &str) -> anyhow::Result<Held> {
        Ok(Held {
            slots_in_use: gauge(metrics, "tether_sidecar_slots_in_use")?,
            runs_live: gauge(metrics, "tether_sidecar_runs_live")?,
            runs_waiting_on_tools: gauge(metrics, "tether_sidecar_runs_waiting_on_tools")?,
            guest_memory_bytes: gauge(metrics, "tether_sidecar_guest_memory_bytes")?,
        })
    }
}

/// A sidecar process's resident memory as runs park.
#[derive(Debug, Clone, Default)]
pub(crate) struct ParkedRss {
    /// RSS, KiB, after a few runs one at a time, before any parked.
    pub(crate) idle_kib: u64,
    /// RSS, KiB, just after [`IN_FLIGHT`] runs waited live at once on a
    /// call and were answered: the pool slots runs in flight warm, with
    /// nothing held.
    pub(crate) burst_kib: u64,
    /// RSS, KiB, of the same sidecar once idle it has given back what the
    /// burst warmed (after [`IDLE_RELEASE`]).
    pub(crate) given_back_kib: u64,
    /// At each count of runs parked so far: RSS, KiB, just after the last
    /// park and once the idle sidecar has given back what the runs in flight
    /// warmed (its instance pool, malloc's free memory), and what its gauges
    /// say it holds.
    pub(crate) at: Vec<(usize, u64, u64, Held)>,
    /// Bytes of each sealed state the bench holds (`Parked.state` of
    /// [`ONE_CALL`]).
    pub(crate) state_bytes: Vec<usize>,
    /// The sidecar's `tether_sidecar_park_duration_seconds` over every park.
    pub(crate) park: Histogram,
    /// Wall time of all the parking, the waits for memory given back left out.
    pub(crate) elapsed: Duration,
    /// Times the idle sidecar gave its instance pool back (one after the
    /// burst and one after each count of [`ParkedRss::at`], when each did).
    pub(crate) pool_releases: f64,
}

/// `--idle-release-seconds` of the parking sidecar (30 by default): after
/// this long with no run in flight it gives back the pool slots a burst
/// warmed and malloc's free memory. Short, so each count can wait for it.
pub(crate) const IDLE_RELEASE: Duration = Duration::from_secs(5);

/// How long to wait for the idle sidecar to give memory back: its
/// [`IDLE_RELEASE`], a tick of its releaser, and the engine rebuilt.
const GIVE_BACK_WAIT: Duration = Duration::from_secs(8);

/// [`IN_FLIGHT`] runs of [`ONE_CALL`] over `clients`, all waiting live on
/// their call at once, then all answered: they warm the pool slots that
/// runs in flight to their park do, and end holding nothing — the baseline
/// the parked runs are measured against.
///
/// # Errors
/// If a run fails, or they do not all reach their call in time.
async fn burst(clients: &[SidecarClient]) -> anyhow::Result<()> {
    let Waiting { gate, mut runs } = sidecar::waiting_runs(clients, IN_FLIGHT).await?;
    gate.open();
    while let Some(ended) = runs.join_next().await {
        let outcome = ended.context("a run's task")??;
        anyhow::ensure!(outcome.is_ok(), "a run of the burst failed: {outcome:?}");
    }
    Ok(())
}

/// Runs `runs`, at most [`IN_FLIGHT`] at once, run `i` on connection
/// `i % clients.len()` (made by `run(client, i)`), handing each one's
/// output to `done` as it ends.
///
/// # Errors
/// The first run that fails, with its number.
async fn bounded<T, Run, Fut>(
    clients: &[SidecarClient],
    runs: std::ops::Range<usize>,
    run: Run,
    mut done: impl FnMut(T),
) -> anyhow::Result<()>
where
    Run: Fn(SidecarClient, usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let mut in_flight = JoinSet::new();
    let mut next = runs.start;
    while next < runs.end || !in_flight.is_empty() {
        while next < runs.end && in_flight.len() < IN_FLIGHT {
            let (client, i) = (clients[next % clients.len()].clone(), next);
            let ran = run(client, i);
            in_flight.spawn(async move { ran.await.with_context(|| format!("run {i}")) });
            next += 1;
        }
        if let Some(ended) = in_flight.join_next().await {
            done(ended.context("a run's task")??);
        }
    }
    Ok(())
}

/// A `tether-sidecar` process with its default bounds (the compile cache in
/// `cache_dir`, already filled): its RSS idle, just after a [`burst`] of
/// runs waiting live, and once idle after it; then after runs of
/// [`ONE_CALL`] have parked one after another, at most [`IN_FLIGHT`] at a
/// time over [`CONNECTIONS`] connections, until `counts` (ascending) have —
/// just after the last park and once idle — with what its gauges say it
/// holds. The bench keeps every sealed state, as a backend would.
///
/// # Errors
/// If the sidecar cannot start, a run fails or does not park, or the
/// metrics cannot be read.
pub(crate) async fn parked_rss(cache_dir: &Path, counts: &[usize]) -> anyhow::Result<ParkedRss> {
    let flags: Vec<String> = vec![
        "--cache-dir".into(),
        cache_dir.display().to_string(),
        "--metrics-listen".into(),
        "127.0.0.1:0".into(),
        "--idle-release-seconds".into(),
        IDLE_RELEASE.as_secs().to_string(),
    ];
    let process = SidecarProcess::start(&sidecar_binary(None)?, &flags)?;
    let clients = process.connections(CONNECTIONS).await?;
    let idle_kib = sidecar::idle_rss(&process, &clients[0]).await?;
    burst(&clients).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let burst_kib = process.sample()?.rss_kib;
    tokio::time::sleep(GIVE_BACK_WAIT).await;
    let given_back_kib = process.sample()?.rss_kib;
    let mut figures = ParkedRss { idle_kib, burst_kib, given_back_kib, ..ParkedRss::default() };

    let handler = Arc::new(Deferred::default());
    let mut states: Vec<Vec<u8>> = Vec::with_capacity(counts.last().copied().unwrap_or(0));
    let parking = |client: SidecarClient, i: usize| {
        let handler = handler.clone();
        async move { park(&client, RunRequest::python(format!("park-{i}"), ONE_CALL), &*handler).await }
    };
    for &count in counts {
        let started = Instant::now();
        bounded(&clients, states.len()..count, parking, |handed: HandedOff| states.push(handed.parked.state))
            .await
            .with_context(|| format!("parking runs {IN_FLIGHT} at a time over {CONNECTIONS} connections"))?;
        figures.elapsed += started.elapsed();
        eprintln!("tether-bench: {count} runs parked, {:.1} s of parking", figures.elapsed.as_secs_f64());
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (rss, held) = (process.sample()?.rss_kib, Held::read(&process.metrics().await?)?);
        tokio::time::sleep(GIVE_BACK_WAIT).await;
        figures.at.push((count, rss, process.sample()?.rss_kib, held));
    }
    let metrics = process.metrics().await?;
    figures.park = Histogram::parse(&metrics, "tether_sidecar_park_duration_seconds")?;
    figures.pool_releases = gauge(&metrics, "tether_sidecar_pool_releases_total")?;
    figures.state_bytes = states.iter().map(Vec::len).collect();
    Ok(figures)
}

/// A measurement on one thread: each sample's wall time, and the thread's
/// CPU time over the same span — client, sidecar and handler all run on it,
/// so that is the work done, which other processes on the machine do not
/// inflate as they do the wall time.
#[derive(Debug, Clone)]
pub(crate) struct Spans {
    /// Wall time of each sample.
    pub(crate) wall: Measured,
    /// The thread's CPU time over each sample.
    pub(crate) cpu: Measured,
}

impl Spans {
    fn new(spans: Vec<(Duration, Duration)>) -> Spans {
        let measured = |samples: Vec<Duration>| Measured { samples, elapsed: Duration::ZERO, result: Value::Null };
        let (wall, cpu) = spans.into_iter().unzip();
        Spans { wall: measured(wall), cpu: measured(cpu) }
    }
}

/// The figures measured on one thread.
#[derive(Debug, Clone)]
pub(crate) struct OneThread {
    /// A live run's `Start` sent to its first call reaching the handler.
    pub(crate) fresh_start: Spans,
    /// The resuming `Start` sent to the resumed run's next call reaching the handler.
    pub(crate) resume: Spans,
    /// The call reaching the handler (which says it waits for a person) to
    /// `Parked` reaching the client.
    pub(crate) park_seen: Spans,
    /// The sidecar's `tether_sidecar_park_duration_seconds` over the parks.
    pub(crate) park: Histogram,
    /// The first call reaching the handler to the second doing so, the
    /// first answered at once.
    pub(crate) live_round_trip: Spans,
    /// The same, the first call parked, handed off and resumed with its result.
    pub(crate) parked_round_trip: Spans,
    /// Bytes of the demo script's sealed state at each of its calls.
    pub(crate) demo_states: Vec<usize>,
}

/// A moment on this thread: the wall clock and the thread's CPU clock.
#[derive(Debug, Clone, Copy)]
struct Mark {
    wall: Instant,
    cpu: Duration,
}

impl Mark {
    fn now() -> Mark {
        // The thread CPU clock exists on every Linux; were it to fail, the
        // CPU figures would read zero, which the table would show.
        let cpu = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(Duration::ZERO, Duration::from);
        Mark { wall: Instant::now(), cpu }
    }

    /// Wall and CPU time from `self` to `later`.
    fn to(self, later: Mark) -> (Duration, Duration) {
        (later.wall.saturating_duration_since(self.wall), later.cpu.saturating_sub(self.cpu))
    }
}

/// The calls of a [`TWO_CALLS`] run, marked where the handler gets them.
/// With `park`, the first waits for a person and the run is handed off;
/// else every call is answered at once.
#[derive(Default)]
struct Timed {
    park: bool,
    first: OnceLock<Mark>,
    second: OnceLock<Mark>,
    parked: OnceLock<Mark>,
}

/// The mark `mark`, or an error saying the run never reached `what`.
fn reached(mark: &OnceLock<Mark>, what: &str) -> anyhow::Result<Mark> {
    mark.get().copied().with_context(|| format!("the run never reached {what}"))
}

#[async_trait::async_trait]
impl CallHandler for Timed {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        let now = Mark::now();
        if call.name == "first" {
            let _ = self.first.set(now);
            if self.park {
                call.on_awaiting_person.notify();
                return std::future::pending().await;
            }
        } else {
            let _ = self.second.set(now);
        }
        ToolOutcome::Ok(Value::Null)
    }

    fn hand_off(&self, _awaiting: &[String]) -> bool {
        let _ = self.parked.set(Mark::now());
        true
    }
}

/// Wall and CPU time of one span.
type Span = (Duration, Duration);

/// One live run of [`TWO_CALLS`]: `Start` to first call, and first call to second.
async fn live_pair(client: &SidecarClient, id: String) -> anyhow::Result<(Span, Span)> {
    let timed = Timed::default();
    let started = Mark::now();
    let outcome = client.run(RunRequest::python(id, TWO_CALLS), &timed).await?;
    anyhow::ensure!(outcome.is_ok(), "a live run failed: {outcome:?}");
    let (first, second) = (reached(&timed.first, "its first call")?, reached(&timed.second, "its second call")?);
    Ok((started.to(first), first.to(second)))
}

/// One parked run of [`TWO_CALLS`], resumed at once: first call to
/// `Parked`, resuming `Start` to second call, and first call to second.
async fn parked_pair(client: &SidecarClient, id: String) -> anyhow::Result<(Span, Span, Span)> {
    let timed = Timed { park: true, ..Timed::default() };
    let handed = park(client, RunRequest::python(id, TWO_CALLS), &timed).await?;
    let (first, parked) = (reached(&timed.first, "its first call")?, reached(&timed.parked, "its park")?);
    let results = handed.parked.awaiting.iter().map(|id| result_of(id.clone(), ToolOutcome::Ok(Value::Null))).collect();
    let resume = pb::Resume { state: handed.parked.state, results };
    let resumed = Mark::now();
    let outcome = client.resume_until(handed.start, resume, &timed, CancellationToken::new()).await?;
    anyhow::ensure!(outcome.is_ok(), "a resumed run failed: {outcome:?}");
    let second = reached(&timed.second, "its second call after the resume")?;
    Ok((first.to(parked), resumed.to(second), first.to(second)))
}

/// The demo script (`examples/contracts.py`) handed off at each of its
/// calls and resumed with the demo tools' answer: the bytes of each sealed
/// state. Its result must be a live run's.
async fn demo_states(client: &SidecarClient) -> anyhow::Result<Vec<usize>> {
    let request = || RunRequest {
        input: DemoWorld::input(),
        tools: DemoWorld::tools(),
        ..RunRequest::python("demo-parked", tether_cli::demo::SCRIPT)
    };
    let (world, deferred) = (DemoWorld::default(), Deferred { remember: true, ..Deferred::default() });
    let mut sizes = Vec::new();
    let mut outcome = client.run(RunRequest { may_park: true, ..request() }, &deferred).await?;
    while let Some(handed) = outcome.handed_off.take() {
        sizes.push(handed.parked.state.len());
        let mut results = Vec::new();
        for id in &handed.parked.awaiting {
            let answered = handed.answered.iter().find(|result| &result.id == id).cloned();
            let result = match answered {
                Some(result) => result,
                None => {
                    let (name, args) = deferred
                        .calls
                        .lock()
                        .map_err(|_| anyhow::anyhow!("the call record was poisoned"))?
                        .remove(id)
                        .with_context(|| format!("the run awaits call `{id}`, which it never made"))?;
                    result_of(id.clone(), world.execute(&name, &args))
                }
            };
            results.push(result);
        }
        let resume = pb::Resume { state: handed.parked.state, results };
        outcome = client.resume_until(handed.start, resume, &deferred, CancellationToken::new()).await?;
    }
    anyhow::ensure!(outcome.is_ok(), "the parked demo script failed: {outcome:?}");
    let live = client.run(request(), &DemoTools(world)).await?;
    anyhow::ensure!(
        live.is_ok() && live.result == outcome.result,
        "the demo script parked at each call computed {:?}, live {:?}",
        outcome.result,
        live.result
    );
    Ok(sizes)
}

/// The demo tools, answered at once.
struct DemoTools(DemoWorld);

#[async_trait::async_trait]
impl CallHandler for DemoTools {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        self.0.execute(&call.name, &call.args)
    }
}

/// On one current-thread runtime, an embedded sidecar reached over its
/// local socket: `pairs` live and parked runs of [`TWO_CALLS`] in turn
/// (after untimed ones), then the demo script's states.
///
/// # Errors
/// If the sidecar cannot start, or a run fails or does not park.
pub(crate) fn one_thread(pairs: usize) -> anyhow::Result<OneThread> {
    crate::on_one_thread(|| async move {
        let embedded =
            EmbeddedSidecar::start(SidecarConfig::default()).await.context("starting the embedded sidecar")?;
        let client = SidecarClient::connect(&embedded.local_url()).await?;
        client.wait_ready(Duration::from_secs(300)).await?;
        let (mut fresh, mut live, mut park_seen, mut resume, mut parked) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..WARMUP_PAIRS + pairs {
            let (start, live_trip) = live_pair(&client, format!("live-{i}")).await?;
            let (seen, resumed, parked_trip) = parked_pair(&client, format!("parked-{i}")).await?;
            if i >= WARMUP_PAIRS {
                fresh.push(start);
                live.push(live_trip);
                park_seen.push(seen);
                resume.push(resumed);
                parked.push(parked_trip);
            }
        }
        let park = Histogram::parse(&embedded.sidecar.metrics_text(), "tether_sidecar_park_duration_seconds")?;
        let demo_states = demo_states(&client).await?;
        embedded.stop().await?;
        Ok(OneThread {
            fresh_start: Spans::new(fresh),
            resume: Spans::new(resume),
            park_seen: Spans::new(park_seen),
            park,
            live_round_trip: Spans::new(live),
            parked_round_trip: Spans::new(parked),
            demo_states,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_reads_from_the_text_format() {
        let text = "# HELP tether_sidecar_park_duration_seconds x\n\
            tether_sidecar_park_duration_seconds_sum 0.0009\n\
            tether_sidecar_park_duration_seconds_count 4\n\
            tether_sidecar_park_duration_seconds_bucket{le=\"0.0001\"} 1\n\
            tether_sidecar_park_duration_seconds_bucket{le=\"0.0002\"} 3\n\
            tether_sidecar_park_duration_seconds_bucket{le=\"+Inf\"} 4\n\
            tether_sidecar_runs_live 0\n";
        let histogram = Histogram::parse(text, "tether_sidecar_park_duration_seconds").unwrap();
        assert_eq!(histogram.count(), 4.0);
        assert!((histogram.mean().unwrap() - 0.000225).abs() < 1e-12);
        assert_eq!(histogram.quantile_bound(0.5), Some(0.0002));
        assert_eq!(histogram.quantile_bound(0.99), Some(f64::INFINITY));
        assert_eq!(gauge(text, "tether_sidecar_runs_live").unwrap(), 0.0);
        assert!(Histogram::parse(text, "tether_sidecar_other").is_err());
    }
}
