//! The `tether` command's pieces, public so the end-to-end tests run the very
//! demo a newcomer runs. The binary (`main.rs`) only parses the command line
//! and dispatches to these.
//!
//! - [`wiring`]: what a command's flags and config make — the tools, a
//!   sidecar, the approver, the audit store — and every turn is opened from it
//! - [`turn`]: the CLI's turn — the configured tools and `run_script` in one list
//! - [`chat`]: `tether chat` and `tether ask` — the agent loop on the model the
//!   user names, the chat's read loop and the live view
//! - [`model`]: which model a command talks to (`--agent`, or `--base-url` and `--model`)
//! - [`listing`]: `tether tools` and `tether stubs` — the tools with their
//!   metadata, and the typed Python API a script sees
//! - [`init`]: `tether init` — a starter `tether.toml`, or one converted from
//!   an MCP client's servers
//! - [`audit`]: `tether audit` — a turn's audit rows and ledger read back, as
//!   the tree of calls
//! - [`demo`]: the demo world's data (and its tools in memory, for tests)
//! - [`demo_db`]: the demo world as a SQLite database and `examples/demo.toml`
//! - [`embedded`]: a sidecar in the same process, served on loopback
//! - [`interrupt`]: Ctrl-C and SIGTERM cancel `run`'s and `ask`'s turn, which is recorded
//! - [`terminal`]: the terminal approver (asks a person, shows the exact arguments)
//! - [`paint`]: colour on a terminal (ok, a tool's error, a failure, a prompt)
//! - [`answer_all`]: the approver of `--approval allow-all` and `approve --all`
//!   (one answer for every call, each printed and counted)
//! - [`mcp_server`]: `tether mcp` — the configured tools served to MCP
//!   clients as code mode, one turn per session, approvals asked through
//!   the client
//! - [`waiting`]: `tether pending` — what parked runs and agent turns wait on
//! - [`parked`]: `tether approve`, `deny` and `expire` — answering what waits,
//!   and resuming the script runs and agent turns it frees

pub mod answer_all;
pub mod audit;
pub mod chat;
pub mod demo;
pub mod demo_db;
pub mod embedded;
pub mod init;
pub mod interrupt;
mod line_editor;
pub mod listing;
pub mod mcp_server;
pub mod model;
pub mod paint;
pub mod parked;
pub mod terminal;
pub mod turn;
pub mod waiting;
pub mod wiring;
