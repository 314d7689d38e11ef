//! Every Prometheus metric of the sidecar, defined here and nowhere else.
//!
//! Counters and histograms move when something happens, through the small
//! methods below; gauges are read from the sidecar's own counts at scrape
//! time ([`Gauges`]), so they can never drift from what they report. The
//! label values are bounded: run statuses, the failure codes of
//! `tether-codes` (a tool's own failure code is `tool_error`), and the
//! reasons a run is refused. `docs/operating.md` lists every metric.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::time::Duration;
use tether_codes::Code;
use tether_guest::CallResult;
use tether_proto::pb;

/// The prefix of every metric name.
const PREFIX: &str = "tether_sidecar";

/// The `Content-Type` of [`Metrics::encode`]'s output: the Prometheus text
/// format, version 0.0.4.
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// The counts read at scrape time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Gauges {
    /// Execution slots.
    pub(crate) slots_total: usize,
    /// Execution slots held by runs now.
    pub(crate) slots_in_use: usize,
    /// Runs admitted and not yet ended.
    pub(crate) runs_live: usize,
    /// Runs waiting on tool results.
    pub(crate) runs_waiting_on_tools: usize,
    /// Runs queued for their first execution slot.
    pub(crate) runs_queued: usize,
    /// Bytes of `Start` messages held for runs.
    pub(crate) start_bytes: u64,
    /// Run streams that have not delivered their `Start` yet.
    pub(crate) streams_awaiting_start: usize,
    /// Guest memory held by live runs, in bytes.
    pub(crate) guest_memory_bytes: u64,
    /// Whether the sidecar admits runs.
    pub(crate) ready: bool,
    /// Whether the sidecar is draining (or has stopped).
    pub(crate) draining: bool,
}

/// The sidecar's metrics and the registry that encodes them.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    runs: Family<StatusLabel, Counter>,
    runs_refused: Family<ReasonLabel, Counter>,
    calls: Family<OutcomeLabel, Counter>,
    cap_refusals: Family<CodeLabel, Counter>,
    run_duration: Histogram,
    call_round_trip: Histogram,
    pool_releases: Counter,
    runs_resumed: Counter,
    parked_state_bytes: Histogram,
    park_duration: Histogram,
    slots_total: Gauge,
    slots_in_use: Gauge,
    runs_live: Gauge,
    runs_waiting_on_tools: Gauge,
    runs_queued: Gauge,
    start_bytes: Gauge,
    streams_awaiting_start: Gauge,
    guest_memory_bytes: Gauge,
    ready: Gauge,
    draining: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric at zero, registered under `tether_sidecar_`.
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let runs = Family::<StatusLabel, Counter>::default();
        registry.register(
            "runs",
            "Runs ended, by final status (`backend_gone`: the backend left before `Finished`; `stream_stalled`: it read none of the stream for `--stall-timeout-seconds`)",
            runs.clone(),
        );
        let runs_refused = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "runs_refused",
            "Runs refused before they began, by reason (draining, loading, queue_full, start_bytes, no_start, invalid, internal, unauthenticated)",
            runs_refused.clone(),
        );
        let calls = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "calls",
            "Tool calls by outcome: ok, a tether failure code, or tool_error (the tool's own failure)",
            calls.clone(),
        );
        let cap_refusals = Family::<CodeLabel, Counter>::default();
        registry.register(
            "cap_refusals",
            "Tool calls refused because a cap was reached, by failure code (sidecar's and backend's caps)",
            cap_refusals.clone(),
        );
        // Every cap at zero, so that a fresh scrape has the family and a
        // `rate()` over it starts from 0 rather than from nothing.
        for code in Code::ALL.into_iter().filter(|code| code.is_cap()) {
            drop(cap_refusals.get_or_create(&CodeLabel { code: code.as_str() }));
        }
        // 1 ms .. ~1.1 h: a trivial run takes milliseconds, a turn's deadline is minutes.
        let run_duration = Histogram::new(exponential_buckets(0.001, 2.0, 23));
        registry.register(
            "run_duration_seconds",
            "Wall time of a run, from admission to its end",
            run_duration.clone(),
        );
        // 100 µs .. ~14 min: a call the backend answers at once, up to a long approval wait.
        let call_round_trip = Histogram::new(exponential_buckets(0.0001, 2.0, 24));
        registry.register(
            "call_round_trip_seconds",
            "Time from a `ToolCall` sent to its `ToolResult` received (checks, approval and the tool itself)",
            call_round_trip.clone(),
        );
        let pool_releases = Counter::default();
        registry.register(
            "pool_releases",
            "Times the sidecar, idle for `--idle-release-seconds`, gave its instance pool's memory back to the kernel",
            pool_releases.clone(),
        );
        let runs_resumed = Counter::default();
        registry.register(
            "runs_resumed",
            "Runs resumed from a parked state (`Start.resume`); a parked run counts in `runs_total{status=\"parked\"}`",
            runs_resumed.clone(),
        );
        // 256 B .. 1 MiB: a Python run parks in a few kilobytes.
        let parked_state_bytes = Histogram::new(exponential_buckets(256.0, 2.0, 13));
        registry.register(
            "parked_state_bytes",
            "Bytes of each sealed parked state handed to a backend (`Parked.state`)",
            parked_state_bytes.clone(),
        );
        // 10 µs .. ~80 ms.
        let park_duration = Histogram::new(exponential_buckets(0.00001, 2.0, 14));
        registry.register(
            "park_duration_seconds",
            "Time from a run's decision to park to its sealed state queued for the backend (the guest writing its state included)",
            park_duration.clone(),
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let gauge = Gauge::default();
            registry.register(name, help, gauge.clone());
            gauge
        };
        let slots_total = gauge(&mut registry, "slots", "Execution slots (runs that may execute guest code at once)");
        let slots_in_use = gauge(&mut registry, "slots_in_use", "Execution slots held by runs now");
        let runs_live = gauge(&mut registry, "runs_live", "Runs admitted and not yet ended");
        let runs_waiting_on_tools =
            gauge(&mut registry, "runs_waiting_on_tools", "Runs waiting on tool results (holding no slot)");
        let runs_queued = gauge(&mut registry, "runs_queued", "Runs queued for their first execution slot");
        let start_bytes = gauge(
            &mut registry,
            "start_bytes",
            "Bytes of `Start` messages held for runs (twice a run's `Start` until it first executes); capped by `--max-start-mib`",
        );
        let streams_awaiting_start = gauge(
            &mut registry,
            "streams_awaiting_start",
            "Run streams open that have not delivered their `Start` yet (each held for `--start-timeout-seconds` at most)",
        );
        let guest_memory_bytes =
            gauge(&mut registry, "guest_memory_bytes", "Guest linear memory held by live runs, in bytes");
        let ready = gauge(&mut registry, "ready", "1 while the sidecar admits runs (readiness SERVING), else 0");
        let draining = gauge(&mut registry, "draining", "1 once the sidecar is draining for shutdown, else 0");
        Metrics {
            registry,
            runs,
            runs_refused,
            calls,
            cap_refusals,
            run_duration,
            call_round_trip,
            pool_releases,
            runs_resumed,
            parked_state_bytes,
            park_duration,
            slots_total,
            slots_in_use,
            runs_live,
            runs_waiting_on_tools,
            runs_queued,
            start_bytes,
            streams_awaiting_start,
            guest_memory_bytes,
            ready,
            draining,
        }
    }

    /// A run ended with `status` (`None`: the backend left before
    /// `Finished`) after `took`.
    pub(crate) fn run_ended(&self, status: Option<pb::RunStatus>, took: Duration) {
        let status = match status {
            None => "backend_gone",
            Some(pb::RunStatus::Ok) => "ok",
            Some(pb::RunStatus::ScriptError) => "script_error",
            Some(pb::RunStatus::LimitExceeded) => "limit_exceeded",
            Some(pb::RunStatus::Cancelled) => "cancelled",
            Some(pb::RunStatus::Internal) => "internal",
            Some(pb::RunStatus::ProtocolError) => "protocol_error",
            Some(pb::RunStatus::ResumeRefused) => "resume_refused",
            Some(pb::RunStatus::Unspecified) => "unspecified",
        };
        self.runs.get_or_create(&StatusLabel { status }).inc();
        self.run_duration.observe(took.as_secs_f64());
    }

    /// A run ended because its stream took none of its messages for the
    /// stall timeout, after `took` (counted as `runs_total{status="stream_stalled"}`).
    pub(crate) fn run_stalled(&self, took: Duration) {
        self.runs.get_or_create(&StatusLabel { status: "stream_stalled" }).inc();
        self.run_duration.observe(took.as_secs_f64());
    }

    /// A run was refused before it began, for `reason` (a fixed name, see
    /// `RejectRun::metric_reason`).
    pub(crate) fn run_refused(&self, reason: &'static str) {
        self.runs_refused.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// A call of a script got `result`; `round_trip` is how long the backend
    /// took to answer it (`None` for a call the sidecar refused itself).
    pub(crate) fn call_ended(&self, result: &CallResult, round_trip: Option<Duration>) {
        let outcome = match result {
            CallResult::Ok(_) => "ok",
            CallResult::Err(failure) => match Code::parse(&failure.code) {
                Some(code) => {
                    if code.is_cap() {
                        self.cap_refusals.get_or_create(&CodeLabel { code: code.as_str() }).inc();
                    }
                    code.as_str()
                }
                // A tool that ran and reported its own failure keeps its own
                // code, which is not a label value this sidecar can bound.
                None => "tool_error",
            },
        };
        self.calls.get_or_create(&OutcomeLabel { outcome }).inc();
        if let Some(round_trip) = round_trip {
            self.call_round_trip.observe(round_trip.as_secs_f64());
        }
    }

    /// A run parked after `took` of live time, with a sealed state of
    /// `bytes`; `park` is how long parking took.
    pub(crate) fn run_parked(&self, took: Duration, bytes: usize, park: Duration) {
        self.runs.get_or_create(&StatusLabel { status: "parked" }).inc();
        self.run_duration.observe(took.as_secs_f64());
        self.parked_state_bytes.observe(bytes as f64);
        self.park_duration.observe(park.as_secs_f64());
    }

    /// A run resumed from its parked state.
    pub(crate) fn run_resumed(&self) {
        self.runs_resumed.inc();
    }

    /// The idle sidecar gave its instance pool back (see `idle.rs`).
    pub(crate) fn pool_released(&self) {
        self.pool_releases.inc();
    }

    /// Every metric in the Prometheus text format, with the gauges set from
    /// `gauges`.
    pub(crate) fn encode(&self, gauges: Gauges) -> String {
        let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.slots_total.set(as_i64(gauges.slots_total as u64));
        self.slots_in_use.set(as_i64(gauges.slots_in_use as u64));
        self.runs_live.set(as_i64(gauges.runs_live as u64));
        self.runs_waiting_on_tools.set(as_i64(gauges.runs_waiting_on_tools as u64));
        self.runs_queued.set(as_i64(gauges.runs_queued as u64));
        self.start_bytes.set(as_i64(gauges.start_bytes));
        self.streams_awaiting_start.set(as_i64(gauges.streams_awaiting_start as u64));
        self.guest_memory_bytes.set(as_i64(gauges.guest_memory_bytes));
        self.ready.set(i64::from(gauges.ready));
        self.draining.set(i64::from(gauges.draining));
        let mut text = String::new();
        // Writing to a `String` cannot fail; an encoder error would be a bug
        // in prometheus-client, and a partial page is still worth serving.
        if let Err(error) = prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry) {
            tracing::error!(%error, "encoding the metrics failed");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_guest::Failure;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|line| line.starts_with(prefix))
    }

    #[test]
    fn outcomes_are_bounded_and_caps_are_counted_apart() {
        let metrics = Metrics::new();
        let failure = |code: &str| CallResult::Err(Failure { code: code.into(), message: String::new() });
        metrics.call_ended(&CallResult::Ok(serde_json::json!(1)), Some(Duration::from_millis(3)));
        metrics.call_ended(&failure("script_call_cap_reached"), None);
        metrics.call_ended(&failure("policy_denied"), Some(Duration::from_millis(1)));
        metrics.call_ended(&failure("my_tool_said_no"), Some(Duration::from_millis(1)));
        let text = metrics.encode(Gauges { slots_total: 4, draining: true, ..Gauges::default() });
        assert_eq!(
            line(&text, "tether_sidecar_calls_total{outcome=\"ok\"}"),
            Some("tether_sidecar_calls_total{outcome=\"ok\"} 1")
        );
        assert!(line(&text, "tether_sidecar_calls_total{outcome=\"tool_error\"} 1").is_some(), "{text}");
        assert!(line(&text, "tether_sidecar_calls_total{outcome=\"my_tool_said_no\"}").is_none(), "{text}");
        assert!(
            line(&text, "tether_sidecar_cap_refusals_total{code=\"script_call_cap_reached\"} 1").is_some(),
            "{text}"
        );
        assert!(line(&text, "tether_sidecar_cap_refusals_total{code=\"policy_denied\"}").is_none(), "{text}");
        assert!(
            line(&text, "tether_sidecar_cap_refusals_total{code=\"tool_call_cap_reached\"} 0").is_some(),
            "every cap is there from the start: {text}"
        );
        assert!(line(&text, "tether_sidecar_call_round_trip_seconds_count 3").is_some(), "{text}");
        assert!(line(&text, "tether_sidecar_slots 4").is_some(), "{text}");
        assert!(line(&text, "tether_sidecar_draining 1").is_some(), "{text}");
    }
}
