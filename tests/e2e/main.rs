//! End-to-end tests: a real sidecar served on loopback, a real backend client,
//! real gRPC, the real Python guest. One binary, so the guest is compiled (or
//! loaded from the cache) once per process.

#![allow(unreachable_pub, missing_docs, clippy::unwrap_used, clippy::expect_used)]
mod support;

mod agent;
mod agent_scripts;
mod audit_postgres;
mod cancel_storm;
mod conformance;
mod corpus;
mod disconnect;
mod hostile;
mod limits;
mod parking;
mod prepare_cache;
mod protocol;
mod python_depth;
mod python_json;
mod python_language;
mod python_modules;
mod python_runtime;
mod python_sizes;
mod python_tracebacks;
mod rust_guest;
mod scenario;
mod script_errors;
mod shared;
mod tools;
mod turn;
mod walls;
