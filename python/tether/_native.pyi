"""Type stubs of the extension module (``python/src/``); use the ``tether``
package's API, which wraps it."""

from typing import Any, Awaitable, Callable, List, Optional, Sequence, Tuple

__version__: str
#: The sidecar address that starts one inside this process.
EMBEDDED: str

class TetherError(Exception):
    """Every error Tether raises (a refused or failed call is a result, never this)."""

class ConfigError(TetherError):
    """The turn cannot be built as described (a tool, a limit, a schema)."""

class SidecarUnavailable(TetherError):
    """No sidecar could be started or reached to run scripts."""

class AuditStoreError(TetherError):
    """The audit store cannot be opened or read."""

class NotWaiting(TetherError):
    """Nothing of the turn waits for an answer in the audit store, or not the call named (`tether.answer`)."""

class RunClaimed(TetherError):
    """Another process is resuming the parked run (`tether.answer`); `take_over=True` resumes it once that process is gone."""

class ResumeInterrupted(TetherError):
    """A resumed run did not reach its end (its sidecar went away or refused it): it is parked again with every answer; answer again to resume it."""

class Turn:
    """The backend's turn. Every awaitable runs with the GIL released and is
    cancelled with the task that awaits it. ``open``'s ``approver`` is the
    approval bridge's ``decide``, or ``None`` for ``tether.LATER`` (the
    Rust ``DeferredApprover``: a waiting script run is parked in the audit
    store)."""

    @staticmethod
    def open(
        turn_id: Optional[str],
        tools: Sequence[Tuple[str, Callable[[str], Awaitable[Tuple[Any, ...]]]]],
        approver: Optional[Callable[[str], Awaitable[Tuple[bool, str, Optional[str]]]]],
        audit: str,
        sidecar: Optional[str],
        token: Optional[str],
        park_key_file: Optional[str],
        limits: str,
        deliver: Optional[Callable[[str], None]],
        verbatim_tool_errors: bool,
    ) -> Awaitable["Turn"]: ...
    @property
    def id(self) -> str: ...
    @property
    def calls_used(self) -> int: ...
    def end_reason(self) -> Optional[str]: ...
    def execute(self, call_id: str, name: str, args: str) -> Awaitable[str]: ...
    def execute_or_park(self, call_id: str, name: str, args: str) -> Awaitable[str]: ...
    def cancel(self) -> None: ...
    def activate(self, name: str) -> bool: ...
    def script_stubs(self) -> str: ...
    def tools_for_model(self) -> str: ...
    def audit_log(self) -> Awaitable[str]: ...
    def events_drained(self) -> Awaitable[None]: ...
    def ledger(self, approval_only: bool) -> Awaitable[str]: ...

def codes() -> List[Tuple[str, str, bool, bool]]:
    """``(code, display_name, tool_ran, is_cap)`` for every code, from ``tether-codes``."""

def read_audit_log(url: str, turn_id: str) -> Awaitable[str]: ...
def pending(audit: str, turn_id: Optional[str] = None) -> Awaitable[str]:
    """The parked runs of the store (of one turn) with the calls they wait on, as JSON text."""
def answer(
    turn_id: str,
    approve: bool,
    call_id: Optional[str],
    decided_by: str,
    reason: Optional[str],
    tools: Sequence[Tuple[str, Callable[[str], Awaitable[Tuple[Any, ...]]]]],
    approver: Optional[Callable[[str], Awaitable[Tuple[bool, str, Optional[str]]]]],
    audit: str,
    sidecar: Optional[str],
    token: Optional[str],
    take_over: bool,
    park_key_file: Optional[str],
    limits: str,
    verbatim_tool_errors: bool,
) -> Awaitable[str]:
    """Answers a turn's waiting calls and resumes the parked runs they free: JSON text."""
def embedded_sidecar() -> Awaitable[str]: ...
def embedded_live_runs() -> Optional[int]: ...
def quiesce() -> None:
    """Registered with ``atexit``: lets the package's threads leave Python first."""
def measure_rust_calls(calls: int) -> Awaitable[float]:
    """Seconds that ``calls`` no-op calls take through the turn, driven from Rust (``python/bench``)."""
