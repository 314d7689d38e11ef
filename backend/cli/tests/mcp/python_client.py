"""The Python `mcp` SDK's own client against `tether mcp` over stdio.

Usage: python_client.py ANSWER TETHER ARGS...  (ANSWER: accept, decline, or
none for a client that declares no elicitation). Lists the tools, runs the
script in $TETHER_TEST_SCRIPT as `run_script`, answering any elicitation with
ANSWER, and prints one JSON document: the tool names, the call's result
(its text parsed), the progress messages and the elicitation messages.
"""

import json
import os
import sys

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    answer, tether, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    asked: list[str] = []
    progress: list[str] = []

    async def elicit(context, params):  # noqa: ANN001 - the SDK's callback shape
        asked.append(params.message)
        return types.ElicitResult(action=answer, content={"reason": "checked by the python test"} if answer == "accept" else None)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    server = StdioServerParameters(command=tether, args=args)
    async with stdio_client(server) as (read, write):
        callback = None if answer == "none" else elicit
        async with ClientSession(read, write, elicitation_callback=callback) as session:
            init = await session.initialize()
            listed = await session.list_tools()
            code = os.environ["TETHER_TEST_SCRIPT"]
            result = await session.call_tool("run_script", {"code": code}, progress_callback=on_progress)
            text = result.content[0].text if result.content else ""
            print(json.dumps({
                "protocol": init.protocol_version,
                "tools": [tool.name for tool in listed.tools],
                "descriptions": {tool.name: tool.description for tool in listed.tools},
                "is_error": result.is_error,
                "result": json.loads(text),
                "progress": progress,
                "asked": asked,
            }))


anyio.run(main)
