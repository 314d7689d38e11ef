//! What a config file says about agents: `[agents.<name>]` and the global
//! `[[agent_tools]]` list. Plain data, deserializable with serde;
//! the config file's parser embeds [`AgentsConfig`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One agent: an OpenAI-compatible chat-completions endpoint and a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The endpoint's base URL, without `/chat/completions`
    /// (e.g. `http://localhost:8080/v1`). `endpoint` is accepted too.
    #[serde(alias = "endpoint")]
    pub base_url: String,
    /// The model name sent with every request.
    pub model: String,
    /// The environment variable holding the API key (sent as a bearer
    /// token); none: no `Authorization` header.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The system prompt; none: a short default.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// This agent's own agent-tool entries: an entry naming an agent of the
    /// global list replaces it in place, others are appended.
    #[serde(default)]
    pub tools: Vec<AgentToolEntry>,
}

/// One agent offered as a tool (`[[agent_tools]]`, or an agent's `tools`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentToolEntry {
    /// The target agent's name (a key of `[agents]`).
    pub agent: String,
    /// What the calling model reads about it.
    pub description: String,
    /// `false` disables the entry without removing it; absent: enabled.
    #[serde(default)]
    pub enabled: Option<bool>,
}

impl AgentToolEntry {
    /// An enabled entry for `agent`.
    pub fn new(agent: impl Into<String>, description: impl Into<String>) -> Self {
        AgentToolEntry { agent: agent.into(), description: description.into(), enabled: None }
    }

    /// True unless `enabled = false`.
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }
}

/// Every agent and the global agent-tool list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsConfig {
    /// The agents by name.
    #[serde(default)]
    pub agents: BTreeMap<String, AgentConfig>,
    /// Agents offered as tools to every agent (subject to the merge rules).
    #[serde(default)]
    pub agent_tools: Vec<AgentToolEntry>,
}
