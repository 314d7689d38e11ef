"""Every refusal and failure code, exactly as the Rust crate ``tether-codes``
defines them: read from the extension. The constants below name them for
type checkers; a test holds them to the extension's list."""

from __future__ import annotations

from typing import Dict, Final, NamedTuple, Tuple

from . import _native


class CodeInfo(NamedTuple):
    """One code."""

    #: The stable machine code, e.g. ``policy_denied``.
    code: str
    #: The name shown to a person, e.g. ``Blocked by policy``.
    display_name: str
    #: The tool ran (its effect may have happened) though no value came back.
    tool_ran: bool
    #: Refused because a cap was reached.
    is_cap: bool


#: Every code, in the order ``docs/results.md`` lists them.
ALL: Tuple[CodeInfo, ...] = tuple(CodeInfo(*entry) for entry in _native.codes())
#: The codes by name.
BY_CODE: Dict[str, CodeInfo] = {info.code: info for info in ALL}


def display_name(code: str) -> str:
    """The display name of ``code``; ``KeyError`` for a tool's own code."""
    return BY_CODE[code].display_name


# One constant per code, for typed code that branches on them (`result.error.code
# == tether.codes.APPROVAL_DENIED`). Written out so type checkers and editors
# know them; `tests/test_codes.py` fails unless they are exactly the codes
# the extension reports.
CANCELLED: Final = "cancelled"
TURN_DEADLINE_EXCEEDED: Final = "turn_deadline_exceeded"
TOOL_CALL_CAP_REACHED: Final = "tool_call_cap_reached"
DEPTH_LIMIT_EXCEEDED: Final = "depth_limit_exceeded"
SCRIPT_CALL_CAP_REACHED: Final = "script_call_cap_reached"
REFUSAL_CAP_REACHED: Final = "refusal_cap_reached"
SIDECAR_BUSY: Final = "sidecar_busy"
TOOL_NOT_FOUND: Final = "tool_not_found"
TOOL_NOT_ACTIVATED: Final = "tool_not_activated"
NOT_CALLABLE_FROM_SCRIPT: Final = "not_callable_from_script"
INVALID_ARGUMENTS: Final = "invalid_arguments"
ARGUMENTS_TOO_LARGE: Final = "arguments_too_large"
POLICY_DENIED: Final = "policy_denied"
PERMISSION_DENIED: Final = "permission_denied"
REPEATED_CALL: Final = "repeated_call"
APPROVAL_CAP_REACHED: Final = "approval_cap_reached"
APPROVAL_DENIED: Final = "approval_denied"
APPROVAL_TIMEOUT: Final = "approval_timeout"
LEDGER_UNAVAILABLE: Final = "ledger_unavailable"
REPLAYED_CALL: Final = "replayed_call"
POSSIBLY_EXECUTED: Final = "possibly_executed"
RUN_PARKED: Final = "run_parked"
TOOL_TIMEOUT: Final = "tool_timeout"
TOOL_FAILED: Final = "tool_failed"
RESULT_TOO_LARGE: Final = "result_too_large"
INVALID_RESULT: Final = "invalid_result"
PARENT_SETTLED: Final = "parent_settled"
INTERNAL: Final = "internal"
