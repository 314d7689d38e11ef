"""pydantic-monty (PyPI) through its pool API (`AsyncMonty`), timed around
one run: from `feed_run` to its result. External calls are answered by this
Python process (the host), as a pydantic-monty user answers them.

Modes:
  warm   each runner checks out one session and reuses it for every run
         (no isolation between runs: globals persist)
  fresh  each run checks out a session of its own and returns it after
"""

import asyncio
import os
import sys

import pydantic_monty

from world import PRELUDE, World, call_args, clock, parse_args, report


def host_functions(world: World):
    """The functions a script calls, answered here: `call`, `call_async` and one per tool."""
    functions = {
        "call": lambda name, args=None, **kwargs: world.execute(name, call_args(args, kwargs)),
    }

    async def call_async(name, args=None, **kwargs):
        return world.execute(name, call_args(args, kwargs))

    functions["call_async"] = call_async
    for tool in World.TOOLS:
        functions[tool] = lambda args=None, _tool=tool, **kwargs: world.execute(_tool, call_args(args, kwargs))
    return functions


async def main():
    args = parse_args(["warm", "fresh"])
    code = PRELUDE + "\n" + args.source
    functions = host_functions(args.world)
    inputs = {"input": args.input}
    samples, results = [], []
    remaining = {"warmup": args.warmup, "timed": args.samples}

    def take():
        """The next run's kind, or None when every run has been handed out."""
        for kind in ("warmup", "timed"):
            if remaining[kind] > 0:
                remaining[kind] -= 1
                return kind
        return None

    async def feed(session):
        # The script's prints are kept, as Tether returns them with the result.
        output = []
        result = await session.feed_run(
            code, inputs=inputs, external_lookup=functions, print_callback=lambda _stream, text: output.append(text)
        )
        return result

    def record(kind, started, result):
        if kind == "timed":
            samples.append(clock() - started)
            results.append(result)

    # The pool caps host round trips per checkout (1,000 by default): a warm
    # session makes many runs' worth, so the cap is set out of the way.
    limits = pydantic_monty.ResourceLimits(max_suspensions=2**31 - 1)

    async def runner(pool):
        if args.mode == "warm":
            async with pool.checkout(limits=limits) as session:
                while (kind := take()) is not None:
                    started = clock()
                    record(kind, started, await feed(session))
        else:
            while (kind := take()) is not None:
                started = clock()
                async with pool.checkout(limits=limits) as session:
                    result = await feed(session)
                record(kind, started, result)

    async with pydantic_monty.AsyncMonty(min_processes=args.concurrency, max_processes=args.concurrency) as pool:
        started = clock()
        await asyncio.gather(*[runner(pool) for _ in range(args.concurrency)])
        elapsed = clock() - started
    report(samples, elapsed, results[-1], pydantic_monty.__version__)


if __name__ == "__main__":
    asyncio.run(main())
    # pydantic-monty 1.4 sometimes aborts (SIGABRT) in interpreter shutdown
    # after async host functions ran, once the pool is closed and the report
    # printed: leave without that shutdown.
    sys.stdout.flush()
    os._exit(0)
