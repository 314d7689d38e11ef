//! The sections of `tether.toml` that are not tools: `[turn]` (the turn's
//! limits and its one deadline) and `[agents.<name>]` / `[[agent_tools]]`
//! (peer agents as tools). Read and checked with the rest of the
//! file, so a typo is reported at load with the key it could have been.

use serde::Deserialize;
use std::time::Duration;
use tether_agent::{AgentConfig, AgentToolEntry, AgentsConfig};
use tether_tools::ConfigError;
use tether_tools::read::{At, check_keys, parse_duration};
use tether_turn::{ModelOffer, TurnLimits};

/// `[turn]`: limits for every turn built from this file. Unset keys keep
/// [`TurnLimits`]' defaults; `deadline` unset: no deadline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnSection {
    /// The limits, defaults overridden by the file.
    pub limits: TurnLimits,
    /// The whole turn's time budget, nested turns and scripts included.
    pub deadline: Option<Duration>,
}

const TURN_KEYS: [&str; 9] = [
    "max_tool_calls",
    "max_approval_calls",
    "approval_timeout",
    "tool_timeout",
    "max_depth",
    "max_refused_script_calls",
    "max_result_bytes",
    "deadline",
    "offer",
];

#[derive(Debug, Deserialize)]
struct TurnKeys {
    max_tool_calls: Option<u32>,
    max_approval_calls: Option<u32>,
    approval_timeout: Option<String>,
    tool_timeout: Option<String>,
    max_depth: Option<u32>,
    max_refused_script_calls: Option<u32>,
    max_result_bytes: Option<u64>,
    deadline: Option<String>,
    offer: Option<String>,
}

const AGENT_KEYS: [&str; 6] = ["base_url", "endpoint", "model", "api_key_env", "system_prompt", "tools"];
const AGENT_TOOL_KEYS: [&str; 3] = ["agent", "description", "enabled"];

impl TurnSection {
    pub(crate) fn read(at: &At<'_>, table: Option<toml::Table>) -> Result<TurnSection, ConfigError> {
        let Some(table) = table else { return Ok(TurnSection::default()) };
        let at = &At { key: "turn".to_owned(), ..at.clone() };
        let keys: TurnKeys = at.read(&table, &TURN_KEYS)?;
        let duration = |key: &str, text: &Option<String>| {
            text.as_deref().map(parse_duration).transpose().map_err(|problem| at.error(key, problem))
        };
        let defaults = TurnLimits::default();
        let limits = TurnLimits {
            max_tool_calls: keys.max_tool_calls.unwrap_or(defaults.max_tool_calls),
            max_approval_calls: keys.max_approval_calls.unwrap_or(defaults.max_approval_calls),
            approval_timeout: duration("approval_timeout", &keys.approval_timeout)?
                .unwrap_or(defaults.approval_timeout),
            default_tool_time_limit: duration("tool_timeout", &keys.tool_timeout)?
                .unwrap_or(defaults.default_tool_time_limit),
            max_depth: keys.max_depth.unwrap_or(defaults.max_depth),
            max_refused_script_calls: keys.max_refused_script_calls.unwrap_or(defaults.max_refused_script_calls),
            max_result_bytes: keys.max_result_bytes.or(defaults.max_result_bytes),
            model_offer: match keys.offer.as_deref() {
                None => defaults.model_offer,
                Some(name) => ModelOffer::parse(name).ok_or_else(|| {
                    at.error("offer", format!("`{name}` is not an offer")).fix(
                        "write `\"every\"` (every tool and run_script, the default), `\"script\"` (run_script alone, \
                         the tools as its stubs) or `\"search\"` (run_script naming the tools, with search_tools and \
                         describe_tools for their stubs: many tools)",
                    )
                })?,
            },
            ..defaults
        };
        Ok(TurnSection { limits, deadline: duration("deadline", &keys.deadline)? })
    }
}

/// Reads `[agents.<name>]` and `[[agent_tools]]`, `${NAME}` expanded in
/// each agent's `base_url` and `model`. An entry naming an agent that is not
/// configured is kept (the merge of agent tools drops it for every caller) and
/// logged, since it is most likely a typo.
pub(crate) fn read_agents(
    at: &At<'_>,
    agents: Option<toml::Table>,
    agent_tools: Option<toml::Value>,
) -> Result<AgentsConfig, ConfigError> {
    let mut config = AgentsConfig::default();
    for (name, entry) in agents.unwrap_or_default() {
        let here = At { key: format!("agents.{name}"), ..at.clone() };
        let Some(table) = entry.as_table() else {
            return Err(here.error("", "must be a table").fix(format!("write it as `[agents.{name}]`")));
        };
        let mut agent: AgentConfig = here.read(table, &AGENT_KEYS)?;
        agent.base_url = here.expand("base_url", &agent.base_url)?;
        agent.model = here.expand("model", &agent.model)?;
        for (i, tool) in table.get("tools").and_then(toml::Value::as_array).into_iter().flatten().enumerate() {
            if let Some(tool) = tool.as_table() {
                check_keys(&At { key: format!("agents.{name}.tools[{i}]"), ..at.clone() }, tool, &AGENT_TOOL_KEYS)?;
            }
        }
        config.agents.insert(name, agent);
    }
    let entries = match agent_tools {
        None => Vec::new(),
        Some(toml::Value::Array(entries)) => entries,
        Some(_) => {
            return Err(at.error("agent_tools", "must be an array of tables").fix("write each as `[[agent_tools]]`"));
        }
    };
    for (i, entry) in entries.iter().enumerate() {
        let here = At { key: format!("agent_tools[{i}]"), ..at.clone() };
        let Some(table) = entry.as_table() else {
            return Err(here.error("", "must be a table").fix("write each as `[[agent_tools]]` followed by its keys"));
        };
        let tool: AgentToolEntry = here.read(table, &AGENT_TOOL_KEYS)?;
        if !config.agents.contains_key(&tool.agent) {
            tracing::warn!(file = %at.file.display(), key = %here.key, agent = %tool.agent, "names an agent that is not configured; no caller is offered it");
        }
        config.agent_tools.push(tool);
    }
    Ok(config)
}
