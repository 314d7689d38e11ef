"""What the turn hands back to Python: a call's result, the approval
request an approver sees and its decision, call events, audit and ledger
rows. Plain dataclasses over the JSON the Rust side writes
(``src/convert.rs``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, Dict, Literal, Optional, Type, TypeVar

T = TypeVar("T")


def _from(cls: Type[T], data: Dict[str, Any]) -> T:
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


def _row(cls: Type[T], data: Dict[str, Any]) -> T:
    """An audit or ledger row, its recorded arguments (JSON text) as a value."""
    return _from(cls, {**data, "args": json.loads(data["args"])})


@dataclass(frozen=True)
class CallError:
    """Why a call produced no value."""

    #: A refusal code (``tether.codes``) or the tool's own code.
    code: str
    #: The reason, written for the model or script that reads it.
    message: str
    #: The code's display name; ``None`` for a tool's own code.
    display_name: Optional[str] = None
    #: The step of the one execution path that refused or ended the call.
    step: Optional[str] = None


@dataclass(frozen=True)
class CallResult:
    """The result of :meth:`Turn.execute`: the same shape for the model's
    calls and a script's."""

    call_id: str
    tool: str
    #: ``ok``, ``error`` (the tool's own failure), ``failed`` (refused,
    #: denied, timed out, cancelled) or ``undelivered`` (ran, result lost).
    status: str
    value: Any
    error: Optional[CallError]
    #: ``{"verdict", "decided_by"}`` when the call reached approval.
    approval: Optional[Dict[str, Any]]
    #: Host-only metadata (``run_script``: ``nested_calls``, stdout...).
    metadata: Any
    #: What the model reads: ``{"ok", "value", "error"}``.
    model_value: Dict[str, Any]

    @property
    def ok(self) -> bool:
        """True when the tool returned a value."""
        return self.status == "ok"

    @classmethod
    def _from_json(cls, data: Dict[str, Any]) -> "CallResult":
        error = data.get("error")
        return _from(cls, {**data, "error": _from(CallError, error) if error else None})


@dataclass(frozen=True)
class ApprovalRequest:
    """What an approver is shown: the exact arguments the tool will receive."""

    turn_id: str
    call_id: str
    tool: str
    description: str
    args: Any
    #: ``model``, ``script`` or ``tool``.
    origin: str
    parent_call_id: Optional[str]
    script_run_id: Optional[str]
    depth: int
    #: Why approval is needed (the policy rule's reason), if given.
    reason: Optional[str]


@dataclass(frozen=True)
class Decision:
    """An approver's answer; returning ``True``/``False`` is the same with
    ``decided_by="python"``."""

    approved: bool
    #: Who decided, for the audit log.
    decided_by: str = "python"
    #: Passed on to the caller on a denial; recorded in the audit row
    #: (``AuditRow.approval_reason``) for a yes or a no.
    reason: Optional[str] = None


@dataclass(frozen=True)
class ToolEvent:
    """A call event: ``started``, then any number of ``progress`` (what a slow
    tool says of its work, e.g. an MCP server's progress notifications), then
    exactly one of ``completed`` (the tool returned, possibly its own error)
    or ``failed``. Every event has the same fields; those that do not apply
    to its kind are ``None``."""

    kind: Literal["started", "progress", "completed", "failed"]
    turn_id: str
    call_id: str
    parent_call_id: Optional[str]
    tool: str
    #: ``model``, ``script`` or ``tool``: who made the call.
    origin: Optional[str] = None
    #: 0 for the model's calls, 1 for a script's, deeper inside tools.
    depth: Optional[int] = None
    #: Arguments, only with ``capture_payloads=True`` (``started``).
    args: Any = None
    #: ``completed``: the tool's own error code, if it failed; ``failed``: the
    #: refusal or failure code (``tether.codes``). ``None`` when it went well.
    code: Optional[str] = None
    #: The code's display name, for a ``tether.codes`` code.
    display_name: Optional[str] = None
    #: ``failed``: the step of the one execution path that ended the call.
    step: Optional[str] = None
    #: ``failed``: the reason, as the caller reads it; ``completed`` with the
    #: tool's own error code: its message; ``progress``: what the tool says
    #: it is doing, if it says. ``None`` when there is nothing to say.
    message: Optional[str] = None
    #: ``progress``: the work done so far (it grows).
    progress: Optional[float] = None
    #: ``progress``: the whole work, when the tool knows it.
    total: Optional[float] = None
    #: ``completed`` and ``failed``: seconds since ``started``.
    duration_s: Optional[float] = None
    metadata: Any = None


@dataclass(frozen=True)
class CallIdentity:
    """Which call a row is about: what the audit row and the ledger row share."""

    turn_id: str
    call_id: str
    parent_call_id: Optional[str]
    script_run_id: Optional[str]
    tool: str
    origin: str
    depth: int
    #: The arguments as recorded (redacted), as a value, like
    #: :attr:`ApprovalRequest.args`: whole, or over ``audit_args_bytes`` a
    #: marked cut ``{"$truncated": True, "bytes", "sha256", "head"}``;
    #: ``run_script``'s ``code`` is always whole.
    args: Any
    args_truncated: bool


@dataclass(frozen=True)
class AuditRow(CallIdentity):
    """One audit-log row: one per call, whatever its outcome."""

    step: Optional[str]
    code: Optional[str]
    display_name: Optional[str]
    approval: Optional[str]
    decided_by: Optional[str]
    status: str
    started_at_ms: int
    finished_at_ms: int
    duration_us: int
    #: The approver's reason for its answer (``Decision.reason``), if it gave one.
    approval_reason: Optional[str] = None
    #: What went wrong, for the operator: for a tool that raised (not
    #: :class:`tether.ToolError`), the exception's type and message,
    #: ``"`RuntimeError`: …"``, never shown to the model; for a
    #: :class:`tether.ToolError`, the message the model got.
    detail: Optional[str] = None


@dataclass(frozen=True)
class LedgerRow(CallIdentity):
    """One effect-ledger row: a call of a tool with effects."""

    approval_required: bool
    #: ``started`` (may have run) or ``settled``.
    state: str
    started_at_ms: int
    settled_at_ms: Optional[int]
    outcome: Optional[str]


@dataclass(frozen=True)
class PendingCall:
    """A call of a parked run waiting for a person's answer."""

    call_id: str
    tool: str
    #: The exact arguments the tool gets if the call is approved (a value).
    args: Any
    #: Why approval is needed (the policy rule's reason), if given.
    reason: Optional[str]
    #: Since when it waits, Unix seconds: the approval wait limit
    #: (``approval_timeout``) counts from here, across processes.
    since: float

    @classmethod
    def _from_json(cls, data: Dict[str, Any]) -> "PendingCall":
        return cls(data["call_id"], data["tool"], data["args"], data.get("reason"), data["since_ms"] / 1000.0)
