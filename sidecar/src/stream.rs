//! A run's side of its gRPC stream: the sender of its messages to the backend
//! ([`Outbound`]) and the results the backend still owes it ([`PendingCalls`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tether_proto::pb;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

/// The backend's stream is gone: nobody reads the run's messages any more.
/// Carried inside a wasmtime error so the run can tell it from a guest fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the backend's stream is gone")]
pub(crate) struct BackendGone;

/// Where a run's messages to the backend go. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Outbound(mpsc::Sender<Result<pb::SidecarMessage, Status>>);

impl Outbound {
    /// A sender over `sender`, whose receiver is the gRPC response stream.
    pub(crate) fn new(sender: mpsc::Sender<Result<pb::SidecarMessage, Status>>) -> Self {
        Outbound(sender)
    }

    /// Sends one message, waiting while the stream is full.
    ///
    /// # Errors
    /// [`BackendGone`] when the backend no longer reads the stream.
    pub(crate) async fn send(&self, kind: pb::sidecar_message::Kind) -> Result<(), BackendGone> {
        self.0.send(Ok(pb::SidecarMessage { kind: Some(kind) })).await.map_err(|_| BackendGone)
    }

    /// True when `room` more messages fit in the stream's buffer now.
    pub(crate) fn has_room(&self, room: usize) -> bool {
        self.0.capacity() >= room
    }

    /// Sends one message without waiting; `false` when it was dropped (the
    /// stream is full, or the backend is gone).
    pub(crate) fn try_send(&self, kind: pb::sidecar_message::Kind) -> bool {
        self.0.try_send(Ok(pb::SidecarMessage { kind: Some(kind) })).is_ok()
    }

    /// Completes when the backend stops reading the stream.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only waits.
    pub(crate) async fn closed(&self) {
        self.0.closed().await;
    }
}

/// Results the backend still owes a run, by call id. The run's inbound reader
/// delivers into it; the run's calls wait on it. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct PendingCalls {
    waiting: Arc<Mutex<HashMap<String, oneshot::Sender<pb::ToolResult>>>>,
}

impl PendingCalls {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, oneshot::Sender<pb::ToolResult>>> {
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers call `id`; the receiver gets its result.
    pub(crate) fn expect(&self, id: &str) -> oneshot::Receiver<pb::ToolResult> {
        let (sender, receiver) = oneshot::channel();
        self.lock().insert(id.to_owned(), sender);
        receiver
    }

    /// Hands `result` to the call waiting for it.
    ///
    /// # Errors
    /// Returns the result back if no call of this run waits for its id.
    pub(crate) fn deliver(&self, result: pb::ToolResult) -> Result<(), pb::ToolResult> {
        match self.lock().remove(&result.id) {
            // A send fails only if the call was abandoned meanwhile; nothing waits then.
            Some(sender) => {
                let _ = sender.send(result);
                Ok(())
            }
            None => Err(result),
        }
    }
}
