//! The operator's view of the real `tether-sidecar` process, over real
//! sockets: drain on SIGTERM/SIGINT, health and readiness, gRPC reflection,
//! Prometheus metrics, logs and traces (`docs/operating.md`), memory given
//! back after a burst, a Python client following the wire contract, and faults (processes killed mid-run,
//! hanging tools, stalled connections). One binary, one module per area.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub)]

mod support;

mod access;
mod bounds;
mod drain;
mod faults;
mod hardening;
mod health;
mod memory;
mod metrics;
mod python_client;
mod reflection;
mod run_bounds;
mod telemetry;
mod user_switch;
