"""Cancellation from Python: cancelling the task that awaits a call cancels
the call and the script (the sidecar's run ends, the tool's task is
cancelled); the turn's own cancel and deadline end everything under it."""

from __future__ import annotations

import asyncio

import pytest

import tether

SCRIPT = "ready()\nwait_forever()\n'never'"


def tools(started: asyncio.Event, cancelled: asyncio.Event) -> list:
    @tether.tool(read_only=True)
    def ready() -> bool:
        return True

    @tether.tool(read_only=True)
    async def wait_forever() -> None:
        started.set()  # the script is now waiting on this call
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    return [ready, wait_forever]


async def live_runs_drop_to_zero() -> None:
    # The run ends on the sidecar's side once the stream is dropped; that is
    # an event on another task, so wait for it (bounded), not for a time.
    for _ in range(1000):
        if tether._native.embedded_live_runs() == 0:
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"the sidecar still has {tether._native.embedded_live_runs()} live runs")


async def test_cancelling_the_awaiting_task_cancels_the_call_and_the_script() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()
    async with tether.Turn.open(tools(started, cancelled)) as turn:
        task = asyncio.ensure_future(turn.execute("c1", "run_script", {"code": SCRIPT}))
        await asyncio.wait_for(started.wait(), timeout=30)
        assert tether._native.embedded_live_runs() == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(cancelled.wait(), timeout=10)
        await live_runs_drop_to_zero()
        rows = {r.call_id: r for r in await turn.audit_log()}
        # The turn goes on: a later call runs.
        again = await turn.execute("c2", "run_script", {"code": "1 + 1"})
    assert rows["c1/2"].tool == "wait_forever" and rows["c1/2"].status == "abandoned"
    assert rows["c1"].status == "abandoned"
    assert again.value["result"] == 2


async def test_turn_cancel_ends_the_script_with_cancelled() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()
    async with tether.Turn.open(tools(started, cancelled)) as turn:
        task = asyncio.ensure_future(turn.execute("c1", "run_script", {"code": SCRIPT}))
        await asyncio.wait_for(started.wait(), timeout=30)
        turn.cancel()
        result = await task
        later = await turn.execute("c2", "ready", {})
    assert result.error is not None and result.error.code == "cancelled"
    await asyncio.wait_for(cancelled.wait(), timeout=10)
    assert turn.end_reason() == "cancelled"
    assert later.error is not None and (later.error.code, later.error.step) == ("cancelled", "budget")
    await live_runs_drop_to_zero()


async def test_the_turn_deadline_ends_a_waiting_script() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()
    async with tether.Turn.open(tools(started, cancelled), deadline=1.0) as turn:
        result = await turn.execute("c1", "run_script", {"code": SCRIPT})
    # Two clocks race to the same end — the turn's deadline, and the run's
    # deadline in the sidecar (tightened to the turn's remaining time) — and
    # either way the cause is the turn's deadline, with one code.
    assert result.error is not None and result.error.code == "turn_deadline_exceeded"
    await asyncio.wait_for(cancelled.wait(), timeout=10)
    assert turn.end_reason() == "turn_deadline_exceeded"
