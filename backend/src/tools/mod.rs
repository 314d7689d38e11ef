//! Tools from a configuration file (`tether.toml`): MCP servers and built-in
//! kinds that need no code, ready to join a [`Turn`](crate::Turn). Every
//! tool they give goes through the turn's one execution path like any other.
//!
//! Where things are:
//! - `config`: [`Config`] — reading and checking the file; errors name the
//!   file, the key and what to write instead ([`ConfigError`])
//! - `read`: the reading kit every kind and section uses (`At`: where an
//!   entry is, key checks with a did-you-mean, schemas, names)
//! - `meta`: the metadata keys every entry takes (`requires_approval`,
//!   `read_only`, `deferred`, `replay`, `repeat`, `timeout`, `concurrent`)
//! - `sections`: [`TurnSection`] (`[turn]`) and the agents' sections
//! - `vars`: [`Vars`], `${NAME}` from the backend's environment
//! - `set`: [`ToolSet`] — the tools, ready for turns; owns the MCP servers
//! - `mcp`: MCP servers through `rmcp` (stdio and streamable HTTP)
//! - `http`, `command`, `sqlite`, `fixed`: the built-in kinds `http`,
//!   `command`, `sqlite` and `static`, each with its keys
//! - `text`: text cut to size for failure values
//!
//! A tool that fails when called gives a failure value, never an error:
//! codes and messages are `tether_codes`' (`tool_failed` with "the call was
//! not made" or "the call may have run", `result_too_large`, …).

mod command;
mod config;
mod error;
mod fixed;
mod http;
pub(crate) mod mcp;
mod meta;
mod read;
mod sections;
mod set;
mod sqlite;
mod text;
mod vars;

pub use config::Config;
pub use error::{ConfigError, ToolsError};
pub use mcp::ServerStatus;
pub use sections::TurnSection;
pub use set::ToolSet;
pub use vars::Vars;
