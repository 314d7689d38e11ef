"""`run_script` for the model: its description ends with the typed stubs of
the tools a script may call, and calling it runs the script through the turn."""

from __future__ import annotations

import pytest

import tether
from world import DEMO_INPUT, World, demo_script, expected


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
