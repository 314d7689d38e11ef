//! The Rust library an agent backend embeds to run scripts in a Tether
//! sidecar: one crate over the parts, so a backend names one dependency, and
//! the reader of `tether.toml`, which stands above the tools and the agents.
//!
//! The parts, each a crate of its own (`tether_backend::X` is the crate):
//! - [`turn`] (`tether-turn`): [`Turn`] — the one execution path every tool
//!   call goes through, the model's and every script's: checks, approval,
//!   records, the [`AuditStore`](turn::AuditStore) trait and the in-memory
//!   store. No transport and no database driver. Here it also carries the
//!   SQL stores and `run_script`, so `turn::` names everything a turn uses
//! - [`stores`] (`tether-stores`): the audit stores — SQLite, PostgreSQL,
//!   chosen by URL ([`open_audit_store`])
//! - [`client`] (`tether-client`): [`SidecarClient`] — connect, open a run's
//!   stream, serve its calls — and [`ScriptTool`], the script tool
//! - [`tools`] (`tether-tools`): [`ToolSet`] — tools from a `tether.toml`:
//!   MCP servers and the built-in kinds `http`, `command`, `sqlite`, `static`
//! - [`agent`] (`tether-agent`): [`agent::AgentLoop`] — the agent loop on an
//!   OpenAI-compatible endpoint — and [`agent::PeerAgents`], peer agents as tools
//! - [`telemetry`]: logs and traces — text or JSON log lines, and spans
//!   exported over OTLP, one trace from the model's `run_script` call through
//!   the sidecar to every call the script makes (`docs/operating.md`)
//!
//! This crate's own: [`Config`] (`config`, `sections`), the file's reader.

mod config;
mod sections;
mod serve;

pub use tether_agent as agent;
pub use tether_stores as stores;
/// Logs and traces: set them up with
/// `telemetry::TelemetryConfig::new("my-backend").otlp_endpoint(Some(url)).init()`,
/// or add [`telemetry::otlp_layer`] to a subscriber of your own; call
/// [`telemetry::Telemetry::shutdown`] before exiting.
pub use tether_telemetry as telemetry;

/// The turn (`tether-turn`), with the SQL audit stores (`tether-stores`)
/// and the script tool (`tether-client`) a turn is built with.
pub mod turn {
    pub use tether_client::{Answers, Resumed, SCRIPT_TOOL_NAME, ScriptTool};
    pub use tether_stores::{
        AuditStoreUrl, DEFAULT_APPLICATION_NAME, DEFAULT_CONNECT_TIMEOUT, DEFAULT_QUEUE_CAPACITY, PostgresAuditStore,
        SqliteAuditStore, open_audit_store,
    };
    pub use tether_turn::*;
}

/// Tools from a `tether.toml` (`tether-tools`), with the file's reader.
pub mod tools {
    pub use crate::config::Config;
    pub use crate::sections::TurnSection;
    pub use crate::serve::{ApprovalFallback, ServeSection};
    pub use tether_tools::*;
}

/// The sidecar client (`tether-client`).
pub mod client {
    pub use tether_client::*;
}

pub use client::{
    CallHandler, ClientAuth, ClientError, ClientTls, ConnectOptions, Keepalive, RefusedCall, RunOutcome, RunRequest,
    ScriptCall, SidecarClient, ToolOutcome,
};
pub use config::Config;
pub use sections::TurnSection;
pub use tether_proto::pb;
pub use tools::ToolSet;
pub use turn::{
    CallOrigin, CallRequest, CallResult, Code, PostgresAuditStore, ScriptTool, SqliteAuditStore, Step, ToolDef, Turn,
    TurnBuilder, open_audit_store,
};
