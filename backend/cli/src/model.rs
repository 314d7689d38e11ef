//! Which model a command talks to (`--agent`, or `--base-url` and
//! `--model`): an agent of the config file, or an endpoint named on the
//! command line. Shared by `chat`, `ask`, `stubs` and `prompt`.

use anyhow::Context;
use tether_backend::agent::{AgentConfig, AgentsConfig};

/// The agent a chat talks to when the command line names none and the
/// config has several.
pub const DEFAULT_AGENT: &str = "main";

/// The variable `--base-url`'s key is read from without `--api-key-env`.
const DEFAULT_KEY_VAR: &str = "OPENAI_API_KEY";

/// How the user names the model: an agent of the config file, or an
/// endpoint given on the command line (which then joins the agents as
/// [`DEFAULT_AGENT`]).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ModelChoice {
    /// The agent of the config file (`[agents.<name>]`) to talk to
    /// (default: `main`, or the only agent configured).
    #[arg(long)]
    pub agent: Option<String>,
    /// An OpenAI-compatible endpoint's base URL, e.g.
    /// `http://localhost:11434/v1`, instead of an agent of the file.
    #[arg(long, env = "TETHER_MODEL_BASE_URL")]
    pub base_url: Option<String>,
    /// The model name at `--base-url`.
    #[arg(long, env = "TETHER_MODEL", requires = "base_url")]
    pub model: Option<String>,
    /// The environment variable holding `--base-url`'s API key (default:
    /// `OPENAI_API_KEY` when it is set; none, for a local model, when not).
    #[arg(long, requires = "base_url")]
    pub api_key_env: Option<String>,
}

impl ModelChoice {
    /// The agent to talk to, and the agents with it (an endpoint given on
    /// the command line is added as [`DEFAULT_AGENT`], replacing the file's).
    ///
    /// # Errors
    /// What to pass when the choice is missing or names no configured agent.
    pub fn resolve(&self, configured: &AgentsConfig) -> anyhow::Result<(String, AgentsConfig)> {
        let mut agents = configured.clone();
        if let Some(base_url) = &self.base_url {
            let model = self.model.clone().context("--base-url needs --model (or TETHER_MODEL): the model's name")?;
            let name = self.agent.clone().unwrap_or_else(|| DEFAULT_AGENT.to_owned());
            let api_key_env = match &self.api_key_env {
                Some(name) if std::env::var_os(name).is_some() => Some(name.clone()),
                Some(name) => anyhow::bail!(
                    "--api-key-env names `{name}`, which is not set in this environment: set it, or leave the \
                     flag out for a model that needs no key"
                ),
                None => std::env::var_os(DEFAULT_KEY_VAR).is_some().then(|| DEFAULT_KEY_VAR.to_owned()),
            };
            let system_prompt = agents.agents.get(&name).and_then(|a| a.system_prompt.clone());
            let tools = agents.agents.get(&name).map(|a| a.tools.clone()).unwrap_or_default();
            agents.agents.insert(
                name.clone(),
                AgentConfig { base_url: base_url.clone(), model, api_key_env, system_prompt, tools },
            );
            return Ok((name, agents));
        }
        let names: Vec<&String> = agents.agents.keys().collect();
        let name = match (&self.agent, names.as_slice()) {
            (Some(name), _) if agents.agents.contains_key(name) => name.clone(),
            (Some(name), _) => anyhow::bail!(
                "no agent `{name}` in the config; configured: {}",
                if names.is_empty() { "none".to_owned() } else { list(&names) }
            ),
            (None, []) => anyhow::bail!(
                "no model to talk to: pass --base-url URL --model NAME (an OpenAI-compatible endpoint), \
                 or add an `[agents.main]` section to the config (see examples/tether.toml)"
            ),
            (None, [only]) => (*only).clone(),
            (None, _) if agents.agents.contains_key(DEFAULT_AGENT) => DEFAULT_AGENT.to_owned(),
            (None, _) => anyhow::bail!("several agents are configured ({}): pick one with --agent NAME", list(&names)),
        };
        Ok((name, agents))
    }
}

fn list(names: &[&String]) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_key_variable_named_but_unset_is_an_error_and_a_set_one_is_kept() {
        let choice = ModelChoice {
            agent: None,
            base_url: Some("http://127.0.0.1:9/v1".into()),
            model: Some("m".into()),
            api_key_env: Some("TETHER_TEST_NO_SUCH_KEY_VAR".into()),
        };
        let refused = choice.resolve(&AgentsConfig::default()).unwrap_err().to_string();
        assert!(refused.contains("`TETHER_TEST_NO_SUCH_KEY_VAR`, which is not set"), "{refused}");
        let set = ModelChoice { api_key_env: Some("PATH".into()), ..choice };
        let (name, agents) = set.resolve(&AgentsConfig::default()).unwrap();
        assert_eq!(agents.agents[&name].api_key_env.as_deref(), Some("PATH"));
    }
}
