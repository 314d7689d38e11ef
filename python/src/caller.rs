//! The caller's event loop: every Rust future this package hands to Python
//! runs inside [`scope`], so the tools, approvers and event callbacks it
//! reaches run on the asyncio loop (and in the `contextvars` context) of the
//! Python task that awaited it — never on a loop of their own, so a tool may
//! await anything that loop runs.

use pyo3_async_runtimes::TaskLocals;
use std::future::Future;

tokio::task_local! {
    static CALLER: TaskLocals;
}

/// Runs `future` with `locals` as its caller's loop.
pub(crate) async fn scope<F: Future>(locals: TaskLocals, future: F) -> F::Output {
    CALLER.scope(locals, future).await
}

/// The loop of the Python task whose await is driving this Rust task, if any.
/// Reads a Tokio task-local: needs no GIL, so an event sink may call it inline.
pub(crate) fn current() -> Option<TaskLocals> {
    CALLER.try_with(Clone::clone).ok()
}
