//! The Rust library an agent backend embeds to run scripts in a Tether sidecar.
//!
//! Where things are:
//! - [`agent`]: [`agent::AgentLoop`] — the agent loop on an OpenAI-compatible
//!   endpoint — and [`agent::PeerAgents`], peer agents as tools
//! - [`client`]: [`SidecarClient`] — connect, open a run's stream, serve its calls
//! - [`handler`]: [`CallHandler`], the trait through which a backend answers
//!   every call a script makes
//! - [`outcome`]: [`RunOutcome`], how a run ended
//! - [`error`]: [`ClientError`], why a run could not be carried out
//! - [`turn`]: [`Turn`] — the one execution path every tool call goes through,
//!   the model's and every script's: checks, approval, audit log, effect ledger
//!   (in SQLite, PostgreSQL or memory, chosen by URL: [`open_audit_store`])
//! - [`telemetry`]: logs and traces — text or JSON log lines, and spans
//!   exported over OTLP, one trace from the model's `run_script` call through
//!   the sidecar to every call the script makes (`docs/operating.md`)
//! - [`tools`]: [`ToolSet`] — tools from a `tether.toml`: MCP servers and the
//!   built-in kinds `http`, `command`, `sqlite`, `static`

pub mod agent;
pub mod client;
pub mod error;
pub mod handler;
mod http_client;
pub mod outcome;
pub mod tools;
pub mod turn;

/// Logs and traces: set them up with
/// `telemetry::TelemetryConfig::new("my-backend").otlp_endpoint(Some(url)).init()`,
/// or add [`telemetry::otlp_layer`] to a subscriber of your own; call
/// [`telemetry::Telemetry::shutdown`] before exiting.
pub use tether_telemetry as telemetry;

pub use client::{ClientAuth, ClientTls, ConnectOptions, Keepalive, RunRequest, SidecarClient};
pub use error::ClientError;
pub use handler::{CallHandler, RefusedCall, ScriptCall, ToolOutcome};
pub use outcome::RunOutcome;
pub use tether_proto::pb;
pub use tools::{Config, ToolSet};
pub use turn::{
    CallOrigin, CallRequest, CallResult, Code, PostgresAuditStore, ScriptTool, SqliteAuditStore, Step, ToolDef, Turn,
    TurnBuilder, open_audit_store,
};
