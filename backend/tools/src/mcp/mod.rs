//! MCP servers as tool sources, through the official Rust SDK (`rmcp`).
//!
//! ```toml
//! [mcp.files]
//! command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "./data"]  # stdio: spawned by the backend
//! # url = "http://127.0.0.1:8080/mcp"          # or streamable HTTP (then `headers`, not `command`)
//! # headers = { Authorization = "Bearer ${FILES_TOKEN}" }
//! env = { NODE_NO_WARNINGS = "1" }             # stdio: added to the backend's environment
//! prefix = "files_"                            # the tools join as files_read_text_file, …
//! include = ["read_*", "list_directory"]       # globs over the server's tool names (default: all)
//! startup_timeout = "30s"                      # default 30s: spawn, initialize, list tools
//! trust_annotations = false                    # true: readOnlyHint / idempotentHint set read_only / replay
//! timeout = "20s"                              # metadata keys here are defaults for every tool
//!
//! [mcp.files.tools.write_file]                 # one tool, by the server's name for it
//! requires_approval = true
//! description = "Write a file under ./data."   # replaces the server's description
//! ```
//!
//! - `config` (here): the `[mcp.<name>]` keys, checked
//! - `server`: one running server — started when the tool set starts,
//!   restarted on the next call after it died, closed when the set is
//! - `tools`: the server's listed tools as the turn's tools, and results
//!   mapped to JSON

mod client;
mod exit;
mod server;
mod tools;

pub(crate) use client::ProgressSink;
pub(crate) use server::McpServer;
pub use server::ServerStatus;
pub(crate) use tools::server_tools;

use super::command::Argv;
use super::error::ConfigError;
use super::meta::{META_KEYS, MetaEntry, parse_duration};
use super::read::{At, check_keys, split};
use reqwest::header::{HeaderName, HeaderValue};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// The keys of `[mcp.<name>]` besides the metadata defaults.
const SERVER_KEYS: [&str; 10] =
    ["command", "url", "env", "cwd", "headers", "prefix", "include", "startup_timeout", "trust_annotations", "tools"];
/// The keys of `[mcp.<name>.tools.<tool>]` besides the metadata.
const TOOL_KEYS: [&str; 1] = ["description"];
const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Deserialize)]
struct Raw {
    command: Option<Vec<String>>,
    url: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    prefix: String,
    include: Option<Vec<String>>,
    startup_timeout: Option<String>,
    #[serde(default)]
    trust_annotations: bool,
}

#[derive(Debug, Deserialize)]
struct RawTool {
    description: Option<String>,
}

/// How the backend reaches a server.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    /// A process the backend spawns, speaking MCP on its stdin and stdout.
    Stdio(Argv),
    /// A streamable HTTP endpoint.
    Http {
        /// The endpoint.
        url: String,
        /// Sent with every request (values marked sensitive).
        headers: HashMap<HeaderName, HeaderValue>,
    },
}

/// One `[mcp.<name>]` server, checked.
#[derive(Debug, Clone)]
pub(crate) struct ServerConfig {
    pub(crate) name: String,
    pub(crate) key: String,
    pub(crate) transport: Transport,
    pub(crate) prefix: String,
    pub(crate) include: Option<Vec<String>>,
    pub(crate) startup_timeout: Duration,
    pub(crate) trust_annotations: bool,
    /// Defaults for every tool of the server.
    pub(crate) meta: MetaEntry,
    /// `[mcp.<name>.tools.<tool>]`, by the server's tool name.
    pub(crate) tools: BTreeMap<String, ToolOverride>,
}

/// `[mcp.<name>.tools.<tool>]`, checked.
#[derive(Debug, Clone, Default)]
pub(crate) struct ToolOverride {
    pub(crate) description: Option<String>,
    pub(crate) meta: MetaEntry,
}

impl ServerConfig {
    /// Reads `[mcp.<name>]` at `at`.
    pub(crate) fn read(at: At<'_>, name: &str, entry: &toml::Value) -> Result<ServerConfig, ConfigError> {
        let Some(table) = entry.as_table() else {
            return Err(at.error("", "must be a table").fix(format!("write `[mcp.{name}]` followed by its keys")));
        };
        let allowed: Vec<&str> = SERVER_KEYS.iter().chain(META_KEYS.iter()).copied().collect();
        check_keys(&at, table, &allowed)?;
        let raw: Raw = at.read(&split(table, &SERVER_KEYS[..9]), &SERVER_KEYS)?;
        let meta = read_meta(&at, table)?;
        let transport = match (raw.command, raw.url) {
            (Some(command), None) => {
                if !raw.headers.is_empty() {
                    return Err(at
                        .error("headers", "applies to an HTTP server only")
                        .fix("pass values to a stdio server in `env`"));
                }
                Transport::Stdio(Argv::read(&at, Some(command), raw.cwd, raw.env)?)
            }
            (None, Some(url)) => {
                if !raw.env.is_empty() || raw.cwd.is_some() {
                    return Err(at
                        .error(if raw.cwd.is_some() { "cwd" } else { "env" }, "applies to a stdio server only")
                        .fix("an HTTP server runs elsewhere; send values in `headers`"));
                }
                let url = at.expand("url", &url)?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(at
                        .error("url", format!("`{url}` is not an http(s) URL"))
                        .fix("e.g. `url = \"http://127.0.0.1:8080/mcp\"`"));
                }
                Transport::Http { url, headers: headers(&at, raw.headers)? }
            }
            (Some(_), Some(_)) => {
                return Err(at.error("", "has both `command` and `url`").fix("keep `command` for a server the backend spawns (stdio), or `url` for one it connects to (streamable HTTP)"));
            }
            (None, None) => {
                return Err(at.error("", "has neither `command` nor `url`").fix(
                    "add `command = [\"program\", \"arg\"]` (stdio) or `url = \"http://host/mcp\"` (streamable HTTP)",
                ));
            }
        };
        let startup_timeout = match raw.startup_timeout {
            Some(text) => parse_duration(&text).map_err(|p| at.error("startup_timeout", p))?,
            None => DEFAULT_STARTUP_TIMEOUT,
        };
        let mut tools = BTreeMap::new();
        match table.get("tools") {
            None => {}
            Some(toml::Value::Table(entries)) => {
                for (tool, entry) in entries {
                    let at = At { key: format!("{}.tools.{tool}", at.key), ..at.clone() };
                    let Some(entry) = entry.as_table() else {
                        return Err(at
                            .error("", "must be a table")
                            .fix(format!("write `[mcp.{name}.tools.{tool}]` followed by its keys")));
                    };
                    let allowed: Vec<&str> = TOOL_KEYS.iter().chain(META_KEYS.iter()).copied().collect();
                    check_keys(&at, entry, &allowed)?;
                    let own: RawTool = at.read(&split(entry, &TOOL_KEYS), &TOOL_KEYS)?;
                    tools.insert(
                        tool.clone(),
                        ToolOverride { description: own.description, meta: read_meta(&at, entry)? },
                    );
                }
            }
            Some(_) => {
                return Err(at
                    .error("tools", "must be a table of tools")
                    .fix(format!("write `[mcp.{name}.tools.<tool>]`")));
            }
        }
        Ok(ServerConfig {
            name: name.to_owned(),
            key: at.key.clone(),
            transport,
            prefix: raw.prefix,
            include: raw.include,
            startup_timeout,
            trust_annotations: raw.trust_annotations,
            meta,
            tools,
        })
    }

    /// For messages: ``the MCP server `files` ``.
    pub(crate) fn describe(&self) -> String {
        format!("the MCP server `{}`", self.name)
    }

    /// True when the server's tool `name` is wanted (`include`).
    pub(crate) fn includes(&self, name: &str) -> bool {
        match &self.include {
            None => true,
            Some(globs) => globs.iter().any(|g| tether_turn::glob_match(g, name)),
        }
    }
}

fn read_meta(at: &At<'_>, table: &toml::Table) -> Result<MetaEntry, ConfigError> {
    let meta: MetaEntry = at.read(&split(table, &META_KEYS), &META_KEYS)?;
    meta.to_meta(false).map_err(|(key, problem)| at.error(key, problem))?;
    Ok(meta)
}

fn headers(at: &At<'_>, raw: BTreeMap<String, String>) -> Result<HashMap<HeaderName, HeaderValue>, ConfigError> {
    raw.iter().map(|(name, value)| super::http::header(at, name, value)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vars::Vars;
    use std::path::Path;

    fn read(text: &str) -> Result<ServerConfig, ConfigError> {
        let vars = Vars::from_env();
        let at = At { file: Path::new("/c/tether.toml"), key: "mcp.files".into(), vars: &vars };
        ServerConfig::read(at, "files", &toml::Value::Table(text.parse().unwrap()))
    }

    #[test]
    fn a_stdio_server_with_defaults_and_one_tool_override() {
        let server = read("command = [\"node\", \"s.js\"]\nprefix = \"fs_\"\nread_only = true\ninclude = [\"read_*\"]\n[tools.write_file]\nrequires_approval = true\nread_only = false\n").unwrap();
        assert!(
            matches!(server.transport, Transport::Stdio(ref a) if a.argv == ["node", "s.js"] && a.cwd == Path::new("/c/."))
        );
        assert_eq!(server.prefix, "fs_");
        assert_eq!(server.meta.read_only, Some(true));
        assert_eq!(server.tools["write_file"].meta.requires_approval, Some(true));
        assert!(server.includes("read_text_file") && !server.includes("write_file"));
        assert_eq!(server.startup_timeout, DEFAULT_STARTUP_TIMEOUT);
    }

    #[test]
    fn a_server_needs_exactly_one_way_in() {
        assert!(
            read("prefix = \"x\"").unwrap_err().to_string().contains("has neither `command` nor `url`; add `command")
        );
        assert!(read("command = [\"a\"]\nurl = \"http://h\"").unwrap_err().to_string().contains("has both"));
        assert!(
            read("url = \"http://h/mcp\"\nenv = { A = \"1\" }")
                .unwrap_err()
                .to_string()
                .contains("`mcp.files.env`: applies to a stdio server only")
        );
        assert!(
            read("command = [\"a\"]\nheaders = { A = \"1\" }")
                .unwrap_err()
                .to_string()
                .contains("applies to an HTTP server only")
        );
    }

    #[test]
    fn typos_in_a_server_or_a_tool_override_name_the_key() {
        let server = read("comand = [\"a\"]").unwrap_err().to_string();
        assert!(server.contains("`mcp.files.comand`: unknown key; did you mean `command`?"), "{server}");
        let tool = read("command = [\"a\"]\n[tools.write_file]\nrequires_aproval = true").unwrap_err().to_string();
        assert!(
            tool.contains(
                "`mcp.files.tools.write_file.requires_aproval`: unknown key; did you mean `requires_approval`?"
            ),
            "{tool}"
        );
        let timeout = read("command = [\"a\"]\nstartup_timeout = \"soon\"").unwrap_err().to_string();
        assert!(timeout.contains("`mcp.files.startup_timeout`: `soon` is not a duration"), "{timeout}");
    }
}
