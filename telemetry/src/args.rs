//! The logging and tracing flags every Tether command takes (feature `cli`).

use crate::setup::{LogFormat, TelemetryConfig};

/// `--log-format` and `--otlp-endpoint`, for `#[command(flatten)]`.
#[derive(Debug, Clone, clap::Args)]
pub struct TelemetryArgs {
    /// Log lines on stderr as `text`, or `json` (one object per line, with
    /// the fields of the enclosing spans).
    #[arg(long, global = true, env = "TETHER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, help_heading = "Logging (every command)")]
    pub log_format: LogFormat,
    /// Export spans to the OpenTelemetry collector at this OTLP/gRPC URL
    /// (e.g. `http://localhost:4317`). Default: no export.
    #[arg(long, global = true, env = "OTEL_EXPORTER_OTLP_ENDPOINT", help_heading = "Logging (every command)")]
    pub otlp_endpoint: Option<String>,
}

impl TelemetryArgs {
    /// The config these flags ask for, for service `service_name`, logging
    /// with `default_log_filter` when `RUST_LOG` is unset.
    pub fn config(&self, service_name: &str, default_log_filter: &str) -> TelemetryConfig {
        TelemetryConfig::new(service_name)
            .log_format(self.log_format)
            .default_log_filter(default_log_filter)
            .otlp_endpoint(self.otlp_endpoint.clone())
    }
}
