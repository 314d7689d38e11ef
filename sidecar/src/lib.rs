//! The Tether sidecar: runs scripts in a network-less wasmtime sandbox and
//! sends every tool call back over the gRPC stream the backend opened.
//!
//! Where things are:
//! - [`server`]: the sidecar as a whole, served over TCP or a Unix socket
//! - [`service`]: the `tether.v1` gRPC service; one task per run
//! - [`run`]: one run — a fresh store and instance, `_start`, its end
//! - [`calls`]: the per-script call cap, forwarding calls, waiting on results
//! - [`slots`]: execution slots and the bounded queues
//! - [`cpu`], [`memory`], [`output`]: the CPU, memory and output limits
//! - [`config`]: every limit and its default
//! - [`engine`], [`module_cache`], [`abi`]: wasmtime, compiled guests, `tether_v1`
//! - [`error`]: how runs end and what the backend is told

pub mod abi;
pub mod calls;
pub mod config;
pub mod cpu;
pub mod engine;
pub mod error;
pub mod memory;
pub mod module_cache;
pub mod output;
pub mod run;
pub mod server;
pub mod service;
pub mod slots;
pub mod state;

pub use config::{Limits, SidecarConfig};
pub use error::{LimitExceeded, RunEnd};
pub use server::{Sidecar, SidecarError};
