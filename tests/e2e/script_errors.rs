//! Bad scripts get clear errors, and the next run on the same sidecar works.

use crate::support::*;
use tether_backend::pb;

async fn assert_script_error(source: &str, kind: &str, mentions: &str) -> pb::RunError {
    let (_sidecar, client) = sidecar().await;
    let (outcome, _) = run_demo(&client, source).await;
    assert_eq!(outcome.status, pb::RunStatus::ScriptError, "{source}: {outcome:?}");
    let error = outcome.error.clone().expect("a script error carries an error");
    assert_eq!(error.kind, kind, "{source}: {error:?}");
    let text = format!("{} {} {}", error.exception_type, error.message, error.traceback);
    assert!(text.contains(mentions), "{source}: expected `{mentions}` in {error:?}");
    assert_still_works(&client).await;
    error
}

#[tokio::test]
async fn a_syntax_error_names_its_line() {
    let error = assert_script_error("x = 1\ny = (\n", "syntax_error", "SyntaxError").await;
    assert!(error.line >= 2, "{error:?}");
}

#[tokio::test]
async fn a_runtime_error_has_a_traceback_and_line() {
    let error = assert_script_error("a = 1\nb = 0\na / b\n", "runtime_error", "ZeroDivisionError").await;
    assert_eq!(error.line, 3, "{error:?}");
    assert!(!error.traceback.is_empty());
}

#[tokio::test]
async fn an_unwrapped_failure_value_raises_with_its_code() {
    // c8 has no contract: the failure is a value until the script unwraps it.
    let source = "r = get_contract(customer_id='c8')\nassert r['ok'] is False\nunwrap(r)\n";
    assert_script_error(source, "runtime_error", "not_found").await;
}

#[tokio::test]
async fn a_forbidden_import_is_refused() {
    assert_script_error("import socket\nsocket.socket()\n", "runtime_error", "Error").await;
}

#[tokio::test]
async fn opening_a_file_is_refused() {
    assert_script_error("open('/etc/passwd').read()\n", "runtime_error", "Error").await;
}

#[tokio::test]
async fn reading_the_environment_is_refused() {
    assert_script_error("import os\nos.environ['HOME']\n", "runtime_error", "Error").await;
}

#[tokio::test]
async fn a_script_sees_failures_as_values_and_branches_on_them() {
    let (_sidecar, client) = sidecar().await;
    let source = "r = call('no_such_tool', x=1)\nok = get_contract(customer_id='c1')\n[r['ok'], r['error']['code'], ok['ok'], ok['value']['customer']]";
    let (outcome, _) = run_demo(&client, source).await;
    assert_eq!(outcome.result, Some(serde_json::json!([false, "tool_not_found", true, "Acme Corp"])), "{outcome:?}");
}
