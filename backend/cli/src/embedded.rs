//! A sidecar served inside this process on a loopback port: the sidecar
//! crate's [`EmbeddedSidecar`], the one implementation the CLI, the tests
//! and the Python package share.

pub use tether_sidecar::{EmbeddedError, EmbeddedSidecar};
