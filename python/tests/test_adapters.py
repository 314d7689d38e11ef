"""The two adapters, each driven through its example by a fake
OpenAI-compatible chat-completions endpoint (real HTTP on loopback, tool
calls included): the model calls `run_script` and a tool directly; both go
through the turn, the framework's own tools run as the turn's tools."""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType
from typing import Any, Dict, List

import pytest

from conftest import REPO
from fake_openai import FakeOpenAI, final_text, last_tool_result, tool_call

SCRIPT = """
ended = []
for customer in unwrap(list_customers()):
    contract = unwrap(get_contract(customer_id=customer))
    if contract["end_date"] < "2026-11-30":
        sent = send_email(to=f"owner-{customer}@example.com", subject=f"contract {customer} ended")
        ended.append([customer, sent["ok"]])
refused = send_email(to="someone@elsewhere.org", subject="not to be sent")
{"ended": ended, "refused": refused["error"]["code"], "missing": get_contract(customer_id="c9")["error"]["code"]}
"""


def example(name: str) -> ModuleType:
    path = REPO / "python" / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["openai_agents_demo", "pydantic_ai_demo"])
async def test_the_adapter_runs_scripts_and_direct_calls_through_the_turn(name: str) -> None:
    demo = example(name)
    fake = FakeOpenAI([
        tool_call("call_script", "run_script", {"code": SCRIPT}),
        tool_call("call_direct", "get_contract", {"customer_id": "c2"}),
        final_text(lambda messages: json.dumps(last_tool_result(messages))),
    ])
    with fake:
        out: Dict[str, Any] = await demo.main(fake.base_url, "test-key", "fake-model")

    # The model saw its own tools and run_script, whose description carries the stubs.
    offered = {t["function"]["name"]: t["function"] for t in fake.requests[0]["tools"]}
    assert set(offered) == {"list_customers", "get_contract", "send_email", "run_script"}
    assert "def get_contract(*, customer_id: str) -> Result:" in offered["run_script"]["description"]

    # The script's result came back to the model as the tool's output.
    script_result = last_tool_result(fake.requests[1]["messages"])
    assert script_result["ok"] is True
    assert script_result["value"]["result"] == {
        "ended": [["c1", True], ["c3", True]], "refused": "approval_denied", "missing": "not_found",
    }
    # The direct call too, in the same shape; the answer is built from it.
    direct = last_tool_result(fake.requests[2]["messages"])
    assert direct == {"ok": True, "value": {"customer_id": "c2", "end_date": "2027-03-31"}, "error": None}
    assert json.loads(out["answer"]) == direct

    # Only the approved emails were sent, by the framework's own tool.
    assert out["outbox"] == [
        {"to": "owner-c1@example.com", "subject": "contract c1 ended"},
        {"to": "owner-c3@example.com", "subject": "contract c3 ended"},
    ]
    # One audit log: the script's calls and the model's, each once.
    rows: List[Any] = out["audit"]
    by_origin = {(r.call_id, r.tool, r.origin, r.status, r.code) for r in rows}
    assert ("call_script", "run_script", "model", "ok", None) in by_origin
    assert ("call_direct", "get_contract", "model", "ok", None) in by_origin
    script_rows = [r for r in rows if r.origin == "script"]
    assert [r.tool for r in script_rows].count("get_contract") == 4
    denied = [r for r in script_rows if r.code == "approval_denied"]
    assert len(denied) == 1 and denied[0].args["to"] == "someone@elsewhere.org"
