"""Approvals that wait: script runs parked in the audit store with the calls
a person answers later, from any process (``docs/parking.md``, "Durable
turns"). :func:`pending` lists them; :func:`answer` approves or denies a
call, audited like any approval, and resumes the script — the Rust
library's own steps, those of ``tether pending`` / ``approve`` / ``deny``
(``src/parked.rs``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional

from . import _native
from ._records import CallResult, PendingCall
from ._tools import ToolLike, make_tool
from ._turn import EMBEDDED, LATER, ApproverLike, _limits_json, _native_approver, _token


@dataclass(frozen=True)
class ParkedRun:
    """A script run parked in the audit store, waiting for its calls'
    answers — or a direct call of the model's that waits for a person
    (:meth:`Turn.execute_or_park`; ``run_id`` ``<turn id>/direct/<call id>``,
    the one call in ``calls``)."""

    turn_id: str
    run_id: str
    #: When it parked, Unix seconds.
    parked_at: float
    #: The calls it waits on that have no answer yet.
    calls: List[PendingCall] = field(default_factory=list)

    @classmethod
    def _from_json(cls, data: Dict[str, Any]) -> "ParkedRun":
        calls = [PendingCall._from_json(call) for call in data["calls"]]
        return cls(data["turn_id"], data["run_id"], data["parked_at_ms"] / 1000.0, calls)


@dataclass(frozen=True)
class Resumed:
    """What :func:`answer` did with a parked run."""

    turn_id: str
    run_id: str
    #: The calls the run waits on now: those not answered yet, or, when it
    #: went on and parked again, the calls it made since. Empty once it ended.
    waiting: List[PendingCall]
    #: The ``run_script`` call's result, shaped as :meth:`Turn.execute`
    #: returns it, once the run went on: the script's value, or
    #: ``run_parked`` when it parked again (then ``waiting`` says at what);
    #: for a direct call, the call's own result. ``None`` when it did not go
    #: on (some calls it waits on still wait).
    result: Optional[CallResult]

    @property
    def parked(self) -> bool:
        """The run still waits for answers (:attr:`waiting`)."""
        return bool(self.waiting)

    @classmethod
    def _from_json(cls, data: Dict[str, Any]) -> "Resumed":
        result = data.get("result")
        return cls(
            data["turn_id"],
            data["run_id"],
            [PendingCall._from_json(call) for call in data["waiting"]],
            CallResult._from_json(result) if result is not None else None,
        )


async def pending(audit: str, turn_id: Optional[str] = None) -> List[ParkedRun]:
    """The script runs parked in the store ``audit`` names (``sqlite:PATH``
    or PostgreSQL), and the direct calls waiting there
    (:meth:`Turn.execute_or_park`), of turn ``turn_id`` or of every turn,
    each with the calls it waits on and their exact arguments.

    Raises :class:`tether.ConfigError` for ``memory:`` (it keeps nothing
    another process could see) and :class:`tether.AuditStoreError` when the
    store cannot be read."""
    runs = json.loads(await _native.pending(audit, turn_id))
    return [ParkedRun._from_json(run) for run in runs]


async def answer(
    turn_id: str,
    *,
    approve: bool,
    decided_by: str,
    call_id: Optional[str] = None,
    reason: Optional[str] = None,
    tools: Iterable[ToolLike] = (),
    audit: str,
    sidecar: str = EMBEDDED,
    token: Optional[str] = None,
    approver: ApproverLike = LATER,
    take_over: bool = False,
    park_key_file: Optional[str] = None,
    max_tool_calls: Optional[int] = None,
    max_approval_calls: Optional[int] = None,
    approval_timeout: Optional[float] = None,
    default_tool_time_limit: Optional[float] = None,
    audit_args_bytes: Optional[int] = None,
    capture_payloads: Optional[bool] = None,
    max_depth: Optional[int] = None,
    max_refused_script_calls: Optional[int] = None,
    max_result_bytes: Optional[int] = None,
    script_time_limit: Optional[float] = None,
    verbatim_tool_errors: bool = False,
) -> Resumed:
    """Answers calls of turn ``turn_id`` that wait for a person and resumes
    the script run they free, in this process, to its end or its next wait;
    a direct call that waits (:meth:`Turn.execute_or_park`) runs, or is
    denied, here, its one row in turn ``turn_id``.

    - ``approve``: yes or no; ``decided_by``: who decided (the audit row's
      ``decided_by``); ``reason``: recorded in the row, and passed to the
      script with a denial.
    - ``call_id``: the call answered; ``None`` answers every call of the
      turn that waits now (every parked run of the turn is resumed; the
      :class:`Resumed` is the last one's).
    - ``tools``: the turn's tools, as it was opened with them (the call's
      tool runs here, now, if approved); ``audit``: the store it was
      opened with; ``sidecar``, ``token``, ``park_key_file`` and the limits
      as :meth:`Turn.open` takes them (the embedded sidecar must seal with
      the key the run was parked with). A resumed turn keeps the time its
      deadline had left, so there is no ``deadline``.
    - ``approver``: decides the calls the resumed script makes later:
      :data:`LATER` (the default) parks the run again at the next one; an
      approver function is asked at once.
    - ``take_over``: resume a run another process claimed and never
      finished (it died): its calls that started and never settled come
      back ``possibly_executed``, none runs twice.

    Raises :class:`tether.NotWaiting` when nothing of the turn waits, or
    not ``call_id`` (the message names the calls that do);
    :class:`tether.RunClaimed` when another process is resuming the run;
    :class:`tether.ResumeInterrupted` when the sidecar could not take the
    run to its end (it is parked again with every answer: answer again);
    :class:`tether.ConfigError`, :class:`tether.AuditStoreError`,
    :class:`tether.SidecarUnavailable` as :meth:`Turn.open` does.
    """
    made = [make_tool(t) for t in tools]
    limits = _limits_json(
        max_tool_calls=max_tool_calls,
        max_approval_calls=max_approval_calls,
        approval_timeout=approval_timeout,
        default_tool_time_limit=default_tool_time_limit,
        audit_args_bytes=audit_args_bytes,
        capture_payloads=capture_payloads,
        max_depth=max_depth,
        max_refused_script_calls=max_refused_script_calls,
        max_result_bytes=max_result_bytes,
        script_time_limit=script_time_limit,
    )
    text = await _native.answer(
        turn_id,
        bool(approve),
        call_id,
        decided_by,
        reason,
        [(t.spec_json(), t._invoke) for t in made],
        _native_approver(approver, made),
        audit,
        sidecar,
        _token(token),
        bool(take_over),
        park_key_file,
        limits,
        bool(verbatim_tool_errors),
    )
    return Resumed._from_json(json.loads(text))
