//! Python scripts that try to exhaust the sidecar: infinite loops, memory
//! bombs, deep recursion and nesting, output floods. Each ends at the limit
//! it passed — named in the error — while a normal run on the same sidecar
//! carries on, and the next run works.

use super::*;

/// The memory cap for the bombs: small, so each ends in well under a second.
const BOMB_MEMORY: u64 = 64 << 20;

/// Runs `source` under `limits` alongside a bystander; returns the outcome.
async fn bomb(source: &str, limits: pb::Limits) -> RunOutcome {
    let client = shared_client().await;
    let mut request = python(source);
    request.limits = limits;
    let (outcome, _) = alongside(&client, run(&client, request)).await;
    assert_still_works(&client).await;
    outcome
}

fn cpu_limited() -> pb::Limits {
    pb::Limits { cpu_time_ms: SPIN_CPU_MS, ..Default::default() }
}

fn memory_limited() -> pb::Limits {
    // A CPU cap too, so a bomb that grows slowly still ends quickly.
    pb::Limits { memory_bytes: BOMB_MEMORY, cpu_time_ms: 3000, ..Default::default() }
}

/// Both caps tight, for bombs where memory and CPU race.
fn both_limited() -> pb::Limits {
    pb::Limits { memory_bytes: BOMB_MEMORY, cpu_time_ms: SPIN_CPU_MS, ..Default::default() }
}

#[track_caller]
fn assert_cpu_limit(outcome: &RunOutcome) {
    assert_failed(outcome, pb::RunStatus::LimitExceeded, "cpu_time_limit", &["cpu_time_ms", "CPU time"]);
}

#[track_caller]
fn assert_memory_limit(outcome: &RunOutcome) {
    assert_failed(outcome, pb::RunStatus::LimitExceeded, "memory_limit", &["memory_bytes", "memory"]);
}

#[tokio::test]
async fn an_infinite_loop_ends_at_the_cpu_limit() {
    assert_cpu_limit(&bomb("while True:\n    pass\n", cpu_limited()).await);
}

#[tokio::test]
async fn a_loop_that_swallows_every_exception_still_ends() {
    let source =
        "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass\n";
    assert_cpu_limit(&bomb(source, cpu_limited()).await);
}

#[tokio::test]
async fn a_loop_over_a_huge_range_ends_at_the_cpu_limit() {
    assert_cpu_limit(&bomb("total = 0\nfor i in range(10 ** 18):\n    total += i\n", cpu_limited()).await);
}

#[tokio::test]
async fn spinning_through_the_event_loop_ends_at_the_cpu_limit() {
    // `asyncio.sleep(0)` suspends to the host every turn: none of it is a tool
    // wait, so all of it is the script's CPU time.
    let source = "import asyncio\nasync def spin():\n    while True:\n        await asyncio.sleep(0)\nawait spin()\n";
    assert_cpu_limit(&bomb(source, cpu_limited()).await);
}

#[tokio::test]
async fn a_string_bomb_ends_at_the_memory_limit() {
    assert_memory_limit(&bomb("s = 'x'\nwhile True:\n    s = s + s\n", memory_limited()).await);
}

#[tokio::test]
async fn one_giant_string_ends_at_the_memory_limit() {
    assert_memory_limit(&bomb("s = 'x' * (2 * 10 ** 9)\nlen(s)", memory_limited()).await);
}

#[tokio::test]
async fn a_string_longer_than_the_address_space_is_an_overflow_error() {
    let outcome = bomb("s = 'x' * (10 ** 10)\nlen(s)", memory_limited()).await;
    assert_raised(&outcome, "OverflowError", &["index-sized integer"]);
}

#[tokio::test]
async fn a_list_bomb_ends_at_the_memory_limit() {
    assert_memory_limit(&bomb("items = []\nwhile True:\n    items.append([0] * 1000)\n", memory_limited()).await);
}

#[tokio::test]
async fn one_giant_list_ends_at_the_memory_limit() {
    assert_memory_limit(&bomb("items = [0] * (10 ** 8)\nlen(items)", memory_limited()).await);
}

#[tokio::test]
async fn a_list_larger_than_the_address_space_is_a_clear_error() {
    let outcome = bomb("items = [0] * (10 ** 9)\nlen(items)", memory_limited()).await;
    assert_ne!(outcome.error_kind(), "guest_fault", "{outcome:#?}");
    let error = outcome.error.as_ref().expect("the run fails");
    let text = format!("{} {} {}", error.exception_type, error.message, error.limit);
    assert!(text.contains("memory") || text.contains("Memory") || text.contains("Overflow"), "{error:#?}");
}

#[tokio::test]
async fn a_dict_bomb_ends_at_the_memory_limit() {
    assert_memory_limit(
        &bomb("d = {}\ni = 0\nwhile True:\n    d[i] = str(i) * 10\n    i += 1\n", memory_limited()).await,
    );
}

#[tokio::test]
async fn a_big_int_bomb_ends_at_a_limit() {
    // Squaring doubles the digits each time: memory and CPU race; either
    // limit may win, but one of them must, with its name.
    let outcome = bomb("n = 3\nwhile True:\n    n = n * n\n", both_limited()).await;
    assert_eq!(outcome.status, pb::RunStatus::LimitExceeded, "{outcome:#?}");
    assert!(["memory_limit", "cpu_time_limit"].contains(&outcome.error_kind()), "{outcome:#?}");
}

#[tokio::test]
async fn a_huge_power_ends_at_a_limit() {
    let outcome = bomb("n = 10 ** (10 ** 10)\nn % 7", both_limited()).await;
    assert_eq!(outcome.status, pb::RunStatus::LimitExceeded, "{outcome:#?}");
    assert!(["memory_limit", "cpu_time_limit"].contains(&outcome.error_kind()), "{outcome:#?}");
}

#[tokio::test]
async fn a_bytes_bomb_ends_at_the_memory_limit() {
    assert_memory_limit(&bomb("b = b'x' * (2 * 10 ** 9)\nlen(b)", memory_limited()).await);
}

#[tokio::test]
async fn nested_containers_that_grow_forever_end_at_the_memory_limit() {
    let source = "x = []\nwhile True:\n    x = [x, [x], {'k': x}]\n";
    assert_memory_limit(&bomb(source, memory_limited()).await);
}

#[tokio::test]
async fn deep_recursion_is_a_recursion_error() {
    let outcome = bomb("def f(n):\n    return f(n + 1)\nf(0)\n", cpu_limited()).await;
    assert_raised(&outcome, "RecursionError", &["recursion"]);
}

#[tokio::test]
async fn mutual_recursion_is_a_recursion_error() {
    let source = "def a(n):\n    return b(n + 1)\ndef b(n):\n    return a(n + 1)\na(0)\n";
    assert_raised(&bomb(source, cpu_limited()).await, "RecursionError", &["recursion"]);
}

#[tokio::test]
async fn a_deeply_nested_value_cannot_overflow_the_stack() {
    // Nesting built in a loop reaches depths the recursion limit never sees
    // while building; the recursive work on it (repr, ==, hash, deepcopy,
    // json, dropping it, the result's conversion) must end cleanly or raise,
    // never crash the guest.
    const BUILD: &str = "x = []\nfor _ in range(100000):\n    x = [x]\ny = []\nfor _ in range(100000):\n    y = [y]\n";
    for (tail, expected) in [
        ("len(repr(x)) < 10000", Ok(json!(true))),
        ("x = None\ny = None\n'dropped'", Ok(json!("dropped"))),
        ("x == y", Err("RecursionError")),
        ("[x] < [y]", Err("RecursionError")),
        ("t = ()\nfor _ in range(100000):\n    t = (t,)\nhash(t)", Err("RecursionError")),
        ("import json\njson.dumps(x)", Err("RecursionError")),
        ("import copy\ncopy.deepcopy(x)", Err("RecursionError")),
        // As a result it is cut at 100 levels, where a marked string says so.
        ("x", Ok((0..100).fold(json!("!repr: <list nested too deep>"), |inner, _| json!([inner])))),
    ] {
        let outcome = bomb(&format!("{BUILD}{tail}\n"), memory_limited()).await;
        match expected {
            Ok(value) => assert_eq!(outcome.result, Some(value), "{tail}: {outcome:#?}"),
            Err(exception) => assert_raised(&outcome, exception, &[]),
        }
    }
}

#[tokio::test]
async fn an_output_flood_is_truncated_and_the_script_goes_on() {
    let limits = pb::Limits { output_bytes: 4096, cpu_time_ms: 10_000, ..Default::default() };
    let outcome = bomb("for i in range(200000):\n    print('flood', i)\n'survived'", limits).await;
    assert_eq!(outcome.result, Some(json!("survived")), "{outcome:#?}");
    assert!(outcome.output_truncated);
    assert!(outcome.stdout.len() + outcome.stderr.len() <= 4096);
    assert!(outcome.stdout.starts_with("flood 0\n"), "the first output is kept");
}

#[tokio::test]
async fn one_giant_print_is_truncated() {
    let limits = pb::Limits { output_bytes: 1024, ..Default::default() };
    let outcome = bomb("print('x' * 50_000_000)\n'survived'", pb::Limits { memory_bytes: 256 << 20, ..limits }).await;
    assert_eq!(outcome.result, Some(json!("survived")), "{outcome:#?}");
    assert!(outcome.output_truncated);
    assert!(outcome.stdout.len() <= 1024);
}

#[tokio::test]
async fn a_stderr_flood_is_truncated_too() {
    let limits = pb::Limits { output_bytes: 2048, ..Default::default() };
    let source =
        "import sys\nfor i in range(50000):\n    print('err', i, file=sys.stderr)\n    print('out', i)\n'survived'";
    let outcome = bomb(source, limits).await;
    assert_eq!(outcome.result, Some(json!("survived")), "{outcome:#?}");
    assert!(outcome.output_truncated);
    assert!(outcome.stdout.len() + outcome.stderr.len() <= 2048);
}

#[tokio::test]
async fn an_output_flood_forever_ends_at_the_cpu_limit_with_its_output_capped() {
    let limits = pb::Limits { output_bytes: 1024, ..cpu_limited() };
    let outcome = bomb("while True:\n    print('y' * 1000)\n", limits).await;
    assert_cpu_limit(&outcome);
    assert!(outcome.output_truncated);
    assert!(outcome.stdout.len() <= 1024);
}

/// third_party/monty's patch 0004: a string or bytes larger than the
/// guest's address space is a `MemoryError` the script catches, not a
/// guest crash (issue 25: `"x" * 2**31` was a `guest_fault`).
#[tokio::test]
async fn a_repeat_larger_than_the_address_space_is_a_memory_error_the_script_catches() {
    let source = "r = []\nfor v in ['x', b'x', [0], (0,)]:\n    try:\n        v * 2**31\n    except MemoryError:\n        r.append('caught')\nr";
    let outcome = bomb(source, memory_limited()).await;
    assert_eq!(outcome.result, Some(json!(["caught", "caught", "caught", "caught"])), "{outcome:#?}");
}

/// third_party/monty's patch 0020: `eval()` or `exec()` of the same text in a
/// loop reuses what the first call compiled, so the run completes under the
/// default limits (issue 25: 200,000 `eval()`s of a short expression ran out
/// of memory; each call kept its compiled code, and past 65,535 of them monty
/// refused the next with `SyntaxError`).
#[tokio::test]
async fn two_hundred_thousand_evals_give_their_memory_back() {
    let source = "t = 0\nfor i in range(200000):\n    t += eval('1 + 1')\n    exec('u = i')\n[t, u]";
    let outcome = bomb(source, pb::Limits::default()).await;
    assert_eq!(outcome.result, Some(json!([400000, 199999])), "{outcome:#?}");
}
