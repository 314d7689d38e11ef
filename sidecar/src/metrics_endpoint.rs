//! `GET /metrics` over HTTP/1.1, for Prometheus to scrape.
//!
//! hyper's HTTP/1 server (already in the build through tonic) with one route;
//! a web framework would add nothing but weight.
//!
//! Ownership: [`serve`] owns the listener's admitted connections (see
//! `connections`: a bounded number at a time) and one task per connection
//! in a `JoinSet`; it ends when `stop` completes, and dropping the set ends
//! the connections still open. A connection whose next request header has
//! not come within the handshake timeout is closed (hyper's
//! `header_read_timeout`), an idle keep-alive one included: Prometheus
//! then opens a new one for its next scrape.

use crate::connections::{Admitted, Handshake};
use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// Serves `page()` at `GET /metrics` on the connections of `incoming` until
/// `stop` completes; a connection whose request header takes longer than
/// `header_timeout` is closed.
pub(crate) async fn serve(
    incoming: impl Stream<Item = Admitted<TcpStream>>,
    header_timeout: Duration,
    page: impl Fn() -> String + Send + Sync + 'static,
    stop: impl Future<Output = ()>,
) {
    let page = Arc::new(page);
    let mut connections = JoinSet::new();
    tokio::pin!(stop);
    let mut incoming = std::pin::pin!(incoming);
    loop {
        let stream = tokio::select! {
            () = &mut stop => return,
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next() => continue,
            admitted = incoming.next() => match admitted {
                Some(admitted) => admitted.guard(Handshake::None),
                None => return,
            },
        };
        let page = page.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let page = page.clone();
                async move { Ok::<_, Infallible>(respond(&request, || page())) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%error, "a metrics connection ended with an error");
            }
        });
    }
}

/// The answer to one request: the page for `GET /metrics`, else a status
/// that says what to ask instead.
fn respond(request: &Request<Incoming>, page: impl FnOnce() -> String) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: String, content_type: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
        response
    };
    let plain = "text/plain; charset=utf-8";
    if request.uri().path() != "/metrics" {
        return text(StatusCode::NOT_FOUND, "not found; the metrics are at `/metrics`\n".to_owned(), plain);
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "use GET for `/metrics`\n".to_owned(), plain);
    }
    text(StatusCode::OK, page(), crate::metrics::CONTENT_TYPE)
}
