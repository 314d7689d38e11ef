"""The OpenAI Agents SDK with Tether: the agent's tools become the turn's,
and `run_script` lets the model chain them in one script whose every call
is checked, approved and audited.

    OPENAI_API_KEY=... python python/examples/openai_agents_demo.py
    (OPENAI_BASE_URL and TETHER_MODEL point it at any chat-completions server)
"""

import asyncio
import os
from typing import Any, Dict, List

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

import tether
from tether.adapters.openai_agents import open_turn

CONTRACTS = {"c1": "2026-06-30", "c2": "2027-03-31", "c3": "2026-11-15"}
OUTBOX: List[Dict[str, str]] = []


@function_tool(failure_error_function=None)  # exceptions reach the turn as `tool_failed`
def list_customers() -> List[str]:
    """Every customer id."""
    return sorted(CONTRACTS)


@function_tool(failure_error_function=None)
async def get_contract(customer_id: str) -> Dict[str, str]:
    """A customer's contract end date."""
    if customer_id not in CONTRACTS:
        raise tether.ToolError("not_found", f"no contract for `{customer_id}`")
    return {"customer_id": customer_id, "end_date": CONTRACTS[customer_id]}


@function_tool(failure_error_function=None)
async def send_email(to: str, subject: str) -> Dict[str, Any]:
    """Send an email (has effects)."""
    OUTBOX.append({"to": to, "subject": subject})
    return {"sent": len(OUTBOX)}


async def main(base_url: str, api_key: str, model: str, audit: str = "memory:") -> Dict[str, Any]:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key=api_key)
    async with open_turn(
        [list_customers, get_contract, send_email],
        approver=lambda request: request.args["to"].endswith("@example.com"),
        tool_meta={"list_customers": {"read_only": True}, "get_contract": {"read_only": True},
                   "send_email": {"requires_approval": True}},
        audit=audit,
    ) as turn_tools:
        agent = Agent(
            name="ops",
            instructions="Use run_script to chain tool calls in one step.",
            tools=turn_tools.tools,
            model=OpenAIChatCompletionsModel(model=model, openai_client=client),
        )
        run = await Runner.run(agent, "Email the owner of every customer whose contract ended before 2026-11-30.")
        return {"answer": run.final_output, "audit": await turn_tools.turn.audit_log(), "outbox": list(OUTBOX)}


if __name__ == "__main__":
    out = asyncio.run(main(os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
                           os.environ["OPENAI_API_KEY"], os.environ.get("TETHER_MODEL", "gpt-4.1-mini")))
    print(out["answer"])
