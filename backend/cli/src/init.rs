//! `tether init`: a commented starter `tether.toml`, or one converted from
//! the MCP servers an MCP client is configured with — the `mcpServers` of
//! Claude Code's `.mcp.json`, Cursor's `.cursor/mcp.json` and Claude
//! Desktop's `claude_desktop_config.json`, or the `servers` of VS Code's
//! `.vscode/mcp.json`.

use anyhow::Context;
use serde_json::Value;
use std::path::Path;

/// The starter config `tether init` writes: one tool that works as it is,
/// and the other kinds, an MCP server and an agent, commented out.
pub const STARTER: &str = r#"# tether.toml: the tools a model's scripts may call, each call checked,
# approved and audited by the turn (the full reference: examples/tether.toml).
# `tether tools` lists what this file gives; `tether stubs` prints the Python
# API a script sees; `tether run script.py` runs a script over them.
#
# `${NAME}` reads the backend's environment when the file is loaded (never a
# script's), `${NAME:-default}` gives a default, `$$` is a literal `$`.

# A command tool: argv, no shell; the arguments arrive as JSON on stdin, and
# what it prints on stdout (JSON, or text) is the result.
[[tools]]
name = "echo"
kind = "command"
description = "Returns its arguments."
command = ["cat"]
read_only = true
input_schema = { type = "object", properties = { text = { type = "string" } } }

# An HTTP tool: the backend makes the request; a secret stays here.
# [[tools]]
# name = "weather"
# kind = "http"
# description = "Today's weather in a city."
# method = "GET"
# url = "https://api.example.com/weather/{city}"
# headers = { Authorization = "Bearer ${WEATHER_TOKEN}" }
# read_only = true
# input_schema = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }

# A tool with effects that a person approves before it runs.
# [[tools]]
# name = "send_email"
# kind = "command"
# description = "Sends an email."
# command = ["./send-email"]
# requires_approval = true
# input_schema = { type = "object", properties = { to = { type = "string" }, body = { type = "string" } } }

# An MCP server's tools (stdio here; `url = "http://…/mcp"` for streamable HTTP).
# `tether init --from .mcp.json` writes these from an MCP client's config.
# [mcp.files]
# command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "."]
# prefix = "files_"
# read_only = true

# Limits of each turn.
# [turn]
# approval_timeout = "5m"

# The model `tether chat` and `tether ask` talk to (any OpenAI-compatible endpoint).
# [agents.main]
# base_url = "http://127.0.0.1:11434/v1"
# model = "qwen2.5-coder"
# api_key_env = "OPENAI_API_KEY"
"#;

/// What [`from_mcp_json`] made: the config's text, and a line for each
/// server it could not carry over as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    /// The `tether.toml` text: one `[mcp.<name>]` per server.
    pub text: String,
    /// What a person should know: servers skipped, transports to check.
    pub notes: Vec<String>,
}

/// The `[mcp.<name>]` entries of the servers in an MCP client's config,
/// `json` (read from `source`): `command` and `args` become `command`,
/// `env` and `cwd` carry over, `url` and `headers` make an HTTP server. Each
/// server's tools join under the prefix `<name>_`. `${VAR}` and
/// `${VAR:-default}` keep their meaning; any other `$` is written `$$`.
///
/// # Errors
/// If `json` is not JSON, has no `mcpServers` (or `servers`) object, or a
/// server has neither `command` nor `url` or a value of the wrong type —
/// naming the server and the key.
pub fn from_mcp_json(json: &str, source: &Path) -> anyhow::Result<Converted> {
    let shown = source.display();
    let parsed: Value = serde_json::from_str(json).with_context(|| format!("`{shown}` is not JSON"))?;
    let servers = parsed
        .get("mcpServers")
        .or_else(|| parsed.get("servers"))
        .and_then(Value::as_object)
        .with_context(|| format!("`{shown}` has no `mcpServers` (or `servers`) object: nothing to convert"))?;
    let mut mcp = toml::Table::new();
    let mut notes = Vec::new();
    for (name, server) in servers {
        let at = |key: &str| format!("`{shown}`: server `{name}`'s `{key}`");
        if server.get("disabled").and_then(Value::as_bool) == Some(true) {
            notes.push(format!("server `{name}` is disabled there: not converted"));
            continue;
        }
        let mut entry = toml::Table::new();
        let text = |key: &str| -> anyhow::Result<Option<String>> {
            match server.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) => Ok(Some(text.clone())),
                Some(_) => anyhow::bail!("{} must be a string", at(key)),
            }
        };
        let strings = |key: &str| -> anyhow::Result<toml::Table> {
            let Some(object) = server.get(key) else { return Ok(toml::Table::new()) };
            let object = object.as_object().with_context(|| format!("{} must be an object", at(key)))?;
            object
                .iter()
                .map(|(k, v)| match v {
                    Value::String(v) => Ok((k.clone(), toml::Value::String(keep_dollars(v)))),
                    _ => anyhow::bail!("{}.{k} must be a string", at(key)),
                })
                .collect()
        };
        match (text("command")?, text("url")?) {
            (Some(command), None) => {
                let mut argv = vec![toml::Value::String(keep_dollars(&command))];
                for arg in server.get("args").and_then(Value::as_array).into_iter().flatten() {
                    let arg = arg.as_str().with_context(|| format!("{} must be strings", at("args")))?;
                    argv.push(toml::Value::String(keep_dollars(arg)));
                }
                entry.insert("command".into(), toml::Value::Array(argv));
                let env = strings("env")?;
                if !env.is_empty() {
                    entry.insert("env".into(), toml::Value::Table(env));
                }
                if let Some(cwd) = text("cwd")? {
                    entry.insert("cwd".into(), toml::Value::String(keep_dollars(&cwd)));
                }
            }
            (None, Some(url)) => {
                if text("type")?.as_deref() == Some("sse") {
                    notes.push(format!(
                        "server `{name}` is an SSE server: Tether speaks streamable HTTP; check that `{url}` \
                         answers it, or give its streamable HTTP endpoint"
                    ));
                }
                entry.insert("url".into(), toml::Value::String(keep_dollars(&url)));
                let headers = strings("headers")?;
                if !headers.is_empty() {
                    entry.insert("headers".into(), toml::Value::Table(headers));
                }
            }
            (Some(_), Some(_)) => anyhow::bail!("{} and `url` are both set: keep one", at("command")),
            (None, None) => anyhow::bail!("`{shown}`: server `{name}` has neither `command` nor `url`"),
        }
        entry.insert("prefix".into(), toml::Value::String(format!("{}_", tool_safe(name))));
        mcp.insert(name.clone(), toml::Value::Table(entry));
    }
    let mut root = toml::Table::new();
    root.insert("mcp".into(), toml::Value::Table(mcp));
    let body = toml::to_string(&root).context("the converted config has no TOML form")?;
    let text = format!(
        "# tether.toml, converted from `{shown}` by `tether init --from`.\n\
         # Each server's tools join as <prefix><tool>; mark the ones with effects\n\
         # `requires_approval = true` under [mcp.<name>.tools.<tool>] (examples/tether.toml).\n\n{body}"
    );
    Ok(Converted { text, notes })
}

/// `text` with each `$` that does not open `${…}` doubled: what the client
/// read literally stays literal here, and its variables stay variables.
fn keep_dollars(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '$' && chars.peek() != Some(&'{') {
            out.push('$');
        }
    }
    out
}

/// `name` with every character a model provider refuses in a tool name made `_`.
fn tool_safe(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// Writes `text` to `path`, refusing to replace a file there unless `force`.
///
/// # Errors
/// If the file exists (without `force`) or cannot be written.
pub fn write(path: &Path, text: &str, force: bool) -> anyhow::Result<()> {
    if path.exists() && !force {
        anyhow::bail!("`{}` exists; pass --force to replace it, or --path to write another", path.display());
    }
    std::fs::write(path, text).with_context(|| format!("cannot write `{}`", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_of_an_mcp_clients_config_become_mcp_entries() {
        let json = r#"{"mcpServers": {
            "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                      "env": {"TOKEN": "${GH_TOKEN}", "PRICE": "5$"}},
            "remote api": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${KEY:-none}"}},
            "old": {"type": "sse", "url": "https://sse.example.com/sse"},
            "off": {"command": "x", "disabled": true}
        }}"#;
        let converted = from_mcp_json(json, Path::new(".mcp.json")).unwrap();
        let parsed: toml::Table = toml::from_str(&converted.text).unwrap();
        let mcp = parsed["mcp"].as_table().unwrap();
        assert_eq!(
            mcp["files"]["command"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect::<Vec<_>>(),
            ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/tmp"]
        );
        assert_eq!(mcp["files"]["env"]["TOKEN"].as_str(), Some("${GH_TOKEN}"), "a variable stays one");
        assert_eq!(mcp["files"]["env"]["PRICE"].as_str(), Some("5$$"), "a literal `$` stays literal");
        assert_eq!(mcp["files"]["prefix"].as_str(), Some("files_"));
        assert_eq!(mcp["remote api"]["url"].as_str(), Some("https://mcp.example.com/mcp"));
        assert_eq!(mcp["remote api"]["headers"]["Authorization"].as_str(), Some("Bearer ${KEY:-none}"));
        assert_eq!(mcp["remote api"]["prefix"].as_str(), Some("remote_api_"));
        assert!(!mcp.contains_key("off"));
        assert_eq!(converted.notes.len(), 2, "{:?}", converted.notes);
        assert!(converted.notes.iter().any(|n| n.contains("`old` is an SSE server")), "{:?}", converted.notes);
    }

    #[test]
    fn what_cannot_be_converted_is_named() {
        let error = |json: &str| from_mcp_json(json, Path::new("m.json")).unwrap_err().to_string();
        assert!(error("{").contains("`m.json` is not JSON"));
        assert!(error("{}").contains("no `mcpServers`"));
        assert!(error(r#"{"servers": {"a": {}}}"#).contains("server `a` has neither `command` nor `url`"));
        assert!(error(r#"{"servers": {"a": {"command": 3}}}"#).contains("server `a`'s `command` must be a string"));
        assert!(error(r#"{"servers": {"a": {"command": "x", "env": {"K": 1}}}}"#).contains("`env`.K must be a string"));
    }
}
