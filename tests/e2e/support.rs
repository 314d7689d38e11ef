//! Shared helpers: sidecars, clients, and a call handler that records calls.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tether_backend::{
    CallHandler, ClientError, RefusedCall, RunOutcome, RunRequest, ScriptCall, SidecarClient, ToolDef, ToolOutcome, pb,
};
use tether_cli::demo::DemoWorld;
use tether_cli::embedded::EmbeddedSidecar;
use tether_sidecar::SidecarConfig;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The runtime name the example Rust guest is registered under.
pub const RUST_GUEST: &str = "rust-example";

/// A config for tests: compiled guests cached under the target dir, a small
/// instance pool, the example Rust guest registered, and runs placed as the
/// `tether-sidecar` binary places them by default (driven by their response
/// streams; the opt-in worker threads have their tests in `workers.rs`).
pub fn test_config() -> SidecarConfig {
    SidecarConfig {
        worker_threads: 0,
        cache_dir: Some(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tether-cache")),
        max_waiting_runs: 16,
        extra_runtimes: vec![(RUST_GUEST.to_owned(), tether_guests::EXAMPLE_RUST.to_vec())],
        ..SidecarConfig::default()
    }
}

/// A sidecar on loopback with [`test_config`] and a client connected to it.
pub async fn sidecar() -> (EmbeddedSidecar, SidecarClient) {
    sidecar_with(test_config()).await
}

/// A sidecar on loopback with `config` and a client connected to it.
pub async fn sidecar_with(config: SidecarConfig) -> (EmbeddedSidecar, SidecarClient) {
    init_tracing();
    let sidecar = EmbeddedSidecar::start(config).await.expect("the sidecar starts");
    let client = SidecarClient::connect(&sidecar.url()).await.expect("the client connects");
    (sidecar, client)
}

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .try_init();
}

/// The demo tools plus the test tools [`Recorder`] answers: `hold` (waits
/// for [`Recorder::release`]), `ping`, `echo` (returns its arguments) and
/// `deep` (returns a deeply nested list).
pub fn test_tools() -> Vec<ToolDef> {
    let test_tool =
        |name: &str, description: &str| ToolDef::new(name, description, serde_json::json!({"type": "object"}));
    let mut tools = DemoWorld::tools();
    tools.push(test_tool("hold", "Waits until the test releases it."));
    tools.push(test_tool("ping", "Answers at once."));
    tools.push(test_tool("echo", "Returns its arguments."));
    tools.push(test_tool("deep", "Returns a list nested `depth` levels deep."));
    tools
}

/// A Python run of `source` over the demo and test tools and the demo input.
pub fn demo_request(source: &str) -> RunRequest {
    RunRequest {
        turn_id: "turn-1".into(),
        parent_call_id: "call_1".into(),
        input: DemoWorld::input(),
        tools: test_tools(),
        ..RunRequest::python("run-1", source)
    }
}

/// Runs calls against a [`DemoWorld`] and records them. Calls to `hold` wait
/// until [`Recorder::release`]; `Recorder::entered` fires when one arrives.
#[derive(Debug, Default)]
pub struct Recorder {
    pub world: DemoWorld,
    pub calls: Mutex<Vec<ScriptCall>>,
    pub entered: Notify,
    released: Notify,
    /// Calls the sidecar refused by itself, as reported to the backend.
    pub refused: Mutex<Vec<RefusedCall>>,
    pub outputs: Mutex<Vec<String>>,
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Recorder::default())
    }

    /// The names of the calls received, in order.
    pub fn names(&self) -> Vec<String> {
        self.calls.lock().unwrap().iter().map(|c| c.name.clone()).collect()
    }

    /// Lets every held call (now and later) answer.
    pub fn release(&self) {
        self.released.notify_waiters();
        self.released.notify_one();
    }
}

#[async_trait::async_trait]
impl CallHandler for Recorder {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        self.calls.lock().unwrap().push(call.clone());
        match call.name.as_str() {
            "hold" => {
                self.entered.notify_one();
                self.released.notified().await;
                ToolOutcome::Ok(serde_json::json!("released"))
            }
            "ping" => {
                self.entered.notify_one();
                ToolOutcome::Ok(serde_json::json!("pong"))
            }
            "echo" => ToolOutcome::Ok(call.args),
            "deep" => {
                let depth = call.args["depth"].as_u64().unwrap_or(1);
                ToolOutcome::Ok((0..depth).fold(serde_json::json!(0), |inner, _| serde_json::json!([inner])))
            }
            name => self.world.execute(name, &call.args),
        }
    }

    fn output(&self, _stream: pb::OutputStream, data: &[u8]) {
        self.outputs.lock().unwrap().push(String::from_utf8_lossy(data).into_owned());
    }

    async fn refused(&self, call: RefusedCall) {
        self.refused.lock().unwrap().push(call);
    }
}

/// Runs `source` over the demo tools with a fresh [`Recorder`].
pub async fn run_demo(client: &SidecarClient, source: &str) -> (RunOutcome, Arc<Recorder>) {
    let recorder = Recorder::new();
    let outcome = client.run(demo_request(source), recorder.as_ref()).await.expect("the run completes");
    (outcome, recorder)
}

/// A run on a task of its own, and the [`Recorder`] answering its calls.
pub type SpawnedRun = (JoinHandle<Result<RunOutcome, ClientError>>, Arc<Recorder>);

/// Starts `request` on a task of its own with a fresh [`Recorder`], and
/// returns once the script is in its first `hold` call (where it stays until
/// [`Recorder::release`]) or has made its first `ping` call; panics after 60 s.
/// No sleep decides anything: `Recorder::entered` keeps its notice for a
/// waiter that comes late.
pub async fn spawn_held(client: &SidecarClient, request: RunRequest) -> SpawnedRun {
    let recorder = Recorder::new();
    let run = {
        let (client, recorder) = (client.clone(), recorder.clone());
        tokio::spawn(async move { client.run(request, recorder.as_ref()).await })
    };
    tokio::time::timeout(Duration::from_secs(60), recorder.entered.notified())
        .await
        .expect("the script reaches its first `hold` or `ping` call");
    (run, recorder)
}

/// Waits until `condition` holds, polling; panics after `limit`.
pub async fn eventually(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Asserts a healthy sidecar: a trivial script runs to completion.
pub async fn assert_still_works(client: &SidecarClient) {
    let (outcome, _) = run_demo(client, "1 + 1").await;
    assert_eq!(outcome.result, Some(serde_json::json!(2)), "a trivial run after the failure: {outcome:?}");
}
