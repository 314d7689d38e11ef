//! Sizes past 32 bits give 64-bit Python's answers in the sandbox (issue 13).
//! The guest is `wasm32`, so monty's `usize` is 32 bits there. Before
//! third_party/monty's patch 0002, a range longer than 2**32 - 1 had a wrong
//! length, `==`, `hash` and slice, and `islice` refused indices past 2**32 - 1.
//! Each expectation below is what CPython 3 on a 64-bit machine answers.

use serde_json::json;

use crate::support::*;
use tether_backend::pb;

/// Runs `source` (its last expression the result) in the Python guest and
/// returns the result.
async fn result_of(source: &str) -> serde_json::Value {
    let (_sidecar, client) = sidecar().await;
    let (outcome, _) = run_demo(&client, source).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");
    outcome.result.clone().unwrap_or_else(|| panic!("an ok run has a result: {outcome:?}"))
}

#[tokio::test]
async fn a_range_past_32_bits_has_its_true_length() {
    let result =
        result_of("[len(range(0, 2**40, 2**7)), len(range(-(2**62), 2**62 - 1)), len(range(2**33, 0, -3))]").await;
    assert_eq!(result, json!([8_589_934_592_i64, 9_223_372_036_854_775_807_i64, 2_863_311_531_i64]));
}

#[tokio::test]
async fn ranges_past_32_bits_compare_and_hash_by_their_values() {
    let source = "a, b, c = range(0, 2**33), range(0, 2**34), range(0, 2**33, 1)\n\
                  [a == b, a == c, hash(a) == hash(c), hash(a) == hash(b), len({a, b, c})]";
    assert_eq!(result_of(source).await, json!([false, true, true, false, 2]));
}

#[tokio::test]
async fn slices_of_a_range_past_32_bits_are_exact() {
    let source =
        "r = range(0, 2**33)\n[list(r[2**32:][:2]), r[2**32 + 5], r[-1], len(r[::2**31]), list(r[2**33 - 2:])]";
    assert_eq!(
        result_of(source).await,
        json!([
            [4_294_967_296_i64, 4_294_967_297_i64],
            4_294_967_301_i64,
            8_589_934_591_i64,
            4,
            [8_589_934_590_i64, 8_589_934_591_i64]
        ])
    );
}

#[tokio::test]
async fn islice_takes_indices_past_32_bits() {
    let source = "import itertools\n\
                  [list(itertools.islice(range(10), 2**32 + 1)), list(itertools.islice(range(10), 2**32 + 1, None)),\n\
                  list(itertools.islice('abcdef', 1, 2**40, 2**33))]";
    assert_eq!(result_of(source).await, json!([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [], ["b"]]));
}

#[tokio::test]
async fn a_length_past_sys_maxsize_is_an_overflow_error_as_in_python() {
    let source = "import sys\ntry:\n    len(range(-(2**63), 2**63 - 1))\nexcept OverflowError as e:\n    message = str(e)\n\
                  [message, sys.maxsize == 2**63 - 1]";
    assert_eq!(result_of(source).await, json!(["Python int too large to convert to C ssize_t", true]));
}

#[tokio::test]
async fn random_never_draws_from_a_truncated_range() {
    // 64-bit Python draws from all 2**40 values; a 32-bit guest cannot index
    // them as a sequence and says so, where it once drew from the first
    // 2**32 - 1 only. A population that `counts` describes is never held, so
    // it is drawn from whole.
    let source = "import random\ntry:\n    random.choice(range(2**40))\n    choice = 'drawn'\nexcept OverflowError as e:\n    choice = str(e)\n\
                  picks = random.sample(['a', 'b'], 50, counts=[2**40, 2**40])\n[choice, len(picks), sorted(set(picks))]";
    assert_eq!(result_of(source).await, json!(["Python int too large to convert to C ssize_t", 50, ["a", "b"]]));
}

#[tokio::test]
async fn a_buffer_no_memory_holds_is_a_memory_error_the_script_can_catch() {
    // 64-bit Python raises MemoryError for both: no memory holds a terabyte,
    // nor 2**29 picks. The 32-bit guest once crashed on them (a capacity
    // overflow is a panic, and the guest aborts on panics).
    let source = "import random\nout = []\n\
                  for make in (lambda: random.randbytes(2**40), lambda: random.sample(range(2**31), 2**29)):\n\
                  \x20   try:\n        make()\n        out.append('made')\n    except MemoryError:\n        out.append('MemoryError')\n\
                  out";
    assert_eq!(result_of(source).await, json!(["MemoryError", "MemoryError"]));
}
