"""What an MCP client spends on the demo task, directly vs through `tether mcp`.

Usage: target/py/bin/python bench/mcp/measure.py [TETHER] [--runs N]

Drives `tether mcp` (the demo world: list_issues, get_contract, send_email over
a fresh SQLite database) with the Python `mcp` SDK's client over stdio, and
counts from the JSON the client gets — no model involved:

- the bytes of tool definitions the client loads (`tools/list`, compact JSON of
  each tool: name, description, inputSchema): the demo's three tools served
  directly (`--direct-tools`, the same definitions an MCP server of them would
  give), against what `tether mcp` serves by default (run_script with their
  stubs, search_tools, describe_tools);
- the demo task done call by call (as a model calling the tools directly
  would) against one run_script call: tool calls, model rounds (one call per
  round, or every independent call of a step batched in one round), and the
  bytes of results that come back into the context;
- run_script's latency over stdio, client to client: `1 + 1` and the demo
  script, p50 and p95 of N runs each.

Prints the Markdown table docs/benchmarks.md holds.
"""

import json
import os
import statistics
import sys
import tempfile
import time

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INPUT = {"today": "2026-11-30", "week_start": "2026-11-23"}
DEMO_TOOLS = ["list_issues", "get_contract", "send_email"]
# The demo world's tools (examples/demo.toml), with a call cap for many runs.
with open(os.path.join(ROOT, "examples", "demo.toml")) as f:
    DEMO_CONFIG = f.read().replace("{", "{{").replace("}", "}}") + "\n[turn]\nmax_tool_calls = {cap}\nmax_approval_calls = {cap}\n"


def compact(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def definition(tool: types.Tool) -> dict:
    return tool.model_dump(by_alias=True, exclude_none=True, mode="json")


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def accept(context, params):  # noqa: ANN001 - the SDK's callback shape
    return types.ElicitResult(action="accept")


async def session(tether: str, args: list[str], body):
    with tempfile.TemporaryDirectory() as scratch:
        server = StdioServerParameters(
            command=tether,
            args=["mcp", "--audit-store", "memory:", "--demo-db", os.path.join(scratch, "demo.db"), *args],
            env={**os.environ, "RUST_LOG": "error"},
        )
        with open(os.devnull, "w") as quiet:
            async with stdio_client(server, errlog=quiet) as (read, write):
                async with ClientSession(read, write, elicitation_callback=accept) as client:
                    await client.initialize()
                    return await body(client)


async def direct(client: ClientSession) -> dict:
    tools = [definition(t) for t in (await client.list_tools()).tools if t.name in DEMO_TOOLS]
    calls, result_bytes = 0, 0

    async def call(name: str, args: dict):
        nonlocal calls, result_bytes
        result = await client.call_tool(name, args)
        calls += 1
        text = text_of(result)
        result_bytes += len(text.encode())
        return json.loads(text)["value"]

    issues = await call("list_issues", {"opened_after": INPUT["week_start"]})
    contracts = [await call("get_contract", {"customer_id": i["customer_id"]}) for i in issues]
    ended = [(i, c) for i, c in zip(issues, contracts) if c and c["end_date"] < INPUT["today"]]
    for issue, terms in ended:
        await call("send_email", {
            "to": terms["owner_email"],
            "subject": f"{issue['id']}: {terms['customer']}'s contract ended {terms['end_date']}",
            "body": f"Issue {issue['id']} ({issue['title']}) was opened by a customer whose contract has ended.",
        })
    # Batched, a model needs a round per dependent step: the issues, their
    # contracts, the emails; then one to answer.
    return {"tools": tools, "calls": calls, "sequential": calls + 1, "batched": 3 + 1, "result_bytes": result_bytes}


async def scripted(client: ClientSession) -> dict:
    tools = [definition(t) for t in (await client.list_tools()).tools]
    with open(os.path.join(ROOT, "examples", "contracts.py")) as f:
        code = f.read()
    result = await client.call_tool("run_script", {"code": code, "input": INPUT})
    text = text_of(result)
    assert json.loads(text)["ok"], text
    return {"tools": tools, "calls": 1, "sequential": 2, "batched": 2, "result_bytes": len(text.encode())}


async def definitions(client: ClientSession) -> list[dict]:
    return [definition(t) for t in (await client.list_tools()).tools]


FILESYSTEM = """
[mcp.files]
command = ["{npm}/mcp-server-filesystem", "{root}"]
startup_timeout = "60s"
"""


async def many_tools(tether: str) -> list[tuple[str, str, str]]:
    """The npm filesystem server's tools (all of them): their definitions as
    the server gives them (through `--direct-tools`: the same schemas), and
    what `tether mcp` serves instead, with `offer = "search"` too."""
    npm = os.environ.get("TETHER_NPM_BIN", os.path.join(ROOT, "target", "npm", "node_modules", ".bin"))
    if not os.path.exists(os.path.join(npm, "mcp-server-filesystem")):
        return []
    rows = []
    with tempfile.TemporaryDirectory() as root:
        text = FILESYSTEM.format(npm=npm, root=os.path.realpath(root))
        sizes = {}
        for name, extra, args in [("direct", "", ["--direct-tools"]), ("script", "", []),
                                  ("search", '[turn]\noffer = "search"\n', [])]:
            path = os.path.join(root, f"{name}.toml")
            with open(path, "w") as f:
                f.write(text + extra)
            tools = await session(tether, ["--config", path, *args], definitions)
            if name == "direct":
                tools = [t for t in tools if t["name"] not in ("run_script", "search_tools", "describe_tools")]
            sizes[name] = (len(compact(tools)), len(tools))
    for name in ("direct", "script", "search"):
        size, count = sizes[name]
        rows.append((name, f"{size:,} B", f"{count} tools"))
    return rows


def timed(runs: int, code: str, script_input=None):
    async def body(client: ClientSession) -> list[float]:
        def args(n: int) -> dict:
            # `n` makes each run's emails new: the turn refuses an identical
            # repeat of a call with effects.
            return {"code": code, "input": {**(script_input or {}), "n": n}}

        await client.call_tool("run_script", args(0))  # warm: the turn opens, the guest loads
        samples = []
        for n in range(1, runs + 1):
            start = time.perf_counter()
            result = await client.call_tool("run_script", args(n))
            samples.append(time.perf_counter() - start)
            assert not result.is_error, text_of(result)
        return samples
    return body


def ms(samples: list[float], q: float) -> str:
    ordered = sorted(samples)
    value = ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return f"{value * 1000:.2f} ms"


async def main() -> None:
    args = sys.argv[1:]
    runs = 100
    if "--runs" in args:
        at = args.index("--runs")
        runs = int(args[at + 1])
        del args[at:at + 2]
    tether = args[0] if args else os.path.join(ROOT, "target", "debug", "tether")
    one = await session(tether, ["--direct-tools", "--approval-fallback", "allow-all"], direct)
    code = await session(tether, ["--approval-fallback", "allow-all"], scripted)
    with open(os.path.join(ROOT, "examples", "contracts.py")) as f:
        demo = f.read()
    # One session for every sample, as a client keeps it: the turn's cap
    # (`[turn] max_tool_calls`, 200 by default) would refuse the demo's calls
    # after a few runs, so this session's config raises it.
    trivial = await session(tether, [], timed(runs, "1 + 1"))
    demo = demo.replace('subject=f"', 'subject=f"{input[\'n\']} ')
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as config:
        config.write(DEMO_CONFIG.format(cap=(runs + 1) * 50))
    try:
        demo_runs = await session(tether, ["--config", config.name, "--approval-fallback", "allow-all"],
                                  timed(runs, demo, INPUT))
    finally:
        os.unlink(config.name)
    row = lambda name, a, b: print(f"| {name} | {a} | {b} |")
    print("| the demo task | directly (3 tools) | through `tether mcp` |")
    print("|---|---|---|")
    row("tool definitions loaded", f"{len(compact(one['tools'])):,} B ({len(one['tools'])} tools)",
        f"{len(compact(code['tools'])):,} B ({len(code['tools'])} tools)")
    row("tool calls", one["calls"], code["calls"])
    row("model rounds, one call a round", one["sequential"], code["sequential"])
    row("model rounds, a step's calls batched", one["batched"], code["batched"])
    row("result bytes into the context", f"{one['result_bytes']:,} B", f"{code['result_bytes']:,} B")
    many = await many_tools(tether)
    if many:
        print()
        print("| the npm filesystem server's tools | definitions loaded | served |")
        print("|---|---|---|")
        labels = {"direct": "directly", "script": "through `tether mcp`",
                  "search": "through `tether mcp`, `[turn] offer = \"search\"`"}
        for name, size, count in many:
            row(labels[name], size, count)
    print()
    print(f"| run_script over stdio ({runs} runs) | p50 | p95 |")
    print("|---|---|---|")
    row("`1 + 1`", ms(trivial, 0.5), ms(trivial, 0.95))
    row(f"the demo script ({one['calls']} calls)", ms(demo_runs, 0.5), ms(demo_runs, 0.95))


anyio.run(main)
