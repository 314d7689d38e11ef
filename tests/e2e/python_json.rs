//! A script's result and its tool-call arguments follow `json.dumps` (issue
//! 13): int, float, bool and None dict keys become strings, tuples become
//! lists, and what `json.dumps` refuses fails with its exception and message.

use crate::support::*;
use serde_json::json;
use tether_backend::pb;

#[tokio::test]
async fn results_and_arguments_are_what_json_dumps_would_write() {
    let (_sidecar, client) = sidecar().await;
    let source = "r = echo(ids={7: 'a', 2.5: 'b', True: 'c', None: 'd'}, pair=(1, 2))\n\
                  {2024: r['value'], 'tuple': (1, (2, 3))}";
    let (outcome, recorder) = run_demo(&client, source).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");
    let args = json!({"ids": {"7": "a", "2.5": "b", "true": "c", "null": "d"}, "pair": [1, 2]});
    assert_eq!(recorder.calls.lock().unwrap()[0].args, args);
    assert_eq!(outcome.result, Some(json!({"2024": args, "tuple": [1, [2, 3]]})));
}

#[tokio::test]
async fn what_json_dumps_refuses_fails_with_its_exception() {
    let (_sidecar, client) = sidecar().await;
    let cases = [
        ("a = []\na.append(a)\na", "ValueError", "Circular reference detected"),
        ("{1, 2}", "TypeError", "Object of type set is not JSON serializable"),
        ("b'x'", "TypeError", "Object of type bytes is not JSON serializable"),
        ("float('nan')", "ValueError", "Out of range float values are not JSON compliant: nan"),
        ("{(1, 2): 'x'}", "TypeError", "keys must be str, int, float, bool or None, not tuple"),
    ];
    for (source, exception_type, message) in cases {
        let (outcome, _) = run_demo(&client, source).await;
        let error = outcome.error.unwrap_or_default();
        assert_eq!(error.exception_type, exception_type, "{source}: {error:?}");
        assert!(error.message.ends_with(message), "{source}: {error:?}");
    }
    // The same rule for arguments, raised in the script where it can be caught.
    let source = "try:\n    echo(s={1})\nexcept TypeError as e:\n    r = str(e)\nr";
    let (outcome, recorder) = run_demo(&client, source).await;
    assert_eq!(
        outcome.result,
        Some(json!("argument is not JSON-serializable: Object of type set is not JSON serializable"))
    );
    assert!(recorder.calls.lock().unwrap().is_empty());
}
