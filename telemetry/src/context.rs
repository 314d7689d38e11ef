//! W3C Trace Context across the backend–sidecar stream.
//!
//! A run's trace crosses the process boundary twice: the backend sends the
//! context of the span it runs the script in as `traceparent`/`tracestate`
//! request metadata on the `Run` call, and the sidecar sends the context of
//! each call's span back on `ToolCall.trace_context` (and
//! `CallRefused.trace_context`). Both are the W3C Trace Context headers,
//! written and read by OpenTelemetry's [`TraceContextPropagator`] — not the
//! process's global propagator, so the contract holds whatever an embedding
//! backend configured (`docs/protocol.md`).

#[cfg(feature = "export")]
use opentelemetry::propagation::Injector;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::collections::HashMap;
#[cfg(feature = "export")]
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The W3C Trace Context headers: the only ones carried.
pub const TRACE_HEADERS: [&str; 2] = ["traceparent", "tracestate"];

/// The longest header value kept. `traceparent` is 55 bytes and the W3C
/// recommends at most 512 bytes of `tracestate`; a longer value is dropped
/// (the span then starts a trace of its own) rather than copied around.
const MAX_HEADER_BYTES: usize = 1024;

/// The trace context of one span as W3C headers, to cross a process boundary.
///
/// Empty when the span is not traced (no OpenTelemetry layer is installed,
/// or it filtered the span out): then nothing is sent, and the receiving
/// side's span simply has no remote parent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceContext {
    headers: HashMap<String, String>,
}

impl TraceContext {
    /// The context of `span`, for a child in another process.
    pub fn of(span: &tracing::Span) -> TraceContext {
        let cx = span.context();
        if !cx.span().span_context().is_valid() {
            return TraceContext::default();
        }
        let mut headers = HashMap::new();
        TraceContextPropagator::new().inject_context(&cx, &mut headers);
        TraceContext::from_headers(headers)
    }

    /// The context in `headers` as received (e.g. `ToolCall.trace_context`):
    /// only the W3C headers are kept, and none empty or over 1 KiB.
    pub fn from_headers(mut headers: HashMap<String, String>) -> TraceContext {
        headers.retain(|name, value| {
            TRACE_HEADERS.contains(&name.as_str()) && !value.is_empty() && value.len() <= MAX_HEADER_BYTES
        });
        TraceContext { headers }
    }

    /// The context a gRPC request carries in its metadata.
    #[cfg(feature = "export")]
    pub fn from_metadata(metadata: &MetadataMap) -> TraceContext {
        let headers = TRACE_HEADERS
            .iter()
            .filter_map(|&name| {
                let value = metadata.get(name)?.to_str().ok()?;
                Some((name.to_owned(), value.to_owned()))
            })
            .collect();
        TraceContext::from_headers(headers)
    }

    /// Writes the headers into a gRPC request's metadata.
    #[cfg(feature = "export")]
    pub fn inject(&self, metadata: &mut MetadataMap) {
        TraceContextPropagator::new().inject_context(&self.to_otel(), &mut MetadataInjector(metadata));
    }

    /// The headers, e.g. for `ToolCall.trace_context`.
    pub fn into_headers(self) -> HashMap<String, String> {
        self.headers
    }

    /// True when there is no context to pass on.
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }

    /// Makes `span` a child of this remote context. Call it before the span
    /// is first entered (OpenTelemetry fixes a span's parent when it starts).
    /// An empty or unreadable context leaves the span's parent as it was —
    /// the current span, or none — so a bad header never loses the span.
    pub fn set_parent_of(&self, span: &tracing::Span) {
        let cx = self.to_otel();
        if !cx.span().span_context().is_valid() {
            return;
        }
        if let Err(error) = span.set_parent(cx) {
            tracing::debug!(%error, "cannot set a span's remote parent");
        }
    }

    fn to_otel(&self) -> opentelemetry::Context {
        TraceContextPropagator::new().extract(&self.headers)
    }
}

#[cfg(feature = "export")]
/// Writes text headers into tonic metadata; a header that is not valid
/// metadata is skipped (the propagator writes only valid ones).
struct MetadataInjector<'a>(&'a mut MetadataMap);

#[cfg(feature = "export")]
impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if value.is_empty() {
            return;
        }
        if let (Ok(key), Ok(value)) = (MetadataKey::from_bytes(key.as_bytes()), MetadataValue::try_from(value)) {
            self.0.insert(key, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn only_w3c_headers_of_sane_size_are_kept() {
        let headers = HashMap::from([
            ("traceparent".to_owned(), PARENT.to_owned()),
            ("tracestate".to_owned(), "x".repeat(MAX_HEADER_BYTES + 1)),
            ("authorization".to_owned(), "secret".to_owned()),
        ]);
        let context = TraceContext::from_headers(headers);
        assert_eq!(context.into_headers(), HashMap::from([("traceparent".to_owned(), PARENT.to_owned())]));
    }

    #[cfg(feature = "export")]
    #[test]
    fn metadata_round_trip_keeps_the_parent() {
        let context = TraceContext::from_headers(HashMap::from([("traceparent".to_owned(), PARENT.to_owned())]));
        let mut metadata = MetadataMap::new();
        context.inject(&mut metadata);
        assert_eq!(metadata.get("traceparent").and_then(|v| v.to_str().ok()), Some(PARENT));
        assert_eq!(TraceContext::from_metadata(&metadata), context);
    }

    #[cfg(feature = "export")]
    #[test]
    fn an_unreadable_traceparent_is_not_passed_on() {
        let context = TraceContext::from_headers(HashMap::from([("traceparent".to_owned(), "00-nonsense".to_owned())]));
        let mut metadata = MetadataMap::new();
        context.inject(&mut metadata);
        assert!(metadata.is_empty(), "{metadata:?}");
    }

    #[test]
    fn an_untraced_span_has_no_context() {
        // No OpenTelemetry layer is installed in this test.
        let span = tracing::info_span!("untraced");
        assert!(TraceContext::of(&span).is_empty());
    }
}
