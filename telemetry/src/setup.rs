//! The process's subscriber: log lines on stderr (text or JSON), and, when an
//! OTLP endpoint is given, every span exported to an OpenTelemetry collector
//! over gRPC.
//!
//! Two filters, one per job: `RUST_LOG` (or the default filter) decides which
//! log lines are written; the export takes every span at INFO and above, so
//! a quiet log (`warn`) still exports whole traces. Spans of the gRPC and
//! OpenTelemetry crates themselves are never exported (exporting them would
//! make spans of its own).

use crate::error::TelemetryError;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::fmt;
use std::str::FromStr;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer, Registry};

/// The instrumentation scope of Tether's spans.
const SCOPE: &str = "tether";

/// Crates whose spans are never exported: the exporter's own transport and
/// the OpenTelemetry SDK (a span made while exporting would be exported).
const NOT_EXPORTED: [&str; 6] = ["h2", "hyper", "tonic", "tower", "opentelemetry", "tracing_opentelemetry"];

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum LogFormat {
    /// One human-readable line per event, with the fields of its spans
    /// (`run{run_id=… turn_id=…}: run ended`), in colour only when stderr
    /// is a terminal. The default.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields`
    /// (the event's, `message` included), `span` (the innermost span's name
    /// and fields) and `spans` (every enclosing span, outermost first).
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("unknown log format `{other}`: use `text` or `json`")),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// What a process logs and exports. Defaults: text logs, the filter `info`
/// when `RUST_LOG` is unset, no export.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    service_name: String,
    log_format: LogFormat,
    default_log_filter: String,
    otlp_endpoint: Option<String>,
}

impl TelemetryConfig {
    /// A config for the service `service_name` (the exported spans'
    /// `service.name`, e.g. `tether-sidecar` or `tether-backend`).
    pub fn new(service_name: impl Into<String>) -> Self {
        TelemetryConfig {
            service_name: service_name.into(),
            log_format: LogFormat::Text,
            default_log_filter: "info".to_owned(),
            otlp_endpoint: None,
        }
    }

    /// Writes log lines as `format`.
    pub fn log_format(mut self, format: LogFormat) -> Self {
        self.log_format = format;
        self
    }

    /// The log filter used when `RUST_LOG` is unset (`EnvFilter` syntax,
    /// e.g. `warn` or `tether_sidecar=debug,info`).
    pub fn default_log_filter(mut self, filter: impl Into<String>) -> Self {
        self.default_log_filter = filter.into();
        self
    }

    /// Exports spans to the OTLP/gRPC collector at `endpoint`
    /// (e.g. `http://localhost:4317`); `None` or an empty string: no export.
    pub fn otlp_endpoint(mut self, endpoint: Option<String>) -> Self {
        self.otlp_endpoint = endpoint.filter(|e| !e.trim().is_empty());
        self
    }

    /// Builds the subscriber without installing it: install it with
    /// [`tracing::subscriber::set_global_default`], or for one thread with
    /// [`tracing::subscriber::set_default`].
    ///
    /// # Errors
    /// [`TelemetryError::LogFilter`] for an unreadable filter,
    /// [`TelemetryError::NoRuntime`] or [`TelemetryError::Endpoint`] when
    /// export is asked for and cannot be set up.
    pub fn build(self) -> Result<(impl tracing::Subscriber + Send + Sync + 'static, Telemetry), TelemetryError> {
        let filter = log_filter(&self.default_log_filter)?;
        let logs: Box<dyn Layer<Registry> + Send + Sync> = match self.log_format {
            LogFormat::Text => {
                // Colours only for a person at a terminal: a log file or a
                // collector would get escape codes in every line.
                let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
                tracing_subscriber::fmt::layer()
                    .with_ansi(ansi)
                    .with_writer(std::io::stderr)
                    .with_filter(filter)
                    .boxed()
            }
            LogFormat::Json => tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .with_writer(std::io::stderr)
                .with_filter(filter)
                .boxed(),
        };
        let mut layers = vec![logs];
        let telemetry = match &self.otlp_endpoint {
            Some(endpoint) => {
                let (export, telemetry) = otlp_layer(&self.service_name, endpoint)?;
                layers.push(export.boxed());
                telemetry
            }
            None => Telemetry { provider: None },
        };
        Ok((tracing_subscriber::registry().with(layers), telemetry))
    }

    /// Builds the subscriber and installs it for the whole process; with
    /// export, also makes W3C Trace Context the global propagator.
    ///
    /// # Errors
    /// As for [`TelemetryConfig::build`], and
    /// [`TelemetryError::AlreadyInstalled`] when the process has a global
    /// subscriber already.
    pub fn init(self) -> Result<Telemetry, TelemetryError> {
        let (subscriber, telemetry) = self.build()?;
        subscriber.try_init().map_err(|_| TelemetryError::AlreadyInstalled)?;
        if telemetry.is_exporting() {
            opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        }
        Ok(telemetry)
    }
}

/// The layer that exports spans to the OTLP/gRPC collector at `endpoint`
/// as service `service_name`, for a backend that builds its own subscriber:
/// `registry().with(your_layers).with(layer)`. It takes spans at INFO and
/// above, less those of the transport and OpenTelemetry crates.
///
/// Spans are batched and sent from a background thread (the batch size,
/// delay and queue follow the `OTEL_BSP_*` variables); the channel to the
/// collector connects lazily and reconnects, so a collector that is down
/// loses spans (the SDK logs a warning) and harms nothing else.
///
/// # Errors
/// [`TelemetryError::NoRuntime`] outside a Tokio runtime (the exporter's
/// channel runs on it), [`TelemetryError::Endpoint`] for an endpoint that is
/// not a plain `http://` URL.
pub fn otlp_layer<S>(
    service_name: &str,
    endpoint: &str,
) -> Result<(impl Layer<S> + Send + Sync + 'static, Telemetry), TelemetryError>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(TelemetryError::NoRuntime);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|error| TelemetryError::Endpoint { endpoint: endpoint.to_owned(), reason: error.to_string() })?;
    let resource = Resource::builder().with_service_name(service_name.to_owned()).build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    let exported = NOT_EXPORTED.iter().fold(Targets::new().with_default(LevelFilter::INFO), |targets, target| {
        targets.with_target(*target, LevelFilter::OFF)
    });
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer(SCOPE)).with_filter(exported);
    Ok((layer, Telemetry { provider: Some(provider) }))
}

/// `RUST_LOG` when set, else `default`.
fn log_filter(default: &str) -> Result<EnvFilter, TelemetryError> {
    let (source, value) = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(value) if !value.trim().is_empty() => (EnvFilter::DEFAULT_ENV, value),
        _ => ("the default log filter", default.to_owned()),
    };
    EnvFilter::builder().parse(&value).map_err(|error| TelemetryError::LogFilter {
        origin: source,
        value,
        reason: error.to_string(),
    })
}

/// The running export, if any. Call [`Telemetry::shutdown`] before the
/// process (or the Tokio runtime) ends: spans still buffered are sent then.
#[derive(Debug)]
#[must_use = "call `shutdown` before exiting, or the spans still buffered are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// True when spans are exported.
    pub fn is_exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends the spans still buffered and stops the export; waits at most
    /// the SDK's shutdown time-out (5 s) when the collector does not answer.
    /// Spans ended after this are dropped. Nothing to do without export.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else { return };
        // The SDK blocks this thread until its exporter thread has sent the
        // last batch, over a channel that needs this runtime to make progress.
        let result = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime.spawn_blocking(move || provider.shutdown()).await.unwrap_or_else(|error| {
                Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(error.to_string()))
            }),
            Err(_) => provider.shutdown(),
        };
        if let Err(error) = result {
            tracing::warn!(%error, "the last spans may not have reached the OTLP collector");
        }
    }
}
