//! A run's side of its gRPC stream: the sender of its messages to the backend
//! ([`Outbound`]), the stream's progress ([`Flow`]: a backend that stops
//! reading loses the run after `stall_timeout`), and the results the backend
//! still owes it ([`PendingCalls`]).

use futures::task::AtomicWaker;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;
use std::time::{Duration, Instant};
use tether_proto::pb;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

/// The backend's stream is gone: nobody reads the run's messages any more.
/// Carried inside a wasmtime error so the run can tell it from a guest fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the backend's stream is gone")]
pub(crate) struct BackendGone;

/// The messages of a run on their way to the backend: the gRPC response
/// stream takes them from here.
pub(crate) type Messages = mpsc::Receiver<Result<pb::SidecarMessage, Status>>;

/// What a run and its response stream share about the stream's progress.
///
/// A backend that stops reading fills its HTTP/2 window. The server then
/// holds the message it could not send and polls the stream no more until
/// the window opens; a server with room polls it whenever its task is woken.
/// So the run probes: every quarter of its stall timeout it wakes the task
/// that polls the stream ([`Flow::stalled`]). A stream polled since the last
/// probe moves; one that was not, across probes for the whole timeout, is
/// stalled — whether the run computes, waits on a tool result whose
/// `ToolCall` sits unread in the transport, or waits for room itself.
#[derive(Debug)]
pub(crate) struct Flow {
    /// Times the stream was polled.
    polls: AtomicU64,
    /// The task that polls the stream, woken to probe it.
    stream: AtomicWaker,
    /// What the stream says once the run ended because it stalled.
    abandoned: Mutex<Option<Status>>,
    /// The stream's messages (owned by the stream), so an abandoned run can
    /// drop the ones still waiting.
    messages: Weak<Mutex<Messages>>,
}

impl Flow {
    /// The flow of a stream that takes its messages from `messages`.
    pub(crate) fn new(messages: &Arc<Mutex<Messages>>) -> Arc<Flow> {
        Arc::new(Flow {
            polls: AtomicU64::new(0),
            stream: AtomicWaker::new(),
            abandoned: Mutex::new(None),
            messages: Arc::downgrade(messages),
        })
    }

    /// The flow of messages whose receiver is not a run's stream (the
    /// fuzz harness reads its channel itself): never probed, never stalled.
    pub(crate) fn unfollowed() -> Arc<Flow> {
        Arc::new(Flow {
            polls: AtomicU64::new(0),
            stream: AtomicWaker::new(),
            abandoned: Mutex::new(None),
            messages: Weak::new(),
        })
    }

    /// The stream is being polled, by the task `waker` wakes.
    pub(crate) fn polled(&self, waker: &Waker) {
        self.polls.fetch_add(1, Ordering::AcqRel);
        self.stream.register(waker);
    }

    /// Completes once the stream has not been polled for `timeout` (give or
    /// take a quarter of it) although its task was woken every quarter.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only waits.
    pub(crate) async fn stalled(&self, timeout: Duration) {
        let period = (timeout / 4).max(Duration::from_millis(10));
        let mut seen = self.polls.load(Ordering::Acquire);
        // Since the first probe the stream did not answer with a poll.
        let mut quiet_since: Option<Instant> = None;
        loop {
            // The probe: a stream the server may write to is polled at once.
            self.stream.wake();
            let probed = Instant::now();
            tokio::time::sleep(period).await;
            let polls = self.polls.load(Ordering::Acquire);
            if polls != seen {
                (seen, quiet_since) = (polls, None);
            } else if quiet_since.get_or_insert(probed).elapsed() >= timeout {
                return;
            }
        }
    }

    /// The run ended because the stream stalled: drops the messages still
    /// waiting (they would only hold memory), and makes `status` the last
    /// thing the stream says.
    pub(crate) fn abandon(&self, status: Status) {
        *lock(&self.abandoned) = Some(status);
        if let Some(messages) = self.messages.upgrade() {
            let mut messages = lock(&messages);
            while messages.try_recv().is_ok() {}
        }
    }

    /// The status of an abandoned run, once.
    pub(crate) fn take_abandoned(&self) -> Option<Status> {
        lock(&self.abandoned).take()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Why a message was not sent at once.
#[derive(Debug)]
pub(crate) enum NotSent {
    /// The stream has no room now: the message, back.
    Full(Box<pb::sidecar_message::Kind>),
    /// The backend no longer reads the stream.
    Gone,
}

/// Where a run's messages to the backend go. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Outbound {
    sender: mpsc::Sender<Result<pb::SidecarMessage, Status>>,
    flow: Arc<Flow>,
}

impl Outbound {
    /// A sender over `sender`, whose receiver is the gRPC response stream
    /// whose progress `flow` follows.
    pub(crate) fn new(sender: mpsc::Sender<Result<pb::SidecarMessage, Status>>, flow: Arc<Flow>) -> Self {
        Outbound { sender, flow }
    }

    /// The stream's progress.
    pub(crate) fn flow(&self) -> &Arc<Flow> {
        &self.flow
    }

    /// Sends one message, waiting while the stream is full.
    ///
    /// # Errors
    /// [`BackendGone`] when the backend no longer reads the stream.
    pub(crate) async fn send(&self, kind: pb::sidecar_message::Kind) -> Result<(), BackendGone> {
        self.sender.send(Ok(pb::SidecarMessage { kind: Some(kind) })).await.map_err(|_| BackendGone)
    }

    /// True when `room` more messages fit in the stream's buffer now.
    pub(crate) fn has_room(&self, room: usize) -> bool {
        self.sender.capacity() >= room
    }

    /// Sends one message without waiting.
    ///
    /// # Errors
    /// [`NotSent::Full`] (with the message) when the stream has no room now,
    /// [`NotSent::Gone`] when the backend is gone.
    pub(crate) fn try_send(&self, kind: pb::sidecar_message::Kind) -> Result<(), NotSent> {
        match self.sender.try_send(Ok(pb::SidecarMessage { kind: Some(kind) })) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(Ok(pb::SidecarMessage { kind: Some(kind) }))) => {
                Err(NotSent::Full(Box::new(kind)))
            }
            Err(_) => Err(NotSent::Gone),
        }
    }

    /// Completes when the backend stops reading the stream.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only waits.
    pub(crate) async fn closed(&self) {
        self.sender.closed().await;
    }
}

/// Results the backend still owes a run, by call id, and which of those
/// calls wait for a person. The run's inbound reader delivers into it; the
/// run's calls wait on it. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct PendingCalls {
    inner: Arc<PendingInner>,
}

#[derive(Debug, Default)]
struct PendingInner {
    waiting: Mutex<Waiting>,
    /// Woken when a waiting call is marked as waiting for a person.
    person: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Waiting {
    results: HashMap<String, oneshot::Sender<pb::ToolResult>>,
    for_person: HashSet<String>,
}

impl PendingCalls {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        lock(&self.inner.waiting)
    }

    /// Registers call `id`; the receiver gets its result.
    pub(crate) fn expect(&self, id: &str) -> oneshot::Receiver<pb::ToolResult> {
        let (sender, receiver) = oneshot::channel();
        self.lock().results.insert(id.to_owned(), sender);
        receiver
    }

    /// Hands `result` to the call waiting for it.
    ///
    /// # Errors
    /// Returns the result back if no call of this run waits for its id.
    pub(crate) fn deliver(&self, result: pb::ToolResult) -> Result<(), pb::ToolResult> {
        let mut waiting = self.lock();
        waiting.for_person.remove(&result.id);
        match waiting.results.remove(&result.id) {
            // A send fails only if the call was abandoned meanwhile; nothing waits then.
            Some(sender) => {
                let _ = sender.send(result);
                Ok(())
            }
            None => Err(result),
        }
    }

    /// Marks call `id` as waiting for a person (`AwaitingPerson`).
    ///
    /// # Errors
    /// If no call of this run waits for a result of that id.
    pub(crate) fn mark_for_person(&self, id: &str) -> Result<(), ()> {
        let mut waiting = self.lock();
        if !waiting.results.contains_key(id) {
            return Err(());
        }
        waiting.for_person.insert(id.to_owned());
        drop(waiting);
        self.inner.person.notify_waiters();
        Ok(())
    }

    /// True when call `id` waits for a person.
    pub(crate) fn is_for_person(&self, id: &str) -> bool {
        self.lock().for_person.contains(id)
    }

    /// Completes at the next [`Self::mark_for_person`] once it is enabled
    /// (`Notified::enable`) or first polled: enable it before checking
    /// [`Self::is_for_person`], and no mark is missed in between.
    pub(crate) fn person_marked(&self) -> tokio::sync::futures::Notified<'_> {
        self.inner.person.notified()
    }
}
