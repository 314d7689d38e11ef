//! The client side of one connection to an MCP server: Tether's client
//! info, and a `tools/call` whose progress notifications reach the caller
//! while it runs.
//!
//! rmcp gives each request its own `progressToken` in `_meta`; the
//! connection's handler passes every `notifications/progress` to rmcp's
//! [`ProgressDispatcher`], where the call holding that token reads it.

use futures::{FutureExt, StreamExt};
use rmcp::Peer;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelledNotificationParam, ClientCapabilities, ClientConfig, ClientRequest,
    Implementation, ProgressNotificationParam, Request, RequestId, ServerResult,
};
use rmcp::service::{MaybeSendFuture, NotificationContext, PeerRequestOptions, RoleClient, ServiceError};
use std::future::Future;
use std::sync::Arc;
use tether_turn::ToolProgress;

/// Where one call's progress goes.
pub(crate) type ProgressSink = Arc<dyn Fn(ToolProgress) + Send + Sync>;

/// The handler of one connection. Each connection has its own, so a token
/// of a connection that ended never meets a call on the next one.
#[derive(Clone)]
pub(crate) struct Client {
    progress: ProgressDispatcher,
}

impl Client {
    pub(crate) fn new() -> Client {
        Client { progress: ProgressDispatcher::new() }
    }

    /// Calls a tool on `peer` (this handler's connection), handing each
    /// progress notification the server sends for it to `sink` until the
    /// answer comes (none after it; a report whose progress does not grow is
    /// dropped).
    ///
    /// # Cancel safety
    /// Dropping the future cancels the request (`notifications/cancelled`
    /// goes to the server); the server may still have acted.
    pub(crate) async fn call_tool(
        &self,
        peer: &Peer<RoleClient>,
        params: CallToolRequestParams,
        sink: ProgressSink,
    ) -> Result<CallToolResult, ServiceError> {
        let request = ClientRequest::CallToolRequest(Request::new(params));
        let handle = peer.send_cancellable_request(request, PeerRequestOptions::no_options()).await?;
        let mut abandoned = Abandoned { peer: peer.clone(), id: Some(handle.id.clone()) };
        let mut updates = self.progress.subscribe(handle.progress_token.clone()).await;
        // rmcp hands each notification to its own task, so reports can come
        // out of order, or after the answer: only growing progress is passed
        // on, and none once the answer is in and the queue is read.
        let mut last = f64::NEG_INFINITY;
        let mut report = |update: ProgressNotificationParam| {
            if update.progress > last {
                last = update.progress;
                sink(ToolProgress { progress: update.progress, total: update.total, message: update.message });
            }
        };
        let answer = handle.await_response();
        tokio::pin!(answer);
        let answer = loop {
            tokio::select! {
                biased;
                answer = &mut answer => break answer,
                Some(update) = updates.next() => report(update),
            }
        };
        while let Some(Some(update)) = updates.next().now_or_never() {
            report(update);
        }
        abandoned.id = None;
        match answer? {
            ServerResult::CallToolResult(result) => Ok(result),
            // A reply without `content` decodes as the empty result.
            ServerResult::EmptyResult(_) => Ok(CallToolResult::default()),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }
}

impl rmcp::ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("tether", env!("CARGO_PKG_VERSION")))
    }

    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.progress.handle_notification(params)
    }
}

/// Tells the server a call was given up when the future awaiting it drops.
struct Abandoned {
    peer: Peer<RoleClient>,
    /// The request, until its answer came.
    id: Option<RequestId>,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let (Some(id), Ok(runtime)) = (self.id.take(), tokio::runtime::Handle::try_current()) else { return };
        let peer = self.peer.clone();
        let reason = Some("the caller gave up on the call".to_owned());
        runtime.spawn(async move {
            if let Err(e) = peer.notify_cancelled(CancelledNotificationParam::new(Some(id), reason)).await {
                tracing::debug!(error = %e, "the cancellation did not reach the MCP server");
            }
        });
    }
}
