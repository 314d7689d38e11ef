//! Why logging or the export could not be set up.

/// Why [`TelemetryConfig`](crate::TelemetryConfig) could not set up logs or
/// the export. Each says what to change.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The log filter does not parse.
    #[error("{origin} `{value}` is not a log filter ({reason}); use e.g. `info` or `tether_sidecar=debug,warn`")]
    LogFilter {
        /// Where the filter came from: `RUST_LOG` or the default.
        origin: &'static str,
        /// The filter as given.
        value: String,
        /// What the parser said.
        reason: String,
    },
    /// The OTLP endpoint cannot be used.
    #[error(
        "the OTLP endpoint `{endpoint}` is not usable ({reason}); give the collector's OTLP/gRPC URL, e.g. `http://localhost:4317` (TLS is not built in: use a local collector)"
    )]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What the exporter said.
        reason: String,
    },
    /// Export was asked for outside a Tokio runtime.
    #[error("OTLP export must be set up inside a Tokio runtime (its gRPC channel runs there); call it from async code")]
    NoRuntime,
    /// The process already has a global subscriber.
    #[error(
        "a global tracing subscriber is already installed; use `TelemetryConfig::build` or `otlp_layer` and compose it with yours"
    )]
    AlreadyInstalled,
}
