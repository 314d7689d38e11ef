//! Call events to Python: the turn's [`EventSink`] puts each event, with the
//! loop of the Python task that caused it, on an unbounded channel (no GIL,
//! no blocking on the call's path); one forwarding task per turn delivers
//! them in order to `EventHub.deliver` of `tether/_turn.py`, on that loop,
//! which calls the user's callback and feeds the async iterators.
//!
//! Nothing is lost at close: the sink counts what it queued and the task
//! what it handed to a loop, and [`Forwarder::drained`] waits until every
//! event queued before it was called is on its loop, ahead of whatever the
//! awaiting task does next (`Turn.close` awaits it before the iterators end).

use crate::caller;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_async_runtimes::TaskLocals;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tether_turn::{EventSink, ToolEvent};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

type Queued = (ToolEvent, Option<TaskLocals>);

/// The turn's sink: queues events for the forwarding task.
pub(crate) struct ChannelSink {
    sender: mpsc::UnboundedSender<Queued>,
    queued: Arc<AtomicU64>,
}

impl EventSink for ChannelSink {
    fn emit(&self, event: &ToolEvent) {
        // Counted before it is sent, so a drain started after `emit` waits for it.
        self.queued.fetch_add(1, Ordering::SeqCst);
        // A closed channel means the turn's Python object is gone: nobody listens.
        let _ = self.sender.send((event.clone(), caller::current()));
    }
}

/// The forwarding task of one turn: aborted when dropped.
pub(crate) struct Forwarder {
    task: JoinHandle<()>,
    queued: Arc<AtomicU64>,
    handed: watch::Receiver<u64>,
}

impl Forwarder {
    /// A future that resolves once every event queued so far has been handed
    /// to its loop (or the forwarding task has ended, when nothing more will be).
    pub(crate) fn drained(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let target = self.queued.load(Ordering::SeqCst);
        let mut handed = self.handed.clone();
        async move {
            // An error means the task ended: what it did not hand over, it never will.
            let _ = handed.wait_for(|handed| *handed >= target).await;
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A sink and the task that delivers its events to `deliver` (a Python
/// callable taking the event as JSON text). The task ends when the turn and
/// its sink are dropped.
pub(crate) fn forward(deliver: Py<PyAny>) -> (ChannelSink, Forwarder) {
    let (sender, mut receiver) = mpsc::unbounded_channel::<Queued>();
    let queued = Arc::new(AtomicU64::new(0));
    let (handed_tx, handed) = watch::channel(0u64);
    let runtime = pyo3_async_runtimes::tokio::get_runtime();
    let task = runtime.spawn(async move {
        let deliver = std::sync::Arc::new(deliver);
        let mut batch = Vec::new();
        while receiver.recv_many(&mut batch, 256).await > 0 {
            let events = std::mem::take(&mut batch);
            let count = events.len() as u64;
            let deliver = deliver.clone();
            // Taking the GIL may wait: off the async workers.
            let delivered =
                tokio::task::spawn_blocking(move || crate::gil::enter(|py| deliver_all(py, &deliver, events)));
            if delivered.await.is_err() {
                tracing::warn!("delivering call events to Python failed");
            }
            handed_tx.send_modify(|handed| *handed += count);
        }
    });
    (ChannelSink { sender, queued: queued.clone() }, Forwarder { task, queued, handed })
}

fn deliver_all(py: Python<'_>, deliver: &Py<PyAny>, events: Vec<Queued>) {
    for (event, locals) in events {
        let json = crate::convert::event(&event).to_string();
        let sent = match &locals {
            Some(locals) => (|| {
                let kwargs = PyDict::new(py);
                kwargs.set_item("context", locals.context(py))?;
                locals.event_loop(py).call_method(
                    "call_soon_threadsafe",
                    (deliver.clone_ref(py), json),
                    Some(&kwargs),
                )?;
                Ok::<_, PyErr>(())
            })(),
            // Not caused by an awaiting Python task: delivered from here.
            None => deliver.call1(py, (json,)).map(drop),
        };
        if let Err(error) = sent {
            tracing::debug!(%error, "a call event could not be delivered (the caller's loop is closed)");
        }
    }
}
