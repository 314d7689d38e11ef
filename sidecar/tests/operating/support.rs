//! A real sidecar process, and the raw gRPC it speaks.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;
use tether_proto::pb::{self, backend_message, sidecar_client::SidecarClient, sidecar_message};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// How long anything a test waits for may take on a loaded 2-core machine
/// (a cold compile of the Python guest included). Only a bound, never a
/// speed assertion.
pub const PATIENCE: Duration = Duration::from_secs(600);

/// The compile cache every test shares with the other sidecar tests, so the
/// Python guest is compiled once.
pub fn shared_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tether-cache")
}

/// A running `tether-sidecar`; killed when dropped. Its log (at `info`) is
/// printed if the test fails.
pub struct SidecarProcess {
    child: Child,
    /// Every run listener, as announced: `127.0.0.1:41234`, `unix:/path`.
    pub listeners: Vec<String>,
    /// The TCP run listener, e.g. `127.0.0.1:41234`.
    pub address: String,
    /// The health-only listener, when `--health-listen` was given.
    pub health_address: Option<String>,
    /// The metrics URL, when `--metrics-listen` was given.
    pub metrics_url: Option<String>,
    log: tempfile::NamedTempFile,
    /// Kept open, so a later line on stdout never meets a closed pipe.
    _stdout: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl SidecarProcess {
    /// Starts the sidecar on `127.0.0.1:0` (an insecure loopback) with
    /// `cache` and `args` (which may add `--socket`, `--health-listen`,
    /// `--metrics-listen`), and waits until it has announced its listeners.
    pub fn start(cache: &Path, args: &[&str]) -> SidecarProcess {
        let mut all = vec!["--listen", "127.0.0.1:0", "--insecure-loopback"];
        all.extend_from_slice(args);
        SidecarProcess::start_exactly(cache, &all)
    }

    /// Starts the sidecar with `cache` and exactly `args` (each `--listen`
    /// and `--socket` is a run listener to wait for), and waits until it has
    /// announced its listeners. `address` is the TCP run listener, or empty.
    pub fn start_exactly(cache: &Path, args: &[&str]) -> SidecarProcess {
        SidecarProcess::start_with(Some(cache), args)
    }

    /// As [`SidecarProcess::start_exactly`], with no `--cache-dir` when
    /// `cache` is `None` (the sidecar then picks its default).
    pub fn start_with(cache: Option<&Path>, args: &[&str]) -> SidecarProcess {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_tether-sidecar"));
        if let Some(cache) = cache {
            command.arg("--cache-dir").arg(cache);
        }
        let mut child = command
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("the sidecar starts");
        let stdout = child.stdout.take().unwrap();
        let run_listeners = args.iter().filter(|arg| **arg == "--listen" || **arg == "--socket").count();
        let wants_health = args.contains(&"--health-listen");
        let wants_metrics = args.contains(&"--metrics-listen");
        let mut lines = BufReader::new(stdout).lines();
        let (mut listeners, mut health_address, mut metrics_url) = (Vec::new(), None, None);
        while listeners.len() < run_listeners
            || (wants_health && health_address.is_none())
            || (wants_metrics && metrics_url.is_none())
        {
            let Some(line) = lines.next() else {
                let log = std::fs::read_to_string(log.path()).unwrap_or_default();
                panic!("the sidecar exited before announcing its listeners:\n{log}");
            };
            let line = line.unwrap();
            if let Some(found) = line.strip_prefix("listening on ") {
                listeners.push(found.to_owned());
            } else if let Some(found) = line.strip_prefix("health listening on ") {
                health_address = Some(found.to_owned());
            } else if let Some(found) = line.strip_prefix("metrics listening on ") {
                metrics_url = Some(found.to_owned());
            }
        }
        let address = listeners.iter().find(|listener| !listener.starts_with("unix:")).cloned().unwrap_or_default();
        SidecarProcess { child, listeners, address, health_address, metrics_url, log, _stdout: lines }
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    /// What the process logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits (without blocking the runtime) until the process exits.
    pub async fn exited(&mut self) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(tokio::time::Instant::now() < deadline, "the sidecar did not exit");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A `tether.v1` client on the run listener.
    pub async fn client(&self) -> SidecarClient<Channel> {
        SidecarClient::connect(format!("http://{}", self.address)).await.unwrap()
    }

    /// A health client on `address`.
    pub async fn health_client(address: &str) -> HealthClient<Channel> {
        HealthClient::new(channel(address).await)
    }

    /// Polls health service `service` on the run listener until it reports
    /// `wanted`.
    pub async fn wait_for_health(&self, service: &str, wanted: ServingStatus) {
        let mut health = SidecarProcess::health_client(&self.address).await;
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while check(&mut health, service).await != wanted {
            assert!(tokio::time::Instant::now() < deadline, "health of {service:?} never became {wanted:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.log.path()).unwrap_or_default();
            eprintln!("--- the sidecar's log ---\n{log}");
        }
    }
}

/// A channel to `address`.
pub async fn channel(address: &str) -> Channel {
    Channel::from_shared(format!("http://{address}")).unwrap().connect().await.unwrap()
}

/// One health check of `service`.
pub async fn check(health: &mut HealthClient<Channel>, service: &str) -> ServingStatus {
    let response = health.check(HealthCheckRequest { service: service.to_owned() }).await.unwrap();
    ServingStatus::try_from(response.into_inner().status).unwrap()
}

/// A Python run of `source`.
pub fn start(run_id: &str, source: &str) -> pb::BackendMessage {
    pb::BackendMessage {
        kind: Some(backend_message::Kind::Start(pb::Start {
            run_id: run_id.into(),
            turn_id: "turn-1".into(),
            parent_call_id: run_id.into(),
            source: source.into(),
            language: "python".into(),
            ..Default::default()
        })),
    }
}

/// The backend's side of one run stream.
pub struct Run {
    pub to_sidecar: mpsc::Sender<pb::BackendMessage>,
    pub from_sidecar: tonic::Streaming<pb::SidecarMessage>,
}

impl Run {
    /// Opens a run of `source`.
    ///
    /// # Errors
    /// The status the sidecar refused it with.
    pub async fn open(client: &mut SidecarClient<Channel>, run_id: &str, source: &str) -> Result<Run, tonic::Status> {
        let (to_sidecar, receiver) = mpsc::channel(16);
        to_sidecar.send(start(run_id, source)).await.unwrap();
        let from_sidecar = client.run(ReceiverStream::new(receiver)).await?.into_inner();
        Ok(Run { to_sidecar, from_sidecar })
    }

    /// The next message that is a call or the end (output is skipped).
    pub async fn next(&mut self) -> sidecar_message::Kind {
        loop {
            match self.from_sidecar.message().await {
                Ok(Some(pb::SidecarMessage { kind: Some(sidecar_message::Kind::Output(_)) })) => {}
                Ok(Some(pb::SidecarMessage { kind: Some(kind) })) => return kind,
                other => panic!("the run's stream ended without `Finished`: {other:?}"),
            }
        }
    }

    /// The next `ToolCall`.
    pub async fn tool_call(&mut self) -> pb::ToolCall {
        match self.next().await {
            sidecar_message::Kind::ToolCall(call) => call,
            other => panic!("expected a `ToolCall`, got {other:?}"),
        }
    }

    /// Answers call `id` with the JSON `value`.
    pub async fn answer(&self, id: &str, value: serde_json::Value) {
        self.send_result(id, pb::tool_result::Outcome::ValueJson(value.to_string())).await;
    }

    /// Answers call `id` with a failure `code`.
    pub async fn fail(&self, id: &str, code: &str) {
        let failure = pb::Failure { code: code.into(), message: format!("the test says `{code}`") };
        self.send_result(id, pb::tool_result::Outcome::Failure(failure)).await;
    }

    async fn send_result(&self, id: &str, outcome: pb::tool_result::Outcome) {
        let result = pb::ToolResult { id: id.into(), outcome: Some(outcome) };
        self.to_sidecar
            .send(pb::BackendMessage { kind: Some(backend_message::Kind::ToolResult(result)) })
            .await
            .unwrap();
    }

    /// Reads to `Finished` (answering no calls) and checks the stream then ends OK.
    pub async fn finished(&mut self) -> pb::Finished {
        match self.next().await {
            sidecar_message::Kind::Finished(finished) => {
                assert!(
                    matches!(self.from_sidecar.message().await, Ok(None)),
                    "the stream ends with OK after `Finished`"
                );
                finished
            }
            other => panic!("expected `Finished`, got {other:?}"),
        }
    }
}
