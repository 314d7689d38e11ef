"""`run_script` for the model: its description ends with the typed stubs of
the tools a script may call, and calling it runs the script through the turn."""

from __future__ import annotations

import functools
from typing import Dict, List, Optional, TypedDict

import pydantic
import pytest
from typing_extensions import TypedDict as ExtTypedDict

import tether
from world import DEMO_INPUT, World, demo_script, expected


class Line(ExtTypedDict):
    sku: str
    qty: int


class Address(pydantic.BaseModel):
    city: str
    zip: Optional[str] = None


class Row(TypedDict):  # `typing`'s, which pydantic refuses on Python < 3.12
    id: str


async def test_the_script_tool_carries_the_typed_stubs_and_runs_scripts() -> None:
    world = World()
    async with tether.Turn.open(world.tools(), approver=lambda r: True) as turn:
        script_tool = turn.run_script_tool()
        result = await script_tool(demo_script(), DEMO_INPUT)
        stubs = turn.script_stubs()
    assert script_tool.name == "run_script"
    assert script_tool.parameters["required"] == ["code"]
    assert "def get_contract(*, customer_id: str) -> Result:" in script_tool.description
    assert "def send_email(*, body: str, subject: str, to: str) -> Result:" in stubs
    assert stubs in script_tool.description
    assert result.call_id == "py_1" and result.value["result"]["emailed"] == expected()["emailed"]


async def test_a_turn_without_a_sidecar_has_no_run_script() -> None:
    async with tether.Turn.open([], sidecar=None) as turn:
        assert turn.tools_for_model() == []
        with pytest.raises(tether.ConfigError, match="no `run_script`"):
            turn.run_script_tool()


async def test_every_stub_names_something_the_script_can_call() -> None:
    # A name the providers accept but Python cannot carry: the stubs show the
    # call it takes, and that call works; no function the script lacks is shown.
    sent = []
    send = tether.make_tool(lambda to: sent.append(to) or {"sent": to}, name="send-mail", schema={
        "type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]})
    async with tether.Turn.open([send]) as turn:
        stubs = turn.script_stubs()
        result = await turn.run_script_tool()('call("send-mail", {"to": "dana@example.com"})')
    assert 'call("send-mail", {"to": str}) -> Result' in stubs
    assert "def _tool" not in stubs and "def send" not in stubs
    assert result.value["result"]["ok"] is True and sent == ["dana@example.com"]


@pytest.mark.parametrize("name", ["send mail!", "<lambda>", "", "x" * 65, "naïve"])
def test_names_the_model_providers_reject_are_refused_when_the_tool_is_made(name: str) -> None:
    with pytest.raises(tether.ConfigError, match="not one the model providers accept"):
        tether.make_tool(lambda: None, name=name)


def test_a_lambda_without_a_name_is_refused() -> None:
    with pytest.raises(tether.ConfigError, match="a lambda has no name"):
        tether.make_tool(lambda x: x)


async def test_nested_types_survive_into_the_stubs() -> None:
    @tether.tool
    def order(labels: Dict[str, str], lines: List[Line], to: Address) -> List[Line]:
        """Place an order."""
        return lines

    async with tether.Turn.open([order]) as turn:
        stubs = turn.script_stubs()
    assert "def order(*, labels: dict[str, str], lines: list[dict[str, Any]], to: dict[str, Any]) -> Result:" in stubs
    assert 'lines: shape list[{"qty": int, "sku": str}]' in stubs
    assert 'to: shape {"city": str, "zip": str | None}' in stubs
    assert 'Value (result["value"] when ok): list[{"qty": int, "sku": str}]' in stubs


def test_a_typing_typed_dict_return_on_python_3_11_does_not_break_the_tool() -> None:
    @tether.tool
    def rows() -> List[Row]:
        """Rows."""
        return []

    assert rows.name == "rows" and rows() == []


def test_a_partial_is_a_tool_named_after_its_function() -> None:
    def greet(greeting: str, name: str) -> str:
        """Greets someone."""
        return f"{greeting}, {name}"

    tool = tether.make_tool(functools.partial(greet, "hello"))
    assert tool.name == "greet" and tool.description == "Greets someone."
    assert tool.input_schema["required"] == ["name"] and "greeting" not in tool.input_schema["properties"]


async def test_offer_chooses_what_the_model_is_offered_and_a_script_sees_every_tool() -> None:
    def lookup(q: str) -> str:
        """Looks a word up."""
        return q.upper()

    def names(turn: tether.Turn) -> List[str]:
        return [t["name"] for t in turn.tools_for_model()]

    async with tether.Turn.open([lookup]) as turn:
        assert names(turn) == ["lookup", "run_script"], "every tool, by default"
    async with tether.Turn.open([lookup], offer="script") as turn:
        assert names(turn) == ["run_script"], "the tools are paid for once, as stubs"
        assert "def lookup(" in turn.tools_for_model()[0]["description"]
        ran = await turn.run_script_tool()('unwrap(lookup(q="tether"))')
        assert ran.value["result"] == "TETHER", "a script calls every tool"
    async with tether.Turn.open([lookup], offer="search") as turn:
        assert names(turn) == ["run_script", "search_tools", "describe_tools"]
        assert "def lookup(" not in turn.tools_for_model()[0]["description"], "named, its stub read on demand"
        described = await turn.execute("m2", "describe_tools", {"names": ["lookup"]})
        assert described.ok and "def lookup(" in str(described.value), described
    with pytest.raises(tether.ConfigError, match="`offer` is `all`; give `every`"):
        async with tether.Turn.open([lookup], offer="all"):  # type: ignore[arg-type]
            pass
