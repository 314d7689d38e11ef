//! The Tether sidecar: runs scripts in a network-less wasmtime sandbox and
//! sends every tool call back over the gRPC stream the backend opened.
//!
//! Where things are:
//! - `server`: the sidecar as a whole, served over TCP or a Unix socket
//! - `embedded`: a sidecar served inside the backend's own process, on loopback
//! - `lifecycle`: loading → ready → draining → stopped; tracks every run
//! - `loader`: the engine, built at once or on a background thread
//! - `idle`: gives the instance pool and malloc's free memory back once the sidecar is idle
//! - `signals`: SIGTERM and SIGINT, which drain the sidecar
//! - `health`: `grpc.health.v1`: readiness and liveness from the phase
//! - `metrics`, `metrics_endpoint`: every Prometheus metric; `GET /metrics`
//! - `connections`: every listener's accept loop: connection limit, handshake deadline, EMFILE back-off
//! - `log_limit`: rate-limited log lines for what a peer can cause at will
//! - `auth`: who may open runs (peer uid/gid, bearer token, mTLS), one gate per listener
//! - `harden`: process hardening at start (no new privileges, no core dumps, user drop)
//! - `socket_file`: the Unix socket's file: its owner, group and mode, removed on exit
//! - `unix_authority`: mends the `:authority` clients send on a Unix socket
//! - `workers`: the threads a listener's connections and runs execute on, one runtime each
//! - `service`: the `tether.v1` gRPC service: admits runs, drives each to its end
//! - `driven`: runs driven by their own response stream; the sweeper for stalled ones
//! - `run`: one run — a fresh store and instance, `_start`, its end
//! - `calls`: the per-script call cap, the calls the sidecar refuses, forwarding
//! - `stream`: a run's side of its stream (outbound messages, results owed)
//! - `slots`: execution slots and the bounded queues; a slot's whole lifecycle
//! - `cpu`, `memory`, `output`: the CPU, memory and output limits
//! - `park`: parked runs' sealed state, and its checks on resume
//! - `config`: every limit and its default
//! - `engine`, `module_cache`, `abi`, `state`: wasmtime, compiled guests,
//!   `tether_v1`, what a run's store holds
//! - `error`: how runs end, who is to blame, and the one gRPC status mapping
//! - `fuzzing` (hidden): the call path without wasmtime, for the fuzz targets in `fuzz/`

mod abi;
mod auth;
mod calls;
mod config;
mod connections;
mod cpu;
mod driven;
mod embedded;
mod engine;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod harden;
mod health;
mod idle;
mod lifecycle;
mod loader;
mod log_limit;
mod memory;
mod metrics;
mod metrics_endpoint;
mod module_cache;
mod output;
mod park;
mod run;
mod server;
mod service;
mod signals;
mod slots;
mod socket_file;
mod state;
mod stream;
mod unix_authority;
mod workers;

pub use auth::{Access, AccessError, BearerToken, MutualTls, PeerPolicy, TcpAccess};
pub use config::{DEFAULT_DRAIN_DEADLINE, Limits, MAX_SENT_MESSAGE_BYTES, ParkConfig, SidecarConfig};
pub use connections::{ConnectionLimits, STREAMS_BESIDE_RUNS};
pub use embedded::{EmbeddedError, EmbeddedSidecar};
pub use engine::{EPOCH_TICK, EngineError, prepare_cache};
pub use harden::{HardenError, HardenReport, Hardening, RunAs};
pub use health::{LIVENESS_SERVICE, READINESS_SERVICES};
pub use lifecycle::{DrainReport, Phase};
pub use module_cache::{CacheDirError, claim_cache_dir, default_cache_dir, default_cache_dir_for_user};
pub use park::{ParkKey, ParkKeyFileError, ShortParkKey, default_park_key_file};
pub use server::{Sidecar, SidecarError};
pub use service::SidecarService;
pub use signals::ShutdownSignals;
pub use socket_file::{SocketAccess, SocketError, SocketFile};
