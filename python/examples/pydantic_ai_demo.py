"""Pydantic AI with Tether: the agent's tools become the turn's, and
`run_script` lets the model chain them in one script whose every call is
checked, approved and audited (CodeMode's idea, with the turn's checks).

    OPENAI_API_KEY=... python python/examples/pydantic_ai_demo.py
    (OPENAI_BASE_URL and TETHER_MODEL point it at any chat-completions server)
"""

import asyncio
import os
from typing import Any, Dict, List

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import tether
from tether.adapters.pydantic_ai import open_turn

CONTRACTS = {"c1": "2026-06-30", "c2": "2027-03-31", "c3": "2026-11-15"}
OUTBOX: List[Dict[str, str]] = []


def list_customers() -> List[str]:
    """Every customer id."""
    return sorted(CONTRACTS)


async def get_contract(customer_id: str) -> Dict[str, str]:
    """A customer's contract end date.

    Args:
        customer_id: the customer's id, e.g. `c1`
    """
    if customer_id not in CONTRACTS:
        raise tether.ToolError("not_found", f"no contract for `{customer_id}`")
    return {"customer_id": customer_id, "end_date": CONTRACTS[customer_id]}


async def send_email(to: str, subject: str) -> Dict[str, Any]:
    """Send an email (has effects)."""
    OUTBOX.append({"to": to, "subject": subject})
    return {"sent": len(OUTBOX)}


async def main(base_url: str, api_key: str, model: str, audit: str = "memory:") -> Dict[str, Any]:
    async with open_turn(
        [list_customers, get_contract, send_email],
        approver=lambda request: request.args["to"].endswith("@example.com"),
        tool_meta={"list_customers": {"read_only": True}, "get_contract": {"read_only": True},
                   "send_email": {"requires_approval": True}},
        audit=audit,
    ) as turn_tools:
        agent = Agent(
            OpenAIChatModel(model, provider=OpenAIProvider(base_url=base_url, api_key=api_key)),
            instructions="Use run_script to chain tool calls in one step.",
            toolsets=[turn_tools.toolset],
        )
        run = await agent.run("Email the owner of every customer whose contract ended before 2026-11-30.")
        return {"answer": run.output, "audit": await turn_tools.turn.audit_log(), "outbox": list(OUTBOX)}


if __name__ == "__main__":
    out = asyncio.run(main(os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
                           os.environ["OPENAI_API_KEY"], os.environ.get("TETHER_MODEL", "gpt-4.1-mini")))
    print(out["answer"])
