//! Rust futures as asyncio awaitables: the future runs on the package's
//! Tokio runtime (the GIL released) inside the awaiting task's loop
//! ([`caller::scope`]); its result is handed to the loop through
//! [`gil::enter`]; cancelling the awaiting task drops the future.
//!
//! Hand-written rather than `pyo3_async_runtimes::tokio::future_into_py`:
//! that one hands results over from threads the interpreter's shutdown does
//! not wait for, and a process could abort on exit (`gil.rs`).

use crate::{caller, gil};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use std::future::Future;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// The asyncio future's done-callback: tells the Rust side it was cancelled.
#[pyclass(module = "tether._native")]
struct OnDone {
    cancelled: Mutex<Option<oneshot::Sender<()>>>,
}

#[pymethods]
impl OnDone {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        if future.call_method0("cancelled")?.is_truthy()?
            && let Some(sender) = self.cancelled.lock().unwrap_or_else(|p| p.into_inner()).take()
        {
            let _ = sender.send(());
        }
        Ok(())
    }
}

/// An asyncio future on the caller's loop that resolves to what `future`
/// returns (or raises its error). The task running `future` is owned by
/// that asyncio future: cancelling it ends the task, dropping `future`.
///
/// # Errors
/// If there is no running loop in this thread.
pub(crate) fn awaitable<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let locals = pyo3_async_runtimes::tokio::get_current_locals(py)?;
    let event_loop = locals.event_loop(py);
    let py_future = event_loop.call_method0("create_future")?;
    let (cancel, cancelled) = oneshot::channel();
    py_future.call_method1("add_done_callback", (OnDone { cancelled: Mutex::new(Some(cancel)) },))?;
    let (target, event_loop) = (py_future.clone().unbind(), event_loop.unbind());
    pyo3_async_runtimes::tokio::get_runtime().spawn(async move {
        let outcome = tokio::select! {
            outcome = caller::scope(locals, future) => outcome,
            // Dropping the future cancels the call; nobody awaits a result.
            _ = cancelled => return,
        };
        // Taking the GIL may wait: off the async workers.
        let _ = tokio::task::spawn_blocking(move || {
            gil::enter(|py| {
                let outcome = outcome.and_then(|value| value.into_py_any(py));
                let (ok, value) = match outcome {
                    Ok(value) => (true, value),
                    Err(error) => (false, error.into_value(py).into_any()),
                };
                let resolve = py.import("tether._bridge").and_then(|bridge| bridge.getattr("resolve"));
                let scheduled = resolve.and_then(|resolve| {
                    event_loop.bind(py).call_method1("call_soon_threadsafe", (resolve, target, ok, value))
                });
                if let Err(error) = scheduled {
                    tracing::debug!(%error, "a result could not be handed to its loop (it is closed)");
                }
            })
        })
        .await;
    });
    Ok(py_future)
}
