"""The demo world in Python: issues, contracts and an outbox, behind the
three tools the demo script (`examples/contracts.py`) calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List

import tether

TODAY = "2026-11-30"
WEEK_START = "2026-11-23"

CONTRACTS = {
    "c1": ("Acme Corp", "2026-06-30", "dana@example.com"),
    "c2": ("Globex", "2027-03-31", "li@example.com"),
    "c3": ("Initech", "2026-11-15", "sam@example.com"),
    "c5": ("Hooli", "2026-11-29", "raj@example.com"),
}
ISSUES = [
    {"id": "ISS-1", "title": "Login fails", "customer_id": "c1", "opened": "2026-11-20"},
    {"id": "ISS-2", "title": "Export is slow", "customer_id": "c2", "opened": "2026-11-23"},
    {"id": "ISS-3", "title": "Invoice total wrong", "customer_id": "c3", "opened": "2026-11-24"},
    {"id": "ISS-4", "title": "API returns 500", "customer_id": "c8", "opened": "2026-11-25"},
    {"id": "ISS-5", "title": "SSO loop", "customer_id": "c5", "opened": "2026-11-27"},
    {"id": "ISS-6", "title": "Missing audit entries", "customer_id": "c1", "opened": "2026-11-28"},
]


@dataclass
class World:
    """The data and what the tools did."""

    outbox: List[Dict[str, str]] = field(default_factory=list)

    def functions(self) -> List[Callable[..., Any]]:
        """The three tools as plain functions, for any framework to wrap."""

        def list_issues(opened_after: str) -> List[Dict[str, str]]:
            """List issues opened on or after a day: id, title, customer_id, opened."""
            return [i for i in ISSUES if i["opened"] >= opened_after]

        async def get_contract(customer_id: str) -> Dict[str, str]:
            """Look up a customer's contract: customer, end_date, owner_email."""
            if customer_id not in CONTRACTS:
                raise tether.ToolError("not_found", f"no contract on file for customer `{customer_id}`")
            name, end, owner = CONTRACTS[customer_id]
            return {"customer_id": customer_id, "customer": name, "end_date": end, "owner_email": owner}

        async def send_email(to: str, subject: str, body: str) -> Dict[str, str]:
            """Send an email. Has effects; needs approval."""
            self.outbox.append({"to": to, "subject": subject, "body": body})
            return {"message_id": f"msg-{len(self.outbox)}"}

        return [list_issues, get_contract, send_email]

    def tools(self) -> List[tether.Tool]:
        """The three tools with the demo's metadata."""
        list_issues, get_contract, send_email = self.functions()
        return [
            tether.make_tool(list_issues, read_only=True),
            tether.make_tool(get_contract, read_only=True),
            tether.make_tool(send_email, requires_approval=True),
        ]


#: The demo tools' turn metadata, by name (for the adapters).
TOOL_META = {"list_issues": {"read_only": True}, "get_contract": {"read_only": True},
             "send_email": {"requires_approval": True}}


def expected() -> Dict[str, List[str]]:
    """What the demo script should find, worked out here from the data."""
    week = [i for i in ISSUES if i["opened"] >= WEEK_START]
    return {
        "checked": [i["id"] for i in week],
        "emailed": [i["id"] for i in week if i["customer_id"] in CONTRACTS and CONTRACTS[i["customer_id"]][1] < TODAY],
        "no_contract": [i["id"] for i in week if i["customer_id"] not in CONTRACTS],
    }


def demo_script() -> str:
    """The demo script `tether demo` runs."""
    from conftest import REPO

    return (REPO / "examples" / "contracts.py").read_text()


DEMO_INPUT = {"today": TODAY, "week_start": WEEK_START}
