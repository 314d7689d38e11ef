//! Logs and traces, end to end, with the real parts: a real `tether-sidecar`
//! process exporting over OTLP/gRPC, a backend `Turn` in this process
//! exporting through the public setup (`tether_backend::telemetry`), and a
//! real OTLP collector — a tonic `TraceService` server on loopback — that
//! receives both. One script's trace must come out as one tree:
//! the model's `run_script` call → the sidecar's run → the sidecar's call →
//! the backend's execution of that call.
//!
//! Also: `--log-format json` writes one JSON object per stderr line, with the
//! run's span fields on every line logged inside the run.

use super::support::{PATIENCE, channel, check, shared_cache};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tether_backend::telemetry::TelemetryConfig;
use tether_backend::turn::{CallOrigin, CallRequest, ScriptTool, ToolError, ToolOutput, ToolSpec, Turn, executor_fn};
use tether_backend::{CallHandler, RunRequest, ScriptCall, SidecarClient, ToolOutcome};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

// ---------------------------------------------------------------------------
// A real OTLP collector
// ---------------------------------------------------------------------------

/// One exported span and the service that sent it.
#[derive(Debug, Clone)]
struct Exported {
    service: String,
    span: Span,
}

impl Exported {
    fn attr(&self, key: &str) -> Option<Value> {
        self.span.attributes.iter().find(|kv| kv.key == key).and_then(value_of)
    }

    fn str_attr(&self, key: &str) -> Option<String> {
        self.attr(key).and_then(|v| v.as_str().map(str::to_owned))
    }
}

fn value_of(kv: &KeyValue) -> Option<Value> {
    Some(match kv.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => json!(s),
        any_value::Value::BoolValue(b) => json!(b),
        any_value::Value::IntValue(i) => json!(i),
        any_value::Value::DoubleValue(d) => json!(d),
        other => json!(format!("{other:?}")),
    })
}

/// `opentelemetry.proto.collector.trace.v1.TraceService`, keeping every span.
#[derive(Debug, Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Exported>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(value_of)
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
                spans.push(Exported { service: service.clone(), span });
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

/// Serves a collector on a fresh loopback port; returns it and its URL.
async fn collector() -> (Collector, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let collector = Collector::default();
    let service = TraceServiceServer::new(collector.clone());
    tokio::spawn(
        tonic::transport::Server::builder().add_service(service).serve_with_incoming(TcpListenerStream::new(listener)),
    );
    (collector, url)
}

// ---------------------------------------------------------------------------
// A real sidecar process
// ---------------------------------------------------------------------------

/// A `tether-sidecar` process, killed when dropped unless stopped.
struct SidecarProcess {
    child: Option<Child>,
    url: String,
    stderr: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl SidecarProcess {
    /// Starts the sidecar with `args` and waits until it announces its TCP
    /// listener and reports ready (the guest compiled or loaded from the
    /// cache). Its stderr is kept, line by line.
    async fn start(args: &[&str], rust_log: &str) -> SidecarProcess {
        let cache = shared_cache();
        let mut child = Command::new(env!("CARGO_BIN_EXE_tether-sidecar"))
            .args(["--listen", "127.0.0.1:0", "--insecure-loopback", "--cache-dir"])
            .arg(&cache)
            .args(args)
            .env("RUST_LOG", rust_log)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("TETHER_LOG_FORMAT")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the sidecar starts");
        let stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || BufReader::new(stderr).lines().map_while(Result::ok).collect());
        let stdout = child.stdout.take().unwrap();
        // Read on a blocking thread: this test's runtime serves the collector meanwhile.
        let url = tokio::task::spawn_blocking(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .find_map(|line| line.strip_prefix("listening on ").map(|address| format!("http://{address}")))
        })
        .await
        .unwrap();
        let mut process = SidecarProcess { child: Some(child), url: String::new(), stderr: Some(stderr) };
        match url {
            Some(url) => process.url = url,
            None => {
                let stderr = process.stop().await;
                panic!("the sidecar exited without listening:\n{}", stderr.join("\n"));
            }
        }
        process.wait_until_ready().await;
        process
    }

    /// Polls readiness (`tether.v1.Sidecar` on gRPC health) until SERVING:
    /// the listeners come up before the guest is loaded.
    async fn wait_until_ready(&self) {
        use tonic_health::pb::{health_check_response::ServingStatus, health_client::HealthClient};
        let address = self.url.strip_prefix("http://").unwrap_or(&self.url);
        let mut health = HealthClient::new(channel(address).await);
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while check(&mut health, "tether.v1.Sidecar").await != ServingStatus::Serving {
            assert!(tokio::time::Instant::now() < deadline, "the sidecar never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the sidecar as an operator does (SIGINT), waits for it to exit
    /// — it sends its last spans first — and returns its stderr lines.
    async fn stop(&mut self) -> Vec<String> {
        let mut child = self.child.take().expect("the sidecar runs");
        let interrupted = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
        assert!(interrupted.success(), "kill -INT failed");
        // Waited on a blocking thread: the collector must go on serving the sidecar's last export.
        let status = tokio::time::timeout(Duration::from_secs(60), tokio::task::spawn_blocking(move || child.wait()))
            .await
            .expect("the sidecar exits within a minute of SIGINT")
            .unwrap()
            .unwrap();
        let stderr = self.stderr.take().unwrap().join().unwrap();
        assert!(status.success(), "the sidecar exited with {status}:\n{}", stderr.join("\n"));
        stderr
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ---------------------------------------------------------------------------
// The trace
// ---------------------------------------------------------------------------

/// Two calls in one batch — one the tool answers, one it fails — then one
/// the sidecar refuses by itself (a tool name over 256 bytes).
const SCRIPT: &str = r#"
import asyncio
found, missing = await asyncio.gather(call_async("lookup", id="c1"), call_async("lookup", id="nobody"))
refused = call("x" * 300)
[found["ok"], missing["error"]["code"], refused["error"]["code"]]
"#;

fn lookup_tool() -> (ToolSpec, Arc<dyn tether_backend::turn::ToolExecutor>) {
    let schema = json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]});
    let spec = ToolSpec::new("lookup", "Looks a customer up.", schema).read_only();
    let executor = executor_fn(|_, args: Value| async move {
        match args["id"].as_str() {
            Some("c1") => Ok(ToolOutput::new(json!({"id": "c1", "name": "Acme"}))),
            _ => Err(ToolError::new("not_found", "no such customer")),
        }
    });
    (spec, executor)
}

#[tokio::test]
async fn one_trace_runs_from_the_run_script_call_through_the_sidecar_to_each_nested_call() {
    let (collector, collector_url) = collector().await;
    let mut sidecar = SidecarProcess::start(&["--otlp-endpoint", &collector_url], "warn").await;

    // The backend: this thread's subscriber, exporting to the same collector.
    let (subscriber, telemetry) = TelemetryConfig::new("tether-backend")
        .default_log_filter("warn")
        .otlp_endpoint(Some(collector_url.clone()))
        .build()
        .expect("the backend's telemetry is set up");
    assert!(telemetry.is_exporting());
    let subscriber_guard = tracing::subscriber::set_default(subscriber);

    let client = SidecarClient::connect(&sidecar.url).await.unwrap();
    let (spec, executor) = lookup_tool();
    let turn = Turn::builder("turn-otel")
        .tool(spec, executor)
        .add_tool(ScriptTool::new(client).into_tool().unwrap())
        .build()
        .unwrap();
    let result =
        turn.execute(CallRequest::new("call_1", "run_script", json!({"code": SCRIPT})), CallOrigin::Model).await;
    assert_eq!(result.to_model_value()["value"]["result"], json!([true, "not_found", "tool_not_found"]), "{result:?}");

    telemetry.shutdown().await;
    drop(subscriber_guard);
    sidecar.stop().await;

    let spans = collector.spans.lock().unwrap().clone();
    let find = |service: &str, name: &str, call_id: &str| -> Exported {
        let found: Vec<&Exported> = spans
            .iter()
            .filter(|s| {
                s.service == service && s.span.name == name && s.str_attr("call_id").as_deref() == Some(call_id)
            })
            .collect();
        assert_eq!(found.len(), 1, "one `{name}` span of {service} for call `{call_id}`; all spans: {spans:#?}");
        found[0].clone()
    };

    // The model's call: the root.
    let run_script = find("tether-backend", "tool_call", "call_1");
    assert!(run_script.span.parent_span_id.is_empty(), "the model's call is the root: {run_script:?}");
    assert_eq!(run_script.str_attr("tool").as_deref(), Some("run_script"));
    assert_eq!(run_script.str_attr("origin").as_deref(), Some("model"));
    assert_eq!(run_script.str_attr("outcome").as_deref(), Some("ok"));
    let run_id = run_script.str_attr("run_id").expect("the run_script call names its run");

    // The sidecar's run: a child of the model's call, in another process.
    let runs: Vec<&Exported> = spans.iter().filter(|s| s.service == "tether-sidecar" && s.span.name == "run").collect();
    assert_eq!(runs.len(), 1, "{spans:#?}");
    let run = runs[0];
    assert_eq!(run.span.parent_span_id, run_script.span.span_id, "the sidecar's run is a child of the run_script call");
    assert_eq!(run.str_attr("run_id").as_deref(), Some(run_id.as_str()));
    assert_eq!(run.str_attr("turn_id").as_deref(), Some("turn-otel"));
    assert_eq!(run.str_attr("outcome").as_deref(), Some("completed"));
    assert_eq!(run.attr("calls"), Some(json!(3)));

    // Each call: the sidecar's span below the run, the backend's execution below that.
    for (call_id, sidecar_outcome, backend_outcome, code) in
        [("call_1/1", "ok", "ok", None), ("call_1/2", "failed", "error", Some("not_found"))]
    {
        let sent = find("tether-sidecar", "call", call_id);
        assert_eq!(sent.span.parent_span_id, run.span.span_id, "sidecar call {call_id} is a child of the run");
        assert_eq!(sent.str_attr("tool").as_deref(), Some("lookup"));
        assert_eq!(sent.attr("batch"), Some(json!(1)));
        assert_eq!(sent.str_attr("outcome").as_deref(), Some(sidecar_outcome), "{sent:?}");
        assert_eq!(sent.str_attr("code").as_deref(), code);

        let executed = find("tether-backend", "tool_call", call_id);
        assert_eq!(
            executed.span.parent_span_id, sent.span.span_id,
            "the backend's execution of {call_id} is a child of the sidecar's call span"
        );
        assert_eq!(executed.str_attr("run_id").as_deref(), Some(run_id.as_str()));
        assert_eq!(executed.str_attr("turn_id").as_deref(), Some("turn-otel"));
        assert_eq!(executed.str_attr("tool").as_deref(), Some("lookup"));
        assert_eq!(executed.str_attr("origin").as_deref(), Some("script"));
        assert_eq!(executed.attr("depth"), Some(json!(1)));
        assert_eq!(executed.str_attr("outcome").as_deref(), Some(backend_outcome), "{executed:?}");
        assert_eq!(executed.str_attr("code").as_deref(), code);
        // Children end before their parents: the tree is in order.
        assert!(sent.span.start_time_unix_nano >= run.span.start_time_unix_nano);
        assert!(executed.span.end_time_unix_nano <= sent.span.end_time_unix_nano);
    }

    // The call the sidecar refused: its span, and the backend's record of it below.
    let refused = find("tether-sidecar", "call", "call_1/3");
    assert_eq!(refused.span.parent_span_id, run.span.span_id);
    assert_eq!(refused.attr("batch"), Some(json!(2)));
    assert_eq!(refused.str_attr("outcome").as_deref(), Some("refused"));
    assert_eq!(refused.str_attr("code").as_deref(), Some("tool_not_found"));
    let recorded = find("tether-backend", "tool_call", "call_1/3");
    assert_eq!(recorded.span.parent_span_id, refused.span.span_id, "the backend's record is a child of the refusal");
    assert_eq!(recorded.str_attr("tool").map(|t| t.len()), Some(256), "the name as the sidecar reported it, cut");
    assert_eq!(recorded.str_attr("outcome").as_deref(), Some("failed"));
    assert_eq!(recorded.str_attr("code").as_deref(), Some("tool_not_found"));
    assert_eq!(recorded.str_attr("step").as_deref(), Some("sidecar"));

    let traces: std::collections::BTreeSet<&Vec<u8>> = spans.iter().map(|s| &s.span.trace_id).collect();
    assert_eq!(traces.len(), 1, "one trace for the whole run: {spans:#?}");
}

// ---------------------------------------------------------------------------
// JSON logs
// ---------------------------------------------------------------------------

/// Answers every call with `{"pong": true}`.
struct Pong;

#[tonic::async_trait]
impl CallHandler for Pong {
    async fn call(&self, _call: ScriptCall) -> ToolOutcome {
        ToolOutcome::Ok(json!({"pong": true}))
    }
}

#[tokio::test]
async fn json_logs_carry_the_run_and_call_span_fields_on_every_line() {
    let mut sidecar = SidecarProcess::start(&["--log-format", "json"], "info,tether_sidecar=debug").await;
    let client = SidecarClient::connect(&sidecar.url).await.unwrap();
    let request = RunRequest {
        turn_id: "turn-json".into(),
        parent_call_id: "call_9".into(),
        ..RunRequest::python("run-json", "ping()\n'done'")
    };
    let request = RunRequest {
        tools: vec![tether_backend::ToolDef::new("ping", "Answers at once.", json!({"type": "object"}))],
        ..request
    };
    let outcome = client.run(request, &Pong).await.unwrap();
    assert!(outcome.is_ok(), "{outcome:?}");
    let lines = sidecar.stop().await;

    let logged: Vec<Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("a stderr line is not JSON ({e}): {line}")))
        .collect();
    assert!(logged.iter().all(|l| l["timestamp"].is_string() && l["level"].is_string()), "{logged:#?}");

    // The run's end, logged inside the run's span, with its fields.
    let ended = logged
        .iter()
        .find(|l| l["fields"]["message"] == "run ended")
        .unwrap_or_else(|| panic!("no `run ended` line: {logged:#?}"));
    assert_eq!(ended["span"]["name"], "run", "{ended}");
    assert_eq!(ended["span"]["run_id"], "run-json");
    assert_eq!(ended["span"]["turn_id"], "turn-json");
    assert_eq!(ended["span"]["language"], "python");
    assert_eq!(ended["fields"]["end"], "completed");

    // The call, logged inside the call's span inside the run's.
    let sent = logged
        .iter()
        .find(|l| l["fields"]["message"] == "tool call sent")
        .unwrap_or_else(|| panic!("no `tool call sent` line: {logged:#?}"));
    assert_eq!(sent["span"]["name"], "call", "{sent}");
    assert_eq!(sent["span"]["call_id"], "call_9/1");
    assert_eq!(sent["span"]["tool"], "ping");
    let names: Vec<&Value> = sent["spans"].as_array().unwrap().iter().map(|s| &s["name"]).collect();
    assert_eq!(names, [&json!("run"), &json!("call")], "the call's span is inside the run's: {sent}");
    assert_eq!(sent["spans"][0]["run_id"], "run-json");
}
