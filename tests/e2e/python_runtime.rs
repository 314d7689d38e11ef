//! The Python runtime tells the truth (issue 7, item 8): a sleep past the
//! run's sleep budget ends the run with a limit error instead of returning
//! early, and `print(..., file=sys.stderr)` and `sys.stderr.write()` reach the
//! run's stderr (`write` and `flush` come from third_party/monty's patch 0001).

use std::time::{Duration, Instant};

use crate::support::*;
use tether_backend::pb;

const SLEEP_PAST_THE_BUDGET: &str = "import time\nprint('before')\ntime.sleep(100000)\nprint('after')\n";

#[tokio::test]
async fn a_sleep_within_the_budget_is_obeyed() {
    let (_sidecar, client) = sidecar().await;
    let (outcome, _) = run_demo(&client, "import time\ntime.sleep(0.05)\nprint('after')\n'slept'").await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");
    assert_eq!((outcome.result, outcome.stdout.as_str()), (Some(serde_json::json!("slept")), "after\n"));
}

#[tokio::test]
async fn a_sleep_past_the_budget_ends_the_run_at_once_with_a_limit_error() {
    let (_sidecar, client) = sidecar().await;
    let started = Instant::now();
    let (outcome, _) = run_demo(&client, SLEEP_PAST_THE_BUDGET).await;
    assert!(started.elapsed() < Duration::from_secs(5), "the run slept before failing: {:?}", started.elapsed());
    let error = outcome.error.clone().expect("a failed run carries an error");
    assert_eq!((error.kind.as_str(), error.line), ("sleep_limit", 3), "{error:?}");
    assert!(error.message.contains("`10` s sleep budget"), "{error:?}");
    assert!(error.message.contains("wait on tools instead"), "{error:?}");
    // The script did not run on as if it had slept.
    assert_eq!(outcome.stdout, "before\n");
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_sleep_past_the_budget_is_reported_as_a_limit() {
    let (_sidecar, client) = sidecar().await;
    let (outcome, _) = run_demo(&client, SLEEP_PAST_THE_BUDGET).await;
    assert_eq!(outcome.status, pb::RunStatus::LimitExceeded, "{outcome:?}");
    assert_eq!(outcome.error.map(|error| error.limit), Some("sleep_ms".to_owned()));
}

#[tokio::test]
async fn print_to_stderr_reaches_the_runs_stderr() {
    let (_sidecar, client) = sidecar().await;
    let source =
        "import sys\nprint('to out')\nprint('to err', 2, file=sys.stderr)\nprint('out again', file=sys.stdout)\n'done'";
    let (outcome, _) = run_demo(&client, source).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");
    assert_eq!((outcome.stdout.as_str(), outcome.stderr.as_str()), ("to out\nout again\n", "to err 2\n"));
}

#[tokio::test]
async fn sys_stream_write_reaches_the_runs_streams_in_order() {
    let (_sidecar, client) = sidecar().await;
    let source = "import sys\nwritten = sys.stderr.write('warn: ')\nprint('to out')\nsys.stderr.write('low stock\\n')\n\
                  sys.stdout.write('no newline')\nsys.stdout.flush()\nsys.stderr.flush()\nwritten";
    let (outcome, _) = run_demo(&client, source).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");
    assert_eq!((outcome.stdout.as_str(), outcome.stderr.as_str()), ("to out\nno newline", "warn: low stock\n"));
    assert_eq!(outcome.result, Some(serde_json::json!(6)), "write() returns the characters written");
}

#[tokio::test]
async fn sys_stream_write_takes_only_a_str_as_in_python() {
    let (_sidecar, client) = sidecar().await;
    let source =
        "import sys\ntry:\n    sys.stderr.write(42)\nexcept TypeError as e:\n    print(e)\nsys.stdout.write(b'x')\n";
    let (outcome, _) = run_demo(&client, source).await;
    assert_eq!(outcome.stdout, "write() argument must be str, not int\n");
    let error = outcome.error.expect("a failed run carries an error");
    assert_eq!((error.exception_type.as_str(), error.line), ("TypeError", 6), "{error:?}");
}

#[tokio::test]
async fn other_stream_methods_fail_saying_what_there_is() {
    let (_sidecar, client) = sidecar().await;
    let (outcome, _) = run_demo(&client, "import sys\nsys.stdout.writelines(['x'])\n").await;
    let error = outcome.error.expect("a failed run carries an error");
    assert_eq!((error.exception_type.as_str(), error.line), ("AttributeError", 2), "{error:?}");
    assert!(error.message.contains("only write(str) and flush()"), "{error:?}");
    assert_eq!(outcome.stdout, "");
}
