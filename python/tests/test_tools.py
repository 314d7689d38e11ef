"""Tools written in Python: schemas from type hints, pydantic models or
given explicitly; their metadata decides the turn's checks; what they raise
or return wrongly becomes a failure value; they run on the caller's loop."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Annotated, Any, Dict, List, Optional

import pydantic
import pytest

import tether

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


async def test_a_tool_that_raises_is_a_tool_failed_value_and_the_turn_goes_on() -> None:
    @tether.tool(read_only=True)  # identical repeats allowed
    def flaky(n: int) -> int:
        if n == 0:
            raise ZeroDivisionError("cannot divide by zero")
        return 10 // n

    async with tether.Turn.open([flaky]) as turn:
        direct = await turn.execute("c1", "flaky", {"n": 0})
        script = await turn.execute("c2", "run_script", {"code": "[flaky(n=0), flaky(n=5)]"})
        after = await turn.execute("c3", "flaky", {"n": 2})
    assert direct.status == "error"
    assert direct.error is not None and direct.error.code == "tool_failed"
    assert direct.error.display_name == tether.codes.display_name("tool_failed")
    # The type, not the text (it may hold a secret: `test_tool_errors.py`).
    assert "ZeroDivisionError" in direct.error.message and "cannot divide by zero" not in direct.error.message
    failed, five = script.value["result"]
    assert failed["ok"] is False and failed["error"]["code"] == "tool_failed"
    assert "ZeroDivisionError" in failed["error"]["message"]
    assert five == {"ok": True, "value": 2, "error": None}
    assert after.ok and after.value == 5


async def test_tool_error_keeps_the_tools_own_code_and_unreadable_results_are_invalid_result() -> None:
    @tether.tool
    def lookup(key: str) -> Any:
        if key == "object":
            return object()
        raise tether.ToolError("not_found", f"no `{key}`")

    async with tether.Turn.open([lookup], sidecar=None) as turn:
        missing = await turn.execute("c1", "lookup", {"key": "k"})
        weird = await turn.execute("c2", "lookup", {"key": "object"})
    assert missing.status == "error" and missing.error == tether.CallError("not_found", "no `k`", None, None)
    assert weird.status == "undelivered"
    assert weird.error is not None and (weird.error.code, weird.error.step) == ("invalid_result", "execution")


class Address(pydantic.BaseModel):
    street: str
    city: str


class Order(pydantic.BaseModel):
    """An order to ship."""

    sku: str = pydantic.Field(description="the product")
    quantity: int = pydantic.Field(ge=1)
    ship_to: Address


async def test_schemas_come_from_hints_and_models_and_arguments_are_checked_against_them() -> None:
    @tether.tool(read_only=True)
    def search(query: Annotated[str, pydantic.Field(description="words to find")], limit: int = 10,
               tags: Optional[List[str]] = None) -> List[str]:
        """Search the catalog."""
        return [f"{query}:{limit}:{tags}"]

    @tether.tool
    async def place(order: Order) -> Dict[str, Any]:
        assert isinstance(order.ship_to, Address)  # the tool receives the model
        return {"sku": order.sku, "city": order.ship_to.city}

    explicit = tether.make_tool(lambda **kw: sorted(kw), name="keys", description="Its argument names.",
                                schema={"type": "object", "properties": {"a": {"type": "integer"}},
                                        "required": ["a"], "additionalProperties": False})
    assert search.input_schema["properties"]["query"]["description"] == "words to find"
    assert search.input_schema["required"] == ["query"]
    assert place.input_schema["properties"]["quantity"]["minimum"] == 1

    async with tether.Turn.open([search, place, explicit], sidecar=None) as turn:
        found = await turn.execute("c1", "search", {"query": "lamp"})
        placed = await turn.execute("c2", "place", {"sku": "L1", "quantity": 2, "ship_to": {"street": "1 Main", "city": "Oslo"}})
        too_few = await turn.execute("c3", "place", {"sku": "L1", "quantity": 0, "ship_to": {"street": "x", "city": "y"}})
        extra = await turn.execute("c4", "search", {"query": "x", "color": "red"})
        keys = await turn.execute("c5", "keys", {"a": 1})
        wrong = await turn.execute("c6", "keys", {"a": "one"})
    assert found.value == ["lamp:10:None"]
    assert placed.value == {"sku": "L1", "city": "Oslo"}
    for refused in (too_few, extra, wrong):
        assert refused.error is not None and (refused.error.code, refused.error.step) == ("invalid_arguments", "arguments")
    assert keys.value == ["a"]


async def test_metadata_decides_repeats_deferral_exclusions_and_time_limits() -> None:
    ran: List[str] = []
    cancelled = asyncio.Event()

    @tether.tool
    def charge(amount: int) -> str:
        ran.append(f"charge {amount}")
        return "charged"

    @tether.tool(read_only=True)
    def balance() -> int:
        return 7

    @tether.tool(deferred=True, read_only=True)
    def archive() -> str:
        return "archived"

    @tether.tool(asks_user=True)
    def ask(question: str) -> str:
        return "yes"

    @tether.tool(time_limit=0.2, read_only=True)
    async def slow() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    async with tether.Turn.open([charge, balance, archive, ask, slow]) as turn:
        once = await turn.execute("c1", "charge", {"amount": 5})
        twice = await turn.execute("c2", "charge", {"amount": 5})
        b1 = await turn.execute("c3", "balance", {})
        b2 = await turn.execute("c4", "balance", {})
        not_yet = await turn.execute("c5", "archive", {})
        listed = {t["name"]: t for t in turn.tools_for_model()}
        assert turn.activate("archive") is True
        now = await turn.execute("c6", "archive", {})
        script = await turn.execute("c7", "run_script", {"code": "call('ask', {'question': 'ok?'})"})
        late = await turn.execute("c8", "slow", {})
    assert once.ok and twice.error is not None and twice.error.code == "repeated_call"
    assert ran == ["charge 5"]
    assert b1.ok and b2.ok
    assert not_yet.error is not None and not_yet.error.code == "tool_not_activated"
    assert listed["archive"]["deferred"] is True and listed["archive"]["input_schema"] is None
    assert now.value == "archived"
    assert script.value["result"]["error"]["code"] == "not_callable_from_script"
    assert late.error is not None and late.error.code == "tool_timeout"
    await asyncio.wait_for(cancelled.wait(), timeout=10)


async def test_tools_run_on_the_callers_loop_in_its_context_and_may_await_other_coroutines() -> None:
    loop = asyncio.get_running_loop()
    helper_done = asyncio.Event()
    seen: Dict[str, Any] = {}

    async def helper() -> None:
        await asyncio.sleep(0.01)
        helper_done.set()

    @tether.tool(read_only=True, concurrency_safe=True)
    async def wait_for_helper(tag: str) -> str:
        seen["loop"] = asyncio.get_running_loop()
        seen["request_id"] = REQUEST_ID.get()
        # Another task on the same loop must progress while the turn waits:
        # a deadlock here if the loop were blocked.
        task = asyncio.ensure_future(helper())
        await asyncio.wait_for(helper_done.wait(), timeout=10)
        await task
        a, b = await asyncio.gather(asyncio.sleep(0, "a"), asyncio.sleep(0, "b"))
        return tag + a + b

    @tether.tool(read_only=True)
    def sync_tool() -> bool:
        return asyncio.get_running_loop() is loop

    REQUEST_ID.set("req-42")
    async with tether.Turn.open([wait_for_helper, sync_tool]) as turn:
        result = await turn.execute("c1", "run_script", {"code": "[unwrap(wait_for_helper(tag='x')), unwrap(sync_tool())]"})
    assert result.value["result"] == ["xab", True]
    assert seen == {"loop": loop, "request_id": "req-42"}


def test_the_tool_list_is_checked_when_the_turn_opens() -> None:
    @tether.tool
    def twin() -> None: ...

    async def open_with(*tools: tether.Tool) -> None:
        await tether.Turn.open(tools, sidecar=None)

    with pytest.raises(tether.ConfigError, match="`twin` is already in the turn's list"):
        asyncio.run(open_with(twin, twin))
    with pytest.raises(tether.ConfigError, match="tool `t`: `time_limit` is `-1`; give a positive number of seconds"):
        asyncio.run(open_with(tether.make_tool(lambda: 1, name="t", time_limit=-1)))
    with pytest.raises(tether.ConfigError, match="input schema of tool `bad`"):
        asyncio.run(open_with(tether.make_tool(lambda: 1, name="bad", schema={"type": "no-such-type"})))


async def test_a_direct_call_is_held_to_the_same_result_size_as_a_scripts() -> None:
    @tether.tool(read_only=True)
    def dump(megabytes: int) -> str:
        """A large result."""
        return "x" * (megabytes << 20)

    async with tether.Turn.open([dump], sidecar=None) as turn:
        small = await turn.execute("c1", "dump", {"megabytes": 1})
        large = await turn.execute("c2", "dump", {"megabytes": 5})
    assert small.ok
    assert large.error is not None and large.error.code == "result_too_large"
    assert large.value is None and large.model_value["value"] is None
    async with tether.Turn.open([dump], sidecar=None, max_result_bytes=8 << 20) as turn:
        allowed = await turn.execute("c1", "dump", {"megabytes": 5})
    assert allowed.ok and len(allowed.value) == 5 << 20
