//! The `tether` command's pieces, public so the end-to-end tests run the very
//! demo a newcomer runs.
//!
//! - [`demo`]: the demo world and its tools
//! - [`embedded`]: a sidecar in the same process, served on loopback
//! - [`printing`]: a call handler that runs demo tools and prints each call

pub mod demo;
pub mod embedded;
pub mod printing;
