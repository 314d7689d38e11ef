//! Tools from a configuration file, end to end: real MCP servers (one from
//! npm that no one here wrote, and this suite's own for failure cases, over
//! stdio and streamable HTTP), the built-in kinds against real HTTP servers,
//! real processes and real SQLite files, called by the model and by Python
//! scripts in a real sidecar through a real `Turn`.
//!
//! - `mcp_npm`: `@modelcontextprotocol/server-filesystem` over stdio
//! - `mcp_failures`: a server that fails, is slow, too big, dies, never starts
//! - `kinds`: `http`, `command`, `sqlite`, `static`
//! - `config_errors`: mistakes in a file, as the person who wrote it reads them
//! - `demo`: the demo world as `tether demo` builds it

mod config_errors;
mod demo;
mod kinds;
mod mcp_failures;
mod mcp_npm;

use crate::support::sidecar;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tether_backend::tools::{Config, ToolSet, Vars};
use tether_backend::turn::{
    Approver, AuditRecord, CallOrigin, CallOutcome, CallRequest, CallResult, ScriptTool, SqliteAuditStore, Turn,
    TurnBuilder,
};
use tether_cli::embedded::EmbeddedSidecar;

/// The suite's own MCP server (`tests/src/bin/tether-mcp-test-server.rs`).
pub(super) const TEST_SERVER: &str = env!("CARGO_BIN_EXE_tether-mcp-test-server");

/// The folder `./x test` installs the npm MCP servers' commands into.
pub(super) fn npm_bin() -> PathBuf {
    let dir = std::env::var_os("TETHER_NPM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/npm/node_modules/.bin"));
    let server = dir.join("mcp-server-filesystem");
    assert!(
        server.exists(),
        "the npm MCP server `{}` is not installed: run the tests with `./x test`, which installs tests/npm/package-lock.json into target/npm",
        server.display()
    );
    dir
}

/// `text` as a config file in a fresh folder, loaded with `vars`.
pub(super) fn config(text: &str, vars: &Vars) -> (tempfile::TempDir, Config) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tether.toml");
    std::fs::write(&path, text).unwrap();
    let config = Config::load(&path, vars).unwrap_or_else(|e| panic!("the config loads: {e}"));
    (dir, config)
}

/// A turn over a tool set, `run_script` on a real sidecar, a SQLite audit store.
pub(super) struct World {
    pub(super) turn: Turn,
    pub(super) tools: ToolSet,
    _sidecar: EmbeddedSidecar,
    _audit: tempfile::TempDir,
}

impl World {
    pub(super) async fn new(tools: ToolSet, approver: Arc<dyn Approver>) -> World {
        World::with(tools, approver, |b| b).await
    }

    pub(super) async fn with(
        tools: ToolSet,
        approver: Arc<dyn Approver>,
        configure: impl FnOnce(TurnBuilder) -> TurnBuilder,
    ) -> World {
        let (sidecar, client) = sidecar().await;
        let audit = tempfile::tempdir().unwrap();
        let builder = Turn::builder("turn-tools")
            .approver(approver)
            .audit_store(Arc::new(SqliteAuditStore::new(audit.path().join("audit.db"))))
            .add_tool(ScriptTool::new(client).into_tool().unwrap());
        let turn = configure(tools.add_to(builder)).build().unwrap();
        World { turn, tools, _sidecar: sidecar, _audit: audit }
    }

    pub(super) async fn model(&self, id: &str, tool: &str, args: Value) -> CallResult {
        self.turn.execute(CallRequest::new(id, tool, args), CallOrigin::Model).await
    }

    /// Runs `code` with `input` as the model's `run_script` call `s1`; returns the script's result.
    pub(super) async fn script(&self, code: &str, input: Value) -> Value {
        let result = self.model("s1", "run_script", json!({"code": code, "input": input})).await;
        match result.outcome {
            CallOutcome::Ok(value) => value["result"].clone(),
            other => panic!("the script did not complete: {other:?}"),
        }
    }

    pub(super) async fn audit_row(&self, call_id: &str) -> AuditRecord {
        let rows = self.turn.audit_log().await.unwrap();
        rows.into_iter().find(|r| r.call.call_id == call_id).unwrap_or_else(|| panic!("no audit row for `{call_id}`"))
    }
}

/// The value of an ok result; panics with the outcome otherwise.
pub(super) fn ok(result: &CallResult) -> Value {
    match &result.outcome {
        CallOutcome::Ok(value) => value.clone(),
        other => panic!("`{}` did not return a value: {other:?}", result.tool),
    }
}

/// `(code, message)` of a failed or tool-error result.
pub(super) fn error(result: &CallResult) -> (String, String) {
    match &result.outcome {
        CallOutcome::ToolError { code, message } => (code.clone(), message.clone()),
        CallOutcome::Failed(failure) => (failure.code.as_str().to_owned(), failure.message.clone()),
        CallOutcome::Ok(value) => panic!("`{}` returned a value: {value}", result.tool),
    }
}

/// True while a process of that id exists.
pub(super) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
}
