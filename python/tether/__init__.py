"""Tether from Python: run the scripts an LLM writes in a network-less
sandbox, with every tool call they make checked, approved and audited by
your agent's turn — the same turn as the Rust library's, bound with PyO3.

    import asyncio, tether

    @tether.tool(read_only=True)
    def get_contract(customer_id: str) -> dict: ...

    async def main():
        async with tether.Turn.open([get_contract], audit="sqlite:audit.db") as turn:
            result = await turn.execute("call_1", "run_script", {"code": "get_contract(customer_id='c1')"})

See ``python/README.md``.
"""

import atexit as _atexit

from . import _native, codes
from ._native import (
    AuditStoreError,
    ConfigError,
    NotWaiting,
    ResumeInterrupted,
    RunClaimed,
    SidecarUnavailable,
    TetherError,
    __version__,
)
from ._parked import ParkedRun, Resumed, answer, pending
from ._records import ApprovalRequest, AuditRow, CallError, CallResult, Decision, LedgerRow, PendingCall, ToolEvent
from ._tools import ApprovalPredicate, Tool, ToolError, make_tool, tool
from ._turn import (
    EMBEDDED,
    LATER,
    ApproverLike,
    Later,
    ScriptTool,
    Turn,
    TurnClosed,
    TurnOptions,
    embedded_sidecar,
    read_audit_log,
)

__all__ = [
    "EMBEDDED",
    "LATER",
    "ApprovalPredicate",
    "ApprovalRequest",
    "ApproverLike",
    "AuditRow",
    "AuditStoreError",
    "CallError",
    "CallResult",
    "ConfigError",
    "Decision",
    "Later",
    "LedgerRow",
    "NotWaiting",
    "ParkedRun",
    "PendingCall",
    "Resumed",
    "ResumeInterrupted",
    "RunClaimed",
    "ScriptTool",
    "SidecarUnavailable",
    "TetherError",
    "Tool",
    "ToolError",
    "ToolEvent",
    "Turn",
    "TurnClosed",
    "TurnOptions",
    "__version__",
    "answer",
    "codes",
    "embedded_sidecar",
    "make_tool",
    "pending",
    "read_audit_log",
    "tool",
]

# Rust threads leave Python before the interpreter finalizes (src/gil.rs).
_atexit.register(_native.quiesce)
