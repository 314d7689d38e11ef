//! Recursion depth (issue 13): a script may recurse as deep as Python's
//! default limit of 1,000, and whatever nests up to that limit inside monty's
//! own recursive Rust code (`==`, `repr`, `hash`, `deepcopy`, `json.dumps`,
//! callbacks) fits the guest's stacks: it completes or raises
//! `RecursionError`, never exhausts a stack.

use crate::support::*;
use serde_json::json;
use tether_backend::pb;

#[tokio::test]
async fn recursion_as_deep_as_pythons_limit_works() {
    let (_sidecar, client) = sidecar().await;
    let source = "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\ndepth(990)";
    let (outcome, _) = run_demo(&client, source).await;
    assert_eq!(outcome.result, Some(json!(990)), "{outcome:?}");
}

#[tokio::test]
async fn runaway_recursion_is_a_recursion_error() {
    let (_sidecar, client) = sidecar().await;
    let (outcome, _) = run_demo(&client, "def f(n):\n    return f(n + 1)\nf(0)").await;
    let error = outcome.error.expect("the run fails");
    assert_eq!((error.kind.as_str(), error.exception_type.as_str()), ("runtime_error", "RecursionError"), "{error:?}");
}

/// Builds `x` nested far past the limit, then runs `op` on it. The script
/// completes whether `op` does or raises (`RecursionError`, or a parser's own
/// depth error); a stack running out would end the run instead.
fn at_the_limit(build: &str, op: &str) -> String {
    format!(
        "import copy, json\n\
         from dataclasses import dataclass\n\
         {build}\n\
         try:\n    {op}\n    r = 'ok'\nexcept Exception as e:\n    r = type(e).__name__\nr"
    )
}

const NESTED_LIST: &str = "x = []\ny = []\nfor _ in range(5000):\n    x = [x]\n    y = [y]";
const NESTED_TUPLE: &str = "x = ()\nfor _ in range(5000):\n    x = (x,)";
const NESTED_DICT: &str = "x = {}\ny = {}\nfor _ in range(5000):\n    x = {'k': x}\n    y = {'k': y}";

#[tokio::test]
async fn monty_recursive_work_up_to_the_limit_fits_the_stacks() {
    let (_sidecar, client) = sidecar().await;
    let cases = [
        (NESTED_LIST, "x == y"),
        (NESTED_LIST, "repr(x)"),
        (NESTED_LIST, "str(x)"),
        (NESTED_LIST, "copy.deepcopy(x)"),
        (NESTED_LIST, "json.dumps(x)"),
        (NESTED_LIST, "x < y"),
        (NESTED_LIST, "f'{x}'"),
        (NESTED_TUPLE, "hash(x)"),
        (NESTED_TUPLE, "x == x[0]"),
        (NESTED_TUPLE, "isinstance(1, x)"),
        (NESTED_DICT, "x == y"),
        (NESTED_DICT, "repr(x)"),
        (NESTED_DICT, "copy.deepcopy(x)"),
        ("x = frozenset()\nfor _ in range(5000):\n    x = frozenset([x])", "hash(x)"),
        // Twelve nested callbacks (monty's cap on re-entering its VM), the
        // innermost comparing nested dicts, the deepest-costing work found.
        (NESTED_DICT, "def key(n):\n        return sorted([n - 1], key=key)[0] if n > 0 else (x == y)\n    key(11)"),
        // A deep Python call stack, then nested data at its bottom.
        (NESTED_DICT, "def down(n):\n        return down(n - 1) if n > 0 else (x == y)\n    down(500)"),
        (
            "@dataclass\nclass Node:\n    child: object\nx = Node(None)\ny = Node(None)\nfor _ in range(5000):\n    x = Node(x)\n    y = Node(y)",
            "x == y",
        ),
        (
            "@dataclass\nclass Node:\n    child: object\nx = Node(None)\nfor _ in range(5000):\n    x = Node(x)",
            "repr(x)",
        ),
        (NESTED_LIST, "sorted([x, y])"),
        (NESTED_LIST, "[y].index(x)"),
        (NESTED_TUPLE, "{x: 1}[x]"),
        // Parsers of nested text.
        ("x = '[' * 5000 + ']' * 5000", "json.loads(x)"),
        ("import tomllib\nx = 'a = ' + '[' * 5000 + ']' * 5000", "tomllib.loads(x)"),
        ("import re\nx = '(' * 5000 + 'a' + ')' * 5000", "re.compile(x)"),
        ("x = '(' * 5000 + '1' + ')' * 5000", "eval(x)"),
    ];
    for (build, op) in cases {
        let source = at_the_limit(build, op);
        let (outcome, _) = run_demo(&client, &source).await;
        assert_eq!(outcome.status, pb::RunStatus::Ok, "`{op}` on {build:?}: {outcome:?}");
        // "ok", "RecursionError", or a parser's own error such as "PatternError".
        assert!(outcome.result.as_ref().is_some_and(serde_json::Value::is_string), "`{op}`: {outcome:?}");
    }
    assert_still_works(&client).await;
}
