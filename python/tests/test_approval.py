"""Approvers written in Python: they see the exact arguments; a denial, a
time-out or an approver that fails is a refusal value the script reads,
never an exception, and nothing runs."""

from __future__ import annotations

import asyncio
from typing import List

import tether
from world import DEMO_INPUT, World, demo_script

SEND = "r = send_email(to='dana@example.com', subject='s', body='b')\nr"


async def test_an_async_approver_that_denies_stops_the_email_and_the_script_reads_why() -> None:
    world = World()
    seen: List[tether.ApprovalRequest] = []

    async def deny(request: tether.ApprovalRequest) -> tether.Decision:
        seen.append(request)
        await asyncio.sleep(0)  # an approver may await (a UI, a queue)
        return tether.Decision(False, decided_by="ops@example.com", reason="no emails on Sundays")

    async with tether.Turn.open(world.tools(), approver=deny) as turn:
        result = await turn.execute("c1", "run_script", {"code": SEND})
        rows = await turn.audit_log()
    assert world.outbox == []
    assert seen[0].args == {"to": "dana@example.com", "subject": "s", "body": "b"}
    refused = result.value["result"]
    assert refused["ok"] is False
    assert refused["error"]["code"] == "approval_denied"
    assert "no emails on Sundays" in refused["error"]["message"]
    email = next(r for r in rows if r.tool == "send_email")
    assert (email.status, email.step, email.code, email.approval, email.decided_by) == (
        "failed", "approval", "approval_denied", "denied", "ops@example.com",
    )


async def test_an_approver_that_never_answers_times_out_and_its_task_is_cancelled() -> None:
    world = World()
    cancelled = asyncio.Event()

    async def hang(request: tether.ApprovalRequest) -> bool:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    async with tether.Turn.open(world.tools(), approver=hang, approval_timeout=0.3) as turn:
        result = await turn.execute("c1", "run_script", {"code": SEND})
        rows = await turn.audit_log()
    assert result.value["result"]["error"]["code"] == "approval_timeout"
    await asyncio.wait_for(cancelled.wait(), timeout=10)
    assert world.outbox == []
    email = next(r for r in rows if r.tool == "send_email")
    assert (email.code, email.approval, email.decided_by) == ("approval_timeout", "timed_out", "timeout")


async def test_a_sync_approver_and_one_that_raises() -> None:
    world = World()
    async with tether.Turn.open(world.tools(), approver=lambda request: request.args["to"].endswith("@example.com")) as turn:
        ok = await turn.execute("c1", "send_email", {"to": "a@example.com", "subject": "s", "body": "b"})
        no = await turn.execute("c2", "send_email", {"to": "a@elsewhere.org", "subject": "s", "body": "b"})
    assert ok.ok and ok.approval == {"verdict": "approved", "decided_by": "python"}
    assert no.error is not None and no.error.code == "approval_denied"
    assert [e["to"] for e in world.outbox] == ["a@example.com"]

    def broken(request: tether.ApprovalRequest) -> bool:
        raise RuntimeError("approval service down")

    async with tether.Turn.open(World().tools(), approver=broken) as turn:
        failed = await turn.execute("c1", "send_email", {"to": "a@example.com", "subject": "s", "body": "b"})
    assert failed.error is not None and failed.error.code == "approval_denied"
    assert "RuntimeError" in failed.error.message and "approval service down" in failed.error.message


async def test_without_an_approver_calls_that_need_approval_are_denied() -> None:
    world = World()
    async with tether.Turn.open(world.tools()) as turn:
        result = await turn.execute("call_1", "run_script", {"code": demo_script(), "input": DEMO_INPUT})
    assert result.ok
    assert result.value["result"]["emailed"] == []
    assert "email not sent" in result.value["stdout"]
    assert world.outbox == []
