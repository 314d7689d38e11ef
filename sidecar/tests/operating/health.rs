//! Readiness is NOT_SERVING until the Python guest is compiled (or loaded from
//! the cache) while the listeners are up at once; liveness is SERVING
//! throughout; the health-only listener serves health and nothing else.

use crate::support::{Run, SidecarProcess, check, shared_cache};
use nix::sys::signal::Signal;
use tether_proto::pb;
use tonic_health::pb::health_check_response::ServingStatus;

#[tokio::test]
async fn readiness_waits_for_a_cold_compile_while_liveness_is_serving() {
    // An empty cache: the guest is compiled, which takes seconds, while the
    // listeners are already up (they are announced before the compile ends).
    let cold_cache = tempfile::tempdir().unwrap();
    let mut sidecar = SidecarProcess::start(cold_cache.path(), &[]);
    let mut health = SidecarProcess::health_client(&sidecar.address).await;
    assert_eq!(check(&mut health, "").await, ServingStatus::NotServing, "not ready before the guest is compiled");
    assert_eq!(check(&mut health, "tether.v1.Sidecar").await, ServingStatus::NotServing);
    assert_eq!(check(&mut health, "liveness").await, ServingStatus::Serving);
    let refused = Run::open(&mut sidecar.client().await, "early", "1").await.err().expect("no run before ready");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains("still loading its runtimes"), "{refused:?}");

    sidecar.wait_for_health("", ServingStatus::Serving).await;
    assert_eq!(check(&mut health, "tether.v1.Sidecar").await, ServingStatus::Serving);
    let mut run = Run::open(&mut sidecar.client().await, "ready", "6 * 7").await.unwrap();
    let finished = run.finished().await;
    assert_eq!((finished.status(), finished.result_json.as_str()), (pb::RunStatus::Ok, "42"), "{finished:?}");
    assert!(std::fs::read_dir(cold_cache.path()).unwrap().next().is_some(), "the compiled guest was cached");

    sidecar.signal(Signal::SIGTERM);
    assert_eq!(sidecar.exited().await.code(), Some(0));
}

#[tokio::test]
async fn the_health_listener_serves_health_only_and_unknown_services_are_not_found() {
    let sidecar = SidecarProcess::start(&shared_cache(), &["--health-listen", "127.0.0.1:0"]);
    let address = sidecar.health_address.clone().unwrap();
    sidecar.wait_for_health("", ServingStatus::Serving).await;
    let mut probe = SidecarProcess::health_client(&address).await;
    assert_eq!(check(&mut probe, "").await, ServingStatus::Serving);
    assert_eq!(check(&mut probe, "liveness").await, ServingStatus::Serving);
    let unknown =
        probe.check(tonic_health::pb::HealthCheckRequest { service: "tether.v1.Nope".into() }).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");
    assert!(unknown.message().contains("liveness"), "the message names the services there are: {unknown:?}");

    let mut runs = pb::sidecar_client::SidecarClient::connect(format!("http://{address}")).await.unwrap();
    let status = Run::open(&mut runs, "wrong-port", "1").await.err().expect("no runs on the health listener");
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");
}
