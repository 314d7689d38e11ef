"""What both adapters do alike: check ``tool_meta`` against the tools it
names, carry a framework's own approval flag onto the turn's approval
step, so no framework tool ever loses its approval on the way in, and, with
``approver=tether.LATER``, carry out a person's answer to a call the agent
run ended on (:class:`Answering`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import tether
from tether._tools import ApprovalPredicate, did_you_mean


def check_tool_meta(tool_meta: Mapping[str, Mapping[str, Any]], names: Iterable[str]) -> None:
    """:class:`tether.ConfigError` for a ``tool_meta`` key that names no tool:
    a misspelt name would otherwise leave the tool it meant unapproved."""
    known = list(names)
    for key in tool_meta:
        if key not in known:
            raise tether.ConfigError(
                f"`tool_meta` names `{key}`, which is not one of the tools{did_you_mean(key, known)}"
                f" (the tools: {', '.join(f'`{n}`' for n in known) or 'none'})"
            )


def with_framework_approval(
    name: str, framework: Union[bool, ApprovalPredicate], meta: Mapping[str, Any], flag: str
) -> Dict[str, Any]:
    """``meta`` with ``requires_approval`` set from the framework's own
    approval flag ``framework`` (its name in the framework: ``flag``).

    The framework's flag is never lowered: a ``tool_meta`` that says a tool
    needing approval needs none is a :class:`tether.ConfigError`; one that
    says ``True`` over a framework predicate asks for every call."""
    merged = dict(meta)
    given = merged.get("requires_approval")
    if framework is False:
        return merged
    if given is None:
        merged["requires_approval"] = framework
    elif given is False:
        raise tether.ConfigError(
            f"tool `{name}` needs approval by its own `{flag}`; `tool_meta` cannot turn that off"
            " (remove `requires_approval` from its `tool_meta`, or change the tool)"
        )
    elif given is not True:
        raise tether.ConfigError(
            f"tool `{name}` has its own `{flag}` and a `requires_approval` in `tool_meta`: keep one of the two"
        )
    return merged


# --- Approvals that wait, the frameworks' way (`approver=tether.LATER`) -----
#
# A call the model made that waits for a person ends the agent run with the
# framework's own human-in-the-loop object; the person's answer comes back
# through it, in any process, and is carried out HERE, with `tether.answer`:
# a parked script run's calls are answered (audited with who decided) and
# the script resumed from its line; a direct call, stored by the turn when
# it came to wait (`Turn.execute_or_park`), runs or is denied, its one row
# in the turn it was made in. The store's claim makes each happen once, and
# the approval wait limit counts from when the call began waiting.

#: The key of the adapters' entry in a framework's deferral metadata.
METADATA_KEY = "tether"

#: Which :meth:`tether.Turn.open` options :func:`tether.answer` takes too.
_ANSWER_OPTIONS = (
    "token", "park_key_file", "max_tool_calls", "max_approval_calls", "approval_timeout",
    "default_tool_time_limit", "audit_args_bytes", "capture_payloads", "max_depth",
    "max_refused_script_calls", "max_result_bytes", "script_time_limit", "verbatim_tool_errors",
)


@dataclass(frozen=True)
class Waiting:
    """A call the model made that waits for a person's answer: the agent run
    ended on it the framework's way. What the person must see is here.

    For a script (``run_id`` set), the calls its parked run waits on, each
    with its tool and exact arguments, in ``calls``; for a direct call
    (``run_id`` is ``None``), the call itself: ``tool`` and ``args``, and in
    ``calls`` the call as the store keeps it (since when it waits)."""

    #: The model's call id (the framework's tool call id).
    call_id: str
    #: The model's tool: ``run_script``, or the tool it called directly.
    tool: str
    #: The model's arguments (for ``run_script``: ``code``, ``input``).
    args: Any
    #: The turn the call was made in: its audit log holds the rows.
    turn_id: str
    #: The parked script run, for ``run_script``; ``None`` for a direct call.
    run_id: Optional[str] = None
    #: The calls the parked run waits on (call id, tool, exact arguments, since
    #: when); for a direct call, the call itself.
    calls: List[tether.PendingCall] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        """The JSON form carried in a framework's deferral metadata."""
        return {
            "call_id": self.call_id, "tool": self.tool, "args": self.args, "turn_id": self.turn_id,
            "run_id": self.run_id, "calls": [dataclasses.asdict(c) for c in self.calls],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Waiting":
        """The :meth:`to_json` form read back."""
        calls = [tether.PendingCall(**c) for c in data.get("calls", [])]
        return cls(data["call_id"], data["tool"], data["args"], data["turn_id"], data.get("run_id"), calls)


@dataclass(frozen=True)
class Answer:
    """A person's answer to a waiting call: yes or no, who decided (the audit
    row's ``decided_by``) and why (recorded; passed to a script with a no)."""

    approve: bool
    decided_by: str
    reason: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.decided_by.strip():
            raise tether.ConfigError("`decided_by` is empty: name who decides, for the audit log (a user id)")

    def to_json(self) -> Dict[str, Any]:
        return {"approve": self.approve, "decided_by": self.decided_by, "reason": self.reason}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Answer":
        return cls(bool(data["approve"]), str(data["decided_by"]), data.get("reason"))


def is_parked(result: tether.CallResult) -> bool:
    """The ``run_script`` call ended because its run parked (``run_parked``)."""
    return result.error is not None and result.error.code == tether.codes.RUN_PARKED


class Answering:
    """What an adapter's turn needs to end a run on a waiting call and to
    carry out the person's answer later, in any process: the turn's tools,
    the options it was opened with, the name of ``run_script``."""

    def __init__(self, tools: Sequence[tether.Tool], options: Mapping[str, Any], script: Optional[str]) -> None:
        self.tools = list(tools)
        self.options = dict(options)
        self.script = script
        self.audit: str = self.options.get("audit", "memory:")
        self._may_wait = {t.name for t in self.tools if t.requires_approval is True}

    @staticmethod
    def later(options: Mapping[str, Any]) -> bool:
        """The turn was opened with ``approver=tether.LATER``."""
        return isinstance(options.get("approver"), tether.Later)

    def may_wait(self, tool: str) -> bool:
        """A direct call of ``tool`` may come to wait for a person (its
        ``requires_approval`` is ``True``; a predicate is refused with
        ``tether.LATER`` when the turn opens): it goes through
        :meth:`tether.Turn.execute_or_park`, and the run ends on it when it
        parks."""
        return tool in self._may_wait

    async def direct_waiting(self, turn_id: str, call_id: str, tool: str, args: Any) -> Waiting:
        """The model's direct call ``call_id`` of turn ``turn_id``, as the store
        keeps it while it waits."""
        run_id = f"{turn_id}/direct/{call_id}"
        for run in await tether.pending(self.audit, turn_id):
            if run.run_id == run_id:
                return Waiting(call_id, tool, args, turn_id, None, list(run.calls))
        raise self._direct_answered(turn_id, call_id, tool)

    def _direct_answered(self, turn_id: str, call_id: str, tool: str) -> tether.NotWaiting:
        return tether.NotWaiting(
            f"the model's call `{call_id}` of `{tool}` (turn `{turn_id}`) waits no more in `{self.audit}`: it was"
            " answered already, and nothing runs twice (its row is in the turn's audit log:"
            f" `await tether.read_audit_log(\"{self.audit}\", \"{turn_id}\")`), or the turn id is not the one it"
            f" waited in (`await tether.pending(\"{self.audit}\")` lists what waits)"
        )

    async def parked_run(self, call_id: str, turn_id: Optional[str] = None) -> Optional[tether.ParkedRun]:
        """The parked run of the model's ``run_script`` call ``call_id`` (its
        calls are ``<call_id>/<n>``), in turn ``turn_id`` or any turn."""
        prefix = f"{call_id}/"
        for run in await tether.pending(self.audit, turn_id):
            if any(c.call_id.startswith(prefix) for c in run.calls):
                return run
        return None

    async def script_waiting(self, turn_id: str, call_id: str, args: Any) -> Waiting:
        """The model's ``run_script`` call ``call_id`` of turn ``turn_id``, parked."""
        run = await self.parked_run(call_id, turn_id)
        if run is None:
            raise tether.NotWaiting(
                f"no run of the model's `{self.script}` call `{call_id}` waits in turn `{turn_id}` of `{self.audit}`:"
                f" it was answered already, or the turn id is not the one the run parked in"
                f" (`await tether.pending(\"{self.audit}\")` lists what waits)"
            )
        return Waiting(call_id, self.script or "run_script", args, turn_id, run.run_id, list(run.calls))

    def _answer_options(self) -> Dict[str, Any]:
        return {k: self.options[k] for k in _ANSWER_OPTIONS if k in self.options}

    async def answer_script(
        self, waiting: Waiting, answer: Answer
    ) -> Tuple[Optional[tether.CallResult], List[tether.PendingCall]]:
        """Answers the calls of ``waiting`` (those the person was shown) that
        its parked run waits on with ``answer`` and resumes the script,
        here, to its end — its ``run_script`` result — or to its next
        wait: then ``None`` and the calls it waits on now (also when it
        waits on none of those shown).
        :class:`tether.NotWaiting` when nothing of it waits any more (it was
        answered already: nothing runs twice)."""
        run = await self.parked_run(waiting.call_id, waiting.turn_id)
        if run is None or (waiting.run_id is not None and run.run_id != waiting.run_id):
            raise tether.NotWaiting(
                f"the run of the model's `{waiting.tool}` call `{waiting.call_id}` (turn `{waiting.turn_id}`) waits"
                " no more: it was answered and resumed already, and nothing of it runs again; its rows are in"
                f" the turn's audit log (`await tether.read_audit_log(\"{self.audit}\", \"{waiting.turn_id}\")`)"
            )
        # Only the calls the person was shown: a run that went on meanwhile
        # (another answer) and waits on others is shown again, not answered.
        shown = {c.call_id for c in waiting.calls}
        answered = [c for c in run.calls if c.call_id in shown]
        if not answered:
            return None, list(run.calls)
        sidecar = self.options.get("sidecar", tether.EMBEDDED)
        last = [
            await tether.answer(
                waiting.turn_id, call_id=call.call_id, approve=answer.approve, decided_by=answer.decided_by,
                reason=answer.reason, tools=self.tools, audit=self.audit, sidecar=sidecar, **self._answer_options(),
            )
            for call in answered
        ][-1]
        if last.result is None or last.parked:
            return None, list(last.waiting)
        return last.result, []

    async def answer_direct(self, waiting: Waiting, answer: Answer) -> tether.CallResult:
        """Answers the model's direct call of ``waiting``, which the turn
        stored when it came to wait (:meth:`tether.Turn.execute_or_park`):
        it runs, or is denied, through the one execution path — a yes after
        ``approval_timeout`` (counted from when it began waiting, across
        processes) is a time-out — with one audit row, in the turn it was
        made in, with who decided. The store's claim makes it happen once:
        a second answer runs nothing (:class:`tether.NotWaiting`;
        :class:`tether.RunClaimed` while the first still runs it)."""
        sidecar = self.options.get("sidecar", tether.EMBEDDED)
        try:
            answered = await tether.answer(
                waiting.turn_id, call_id=waiting.call_id, approve=answer.approve, decided_by=answer.decided_by,
                reason=answer.reason, tools=self.tools, audit=self.audit, sidecar=sidecar, **self._answer_options(),
            )
        except tether.NotWaiting as error:
            raise self._direct_answered(waiting.turn_id, waiting.call_id, waiting.tool) from error
        if answered.result is None:
            raise tether.NotWaiting(f"the call `{waiting.call_id}` has no result after its answer: {answered}")
        return answered.result
