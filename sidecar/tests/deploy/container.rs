//! The sidecar image, run with Docker: a backend outside the container (the
//! Rust `SidecarClient`) runs a script that calls a tool, over a Unix socket
//! in a shared volume and over TCP; the container runs as a non-root user on
//! a read-only root filesystem, starts ready from the compile cache baked into
//! the image, and drains a run in flight on SIGTERM.

use crate::docker::{Container, Docker, IMAGE_UID, sidecar_image};
use crate::grpc::{wait_ready, wait_status};
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;
use std::time::Duration;
use tether_backend::{CallHandler, ClientError, RunRequest, ScriptCall, SidecarClient, ToolDef, ToolOutcome, pb};
use tokio::sync::{Notify, Semaphore};
use tonic_health::pb::health_check_response::ServingStatus;

/// Time allowed for a container to become ready: a warm start takes well
/// under a second, a cold one (a cache that does not fit this CPU) compiles.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The script every test runs: one tool call, its value in the result.
const SCRIPT: &str = r#"
reply = unwrap(call("echo", {"text": input["text"]}))
{"echoed": reply["text"], "calls": 1}
"#;

/// Answers `echo` with its arguments; with a gate, each call first waits
/// until the test opens it.
#[derive(Debug, Default)]
struct Echo {
    calls: Mutex<Vec<ScriptCall>>,
    arrived: Notify,
    gate: Option<Semaphore>,
}

impl Echo {
    fn gated() -> Echo {
        Echo { gate: Some(Semaphore::new(0)), ..Echo::default() }
    }
}

#[async_trait::async_trait]
impl CallHandler for Echo {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        self.calls.lock().unwrap().push(call.clone());
        self.arrived.notify_one();
        if let Some(gate) = &self.gate {
            let _open = gate.acquire().await;
        }
        match call.name.as_str() {
            "echo" => ToolOutcome::Ok(call.args),
            other => ToolOutcome::failed("unknown_tool", format!("no tool `{other}`")),
        }
    }
}

fn request(run_id: &str, text: &str) -> RunRequest {
    RunRequest {
        turn_id: "turn-container".into(),
        parent_call_id: "call_1".into(),
        input: json!({"text": text}),
        tools: vec![ToolDef::new(
            "echo",
            "Returns its arguments.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        )],
        ..RunRequest::python(run_id, SCRIPT)
    }
}

/// Runs [`SCRIPT`] at `address` and checks the call crossed over and back.
async fn run_echo(address: &str, text: &str) {
    let client = SidecarClient::connect(address).await.unwrap_or_else(|e| panic!("connecting to `{address}`: {e}"));
    let echo = Echo::default();
    let outcome =
        client.run(request("run-echo", text), &echo).await.unwrap_or_else(|e| panic!("the run at `{address}`: {e}"));
    assert!(outcome.is_ok(), "the script failed at `{address}`: {outcome:?}");
    assert_eq!(outcome.result, Some(json!({"echoed": text, "calls": 1})), "the tool's value reached the script");
    let calls = echo.calls.lock().unwrap();
    assert_eq!(calls.len(), 1, "one call reached the backend: {calls:?}");
    assert_eq!((calls[0].id.as_str(), calls[0].name.as_str()), ("call_1/1", "echo"));
    assert_eq!(calls[0].args, json!({"text": text}));
}

/// The first line of `/proc/PID/status` starting with `field`.
fn proc_status(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find(|line| line.starts_with(field)).unwrap_or_default().to_owned()
}

/// The mount options of the container's root filesystem, from its
/// process's own mount table.
fn root_mount_options(pid: u32) -> String {
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    // Fields: id parent major:minor root mount-point options ...
    let root =
        mounts.lines().map(|line| line.split(' ').collect::<Vec<_>>()).find(|fields| fields.get(4) == Some(&"/"));
    root.and_then(|fields| fields.get(5).map(|s| (*s).to_owned())).unwrap_or_default()
}

/// The image's own command (a Unix socket in `/run/tether`, health on TCP)
/// with no network at all, the socket directory a host directory both sides
/// share, and a read-only root.
#[tokio::test(flavor = "multi_thread")]
async fn a_backend_outside_runs_a_script_over_a_unix_socket_in_a_shared_volume() {
    let docker = Docker::connect();
    let image = sidecar_image(&docker);
    let shared = tempfile::tempdir().unwrap();
    // What an operator does for a bind mount (Kubernetes' emptyDir is
    // writable by the pod's fsGroup): the image's user owns the directory.
    std::os::unix::fs::chown(shared.path(), Some(IMAGE_UID), Some(IMAGE_UID)).unwrap();
    let volume = format!("{}:/run/tether", shared.path().display());
    let container = Container::run(
        &docker,
        // The backend here is this test, run as root: allowed by uid, as an
        // operator would (`docs/security.md`); the image's own user too.
        &[
            "--read-only",
            "--network",
            "none",
            "--volume",
            &volume,
            "--env",
            "RUST_LOG=tether_sidecar=info",
            "--env",
            "TETHER_ALLOW_UID=0,65532",
        ],
        image,
        &[],
    );
    let socket = shared.path().join("sidecar.sock");
    let address = format!("unix:{}", socket.display());
    container.line_after("listening on unix:", READY_TIMEOUT);
    let ready = wait_ready(&container, &address, READY_TIMEOUT).await;
    eprintln!("unix socket: SERVING {} ms after `docker run`", ready.as_millis());

    run_echo(&address, "over a unix socket").await;

    assert_eq!(std::fs::metadata(&socket).unwrap().uid(), IMAGE_UID, "the socket is the image user's");
    let pid = container.host_pid();
    let uid = proc_status(pid, "Uid:");
    let uids: Vec<String> = uid.split_whitespace().skip(1).map(str::to_owned).collect();
    assert_eq!(
        uids,
        vec![IMAGE_UID.to_string(); 4],
        "real, effective, saved and filesystem uid are the image user's: {uid}"
    );
    let options = root_mount_options(pid);
    assert!(options.split(',').any(|o| o == "ro"), "the root filesystem is read-only: {options}");
    let (_, logs) = container.logs();
    assert!(
        !logs.contains("compiled guest") && !logs.contains("could not cache"),
        "the guest was loaded from the image's cache, not compiled at start:\n{logs}"
    );
}

/// Over TCP on the host's network, the address given on the command line.
#[tokio::test(flavor = "multi_thread")]
async fn a_backend_outside_runs_a_script_over_tcp() {
    let docker = Docker::connect();
    let image = sidecar_image(&docker);
    let container = Container::run(
        &docker,
        &["--read-only", "--network", "host"],
        image,
        &["--listen", "127.0.0.1:0", "--insecure-loopback"],
    );
    let address = format!("http://{}", container.line_after("listening on ", READY_TIMEOUT));
    let ready = wait_ready(&container, &address, READY_TIMEOUT).await;
    eprintln!("tcp: SERVING {} ms after `docker run`", ready.as_millis());
    run_echo(&address, "over tcp").await;
}

/// SIGTERM while a script waits on a tool call: readiness turns NOT_SERVING,
/// a new run is refused, the run in flight completes with its call's value,
/// and the container exits 0.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_a_run_in_flight_and_the_container_exits_0() {
    let docker = Docker::connect();
    let image = sidecar_image(&docker);
    let container = Container::run(
        &docker,
        &["--read-only", "--network", "host"],
        image,
        &["--listen", "127.0.0.1:0", "--insecure-loopback", "--drain-deadline-seconds", "60"],
    );
    let address = format!("http://{}", container.line_after("listening on ", READY_TIMEOUT));
    wait_ready(&container, &address, READY_TIMEOUT).await;

    let echo = Echo::gated();
    let outcome = {
        // The client lives in this block: the backend lets go of its
        // connection once the run ends, as a backend between runs would.
        let client = SidecarClient::connect(&address).await.unwrap();
        let run = client.run(request("run-in-flight", "drained"), &echo);
        tokio::pin!(run);
        tokio::select! {
            () = echo.arrived.notified() => {}
            ended = &mut run => panic!("the run ended before its call was answered: {ended:?}"),
        }

        container.signal("TERM");
        let draining = async {
            wait_status(&container, &address, ServingStatus::NotServing, Duration::from_secs(30)).await;
            let late = SidecarClient::connect(&address).await.unwrap();
            match late.run(request("run-too-late", "refused"), &Echo::default()).await {
                Err(ClientError::Status(status)) => assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}"),
                other => panic!("a run started while draining must be refused with UNAVAILABLE: {other:?}"),
            }
            echo.gate.as_ref().unwrap().add_permits(1);
        };
        tokio::join!(&mut run, draining).0
    };
    let outcome =
        outcome.unwrap_or_else(|e| container.fail(&format!("the run in flight did not survive the drain: {e}")));
    assert_eq!(outcome.status, pb::RunStatus::Ok, "the run in flight completed: {outcome:?}");
    assert_eq!(outcome.result, Some(json!({"echoed": "drained", "calls": 1})));

    let code = container.wait();
    if code != 0 {
        container.fail(&format!("the container exited {code} after draining, not 0"));
    }
}
