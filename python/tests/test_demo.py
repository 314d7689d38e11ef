"""The demo scenario from Python: the demo script runs as the model's
`run_script` call; every call it makes is checked, approved and audited by
the Python turn — on the embedded sidecar and on a sidecar process."""

from __future__ import annotations

import json
from typing import List

import tether
from world import DEMO_INPUT, World, demo_script, expected


async def test_the_demo_script_runs_with_every_call_approved_and_audited(sidecar: str) -> None:
    world = World()
    asked: List[tether.ApprovalRequest] = []

    async def approve(request: tether.ApprovalRequest) -> bool:
        asked.append(request)
        return True

    async with tether.Turn.open(world.tools(), approver=approve, sidecar=sidecar) as turn:
        result = await turn.execute("call_1", "run_script", {"code": demo_script(), "input": DEMO_INPUT})
        rows = await turn.audit_log()
        ledger = await turn.ledger()

    want = expected()
    assert result.ok, result.error
    assert result.value["result"] == {
        "checked": len(want["checked"]),
        "emailed": want["emailed"],
        "no_contract": want["no_contract"],
    }
    # The failure for a customer without a contract came back to the script as a value.
    assert "ISS-4: no contract (not_found)" in result.value["stdout"]
    # The approver saw each email's exact arguments, from the script.
    assert [r.args["to"] for r in asked] == [e["to"] for e in world.outbox]
    assert [r.args for r in asked] == world.outbox
    assert all(r.origin == "script" and r.parent_call_id == "call_1" for r in asked)
    assert len(world.outbox) == len(want["emailed"])

    # One audit row per call: the script's calls nested under `call_1`.
    script_rows = [r for r in rows if r.origin == "script"]
    n_calls = 1 + len(want["checked"]) + len(want["emailed"])
    assert len(script_rows) == n_calls
    assert [r.call_id for r in script_rows] == [f"call_1/{n}" for n in range(1, n_calls + 1)]
    assert rows[-1].call_id == "call_1" and rows[-1].tool == "run_script" and rows[-1].status == "ok"
    emails = [r for r in script_rows if r.tool == "send_email"]
    assert [(r.approval, r.decided_by, r.status) for r in emails] == [("approved", "python", "ok")] * len(emails)
    assert [r.args["to"] for r in emails] == [e["to"] for e in world.outbox]
    missing = [r for r in script_rows if r.tool == "get_contract" and r.status == "error"]
    assert [r.code for r in missing] == ["not_found"] * len(want["no_contract"])
    # The effect ledger: each email started, then settled ok.
    assert [(e.tool, e.state, e.outcome, e.approval_required) for e in ledger] == [
        ("send_email", "settled", "ok", True)
    ] * len(emails)


async def test_a_sidecar_that_cannot_be_reached_or_named_says_what_to_do() -> None:
    import pytest

    with pytest.raises(tether.SidecarUnavailable, match="cannot reach the sidecar at `unix:/nonexistent/x.sock`.*start one"):
        await tether.Turn.open([], sidecar="unix:/nonexistent/x.sock")
    with pytest.raises(tether.SidecarUnavailable, match='`localhost:1` is not a sidecar address; use "embedded"'):
        await tether.Turn.open([], sidecar="localhost:1")
