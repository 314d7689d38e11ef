"""Pydantic AI (PyPI ``pydantic-ai-slim``) on a Tether turn.

Pydantic AI's CodeMode runs Monty in-process, without a turn's checks;
this is the same idea — the model writes one script instead of many tool
calls — with every call the script makes checked, approved and audited by
the turn. The agent's own tools become the turn's tools and come back
routed through the turn, with ``run_script``, as one toolset::

    from pydantic_ai import Agent
    from tether.adapters.pydantic_ai import open_turn

    async with open_turn([get_contract, send_email], approver=approve,
                         tool_meta={"send_email": {"requires_approval": True}}) as turn_tools:
        agent = Agent(model, toolsets=[turn_tools.toolset])
        await agent.run("email the owners of ended contracts")

Approval is the turn's, for direct calls and a script's calls alike: a
tool's ``requires_approval=True`` becomes the turn's, and the ``approver``
given to :func:`open_turn` decides; the tools handed back to the agent
carry no approval flag of their own, so nothing is asked twice. A tool
function that raises ``ApprovalRequired`` itself is refused with a code
that says to mark the tool instead. A ``tool_meta`` key that names no tool
is a :class:`tether.ConfigError`.
"""

from __future__ import annotations

import dataclasses
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Mapping, Optional, Sequence, Union

try:
    from pydantic_ai import ApprovalRequired, FunctionToolset, RunContext, Tool
except ImportError as error:  # pragma: no cover - only without the framework
    raise ImportError(f"this adapter needs `pydantic-ai-slim[openai]`: pip install 'pydantic-ai-slim[openai]' ({error})") from error

from typing_extensions import Unpack

import tether

from ._common import check_tool_meta, with_framework_approval

#: The run context of the model's call a script runs under, for the
#: framework tools the script calls (tools run in the caller's context).
_CALLER: ContextVar[Optional[RunContext[Any]]] = ContextVar("tether_pydantic_ai_caller", default=None)


@dataclass
class TurnTools:
    """A turn and the toolset to give the agent: its own tools, routed
    through the turn, and ``run_script``."""

    turn: tether.Turn
    toolset: FunctionToolset[Any]


def as_turn_tool(tool: Union[Tool[Any], tether.Tool], **meta: Any) -> tether.Tool:
    """The Pydantic AI tool as a tool of the turn (its JSON Schema and
    description unchanged; its ``requires_approval`` carried over; ``meta``:
    :func:`tether.tool`'s options). A :class:`tether.Tool` is taken as it
    is, ``meta`` applied."""
    if isinstance(tool, tether.Tool):
        return tether.make_tool(tool, **meta)
    meta = with_framework_approval(tool.name, bool(tool.requires_approval), meta, "requires_approval")
    schema = tool.function_schema

    async def invoke(**args: Any) -> Any:
        caller = _CALLER.get()
        if caller is None:
            raise RuntimeError(f"`{tool.name}` was called outside a Pydantic AI run")
        context = dataclasses.replace(caller, tool_name=tool.name, tool_call_id=f"{caller.tool_call_id}/{tool.name}")
        try:
            return await schema.call(schema.validator.validate_python(args), context)
        except ApprovalRequired as error:
            raise tether.ToolError(
                "approval_required",
                f"`{tool.name}` asked for approval from inside its function, which a turn cannot answer:"
                " mark the tool `requires_approval=True` so the turn's approver decides",
            ) from error

    return tether.make_tool(
        invoke, name=tool.name, description=tool.description or "", schema=schema.json_schema, **meta
    )


def _routed(turn: tether.Turn, name: str, description: str, schema: Mapping[str, Any]) -> Tool[Any]:
    async def call(ctx: RunContext[Any], **args: Any) -> Any:
        token = _CALLER.set(ctx)
        try:
            result = await turn.execute(ctx.tool_call_id or turn.next_call_id(), name, args)
        finally:
            _CALLER.reset(token)
        return result.model_value

    return Tool.from_schema(call, name=name, description=description, json_schema=dict(schema), takes_ctx=True)


def _framework_tool(tool: Union[Tool[Any], tether.Tool, Callable[..., Any]]) -> Union[Tool[Any], tether.Tool]:
    if isinstance(tool, (Tool, tether.Tool)):
        return tool
    return Tool(tool)


def _schema_of(tool: Union[Tool[Any], tether.Tool]) -> Mapping[str, Any]:
    return tool.input_schema if isinstance(tool, tether.Tool) else tool.function_schema.json_schema


@asynccontextmanager
async def open_turn(
    tools: Sequence[Union[Tool[Any], tether.Tool, Callable[..., Any]]] = (),
    *,
    tool_meta: Mapping[str, Mapping[str, Any]] = {},
    **turn_options: Unpack[tether.TurnOptions],
) -> AsyncIterator[TurnTools]:
    """Opens a :class:`tether.Turn` over the agent's ``tools`` (``Tool``,
    :class:`tether.Tool`, or plain functions, made tools by Pydantic AI);
    ``tool_meta`` gives a tool's turn metadata by name (a key naming no tool
    is a :class:`tether.ConfigError`); ``turn_options`` go to
    :meth:`tether.Turn.open`."""
    framework = [_framework_tool(t) for t in tools]
    check_tool_meta(tool_meta, [t.name for t in framework])
    turn_tools = [as_turn_tool(t, **tool_meta.get(t.name, {})) for t in framework]
    async with tether.Turn.open(turn_tools, **turn_options) as turn:
        routed = [_routed(turn, t.name, t.description or "", _schema_of(t)) for t in framework]
        if turn_options.get("sidecar", tether.EMBEDDED) is not None:
            script = turn.run_script_tool()
            routed.append(_routed(turn, script.name, script.description, script.parameters))
        yield TurnTools(turn, FunctionToolset(routed))
