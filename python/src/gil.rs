//! Entering Python from the package's own threads (the Tokio runtime's),
//! in one place, so the interpreter can shut down cleanly.
//!
//! A thread inside Python when the interpreter starts finalizing aborts the
//! process ("PyGILState_Release: thread state must be current"). So every
//! entry from a Rust thread goes through [`enter`], which counts it, and the
//! package's `atexit` hook ([`quiesce`]) first refuses new entries, then
//! waits (without the GIL) for those in progress to leave.

use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static INSIDE: AtomicUsize = AtomicUsize::new(0);
static CLOSING: AtomicBool = AtomicBool::new(false);

/// The longest [`quiesce`] waits for threads to leave Python.
const QUIESCE_WAIT: Duration = Duration::from_secs(2);

/// Runs `f` with the GIL from a thread Python did not start; `None` once the
/// interpreter is shutting down (nothing waits for the answer then).
pub(crate) fn enter<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    INSIDE.fetch_add(1, Ordering::SeqCst);
    let entered = if CLOSING.load(Ordering::SeqCst) { None } else { Python::try_attach(f) };
    INSIDE.fetch_sub(1, Ordering::SeqCst);
    entered
}

/// Refuses new entries from Rust threads and waits, with the GIL released,
/// until the ones in progress have left (at most two seconds). Registered
/// with `atexit` by the package.
#[pyfunction]
pub(crate) fn quiesce(py: Python<'_>) {
    CLOSING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let until = Instant::now() + QUIESCE_WAIT;
        while INSIDE.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}
