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

Approvals that wait (``approver=tether.LATER``) end the agent run with
Pydantic AI's deferred tool requests, so a web backend can end the request
and resume hours later in any process::

    agent = Agent(model, toolsets=[turn_tools.toolset], output_type=[str, DeferredToolRequests])
    result = await agent.run("wire the supplier")
    if isinstance(result.output, DeferredToolRequests):   # keep result.all_messages_json() and it
        for waiting in pending(result.output): ...        # show: each call's tool and exact arguments

    # later, anywhere, in a turn opened the same way:
    results = answer(requests, approve=True, decided_by="alice")
    result = await agent.run(message_history=messages, deferred_tool_results=results)

A script whose run parks, and a direct call of a tool that needs approval,
raise ``ApprovalRequired`` with the metadata :func:`pending` reads. The
answer is carried out when the agent resumes: the parked run's calls are
answered (audited with ``decided_by``) and the script resumed from its
line, and the model reads its real result; a direct call runs (or is
denied) through the one execution path, audited once. A run that parks
again ends the agent run again, on the same call, with the calls it waits
on now. Resumed twice with the same results, nothing runs twice: the second
resume raises :class:`tether.NotWaiting`.
"""

from __future__ import annotations

import dataclasses
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Dict, List, Mapping, Optional, Sequence, Union

try:
    from pydantic_ai import (
        ApprovalRequired,
        DeferredToolRequests,
        DeferredToolResults,
        FunctionToolset,
        RunContext,
        Tool,
        ToolApproved,
    )
except ImportError as error:  # pragma: no cover - only without the framework
    raise ImportError(f"this adapter needs `pydantic-ai-slim[openai]`: pip install 'pydantic-ai-slim[openai]' ({error})") from error

from typing_extensions import Unpack

import tether

from ._common import METADATA_KEY, Answer, Answering, Waiting, check_tool_meta, is_parked, with_framework_approval

__all__ = ["TurnTools", "Waiting", "answer", "as_turn_tool", "open_turn", "pending"]

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


def _routed(
    turn: tether.Turn, name: str, description: str, schema: Mapping[str, Any], later: Optional[Answering]
) -> Tool[Any]:
    async def call(ctx: RunContext[Any], **args: Any) -> Any:
        token = _CALLER.set(ctx)
        try:
            call_id = ctx.tool_call_id or turn.next_call_id()
            if later is not None:
                return await _call_later(later, turn, ctx, call_id, name, args)
            result = await turn.execute(call_id, name, args)
        finally:
            _CALLER.reset(token)
        return result.model_value

    return Tool.from_schema(call, name=name, description=description, json_schema=dict(schema), takes_ctx=True)


def _deferral(waiting: Waiting) -> ApprovalRequired:
    return ApprovalRequired(metadata={METADATA_KEY: waiting.to_json()})


async def _call_later(
    later: Answering, turn: tether.Turn, ctx: RunContext[Any], call_id: str, name: str, args: Dict[str, Any]
) -> Any:
    """A call of a turn opened with ``tether.LATER``: answered, when the
    agent resumes with :func:`answer`'s results; else run, and ended on
    (``ApprovalRequired``) when it waits for a person."""
    metadata = ctx.tool_call_metadata if ctx.tool_call_approved else None
    entry = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    if isinstance(entry, dict) and "answer" in entry:
        waiting, given = Waiting.from_json(entry), Answer.from_json(entry["answer"])
        if waiting.run_id is None:
            return (await later.answer_direct(waiting, given)).model_value
        result, still = await later.answer_script(waiting, given)
        if result is None:
            raise _deferral(dataclasses.replace(waiting, calls=still))
        return result.model_value
    if name == later.script:
        # Approved by the application without Tether's answer: a run of
        # this call that waits is never started again (its calls before
        # the wait would run twice), it is asked for again.
        waits = await later.parked_run(call_id) if ctx.tool_call_approved else None
        if waits is not None:
            raise _deferral(await later.script_waiting(waits.turn_id, call_id, args))
        result = await turn.execute(call_id, name, args)
        if is_parked(result):
            raise _deferral(await later.script_waiting(turn.id, call_id, args))
        return result.model_value
    if later.may_wait(name):
        if ctx.tool_call_approved:
            # Approved without Tether's answer: the turn it was stopped in
            # is not known here, and an answer keyed to another would let
            # it run twice. Nothing runs.
            raise tether.ConfigError(
                f"the call `{call_id}` of `{name}` waits for a person's answer through Tether, and was approved"
                " without it: resume with `tether.adapters.pydantic_ai.answer(requests, approve=..., decided_by=...)`"
                " for the requests the run ended with (it runs the call, audited with who decided)"
            )
        outcome = await turn.execute_or_park(call_id, name, args)
        if isinstance(outcome, tether.PendingCall):
            raise _deferral(Waiting(call_id, name, args, turn.id, None, [outcome]))
        return outcome.model_value
    return (await turn.execute(call_id, name, args)).model_value


def pending(requests: DeferredToolRequests) -> List[Waiting]:
    """What the person must see of the calls a Tether turn ended the agent
    run on: for each, the turn, and the parked script's calls (tool, exact
    arguments) or the direct call. Other deferred calls are not listed."""
    return [
        Waiting.from_json(requests.metadata[call.tool_call_id][METADATA_KEY])
        for call in requests.approvals
        if METADATA_KEY in requests.metadata.get(call.tool_call_id, {})
    ]


def answer(
    requests: DeferredToolRequests,
    *,
    approve: bool,
    decided_by: str,
    reason: Optional[str] = None,
    call_id: Optional[str] = None,
) -> DeferredToolResults:
    """The ``DeferredToolResults`` that resume the agent with a person's
    answer to the Tether calls in ``requests`` (only the model's call
    ``call_id``, or every one): ``approve`` yes or no, ``decided_by`` who
    (the audit rows'), ``reason`` (recorded; a denied script reads it).

    Nothing runs here: the answer is carried out when the agent resumes with
    these results (``agent.run(message_history=..., deferred_tool_results=...)``),
    in a turn opened with the same tools and store — for a script, each
    call its run waits on is answered so and the script resumed, and the
    model reads its real result; a direct call runs, or is denied, audited.
    The results hold no verdict of the framework's own: each call is
    ``ToolApproved`` with the answer in its metadata, so Tether decides.
    Pydantic AI resumes only with a result for every deferred call: answer
    calls differently with one ``answer(..., call_id=...)`` each, merged
    with ``DeferredToolResults.update``.
    Raises :class:`tether.NotWaiting` when no such call waits in ``requests``."""
    given = Answer(approve, decided_by, reason)
    results = DeferredToolResults()
    for waiting in pending(requests):
        if call_id is None or waiting.call_id == call_id:
            results.approvals[waiting.call_id] = ToolApproved()
            results.metadata[waiting.call_id] = {METADATA_KEY: {**waiting.to_json(), "answer": given.to_json()}}
    if not results.approvals:
        names = ", ".join(f"`{w.call_id}`" for w in pending(requests)) or "none"
        raise tether.NotWaiting(f"no Tether call `{call_id}` waits in these requests; those that do: {names}")
    return results


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
    :meth:`tether.Turn.open`. With ``approver=tether.LATER``, a call that
    waits for a person ends the agent run with deferred tool requests (see
    :func:`answer`)."""
    framework = [_framework_tool(t) for t in tools]
    check_tool_meta(tool_meta, [t.name for t in framework])
    turn_tools = [as_turn_tool(t, **tool_meta.get(t.name, {})) for t in framework]
    async with tether.Turn.open(turn_tools, **turn_options) as turn:
        has_script = turn_options.get("sidecar", tether.EMBEDDED) is not None
        script = turn.run_script_tool() if has_script else None
        later = (
            Answering(turn_tools, turn_options, script.name if script else None)
            if Answering.later(turn_options) else None
        )
        routed = [_routed(turn, t.name, t.description or "", _schema_of(t), later) for t in framework]
        if script is not None:
            routed.append(_routed(turn, script.name, script.description, script.parameters, later))
        yield TurnTools(turn, FunctionToolset(routed))
