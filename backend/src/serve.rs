//! `[serve]`: how `tether mcp` serves the configured tools to an MCP client
//! (`docs/mcp-server.md`). Read with the rest of `tether.toml`, so a typo is
//! reported at load; no other command reads it.

use serde::Deserialize;
use tether_tools::ConfigError;
use tether_tools::read::At;

/// `[serve]`: what `tether mcp` offers a client and who answers an
/// approval the client cannot ask its person about. Default: `run_script`,
/// `search_tools` and `describe_tools` only, and a denial.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServeSection {
    /// `direct_tools`: the configured tools are served too, for direct
    /// calls (through the same turn). Default false: a client loads the
    /// script tool's stubs, not every schema.
    pub direct_tools: bool,
    /// `approval_fallback`: who decides an approval-required call when the
    /// client cannot ask its person (it declared no elicitation). Default
    /// [`ApprovalFallback::Deny`].
    pub approval_fallback: ApprovalFallback,
}

/// Who decides an approval-required call when the MCP client cannot ask
/// its person (`[serve] approval_fallback`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ApprovalFallback {
    /// `"deny"`: every such call is denied (the default).
    #[default]
    Deny,
    /// `"allow-all"`: every such call is approved, as `--approval allow-all`.
    AllowAll,
    /// `"park"`: the script's run parks in the audit store, and a person
    /// answers later with `tether approve` (`docs/parking.md`).
    Park,
}

impl ApprovalFallback {
    /// Its name in a config: `deny`, `allow-all` or `park`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalFallback::Deny => "deny",
            ApprovalFallback::AllowAll => "allow-all",
            ApprovalFallback::Park => "park",
        }
    }

    /// The fallback named `name` ([`as_str`](Self::as_str)).
    pub fn parse(name: &str) -> Option<ApprovalFallback> {
        [ApprovalFallback::Deny, ApprovalFallback::AllowAll, ApprovalFallback::Park]
            .into_iter()
            .find(|fallback| fallback.as_str() == name)
    }
}

const SERVE_KEYS: [&str; 2] = ["direct_tools", "approval_fallback"];

#[derive(Debug, Deserialize)]
struct ServeKeys {
    direct_tools: Option<bool>,
    approval_fallback: Option<String>,
}

impl ServeSection {
    pub(crate) fn read(at: &At<'_>, table: Option<toml::Table>) -> Result<ServeSection, ConfigError> {
        let Some(table) = table else { return Ok(ServeSection::default()) };
        let at = &At { key: "serve".to_owned(), ..at.clone() };
        let keys: ServeKeys = at.read(&table, &SERVE_KEYS)?;
        let approval_fallback = match keys.approval_fallback.as_deref() {
            None => ApprovalFallback::default(),
            Some(name) => ApprovalFallback::parse(name).ok_or_else(|| {
                at.error("approval_fallback", format!("`{name}` is not a fallback")).fix(
                    "write `\"deny\"` (the default), `\"allow-all\"` (approve every call) or `\"park\"` (park the \
                     run for `tether approve`)",
                )
            })?,
        };
        Ok(ServeSection { direct_tools: keys.direct_tools.unwrap_or(false), approval_fallback })
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;
    use std::path::Path;
    use tether_tools::Vars;

    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/tether/tether.toml"), &Vars::from_env())
    }

    #[test]
    fn serve_is_read_with_its_defaults_and_a_mistake_is_named() {
        assert_eq!(parse("").unwrap().serve, ServeSection::default());
        let set = parse("[serve]\ndirect_tools = true\napproval_fallback = \"park\"\n").unwrap();
        assert_eq!(set.serve, ServeSection { direct_tools: true, approval_fallback: ApprovalFallback::Park });
        let wrong = parse("[serve]\napproval_fallback = \"ask\"\n").unwrap_err().to_string();
        assert!(
            wrong.contains("`serve.approval_fallback`: `ask` is not a fallback") && wrong.contains("\"park\""),
            "{wrong}"
        );
        let typo = parse("[serve]\ndirect_tool = true\n").unwrap_err().to_string();
        assert!(typo.contains("did you mean `direct_tools`?"), "{typo}");
    }
}
