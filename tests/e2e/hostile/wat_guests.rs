//! Hand-written guests in WAT, each doing one hostile thing no compiler
//! would emit: importing what the host does not provide, trapping in a start
//! section, writing out of bounds, looping or growing memory forever.
//!
//! The loadable ones are extra runtimes of the shared sidecar
//! ([`loadable`]); the ones the sidecar must refuse to load are tried on a
//! sidecar of their own, which must fail to start naming the guest and the
//! problem, while the shared sidecar carries on.

use super::*;
use tether_backend::RunRequest;
use tether_sidecar::Sidecar;

/// The outcome document `wat-finish-then-trap` reports.
const OUTCOME: &str = r#"{"ok":true,"value":"done"}"#;

/// The guests the shared sidecar loads, by runtime name.
const LOADABLE: &[(&str, &str)] = &[
    ("wat-unreachable", r#"(module (memory (export "memory") 1) (func (export "_start") unreachable))"#),
    ("wat-no-finish", r#"(module (memory (export "memory") 1) (func (export "_start")))"#),
    ("wat-no-start", r#"(module (memory (export "memory") 1) (func (export "main")))"#),
    (
        "wat-no-memory",
        r#"(module
            (import "tether_v1" "start" (func $start (result i32)))
            (import "tether_v1" "take_response" (func $take (param i32 i32) (result i32)))
            (memory 1)
            (func (export "_start") (drop (call $take (i32.const 0) (call $start)))))"#,
    ),
    (
        "wat-oob-store",
        r#"(module (memory (export "memory") 1)
            (func (export "_start") (i32.store (i32.const -16) (i32.const 1))))"#,
    ),
    (
        "wat-oob-take",
        r#"(module
            (import "tether_v1" "start" (func $start (result i32)))
            (import "tether_v1" "take_response" (func $take (param i32 i32) (result i32)))
            (memory (export "memory") 1)
            (func (export "_start") (drop (call $take (i32.const 65530) (call $start)))))"#,
    ),
    (
        "wat-wrapping-call",
        r#"(module
            (import "tether_v1" "call" (func $call (param i32 i32) (result i32)))
            (memory (export "memory") 1)
            (func (export "_start") (drop (call $call (i32.const -16) (i32.const 256)))))"#,
    ),
    ("wat-loop", r#"(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))"#),
    (
        "wat-grow",
        r#"(module (memory (export "memory") 1)
            (func (export "_start") (loop $l (drop (memory.grow (i32.const 16))) (br $l))))"#,
    ),
    ("wat-big-initial", r#"(module (memory (export "memory") 2048) (func (export "_start")))"#),
    ("wat-recursion", r#"(module (memory (export "memory") 1) (func $f (export "_start") (call $f)))"#),
    (
        "wat-table-oob",
        r#"(module (memory (export "memory") 1) (table 1 funcref) (type $t (func))
            (func (export "_start") (call_indirect (type $t) (i32.const 5))))"#,
    ),
    (
        "wat-divide-by-zero",
        r#"(module (memory (export "memory") 1)
            (func (export "_start") (drop (i32.div_s (i32.const 1) (i32.const 0)))))"#,
    ),
    (
        "wat-start-section-spin",
        r#"(module (memory (export "memory") 1)
            (func $spin (loop $l (br $l))) (start $spin) (func (export "_start")))"#,
    ),
    (
        "wat-start-section-trap",
        r#"(module (memory (export "memory") 1)
            (func $trap unreachable) (start $trap) (func (export "_start")))"#,
    ),
];

/// Compiles `wat`; the sources here are fixed, so a failure is a test bug.
fn compile(name: &str, wat: &str) -> Vec<u8> {
    wat::parse_str(wat).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The loadable guests as `(runtime, wasm)`, for the shared sidecar's config.
pub fn loadable() -> Vec<(String, Vec<u8>)> {
    let finish_then_trap = format!(
        r#"(module
            (import "tether_v1" "finish" (func $finish (param i32 i32)))
            (memory (export "memory") 1)
            (data (i32.const 16) "{}")
            (func (export "_start") (call $finish (i32.const 16) (i32.const {})) unreachable))"#,
        OUTCOME.replace('"', "\\\""),
        OUTCOME.len()
    );
    LOADABLE
        .iter()
        .map(|(name, wat)| (name.to_string(), compile(name, wat)))
        .chain(std::iter::once(("wat-finish-then-trap".to_owned(), compile("wat-finish-then-trap", &finish_then_trap))))
        .collect()
}

/// Runs the WAT guest `runtime` on the shared sidecar alongside a bystander.
async fn hostile(runtime: &str, limits: pb::Limits) -> RunOutcome {
    let client = shared_client().await;
    let request = RunRequest { language: runtime.into(), limits, ..RunRequest::python(runtime, "") };
    let (outcome, _) = alongside(&client, run(&client, request)).await;
    assert_still_works(&client).await;
    outcome
}

#[track_caller]
fn assert_guest_fault(outcome: &RunOutcome, mentions: &[&str]) {
    assert_failed(outcome, pb::RunStatus::ScriptError, "guest_fault", &["the guest crashed"]);
    assert_failed(outcome, pb::RunStatus::ScriptError, "guest_fault", mentions);
}

#[tokio::test]
async fn unreachable_is_a_guest_fault() {
    assert_guest_fault(&hostile("wat-unreachable", Default::default()).await, &["unreachable"]);
}

#[tokio::test]
async fn a_guest_that_never_calls_finish_is_a_guest_fault() {
    assert_guest_fault(&hostile("wat-no-finish", Default::default()).await, &["without reporting an outcome"]);
}

#[tokio::test]
async fn a_guest_without_start_is_a_guest_fault() {
    assert_guest_fault(&hostile("wat-no-start", Default::default()).await, &["no `_start`"]);
}

#[tokio::test]
async fn a_guest_that_exports_no_memory_is_a_guest_fault() {
    assert_guest_fault(&hostile("wat-no-memory", Default::default()).await, &["exports no `memory`"]);
}

#[tokio::test]
async fn a_store_out_of_bounds_is_a_guest_fault() {
    assert_guest_fault(&hostile("wat-oob-store", Default::default()).await, &["out of bounds"]);
}

#[tokio::test]
async fn a_response_buffer_past_the_end_of_memory_is_a_guest_fault() {
    let outcome = hostile("wat-oob-take", Default::default()).await;
    assert_guest_fault(&outcome, &["take_response", "out of bounds"]);
}

#[tokio::test]
async fn a_call_buffer_that_wraps_the_address_space_is_a_guest_fault() {
    let outcome = hostile("wat-wrapping-call", Default::default()).await;
    assert_guest_fault(&outcome, &["buffer is out of bounds"]);
}

#[tokio::test]
async fn a_loop_forever_ends_at_the_cpu_limit() {
    let outcome = hostile("wat-loop", pb::Limits { cpu_time_ms: 300, ..Default::default() }).await;
    assert_failed(&outcome, pb::RunStatus::LimitExceeded, "cpu_time_limit", &["cpu_time_ms"]);
}

#[tokio::test]
async fn growing_memory_forever_ends_at_the_memory_limit() {
    let outcome =
        hostile("wat-grow", pb::Limits { memory_bytes: 32 << 20, cpu_time_ms: 5000, ..Default::default() }).await;
    assert_failed(&outcome, pb::RunStatus::LimitExceeded, "memory_limit", &["memory_bytes"]);
}

#[tokio::test]
async fn an_initial_memory_over_the_cap_ends_at_the_memory_limit() {
    // 128 MiB declared up front, under a 64 MiB cap: refused at instantiation.
    let outcome = hostile("wat-big-initial", pb::Limits { memory_bytes: 64 << 20, ..Default::default() }).await;
    assert_failed(&outcome, pb::RunStatus::LimitExceeded, "memory_limit", &["memory_bytes"]);
}

#[tokio::test]
async fn unbounded_recursion_ends_at_the_stack_limit() {
    let outcome = hostile("wat-recursion", Default::default()).await;
    assert_failed(&outcome, pb::RunStatus::LimitExceeded, "stack_limit", &["stack"]);
}

#[tokio::test]
async fn an_indirect_call_out_of_the_table_is_a_guest_fault() {
    assert_guest_fault(&hostile("wat-table-oob", Default::default()).await, &["table"]);
}

#[tokio::test]
async fn a_division_by_zero_is_a_guest_fault() {
    assert_guest_fault(&hostile("wat-divide-by-zero", Default::default()).await, &["divide by zero"]);
}

#[tokio::test]
async fn a_trap_after_finish_discards_the_outcome() {
    // Reporting success and then crashing must not pass for success.
    assert_guest_fault(&hostile("wat-finish-then-trap", Default::default()).await, &["unreachable"]);
}

#[tokio::test]
async fn a_start_section_that_spins_ends_at_the_cpu_limit() {
    // The start function runs inside instantiation, before `_start`: the CPU
    // limit must already be in force there.
    let outcome = hostile("wat-start-section-spin", pb::Limits { cpu_time_ms: 300, ..Default::default() }).await;
    assert_failed(&outcome, pb::RunStatus::LimitExceeded, "cpu_time_limit", &["cpu_time_ms"]);
}

#[tokio::test]
async fn a_start_section_that_traps_is_a_guest_fault() {
    assert_guest_fault(&hostile("wat-start-section-trap", Default::default()).await, &["unreachable"]);
}

/// Guests the sidecar must refuse to load, and words the refusal must hold.
const UNLOADABLE: &[(&str, &str, &[&str])] = &[
    (
        "imports-tether-open-socket",
        r#"(module (import "tether_v1" "open_socket" (func (param i32 i32) (result i32)))
            (memory (export "memory") 1) (func (export "_start")))"#,
        &["tether_v1", "open_socket"],
    ),
    (
        "imports-wasmedge-sock-open",
        r#"(module (import "wasi_snapshot_preview1" "sock_open" (func (param i32 i32 i32) (result i32)))
            (memory (export "memory") 1) (func (export "_start")))"#,
        &["wasi_snapshot_preview1", "sock_open"],
    ),
    (
        "imports-wasi-p2-sockets",
        r#"(module (import "wasi:sockets/tcp-create-socket@0.2.0" "create-tcp-socket" (func (param i32 i32)))
            (memory (export "memory") 1) (func (export "_start")))"#,
        &["wasi:sockets/tcp-create-socket@0.2.0", "create-tcp-socket"],
    ),
    (
        "imports-env-system",
        r#"(module (import "env" "system" (func (param i32) (result i32)))
            (memory (export "memory") 1) (func (export "_start")))"#,
        &["env", "system"],
    ),
    (
        "imports-host-memory",
        r#"(module (import "env" "memory" (memory 1)) (func (export "_start")))"#,
        &["env", "memory"],
    ),
    (
        "imports-call-with-wrong-type",
        r#"(module (import "tether_v1" "call" (func (param i64) (result i64)))
            (memory (export "memory") 1) (func (export "_start")))"#,
        &["tether_v1", "call", "type"],
    ),
    (
        "imports-fd-write-with-wrong-type",
        r#"(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32) (result i32)))
            (memory (export "memory") 1) (func (export "_start")))"#,
        &["wasi_snapshot_preview1", "fd_write", "type"],
    ),
];

#[tokio::test]
async fn guests_importing_what_the_host_does_not_provide_are_refused_at_load() {
    for (name, wat, mentions) in UNLOADABLE {
        let mut config = test_config();
        config.extra_runtimes = vec![(name.to_string(), compile(name, wat))];
        let error = Sidecar::new(config).expect_err(name).to_string();
        assert!(error.contains(&format!("the `{name}` guest cannot be loaded")), "{name}: {error}");
        for word in *mentions {
            assert!(error.contains(word), "{name}: expected `{word}` in: {error}");
        }
    }
    assert_still_works(&shared_client().await).await;
}

#[tokio::test]
async fn bytes_that_are_not_wasm_are_refused_at_load() {
    let mut config = test_config();
    config.extra_runtimes = vec![("not-wasm".into(), b"\0asm\x01\0\0\0 this is not a module".to_vec())];
    let error = Sidecar::new(config).expect_err("not wasm").to_string();
    assert!(error.contains("the `not-wasm` guest cannot be loaded"), "{error}");
    assert_still_works(&shared_client().await).await;
}

#[tokio::test]
async fn a_memory_larger_than_any_run_may_have_is_refused_at_load() {
    // 512 MiB declared up front, over the sidecar's 256 MiB per-run maximum.
    let mut config = test_config();
    let wat = r#"(module (memory (export "memory") 8192) (func (export "_start")))"#;
    config.extra_runtimes = vec![("huge-memory".into(), compile("huge-memory", wat))];
    let error = Sidecar::new(config).expect_err("huge memory").to_string();
    assert!(error.contains("the `huge-memory` guest cannot be loaded"), "{error}");
    assert!(error.contains("memory"), "{error}");
    assert_still_works(&shared_client().await).await;
}
