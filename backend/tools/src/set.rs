//! [`ToolSet`]: a configuration's tools, ready to join turns, and the owner
//! of the MCP servers behind them.
//!
//! MCP servers are started when the set starts, not lazily on a first call:
//! the turn's tool list — the very list the model sees and a script is
//! started with — must hold each server's tools with their schemas, and only
//! a running server can say what they are. A server that dies later is
//! started again on the next call of one of its tools.

use super::catalog::{KindConfig, ToolConfig, ToolsConfig};
use super::error::{ConfigError, ToolsError};
use super::mcp::{self, McpServer, ServerStatus, Transport};
use super::read::At;
use super::vars::Vars;
use std::sync::Arc;
use tether_turn::{Tool, ToolExecutor, ToolSpec, TurnBuilder};

/// The tools of a [`ToolsConfig`], ready for turns.
///
/// Ownership: the set owns its MCP servers; each tool holds its server too,
/// so a server lives while the set or any turn listing its tools does.
/// [`ToolSet::shutdown`] ends them all and waits; dropping the last holder
/// ends a server without waiting (inside a Tokio runtime).
#[derive(Debug)]
pub struct ToolSet {
    tools: Vec<Tool>,
    /// Where each tool comes from, by index: `sqlite (tools[0])`, ``the MCP server `files` ``.
    sources: Vec<String>,
    servers: Vec<Arc<McpServer>>,
}

impl ToolSet {
    /// Builds every tool of `config`, starting its MCP servers (all at once,
    /// each within its `startup_timeout`). A server that does not start is
    /// not an error: the tools its config names join as stand-ins whose
    /// calls try to start it again, and [`ToolSet::servers`] says why it is
    /// down.
    ///
    /// # Errors
    /// [`ToolsError::Config`] when the config names a tool a running server
    /// does not list, or two sources give tools the same name;
    /// [`ToolsError::Client`] when the HTTP client cannot be set up.
    pub async fn start(config: &ToolsConfig) -> Result<ToolSet, ToolsError> {
        let needs_http = config.tools.iter().any(|t| matches!(t.kind, KindConfig::Http(_)))
            || config.servers.iter().any(|s| matches!(s.transport, Transport::Http { .. }));
        let http = if needs_http { Some(crate::http_client().map_err(ToolsError::Client)?) } else { None };

        let mut tools = Vec::new();
        let mut sources = Vec::new();
        for entry in &config.tools {
            let (spec, executor) = builtin(config, entry, &http)?;
            tools.push(Tool::new(spec, executor)?);
            sources.push(format!("{} ({})", entry.kind.name(), entry.key));
        }
        let servers: Vec<Arc<McpServer>> =
            config.servers.iter().map(|s| Arc::new(McpServer::new(s.clone(), http.clone()))).collect();
        let listed = futures::future::join_all(servers.iter().map(|s| s.start())).await;
        let set = ToolSet { tools, sources, servers };
        match set.join_servers(config, listed) {
            Ok((tools, sources)) => Ok(ToolSet { tools, sources, ..set }),
            Err(error) => {
                set.shutdown().await;
                Err(error.into())
            }
        }
    }

    fn join_servers(
        &self,
        config: &ToolsConfig,
        listed: Vec<Result<Vec<rmcp::model::Tool>, String>>,
    ) -> Result<(Vec<Tool>, Vec<String>), ConfigError> {
        let vars = Vars::from_env();
        let (mut tools, mut sources) = (self.tools.clone(), self.sources.clone());
        for (server, listed) in self.servers.iter().zip(listed) {
            let at = At { file: &config.path, key: server.config.key.clone(), vars: &vars };
            let listed = listed.map_err(|error| tracing::warn!(server = %server.config.name, %error, "MCP server did not start; its tools fail until it does")).ok();
            for (spec, executor) in mcp::server_tools(server, listed, &at)? {
                if let Some(i) = tools.iter().position(|t| t.name() == spec.name) {
                    return Err(at
                        .error("", format!("its tool `{}` has the name of `{}`", spec.name, sources[i]))
                        .fix("give the server a `prefix`, or rename the other tool"));
                }
                match Tool::new(spec, executor) {
                    Ok(tool) => {
                        tools.push(tool);
                        sources.push(server.config.describe());
                    }
                    // The server's own mistake: one unusable tool, not a broken set.
                    Err(error) => {
                        tracing::warn!(server = %server.config.name, %error, "leaving out a tool whose schema does not compile")
                    }
                }
            }
        }
        Ok((tools, sources))
    }

    /// Each tool with where it comes from (``sqlite (tools[0])``,
    /// ``the MCP server `files` ``), in the order of [`ToolSet::tools`].
    pub fn sources(&self) -> impl Iterator<Item = (&Tool, &str)> {
        self.tools.iter().zip(self.sources.iter().map(String::as_str))
    }

    /// The tools, in file order: `[[tools]]` first, then each server's.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// `builder` with every tool of the set added.
    pub fn add_to(&self, builder: TurnBuilder) -> TurnBuilder {
        self.tools.iter().cloned().fold(builder, TurnBuilder::add_tool)
    }

    /// Each MCP server: how it is reached, and why it is down if it is.
    pub async fn servers(&self) -> Vec<ServerStatus> {
        let mut statuses = Vec::with_capacity(self.servers.len());
        for server in &self.servers {
            statuses.push(server.status().await);
        }
        statuses
    }

    /// Ends every MCP server and waits for each (at most a few seconds per
    /// server); later calls of their tools are refused as not made.
    pub async fn shutdown(&self) {
        futures::future::join_all(self.servers.iter().map(|s| s.close())).await;
    }
}

/// A `[[tools]]` entry's spec and executor.
fn builtin(
    config: &ToolsConfig,
    entry: &ToolConfig,
    http: &Option<reqwest::Client>,
) -> Result<(ToolSpec, Arc<dyn ToolExecutor>), ToolsError> {
    let (default_schema, read_only_default, executor) = match &entry.kind {
        KindConfig::Http(kind) => {
            let Some(client) = http.clone() else { return Err(ToolsError::Client("no HTTP client was set up".into())) };
            (kind.default_input_schema(), kind.read_only_default(), kind.executor(&entry.name, client))
        }
        KindConfig::Command(kind) => {
            (kind.default_input_schema(), kind.read_only_default(), kind.executor(&entry.name))
        }
        KindConfig::Sqlite(kind) => (kind.default_input_schema(), kind.read_only_default(), kind.executor(&entry.name)),
        KindConfig::Static(kind) => (kind.default_input_schema(), kind.read_only_default(), kind.executor()),
    };
    let meta = entry
        .meta
        .to_meta(read_only_default)
        .map_err(|(key, problem)| ConfigError::new(&config.path, format!("{}.{key}", entry.key), problem))?;
    let mut spec =
        ToolSpec::new(&entry.name, &entry.description, entry.input_schema.clone().unwrap_or(default_schema)).meta(meta);
    if let Some(output) = &entry.output_schema {
        spec = spec.output_schema(output.clone());
    }
    Ok((spec, executor))
}
