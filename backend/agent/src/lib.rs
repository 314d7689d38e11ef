//! The agent loop on an OpenAI-compatible chat-completions endpoint, and peer
//! agents as tools: each call to an agent is one nested turn, and every turn
//! of a chain shares the first one's deadline and counts toward its depth cap
//! (`TurnLimits::max_depth`).
//!
//! Where things are:
//! - `config`: [`AgentConfig`] (`[agents.<name>]`), [`AgentToolEntry`]
//!   (`[[agent_tools]]`) and [`AgentsConfig`], what a config file holds
//! - `merge`: the effective agent-tool list for a caller, and the tool name
//!   an agent gets (`agent_<name>`)
//! - `chat`: one streamed chat completion
//!   ([`ChatEndpoint`])
//! - `events`: [`AgentEvent`]s (tokens, tool calls, nested turns) for a live view
//! - `run`: [`AgentLoop`], the loop that drives a [`Turn`](tether_turn::Turn)
//!   until the model answers or a limit trips
//! - `peers`: [`PeerAgents`], agents as tools: runners built lazily and
//!   cached, each call one stateless nested turn
//! - `park`: [`AgentPark`], where a parked agent turn's loop stands
//! - `error`: [`AgentError`]

mod chat;
mod config;
mod error;
mod events;
mod merge;
mod park;
mod peers;
mod run;

pub use chat::{AssistantMessage, ChatEndpoint, ModelToolCall};
pub use config::{AgentConfig, AgentToolEntry, AgentsConfig};
pub use error::AgentError;
pub use events::{AgentEvent, AgentEventLog, AgentEventSink, NoAgentEvents};
pub use merge::{AGENT_TOOL_PREFIX, agent_tool_name, effective_agent_tools};
pub use park::{AgentPark, NestedAt, WaitsOn};
pub use peers::{NestedTurnSetup, PeerAgents, nested_turn_id};
pub use run::{AgentLoop, AgentRun, DEFAULT_MAX_ITERATIONS, ModelPrompt};
