//! `tether.toml`: the file a backend's tools, its turns' limits and its peer
//! agents come from. This module reads the file's top level and hands each
//! section to the crate that owns it, so a mistake is reported at load —
//! with the file, the key and what to write instead — never when a tool is
//! first called. Nothing is started here: MCP servers start in
//! [`ToolSet::start`](tether_tools::ToolSet::start).
//!
//! Sections (`examples/tether.toml` shows each, commented):
//! - `[[tools]]` and `[mcp.<name>]`: the tools ([`ToolsConfig`], `tether-tools`)
//! - `[turn]` (the turn's limits and deadline), `[agents.<name>]` and
//!   `[[agent_tools]]` (peer agents as tools): `sections.rs`
//! - `[serve]` (what `tether mcp` serves, and its approval fallback): `serve.rs`

use crate::sections::{TurnSection, read_agents};
use crate::serve::ServeSection;
use std::path::{Path, PathBuf};
use tether_agent::AgentsConfig;
use tether_tools::read::At;
use tether_tools::{ConfigError, ToolsConfig, Vars, read::check_keys};

/// A loaded, checked configuration file.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from.
    pub path: PathBuf,
    /// `[[tools]]` and `[mcp.<name>]`: the tools, for [`ToolSet::start`](tether_tools::ToolSet::start).
    pub tools: ToolsConfig,
    /// `[turn]`: the limits and deadline of every turn built from the file.
    pub turn: TurnSection,
    /// `[agents.<name>]` and `[[agent_tools]]`: peer agents as tools.
    pub agents: AgentsConfig,
    /// `[serve]`: what `tether mcp` serves a client.
    pub serve: ServeSection,
}

const TOP_KEYS: [&str; 6] = ["tools", "mcp", "turn", "agents", "agent_tools", "serve"];

impl Config {
    /// Reads and checks the file at `path`, expanding `${NAME}` from `vars`.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the file, the key and what to write instead,
    /// for the first mistake found.
    pub fn load(path: impl AsRef<Path>, vars: &Vars) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(path, "", format!("cannot read the file: {e}")))?;
        Config::parse(&text, path, vars)
    }

    /// Checks `text` as if read from `path` (relative paths in it are
    /// relative to `path`'s folder).
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse(text: &str, path: &Path, vars: &Vars) -> Result<Config, ConfigError> {
        let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| syntax_error(path, text, &e))?;
        let top = At { file: path, key: String::new(), vars };
        check_keys(&top, &table, &TOP_KEYS)?;
        let tools = ToolsConfig::read(&top, table.remove("tools"), table.remove("mcp"))?;
        check_reserved(path, &tools)?;
        Ok(Config {
            path: path.to_owned(),
            tools,
            turn: TurnSection::read(&top, section(&top, &mut table, "turn")?)?,
            agents: read_agents(&top, section(&top, &mut table, "agents")?, table.remove("agent_tools"))?,
            serve: ServeSection::read(&top, section(&top, &mut table, "serve")?)?,
        })
    }

    /// The names of the `[[tools]]` entries, in file order.
    pub fn tool_names(&self) -> Vec<&str> {
        self.tools.tool_names()
    }

    /// The names of the `[mcp.<name>]` servers.
    pub fn server_names(&self) -> Vec<&str> {
        self.tools.server_names()
    }
}

/// Refuses a `[[tools]]` entry named as a tool the turn makes itself:
/// `run_script`, `activate_tools`, `search_tools`, `describe_tools`, or an
/// agent tool's `agent_<name>`.
fn check_reserved(path: &Path, tools: &ToolsConfig) -> Result<(), ConfigError> {
    for (i, name) in tools.tool_names().into_iter().enumerate() {
        let whose = if name == tether_client::SCRIPT_TOOL_NAME {
            "the script tool's"
        } else if name == tether_turn::ACTIVATE_TOOLS_NAME {
            "the turn's own tool for deferred tools'"
        } else if name == tether_turn::SEARCH_TOOLS_NAME || name == tether_turn::DESCRIBE_TOOLS_NAME {
            "the turn's own tool for finding tools' (`[turn] offer = \"search\"`)"
        } else if name.starts_with(tether_agent::AGENT_TOOL_PREFIX) {
            "an agent tool's (`agent_<name>`)"
        } else {
            continue;
        };
        return Err(ConfigError::new(path, format!("tools[{i}](`{name}`).name"), format!("`{name}` is {whose} name"))
            .fix("rename the tool: the turn adds that one itself"));
    }
    Ok(())
}

fn section(top: &At<'_>, table: &mut toml::Table, key: &str) -> Result<Option<toml::Table>, ConfigError> {
    match table.remove(key) {
        None => Ok(None),
        Some(toml::Value::Table(t)) => Ok(Some(t)),
        Some(_) => Err(top.error(key, "must be a table").fix(format!("write it as `[{key}]`"))),
    }
}

fn syntax_error(path: &Path, text: &str, error: &toml::de::Error) -> ConfigError {
    let key = match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |n| n + 1) + 1;
            format!("line {line}, column {column}")
        }
        None => String::new(),
    };
    ConfigError::new(path, key, format!("not valid TOML: {}", error.message()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/tether/tether.toml"), &Vars::from_env())
    }

    fn problem(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn the_turn_and_agent_sections_are_read_and_checked() {
        let text = "[turn]\nmax_tool_calls = 10\ndeadline = \"90s\"\n\
                    [agents.billing]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\
                    [[agent_tools]]\nagent = \"billing\"\ndescription = \"Billing questions.\"\nenabled = false\n";
        let config = parse(text).unwrap();
        assert!(config.tool_names().is_empty() && config.server_names().is_empty());
        assert_eq!(config.turn.limits.max_tool_calls, 10);
        assert_eq!(
            config.turn.limits.max_depth,
            tether_turn::TurnLimits::default().max_depth,
            "unset keys keep the default"
        );
        assert_eq!(config.turn.deadline, Some(std::time::Duration::from_secs(90)));
        assert_eq!(config.agents.agents["billing"].model, "m");
        let number =
            "[[tools]]\nname = \"a\"\nkind = \"command\"\ndescription = \"x\"\ncommand = [\"true\"]\ntimeout = 5\n";
        let refused = parse(number).unwrap_err().to_string();
        assert!(refused.contains("timeout") && refused.contains("write \"5s\""), "{refused}");
        for (name, says) in [
            ("run_script", "`run_script` is the script tool's name"),
            ("activate_tools", "the turn's own tool"),
            ("search_tools", "the turn's own tool for finding tools"),
            ("describe_tools", "the turn's own tool for finding tools"),
            ("agent_billing", "an agent tool's"),
        ] {
            let text = format!("[[tools]]\nname = \"{name}\"\nkind = \"static\"\ndescription = \"x\"\nvalue = 1\n");
            let refused = parse(&text).unwrap_err().to_string();
            assert!(refused.contains(says) && refused.contains(&format!("tools[0](`{name}`).name")), "{refused}");
        }
        assert!(!config.agents.agent_tools[0].is_enabled());

        let typo = problem("[agents.billing]\nbase_url = \"u\"\nmodle = \"m\"\n");
        assert!(typo.contains("`agents.billing.modle`: unknown key; did you mean `model`?"), "{typo}");
        let missing = problem("[agents.billing]\nbase_url = \"u\"\n");
        assert!(missing.contains("`agents.billing`") && missing.contains("model"), "{missing}");
        let limit = problem("[turn]\ndeadline = \"soon\"\n");
        assert!(limit.contains("`turn.deadline`"), "{limit}");
        assert_eq!(config.turn.limits.model_offer, tether_turn::ModelOffer::Every);
        let script_only = parse("[turn]\noffer = \"script\"\n").unwrap();
        assert_eq!(script_only.turn.limits.model_offer, tether_turn::ModelOffer::ScriptOnly);
        let search = parse("[turn]\noffer = \"search\"\n").unwrap();
        assert_eq!(search.turn.limits.model_offer, tether_turn::ModelOffer::Search);
        let offer = problem("[turn]\noffer = \"scripts\"\n");
        assert!(offer.contains("`turn.offer`: `scripts` is not an offer") && offer.contains("`\"script\"`"), "{offer}");
        let entry = problem("[[agent_tools]]\nagent = \"a\"\ndescription = \"d\"\nenable = false\n");
        assert!(entry.contains("`agent_tools[0].enable`: unknown key; did you mean `enabled`?"), "{entry}");
    }

    #[test]
    fn a_syntax_error_gives_the_line_and_column() {
        let error = problem("[[tools]]\nname = \"x\"\nkind = \n");
        assert!(error.starts_with("`/etc/tether/tether.toml`, `line 3, column 8`: not valid TOML"), "{error}");
    }

    #[test]
    fn an_unknown_key_is_named_with_the_closest_one() {
        let error =
            problem("[[tools]]\nname = \"t\"\nkind = \"static\"\ndescription = \"d\"\nvalue = 1\nread_onyl = true\n");
        assert!(error.contains("`tools[0].read_onyl`: unknown key; did you mean `read_only`?"), "{error}");
        let top = problem("[tool]\n");
        assert!(top.contains("`tool`: unknown key; did you mean `tools`?"), "{top}");
    }
}
