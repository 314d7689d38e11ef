"""Approvals that wait: a turn opened with `approver=tether.LATER` parks a
script waiting on an approval-required call in the audit store (a SQLite
file here), and `tether.answer` — from another process, or this one —
approves or denies it, audited like any approval, and resumes the script
from the line it stopped on. Real processes, the embedded sidecar, the
session's park key file (`conftest.park_key_file`); no mocks."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import tether
from conftest import HOW, cli_binary
from parked_world import HANG_MARKER, tools

TESTS = Path(__file__).resolve().parent

ONE_WIRE = 'r = wire(amount=120)\n{"wired": r["ok"], "value": r["value"], "error": r["error"]}'

TWO_WIRES = 'a = wire(amount=1)\nb = wire(amount=2)\n[a["ok"], b["ok"], balance()["value"]]'

TWO_AT_ONCE = """
import asyncio
a, b = await asyncio.gather(call_async("wire", {"amount": 10}), call_async("wire", {"amount": 20}))
[a["ok"], b["ok"]]
"""

#: A fresh process: answers with the same tool definitions and prints the
#: `tether.Resumed` as JSON.
ANSWERER = """
import asyncio, dataclasses, json, sys
sys.path.insert(0, sys.argv[1])
import tether, parked_world
args = json.loads(sys.argv[2])
made = parked_world.tools(args.pop("effects"))
resumed = asyncio.run(tether.answer(args.pop("turn_id"), tools=made, **args))
print(json.dumps(dataclasses.asdict(resumed)))
"""


class Scratch:
    """A SQLite audit store and the effects file of one test."""

    def __init__(self, tmp_path: Path) -> None:
        self.audit = f"sqlite:{tmp_path / 'audit.db'}"
        self.effects = tmp_path / "effects.txt"
        self.effects.touch()

    def tools(self) -> List[tether.Tool]:
        return tools(self.effects)

    def wired(self) -> List[str]:
        return self.effects.read_text().splitlines()

    async def park(self, code: str, **options: Any) -> str:
        """Runs `code` as the model's `run_script` call in a turn with
        `approver=tether.LATER` (and `options`): it parks; the turn's id."""
        async with tether.Turn.open(self.tools(), approver=tether.LATER, audit=self.audit, **options) as turn:
            result = await turn.execute("call_1", "run_script", {"code": code})
            assert result.error is not None and result.error.code == tether.codes.RUN_PARKED, result
            return turn.id

    def answer_elsewhere(self, turn_id: str, env: Optional[Dict[str, str]] = None, **args: Any) -> Dict[str, Any]:
        """`tether.answer(turn_id, **args)` in a fresh Python process."""
        argv = [sys.executable, "-c", ANSWERER, str(TESTS), json.dumps({"turn_id": turn_id, "effects": str(self.effects), "audit": self.audit, **args})]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    async def rows(self, turn_id: str, tool: str) -> List[tether.AuditRow]:
        return [row for row in await tether.read_audit_log(self.audit, turn_id) if row.tool == tool]


@pytest.fixture
def scratch(tmp_path: Path) -> Scratch:
    return Scratch(tmp_path)


async def test_a_call_parked_by_one_process_is_approved_by_a_fresh_one_and_runs_once(
    scratch: Scratch, park_key_file: Path
) -> None:
    turn_id = await scratch.park(ONE_WIRE)
    assert scratch.wired() == [], "nothing is wired before the answer"
    (run,) = await tether.pending(scratch.audit)
    assert run.turn_id == turn_id and run.run_id == f"{turn_id}/run-1"
    (call,) = run.calls
    assert (call.call_id, call.tool, call.args) == ("call_1/1", "wire", {"amount": 120})
    assert abs(call.since - time.time()) < 120 and run.parked_at >= call.since
    assert await tether.pending(scratch.audit, turn_id) == [run]
    assert await tether.pending(scratch.audit, "another-turn") == []
    # Its key is in the session's file, made on first use, the user's alone.
    assert park_key_file.stat().st_size == 32 and stat.S_IMODE(park_key_file.stat().st_mode) == 0o600
    # The `tether` CLI reads the same record.
    listed = subprocess.run(
        [str(cli_binary()), "pending", "--audit-store", scratch.audit, "--json"], check=True, capture_output=True, text=True
    )
    assert [(c["call_id"], c["args"]) for c in json.loads(listed.stdout)[0]["pending"]] == [("call_1/1", {"amount": 120})]

    resumed = scratch.answer_elsewhere(turn_id, approve=True, decided_by="alice")
    assert resumed["turn_id"] == turn_id and resumed["waiting"] == []
    result = resumed["result"]
    assert result["status"] == "ok", result
    assert result["value"]["result"] == {"wired": True, "value": {"sent": 120}, "error": None}
    assert scratch.wired() == ["wired 120"]
    (wire,) = await scratch.rows(turn_id, "wire")
    assert (wire.call_id, wire.status, wire.approval, wire.decided_by) == ("call_1/1", "ok", "approved", "alice")
    assert wire.origin == "script" and wire.args == {"amount": 120}
    (script,) = await scratch.rows(turn_id, "run_script")
    assert script.status == "ok" and script.call_id == "call_1"
    assert await tether.pending(scratch.audit) == []
    with pytest.raises(tether.NotWaiting, match=f"nothing of turn `{turn_id}` waits.*tether.pending"):
        await tether.answer(turn_id, approve=True, decided_by="alice", tools=scratch.tools(), audit=scratch.audit)


async def test_a_denied_call_never_runs_and_the_script_gets_the_denial(scratch: Scratch) -> None:
    turn_id = await scratch.park(ONE_WIRE)
    resumed = await tether.answer(
        turn_id, approve=False, decided_by="bob", reason="not today", tools=scratch.tools(), audit=scratch.audit
    )
    assert not resumed.parked and resumed.result is not None and resumed.result.ok, resumed
    value = resumed.result.value["result"]
    assert value["wired"] is False and value["value"] is None
    assert value["error"]["code"] == tether.codes.APPROVAL_DENIED and "not today" in value["error"]["message"]
    assert scratch.wired() == []
    (wire,) = await scratch.rows(turn_id, "wire")
    assert (wire.approval, wire.decided_by, wire.approval_reason, wire.code) == (
        "denied", "bob", "not today", tether.codes.APPROVAL_DENIED
    )
    assert await tether.pending(scratch.audit) == []


async def test_a_call_id_that_does_not_wait_is_refused_naming_those_that_do(scratch: Scratch) -> None:
    turn_id = await scratch.park(ONE_WIRE)
    with pytest.raises(tether.NotWaiting, match=rf"call `call_1/9` does not wait in turn `{turn_id}`; these do: `call_1/1`"):
        await tether.answer(
            turn_id, call_id="call_1/9", approve=True, decided_by="alice", tools=scratch.tools(), audit=scratch.audit
        )
    with pytest.raises(tether.ConfigError, match="waits on tool `wire`, which is not among the tools given"):
        await tether.answer(turn_id, approve=True, decided_by="alice", tools=[], audit=scratch.audit)
    # Refused before anything ran: it still waits, untouched.
    (run,) = await tether.pending(scratch.audit)
    assert [c.call_id for c in run.calls] == ["call_1/1"] and scratch.wired() == []


async def test_later_with_an_approval_predicate_or_the_memory_store_is_refused_at_open(scratch: Scratch) -> None:
    predicate = tether.make_tool(lambda amount: amount, name="wire", requires_approval=lambda request: True)
    with pytest.raises(tether.ConfigError, match=r"cannot be combined with a `requires_approval` predicate \(tool `wire`\).*requires_approval=True"):
        await tether.Turn.open([predicate], approver=tether.LATER, audit=scratch.audit)
    with pytest.raises(tether.ConfigError, match="`memory:` keeps it only in this one.*sqlite:PATH"):
        await tether.Turn.open(scratch.tools(), approver=tether.LATER, audit="memory:")
    with pytest.raises(tether.ConfigError, match="`memory:` keeps no parked runs"):
        await tether.pending("memory:")
    with pytest.raises(tether.ConfigError, match="`memory:` keeps no parked runs"):
        await tether.answer("t", approve=True, decided_by="alice", audit="memory:")
    assert repr(tether.LATER) == "tether.LATER" and tether.Later() is tether.LATER


async def test_two_calls_answered_one_at_a_time_park_again_between_them(scratch: Scratch) -> None:
    turn_id = await scratch.park(TWO_WIRES)
    (run,) = await tether.pending(scratch.audit, turn_id)
    assert [(c.call_id, c.args) for c in run.calls] == [("call_1/1", {"amount": 1})]
    first = await tether.answer(
        turn_id, call_id="call_1/1", approve=True, decided_by="alice", tools=scratch.tools(), audit=scratch.audit
    )
    # The run went on, wired 1, and parked again at its next call.
    assert first.result is not None and first.result.error is not None
    assert first.result.error.code == tether.codes.RUN_PARKED
    assert first.parked and [(c.call_id, c.tool, c.args) for c in first.waiting] == [("call_1/2", "wire", {"amount": 2})]
    assert scratch.wired() == ["wired 1"]
    assert [c.call_id for r in await tether.pending(scratch.audit) for c in r.calls] == ["call_1/2"]
    second = scratch.answer_elsewhere(turn_id, call_id="call_1/2", approve=True, decided_by="alice")
    assert second["waiting"] == [] and second["result"]["value"]["result"] == [True, True, 1000]
    assert scratch.wired() == ["wired 1", "wired 2"]
    wires = await scratch.rows(turn_id, "wire")
    assert [(r.call_id, r.approval, r.decided_by) for r in wires] == [("call_1/1", "approved", "alice"), ("call_1/2", "approved", "alice")]
    assert len(await scratch.rows(turn_id, "run_script")) == 1
    assert await tether.pending(scratch.audit) == []


async def test_calls_waiting_together_are_answered_one_by_one_and_the_run_goes_on_after_the_last(scratch: Scratch) -> None:
    # A batch of two parks only if the message resuming it fits with a
    # result for each: with the default 4 MiB each it would wait live (and,
    # should it, time out in a minute rather than five).
    turn_id = await scratch.park(TWO_AT_ONCE, max_result_bytes=64 * 1024, approval_timeout=60)
    (run,) = await tether.pending(scratch.audit, turn_id)
    assert sorted((c.call_id, c.args["amount"]) for c in run.calls) == [("call_1/1", 10), ("call_1/2", 20)]
    first = await tether.answer(
        turn_id, call_id="call_1/2", approve=False, decided_by="bob", tools=scratch.tools(), audit=scratch.audit
    )
    # Denied, and stored; the run waits on, for the other.
    assert first.result is None and [c.call_id for c in first.waiting] == ["call_1/1"]
    assert [c.call_id for c in (await tether.pending(scratch.audit))[0].calls] == ["call_1/1"]
    last = await tether.answer(
        turn_id, call_id="call_1/1", approve=True, decided_by="alice", tools=scratch.tools(), audit=scratch.audit
    )
    assert not last.parked and last.result is not None and last.result.value["result"] == [True, False]
    assert scratch.wired() == ["wired 10"]


async def test_calls_the_resumed_run_makes_later_go_to_the_approver_given(scratch: Scratch) -> None:
    turn_id = await scratch.park(TWO_WIRES)
    asked: List[tether.ApprovalRequest] = []

    def carol(request: tether.ApprovalRequest) -> tether.Decision:
        asked.append(request)
        return tether.Decision(True, decided_by="carol")

    resumed = await tether.answer(
        turn_id, approve=True, decided_by="alice", tools=scratch.tools(), audit=scratch.audit, approver=carol
    )
    assert not resumed.parked and resumed.result is not None and resumed.result.value["result"] == [True, True, 1000]
    assert [(r.call_id, r.args) for r in asked] == [("call_1/2", {"amount": 2})]
    wires = await scratch.rows(turn_id, "wire")
    assert [(r.call_id, r.decided_by) for r in wires] == [("call_1/1", "alice"), ("call_1/2", "carol")]


async def test_a_run_claimed_by_a_process_that_died_is_taken_over_and_its_call_not_repeated(
    scratch: Scratch, tmp_path: Path
) -> None:
    turn_id = await scratch.park(ONE_WIRE)
    marker = tmp_path / "started"
    argv = [sys.executable, "-c", ANSWERER, str(TESTS),
            json.dumps({"turn_id": turn_id, "effects": str(scratch.effects), "audit": scratch.audit, "approve": True, "decided_by": "alice"})]
    hung = subprocess.Popen(argv, env={**os.environ, HANG_MARKER: str(marker)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert hung.poll() is None, hung.communicate()
            assert time.monotonic() < deadline, "the answering process never reached the tool"
            time.sleep(0.02)
    finally:
        hung.send_signal(signal.SIGKILL)
        hung.wait(timeout=60)
    with pytest.raises(tether.RunClaimed, match=rf"is being resumed by `tether-python \(pid {hung.pid}\) .*take_over=True"):
        await tether.answer(turn_id, approve=True, decided_by="alice", tools=scratch.tools(), audit=scratch.audit)
    resumed = await tether.answer(
        turn_id, approve=True, decided_by="alice", tools=scratch.tools(), audit=scratch.audit, take_over=True
    )
    assert resumed.result is not None and resumed.result.ok, resumed
    value = resumed.result.value["result"]
    assert value["wired"] is False and value["error"]["code"] == tether.codes.POSSIBLY_EXECUTED
    assert scratch.wired() == [], "the call that may have run is not run again"
    assert await tether.pending(scratch.audit) == []


def test_a_sidecar_started_with_a_random_key_refuses_later_turns(tmp_path: Path) -> None:
    program = f"""
import asyncio, tether
async def main():
    async with tether.Turn.open([]) as turn:
        assert (await turn.execute("c", "run_script", {{"code": "1"}})).ok
    try:
        await tether.Turn.open([], approver=tether.LATER, audit="sqlite:{tmp_path / 'audit.db'}")
    except tether.ConfigError as error:
        print(error)
asyncio.run(main())
"""
    env = {k: v for k, v in os.environ.items() if k != "TETHER_PARK_KEY_FILE"}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env={**env, "XDG_STATE_HOME": str(tmp_path / "state")})
    assert done.returncode == 0, done.stderr
    assert "started with a park key made at random" in done.stdout and "TETHER_PARK_KEY_FILE" in done.stdout, done.stdout
    assert not (tmp_path / "state").exists(), "no key file is made for a turn that cannot use it"


def test_the_embedded_sidecars_key_is_fixed_when_it_starts(tmp_path: Path) -> None:
    first, other = tmp_path / "first.key", tmp_path / "other.key"
    program = f"""
import asyncio, tether
async def main():
    audit = "sqlite:{tmp_path / 'audit.db'}"
    async with tether.Turn.open([], approver=tether.LATER, audit=audit, park_key_file="{first}"):
        pass
    async with tether.Turn.open([], audit=audit, park_key_file="{first}"):
        pass
    try:
        await tether.Turn.open([], approver=tether.LATER, audit=audit, park_key_file="{other}")
    except tether.ConfigError as error:
        print(error)
    try:
        await tether.Turn.open([], sidecar="unix:/nowhere.sock", park_key_file="{first}")
    except tether.ConfigError as error:
        print(error)
asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    fixed, address = done.stdout.splitlines()
    assert f"seals parked runs with the key in `{first}`, not `{other}`" in fixed, fixed
    assert "`park_key_file` is the embedded sidecar's key" in address, address
    assert first.stat().st_size == 32 and not other.exists()


async def test_a_run_parked_in_postgresql_is_answered_from_another_process(scratch: Scratch) -> None:
    url = os.environ.get("TETHER_TEST_POSTGRES_URL")
    if not url:
        pytest.fail(f"TETHER_TEST_POSTGRES_URL is not set; {HOW} (it starts PostgreSQL)")
    scratch.audit = url
    turn_id = await scratch.park(ONE_WIRE)
    (run,) = await tether.pending(url, turn_id)
    assert [(c.call_id, c.args) for c in run.calls] == [("call_1/1", {"amount": 120})]
    resumed = scratch.answer_elsewhere(turn_id, approve=True, decided_by="alice")
    assert resumed["result"]["value"]["result"]["value"] == {"sent": 120}
    assert scratch.wired() == ["wired 120"]
    assert [(r.approval, r.decided_by) for r in await scratch.rows(turn_id, "wire")] == [("approved", "alice")]
    assert await tether.pending(url, turn_id) == []


async def test_a_direct_call_that_waits_is_stored_and_answered_once_by_a_fresh_process_in_its_turn(scratch: Scratch) -> None:
    async with tether.Turn.open(scratch.tools(), approver=tether.LATER, audit=scratch.audit) as turn:
        # A call that needs no person runs at once, as `execute` runs it.
        ran = await turn.execute_or_park("call_b", "balance", {})
        assert isinstance(ran, tether.CallResult) and ran.value == 1000
        waits = await turn.execute_or_park("call_w", "wire", {"amount": 9})
        turn_id = turn.id
    # The call reached the turn's approval step and waits in the store: the
    # process that made it is gone, and nothing ran.
    assert isinstance(waits, tether.PendingCall) and (waits.call_id, waits.tool, waits.args) == ("call_w", "wire", {"amount": 9})
    (run,) = await tether.pending(scratch.audit)
    assert (run.turn_id, run.run_id, run.calls) == (turn_id, f"{turn_id}/direct/call_w", [waits])
    assert scratch.wired() == [] and await scratch.rows(turn_id, "wire") == []
    # The CLI lists it, and sends its answer where its tool is.
    cli = str(cli_binary())
    listed = subprocess.run([cli, "pending", "--audit-store", scratch.audit, "--json"], check=True, capture_output=True, text=True)
    assert [(c["call_id"], c["args"]) for c in json.loads(listed.stdout)[0]["pending"]] == [("call_w", {"amount": 9})]
    refused = subprocess.run([cli, "approve", "--audit-store", scratch.audit, "--turn", turn_id, "--call", "call_w", "--as", "dana"],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "is a direct call" in refused.stderr and "tether.answer" in refused.stderr, refused
    assert scratch.wired() == []

    resumed = scratch.answer_elsewhere(turn_id, call_id="call_w", approve=True, decided_by="alice")
    assert (resumed["run_id"], resumed["waiting"]) == (f"{turn_id}/direct/call_w", [])
    assert resumed["result"]["status"] == "ok" and resumed["result"]["value"] == {"sent": 9}, resumed
    assert scratch.wired() == ["wired 9"]
    (row,) = await scratch.rows(turn_id, "wire")
    assert (row.call_id, row.origin, row.status, row.approval, row.decided_by) == ("call_w", "model", "ok", "approved", "alice")
    assert await tether.pending(scratch.audit) == []
    with pytest.raises(tether.NotWaiting):
        await tether.answer(turn_id, call_id="call_w", approve=True, decided_by="alice", tools=scratch.tools(), audit=scratch.audit)
    assert scratch.wired() == ["wired 9"] and len(await scratch.rows(turn_id, "wire")) == 1
