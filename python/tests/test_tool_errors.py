"""An unexpected exception's text may hold a secret (the trial's tool raised
with a database password in it): by default the model — directly or through
a script — reads only the tool and the exception's type; the whole text is
in the audit row's ``detail`` and the ``tether`` logger; a turn opened with
``verbatim_tool_errors=True`` sends the text to the model too. A
``tether.ToolError``'s message is for the model, and is always sent."""

from __future__ import annotations

import json
import logging
from typing import Any, List

import pytest

import tether

SECRET = "db password=hunter2"
WITHHELD = (
    "`lookup` reported a failure: it raised `RuntimeError`; the message is withheld and kept in the host's audit log"
)


@tether.tool(read_only=True)
def lookup(key: str) -> str:
    """Looks `key` up in the database."""
    if key == "missing":
        raise tether.ToolError("not_found", f"no row `{key}`")
    raise RuntimeError(f"cannot connect: {SECRET}")


async def calls(**options: Any) -> tuple[tether.CallResult, tether.CallResult, List[tether.AuditRow], List[str]]:
    """A direct call and a script's call of `lookup`, the turn's audit rows,
    and every event as text."""
    events: List[str] = []
    async with tether.Turn.open([lookup], on_event=lambda e: events.append(repr(e)), **options) as turn:
        direct = await turn.execute("c1", "lookup", {"key": "a"})
        script = await turn.execute("c2", "run_script", {"code": "lookup(key='b')"})
        rows = await turn.audit_log()
    return direct, script, rows, events


async def test_an_exceptions_text_is_kept_from_the_model_and_kept_in_the_audit_row(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    direct, script, rows, events = await calls()
    assert direct.status == "error" and direct.error is not None and direct.error.code == "tool_failed"
    assert direct.error.message == WITHHELD
    assert SECRET not in json.dumps(direct.model_value)
    # The script's call fails the same way, and the script's result (what the
    # model reads of `run_script`, nested-call summary included) lacks the text.
    assert script.ok, script
    failed = script.value["result"]
    assert (failed["ok"], failed["error"]["code"], failed["error"]["message"]) == (False, "tool_failed", WITHHELD)
    assert "hunter2" not in json.dumps(script.model_value)
    assert not any("hunter2" in event for event in events), events
    by_call = {row.call_id: row for row in rows}
    assert by_call["c1"].detail == f"`RuntimeError`: cannot connect: {SECRET}"
    assert by_call["c2/1"].detail == f"`RuntimeError`: cannot connect: {SECRET}"
    assert by_call["c2"].detail is None, "the script itself did not fail"
    # The logs have the text and the traceback, at WARNING.
    logged = [r for r in caplog.records if r.name == "tether" and "hunter2" in r.getMessage()]
    assert len(logged) == 2 and all(r.levelno == logging.WARNING and r.exc_info for r in logged), logged
    assert "tool `lookup` raised `RuntimeError`" in logged[0].getMessage()


async def test_verbatim_tool_errors_sends_the_exceptions_text_to_the_model() -> None:
    direct, script, rows, _ = await calls(verbatim_tool_errors=True)
    verbatim = f"`lookup` reported a failure: it raised `RuntimeError`: cannot connect: {SECRET}"
    assert direct.error is not None and direct.error.message == verbatim
    assert script.value["result"]["error"]["message"] == verbatim
    assert [row.detail for row in rows if row.tool == "lookup"] == [f"`RuntimeError`: cannot connect: {SECRET}"] * 2


async def test_a_tether_tool_errors_message_is_for_the_model_and_not_withheld() -> None:
    async with tether.Turn.open([lookup], sidecar=None) as turn:
        result = await turn.execute("c1", "lookup", {"key": "missing"})
        rows = await turn.audit_log()
    assert result.error is not None and (result.error.code, result.error.message) == ("not_found", "no row `missing`")
    assert rows[0].detail == "no row `missing`", "the row keeps the message with its code"
