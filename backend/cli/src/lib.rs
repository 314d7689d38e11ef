//! The `tether` command's pieces, public so the end-to-end tests run the very
//! demo a newcomer runs.
//!
//! - [`demo`]: the demo world's data (and its tools in memory, for tests)
//! - [`demo_db`]: the demo world as a SQLite database and `examples/demo.toml`
//! - [`turn`]: the CLI's turn — the configured tools and `run_script` in one list
//! - [`listing`]: `tether tools` — the tools with their metadata
//! - [`embedded`]: a sidecar in the same process, served on loopback
//! - [`terminal`]: the terminal approver (asks a person, shows the exact arguments)

pub mod audit;
pub mod chat;
pub mod demo;
pub mod demo_db;
pub mod embedded;
pub mod listing;
pub mod terminal;
pub mod turn;
