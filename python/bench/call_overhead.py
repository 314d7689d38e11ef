"""The overhead of a call through Python against the same call through Rust:
a no-op tool through the turn's one execution path (`Turn::execute`: every
check, the in-memory audit record), sequentially, in one process.

    target/py/bin/python python/bench/call_overhead.py [--calls N] [--rounds R]

Prints the median over the rounds of the time per call, in microseconds:
- rust:   Rust drives `Turn::execute`, the tool is a Rust closure
- python: Python awaits `turn.execute`, the tool is a Python `def` (and an
          `async def`), run on the caller's event loop
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Awaitable, Callable, List

import tether
from tether import _native


@tether.tool(read_only=True, repeats="allow")
def noop() -> None:
    """Does nothing."""


@tether.tool(read_only=True, repeats="allow", name="noop_async")
async def noop_async() -> None:
    """Does nothing, asynchronously."""


async def python_calls(turn: tether.Turn, name: str, calls: int) -> float:
    started = time.perf_counter()
    for n in range(calls):
        result = await turn.execute(f"c{n}", name, {})
        if not result.ok:
            raise RuntimeError(f"the no-op call failed: {result.error}")
    return time.perf_counter() - started


async def median_us(run: Callable[[], Awaitable[float]], calls: int, rounds: int) -> float:
    await run()  # warm up
    per_call: List[float] = [await run() / calls * 1e6 for _ in range(rounds)]
    return statistics.median(per_call)


async def main(calls: int, rounds: int) -> None:
    async with tether.Turn.open([noop, noop_async], sidecar=None, max_tool_calls=2**31) as turn:
        rust = await median_us(lambda: _native.measure_rust_calls(calls), calls, rounds)
        python = await median_us(lambda: python_calls(turn, "noop", calls), calls, rounds)
        python_async = await median_us(lambda: python_calls(turn, "noop_async", calls), calls, rounds)
    print(f"no-op call through the turn, median of {rounds} rounds of {calls} calls:")
    print(f"  rust   (Rust caller, Rust tool):       {rust:8.1f} µs per call")
    print(f"  python (Python caller, `def` tool):     {python:8.1f} µs per call  (+{python - rust:.1f} µs)")
    print(f"  python (Python caller, `async def`):    {python_async:8.1f} µs per call  (+{python_async - rust:.1f} µs)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds))
