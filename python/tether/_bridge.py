"""The Python half of running a coroutine function for Rust (``src/invoke.rs``).

Rust schedules :meth:`Invocation.start` on the caller's event loop (in the
caller's ``contextvars`` context) and waits, without the GIL, for ``done``
to be called with the outcome; when Rust stops waiting (a time limit, the
approval wait, cancellation), it schedules :meth:`Invocation.cancel`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Optional, Tuple


class Invocation:
    """One call of ``function(arg)`` as a task on the loop it is started on."""

    __slots__ = ("_function", "_arg", "_done", "_task", "_cancelled")

    def __init__(self, function: Callable[[Any], Awaitable[Any]], arg: Any, done: Callable[[Tuple[Any, ...]], None]) -> None:
        self._function = function
        self._arg = arg
        self._done = done
        self._task: Optional[asyncio.Future[Any]] = None
        self._cancelled = False

    def start(self) -> None:
        """Starts the task (runs on the loop thread)."""
        if self._cancelled:
            self._done(("cancelled", None, None))
            return
        try:
            self._task = asyncio.ensure_future(self._function(self._arg))
        except BaseException as error:  # the call itself failed before any await
            self._done(("raised", type(error).__qualname__, str(error)))
            return
        self._task.add_done_callback(self._finish)

    def cancel(self) -> None:
        """Cancels the task: Rust no longer waits for it (runs on the loop thread)."""
        self._cancelled = True
        if self._task is not None:
            self._task.cancel()

    def _finish(self, task: asyncio.Future[Any]) -> None:
        if task.cancelled():
            self._done(("cancelled", None, None))
            return
        error = task.exception()
        if error is None:
            self._done(("returned", task.result(), None))
        else:
            self._done(("raised", type(error).__qualname__, str(error)))


def resolve(future: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    """Sets a Rust call's outcome on its asyncio future (on the loop thread),
    unless the awaiting task gave up on it (``src/awaitable.rs``)."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
