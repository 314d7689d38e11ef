//! The sandbox's walls, tested at the Wasm layer: the example guest probes
//! WASI preview 1 directly (`wall NAME`, `guest-sdk/example-guest/src/walls.rs`)
//! and through Rust std, and reports what it saw.
//!
//! What the sandbox promises a guest (`sidecar/src/run.rs` builds the WASI
//! context):
//! - no file system: no preopened directory, so every open, stat, create and
//!   directory read fails, by absolute or relative path, at every fd;
//! - no environment variables and no arguments;
//! - no sockets: preview 1 cannot create one, and the four socket calls fail
//!   on every fd;
//! - an empty stdin;
//! - the clocks and random numbers work, and reveal nothing of the host: the
//!   wall clock is the real time (scripts need dates), the monotonic clock
//!   starts at the run's own start (not the host's boot), the CPU-time clocks
//!   are refused, and every draw of random bytes is fresh.
//!
//! Each test fails if `run.rs` adds a preopen (`preopened_dir`) or inherits
//! the host's environment or arguments (`inherit_env`, `inherit_args`).

use crate::shared::shared_client;
use crate::support::*;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tether_backend::{RunOutcome, RunRequest, SidecarClient, pb};

/// Runs `wall NAME` in the example guest; returns its report and the outcome.
async fn probe(client: &SidecarClient, wall: &str) -> (Value, RunOutcome) {
    let request = RunRequest { language: RUST_GUEST.into(), ..RunRequest::python("walls", format!("wall {wall}")) };
    let outcome = client.run(request, Recorder::new().as_ref()).await.unwrap();
    assert_eq!(outcome.status, pb::RunStatus::Ok, "wall {wall}: {outcome:?}");
    let result = outcome.result.clone().unwrap();
    assert_eq!(result[0]["wall"], json!(wall));
    (result[0]["report"].clone(), outcome)
}

fn list(value: &Value) -> &Vec<Value> {
    value.as_array().unwrap_or_else(|| panic!("expected a list, got {value}"))
}

/// Every entry of a std probe list failed, and none opened anything.
fn assert_std_refused(entries: &Value, what: &str) {
    // An empty report would refuse nothing and pass: the guest probes paths.
    assert!(!list(entries).is_empty(), "{what}: the guest reported no path it tried");
    for entry in list(entries) {
        let error = entry["result"]["error"].as_str();
        assert!(error.is_some_and(|e| !e.is_empty()), "{what} `{}` was not refused: {entry}", entry["path"]);
    }
}

#[tokio::test]
async fn files_cannot_be_opened_created_or_statted_by_any_path() {
    let client = shared_client().await;
    let (report, _) = probe(&client, "files").await;
    assert_std_refused(&report["read"], "std::fs::read");
    assert_std_refused(&report["create"], "std::fs::File::create");
    assert_std_refused(&report["stat"], "std::fs::metadata");
    // No directory fd exists to open relative to: a preopen at fd 3 would
    // answer with a file, NOENT or NOTCAPABLE instead of BADF.
    let opens = list(&report["path_open"]);
    assert_eq!(opens.len(), 40, "fds 0..=9 × 4 paths");
    for open in opens {
        assert_eq!(open["result"], json!("BADF"), "path_open: {open}");
    }
}

#[tokio::test]
async fn no_directory_can_be_listed() {
    let client = shared_client().await;
    let (report, _) = probe(&client, "dirs").await;
    assert_std_refused(&report["read_dir"], "std::fs::read_dir");
    for listed in list(&report["fd_readdir"]) {
        assert_eq!(listed["result"], json!("BADF"), "fd_readdir: {listed}");
    }
}

#[tokio::test]
async fn there_are_no_preopened_directories() {
    let client = shared_client().await;
    let (report, _) = probe(&client, "preopens").await;
    assert_eq!(report["preopened"], json!([]), "fds 0..64 that fd_prestat_get accepts");
    assert_eq!(report["fd_prestat_get_3"], json!("BADF"));
}

#[tokio::test]
async fn the_environment_is_empty() {
    let client = shared_client().await;
    let (report, _) = probe(&client, "env").await;
    assert_eq!(report["environ_sizes_get"], json!([0, 0]), "{report}");
    assert_eq!(report["std_var_names"], json!([]));
    assert_eq!((&report["std_home"], &report["std_path"]), (&json!(false), &json!(false)));
}

#[tokio::test]
async fn there_are_no_arguments() {
    let client = shared_client().await;
    let (report, _) = probe(&client, "args").await;
    assert_eq!(report["args_sizes_get"], json!([0, 0]), "{report}");
    assert_eq!(report["std_args"], json!([]));
}

#[tokio::test]
async fn no_socket_can_be_used_or_made() {
    let client = shared_client().await;
    let (report, _) = probe(&client, "sockets").await;
    let per_fd = list(&report["per_fd"]);
    assert_eq!(per_fd.len(), 10);
    for entry in per_fd {
        // stdio are streams but not sockets; past them no fd exists at all.
        let expected = if entry["fd"].as_u64().unwrap() < 3 { "NOTSOCK" } else { "BADF" };
        for call in ["sock_accept", "sock_recv", "sock_send", "sock_shutdown"] {
            assert_eq!(entry[call], json!(expected), "{call} on fd {}: {entry}", entry["fd"]);
        }
    }
    for attempt in ["std_tcp_bind", "std_tcp_connect", "std_udp_bind", "std_resolve"] {
        assert!(report[attempt]["error"].is_string(), "{attempt} was not refused: {}", report[attempt]);
    }
}

#[tokio::test]
async fn stdin_is_empty() {
    let client = shared_client().await;
    let (report, _) = probe(&client, "stdin").await;
    assert_eq!(report["std_read_to_end"], json!({"ok": 0}), "{report}");
    assert_eq!(report["fd_read"], json!({"ok": 0}), "{report}");
}

#[tokio::test]
async fn the_clocks_work_and_reveal_nothing_of_the_host() {
    let client = shared_client().await;
    let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let (report, outcome) = probe(&client, "clocks").await;
    let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();

    // The wall clock is the host's real time: read between our two readings.
    let realtime = Duration::from_nanos(report["realtime"]["time"]["ns"].as_u64().unwrap());
    assert!(before <= realtime && realtime <= after, "realtime {realtime:?} not within [{before:?}, {after:?}]");
    let std_ms = report["std_system_time_ms"].as_u64().unwrap() as u128;
    assert!(before.as_millis() <= std_ms && std_ms <= after.as_millis());

    // The monotonic clock starts with the run's WASI context, so it reads
    // less than the run's own wall time; a host clock would show its uptime.
    let monotonic = report["monotonic"]["time"]["ns"].as_u64().unwrap();
    let run_wall_ns = outcome.stats.wall_time_us * 1000;
    assert!(monotonic <= run_wall_ns, "monotonic {monotonic} ns > the run's {run_wall_ns} ns");
    for clock in ["realtime", "monotonic"] {
        assert!(report[clock]["resolution"]["ns"].as_u64().is_some_and(|ns| ns > 0), "{}", report[clock]);
    }

    // CPU-time clocks would measure the host process: refused.
    for clock in ["process_cputime", "thread_cputime"] {
        assert_eq!(report[clock]["time"]["error"], json!("BADF"), "{}", report[clock]);
        assert_eq!(report[clock]["resolution"]["error"], json!("BADF"), "{}", report[clock]);
    }
}

#[tokio::test]
async fn random_bytes_are_fresh_on_every_draw_and_every_run() {
    let client = shared_client().await;
    let (first, _) = probe(&client, "random").await;
    let (second, _) = probe(&client, "random").await;
    let draws: Vec<&str> = list(&first).iter().chain(list(&second)).map(|d| d.as_str().unwrap()).collect();
    for draw in &draws {
        assert_eq!(draw.len(), 64, "32 bytes as hex: {draw}");
        assert_ne!(*draw, "0".repeat(64));
    }
    let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
    assert_eq!(distinct.len(), 4, "no draw repeats, within a run or across runs: {draws:?}");
}

#[tokio::test]
async fn an_unknown_wall_is_a_script_error() {
    // The probe command itself must not pass silently on a typo.
    let client = shared_client().await;
    let request = RunRequest { language: RUST_GUEST.into(), ..RunRequest::python("walls", "wall moat") };
    let outcome = client.run(request, Recorder::new().as_ref()).await.unwrap();
    assert_eq!(outcome.error_kind(), "runtime_error", "{outcome:?}");
    assert!(outcome.error.unwrap().message.contains("unknown wall `moat`"));
}
