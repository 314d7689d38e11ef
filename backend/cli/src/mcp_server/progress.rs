//! Progress while a call runs: the session's turn sends its events here,
//! and each one under a client's request that asked for progress (it
//! carried a `progressToken`) goes back to that client as
//! `notifications/progress` — every nested call as it starts and as it
//! ends, and what a slow tool reports meanwhile.
//!
//! The turn's [`EventSink`] is synchronous; the notifications are sent by
//! the request's own handler ([`Watch::forward`]), which drains a channel
//! while the call runs, so nothing outlives the request.

use crate::turn::progress_text;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use tether_backend::turn::{EventSink, ToolEvent};
use tokio::sync::mpsc;

/// The session's event sink: routes each event to the request whose call
/// it belongs to (its own, or one nested under it).
#[derive(Debug, Default)]
pub(crate) struct SessionEvents {
    watching: Mutex<HashMap<String, mpsc::UnboundedSender<String>>>,
}

impl SessionEvents {
    /// Starts routing the events of `call_id` and the calls under it;
    /// they stop when the returned [`Watch`] is dropped.
    pub(crate) fn watch(self: &Arc<Self>, call_id: &str) -> Watch {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.lock().insert(call_id.to_owned(), sender);
        Watch { events: self.clone(), call_id: call_id.to_owned(), receiver, sent: 0.0 }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::UnboundedSender<String>>> {
        self.watching.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl EventSink for SessionEvents {
    fn emit(&self, event: &ToolEvent) {
        let call_id = event.call_id();
        // Nested ids are `<parent>/<n>`: the request's call is the first part.
        let top = call_id.split('/').next().unwrap_or(call_id);
        let watching = self.lock();
        let Some(sender) = watching.get(top) else { return };
        let said = match event {
            ToolEvent::ToolStarted { tool, .. } => format!("{call_id} {tool} started"),
            ToolEvent::ToolProgress { tool, progress, .. } => format!("{call_id} {tool}: {}", progress_text(progress)),
            ToolEvent::ToolCompleted { tool, error_code: None, duration, .. } => {
                format!("{call_id} {tool} ok ({:.1} ms)", duration.as_secs_f64() * 1000.0)
            }
            ToolEvent::ToolCompleted { tool, error_code: Some(code), .. } => {
                format!("{call_id} {tool} ended with tool error `{code}`")
            }
            ToolEvent::ToolFailed { tool, code, message, .. } => format!("{call_id} {tool} {code}: {message}"),
        };
        // A receiver gone is a request that ended: nothing to tell.
        let _ = sender.send(said);
    }
}

/// One request's events, while it runs.
#[derive(Debug)]
pub(crate) struct Watch {
    events: Arc<SessionEvents>,
    call_id: String,
    receiver: mpsc::UnboundedReceiver<String>,
    /// Notifications sent so far (each one's progress is its number).
    sent: f64,
}

impl Watch {
    /// Sends each event as a progress notification with `token` to `peer`,
    /// numbered from 1, for as long as the call runs: it never returns, and
    /// the caller drops it when the call ends. Without a token the events
    /// are discarded.
    ///
    /// # Cancel safety
    /// Cancel-safe: an event taken and not yet sent is lost, and the call
    /// it told of has ended.
    pub(crate) async fn forward(&mut self, peer: &Peer<RoleServer>, token: Option<&ProgressToken>) -> Infallible {
        loop {
            match self.receiver.recv().await {
                Some(message) => self.send(peer, token, message).await,
                // The sender lives in the session's map until this watch is
                // dropped, so this is not reached; wait like a closed watch.
                None => std::future::pending::<()>().await,
            }
        }
    }

    /// Sends what the call told of after [`forward`](Self::forward) was
    /// dropped (its last nested calls ending), before its answer goes out.
    pub(crate) async fn finish(&mut self, peer: &Peer<RoleServer>, token: Option<&ProgressToken>) {
        while let Ok(message) = self.receiver.try_recv() {
            self.send(peer, token, message).await;
        }
    }

    async fn send(&mut self, peer: &Peer<RoleServer>, token: Option<&ProgressToken>, message: String) {
        let Some(token) = token else { return };
        self.sent += 1.0;
        let update = ProgressNotificationParam::new(token.clone(), self.sent).with_message(message);
        if let Err(error) = peer.notify_progress(update).await {
            tracing::debug!(%error, "a progress notification was not sent");
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.events.lock().remove(&self.call_id);
    }
}
