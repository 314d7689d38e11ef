"""Approvals that wait, the frameworks' way (issue 26, item 8): with
`approver=tether.LATER`, a script whose run parks, and a direct call of a
tool that needs approval, end the agent run with the framework's own
human-in-the-loop object — the Agents SDK's interruptions and `RunState`,
Pydantic AI's deferred tool requests — carrying what the person must see.
A FRESH PROCESS then answers (approve, or deny), resumes the framework's
run, and the model reads the real result: the effect happens exactly once,
or never, audited once with who decided; answering the same saved run
again runs nothing. Real frameworks, the fake chat-completions server, the
embedded sidecar, a SQLite store and the session's park key file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import tether
from fake_openai import FakeOpenAI, final_text, last_tool_result, tool_call
from hitl_world import TESTS, Interrupted, interrupt
from parked_world import HANG_MARKER

ONE_WIRE = 'r = wire(amount=120)\n{"wired": r["ok"], "value": r["value"], "error": r["error"]}'

TWO_WIRES = 'a = wire(amount=1)\nb = wire(amount=2)\n[a["ok"], b["ok"], balance()["value"]]'


def tool_results(messages: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Each tool result the model was sent, by call id."""
    return {m["tool_call_id"]: last_tool_result([m]) for m in messages if m["role"] == "tool"}


def echo_last_result() -> Any:
    """The model's answer once it has the tool's result: that result, as text."""
    return final_text(lambda messages: json.dumps(last_tool_result(messages)))


class Backend:
    """One test's web backend: a SQLite store its processes share, and the
    effects file: a line for each transfer `wire` makes, each `note`."""

    def __init__(self, tmp_path: Path, framework: str) -> None:
        self.framework = framework
        self.audit = f"sqlite:{tmp_path / 'audit.db'}"
        self.effects = tmp_path / "effects.txt"
        self.effects.touch()

    def wired(self) -> List[str]:
        return self.effects.read_text().splitlines()

    async def interrupt(self, model_call: Any, options: Optional[Dict[str, Any]] = None) -> Interrupted:
        """The request that ends on a waiting call: the model makes `model_call`."""
        with FakeOpenAI([model_call]) as fake:
            interrupted = await interrupt(self.framework, fake.base_url, str(self.effects), self.audit, options)
        assert len(fake.requests) == 1, "the run ended on the call: the model was not asked again"
        return interrupted

    def resume_elsewhere(self, saved: str, turn_id: str, replies: List[Any], options: Optional[Dict[str, Any]] = None,
                         **answer: Any) -> Dict[str, Any]:
        """A fresh process answers and resumes the saved run, against a
        model that says `replies` (`options`: more of its turn's options):
        its outcome, and each tool result the model was sent (`model_saw`)."""
        with FakeOpenAI(replies) as fake:
            process = self.start_resuming(saved, turn_id, {}, fake.base_url, options, **answer)
            out, err = process.communicate(timeout=180)
        assert process.returncode in (0, 3) and out.strip(), err
        outcome: Dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        outcome["model_saw"] = [last_tool_result(request["messages"]) for request in fake.requests]
        outcome["tool_results"] = [tool_results(request["messages"]) for request in fake.requests]
        return outcome

    def start_resuming(self, saved: str, turn_id: str, env: Dict[str, str], base_url: str = "http://127.0.0.1:9/v1",
                       options: Optional[Dict[str, Any]] = None, **answer: Any) -> "subprocess.Popen[str]":
        """A fresh process that answers and resumes the saved run, started
        (`answers=[...]`: one answer each, by `call_id`)."""
        args = {"framework": self.framework, "base_url": base_url, "effects": str(self.effects),
                "audit": self.audit, "saved": saved, "turn_id": turn_id, "answer": answer.get("answers", answer),
                "options": options}
        return subprocess.Popen([sys.executable, str(TESTS / "hitl_world.py"), json.dumps(args)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})

    async def rows(self, turn_id: str, tool: str) -> List[tether.AuditRow]:
        return [row for row in await tether.read_audit_log(self.audit, turn_id) if row.tool == tool]


@pytest.fixture(params=["openai_agents", "pydantic_ai"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return Backend(tmp_path, str(request.param))


def assert_refused_as_answered(outcome: Dict[str, Any]) -> None:
    assert outcome.get("error") == "NotWaiting" and "already" in outcome["message"], outcome
    assert outcome["model_saw"] == [], "the model was not asked"


async def test_a_parked_script_ends_the_run_and_its_approval_in_a_fresh_process_runs_it_once(backend: Backend) -> None:
    interrupted = await backend.interrupt(tool_call("call_s", "run_script", {"code": ONE_WIRE}))
    turn_id = interrupted.turn_id
    # What the person must see: the turn, the run, each call's tool and exact arguments.
    (waiting,) = interrupted.waiting
    assert (waiting.call_id, waiting.tool, waiting.turn_id, waiting.run_id) == ("call_s", "run_script", turn_id, f"{turn_id}/run-1")
    assert waiting.args["code"] == ONE_WIRE
    assert [(c.call_id, c.tool, c.args) for c in waiting.calls] == [("call_s/1", "wire", {"amount": 120})]
    assert backend.wired() == [], "nothing is wired before the answer"
    assert [run.run_id for run in await tether.pending(backend.audit)] == [waiting.run_id]

    outcome = backend.resume_elsewhere(interrupted.saved, turn_id, [echo_last_result()], approve=True, decided_by="alice")
    assert outcome["still"] == [], outcome
    # The model read the resumed script's real result, and answered with it.
    (seen,) = outcome["model_saw"]
    assert seen["ok"] is True and seen["value"]["result"] == {"wired": True, "value": {"sent": 120}, "error": None}
    assert json.loads(outcome["output"]) == seen
    assert backend.wired() == ["wired 120"]
    (wire,) = await backend.rows(turn_id, "wire")
    assert (wire.call_id, wire.origin, wire.status, wire.approval, wire.decided_by) == ("call_s/1", "script", "ok", "approved", "alice")
    (script,) = await backend.rows(turn_id, "run_script")
    assert (script.call_id, script.status) == ("call_s", "ok")
    assert await tether.pending(backend.audit) == []

    # The same saved run resumed again, by another process: nothing runs twice.
    again = backend.resume_elsewhere(interrupted.saved, turn_id, [echo_last_result()], approve=True, decided_by="alice")
    assert_refused_as_answered(again)
    assert backend.wired() == ["wired 120"]
    assert len(await backend.rows(turn_id, "wire")) == 1 and len(await backend.rows(turn_id, "run_script")) == 1


async def test_a_parked_script_denied_from_a_fresh_process_never_runs_the_call_and_goes_on(backend: Backend) -> None:
    interrupted = await backend.interrupt(tool_call("call_s", "run_script", {"code": ONE_WIRE}))
    outcome = backend.resume_elsewhere(
        interrupted.saved, interrupted.turn_id, [echo_last_result()], approve=False, decided_by="bob", reason="not today"
    )
    assert outcome["still"] == [], outcome
    # The script went on with the denial; the model read its real result.
    (seen,) = outcome["model_saw"]
    value = seen["value"]["result"]
    assert seen["ok"] is True and value["wired"] is False and value["value"] is None
    assert value["error"]["code"] == tether.codes.APPROVAL_DENIED and "not today" in value["error"]["message"]
    assert backend.wired() == []
    (wire,) = await backend.rows(interrupted.turn_id, "wire")
    assert (wire.approval, wire.decided_by, wire.approval_reason, wire.code) == (
        "denied", "bob", "not today", tether.codes.APPROVAL_DENIED
    )
    assert await tether.pending(backend.audit) == []


async def test_a_script_that_waits_again_ends_the_resumed_run_again_on_the_calls_it_waits_on_now(backend: Backend) -> None:
    interrupted = await backend.interrupt(tool_call("call_s", "run_script", {"code": TWO_WIRES}))
    (waiting,) = interrupted.waiting
    assert [(c.call_id, c.args) for c in waiting.calls] == [("call_s/1", {"amount": 1})]
    first = backend.resume_elsewhere(interrupted.saved, interrupted.turn_id, [echo_last_result()], approve=True, decided_by="alice")
    # Wired 1, and waits on the second wire, shown: the model was not asked.
    (still,) = first["still"]
    assert still["call_id"] == "call_s" and still["run_id"] == waiting.run_id, still
    assert [(c["call_id"], c["tool"], c["args"]) for c in still["calls"]] == [("call_s/2", "wire", {"amount": 2})]
    assert first["model_saw"] == [] and backend.wired() == ["wired 1"]
    second = backend.resume_elsewhere(first["saved"], interrupted.turn_id, [echo_last_result()], approve=True, decided_by="carol")
    assert second["still"] == [] and second["model_saw"][0]["value"]["result"] == [True, True, 1000], second
    assert backend.wired() == ["wired 1", "wired 2"]
    wires = await backend.rows(interrupted.turn_id, "wire")
    assert [(r.call_id, r.approval, r.decided_by) for r in wires] == [("call_s/1", "approved", "alice"), ("call_s/2", "approved", "carol")]
    assert len(await backend.rows(interrupted.turn_id, "run_script")) == 1


async def test_a_direct_call_that_needs_approval_ends_the_run_and_its_approval_in_a_fresh_process_runs_it_once(
    backend: Backend,
) -> None:
    before = time.time()
    interrupted = await backend.interrupt(tool_call("call_d", "wire", {"amount": 7}))
    turn_id = interrupted.turn_id
    (waiting,) = interrupted.waiting
    assert (waiting.call_id, waiting.tool, waiting.args, waiting.run_id) == ("call_d", "wire", {"amount": 7}, None)
    (shown,) = waiting.calls
    assert (shown.call_id, shown.tool, shown.args) == ("call_d", "wire", {"amount": 7}) and shown.since >= before - 1
    # It reached the turn's approval step and waits in the store, not in a
    # process: nothing ran, no row yet, and any process lists it.
    assert await tether.read_audit_log(backend.audit, turn_id) == [] and backend.wired() == []
    (parked,) = await tether.pending(backend.audit)
    assert (parked.turn_id, parked.run_id, parked.calls) == (turn_id, f"{turn_id}/direct/call_d", [shown])

    outcome = backend.resume_elsewhere(interrupted.saved, turn_id, [echo_last_result()], approve=True, decided_by="alice")
    (seen,) = outcome["model_saw"]
    assert seen == {"ok": True, "value": {"sent": 7}, "error": None}, outcome
    assert backend.wired() == ["wired 7"]
    # One row, in the turn the call was made in.
    (row,) = await backend.rows(turn_id, "wire")
    assert (row.call_id, row.origin, row.status, row.approval, row.decided_by, row.args) == (
        "call_d", "model", "ok", "approved", "alice", {"amount": 7}
    )
    assert await tether.pending(backend.audit) == []

    again = backend.resume_elsewhere(interrupted.saved, turn_id, [echo_last_result()], approve=True, decided_by="alice")
    assert_refused_as_answered(again)
    assert backend.wired() == ["wired 7"] and len(await backend.rows(turn_id, "wire")) == 1


async def test_a_direct_call_denied_from_a_fresh_process_never_runs_and_the_model_reads_the_denial(backend: Backend) -> None:
    interrupted = await backend.interrupt(tool_call("call_d", "wire", {"amount": 7}))
    outcome = backend.resume_elsewhere(
        interrupted.saved, interrupted.turn_id, [echo_last_result()], approve=False, decided_by="bob", reason="over budget"
    )
    (seen,) = outcome["model_saw"]
    assert seen["ok"] is False and seen["error"]["code"] == tether.codes.APPROVAL_DENIED, outcome
    assert "over budget" in seen["error"]["message"]
    assert backend.wired() == []
    (row,) = await backend.rows(interrupted.turn_id, "wire")
    assert (row.call_id, row.approval, row.decided_by, row.approval_reason) == ("call_d", "denied", "bob", "over budget")
    assert await tether.pending(backend.audit) == []


@pytest.mark.parametrize("model_call", [
    tool_call("call_s", "run_script", {"code": ONE_WIRE}), tool_call("call_d", "wire", {"amount": 7}),
], ids=["script", "direct"])
async def test_an_approval_given_the_frameworks_way_without_tethers_answer_runs_nothing(
    backend: Backend, model_call: Any
) -> None:
    from hitl_world import approve_bare

    interrupted = await backend.interrupt(model_call)
    parked_before = await tether.pending(backend.audit)
    with FakeOpenAI([echo_last_result()]) as fake:
        bare = approve_bare(backend.framework, fake.base_url, str(backend.effects), backend.audit, interrupted.saved)
        if backend.framework == "pydantic_ai" and interrupted.waiting[0].run_id is not None:
            # The run ends on the same script again, as it was shown (its run found in the store).
            assert await bare == interrupted.waiting
        else:
            # Pydantic AI cannot tell which turn a direct call was stopped in; the SDK cannot answer
            # from inside the tool: the resumed run raises, saying how to answer.
            how = "`tether.adapters.pydantic_ai.answer" if backend.framework == "pydantic_ai" else "`await turn_tools.answer"
            with pytest.raises(Exception, match=f"was approved without it: .*{how}"):
                await bare
    assert fake.requests == [], "the model was not asked"
    assert backend.wired() == [] and await tether.pending(backend.audit) == parked_before
    assert [r for r in await tether.read_audit_log(backend.audit, interrupted.turn_id) if r.tool == "wire"] == []


async def test_answers_that_cannot_be_carried_out_say_why(backend: Backend) -> None:
    interrupted = await backend.interrupt(tool_call("call_s", "run_script", {"code": ONE_WIRE}))
    if backend.framework == "pydantic_ai":
        from pydantic import TypeAdapter
        from pydantic_ai import DeferredToolRequests
        from tether.adapters.pydantic_ai import answer

        requests = TypeAdapter(DeferredToolRequests).validate_python(json.loads(interrupted.saved)["requests"])
        with pytest.raises(tether.NotWaiting, match="no Tether call `call_x` waits in these requests; those that do: `call_s`"):
            answer(requests, approve=True, decided_by="alice", call_id="call_x")
        with pytest.raises(tether.ConfigError, match="`decided_by` is empty"):
            answer(requests, approve=True, decided_by=" ")
    else:
        from agents import RunState
        from tether.adapters.openai_agents import open_turn

        async with open_turn(tools_of(backend)) as not_later:
            with pytest.raises(tether.ConfigError, match="not opened with `approver=tether.LATER`"):
                await not_later.pending([])
        async with open_turn(tools_of(backend), approver=tether.LATER, audit=backend.audit) as turn_tools:
            state = await RunState.from_string(agent_of(turn_tools), interrupted.saved)
            with pytest.raises(tether.NotWaiting, match=f"no run of the model's `run_script` call `call_s` waits in turn `{turn_tools.turn.id}`"):
                await turn_tools.answer(state, approve=True, decided_by="alice")  # this turn's id, not the run's
            with pytest.raises(tether.NotWaiting, match="no interruption of this state waits on Tether for call `call_x`"):
                await turn_tools.answer(state, approve=True, decided_by="alice", call_id="call_x", turn_id=interrupted.turn_id)
    assert backend.wired() == [] and len(await tether.pending(backend.audit)) == 1


def tools_of(backend: Backend) -> List[tether.Tool]:
    from hitl_world import tools

    return tools(str(backend.effects))


def agent_of(turn_tools: Any) -> Any:
    from hitl_world import agents_agent

    return agents_agent("http://127.0.0.1:9/v1", turn_tools.tools)



@pytest.mark.parametrize("model_call, refusal", [
    (tool_call("call_s", "run_script", {"code": ONE_WIRE}), "RunClaimed"), (tool_call("call_d", "wire", {"amount": 7}), "RunClaimed"),
], ids=["script", "direct"])
async def test_a_second_process_answering_while_the_first_runs_the_call_is_refused_and_runs_nothing(
    backend: Backend, model_call: Any, refusal: str, tmp_path: Path
) -> None:
    interrupted = await backend.interrupt(model_call)
    # The first process answers and is held inside `wire`, before its effect.
    marker = tmp_path / "started"
    first = backend.start_resuming(interrupted.saved, interrupted.turn_id, {HANG_MARKER: str(marker)},
                                   approve=True, decided_by="alice")
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first process never reached the tool"
            time.sleep(0.02)
        second = backend.resume_elsewhere(interrupted.saved, interrupted.turn_id, [echo_last_result()],
                                          approve=True, decided_by="bob")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    assert second.get("error") == refusal and second["model_saw"] == [], second
    assert backend.wired() == [], "the second process ran nothing"
    assert "bob" not in [r.decided_by for r in await tether.read_audit_log(backend.audit, interrupted.turn_id)]


def two_calls_at_once(messages: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The model's reply: a script that wires 120, and a direct wire of 7, in one answer."""
    calls = [("call_s", "run_script", {"code": ONE_WIRE}), ("call_d", "wire", {"amount": 7})]
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
    ]}




async def test_calls_waiting_together_are_answered_each_its_own_way(backend: Backend) -> None:
    interrupted = await backend.interrupt(two_calls_at_once)
    assert sorted((w.call_id, w.tool, w.run_id is not None) for w in interrupted.waiting) == [
        ("call_d", "wire", False), ("call_s", "run_script", True)
    ]
    outcome = backend.resume_elsewhere(interrupted.saved, interrupted.turn_id, [echo_last_result()], answers=[
        {"call_id": "call_s", "approve": True, "decided_by": "alice"},
        {"call_id": "call_d", "approve": False, "decided_by": "bob", "reason": "one wire a day"},
    ])
    assert outcome["still"] == [], outcome
    # The model read both real outcomes: the script's result, and the direct call's denial.
    (sent,) = outcome["tool_results"]
    assert sent["call_s"]["value"]["result"] == {"wired": True, "value": {"sent": 120}, "error": None}, sent
    assert sent["call_d"]["ok"] is False and sent["call_d"]["error"]["code"] == tether.codes.APPROVAL_DENIED
    assert backend.wired() == ["wired 120"]
    direct, script = sorted(await backend.rows(interrupted.turn_id, "wire"), key=lambda row: row.call_id)
    assert (script.call_id, script.approval, script.decided_by) == ("call_s/1", "approved", "alice")
    assert (direct.call_id, direct.approval, direct.decided_by, direct.approval_reason) == (
        "call_d", "denied", "bob", "one wire a day"
    )


async def test_a_script_that_ran_beside_a_waiting_call_is_not_run_again_when_the_run_resumes(backend: Backend) -> None:
    def script_and_wire(messages: List[Dict[str, Any]]) -> Dict[str, Any]:
        calls = [("call_s", "run_script", {"code": 'note(text="hello")'}), ("call_d", "wire", {"amount": 7})]
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
        ]}

    interrupted = await backend.interrupt(script_and_wire)
    # The script needed no person: it ran, once; the run ended on the wire alone.
    assert [(w.call_id, w.tool) for w in interrupted.waiting] == [("call_d", "wire")]
    assert backend.wired() == ["noted hello"]
    outcome = backend.resume_elsewhere(interrupted.saved, interrupted.turn_id, [echo_last_result()], approve=True, decided_by="alice")
    (sent,) = outcome["tool_results"]
    assert sent["call_s"]["value"]["result"] == {"ok": True, "value": "noted", "error": None}, sent
    assert sent["call_d"] == {"ok": True, "value": {"sent": 7}, "error": None}
    assert backend.wired() == ["noted hello", "wired 7"], "the script did not run again"
    assert [r.call_id for r in await backend.rows(interrupted.turn_id, "note")] == ["call_s/1"]


async def test_a_direct_call_answered_after_the_approval_wait_limit_times_out_and_never_runs(backend: Backend) -> None:
    # The limit counts from when the call began waiting, across processes:
    # the process that answers it was not running then.
    wait = {"approval_timeout": 1.0}
    interrupted = await backend.interrupt(tool_call("call_d", "wire", {"amount": 7}), wait)
    (shown,) = interrupted.waiting[0].calls
    while time.time() < shown.since + 1.5:
        time.sleep(0.1)
    outcome = backend.resume_elsewhere(interrupted.saved, interrupted.turn_id, [echo_last_result()], wait,
                                       approve=True, decided_by="alice")
    (seen,) = outcome["model_saw"]
    assert seen["ok"] is False and seen["error"]["code"] == tether.codes.APPROVAL_TIMEOUT, outcome
    assert backend.wired() == [], "a yes after the limit runs nothing"
    (row,) = await backend.rows(interrupted.turn_id, "wire")
    assert (row.call_id, row.approval, row.code) == ("call_d", "timed_out", tether.codes.APPROVAL_TIMEOUT)
    assert await tether.pending(backend.audit) == []


async def test_a_direct_call_the_turn_refuses_ends_no_run_and_the_model_reads_the_refusal(backend: Backend) -> None:
    def refused_then_done(messages: List[Dict[str, Any]]) -> Dict[str, Any]:
        if any(m["role"] == "tool" for m in messages):
            return echo_last_result()(messages)
        return tool_call("call_d", "wire", {"amount": "everything"})(messages)

    # Its arguments fail the tool's schema: refused before its approval
    # step, so no person is asked about a call that could not run.
    with FakeOpenAI([refused_then_done, refused_then_done]) as fake:
        with pytest.raises(AssertionError, match="without"):
            await interrupt(backend.framework, fake.base_url, str(backend.effects), backend.audit)
    sent = last_tool_result(fake.requests[-1]["messages"])
    assert sent["ok"] is False and sent["error"]["code"] == tether.codes.INVALID_ARGUMENTS, sent
    assert backend.wired() == [] and await tether.pending(backend.audit) == []
