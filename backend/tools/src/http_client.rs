//! The one outbound HTTP client setup of the backend: rustls with the ring
//! provider (aws-lc-rs needs cmake and minutes to build) and the platform's
//! certificate roots. `http` tools, streamable-HTTP MCP servers and agent
//! endpoints all call through a client made here.

use std::sync::Arc;
use std::time::Duration;

/// A new client: TLS with the platform's roots, a 10 s connect timeout, no
/// overall timeout (each caller bounds its own requests).
///
/// # Errors
/// Why the TLS setup or the client failed (the platform's roots unreadable).
pub fn http_client() -> Result<reqwest::Client, String> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_platform_verifier())
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}
