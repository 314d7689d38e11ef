//! What the configured tools look like. `tether tools`: each tool of a tool
//! set with where it comes from and the metadata the turn decides by, then
//! each MCP server's state, then the agents and the agent tools each is
//! offered. `tether stubs`: the typed Python API a script sees, made from a
//! turn's own tool list.

use crate::model::ModelChoice;
use crate::wiring::Source;
use std::fmt::Write;
use std::sync::Arc;
use tether_backend::agent::{
    AgentsConfig, ModelPrompt, NestedTurnSetup, NoAgentEvents, PeerAgents, agent_tool_name, effective_agent_tools,
};
use tether_backend::tools::{ServerStatus, ToolSet};
use tether_backend::turn::{ApprovalRequirement, RepeatRule, ToolMeta, ToolReplay, Turn};

/// The metadata in words, e.g. `read-only, concurrent, timeout 30s`.
pub fn describe_meta(meta: &ToolMeta) -> String {
    let mut words = Vec::new();
    if meta.approval == ApprovalRequirement::Always {
        words.push("requires approval".to_owned());
    }
    words.push(if meta.read_only { "read-only".to_owned() } else { "has effects".to_owned() });
    if meta.deferred {
        words.push("deferred".into());
    }
    if meta.concurrency_safe {
        words.push("concurrent".into());
    }
    match meta.repeat {
        RepeatRule::RefuseUnlessReadOnly => {}
        RepeatRule::Refuse => words.push("repeats refused".into()),
        RepeatRule::Allow => words.push("repeats allowed".into()),
    }
    if meta.replay == ToolReplay::Safe {
        words.push("replay-safe".into());
    }
    if let Some(limit) = meta.time_limit {
        words.push(format!("timeout {}", humantime_like(limit)));
    }
    words.join(", ")
}

fn humantime_like(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 { format!("{}s", d.as_secs()) } else { format!("{}ms", d.as_millis()) }
}

/// At most `max` characters of `text`, `…` if cut.
fn first_words(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The listing as text: `origin` is the config file.
pub fn render(origin: &std::path::Path, tools: &ToolSet, servers: &[ServerStatus]) -> String {
    let mut out = format!("tools of {}\n", origin.display());
    let width = tools.tools().iter().map(|t| t.name().len()).max().unwrap_or(0);
    let _ = writeln!(out, "{} tools:", tools.tools().len());
    for (tool, source) in tools.sources() {
        let _ = writeln!(out, "  {:width$}  {}  [{}]", tool.name(), describe_meta(tool.meta()), source);
        let description = tool.spec().description.lines().next().unwrap_or_default();
        if !description.is_empty() {
            let _ = writeln!(out, "  {:width$}    {}", "", first_words(description, 100));
        }
    }
    if !servers.is_empty() {
        let _ = writeln!(out, "MCP servers:");
        for server in servers {
            let state = server.error.as_deref().map_or("running".to_owned(), |e| format!("NOT RUNNING: {e}"));
            let _ = writeln!(out, "  {} ({}): {state}", server.name, server.transport);
        }
    }
    out
}

/// The configured agents: each one's model and endpoint, and the agent
/// tools it is offered (the config's agent tools merged with its own). Empty without agents.
pub fn render_agents(agents: &AgentsConfig) -> String {
    let mut out = String::new();
    if agents.agents.is_empty() {
        return out;
    }
    let _ = writeln!(out, "agents:");
    for (name, agent) in &agents.agents {
        let offered: Vec<String> =
            effective_agent_tools(agents, Some(name)).iter().map(|entry| agent_tool_name(&entry.agent)).collect();
        let offered = if offered.is_empty() { "none".to_owned() } else { offered.join(", ") };
        let _ = writeln!(out, "  {name}: `{}` at {}; agent tools offered: {offered}", agent.model, agent.base_url);
    }
    out
}

/// `tether stubs`: the typed Python API a script sees for `source`'s tools,
/// or, with `agent`, as that agent's model sees them (its agent tools
/// included). Ends the tools and `source`.
///
/// Made from a turn's own list, so a script sees exactly this. No script
/// runs, so the turn needs no sidecar (`run_script` is never offered to
/// scripts anyway).
///
/// # Errors
/// If a tool source cannot be started, `agent` is not configured, or two
/// tools share a name.
pub async fn stubs(source: Source, agent: Option<String>) -> anyhow::Result<String> {
    let tools = ToolSet::start(&source.config.tools).await?;
    let outcome = (|| {
        let mut builder = tools.add_to(Turn::builder("stubs").limits(source.config.turn.limits.clone()));
        if let Some(agent) = &agent {
            let (agent, agents) =
                ModelChoice { agent: Some(agent.clone()), ..ModelChoice::default() }.resolve(&source.config.agents)?;
            let nested: NestedTurnSetup = Arc::new(|_: &str, builder| builder);
            for tool in PeerAgents::new(agents, nested, Arc::new(NoAgentEvents)).tools_for(Some(&agent))? {
                builder = builder.add_tool(tool);
            }
        }
        anyhow::Ok(builder.build()?.script_stubs())
    })();
    tools.shutdown().await;
    source.finish(false)?;
    outcome
}

/// `tether prompt`'s output: `prompt` as the model gets it — the system
/// prompt, then each tool's name, description and parameters — and its size
/// in bytes of JSON (what the request carries); with `json`, one object
/// `{"system_prompt", "tools", "bytes": {"system_prompt", "tools", "total"}}`.
///
/// # Errors
/// Never in practice (every part is JSON).
pub fn prompt(prompt: &ModelPrompt, json: bool) -> anyhow::Result<String> {
    let system = serde_json::to_string(&prompt.system_prompt)?.len();
    let tools = serde_json::to_string(&prompt.tools)?.len();
    let bytes = serde_json::json!({"system_prompt": system, "tools": tools, "total": system + tools});
    if json {
        let all = serde_json::json!({"system_prompt": prompt.system_prompt, "tools": prompt.tools, "bytes": bytes});
        return Ok(format!("{}\n", serde_json::to_string_pretty(&all)?));
    }
    let mut out = format!("system prompt:\n{}\n", prompt.system_prompt);
    for tool in &prompt.tools {
        let function = &tool["function"];
        let _ = writeln!(out, "\ntool `{}`:", function["name"].as_str().unwrap_or_default());
        let _ = writeln!(out, "{}", function["description"].as_str().unwrap_or_default());
        let _ = writeln!(out, "parameters: {}", function["parameters"]);
    }
    let _ = writeln!(
        out,
        "\n{} tools; {tools} bytes of tools and {system} of system prompt, {} bytes in all (as JSON)",
        prompt.tools.len(),
        system + tools
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn metadata_reads_as_words() {
        let meta = ToolMeta {
            approval: ApprovalRequirement::Always,
            time_limit: Some(Duration::from_millis(1500)),
            replay: ToolReplay::Safe,
            ..ToolMeta::default()
        };
        assert_eq!(describe_meta(&meta), "requires approval, has effects, replay-safe, timeout 1500ms");
        let read = ToolMeta { read_only: true, concurrency_safe: true, ..ToolMeta::default() };
        assert_eq!(describe_meta(&read), "read-only, concurrent");
    }

    #[test]
    fn each_agent_is_listed_with_the_agent_tools_it_is_offered() {
        use tether_backend::agent::{AgentConfig, AgentToolEntry};
        let agent = |model: &str| AgentConfig {
            base_url: "http://localhost:11434/v1".into(),
            model: model.into(),
            api_key_env: None,
            system_prompt: None,
            tools: vec![],
        };
        let config = AgentsConfig {
            agents: [("main".to_owned(), agent("m1")), ("Billing Desk".to_owned(), agent("m2"))].into(),
            agent_tools: vec![AgentToolEntry::new("Billing Desk", "Billing."), AgentToolEntry::new("main", "Support.")],
        };
        let text = render_agents(&config);
        assert!(
            text.contains("  main: `m1` at http://localhost:11434/v1; agent tools offered: agent_billing_desk\n"),
            "{text}"
        );
        assert!(
            text.contains("  Billing Desk: `m2` at http://localhost:11434/v1; agent tools offered: agent_main\n"),
            "{text}"
        );
        assert_eq!(render_agents(&AgentsConfig::default()), "");
    }
}
