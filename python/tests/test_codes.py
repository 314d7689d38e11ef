"""Every refusal code seen from Python is the Rust one: the package's list
is the Rust crate's (and the documented table), and each refusal a Python
turn hands back carries that code and display name — the same whether the
model or a script made the call."""

from __future__ import annotations

import re
from typing import Dict, List

import tether
from conftest import REPO


def documented() -> List[tuple]:
    """The call failure codes' table of `docs/results.md` (the first one)."""
    text = (REPO / "docs" / "results.md").read_text()
    table = text.split("| code | display name |", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \| ([^|]+?) \|", table, flags=re.M)


def test_the_package_lists_exactly_the_documented_codes_in_order() -> None:
    assert [(c.code, c.display_name) for c in tether.codes.ALL] == documented()
    assert tether.codes.BY_CODE["result_too_large"].tool_ran is True
    assert tether.codes.BY_CODE["tool_call_cap_reached"].is_cap is True
    assert tether.codes.BY_CODE["policy_denied"].is_cap is False


async def test_refusals_seen_from_python_carry_the_rust_codes_and_display_names() -> None:
    @tether.tool
    def pay(amount: int) -> str:
        return "paid"

    @tether.tool(read_only=True)
    def ping() -> str:
        return "pong"

    @tether.tool(deferred=True, read_only=True)
    def later() -> str:
        return "later"

    @tether.tool(runs_on_device=True)
    def camera() -> str:
        return "photo"

    seen: Dict[str, tether.CallResult] = {}
    async with tether.Turn.open([pay, ping, later, camera], approver=lambda r: False,
                                max_approval_calls=1, max_tool_calls=40) as turn:
        async def direct(code: str, name: str, args: dict) -> None:
            seen[code] = await turn.execute(f"d_{code}", name, args)

        await direct("tool_not_found", "nope", {})
        await direct("invalid_arguments", "pay", {"amount": "ten"})
        await direct("tool_not_activated", "later", {})
        await turn.execute("p1", "pay", {"amount": 1})
        await direct("repeated_call", "pay", {"amount": 1})
        # The script: the same refusals, made by a script.
        script = await turn.execute("s1", "run_script", {"code": (
            # Through a variable: a literal of the wrong type is refused before the script runs.
            "ten = 'ten'\n"
            "[call('nope'), pay(amount=ten), call('later'), pay(amount=1), call('camera'),"
            " [ping() for _ in range(9)][-1]]"
        )})
    refused = script.value["result"][:5]
    assert [r["error"]["code"] for r in refused] == [
        "tool_not_found", "invalid_arguments", "tool_not_activated", "repeated_call", "not_callable_from_script",
    ]
    assert len(seen) == 4
    for code, result in seen.items():
        assert result.error is not None and result.error.code == code
        assert result.error.display_name == tether.codes.display_name(code)
    for r in refused:
        assert r["error"]["code"] in tether.codes.BY_CODE


async def test_caps_and_the_script_call_cap_from_python() -> None:
    @tether.tool(read_only=True)
    def ping(n: int) -> int:
        return n

    @tether.tool(requires_approval=True)
    def pay(amount: int) -> str:
        return "paid"

    async with tether.Turn.open([ping, pay], approver=lambda r: True, max_approval_calls=1) as turn:
        approvals = await turn.execute("s1", "run_script", {"code": "[pay(amount=1), pay(amount=2)]"})
        many = await turn.execute("s2", "run_script", {"code": "[ping(n=i) for i in range(52)][-2:]"})
        refusing = await turn.execute("s3", "run_script", {"code": "[call('nope', {'i': i}) for i in range(10)][-2:]"})
    async with tether.Turn.open([ping], max_tool_calls=2) as small:
        capped = await small.execute("s1", "run_script", {"code": "[ping(n=1), ping(n=2)]"})

    first, second = approvals.value["result"]
    assert first["ok"] and second["error"]["code"] == "approval_cap_reached"
    assert [r["error"]["code"] for r in many.value["result"]] == ["script_call_cap_reached"] * 2
    assert refusing.value["result"][-1]["error"]["code"] == "refusal_cap_reached"
    # run_script took one slot of two: the script's second call is over the cap.
    assert capped.value["result"][0]["ok"]
    assert capped.value["result"][1]["error"]["code"] == "tool_call_cap_reached"
    for code in ("approval_cap_reached", "script_call_cap_reached", "refusal_cap_reached", "tool_call_cap_reached"):
        assert tether.codes.BY_CODE[code].is_cap


def test_every_code_has_its_constant_and_every_constant_is_a_code() -> None:
    constants = {name: value for name, value in vars(tether.codes).items() if name.isupper() and isinstance(value, str)}
    assert constants == {c.code.upper(): c.code for c in tether.codes.ALL}
    assert tether.codes.APPROVAL_DENIED == "approval_denied"
