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
async fn a_forbidden_import_is_refused_before_the_script_runs() {
    let error = assert_script_error("import socket\nsocket.socket()\n", "script_refused", "ModuleNotFoundError").await;
    assert_eq!(error.line, 1, "{error:?}");
    assert!(error.message.contains("line 1, column 8: module 'socket' is not available here"), "{error:?}");
}

#[tokio::test]
async fn a_script_that_cannot_run_makes_no_call_and_names_each_line_with_its_rewrite() {
    let (_sidecar, client) = sidecar().await;
    // Its first two lines would call a tool; the third has a keyword
    // `get_contract`'s schema does not have, the fourth a construct monty
    // does not compile.
    let source = "a = get_contract(customer_id='c1')\nb = get_contract(customer_id='c2')\n\
                  c = get_contract(customer='c3')\nclass Late(metaclass=type):\n    pass\n";
    let (outcome, recorder) = run_demo(&client, source).await;
    assert!(recorder.calls.lock().unwrap().is_empty(), "no call reached the backend: {:?}", recorder.names());
    assert_eq!(outcome.status, pb::RunStatus::ScriptError, "{outcome:?}");
    let error = outcome.error.clone().expect("a refused script carries an error");
    assert_eq!((error.kind.as_str(), error.line, error.exception_type.as_str()), ("script_refused", 3, "TypeError"));
    assert!(
        error.message.contains(
            "- line 3, column 18: get_contract() has no parameter 'customer': did you mean 'customer_id'? pass only \
             its parameters: customer_id"
        ),
        "{error:?}"
    );
    assert!(
        error.message.contains("- line 4, column 1: metaclasses and class keywords are not available here"),
        "{error:?}"
    );
    assert_still_works(&client).await;
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
