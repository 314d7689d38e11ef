//! SIGTERM and SIGINT drain the sidecar: readiness goes NOT_SERVING, new runs
//! are refused with UNAVAILABLE, runs in flight finish (or are cancelled at
//! the drain deadline), and the process exits 0.

use crate::support::{PATIENCE, Run, SidecarProcess, check, shared_cache};
use nix::sys::signal::Signal;
use tether_proto::pb;
use tonic_health::pb::health_check_response::ServingStatus;

/// A script that waits on one tool call and returns its value.
const HELD: &str = "r = call('hold')\nr['value']\n";

/// A ready sidecar with `args` and a run of [`HELD`] waiting on its call.
async fn sidecar_with_a_waiting_run(args: &[&str]) -> (SidecarProcess, Run, pb::ToolCall) {
    let sidecar = SidecarProcess::start(&shared_cache(), args);
    sidecar.wait_for_health("", ServingStatus::Serving).await;
    let mut run = Run::open(&mut sidecar.client().await, "held", HELD).await.unwrap();
    let call = run.tool_call().await;
    assert_eq!(call.name, "hold");
    (sidecar, run, call)
}

#[tokio::test]
async fn sigterm_drains_a_waiting_run_to_its_normal_end_and_exits_0() {
    let (mut sidecar, mut run, call) =
        sidecar_with_a_waiting_run(&["--health-listen", "127.0.0.1:0", "--drain-deadline-seconds", "600"]).await;
    sidecar.signal(Signal::SIGTERM);

    sidecar.wait_for_health("", ServingStatus::NotServing).await;
    let mut health = SidecarProcess::health_client(&sidecar.address).await;
    assert_eq!(check(&mut health, "tether.v1.Sidecar").await, ServingStatus::NotServing);
    assert_eq!(check(&mut health, "liveness").await, ServingStatus::Serving);
    let mut probe = SidecarProcess::health_client(sidecar.health_address.as_deref().unwrap()).await;
    assert_eq!(check(&mut probe, "").await, ServingStatus::NotServing, "the health-only listener agrees");
    assert_eq!(check(&mut probe, "liveness").await, ServingStatus::Serving);

    let refused = Run::open(&mut sidecar.client().await, "late", "1").await.err().expect("a new run is refused");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(refused.message(), "the sidecar is draining for shutdown; open the run on another sidecar");
    assert!(sidecar.is_running(), "the drain waits for the run in flight");

    run.answer(&call.id, serde_json::json!("released")).await;
    let finished = run.finished().await;
    assert_eq!(finished.status(), pb::RunStatus::Ok, "{finished:?}");
    assert_eq!(finished.result_json, "\"released\"");
    let status = sidecar.exited().await;
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[tokio::test]
async fn a_run_that_outlasts_the_drain_deadline_is_cancelled_and_the_process_exits_0() {
    let (mut sidecar, mut run, _call) = sidecar_with_a_waiting_run(&["--drain-deadline-seconds", "1"]).await;
    sidecar.signal(Signal::SIGINT);
    // Never answered: the deadline cancels it.
    let finished = tokio::time::timeout(PATIENCE, run.finished()).await.unwrap();
    assert_eq!(finished.status(), pb::RunStatus::Cancelled, "{finished:?}");
    let error = finished.error.unwrap();
    assert_eq!((error.kind.as_str(), error.message.as_str()), ("cancelled", "sidecar shutting down"));
    let status = sidecar.exited().await;
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[tokio::test]
async fn a_second_signal_cancels_the_runs_at_once() {
    // A drain deadline far past the test's patience: only the second signal can end the run.
    let (mut sidecar, mut run, _call) = sidecar_with_a_waiting_run(&["--drain-deadline-seconds", "100000"]).await;
    sidecar.signal(Signal::SIGTERM);
    sidecar.wait_for_health("", ServingStatus::NotServing).await;
    assert!(sidecar.is_running());
    sidecar.signal(Signal::SIGTERM);
    let finished = tokio::time::timeout(PATIENCE, run.finished()).await.unwrap();
    assert_eq!(finished.status(), pb::RunStatus::Cancelled, "{finished:?}");
    assert_eq!(finished.error.unwrap().message, "sidecar shutting down");
    assert_eq!(sidecar.exited().await.code(), Some(0));
}
