//! The tool entries of `tether.toml`: `[[tools]]` (a built-in kind —
//! `http`, `command`, `sqlite`, `static` — each kind's keys in its own
//! module) and `[mcp.<name>]` (an MCP server, `mcp.rs`). This module is the
//! dispatcher that knows every kind; the file's other sections and its top
//! level are read above this crate (`tether-backend`'s `Config`). Nothing is
//! started here: MCP servers start in [`ToolSet::start`](crate::ToolSet::start).

use super::error::ConfigError;
use super::meta::{META_KEYS, MetaEntry};
use super::read::{At, check_keys, check_name, schema, split};
use super::{command, fixed, http, mcp, sqlite};
use serde::Deserialize;
use serde_json::Value;
use std::path::PathBuf;

/// The tools a configuration file names, checked: its `[[tools]]` entries
/// and `[mcp.<name>]` servers.
#[derive(Debug, Clone, Default)]
pub struct ToolsConfig {
    /// The file they were read from.
    pub path: PathBuf,
    pub(crate) tools: Vec<ToolConfig>,
    pub(crate) servers: Vec<mcp::ServerConfig>,
}

/// One `[[tools]]` entry, checked.
#[derive(Debug, Clone)]
pub(crate) struct ToolConfig {
    /// Where it is in the file, e.g. `tools[2]`.
    pub(crate) key: String,
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) input_schema: Option<Value>,
    pub(crate) output_schema: Option<Value>,
    pub(crate) meta: MetaEntry,
    pub(crate) kind: KindConfig,
}

/// A built-in kind's own keys, checked.
#[derive(Debug, Clone)]
pub(crate) enum KindConfig {
    Http(http::HttpConfig),
    Command(command::CommandConfig),
    Sqlite(sqlite::SqliteConfig),
    Static(fixed::StaticConfig),
}

impl KindConfig {
    /// The kind's name as the file spells it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            KindConfig::Http(_) => "http",
            KindConfig::Command(_) => "command",
            KindConfig::Sqlite(_) => "sqlite",
            KindConfig::Static(_) => "static",
        }
    }
}

const KINDS: [&str; 4] = ["http", "command", "sqlite", "static"];
/// The keys every `[[tools]]` entry takes besides the metadata and its kind's.
const TOOL_KEYS: [&str; 5] = ["name", "kind", "description", "input_schema", "output_schema"];

impl ToolsConfig {
    /// Reads and checks the file's `tools` (`[[tools]]`) and `mcp`
    /// (`[mcp.<name>]`) values, as taken out of its top-level table; `top`
    /// is where the file's top level is.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the file, the key and what to write instead,
    /// for the first mistake found — two entries with one name among them.
    pub fn read(
        top: &At<'_>,
        tools: Option<toml::Value>,
        mcp: Option<toml::Value>,
    ) -> Result<ToolsConfig, ConfigError> {
        let (path, vars) = (top.file, top.vars);
        let tools = match tools {
            None => Vec::new(),
            Some(toml::Value::Array(entries)) => entries
                .iter()
                .enumerate()
                .map(|(i, entry)| tool_entry(At { file: path, key: format!("tools[{i}]"), vars }, entry))
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(top.error("tools", "must be an array of tables").fix("write each tool as `[[tools]]`"));
            }
        };
        let servers = match mcp {
            None => Vec::new(),
            Some(toml::Value::Table(servers)) => servers
                .iter()
                .map(|(name, entry)| {
                    mcp::ServerConfig::read(At { file: path, key: format!("mcp.{name}"), vars }, name, entry)
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(top.error("mcp", "must be a table of servers").fix("write each server as `[mcp.<name>]`"));
            }
        };
        let config = ToolsConfig { path: path.to_owned(), tools, servers };
        config.check_names()?;
        Ok(config)
    }

    /// The names of the `[[tools]]` entries, in file order.
    pub fn tool_names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.name.as_str()).collect()
    }

    /// The names of the `[mcp.<name>]` servers.
    pub fn server_names(&self) -> Vec<&str> {
        self.servers.iter().map(|s| s.name.as_str()).collect()
    }

    fn check_names(&self) -> Result<(), ConfigError> {
        for (i, tool) in self.tools.iter().enumerate() {
            if let Some(first) = self.tools[..i].iter().find(|t| t.name == tool.name) {
                return Err(ConfigError::new(
                    &self.path,
                    format!("{}.name", tool.key),
                    format!("`{}` is also the name of `{}`", tool.name, first.key),
                )
                .fix("tool names are unique in a turn: rename one"));
            }
        }
        Ok(())
    }
}

/// The keys of `[[tools]]` shared by every kind.
#[derive(Debug, Deserialize)]
struct ToolHead {
    name: String,
    kind: String,
    description: Option<String>,
    input_schema: Option<toml::Value>,
    output_schema: Option<toml::Value>,
}

fn tool_entry(at: At<'_>, entry: &toml::Value) -> Result<ToolConfig, ConfigError> {
    let Some(table) = entry.as_table() else {
        return Err(at.error("", "must be a table").fix("write each tool as `[[tools]]` followed by its keys"));
    };
    let kind = match table.get("kind") {
        Some(toml::Value::String(kind)) if KINDS.contains(&kind.as_str()) => kind.clone(),
        Some(other) => {
            return Err(at
                .error("kind", format!("`{}` is not a kind of tool", other.as_str().unwrap_or(&other.to_string())))
                .fix(format!("write one of: {} (an MCP server is an `[mcp.<name>]` section)", KINDS.join(", "))));
        }
        None => return Err(at.error("kind", "is missing").fix(format!("add `kind = ` one of: {}", KINDS.join(", ")))),
    };
    let own_keys: &[&str] = match kind.as_str() {
        "http" => &http::KEYS,
        "command" => &command::KEYS,
        "sqlite" => &sqlite::KEYS,
        _ => &fixed::KEYS,
    };
    let allowed: Vec<&str> = TOOL_KEYS.iter().chain(META_KEYS.iter()).chain(own_keys.iter()).copied().collect();
    check_keys(&at, table, &allowed)?;
    let split = |keys: &[&str]| split(table, keys);
    let head: ToolHead = at.read(&split(&TOOL_KEYS), &TOOL_KEYS)?;
    let at = At { key: format!("{}(`{}`)", at.key, head.name), ..at };
    let meta: MetaEntry = at.read(&split(&META_KEYS), &META_KEYS)?;
    check_name(&at, &head.name)?;
    meta.to_meta(false).map_err(|(key, problem)| at.error(key, problem))?;
    let own = split(own_keys);
    let kind = match head.kind.as_str() {
        "http" => KindConfig::Http(http::HttpConfig::read(&at, &own)?),
        "command" => KindConfig::Command(command::CommandConfig::read(&at, &own)?),
        "sqlite" => KindConfig::Sqlite(sqlite::SqliteConfig::read(&at, &own)?),
        _ => KindConfig::Static(fixed::StaticConfig::read(&at, &own)?),
    };
    if let KindConfig::Sqlite(sqlite) = &kind
        && sqlite.writable()
        && meta.read_only == Some(true)
    {
        return Err(at
            .error("read_only", "is true, but the tool is `writable`")
            .fix("a tool that writes has effects: remove `read_only`"));
    }
    let description = match head.description {
        Some(d) if !d.trim().is_empty() => d,
        _ => {
            return Err(at
                .error("description", "is missing")
                .fix("say what the tool does and returns: the model reads it"));
        }
    };
    Ok(ToolConfig {
        key: at.key.clone(),
        name: head.name,
        description,
        input_schema: head.input_schema.map(|s| schema(&at, "input_schema", s)).transpose()?,
        output_schema: head.output_schema.map(|s| schema(&at, "output_schema", s)).transpose()?,
        meta,
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Vars;
    use std::path::Path;

    fn parse(text: &str) -> Result<ToolsConfig, ConfigError> {
        let mut table: toml::Table = text.parse().unwrap();
        let vars = Vars::from_env();
        let top = At { file: Path::new("/etc/tether/tether.toml"), key: String::new(), vars: &vars };
        ToolsConfig::read(&top, table.remove("tools"), table.remove("mcp"))
    }

    fn problem(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn a_missing_or_unknown_kind_lists_the_kinds() {
        assert!(
            problem("[[tools]]\nname = \"t\"\n")
                .contains("`tools[0].kind`: is missing; add `kind = ` one of: http, command, sqlite, static")
        );
        let error = problem("[[tools]]\nname = \"t\"\nkind = \"mcp\"\n");
        assert!(error.contains("`mcp` is not a kind of tool") && error.contains("[mcp.<name>]"), "{error}");
    }

    #[test]
    fn names_must_be_usable_and_unique() {
        let entry =
            |name: &str| format!("[[tools]]\nname = \"{name}\"\nkind = \"static\"\ndescription = \"d\"\nvalue = 1\n");
        assert!(problem(&entry("2fast")).contains("is not a usable tool name"));
        assert!(problem(&entry("a b")).contains("is not a usable tool name"));
        let twice = problem(&format!("{}{}", entry("same"), entry("same")));
        assert!(twice.contains("`tools[1](`same`).name`: `same` is also the name of `tools[0](`same`)`"), "{twice}");
    }

    #[test]
    fn a_description_is_required_and_schemas_must_compile() {
        assert!(
            problem("[[tools]]\nname = \"t\"\nkind = \"static\"\nvalue = 1\n")
                .contains("`tools[0](`t`).description`: is missing")
        );
        let bad = problem(
            "[[tools]]\nname = \"t\"\nkind = \"static\"\ndescription = \"d\"\nvalue = 1\ninput_schema = { type = 12 }\n",
        );
        assert!(bad.contains("`tools[0](`t`).input_schema`: is not a valid JSON Schema"), "{bad}");
        let json = parse("[[tools]]\nname = \"t\"\nkind = \"static\"\ndescription = \"d\"\nvalue = 1\ninput_schema = '{\"type\": \"object\"}'\n").unwrap();
        assert_eq!(json.tools[0].input_schema, Some(serde_json::json!({"type": "object"})));
    }

    #[test]
    fn a_bad_metadata_value_names_its_key() {
        let error = problem(
            "[[tools]]\nname = \"t\"\nkind = \"static\"\ndescription = \"d\"\nvalue = 1\nreplay = \"sometimes\"\n",
        );
        assert!(
            error.contains("`tools[0](`t`).replay`: unknown variant `sometimes`, expected `never` or `safe`"),
            "{error}"
        );
    }
}
