//! One sidecar shared by every test that does not need a config of its own
//! (the walls and the hostile suite), so those tests cost a run each, not a
//! sidecar start each. Limits are tightened per run through `Start.limits`.

use crate::support::test_config;
use std::sync::OnceLock;
use tether_backend::SidecarClient;
use tether_cli::embedded::EmbeddedSidecar;
use tether_sidecar::SidecarConfig;

/// The shared sidecar's address, once it serves.
static SHARED_URL: OnceLock<String> = OnceLock::new();

/// The test config plus the hostile suite's hand-written guests, and room
/// for the tests' runs to execute and wait side by side.
fn shared_config() -> SidecarConfig {
    let mut config = test_config();
    config.slots = 4;
    config.max_waiting_runs = 64;
    config.extra_runtimes.extend(crate::hostile::wat_guests::loadable());
    config
}

/// Starts the shared sidecar on first use, on a runtime of its own that
/// lives as long as the test process (each test has its own runtime, which
/// ends with the test), and returns its address.
pub fn shared_url() -> &'static str {
    SHARED_URL.get_or_init(|| {
        let (ready, started) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("shared-sidecar".into())
            .spawn(move || {
                let runtime =
                    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
                runtime.block_on(async move {
                    let embedded = EmbeddedSidecar::start(shared_config()).await.expect("the shared sidecar starts");
                    ready.send(embedded.url()).unwrap();
                    // Serve until the process exits; `embedded` lives as long.
                    std::future::pending::<()>().await;
                });
            })
            .unwrap();
        started.recv().expect("the shared sidecar thread reports its address")
    })
}

/// A client of the shared sidecar, on the calling test's runtime.
pub async fn shared_client() -> SidecarClient {
    SidecarClient::connect(shared_url()).await.unwrap()
}
