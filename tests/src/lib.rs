//! End-to-end tests live in `e2e/`; this library holds what other packages'
//! tests share with them.
//!
//! - [`fake_model`]: a fake OpenAI-compatible chat-completions server
//! - [`postgres`]: the test PostgreSQL server and a schema of a test's own

pub mod fake_model;
pub mod postgres;
