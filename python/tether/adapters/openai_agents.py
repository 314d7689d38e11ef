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

Approvals that wait (``approver=tether.LATER``) end the run with the SDK's
interruptions, so a web backend can end the request and resume hours later
in any process::

    result = await Runner.run(agent, "wire the supplier")
    if result.interruptions:        # keep result.to_state().to_string() and turn_tools.turn.id
        for waiting in await turn_tools.pending(result.interruptions): ...   # show them

    # later, anywhere, in a turn opened the same way:
    state = await RunState.from_string(agent, saved)
    still = await turn_tools.answer(state, turn_id=turn_id, approve=True, decided_by="alice")
    if not still:                   # else the script waits again: show `still`, keep the state
        result = await Runner.run(agent, state)

**Decided: how a parked run becomes an interruption.** The SDK (0.24)
interrupts a run only before a tool runs, from the tool's
``needs_approval``; a tool cannot interrupt from inside. So, with
``tether.LATER``, ``run_script``'s ``needs_approval`` is the script's run
itself: it runs the script through the turn, and says "needs approval"
exactly when the run parked (the parked run is in the store, nothing of it
in this process); otherwise the result is kept for ``on_invoke_tool``,
which only hands it over. A tool whose call may need approval gets the
same gate: the call goes through the turn's checks, and when it comes to
wait for a person the turn stores it (:meth:`tether.Turn.execute_or_park`)
and the SDK interrupts. :meth:`TurnTools.answer` then carries out the
person's answer at once — a parked run's calls answered (audited with
``decided_by``) and the script resumed to its end, a direct call run or
denied, its row in the turn it was made in, a yes after
``approval_timeout`` (counted from when it began waiting) a time-out —
and approves the interruption (a denied
direct call is rejected, with the turn's denial as the text the model
reads), so ``Runner.run(agent, state)``, in the same process, gives the
model the real result. A script that waits again stays an interruption.
A second answer to the same state runs nothing (:class:`tether.NotWaiting`).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Dict, List, Mapping, Optional, Sequence, Union

try:
    from agents import FunctionTool, RunContextWrapper, RunState, Tool, ToolApprovalItem, function_tool
    from agents.tool_context import ToolContext
except ImportError as error:  # pragma: no cover - only without the framework
    raise ImportError(f"this adapter needs `openai-agents`: pip install openai-agents ({error})") from error

from typing_extensions import Unpack

import tether
from tether._tools import ApprovalPredicate

from ._common import Answer, Answering, Waiting, check_tool_meta, is_parked, with_framework_approval

__all__ = ["TurnTools", "Waiting", "as_turn_tool", "open_turn"]

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
    _later: Optional["_Later"] = field(default=None, repr=False)

    def _answering(self) -> "_Later":
        if self._later is None:
            raise tether.ConfigError(
                "this turn was not opened with `approver=tether.LATER`: its calls that need approval are"
                " decided by its approver, and no run is interrupted on them"
            )
        return self._later

    async def pending(self, interruptions: Sequence[ToolApprovalItem], *, turn_id: Optional[str] = None) -> List[Waiting]:
        """What the person must see of the ``interruptions`` (``result.interruptions``,
        ``state.get_interruptions()``) that wait on Tether, in turn ``turn_id``
        (default: this turn — pass the id of the turn the run was
        interrupted in): for a script, the calls its parked run waits on,
        each with its tool and exact arguments; for a direct call, its tool
        and arguments. Other interruptions are not listed."""
        later = self._answering()
        turn_id = turn_id or self.turn.id
        return [await later.waiting(item, turn_id) for item in interruptions if later.ours(item)]

    async def answer(
        self,
        state: "RunState[Any, Any]",
        *,
        approve: bool,
        decided_by: str,
        reason: Optional[str] = None,
        call_id: Optional[str] = None,
        turn_id: Optional[str] = None,
    ) -> List[Waiting]:
        """Carries out a person's answer to the interruptions of ``state`` that
        wait on Tether (only the model's call ``call_id``, or every one), in
        turn ``turn_id`` (default: this turn — pass the id of the turn the
        run was interrupted in), and marks them in ``state`` so that
        ``Runner.run(agent, state)`` — in this process, with these tools —
        gives the model the real results.

        - A script: every call its parked run waits on is answered
          ``approve`` (yes or no), ``decided_by`` (the audit rows'), with
          ``reason`` (recorded; a denied script reads it), and the script
          resumes to its end; its interruption is approved, and the model
          reads the script's result.
        - A direct call: it runs, or is denied, through the one execution
          path, audited once with ``decided_by``; approved, the model reads
          its result; denied, the interruption is rejected with the turn's
          denial as the text the model reads.

        Returns the calls that still wait: a script that went on and waits
        again (its interruption stays; show these, keep the state, answer
        again). Raises :class:`tether.NotWaiting` when a call was answered
        already (nothing runs twice) or none waits."""
        given = Answer(approve, decided_by, reason)
        return await self._answering().answer(state, given, call_id, turn_id or self.turn.id)


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


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    value = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return str(value)


def _arguments(item: ToolApprovalItem) -> Dict[str, Any]:
    raw = item.raw_item
    text = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
    parsed = json.loads(text or "{}") if isinstance(text, str) else {}
    return parsed if isinstance(parsed, dict) else {}


class _Later:
    """A turn opened with ``tether.LATER``: ``run_script``'s approval gate
    (the script's run itself), the results waiting for ``on_invoke_tool``,
    and the person's answers carried out (:meth:`TurnTools.answer`)."""

    def __init__(self, turn: tether.Turn, answering: Answering) -> None:
        self.turn = turn
        self.answering = answering
        #: Results for `on_invoke_tool` to hand over, by the model's call id.
        self.results: Dict[str, tether.CallResult] = {}

    def ours(self, item: ToolApprovalItem) -> bool:
        name = item.name or ""
        return name == self.answering.script or self.answering.may_wait(name)

    async def waiting(self, item: ToolApprovalItem, turn_id: str) -> Waiting:
        name, call_id, args = item.name or "", _call_id(item), _arguments(item)
        if name == self.answering.script:
            return await self.answering.script_waiting(turn_id, call_id, args)
        return await self.answering.direct_waiting(turn_id, call_id, name, args)

    def gate(self, name: str) -> Callable[[RunContextWrapper[Any], Dict[str, Any], str], Any]:
        """The ``needs_approval`` of ``run_script`` and of a tool whose call
        may wait for a person: makes the call through the turn; True
        exactly when it parked (a script's run, or the call itself, stored
        for :meth:`TurnTools.answer`)."""

        async def needs_approval(context: RunContextWrapper[Any], params: Dict[str, Any], call_id: str) -> bool:
            caller = ToolContext.from_agent_context(
                context, tool_call_id=call_id, tool_name=name, tool_arguments=json.dumps(params)
            )
            token = _CALLER.set(caller)
            try:
                if name == self.answering.script:
                    result = await self.turn.execute(call_id, name, params)
                    if is_parked(result):
                        return True
                else:
                    outcome = await self.turn.execute_or_park(call_id, name, params)
                    if isinstance(outcome, tether.PendingCall):
                        return True
                    result = outcome
            finally:
                _CALLER.reset(token)
            self.results[call_id] = result
            return False

        return needs_approval

    def hand_over(self, name: str) -> Callable[[ToolContext[Any], str], Any]:
        """``on_invoke_tool`` of a call that may wait for a person: the result
        the gate or :meth:`TurnTools.answer` made; it runs nothing itself."""

        async def on_invoke(context: ToolContext[Any], arguments: str) -> str:
            result = self.results.pop(context.tool_call_id, None)
            if result is None:
                raise tether.ConfigError(
                    f"the call `{context.tool_call_id}` of `{name}` waits for a person's answer through Tether,"
                    " and was approved without it: answer it with `await turn_tools.answer(state, ...)` (which"
                    " runs it, audited with who decided), then `Runner.run(agent, state)` in the same process"
                )
            return json.dumps(result.model_value)

        return on_invoke

    async def answer(self, state: "RunState[Any, Any]", given: Answer, call_id: Optional[str], turn_id: str) -> List[Waiting]:
        items = [i for i in state.get_interruptions() if self.ours(i) and (call_id is None or _call_id(i) == call_id)]
        if not items:
            raise tether.NotWaiting(
                f"no interruption of this state waits on Tether{f' for call `{call_id}`' if call_id else ''}:"
                " `state.get_interruptions()` lists them"
            )
        # The tools a script calls run in the SDK run's context, as they would have.
        context: Any = getattr(state, "_context", None) or RunContextWrapper(context=None)
        still: List[Waiting] = []
        for item in items:
            waiting = await self.waiting(item, turn_id)
            caller = ToolContext.from_agent_context(
                context, tool_call_id=waiting.call_id, tool_name=waiting.tool, tool_arguments=json.dumps(waiting.args)
            )
            token = _CALLER.set(caller)
            try:
                if waiting.run_id is None:
                    result = await self.answering.answer_direct(waiting, given)
                    if not given.approve:
                        state.reject(item, rejection_message=json.dumps(result.model_value))
                        continue
                else:
                    done, calls = await self.answering.answer_script(waiting, given)
                    if done is None:
                        still.append(dataclasses.replace(waiting, calls=calls))
                        continue
                    result = done
            finally:
                _CALLER.reset(token)
            self.results[waiting.call_id] = result
            state.approve(item)
        return still


def _routed(
    turn: tether.Turn, name: str, description: str, schema: Mapping[str, Any], strict: bool,
    later: Optional[_Later] = None,
) -> FunctionTool:
    """A tool of the turn for the agent; with ``tether.LATER``, ``run_script``
    runs in its approval gate and a tool that needs approval interrupts."""
    if later is not None and name == later.answering.script:
        return FunctionTool(
            name=name, description=description, params_json_schema=dict(schema), on_invoke_tool=later.hand_over(name),
            strict_json_schema=strict, needs_approval=later.gate(name),
        )
    if later is not None and later.answering.may_wait(name):
        return FunctionTool(
            name=name, description=description, params_json_schema=dict(schema), on_invoke_tool=later.hand_over(name),
            strict_json_schema=strict, needs_approval=later.gate(name),
        )
    return FunctionTool(
        name=name, description=description, params_json_schema=dict(schema), on_invoke_tool=_on_invoke(turn, name),
        strict_json_schema=strict,
    )


def _routed_framework(turn: tether.Turn, tool: FunctionTool, later: Optional[_Later] = None) -> FunctionTool:
    """The agent's own tool, routed through the turn: its SDK settings kept
    (guardrails, ``is_enabled``, timeout), its approval now the turn's (with
    ``tether.LATER``, a call that comes to wait for a person interrupts the run)."""
    if later is not None and later.answering.may_wait(tool.name):
        return dataclasses.replace(tool, on_invoke_tool=later.hand_over(tool.name), needs_approval=later.gate(tool.name))
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
    :meth:`tether.Turn.open`. With ``approver=tether.LATER``, a call that
    waits for a person ends the run with the SDK's interruptions (see
    :meth:`TurnTools.answer`)."""
    framework = [_framework_tool(t) for t in tools]
    check_tool_meta(tool_meta, [t.name for t in framework])
    turn_tools = [as_turn_tool(t, **tool_meta.get(t.name, {})) for t in framework]
    async with tether.Turn.open(turn_tools, **turn_options) as turn:
        has_script = turn_options.get("sidecar", tether.EMBEDDED) is not None
        script = turn.run_script_tool() if has_script else None
        later = (
            _Later(turn, Answering(turn_tools, turn_options, script.name if script else None))
            if Answering.later(turn_options) else None
        )
        routed: List[Tool] = [
            _routed_framework(turn, t, later) if isinstance(t, FunctionTool)
            else _routed(turn, t.name, t.description, t.input_schema, strict=False, later=later)
            for t in framework
        ]
        if script is not None:
            # `input` takes any JSON value: not expressible in strict mode.
            routed.append(_routed(turn, script.name, script.description, script.parameters, strict=False, later=later))
        yield TurnTools(turn, routed, later)
