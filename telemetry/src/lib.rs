//! Tether's logs and traces, one setup for the sidecar, the backend library
//! and the `tether` command.
//!
//! Where things are:
//! - `setup`: [`TelemetryConfig`] — log lines on stderr as text or JSON
//!   ([`LogFormat`]), spans exported over OTLP/gRPC ([`otlp_layer`]), and
//!   [`Telemetry`], which flushes them at shutdown
//! - `context`: [`TraceContext`], the W3C trace context that carries one trace
//!   across the backend–sidecar stream (`docs/protocol.md`)
//! - `error`: `TelemetryError`
//!
//! `setup`, `error` and the gRPC metadata side of [`TraceContext`] need the
//! default feature `export`; without it the crate has no transport among its
//! dependencies.
//! - `args` (feature `cli`): `TelemetryArgs`, the `--log-format` and
//!   `--otlp-endpoint` flags of the sidecar and the `tether` command
//!
//! Span and field names are listed in `docs/operating.md` ("Logs and traces").

#[cfg(feature = "cli")]
mod args;
mod context;
#[cfg(feature = "export")]
mod error;
#[cfg(feature = "export")]
mod setup;

#[cfg(feature = "cli")]
pub use args::TelemetryArgs;
pub use context::{TRACE_HEADERS, TraceContext};
#[cfg(feature = "export")]
pub use error::TelemetryError;
#[cfg(feature = "export")]
pub use setup::{LogFormat, Telemetry, TelemetryConfig, otlp_layer};
