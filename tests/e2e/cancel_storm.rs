//! 1,000 runs cancelled at random points leave nothing behind.

use crate::support::*;
use rand::Rng;
use std::time::Duration;
use tether_sidecar::SidecarConfig;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_runs_cancelled_at_random_points_leave_nothing_behind() {
    let (sidecar, client) = sidecar_with(SidecarConfig { slots: 2, max_waiting_runs: 64, ..test_config() }).await;
    // Warm up so the baseline includes the pool's first touches.
    for _ in 0..20 {
        assert_still_works(&client).await;
    }
    let rss_before = rss_bytes();

    // Scripts that compute, wait on a call, or both; cancelled while queued,
    // computing or waiting, depending on the random delay.
    let scripts =
        ["while True:\n    pass\n", "hold()\n", "ping()\nx = 0\nwhile True:\n    x += 1\n", "echo(a=1)\nhold()\n"];
    let mut tasks = tokio::task::JoinSet::new();
    let mut rng = rand::rng();
    for i in 0..1000 {
        let client = client.clone();
        let source = scripts[i % scripts.len()];
        let delay = Duration::from_micros(rng.random_range(0..20_000));
        tasks.spawn(async move {
            let recorder = Recorder::new();
            let _ = tokio::time::timeout(delay, client.run(demo_request(source), recorder.as_ref())).await;
        });
        // Keep a bounded number in flight so the admission queue is exercised, not overrun.
        while tasks.len() >= 64 {
            let _ = tasks.join_next().await;
        }
    }
    while tasks.join_next().await.is_some() {}

    let counters = &sidecar.sidecar;
    eventually(Duration::from_secs(30), "every run is gone", || counters.live_runs() == 0).await;
    assert_eq!(counters.waiting_runs(), 0);
    assert_eq!(counters.queued_runs(), 0);
    assert_eq!(counters.free_slots(), 2);
    assert_still_works(&client).await;
    let grown = rss_bytes().saturating_sub(rss_before);
    assert!(grown < 200 << 20, "RSS grew by {} MiB", grown >> 20);
}
