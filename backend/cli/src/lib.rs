//! The `tether` command's pieces, public so the end-to-end tests run the very
//! demo a newcomer runs.
//!
//! - [`demo`]: the demo world and its tools
//! - [`demo_turn`]: the demo's turn — its tools and `run_script` in one list
//! - [`embedded`]: a sidecar in the same process, served on loopback
//! - [`terminal`]: the terminal approver (asks a person, shows the exact arguments)

pub mod demo;
pub mod demo_turn;
pub mod embedded;
pub mod terminal;
