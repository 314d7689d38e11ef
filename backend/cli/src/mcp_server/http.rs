//! MCP over streamable HTTP (`tether mcp --listen ADDR`), at `/mcp`, with
//! rmcp's streamable HTTP service: one session (and so one turn) per client
//! `initialize`, kept by rmcp's in-memory session manager.
//!
//! Who may connect is decided as for the sidecar's TCP (`docs/security.md`):
//! with `--token-file`, every request must carry `authorization: Bearer
//! <token>` (compared in constant time; a wrong or missing one is answered
//! 401 before rmcp reads the request); without one, only a loopback address
//! may be bound, and rmcp's `Host` check (loopback names only) keeps a web
//! page from reaching it through DNS rebinding. mTLS is not served here.
//!
//! Bad bodies get JSON-RPC errors, as on stdio ([`json_errors`]): a body
//! over `--max-request-bytes` is answered 413 with `-32600`, one that is
//! not JSON 400 with `-32700` (rmcp would answer plain text); the session
//! goes on.

use super::Shared;
use super::session::Session;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::tower::StreamableHttpService;
use std::net::SocketAddr;
use std::sync::Arc;
use tether_sidecar::BearerToken;
use tokio_util::sync::CancellationToken;

/// Why the HTTP server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Not loopback, and no token to check clients by.
    #[error(
        "refusing to serve MCP on `{0}` without authentication: give a bearer token (`--token-file PATH`), or \
         listen on a loopback address (127.0.0.1, [::1])"
    )]
    Unauthenticated(SocketAddr),
    /// The address could not be bound.
    #[error("cannot listen on `{address}`")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The server stopped with an error.
    #[error("the MCP HTTP server failed")]
    Serve(#[source] std::io::Error),
}

/// Serves `shared`'s sessions on `address` until `stop` is cancelled;
/// prints `listening on http://ADDR/mcp` on stderr once bound.
///
/// # Errors
/// [`ListenError`]: an unauthenticated non-loopback address, a bind failure.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    address: SocketAddr,
    token: Option<BearerToken>,
    max_request_bytes: usize,
    stop: CancellationToken,
) -> Result<(), ListenError> {
    if token.is_none() && !address.ip().is_loopback() {
        return Err(ListenError::Unauthenticated(address));
    }
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(max_request_bytes)
        .with_cancellation_token(stop.child_token());
    if token.is_some() && !address.ip().is_loopback() {
        // Clients name this host as they please; the token decides.
        config = config.disable_allowed_hosts();
    }
    let service: StreamableHttpService<Session, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(Session::new(shared.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let mut router = axum::Router::new().nest_service("/mcp", service).layer(axum::middleware::from_fn(
        move |request: Request, next: Next| async move { json_errors(max_request_bytes, request, next).await },
    ));
    if let Some(token) = token {
        let token = Arc::new(token);
        router = router.layer(axum::middleware::from_fn(move |request: Request, next: Next| {
            let token = token.clone();
            async move { authorize(&token, request, next).await }
        }));
    }
    let listener =
        tokio::net::TcpListener::bind(address).await.map_err(|source| ListenError::Bind { address, source })?;
    let bound = listener.local_addr().map_err(|source| ListenError::Bind { address, source })?;
    eprintln!("tether mcp: listening on http://{bound}/mcp");
    axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await.map_err(ListenError::Serve)
}

/// Answers a POST body that is too large or not JSON with a JSON-RPC
/// error; lets the rest through to rmcp, the body read once and handed on.
async fn json_errors(max_bytes: usize, request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, max_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => {
            let message = format!("request too large: over the limit of {max_bytes} bytes (--max-request-bytes)");
            return rpc_error(StatusCode::PAYLOAD_TOO_LARGE, -32600, &message);
        }
    };
    if let Err(error) = serde_json::from_slice::<serde_json::Value>(&bytes) {
        return rpc_error(StatusCode::BAD_REQUEST, -32700, &format!("parse error: not JSON ({error})"));
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await
}

/// A JSON-RPC error with no id (the request could not be read), as `status`.
fn rpc_error(status: StatusCode, code: i32, message: &str) -> Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// Lets a request through only with the bearer token.
async fn authorize(token: &BearerToken, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.as_bytes().strip_prefix(b"Bearer "))
        .map(<[u8]>::trim_ascii);
    match presented {
        Some(presented) if token.matches(presented) => next.run(request).await,
        Some(_) => (StatusCode::UNAUTHORIZED, "the bearer token is wrong").into_response(),
        None => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "send `authorization: Bearer <token>` (the token `tether mcp --token-file` names)",
        )
            .into_response(),
    }
}
