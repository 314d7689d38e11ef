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

Approval is the turn's, for direct calls and a script's calls alike: a
tool's ``needs_approval`` (``True``, or the callable form, asked call by
call) becomes the turn's ``requires_approval``, and the ``approver`` given
to :func:`open_turn` decides; the tools handed back to the agent carry no
``needs_approval`` of their own, so nothing is asked twice. A ``tool_meta``
key that names no tool is a :class:`tether.ConfigError`.

A tool's exceptions reach the turn: a :class:`tether.ToolError` as the
tool's own code, anything else as ``tool_failed`` — the SDK's default
``failure_error_function`` (which would turn them into an ``ok`` text) is
set aside; one the tool was given explicitly is kept.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, List, Mapping, Optional, Sequence, Union

try:
    from agents import FunctionTool, Tool, function_tool
    from agents.tool_context import ToolContext
except ImportError as error:  # pragma: no cover - only without the framework
    raise ImportError(f"this adapter needs `openai-agents`: pip install openai-agents ({error})") from error

from typing_extensions import Unpack

import tether
from tether._tools import ApprovalPredicate

from ._common import check_tool_meta, with_framework_approval

#: The Agents SDK context of the model's call a script runs under, for the
#: framework tools the script calls (tools run in the caller's context).
_CALLER: ContextVar[Optional[ToolContext[Any]]] = ContextVar("tether_openai_agents_caller", default=None)


@dataclass
class TurnTools:
    """A turn and the tools to give the agent: its own, routed through the
    turn, and ``run_script``."""

    turn: tether.Turn
    #: Typed as the SDK's ``Tool`` list, so ``Agent(tools=turn_tools.tools)`` type-checks.
    tools: List[Tool]


def as_turn_tool(tool: Union[FunctionTool, tether.Tool], **meta: Any) -> tether.Tool:
    """The Agents SDK tool as a tool of the turn (schema and description
    unchanged; its ``needs_approval`` carried onto ``requires_approval``;
    ``meta``: :func:`tether.tool`'s options). A :class:`tether.Tool` is
    taken as it is, ``meta`` applied."""
    if isinstance(tool, tether.Tool):
        return tether.make_tool(tool, **meta)
    meta = with_framework_approval(tool.name, _approval_of(tool), meta, "needs_approval")
    raising = _raising(tool)

    async def invoke(**args: Any) -> Any:
        caller = _CALLER.get()
        if caller is None:
            raise RuntimeError(f"`{tool.name}` was called outside an Agents SDK run")
        arguments = json.dumps(args)
        context = ToolContext.from_agent_context(
            caller, tool_call_id=f"{caller.tool_call_id}/{tool.name}", tool_name=tool.name, tool_arguments=arguments
        )
        return await raising.on_invoke_tool(context, arguments)

    return tether.make_tool(invoke, name=tool.name, description=tool.description, schema=tool.params_json_schema, **meta)


def _approval_of(tool: FunctionTool) -> Union[bool, ApprovalPredicate]:
    """The tool's ``needs_approval`` as the turn's ``requires_approval``: the
    callable form is asked call by call with the model's run context, the
    arguments and the call id (outside an SDK run: approval needed)."""
    flag = tool.needs_approval
    if isinstance(flag, bool):
        return flag
    if not callable(flag):
        raise tether.ConfigError(f"tool `{tool.name}`: `needs_approval` is `{flag!r}`, neither a bool nor callable")

    async def needs_approval(request: tether.ApprovalRequest) -> bool:
        caller = _CALLER.get()
        if caller is None:
            return True
        # Typed as awaitable; a plain `def` returning a bool is taken too.
        answer: Any = flag(caller, request.args if isinstance(request.args, dict) else {}, request.call_id)
        if inspect.isawaitable(answer):
            answer = await answer
        return bool(answer)

    return needs_approval


def _raising(tool: FunctionTool) -> FunctionTool:
    """``tool`` with the SDK's default failure formatter set aside, so its
    exceptions reach the turn (a formatter given explicitly is kept)."""
    if getattr(tool, "_use_default_failure_error_function", False):
        return dataclasses.replace(tool, _use_default_failure_error_function=False, _failure_error_function=None)
    return tool


def _on_invoke(turn: tether.Turn, name: str) -> Callable[[ToolContext[Any], str], Any]:
    async def on_invoke(context: ToolContext[Any], arguments: str) -> str:
        token = _CALLER.set(context)
        try:
            result = await turn.execute(context.tool_call_id, name, json.loads(arguments or "{}"))
        finally:
            _CALLER.reset(token)
        return json.dumps(result.model_value)

    return on_invoke


def _routed(turn: tether.Turn, name: str, description: str, schema: Mapping[str, Any], strict: bool) -> FunctionTool:
    return FunctionTool(
        name=name, description=description, params_json_schema=dict(schema), on_invoke_tool=_on_invoke(turn, name),
        strict_json_schema=strict,
    )


def _routed_framework(turn: tether.Turn, tool: FunctionTool) -> FunctionTool:
    """The agent's own tool, routed through the turn: its SDK settings kept
    (guardrails, ``is_enabled``, timeout), its approval now the turn's."""
    return dataclasses.replace(tool, on_invoke_tool=_on_invoke(turn, tool.name), needs_approval=False)


def _framework_tool(tool: Union[FunctionTool, tether.Tool, Callable[..., Any]]) -> Union[FunctionTool, tether.Tool]:
    if isinstance(tool, (FunctionTool, tether.Tool)):
        return tool
    return function_tool(tool, failure_error_function=None)


@asynccontextmanager
async def open_turn(
    tools: Sequence[Union[FunctionTool, tether.Tool, Callable[..., Any]]] = (),
    *,
    tool_meta: Mapping[str, Mapping[str, Any]] = {},
    **turn_options: Unpack[tether.TurnOptions],
) -> AsyncIterator[TurnTools]:
    """Opens a :class:`tether.Turn` over the agent's ``tools`` (``FunctionTool``,
    :class:`tether.Tool`, or plain functions, made tools with
    ``function_tool``); ``tool_meta`` gives a tool's turn metadata by name
    (``{"send_email": {"requires_approval": True}}``; a key naming no tool
    is a :class:`tether.ConfigError`); ``turn_options`` go to
    :meth:`tether.Turn.open`."""
    framework = [_framework_tool(t) for t in tools]
    check_tool_meta(tool_meta, [t.name for t in framework])
    turn_tools = [as_turn_tool(t, **tool_meta.get(t.name, {})) for t in framework]
    async with tether.Turn.open(turn_tools, **turn_options) as turn:
        routed: List[Tool] = [
            _routed_framework(turn, t) if isinstance(t, FunctionTool)
            else _routed(turn, t.name, t.description, t.input_schema, strict=False)
            for t in framework
        ]
        if turn_options.get("sidecar", tether.EMBEDDED) is not None:
            script = turn.run_script_tool()
            # `input` takes any JSON value: not expressible in strict mode.
            routed.append(_routed(turn, script.name, script.description, script.parameters, strict=False))
        yield TurnTools(turn, routed)
