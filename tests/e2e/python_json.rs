//! A script's result and its tool-call arguments follow `json.dumps` (issue
//! 13): int, float, bool and None dict keys become strings, tuples become
//! lists. What `json.dumps` refuses fails an argument with its exception and
//! message, and is converted in a result, the run saying so (issue 25). Ints
//! of any size travel exactly both ways (issue 25).

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
async fn a_result_json_dumps_refuses_is_converted_and_the_run_says_so() {
    let (_sidecar, client) = sidecar().await;
    let dataclass = "from dataclasses import dataclass\n@dataclass\nclass Sent:\n    to: str\n    n: int\n\
                     r = echo(to='a@x')\nSent(to=r['value']['to'], n=1)";
    let cases = [
        (dataclass, json!({"to": "a@x", "n": 1}), "dataclass `Sent` → dict of its fields"),
        ("a = []\na.append(a)\na", json!(["!repr: [...]"]), "a container inside itself → its repr"),
        ("{1, 2}", json!([1, 2]), "set → list"),
        ("b'x'", json!("!repr: b'x'"), "bytes → its repr"),
        ("float('nan')", json!("!repr: nan"), "float → its repr"),
        ("{(1, 2): 'x'}", json!({"(1, 2)": "x"}), "tuple dict key → its repr"),
    ];
    for (source, result, note) in cases {
        let (outcome, _) = run_demo(&client, source).await;
        assert_eq!(outcome.status, pb::RunStatus::Ok, "{source}: {outcome:?}");
        assert_eq!(outcome.result, Some(result), "{source}");
        assert!(
            outcome.stderr.starts_with("note: the script's result was converted to JSON: "),
            "{source}: {outcome:?}"
        );
        assert!(outcome.stderr.contains(note), "{source}: {:?}", outcome.stderr);
    }
    // Arguments are still refused, raised in the script where it can be caught.
    let source = "try:\n    echo(s={1})\nexcept TypeError as e:\n    r = str(e)\nr";
    let (outcome, recorder) = run_demo(&client, source).await;
    assert_eq!(
        outcome.result,
        Some(json!("argument is not JSON-serializable: Object of type set is not JSON serializable"))
    );
    assert!(recorder.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn ints_of_any_size_travel_exactly_both_ways() {
    let (_sidecar, client) = sidecar().await;
    // Fibonacci(100) is past 2**64; 10**400 is past any f64.
    let source = "a, b = 0, 1\nfor _ in range(100):\n    a, b = b, a + b\n\
                  r = echo(n=a, huge=-10**400)\n\
                  [a, r['value']['n'] == a, r['value']['huge'] == -10**400, type(r['value']['huge']).__name__]";
    let (outcome, recorder) = run_demo(&client, source).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");
    let fib_100 = "354224848179261915075";
    let huge = format!("-1{}", "0".repeat(400));
    let args = serde_json::to_string(&recorder.calls.lock().unwrap()[0].args).unwrap();
    assert_eq!(args, format!(r#"{{"huge":{huge},"n":{fib_100}}}"#));
    let result = serde_json::to_string(&outcome.result).unwrap();
    assert_eq!(result, format!(r#"[{fib_100},true,true,"int"]"#));
    assert_eq!(outcome.stderr, "");
}

/// Through the turn: a big int in a script's call passes the argument
/// schema's `"type": "integer"`, is audited with all its digits (the SQLite
/// store round-trips it), and the model reads the script's result exactly.
#[tokio::test]
async fn a_big_int_passes_the_turns_checks_and_reaches_the_audit_and_the_model_exactly() {
    use tether_backend::turn::PolicyApprover;
    let (_sidecar, client) = sidecar().await;
    let world = crate::turn::world(&client, PolicyApprover::approve_all(), |builder| builder);
    // The float is a variable: a literal 0.5 for an integer would refuse
    // the script before it ran (`script_refused`), not reach the turn.
    let source = "a, b = 0, 1\nfor _ in range(100):\n    a, b = b, a + b\nhalf = 0.5\n\
                  [ping(n=a)['ok'], ping(n=half)['error']['code'], a]";
    let result = world.script(source, serde_json::Value::Null).await;
    let fib_100 = "354224848179261915075";
    let model_reads = serde_json::to_string(&result.to_model_value()).unwrap();
    assert!(model_reads.contains(&format!(r#""result":[true,"invalid_arguments",{fib_100}]"#)), "{model_reads}");
    let audited: Vec<String> =
        world.audit().await.iter().filter(|row| row.call.tool == "ping").map(|row| row.call.args.to_string()).collect();
    assert_eq!(audited, [format!(r#"{{"n":{fib_100}}}"#), r#"{"n":0.5}"#.to_owned()]);
}
