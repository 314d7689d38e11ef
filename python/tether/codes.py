"""Every refusal and failure code, exactly as the Rust crate ``tether-codes``
defines them: read from the extension, never copied."""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

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
