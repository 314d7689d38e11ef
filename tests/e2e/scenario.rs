//! The seed scenario, end to end: the demo scripts over real gRPC.

use crate::support::*;
use serde_json::json;
use std::collections::BTreeSet;
use tether_backend::{SidecarClient, pb};
use tether_cli::demo::{self, DemoWorld};
use tether_sidecar::SidecarConfig;

#[tokio::test]
async fn the_contracts_script_emails_exactly_the_owners_of_ended_contracts() {
    let (_sidecar, client) = sidecar().await;
    contracts_script_emails_exactly_the_owners_of_ended_contracts(&client).await;
}

#[tokio::test]
async fn the_contracts_script_runs_the_same_on_worker_threads() {
    let (_sidecar, client) = sidecar_with(SidecarConfig { worker_threads: 2, ..test_config() }).await;
    contracts_script_emails_exactly_the_owners_of_ended_contracts(&client).await;
}

async fn contracts_script_emails_exactly_the_owners_of_ended_contracts(client: &SidecarClient) {
    let (outcome, recorder) = run_demo(client, demo::SCRIPT).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");

    let (checked, emailed, no_contract) = DemoWorld::default().expected_summary();
    assert_eq!(outcome.result, Some(json!({"checked": checked, "emailed": emailed, "no_contract": no_contract})));

    // One list, one look-up per issue, one email per ended contract — in that order.
    let names = recorder.names();
    assert_eq!(names[0], "list_issues");
    assert_eq!(names.iter().filter(|n| *n == "get_contract").count(), checked);
    assert_eq!(names.iter().filter(|n| *n == "send_email").count(), emailed.len());
    assert_eq!(recorder.world.outbox().len(), emailed.len());
    assert_eq!(outcome.stats.calls as usize, names.len());

    // Nested ids hang below the parent call, numbered in call order.
    let ids: Vec<String> = recorder.calls.lock().unwrap().iter().map(|c| c.id.clone()).collect();
    let expected: Vec<String> = (1..=names.len()).map(|n| format!("call_1/{n}")).collect();
    assert_eq!(ids, expected);

    // The script's prints reached the backend as output.
    assert!(outcome.stdout.contains("no contract (not_found)"), "stdout: {}", outcome.stdout);
}

#[tokio::test]
async fn the_gather_script_sends_its_lookups_as_one_batch() {
    let (_sidecar, client) = sidecar().await;
    let (outcome, recorder) = run_demo(&client, demo::SCRIPT_GATHER).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");

    let (checked, emailed, no_contract) = DemoWorld::default().expected_summary();
    assert_eq!(outcome.result, Some(json!({"checked": checked, "emailed": emailed, "no_contract": no_contract})));

    let calls = recorder.calls.lock().unwrap().clone();
    let lookups: Vec<_> = calls.iter().filter(|c| c.name == "get_contract").collect();
    let customers = DemoWorld::default().customers_last_week();
    assert_eq!(lookups.len(), customers.len(), "one look-up per distinct customer");
    let batches: BTreeSet<u32> = lookups.iter().map(|c| c.batch).collect();
    assert_eq!(batches.len(), 1, "all look-ups share one batch: {lookups:?}");
    assert!(lookups.iter().all(|c| c.batch_size as usize == customers.len()));
    let looked_up: BTreeSet<String> =
        lookups.iter().map(|c| c.args["customer_id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(looked_up, customers.into_iter().collect());
}

#[tokio::test]
async fn describe_reports_runtimes_and_limits() {
    let (sidecar, client) = sidecar().await;
    let description = client.describe().await.unwrap();
    assert_eq!(description.protocol, "tether.v1");
    assert!(description.runtimes.contains(&"python".to_owned()));
    assert!(description.runtimes.contains(&RUST_GUEST.to_owned()));
    assert_eq!(description.limits.unwrap().max_calls, sidecar.sidecar.config().limits.max_calls);
}

#[tokio::test]
async fn a_backend_can_reach_the_sidecar_over_a_unix_socket() {
    let sidecar = tether_sidecar::Sidecar::new(test_config()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tether.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = {
        let (sidecar, stop) = (sidecar.clone(), stop.clone());
        tokio::spawn(async move { sidecar.serve_unix(listener, stop.cancelled_owned()).await })
    };
    let client = tether_backend::SidecarClient::connect(&format!("unix:{}", path.display())).await.unwrap();
    let (outcome, recorder) = run_demo(&client, "get_contract(customer_id='c2')['value']['customer']").await;
    assert_eq!(outcome.result, Some(json!("Globex")), "{outcome:?}");
    assert_eq!(recorder.names(), ["get_contract"]);
    stop.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_embedded_sidecars_own_clients_reach_it_over_an_abstract_socket() {
    let (sidecar, _tcp_client) = sidecar().await;
    let local = sidecar.local_url();
    let name = local.strip_prefix("unix-abstract:").expect("an abstract socket");
    assert!(!std::path::Path::new(name).exists(), "no file is made for it");
    let client = SidecarClient::connect(&local).await.unwrap();
    let (outcome, recorder) = run_demo(&client, "get_contract(customer_id='c2')['value']['customer']").await;
    assert_eq!(outcome.result, Some(json!("Globex")), "{outcome:?}");
    assert_eq!(recorder.names(), ["get_contract"]);
    let other = tether_cli::embedded::EmbeddedSidecar::start(test_config()).await.unwrap();
    assert_ne!(other.local_url(), local, "each embedded sidecar has a name of its own");
    sidecar.stop().await.unwrap();
    assert!(SidecarClient::connect(&local).await.is_err(), "the name is gone with its sidecar");
}

#[tokio::test]
async fn the_standard_health_service_reports_serving() {
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};
    let (sidecar, _client) = sidecar().await;
    let channel = tonic::transport::Channel::from_shared(sidecar.url()).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel);
    let request = HealthCheckRequest { service: "tether.v1.Sidecar".into() };
    let status = health.check(request).await.unwrap().into_inner().status;
    assert_eq!(status, ServingStatus::Serving as i32);
}
