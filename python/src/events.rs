//! Call events to Python: the turn's [`EventSink`] puts each event, with the
//! loop of the Python task that caused it, on an unbounded channel (no GIL,
//! no blocking on the call's path); one forwarding task per turn delivers
//! them in order to `EventHub.deliver` of `tether/_turn.py`, on that loop,
//! which calls the user's callback and feeds the async iterators.

use crate::caller;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_async_runtimes::TaskLocals;
use tether_backend::turn::{EventSink, ToolEvent};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

type Queued = (ToolEvent, Option<TaskLocals>);

/// The turn's sink: queues events for the forwarding task.
pub(crate) struct ChannelSink {
    sender: mpsc::UnboundedSender<Queued>,
}

impl EventSink for ChannelSink {
    fn emit(&self, event: &ToolEvent) {
        // A closed channel means the turn's Python object is gone: nobody listens.
        let _ = self.sender.send((event.clone(), caller::current()));
    }
}

/// A sink and the task that delivers its events to `deliver` (a Python
/// callable taking the event as JSON text). The task ends when the turn and
/// its sink are dropped; the handle aborts it earlier.
pub(crate) fn forward(deliver: Py<PyAny>) -> (ChannelSink, JoinHandle<()>) {
    let (sender, mut receiver) = mpsc::unbounded_channel::<Queued>();
    let runtime = pyo3_async_runtimes::tokio::get_runtime();
    let task = runtime.spawn(async move {
        let deliver = std::sync::Arc::new(deliver);
        let mut batch = Vec::new();
        while receiver.recv_many(&mut batch, 256).await > 0 {
            let events = std::mem::take(&mut batch);
            let deliver = deliver.clone();
            // Taking the GIL may wait: off the async workers.
            let delivered =
                tokio::task::spawn_blocking(move || crate::gil::enter(|py| deliver_all(py, &deliver, events)));
            if delivered.await.is_err() {
                tracing::warn!("delivering call events to Python failed");
            }
        }
    });
    (ChannelSink { sender }, task)
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
