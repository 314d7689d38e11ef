"""Events from Python: a callback and an async iterator see every call's
`started` and then exactly one of `completed` / `failed`, in order, the
script's calls naming the `run_script` call as their parent."""

from __future__ import annotations

import asyncio
from typing import List

import tether


async def test_events_arrive_by_callback_and_async_iterator_in_order() -> None:
    @tether.tool(read_only=True)
    def ping(n: int) -> int:
        if n < 0:
            raise tether.ToolError("negative", "n must be >= 0")
        return n

    calls: List[tether.ToolEvent] = []
    async with tether.Turn.open([ping], on_event=calls.append, capture_payloads=True) as turn:
        streamed: List[tether.ToolEvent] = []

        async def consume() -> None:
            async for event in turn.events():
                streamed.append(event)

        consumer = asyncio.ensure_future(consume())
        await asyncio.sleep(0)
        await turn.execute("c1", "run_script", {"code": "[ping(n=1), ping(n=-1), call('nope')]"})
    await asyncio.wait_for(consumer, timeout=10)  # ends when the turn closes

    assert streamed == calls
    summary = [(e.kind, e.call_id, e.parent_call_id, e.tool) for e in calls]
    assert summary == [
        ("started", "c1", None, "run_script"),
        ("started", "c1/1", "c1", "ping"),
        ("completed", "c1/1", "c1", "ping"),
        ("started", "c1/2", "c1", "ping"),
        ("completed", "c1/2", "c1", "ping"),
        ("started", "c1/3", "c1", "nope"),
        ("failed", "c1/3", "c1", "nope"),
        ("completed", "c1", None, "run_script"),
    ]
    assert calls[1].args == {"n": 1} and calls[1].origin == "script" and calls[1].depth == 1
    assert (calls[4].code, calls[4].display_name) == ("negative", None)  # the tool's own code
    assert calls[4].message == "n must be >= 0" and calls[2].message is None  # and its message
    # Every event says who made the call, not only `started`.
    assert [(e.origin, e.depth) for e in calls] == [("model", 0)] + [("script", 1)] * 6 + [("model", 0)]
    assert (calls[6].code, calls[6].display_name, calls[6].step) == (
        "tool_not_found", tether.codes.display_name("tool_not_found"), "lookup",
    )
    assert calls[6].message is not None and "no tool `nope`" in calls[6].message


async def test_an_async_callback_runs_on_the_loop() -> None:
    seen: List[str] = []

    async def record(event: tether.ToolEvent) -> None:
        await asyncio.sleep(0)
        seen.append(f"{event.kind} {event.tool}")

    @tether.tool(read_only=True)
    def ping() -> str:
        return "pong"

    async with tether.Turn.open([ping], on_event=record, sidecar=None) as turn:
        await turn.execute("c1", "ping", {})
        for _ in range(100):
            if len(seen) == 2:
                break
            await asyncio.sleep(0.01)
    assert seen == ["started ping", "completed ping"]
