"""Tether from Python in one file: three tools, an approver that sees the
exact arguments, a SQLite audit log, and a script (the kind a model writes)
run by the turn's `run_script` on a sidecar embedded in this process.

    python python/examples/quickstart.py
"""

import asyncio
import json
import sys
from typing import Dict, List

import tether

CONTRACTS = {"c1": "2026-06-30", "c2": "2027-03-31", "c3": "2026-11-15"}
OUTBOX: List[Dict[str, str]] = []


@tether.tool(read_only=True)
def list_customers() -> List[str]:
    """Every customer id."""
    return sorted(CONTRACTS)


@tether.tool(read_only=True)
async def get_contract(customer_id: str) -> Dict[str, str]:
    """A customer's contract end date."""
    if customer_id not in CONTRACTS:
        raise tether.ToolError("not_found", f"no contract for `{customer_id}`")
    return {"customer_id": customer_id, "end_date": CONTRACTS[customer_id]}


@tether.tool(requires_approval=True)
async def send_email(to: str, subject: str) -> Dict[str, int]:
    """Send an email (has effects: needs approval)."""
    OUTBOX.append({"to": to, "subject": subject})
    return {"sent": len(OUTBOX)}


async def approve(request: tether.ApprovalRequest) -> bool:
    print(f"approve {request.tool}({json.dumps(request.args)}) from a {request.origin}? yes", file=sys.stderr)
    return True


SCRIPT = """
ended = []
for customer in unwrap(list_customers()):
    contract = unwrap(get_contract(customer_id=customer))
    if contract["end_date"] < input["today"]:
        send_email(to=f"owner-{customer}@example.com", subject=f"contract {customer} ended")
        ended.append(customer)
ended
"""


async def main(audit: str = "sqlite:tether-quickstart.db") -> tether.CallResult:
    async with tether.Turn.open([list_customers, get_contract, send_email], approver=approve, audit=audit) as turn:
        # The model's call of `run_script`: every call the script makes comes
        # back to this turn, checked, approved and audited.
        result = await turn.execute("call_1", "run_script", {"code": SCRIPT, "input": {"today": "2026-11-30"}})
        for row in await turn.audit_log():
            print(f"audit: {row.call_id:10} {row.tool:15} {row.origin:6} {row.status:6} {row.approval or ''}")
    return result


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()).model_value, indent=2))
