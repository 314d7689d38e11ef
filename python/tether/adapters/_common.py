"""What both adapters do alike: check ``tool_meta`` against the tools it
names, and carry a framework's own approval flag onto the turn's approval
step, so no framework tool ever loses its approval on the way in."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Union

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
