//! The wire contract as a stranger reads it: a Python `grpc.aio` client,
//! generated from `proto/tether/v1/tether.proto` at test time, drives the real
//! `tether-sidecar` process over TCP and a Unix socket through every stream
//! rule (`sidecar/tests/python/conformance.py`). A change that breaks a
//! non-Rust client fails here.
//!
//! Needs Python 3 with `grpcio` and `grpcio-tools`; `./x test` installs them
//! into `target/py` and points `TETHER_PYTHON` at that interpreter.

use crate::support::{SidecarProcess, shared_cache};
use std::path::Path;
use std::process::Command;
use tonic_health::pb::health_check_response::ServingStatus;

fn python() -> String {
    std::env::var("TETHER_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

#[tokio::test]
async fn a_python_grpc_client_follows_every_stream_rule_over_tcp_and_a_unix_socket() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let work = tempfile::tempdir().unwrap();
    let generated = work.path().join("generated");
    std::fs::create_dir_all(&generated).unwrap();

    let protoc = Command::new(python())
        .args(["-m", "grpc_tools.protoc", "-I"])
        .arg(root.join("proto"))
        .arg(format!("--python_out={}", generated.display()))
        .arg(format!("--grpc_python_out={}", generated.display()))
        .arg(root.join("proto/tether/v1/tether.proto"))
        .output()
        .expect("python3 runs");
    assert!(
        protoc.status.success(),
        "generating the Python client failed (install grpcio and grpcio-tools, or run `./x test`): {}",
        String::from_utf8_lossy(&protoc.stderr)
    );
    for package in ["tether", "tether/v1"] {
        std::fs::write(generated.join(package).join("__init__.py"), "").unwrap();
    }

    let socket = work.path().join("sidecar.sock");
    let sidecar = SidecarProcess::start(&shared_cache(), &["--socket", socket.to_str().unwrap()]);
    // The listeners are up before the guest is loaded; the client starts once it is.
    sidecar.wait_for_health("", ServingStatus::Serving).await;

    let run = Command::new(python())
        .arg(root.join("sidecar/tests/python/conformance.py"))
        .arg(&generated)
        .args(&sidecar.listeners)
        .output()
        .expect("python3 runs");
    drop(sidecar);
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "the Python client found broken rules:\n{report}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(report.contains("unix:") && report.contains("127.0.0.1:"), "both transports were tried:\n{report}");
}
