"""Audit rows written from Python are the Rust store's rows: another
process reads them back through the Rust library (SQLite file, and the
PostgreSQL server `./x test` starts)."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import List

import pytest

import tether
from conftest import HOW, cli_binary
from world import DEMO_INPUT, World, demo_script, expected

READER = """
import asyncio, dataclasses, json, sys, tether
rows = asyncio.run(tether.read_audit_log(sys.argv[1], sys.argv[2]))
print(json.dumps([dataclasses.asdict(r) for r in rows]))
"""


def read_elsewhere(url: str, turn_id: str) -> List[dict]:
    """The rows as a separate process reads them with the Rust library."""
    out = subprocess.run([sys.executable, "-c", READER, url, turn_id], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


async def run_demo(audit: str, turn_id: str) -> List[tether.AuditRow]:
    world = World()
    async with tether.Turn.open(world.tools(), approver=lambda r: True, audit=audit, turn_id=turn_id) as turn:
        result = await turn.execute("call_1", "run_script", {"code": demo_script(), "input": DEMO_INPUT})
        assert result.ok, result.error
        return await turn.audit_log()


def assert_same_rows(written: List[tether.AuditRow], read: List[dict]) -> None:
    assert [dataclasses.asdict(r) for r in written] == read
    want = expected()
    assert len(read) == 2 + len(want["checked"]) + len(want["emailed"])
    assert {r["tool"] for r in read} == {"run_script", "list_issues", "get_contract", "send_email"}
    assert [r["approval"] for r in read if r["tool"] == "send_email"] == ["approved"] * len(want["emailed"])


async def test_sqlite_rows_written_from_python_are_read_back_by_the_rust_library(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    written = await run_demo(f"sqlite:{db}", "py-audit-sqlite")
    assert_same_rows(written, read_elsewhere(f"sqlite:{db}", "py-audit-sqlite"))
    with sqlite3.connect(db) as plain:
        (count,) = plain.execute("SELECT count(*) FROM audit WHERE turn_id = 'py-audit-sqlite'").fetchone()
    assert count == len(written)


async def test_postgres_rows_written_from_python_are_read_back_by_the_rust_library() -> None:
    url = os.environ.get("TETHER_TEST_POSTGRES_URL")
    if not url:
        pytest.fail(f"TETHER_TEST_POSTGRES_URL is not set; {HOW} (it starts PostgreSQL)")
    turn_id = f"py-audit-{uuid.uuid4()}"
    written = await run_demo(url, turn_id)
    assert_same_rows(written, read_elsewhere(url, turn_id))


async def test_rows_written_from_python_are_shown_by_tether_audit(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    written = await run_demo(f"sqlite:{db}", "py-audit-cli")
    command = [str(cli_binary()), "audit", "--audit-store", f"sqlite:{db}", "--turn", "py-audit-cli"]
    shown = json.loads(subprocess.run([*command, "--json"], check=True, capture_output=True, text=True).stdout)
    assert [(r["call_id"], r["tool"], r["status"], r["approval"]) for r in shown["audit"]] == [
        (r.call_id, r.tool, r.status, r.approval) for r in written
    ]
    emailed = [r for r in shown["ledger"] if r["tool"] == "send_email"]
    assert emailed and all(r["state"] == "settled" for r in emailed)
    # As text: the script's calls indented under the run_script call.
    text = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    lines = text.splitlines()
    run_line = next(line for line in lines if " run_script (model)" in line)
    call_line = next(line for line in lines if " list_issues (script)" in line)
    indent = lambda line: len(line) - len(line.lstrip())  # noqa: E731
    assert indent(call_line) > indent(run_line), text


async def test_a_bad_store_url_says_which_forms_work() -> None:
    with pytest.raises(tether.AuditStoreError, match="use `sqlite:PATH`"):
        await tether.Turn.open([], audit="mysql://x")
