//! `GET /metrics`: scraped over HTTP and parsed as the Prometheus text format,
//! after runs that end ok, fail, and pass their call cap.

use crate::support::{Run, SidecarProcess, shared_cache};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use nix::sys::signal::Signal;
use prometheus_parse::{Scrape, Value};
use tether_proto::pb::{self, sidecar_message};
use tonic_health::pb::health_check_response::ServingStatus;

/// Fetches `url` with a real HTTP client; the status, content type and body.
pub async fn get(url: &str) -> (u16, String, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<bytes::Bytes>>();
    let response = client.get(url.parse().unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, content_type, String::from_utf8(body.to_vec()).unwrap())
}

/// The metrics, parsed.
pub struct Metrics(Scrape);

impl Metrics {
    pub async fn scrape(url: &str) -> Metrics {
        let (status, content_type, body) = get(url).await;
        assert_eq!(status, 200, "{body}");
        assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
        Metrics(Scrape::parse(body.lines().map(|line| Ok(line.to_owned()))).unwrap())
    }

    /// The value of `name` with `labels` (a histogram's: its count); 0 when absent.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found = self.0.samples.iter().find(|sample| {
            sample.metric == name
                && sample.labels.len() == labels.len()
                && labels.iter().all(|(key, value)| sample.labels.get(key) == Some(value))
        });
        match found.map(|sample| &sample.value) {
            None => 0.0,
            Some(Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v)) => *v,
            Some(Value::Histogram(buckets)) => buckets.iter().map(|b| b.count).fold(0.0, f64::max),
            Some(other) => panic!("`{name}` is {other:?}"),
        }
    }

    fn has(&self, name: &str) -> bool {
        self.0.samples.iter().any(|sample| sample.metric == name)
    }
}

#[tokio::test]
async fn counters_gauges_and_histograms_follow_the_runs() {
    let mut sidecar = SidecarProcess::start(
        &shared_cache(),
        &["--metrics-listen", "127.0.0.1:0", "--slots", "3", "--max-calls", "2"],
    );
    let url = sidecar.metrics_url.clone().unwrap();
    sidecar.wait_for_health("", ServingStatus::Serving).await;
    let mut client = sidecar.client().await;

    let before = Metrics::scrape(&url).await;
    for gauge in ["tether_sidecar_slots_in_use", "tether_sidecar_runs_live", "tether_sidecar_guest_memory_bytes"] {
        assert!(before.has(gauge), "`{gauge}` is reported before any run");
        assert_eq!(before.value(gauge, &[]), 0.0, "{gauge}");
    }
    assert_eq!(before.value("tether_sidecar_slots", &[]), 3.0);
    assert_eq!(before.value("tether_sidecar_ready", &[]), 1.0);
    assert_eq!(before.value("tether_sidecar_runs_total", &[("status", "ok")]), 0.0);

    // Ok: one call answered with a value, scraped while the run waits on it.
    let mut ok = Run::open(&mut client, "ok", "call('echo', x=1)['value']['x']").await.unwrap();
    let call = ok.tool_call().await;
    let waiting = Metrics::scrape(&url).await;
    assert_eq!(waiting.value("tether_sidecar_runs_waiting_on_tools", &[]), 1.0);
    assert_eq!(waiting.value("tether_sidecar_runs_live", &[]), 1.0);
    assert_eq!(waiting.value("tether_sidecar_slots_in_use", &[]), 0.0, "a waiting run holds no slot");
    assert!(waiting.value("tether_sidecar_guest_memory_bytes", &[]) > 0.0, "it keeps its memory");
    ok.answer(&call.id, serde_json::json!({"x": 1})).await;
    assert_eq!(ok.finished().await.status(), pb::RunStatus::Ok);

    // A failure: the backend refuses the call, then the script raises.
    let mut failing =
        Run::open(&mut client, "fails", "r = call('send')\nraise ValueError(r['error']['code'])").await.unwrap();
    let call = failing.tool_call().await;
    failing.fail(&call.id, "policy_denied").await;
    let finished = failing.finished().await;
    assert_eq!(finished.status(), pb::RunStatus::ScriptError, "{finished:?}");

    // A cap refusal: the third call passes `--max-calls 2`.
    let mut capped = Run::open(&mut client, "capped", "[call('echo', i=i)['ok'] for i in range(3)]").await.unwrap();
    let finished = loop {
        match capped.next().await {
            sidecar_message::Kind::ToolCall(call) => capped.answer(&call.id, serde_json::json!(1)).await,
            sidecar_message::Kind::CallRefused(refused) => {
                assert_eq!(refused.failure.unwrap().code, "script_call_cap_reached");
            }
            sidecar_message::Kind::Finished(finished) => break finished,
            sidecar_message::Kind::Output(_) => {}
            sidecar_message::Kind::Parked(_) => panic!("a run whose `Start` does not allow it never parks"),
        }
    };
    assert_eq!(finished.result_json, "[true,true,false]", "{finished:?}");

    let after = Metrics::scrape(&url).await;
    let count = |name: &str, label: (&str, &str)| after.value(name, &[label]);
    assert_eq!(count("tether_sidecar_runs_total", ("status", "ok")), 2.0);
    assert_eq!(count("tether_sidecar_runs_total", ("status", "script_error")), 1.0);
    assert_eq!(count("tether_sidecar_calls_total", ("outcome", "ok")), 3.0);
    assert_eq!(count("tether_sidecar_calls_total", ("outcome", "policy_denied")), 1.0);
    assert_eq!(count("tether_sidecar_calls_total", ("outcome", "script_call_cap_reached")), 1.0);
    assert_eq!(count("tether_sidecar_cap_refusals_total", ("code", "script_call_cap_reached")), 1.0);
    assert_eq!(count("tether_sidecar_cap_refusals_total", ("code", "policy_denied")), 0.0, "not a cap");
    assert_eq!(after.value("tether_sidecar_call_round_trip_seconds", &[]), 4.0, "every answered call, no refusal");
    assert_eq!(after.value("tether_sidecar_run_duration_seconds", &[]), 3.0);
    assert_eq!(after.value("tether_sidecar_runs_live", &[]), 0.0);
    assert_eq!(after.value("tether_sidecar_runs_waiting_on_tools", &[]), 0.0);
    assert_eq!(after.value("tether_sidecar_guest_memory_bytes", &[]), 0.0, "memory given back");
    assert_eq!(after.value("tether_sidecar_draining", &[]), 0.0);

    let (status, _, body) = get(&url.replace("/metrics", "/other")).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("/metrics"), "the 404 says where the metrics are: {body}");

    sidecar.signal(Signal::SIGTERM);
    assert_eq!(sidecar.exited().await.code(), Some(0));
}

#[tokio::test]
async fn a_drain_shows_in_the_metrics_with_the_runs_it_refused() {
    let sidecar =
        SidecarProcess::start(&shared_cache(), &["--metrics-listen", "127.0.0.1:0", "--drain-deadline-seconds", "600"]);
    let url = sidecar.metrics_url.clone().unwrap();
    sidecar.wait_for_health("", ServingStatus::Serving).await;
    let mut held = Run::open(&mut sidecar.client().await, "held", "call('hold')['ok']").await.unwrap();
    let call = held.tool_call().await;
    sidecar.signal(Signal::SIGTERM);
    sidecar.wait_for_health("", ServingStatus::NotServing).await;
    let refused = Run::open(&mut sidecar.client().await, "late", "1").await.err().expect("refused while draining");
    assert_eq!(refused.code(), tonic::Code::Unavailable);

    let draining = Metrics::scrape(&url).await;
    assert_eq!(draining.value("tether_sidecar_draining", &[]), 1.0);
    assert_eq!(draining.value("tether_sidecar_ready", &[]), 0.0);
    assert_eq!(draining.value("tether_sidecar_runs_refused_total", &[("reason", "draining")]), 1.0);
    assert_eq!(draining.value("tether_sidecar_runs_live", &[]), 1.0, "the run in flight goes on");
    held.answer(&call.id, serde_json::json!(null)).await;
    assert_eq!(held.finished().await.status(), pb::RunStatus::Ok);
}
