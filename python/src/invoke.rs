//! Calling a Python `async def f(arg)` from Rust on the caller's event loop,
//! and getting its outcome back without holding the GIL while it runs.
//!
//! Hand-written rather than `pyo3_async_runtimes::into_future_with_locals`:
//! that one does not cancel the Python task when the Rust future is dropped,
//! and the turn drops it on purpose (a tool's time limit, the approval wait,
//! the turn's cancellation and deadline). Here dropping [`invoke`]'s future
//! cancels the task on its loop. The Python half is `tether/_bridge.py`.

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3_async_runtimes::TaskLocals;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// What the Python coroutine came to; `T` is what the caller read of the
/// returned value, on the loop thread, while it held the GIL anyway (so the
/// waiting Rust task need not take it again).
#[derive(Debug)]
pub(crate) enum Invoked<T> {
    /// It returned; this is what the caller's reader made of the value.
    Returned(T),
    /// It raised: the exception's type name and its message.
    Raised {
        /// The exception's qualified type name, e.g. `ValueError`.
        kind: String,
        /// `str(exception)`.
        message: String,
    },
    /// It was cancelled on its loop by someone other than this call, or its
    /// loop stopped before it finished.
    Cancelled,
}

/// Why the coroutine could not even be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InvokeError {
    /// No Python task is awaiting this Rust task.
    #[error("no Python event loop is awaiting this call (it must come from an `await` on the turn)")]
    NoCaller,
    /// The loop refused the work (closed, or the bridge failed).
    #[error("the caller's event loop cannot run it: {0}")]
    Loop(String),
    /// The interpreter is shutting down.
    #[error("the Python interpreter is shutting down")]
    ShuttingDown,
}

/// Reads the outcome and hands it to the waiting Rust future (once).
type Deliver = Box<dyn FnOnce(&Bound<'_, PyTuple>) -> PyResult<()> + Send>;

/// Receives the outcome on the loop thread.
#[pyclass(module = "tether._native")]
struct Done {
    deliver: Mutex<Option<Deliver>>,
}

#[pymethods]
impl Done {
    /// `(kind, a, b)`: `("returned", value, None)`, `("raised", type, message)`
    /// or `("cancelled", None, None)`.
    fn __call__(&self, outcome: &Bound<'_, PyTuple>) -> PyResult<()> {
        match self.deliver.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(deliver) => deliver(outcome),
            None => Ok(()),
        }
    }
}

/// What `outcome` says, `read` applied to a returned value.
fn outcome<T>(outcome: &Bound<'_, PyTuple>, read: fn(&Bound<'_, PyAny>) -> T) -> PyResult<Invoked<T>> {
    let kind: String = outcome.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "returned" => Invoked::Returned(read(&outcome.get_item(1)?)),
        "raised" => Invoked::Raised { kind: outcome.get_item(1)?.extract()?, message: outcome.get_item(2)?.extract()? },
        _ => Invoked::Cancelled,
    })
}

/// Cancels the Python task unless disarmed: held while the Rust side waits.
struct CancelOnDrop {
    event_loop: Py<PyAny>,
    invocation: Py<PyAny>,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Nothing to cancel once the interpreter is shutting down.
        crate::gil::enter(|py| {
            let cancel = self
                .invocation
                .bind(py)
                .getattr("cancel")
                .and_then(|cancel| self.event_loop.bind(py).call_method1("call_soon_threadsafe", (cancel,)));
            if let Err(error) = cancel {
                tracing::debug!(%error, "a Python task could not be cancelled (its loop is closed)");
            }
        });
    }
}

/// Runs `function(arg)` — a Python coroutine function — as a task on the
/// caller's loop, in the caller's `contextvars` context, and waits for it
/// with the GIL released.
///
/// # Errors
/// [`InvokeError`] when there is no caller's loop or it cannot take the task.
///
/// # Cancel safety
/// Dropping the future cancels the Python task.
pub(crate) async fn invoke<T: Send + 'static>(
    function: &Py<PyAny>,
    arg: String,
    read: fn(&Bound<'_, PyAny>) -> T,
) -> Result<Invoked<T>, InvokeError> {
    let locals = crate::caller::current().ok_or(InvokeError::NoCaller)?;
    invoke_on(&locals, function, arg, read).await
}

/// [`invoke`] on the loop of `locals`.
pub(crate) async fn invoke_on<T: Send + 'static>(
    locals: &TaskLocals,
    function: &Py<PyAny>,
    arg: String,
    read: fn(&Bound<'_, PyAny>) -> T,
) -> Result<Invoked<T>, InvokeError> {
    let (sender, receiver) = oneshot::channel();
    let deliver: Deliver = Box::new(move |tuple| {
        // The receiver is gone when the call was dropped: nothing waits.
        let _ = sender.send(outcome(tuple, read)?);
        Ok(())
    });
    let mut guard = crate::gil::enter(|py| -> PyResult<CancelOnDrop> {
        let done = Py::new(py, Done { deliver: Mutex::new(Some(deliver)) })?;
        let bridge = py.import("tether._bridge")?;
        let invocation = bridge.getattr("Invocation")?.call1((function.clone_ref(py), arg, done))?;
        let event_loop = locals.event_loop(py);
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("context", locals.context(py))?;
        event_loop.call_method("call_soon_threadsafe", (invocation.getattr("start")?,), Some(&kwargs))?;
        Ok(CancelOnDrop { event_loop: event_loop.unbind(), invocation: invocation.unbind(), armed: true })
    })
    .ok_or(InvokeError::ShuttingDown)?
    .map_err(|error| InvokeError::Loop(error.to_string()))?;
    let outcome = receiver.await.unwrap_or(Invoked::Cancelled);
    guard.armed = false;
    Ok(outcome)
}
