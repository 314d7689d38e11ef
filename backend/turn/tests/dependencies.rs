//! The crate graph keeps each part to its job: the turn needs no transport
//! and no database driver, and the Python package compiles none of the tool
//! kinds' clients. Read from `cargo tree` over the lock file, with the
//! `workspace-hack` crate pruned (it unifies features for one set of build
//! artifacts, and so names every dependency of the workspace).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::Command;

/// Transports, database drivers, tool-kind clients and the Wasm runtime.
const HEAVY: [&str; 11] = [
    "tonic",
    "h2",
    "hyper",
    "opentelemetry-otlp",
    "rusqlite",
    "postgres",
    "tokio-postgres",
    "reqwest",
    "rmcp",
    "process-wrap",
    "wasmtime",
];

/// Every package `package` depends on (normal dependencies, this platform).
fn dependencies(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["tree", "--locked", "-p", package, "-e", "normal", "--prune", "workspace-hack"])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    let names: BTreeSet<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(names.contains(package), "{package} is not in its own tree: {names:?}");
    names
}

fn heavy(names: &BTreeSet<String>) -> Vec<&'static str> {
    HEAVY.into_iter().filter(|name| names.contains(*name)).collect()
}

#[test]
fn the_turn_needs_no_transport_and_no_database_driver() {
    let names = dependencies("tether-turn");
    assert!(names.contains("tether-codes") && names.contains("tokio"), "{names:?}");
    assert_eq!(heavy(&names), Vec::<&str>::new());
}

#[test]
fn the_python_package_compiles_no_tool_kind_client() {
    let names = dependencies("tether-py");
    assert!(names.contains("tether-turn") && names.contains("tether-client"), "{names:?}");
    for client in ["reqwest", "rmcp", "process-wrap"] {
        assert!(!names.contains(client), "tether-py depends on {client}");
    }
    assert!(!names.contains("tether-tools") && !names.contains("tether-agent"), "{names:?}");
}

#[test]
fn the_client_depends_on_the_turn_and_never_the_reverse() {
    assert!(dependencies("tether-client").contains("tether-turn"));
    assert!(!dependencies("tether-turn").contains("tether-client"));
    assert!(
        heavy(&dependencies("tether-stores"))
            .iter()
            .all(|name| ["rusqlite", "postgres", "tokio-postgres"].contains(name))
    );
}

/// Every package of a build, with the features it is built with: `cargo
/// tree` over `selection` (the packages `cargo build`/`cargo test` are given).
fn built_with(selection: &[&str], edges: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["tree", "--locked", "-e", edges])
        .args(selection)
        .args(["--prefix", "none", "--format", "{p} [{f}]"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().lines().map(|line| line.trim_end_matches(" (*)").to_owned()).collect()
}

#[test]
fn the_demo_and_the_python_package_reuse_what_the_test_build_compiled() {
    // `./x test` builds the workspace with its dev-dependencies; `./x demo`
    // builds `tether-cli`, maturin `tether-py`. A package built with other
    // features there would compile again (and everything above it).
    let test = built_with(&["--workspace", "--exclude", "tether-example-guest"], "normal,build,dev");
    for package in ["tether-cli", "tether-py"] {
        let own = built_with(&["-p", package], "normal,build");
        let rebuilt: Vec<&String> = own.difference(&test).collect();
        assert!(rebuilt.is_empty(), "`-p {package}` builds these with other features than `./x test`: {rebuilt:?}");
    }
}
