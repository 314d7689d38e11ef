//! When the backend's stream goes away the script ends at once and the
//! sidecar lets go of everything the run held.

use crate::support::*;
use std::time::Duration;
use tether_sidecar::SidecarConfig;

/// Starts `source`, waits until it has called `ping` or `hold`, then drops
/// the client's run future (and with it the stream).
async fn drop_stream_after_first_call(source: &str, config: SidecarConfig) {
    let (sidecar, client) = sidecar_with(config).await;
    let (run, _recorder) = spawn_held(&client, demo_request(source)).await;
    assert_eq!(sidecar.sidecar.live_runs(), 1);
    run.abort();
    let _ = run.await;
    let counters = &sidecar.sidecar;
    eventually(Duration::from_secs(5), "the run is gone", || counters.live_runs() == 0).await;
    assert_eq!(counters.waiting_runs(), 0);
    assert_eq!(counters.free_slots(), counters.config().slots);
    assert_still_works(&client).await;
}

#[tokio::test]
async fn dropping_the_stream_ends_a_computing_script() {
    drop_stream_after_first_call("ping()\nwhile True:\n    pass\n", test_config()).await;
}

#[tokio::test]
async fn dropping_the_stream_ends_a_script_waiting_on_a_call() {
    drop_stream_after_first_call("hold()\n'never reached'\n", test_config()).await;
}

#[tokio::test]
async fn dropping_the_stream_ends_a_script_on_worker_threads() {
    let config = SidecarConfig { worker_threads: 2, ..test_config() };
    drop_stream_after_first_call("hold()\n'never reached'\n", config.clone()).await;
    drop_stream_after_first_call("ping()\nwhile True:\n    pass\n", config).await;
}
