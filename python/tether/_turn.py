"""The turn from Python: :class:`Turn` over the Rust ``Turn`` — the one
execution path every call goes through, the model's and every script's."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import logging
import os
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Generator,
    Iterable,
    List,
    Literal,
    Optional,
    Set,
    Tuple,
    Union,
)

from typing_extensions import TypedDict

from . import _native
from ._records import AuditRow, CallResult, ApprovalRequest, Decision, LedgerRow, PendingCall, ToolEvent, _from, _row
from ._tools import ApprovalPredicate, Tool, ToolLike, make_tool

logger = logging.getLogger("tether")

#: Where scripts run by default: a sidecar started inside this process.
EMBEDDED = _native.EMBEDDED

Approver = Callable[[ApprovalRequest], Union[bool, Decision, Awaitable[Union[bool, Decision]]]]
EventCallback = Callable[[ToolEvent], Any]


class Later:
    """The type of :data:`LATER`: its one value."""

    _the: Optional["Later"] = None

    def __new__(cls) -> "Later":
        if cls._the is None:
            cls._the = super().__new__(cls)
        return cls._the

    def __repr__(self) -> str:
        return "tether.LATER"


#: ``Turn.open(approver=tether.LATER)``: calls that need approval are
#: answered later, by a person, from any process (:func:`tether.answer`). A
#: script whose run waits on such calls is handed to the audit store with
#: them, and its ``run_script`` call ends with ``run_parked``
#: (``docs/parking.md``, "Durable turns").
LATER = Later()

#: Who decides a turn's calls that need approval: an :data:`Approver`,
#: :data:`LATER`, or ``None`` (they are denied).
ApproverLike = Union[Approver, Later, None]

class TurnClosed(_native.TetherError):
    """Raised by :meth:`Turn.execute` (and ``run_script``, :meth:`Turn.activate`)
    once the turn is closed: a closed turn runs nothing and writes no row.
    Open a new turn for new calls."""


#: Who approved a call that its tool's ``requires_approval`` predicate waived.
WAIVED_BY = "tool-policy"
#: Who denied a call when the turn was opened without an approver.
NO_APPROVER = "no-approver"


class _ApproverBridge:
    """The turn's approval step in Python (``src/approver.rs``): a tool's
    ``requires_approval`` predicate first, then the user's approver; with
    none, the call is denied as "no approver is configured"."""

    def __init__(self, approver: Optional[Approver], predicates: Dict[str, ApprovalPredicate]) -> None:
        self._approver = approver
        self._predicates = predicates

    async def decide(self, request_json: str) -> Tuple[bool, str, Optional[str]]:
        request = _from(ApprovalRequest, json.loads(request_json))
        predicate = self._predicates.get(request.tool)
        if predicate is not None:
            try:
                needed = predicate(request)
                if inspect.isawaitable(needed):
                    needed = await needed
            except Exception as error:
                logger.warning("the approval predicate of `%s` raised", request.tool, exc_info=True)
                return (False, WAIVED_BY, f"the tool's approval predicate raised `{type(error).__qualname__}`")
            if not isinstance(needed, bool):
                return (False, WAIVED_BY, f"the tool's approval predicate returned `{type(needed).__name__}`, not a bool")
            if not needed:
                return (True, WAIVED_BY, None)
        if self._approver is None:
            return (False, NO_APPROVER, "no approver is configured: open the turn with `approver=` to approve this tool's calls")
        answer = self._approver(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, bool):
            return (answer, "python", None if answer else "denied by the approver")
        if isinstance(answer, Decision):
            return (answer.approved, answer.decided_by, answer.reason)
        raise TypeError(f"an approver returns True, False or tether.Decision, not {type(answer).__name__}")


def _native_approver(approver: ApproverLike, tools: List[Tool]) -> Optional[Callable[[str], Awaitable[Tuple[bool, str, Optional[str]]]]]:
    """What the extension is given for ``approver``: the bridge's ``decide``,
    or ``None`` for :data:`LATER` (the Rust ``DeferredApprover``).
    :class:`tether.ConfigError` for :data:`LATER` with a tool whose
    ``requires_approval`` is a predicate: a predicate runs in this process,
    and a deferred call is decided in another."""
    predicates = {t.name: t.requires_approval for t in tools if callable(t.requires_approval)}
    if isinstance(approver, Later):
        if predicates:
            names = ", ".join(f"`{name}`" for name in sorted(predicates))
            raise _native.ConfigError(
                f"`approver=tether.LATER` cannot be combined with a `requires_approval` predicate (tool {names}):"
                " a call waiting for a person is answered in another process, where the predicate cannot run;"
                " make it `requires_approval=True`, or decide in this process with an approver function"
            )
        return None
    return _ApproverBridge(approver, predicates).decide


def _limits_json(**limits: Any) -> str:
    """The turn's limits as the extension reads them (those given)."""
    return json.dumps({k: v for k, v in limits.items() if v is not None})


class _EventHub:
    """Receives every event in order on the caller's loop (``src/events.rs``),
    calls the callback and feeds the iterators of :meth:`Turn.events`."""

    def __init__(self, callback: Optional[EventCallback]) -> None:
        self._callback = callback
        self._queues: List[asyncio.Queue[Optional[ToolEvent]]] = []
        self._tasks: Set[asyncio.Future[Any]] = set()
        # Who made each call in flight, from its `started` event: a call's
        # later event carries its origin and depth too.
        self._callers: Dict[str, Tuple[Optional[str], Optional[int]]] = {}

    def deliver(self, event_json: str) -> None:
        data = json.loads(event_json)
        key = f"{data.get('parent_call_id')}\n{data.get('call_id')}"
        kind = data.get("kind")
        if kind == "started":
            self._callers[key] = (data.get("origin"), data.get("depth"))
        elif kind == "progress":
            data["origin"], data["depth"] = self._callers.get(key, (None, None))
        else:
            data["origin"], data["depth"] = self._callers.pop(key, (None, None))
        event = _from(ToolEvent, data)
        for queue in self._queues:
            queue.put_nowait(event)
        if self._callback is None:
            return
        try:
            outcome = self._callback(event)
            if inspect.isawaitable(outcome):
                task = asyncio.ensure_future(outcome)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except Exception:
            logger.exception("the event callback raised")

    def subscribe(self) -> "asyncio.Queue[Optional[ToolEvent]]":
        queue: asyncio.Queue[Optional[ToolEvent]] = asyncio.Queue()
        self._queues.append(queue)
        return queue

    def close(self) -> None:
        for queue in self._queues:
            queue.put_nowait(None)
        self._queues.clear()


class TurnOptions(TypedDict, total=False):
    """The keyword options of :meth:`Turn.open`, for code that passes them
    on (the adapters' ``open_turn(tools, **options)``): each is typed and
    documented as there. A test holds the two lists equal."""

    approver: ApproverLike
    audit: str
    sidecar: Optional[str]
    token: Optional[str]
    park_key_file: Optional[str]
    turn_id: Optional[str]
    on_event: Optional[EventCallback]
    max_tool_calls: Optional[int]
    max_approval_calls: Optional[int]
    approval_timeout: Optional[float]
    default_tool_time_limit: Optional[float]
    audit_args_bytes: Optional[int]
    capture_payloads: Optional[bool]
    max_depth: Optional[int]
    max_refused_script_calls: Optional[int]
    max_result_bytes: Optional[int]
    deadline: Optional[float]
    script_time_limit: Optional[float]
    offer: Optional[Literal["every", "script", "search"]]
    verbatim_tool_errors: bool


class ScriptTool:
    """The model-facing ``run_script`` tool of a turn: its name, description
    (ending with the typed Python stubs of the tools a script may call) and
    JSON Schema, for an agent framework's tool list; calling it runs the
    script as the model's call through :meth:`Turn.execute`."""

    def __init__(self, turn: "Turn", name: str, description: str, parameters: Dict[str, Any]) -> None:
        self.turn = turn
        self.name = name
        self.description = description
        self.parameters = parameters

    async def __call__(self, code: str, input: Any = None, *, call_id: Optional[str] = None) -> CallResult:
        args: Dict[str, Any] = {"code": code}
        if input is not None:
            args["input"] = input
        return await self.turn.execute(call_id or self.turn.next_call_id(), self.name, args)


class Turn:
    """One agent turn: the one tool list, its checks, approval, audit log
    and effect ledger, shared by the model's calls and every script's.

    Open one with ``turn = await Turn.open(...)`` (or ``async with
    Turn.open(...) as turn``); see :meth:`open` for every option.
    """

    def __init__(self, native: Any, hub: _EventHub) -> None:
        self._native = native
        self._hub = hub
        self._calls = itertools.count(1)
        self._closed = False

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise TurnClosed(f"turn `{self.id}` is closed: {what} ran nothing; open a new turn for new calls")

    @staticmethod
    def open(
        tools: Iterable[ToolLike] = (),
        *,
        approver: ApproverLike = None,
        audit: str = "memory:",
        sidecar: Optional[str] = EMBEDDED,
        token: Optional[str] = None,
        park_key_file: Optional[str] = None,
        turn_id: Optional[str] = None,
        on_event: Optional[EventCallback] = None,
        max_tool_calls: Optional[int] = None,
        max_approval_calls: Optional[int] = None,
        approval_timeout: Optional[float] = None,
        default_tool_time_limit: Optional[float] = None,
        audit_args_bytes: Optional[int] = None,
        capture_payloads: Optional[bool] = None,
        max_depth: Optional[int] = None,
        max_refused_script_calls: Optional[int] = None,
        max_result_bytes: Optional[int] = None,
        deadline: Optional[float] = None,
        script_time_limit: Optional[float] = None,
        offer: Optional[Literal["every", "script", "search"]] = None,
        verbatim_tool_errors: bool = False,
    ) -> "_Opening":
        """Opens a turn.

        - ``tools``: :class:`Tool` objects or plain functions (sync or
          ``async def``), made tools with :func:`tether.tool`'s defaults.
        - ``approver``: decides calls that need approval; gets an
          :class:`ApprovalRequest`, returns ``bool`` or :class:`Decision`
          (or awaits one). Without one, such calls are denied.
          :data:`tether.LATER`: a person answers them later, from any
          process (:func:`tether.answer`); a script waiting on them is
          parked in the audit store (which must then be ``sqlite:`` or
          PostgreSQL) and its ``run_script`` call ends ``run_parked``.
        - ``audit``: where audit rows and the effect ledger go:
          ``sqlite:PATH`` (or a path), ``postgres://…``, or ``memory:``.
        - ``sidecar``: where ``run_script`` runs scripts: ``"embedded"`` (a
          sidecar in this process), ``"unix:/path"``, ``"http://host:port"``,
          or ``None`` for no ``run_script``. ``token`` (default
          ``$TETHER_TOKEN``): the bearer token a TCP sidecar asks for.
        - ``park_key_file`` (default ``$TETHER_PARK_KEY_FILE``, else, with
          :data:`LATER`, ``$XDG_STATE_HOME/tether/park.key``, made on first
          use, mode 0600): the file of the key the embedded sidecar seals
          parked runs with, so another process with the same file (or the
          ``tether`` CLI) resumes them. The embedded sidecar is one per
          process and its key is fixed when it starts: a later turn that
          needs another key raises :class:`tether.ConfigError`.
        - ``turn_id``: the id of the turn's audit rows; by default a new one,
          unique across processes and hosts (``turn-<UUID v7>``). An id the
          audit store already holds raises :class:`tether.ConfigError`.
        - ``on_event``: called with each :class:`ToolEvent` on the loop.
        - limits: ``max_tool_calls`` (200), ``max_approval_calls`` (25),
          ``approval_timeout`` (300 s), ``default_tool_time_limit`` (120 s),
          ``max_depth`` (3), ``max_refused_script_calls`` (8),
          ``max_result_bytes``, ``audit_args_bytes`` (4096),
          ``capture_payloads`` (off), ``deadline`` (seconds from now; none),
          ``script_time_limit`` (1800 s).
        - ``offer``: what :meth:`tools_for_model` offers the model (scripts
          see every tool either way, under the same checks): ``"every"``
          (the default: each tool as a function, and ``run_script`` with
          their stubs), ``"script"`` (``run_script`` alone: the tools are
          paid for once, as its stubs) or ``"search"`` (``run_script``
          naming the tools, with ``search_tools`` and ``describe_tools`` for
          the model to read the stubs it needs: for many tools).
        - ``verbatim_tool_errors`` (off): a tool that raises an exception
          other than :class:`tether.ToolError` fails with ``tool_failed``,
          and the model (or script) reads only the tool and the exception's
          type, "`lookup` reported a failure: it raised `RuntimeError`; the
          message is withheld and kept in the host's audit log", since the
          text may hold a secret. The whole ``"`RuntimeError`: <text>"`` is
          in the audit row's ``detail``, and logged with its traceback on the
          ``tether`` logger at WARNING. ``True`` sends the text to the model
          too. A ``tether.ToolError``'s message is for the model: always
          sent.

        Raises :class:`tether.ConfigError`, :class:`tether.AuditStoreError`
        or :class:`tether.SidecarUnavailable` when the turn cannot be built.
        """
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
            deadline=deadline,
            script_time_limit=script_time_limit,
            offer=offer,
        )
        made = [make_tool(t) for t in tools]
        hub = _EventHub(on_event)
        decide = _native_approver(approver, made)

        async def build() -> Turn:
            native = await _native.Turn.open(
                turn_id,  # None: the turn gets a new unique id (`turn-<UUID v7>`)
                [(t.spec_json(), t._invoke) for t in made],
                decide,
                audit,
                sidecar,
                _token(token),
                park_key_file,
                limits,
                hub.deliver,
                bool(verbatim_tool_errors),
            )
            return Turn(native, hub)

        return _Opening(build)

    @property
    def id(self) -> str:
        """The turn's id (the audit rows' ``turn_id``)."""
        return str(self._native.id)

    @property
    def calls_used(self) -> int:
        """Slots of the turn-wide cap taken: calls that ran and calls in flight."""
        return int(self._native.calls_used)

    def end_reason(self) -> Optional[str]:
        """``cancelled`` or ``turn_deadline_exceeded`` once over, else ``None``."""
        return self._native.end_reason()  # type: ignore[no-any-return]

    def next_call_id(self) -> str:
        """A fresh call id for a call this package makes for you."""
        return f"py_{next(self._calls)}"

    async def execute(self, call_id: str, name: str, args: Optional[Dict[str, Any]] = None) -> CallResult:
        """Runs a call the model made through the one execution path: budget,
        lookup, arguments, policy, pre-execution check, approval, execution
        under its time limit, audit. Never raises for a refused or failed
        call: the result says why. Cancelling the awaiting task cancels the
        call (and a script it runs).

        Raises :class:`TurnClosed` once the turn is closed."""
        self._check_open(f"the call `{call_id}` of `{name}`")
        text = await self._native.execute(call_id, name, json.dumps({} if args is None else args))
        return CallResult._from_json(json.loads(text))

    async def execute_or_park(
        self, call_id: str, name: str, args: Optional[Dict[str, Any]] = None
    ) -> Union[CallResult, PendingCall]:
        """:meth:`execute` — except that a call that comes to wait for a
        person (``approver=tether.LATER``) does not wait here: it is stored
        in the audit store, as a call of its own, and this returns it, as
        :func:`tether.pending` lists it. :func:`tether.answer` answers it
        from any process, once — its one audit row in this turn, the
        approval wait limit (``approval_timeout``) counted from when it
        began waiting — and returns its result. What the frameworks'
        adapters end an agent run on.

        Raises :class:`TurnClosed` once the turn is closed."""
        self._check_open(f"the call `{call_id}` of `{name}`")
        text = await self._native.execute_or_park(call_id, name, json.dumps({} if args is None else args))
        outcome = json.loads(text)
        if "parked" in outcome:
            return PendingCall._from_json(outcome["parked"])
        return CallResult._from_json(outcome["result"])

    def run_script_tool(self) -> ScriptTool:
        """The model-facing ``run_script`` tool, its description ending with
        the typed stubs of the tools a script may call. ``ConfigError`` if
        the turn was opened with ``sidecar=None``."""
        for listed in self.tools_for_model():
            if listed["name"] == "run_script":
                return ScriptTool(self, listed["name"], listed["description"], listed["input_schema"])
        raise _native.ConfigError("this turn has no `run_script`: open it with a sidecar (the default is \"embedded\")")

    def tools_for_model(self) -> List[Dict[str, Any]]:
        """The tool list as the model sees it: ``name``, ``description``,
        ``input_schema``; a deferred tool by name only (``deferred: True``)."""
        return json.loads(self._native.tools_for_model())  # type: ignore[no-any-return]

    def script_stubs(self) -> str:
        """The typed Python stubs of the tools a script may call."""
        return str(self._native.script_stubs())

    def activate(self, name: str) -> bool:
        """Activates a deferred tool for the model and every running script."""
        self._check_open(f"activating `{name}`")
        return bool(self._native.activate(name))

    def cancel(self) -> None:
        """Cancels the turn: running calls end ``cancelled``, scripts end,
        new calls are refused."""
        self._native.cancel()

    def events(self) -> AsyncIterator[ToolEvent]:
        """Every event from now on, in order, until :meth:`close`."""
        queue = self._hub.subscribe()

        async def iterate() -> AsyncIterator[ToolEvent]:
            while True:
                event = await queue.get()
                if event is None:
                    return
                yield event

        return iterate()

    async def audit_log(self) -> List[AuditRow]:
        """The turn's audit rows, every row written so far committed first."""
        return [_row(AuditRow, row) for row in json.loads(await self._native.audit_log())]

    async def ledger(self) -> List[LedgerRow]:
        """The turn's effect-ledger rows."""
        return [_row(LedgerRow, row) for row in json.loads(await self._native.ledger(False))]

    async def possibly_executed_approval_actions(self) -> List[LedgerRow]:
        """Approval-required calls that reached execution (their effect may
        have happened): tell the user about these after a cancelled turn."""
        return [_row(LedgerRow, row) for row in json.loads(await self._native.ledger(True))]

    async def close(self) -> None:
        """Commits every audit row written so far and ends the iterators of
        :meth:`events`. The turn's calls have all settled by then; from now
        on :meth:`execute` raises :class:`TurnClosed`."""
        self._closed = True
        await self._native.audit_log()
        # Every event emitted so far is on this loop, ahead of what follows:
        # the callback and the iterators get them all before the iterators end.
        await self._native.events_drained()
        await asyncio.sleep(0)
        self._hub.close()

    async def __aenter__(self) -> "Turn":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


def _token(token: Optional[str]) -> Optional[str]:
    """``token``, else ``$TETHER_TOKEN`` (unset or empty: none)."""
    return token if token is not None else (os.environ.get("TETHER_TOKEN") or None)


class _Opening:
    """What :meth:`Turn.open` returns: await it, or use it with ``async with``."""

    def __init__(self, build: Callable[[], Awaitable[Turn]]) -> None:
        self._build = build
        self._turn: Optional[Turn] = None

    def __await__(self) -> Generator[Any, None, Turn]:
        return self._build().__await__()

    async def __aenter__(self) -> Turn:
        self._turn = await self._build()
        return self._turn

    async def __aexit__(self, *exc: Any) -> None:
        if self._turn is not None:
            await self._turn.close()


async def read_audit_log(url: str, turn_id: str) -> List[AuditRow]:
    """Turn ``turn_id``'s audit rows, read by the Rust library from the store
    ``url`` names over a fresh connection."""
    return [_row(AuditRow, row) for row in json.loads(await _native.read_audit_log(url, turn_id))]


async def embedded_sidecar() -> str:
    """The address of this process's embedded sidecar, started if needed
    (it starts on a turn's first use anyway)."""
    return str(await _native.embedded_sidecar())
