//! The effective agent-tool list for a caller (the config's list merged with the caller's own), and the
//! tool name an agent is offered under.

use super::config::{AgentToolEntry, AgentsConfig};

/// The agent tools caller `caller` is offered, in order:
/// 1. a copy of the global list;
/// 2. each of the caller's own entries replaces the entry for the same agent
///    in place, or is appended;
/// 3. the caller itself is removed (cycle guard);
/// 4. entries naming no configured agent are removed (logged);
/// 5. disabled entries are removed.
///
/// `caller` is `None` for a turn no configured agent runs (nothing to
/// override, nothing to remove for the cycle guard).
pub fn effective_agent_tools(config: &AgentsConfig, caller: Option<&str>) -> Vec<AgentToolEntry> {
    let mut list = config.agent_tools.clone();
    let own = caller.and_then(|name| config.agents.get(name)).map(|agent| agent.tools.as_slice()).unwrap_or_default();
    for entry in own {
        match list.iter_mut().find(|e| e.agent == entry.agent) {
            Some(slot) => *slot = entry.clone(),
            None => list.push(entry.clone()),
        }
    }
    list.retain(|e| Some(e.agent.as_str()) != caller);
    list.retain(|e| {
        let known = config.agents.contains_key(&e.agent);
        if !known {
            tracing::debug!(agent = %e.agent, ?caller, "agent tool names no configured agent; left out");
        }
        known
    });
    list.retain(AgentToolEntry::is_enabled);
    list
}

/// What every agent tool's name starts with.
pub const AGENT_TOOL_PREFIX: &str = "agent_";

/// The tool name agent `agent` is offered under: [`AGENT_TOOL_PREFIX`] and
/// the name lowercased, every character but ASCII letters and digits
/// replaced by `_`.
pub fn agent_tool_name(agent: &str) -> String {
    let sanitised: String =
        agent.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    format!("{AGENT_TOOL_PREFIX}{sanitised}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AgentConfig;

    fn agent(tools: Vec<AgentToolEntry>) -> AgentConfig {
        AgentConfig {
            base_url: "http://127.0.0.1:1/v1".into(),
            model: "m".into(),
            api_key_env: None,
            system_prompt: None,
            tools,
        }
    }

    fn config(global: Vec<AgentToolEntry>, agents: Vec<(&str, Vec<AgentToolEntry>)>) -> AgentsConfig {
        AgentsConfig {
            agents: agents.into_iter().map(|(name, tools)| (name.to_owned(), agent(tools))).collect(),
            agent_tools: global,
        }
    }

    fn entry(name: &str, description: &str) -> AgentToolEntry {
        AgentToolEntry::new(name, description)
    }

    fn disabled(name: &str) -> AgentToolEntry {
        AgentToolEntry { enabled: Some(false), ..entry(name, "off") }
    }

    fn listed(list: &[AgentToolEntry]) -> Vec<(&str, &str)> {
        list.iter().map(|e| (e.agent.as_str(), e.description.as_str())).collect()
    }

    #[test]
    fn the_global_list_alone_is_offered_as_is() {
        let c = config(
            vec![entry("aider", "edits"), entry("summariser", "sums")],
            vec![("qwen", vec![]), ("aider", vec![]), ("summariser", vec![])],
        );
        assert_eq!(listed(&effective_agent_tools(&c, Some("qwen"))), [("aider", "edits"), ("summariser", "sums")]);
    }

    #[test]
    fn an_own_entry_replaces_the_global_one_in_place() {
        let c = config(
            vec![entry("aider", "edits"), entry("summariser", "sums")],
            vec![("gemma", vec![entry("aider", "apply a code edit")]), ("aider", vec![]), ("summariser", vec![])],
        );
        assert_eq!(
            listed(&effective_agent_tools(&c, Some("gemma"))),
            [("aider", "apply a code edit"), ("summariser", "sums")]
        );
    }

    #[test]
    fn an_own_entry_for_a_new_agent_is_appended() {
        let c = config(
            vec![entry("aider", "edits")],
            vec![("gemma", vec![entry("local", "local notes")]), ("aider", vec![]), ("local", vec![])],
        );
        assert_eq!(listed(&effective_agent_tools(&c, Some("gemma"))), [("aider", "edits"), ("local", "local notes")]);
        assert_eq!(listed(&effective_agent_tools(&c, Some("aider"))), [], "another caller does not get gemma's entry");
    }

    #[test]
    fn a_disabled_entry_is_removed_globally_or_by_override() {
        let c = config(
            vec![entry("aider", "edits"), disabled("summariser")],
            vec![("gemma", vec![disabled("aider")]), ("qwen", vec![]), ("aider", vec![]), ("summariser", vec![])],
        );
        assert_eq!(listed(&effective_agent_tools(&c, Some("gemma"))), []);
        assert_eq!(listed(&effective_agent_tools(&c, Some("qwen"))), [("aider", "edits")]);
    }

    #[test]
    fn an_override_can_enable_a_globally_disabled_entry() {
        let c = config(
            vec![disabled("summariser")],
            vec![("gemma", vec![entry("summariser", "on for me")]), ("summariser", vec![])],
        );
        assert_eq!(listed(&effective_agent_tools(&c, Some("gemma"))), [("summariser", "on for me")]);
    }

    #[test]
    fn the_caller_never_gets_itself() {
        let c = config(
            vec![entry("aider", "edits"), entry("qwen", "general")],
            vec![("qwen", vec![entry("qwen", "me again")]), ("aider", vec![])],
        );
        assert_eq!(listed(&effective_agent_tools(&c, Some("qwen"))), [("aider", "edits")]);
        assert_eq!(listed(&effective_agent_tools(&c, None)), [("aider", "edits"), ("qwen", "general")]);
    }

    #[test]
    fn unknown_agents_are_removed() {
        let c = config(
            vec![entry("ghost", "nobody"), entry("aider", "edits")],
            vec![("qwen", vec![entry("phantom", "nobody either")]), ("aider", vec![])],
        );
        assert_eq!(listed(&effective_agent_tools(&c, Some("qwen"))), [("aider", "edits")]);
    }

    #[test]
    fn tool_names_are_lowercased_and_sanitised() {
        assert_eq!(agent_tool_name("Aider"), "agent_aider");
        assert_eq!(agent_tool_name("gemma-4.e4b"), "agent_gemma_4_e4b");
        assert_eq!(agent_tool_name("qwen 2/coder"), "agent_qwen_2_coder");
    }

    #[test]
    fn the_config_reads_from_toml_shaped_json_with_defaults() {
        let c: AgentsConfig = serde_json::from_value(serde_json::json!({
            "agents": {"qwen": {"endpoint": "http://h/v1", "model": "q", "tools": [{"agent": "a", "description": "d", "enabled": false}]}},
            "agent_tools": [{"agent": "qwen", "description": "general"}]
        }))
        .unwrap();
        assert_eq!(c.agents["qwen"].base_url, "http://h/v1");
        assert!(!c.agents["qwen"].tools[0].is_enabled());
        assert!(c.agent_tools[0].is_enabled());
        let typo = serde_json::from_value::<AgentsConfig>(
            serde_json::json!({"agents": {"x": {"base_url": "u", "modle": "m"}}}),
        );
        assert!(typo.is_err(), "an unknown key is an error, not ignored");
    }
}
