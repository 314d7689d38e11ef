"""A framework tool's own approval flag is never dropped on its way into a
turn (issue 26, item 1): each case runs a real agent of the framework
against the fake chat-completions server, whose model wires money directly
and from a script. With an approver that denies everything the wire never
happens; with one that approves everything it does (so the denial is the
approval step's, not some other failure's). A closed turn runs nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import pytest

import tether
from fake_openai import FakeOpenAI, final_text, last_tool_result, tool_call

WIRE_SCRIPT = 'r = wire(amount=1000000)\nr'

DENY_ALL: Callable[[tether.ApprovalRequest], bool] = lambda request: False
APPROVE_ALL: Callable[[tether.ApprovalRequest], bool] = lambda request: True


@dataclass
class Bank:
    """The effect under test: every wire that ran."""

    wired: List[int] = field(default_factory=list)

    def wire(self, amount: int) -> Dict[str, Any]:
        """Wire money out (has effects)."""
        self.wired.append(amount)
        return {"wired": amount}


def replies(direct_amount: int = 999999) -> List[Any]:
    """The model wires once from a script, once directly (another amount: an
    identical repeat would be refused as such), then answers."""
    return [
        tool_call("call_script", "run_script", {"code": WIRE_SCRIPT}),
        tool_call("call_direct", "wire", {"amount": direct_amount}),
        final_text(lambda messages: json.dumps(last_tool_result(messages))),
    ]


@dataclass
class Outcome:
    script: Any
    direct: Any
    rows: List[tether.AuditRow]


async def run_agents_sdk(tools: List[Any], approver: Any, tool_meta: Optional[Dict[str, Any]] = None,
                         direct_amount: int = 999999) -> Outcome:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI
    from tether.adapters.openai_agents import open_turn

    set_tracing_disabled(True)
    fake = FakeOpenAI(replies(direct_amount))
    with fake:
        async with open_turn(tools, approver=approver, tool_meta=tool_meta or {}) as turn_tools:
            agent = Agent(name="bank", tools=turn_tools.tools, model=OpenAIChatCompletionsModel(
                model="fake", openai_client=AsyncOpenAI(base_url=fake.base_url, api_key="k")))
            await Runner.run(agent, "wire a million")
            rows = await turn_tools.turn.audit_log()
    return Outcome(last_tool_result(fake.requests[1]["messages"]), last_tool_result(fake.requests[2]["messages"]), rows)


async def run_pydantic_ai(tools: List[Any], approver: Any, tool_meta: Optional[Dict[str, Any]] = None) -> Outcome:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from tether.adapters.pydantic_ai import open_turn

    fake = FakeOpenAI(replies())
    with fake:
        async with open_turn(tools, approver=approver, tool_meta=tool_meta or {}) as turn_tools:
            model = OpenAIChatModel("fake", provider=OpenAIProvider(base_url=fake.base_url, api_key="k"))
            await Agent(model, toolsets=[turn_tools.toolset]).run("wire a million")
            rows = await turn_tools.turn.audit_log()
    return Outcome(last_tool_result(fake.requests[1]["messages"]), last_tool_result(fake.requests[2]["messages"]), rows)


def wire_rows(outcome: Outcome) -> List[tether.AuditRow]:
    return [r for r in outcome.rows if r.tool == "wire"]


def assert_denied_both_ways(outcome: Outcome, bank: Bank) -> None:
    assert bank.wired == []
    assert outcome.script["value"]["result"]["error"]["code"] == "approval_denied"
    assert outcome.direct["error"]["code"] == "approval_denied"
    assert [(r.origin, r.step, r.code) for r in wire_rows(outcome)] == [
        ("script", "approval", "approval_denied"), ("model", "approval", "approval_denied"),
    ]


def agents_wire(bank: Bank, needs_approval: Any) -> Any:
    from agents import function_tool

    @function_tool(needs_approval=needs_approval)
    def wire(amount: int) -> Dict[str, Any]:
        """Wire money out (has effects)."""
        return bank.wire(amount)

    return wire


@pytest.mark.parametrize("approver, wired", [(DENY_ALL, []), (APPROVE_ALL, [1000000, 999999])])
async def test_agents_sdk_needs_approval_true_is_the_turns_approval(approver: Any, wired: List[int]) -> None:
    bank = Bank()
    outcome = await run_agents_sdk([agents_wire(bank, True)], approver)
    assert bank.wired == wired
    if not wired:
        assert_denied_both_ways(outcome, bank)


async def test_agents_sdk_callable_needs_approval_is_asked_call_by_call() -> None:
    bank = Bank()
    asked: List[Any] = []

    async def large(context: Any, params: Dict[str, Any], call_id: str) -> bool:
        asked.append((type(context).__name__, params, call_id))
        return bool(params["amount"] > 1000)

    # The script's wire of a million is asked and denied; the direct wire of 10 needs no approval.
    outcome = await run_agents_sdk([agents_wire(bank, large)], DENY_ALL, direct_amount=10)
    assert bank.wired == [10]
    assert outcome.script["value"]["result"]["error"]["code"] == "approval_denied"
    assert outcome.direct["ok"] is True
    assert [(p, c) for _, p, c in asked] == [({"amount": 1000000}, "call_script/1"), ({"amount": 10}, "call_direct")]
    assert all(kind == "ToolContext" for kind, _, _ in asked)
    waived = [r for r in wire_rows(outcome) if r.origin == "model"]
    assert (waived[0].approval, waived[0].decided_by) == ("approved", "tool-policy")


async def test_agents_sdk_callable_needs_approval_that_raises_denies() -> None:
    bank = Bank()

    async def broken(context: Any, params: Dict[str, Any], call_id: str) -> bool:
        raise RuntimeError("policy service down")

    outcome = await run_agents_sdk([agents_wire(bank, broken)], APPROVE_ALL)
    assert_denied_both_ways(outcome, bank)


@pytest.mark.parametrize("approver, wired", [(DENY_ALL, []), (APPROVE_ALL, [1000000, 999999])])
async def test_pydantic_ai_requires_approval_is_the_turns_approval(approver: Any, wired: List[int]) -> None:
    from pydantic_ai import Tool

    bank = Bank()

    def wire(amount: int) -> Dict[str, Any]:
        """Wire money out (has effects)."""
        return bank.wire(amount)

    outcome = await run_pydantic_ai([Tool(wire, requires_approval=True)], approver)
    assert bank.wired == wired
    if not wired:
        assert_denied_both_ways(outcome, bank)


async def test_pydantic_ai_approval_required_raised_inside_the_tool_is_refused_with_a_code() -> None:
    from pydantic_ai import ApprovalRequired, Tool

    bank = Bank()

    def wire(amount: int) -> Dict[str, Any]:
        """Wire money out (has effects)."""
        raise ApprovalRequired()

    outcome = await run_pydantic_ai([Tool(wire)], APPROVE_ALL)
    assert bank.wired == []
    assert outcome.direct["error"]["code"] == "approval_required"
    assert "requires_approval=True" in outcome.direct["error"]["message"]


@pytest.mark.parametrize("framework", ["openai_agents", "pydantic_ai"])
async def test_a_tool_meta_key_that_names_no_tool_is_a_config_error(framework: str) -> None:
    import importlib

    adapter = importlib.import_module(f"tether.adapters.{framework}")
    bank = Bank()

    def send_email(to: str) -> str:
        """Send an email."""
        return to

    with pytest.raises(tether.ConfigError, match="`send_mail`.*did you mean `send_email`"):
        async with adapter.open_turn([send_email, bank.wire], tool_meta={"send_mail": {"requires_approval": True}}):
            pass


@pytest.mark.parametrize("framework", ["openai_agents", "pydantic_ai"])
async def test_tool_meta_cannot_lift_a_frameworks_approval(framework: str) -> None:
    import importlib

    adapter = importlib.import_module(f"tether.adapters.{framework}")
    bank = Bank()
    if framework == "openai_agents":
        tool = agents_wire(bank, True)
    else:
        from pydantic_ai import Tool

        tool = Tool(bank.wire, name="wire", requires_approval=True)
    with pytest.raises(tether.ConfigError, match="`wire` needs approval by its own"):
        async with adapter.open_turn([tool], tool_meta={"wire": {"requires_approval": False}}):
            pass


@pytest.mark.parametrize("approver, wired", [(DENY_ALL, []), (APPROVE_ALL, [1000000, 999999])])
@pytest.mark.parametrize("framework", ["openai_agents", "pydantic_ai"])
async def test_the_adapters_take_tether_tools_with_their_approval(framework: str, approver: Any, wired: List[int]) -> None:
    bank = Bank()
    wire = tether.make_tool(bank.wire, name="wire", requires_approval=True)
    run = run_agents_sdk if framework == "openai_agents" else run_pydantic_ai
    outcome = await run([wire], approver)
    assert bank.wired == wired
    if not wired:
        assert_denied_both_ways(outcome, bank)


async def test_make_tool_over_a_tool_applies_its_overrides_and_keeps_the_original() -> None:
    bank = Bank()
    original = tether.make_tool(bank.wire, name="wire")
    stricter = tether.make_tool(original, requires_approval=True, name="wire_v2")
    assert (stricter.name, stricter.requires_approval) == ("wire_v2", True)
    assert (original.name, original.requires_approval) == ("wire", False)
    async with tether.Turn.open([stricter], approver=DENY_ALL) as turn:
        result = await turn.execute("c1", "wire_v2", {"amount": 1000000})
    assert result.error is not None and result.error.code == "approval_denied"
    assert bank.wired == []
    with pytest.raises(tether.ConfigError, match="`requires_aproval` is not an option of a tool; did you mean `requires_approval`"):
        tether.make_tool(original, requires_aproval=True)


async def test_a_predicate_decides_which_calls_need_approval() -> None:
    bank = Bank()
    wire = tether.make_tool(bank.wire, name="wire", requires_approval=lambda request: request.args["amount"] > 1000)
    async with tether.Turn.open([wire], approver=DENY_ALL) as turn:
        small = await turn.execute("c1", "wire", {"amount": 10})
        large = await turn.execute("c2", "wire", {"amount": 1000000})
    assert small.ok and small.approval is not None
    assert (small.approval["verdict"], small.approval["decided_by"]) == ("approved", "tool-policy")
    assert large.error is not None and large.error.code == "approval_denied"
    assert bank.wired == [10]


async def test_without_an_approver_the_refusal_says_none_is_configured() -> None:
    bank = Bank()
    async with tether.Turn.open([tether.make_tool(bank.wire, name="wire", requires_approval=True)]) as turn:
        result = await turn.execute("c1", "wire", {"amount": 5})
    assert result.error is not None and result.error.code == "approval_denied"
    assert "no approver is configured" in result.error.message
    assert bank.wired == []


async def test_a_closed_turn_runs_nothing_and_writes_no_row() -> None:
    bank = Bank()
    async with tether.Turn.open([tether.make_tool(bank.wire, name="wire")], audit="memory:") as turn:
        first = await turn.execute("c1", "wire", {"amount": 1})
    assert first.ok
    with pytest.raises(tether.TurnClosed, match="is closed"):
        await turn.execute("c2", "wire", {"amount": 2})
    with pytest.raises(tether.TurnClosed):
        await turn.run_script_tool()("wire(amount=3)")
    with pytest.raises(tether.TurnClosed):
        await turn.execute_or_park("c4", "wire", {"amount": 4})
    assert bank.wired == [1]
    assert [r.call_id for r in await turn.audit_log()] == ["c1"]


async def test_a_failure_function_given_to_the_tool_explicitly_is_kept() -> None:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI
    from tether.adapters.openai_agents import open_turn

    def politely(context: Any, error: Exception) -> str:
        return f"sorry: {error}"

    @function_tool(failure_error_function=politely)  # the application's own choice: an `ok` text
    def lookup(customer_id: str) -> Dict[str, Any]:
        """Look a customer up."""
        raise RuntimeError(f"no customer {customer_id}")

    set_tracing_disabled(True)
    fake = FakeOpenAI([
        tool_call("call_direct", "lookup", {"customer_id": "c9"}),
        final_text(lambda messages: json.dumps(last_tool_result(messages))),
    ])
    with fake:
        async with open_turn([lookup], tool_meta={"lookup": {"read_only": True}}) as turn_tools:
            agent = Agent(name="crm", tools=turn_tools.tools, model=OpenAIChatCompletionsModel(
                model="fake", openai_client=AsyncOpenAI(base_url=fake.base_url, api_key="k")))
            await Runner.run(agent, "look up c9")
            rows = await turn_tools.turn.audit_log()
    direct = last_tool_result(fake.requests[1]["messages"])
    assert direct == {"ok": True, "value": "sorry: no customer c9", "error": None}, direct
    assert [(r.tool, r.status) for r in rows] == [("lookup", "ok")]


async def test_a_tool_error_reaches_the_turn_through_the_sdks_default_failure_function() -> None:
    from agents import function_tool

    @function_tool  # the SDK's default failure_error_function would make this an `ok` text
    def lookup(customer_id: str) -> Dict[str, Any]:
        """Look a customer up."""
        raise tether.ToolError("not_found", f"no customer `{customer_id}`")

    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI
    from tether.adapters.openai_agents import open_turn

    set_tracing_disabled(True)
    fake = FakeOpenAI([
        tool_call("call_direct", "lookup", {"customer_id": "c9"}),
        final_text(lambda messages: json.dumps(last_tool_result(messages))),
    ])
    with fake:
        async with open_turn([lookup], tool_meta={"lookup": {"read_only": True}}) as turn_tools:
            agent = Agent(name="crm", tools=turn_tools.tools, model=OpenAIChatCompletionsModel(
                model="fake", openai_client=AsyncOpenAI(base_url=fake.base_url, api_key="k")))
            await Runner.run(agent, "look up c9")
            rows = await turn_tools.turn.audit_log()
    direct = last_tool_result(fake.requests[1]["messages"])
    assert direct["ok"] is False and direct["error"] == {"code": "not_found", "message": "no customer `c9`"}
    assert [(r.tool, r.status, r.code) for r in rows] == [("lookup", "error", "not_found")]
