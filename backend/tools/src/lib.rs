//! Tools from a configuration file (`tether.toml`): MCP servers and built-in
//! kinds that need no code, ready to join a [`Turn`](tether_turn::Turn). Every
//! tool they give goes through the turn's one execution path like any other.
//!
//! Where things are:
//! - `catalog`: [`ToolsConfig`] — reading and checking the file's
//!   `[[tools]]` and `[mcp.<name>]` entries, the one place that knows every
//!   kind; errors name the file, the key and what to write instead
//!   ([`ConfigError`]). The file's top level and its other sections are
//!   read above this crate (`tether-backend`'s `Config`)
//! - [`read`]: the reading kit every kind and section uses ([`read::At`]:
//!   where an entry is, key checks with a did-you-mean, schemas, names)
//! - `meta`: the metadata keys every entry takes (`requires_approval`,
//!   `read_only`, `deferred`, `replay`, `repeat`, `timeout`, `concurrent`)
//! - `vars`: [`Vars`], `${NAME}` from the backend's environment
//! - `set`: [`ToolSet`] — the tools, ready for turns; owns the MCP servers
//! - `mcp`: MCP servers through `rmcp` (stdio and streamable HTTP)
//! - `http`, `command`, `sqlite`, `fixed`: the built-in kinds `http`,
//!   `command`, `sqlite` and `static`, each with its keys
//! - `text`: text cut to size for failure values
//! - `http_client`: [`http_client()`], the one outbound HTTP client setup
//!
//! A tool that fails when called gives a failure value, never an error:
//! codes and messages are `tether_codes`' (`tool_failed` with "the call was
//! not made" or "the call may have run", `result_too_large`, …).

mod catalog;
mod command;
mod error;
mod fixed;
mod http;
mod http_client;
pub(crate) mod mcp;
mod meta;
pub mod read;
mod set;
mod sqlite;
mod text;
mod vars;

pub use catalog::ToolsConfig;
pub use error::{ConfigError, ToolsError};
pub use http_client::http_client;
pub use mcp::ServerStatus;
pub use set::ToolSet;
pub use vars::Vars;
