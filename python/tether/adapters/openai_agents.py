"""The OpenAI Agents SDK (PyPI ``openai-agents``) on a Tether turn.

The agent's own tools become the turn's tools, and the agent gets them back
routed through the turn — so a call the model makes and a call a script
makes go through the same checks, approval and audit — plus ``run_script``::

    from agents import Agent, Runner, function_tool
    from tether.adapters.openai_agents import open_turn

    async with open_turn([get_contract, send_email], approver=approve,
                         tool_meta={"send_email": {"requires_approval": True}}) as turn_tools:
        agent = Agent(name="ops", tools=turn_tools.tools, model=...)
        await Runner.run(agent, "email the owners of ended contracts")

A tool made with ``@function_tool`` turns its exceptions into a text for
the model by default; pass ``failure_error_function=None`` to have them
reach the turn as ``tool_failed`` instead.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, List, Mapping, Optional, Sequence, Union

try:
    from agents import FunctionTool, function_tool
    from agents.tool_context import ToolContext
except ImportError as error:  # pragma: no cover - only without the framework
    raise ImportError(f"this adapter needs `openai-agents`: pip install 'tether-agent[openai-agents]' ({error})") from error

import tether

#: The Agents SDK context of the model's call a script runs under, for the
#: framework tools the script calls (tools run in the caller's context).
_CALLER: ContextVar[Optional[ToolContext[Any]]] = ContextVar("tether_openai_agents_caller", default=None)


@dataclass
class TurnTools:
    """A turn and the tools to give the agent: its own, routed through the
    turn, and ``run_script``."""

    turn: tether.Turn
    tools: List[FunctionTool]


def as_turn_tool(tool: FunctionTool, **meta: Any) -> tether.Tool:
    """The Agents SDK tool as a tool of the turn (schema and description
    unchanged; ``meta``: :func:`tether.tool`'s options)."""

    async def invoke(**args: Any) -> Any:
        caller = _CALLER.get()
        if caller is None:
            raise RuntimeError(f"`{tool.name}` was called outside an Agents SDK run")
        arguments = json.dumps(args)
        context = ToolContext.from_agent_context(
            caller, tool_call_id=f"{caller.tool_call_id}/{tool.name}", tool_name=tool.name, tool_arguments=arguments
        )
        return await tool.on_invoke_tool(context, arguments)

    return tether.make_tool(invoke, name=tool.name, description=tool.description, schema=tool.params_json_schema, **meta)


def _routed(turn: tether.Turn, name: str, description: str, schema: Mapping[str, Any], strict: bool) -> FunctionTool:
    async def on_invoke(context: ToolContext[Any], arguments: str) -> str:
        token = _CALLER.set(context)
        try:
            result = await turn.execute(context.tool_call_id, name, json.loads(arguments or "{}"))
        finally:
            _CALLER.reset(token)
        return json.dumps(result.model_value)

    return FunctionTool(
        name=name, description=description, params_json_schema=dict(schema), on_invoke_tool=on_invoke,
        strict_json_schema=strict,
    )


@asynccontextmanager
async def open_turn(
    tools: Sequence[Union[FunctionTool, Callable[..., Any]]] = (),
    *,
    tool_meta: Mapping[str, Mapping[str, Any]] = {},
    **turn_options: Any,
) -> AsyncIterator[TurnTools]:
    """Opens a :class:`tether.Turn` over the agent's ``tools`` (``FunctionTool``
    or plain functions, made tools with ``function_tool``); ``tool_meta``
    gives a tool's turn metadata by name (``{"send_email":
    {"requires_approval": True}}``); ``turn_options`` go to
    :meth:`tether.Turn.open`."""
    framework = [t if isinstance(t, FunctionTool) else function_tool(t) for t in tools]
    turn_tools = [as_turn_tool(t, **tool_meta.get(t.name, {})) for t in framework]
    async with tether.Turn.open(turn_tools, **turn_options) as turn:
        routed = [_routed(turn, t.name, t.description, t.params_json_schema, t.strict_json_schema) for t in framework]
        if turn_options.get("sidecar", tether.EMBEDDED) is not None:
            script = turn.run_script_tool()
            # `input` takes any JSON value: not expressible in strict mode.
            routed.append(_routed(turn, script.name, script.description, script.parameters, strict=False))
        yield TurnTools(turn, routed)
