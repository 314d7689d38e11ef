"""Turn ids (issue 26, item 2) and what the audit keeps (item 4): every
default turn id is unique across processes; an id the audit store already
holds is refused when the turn is opened, never mixed; the approver's
reason and a whole script are in the audit rows."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tether
from world import World

#: Opens a turn on the SQLite file argv[1] (with turn id argv[2], or the
#: default), makes one call, and prints the turn's id and its rows.
OPENER = """
import asyncio, json, sys, tether

def ping() -> str:
    \"\"\"Answers pong.\"\"\"
    return "pong"

async def main():
    turn_id = sys.argv[2] if len(sys.argv) > 2 else None
    async with tether.Turn.open([ping], audit=f"sqlite:{sys.argv[1]}", sidecar=None, turn_id=turn_id) as turn:
        assert (await turn.execute("c1", "ping", {})).ok
        print(json.dumps({"id": turn.id, "rows": len(await turn.audit_log())}))

asyncio.run(main())
"""

UUID7 = re.compile(r"^turn-[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def open_in_a_new_process(db: Path, *turn_id: str, as_pid_1: bool = False) -> dict:
    """OPENER in a fresh process; `as_pid_1`: in a PID namespace of its own,
    where it is PID 1, as a container's backend is on every start."""
    wrap = ["unshare", "--pid", "--fork", "--mount-proc"] if as_pid_1 else []
    out = subprocess.run([*wrap, sys.executable, "-c", OPENER, str(db), *turn_id], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_turns_opened_in_two_processes_get_different_default_ids_and_their_own_rows(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    first, second = open_in_a_new_process(db), open_in_a_new_process(db)
    assert first["id"] != second["id"]
    assert UUID7.match(first["id"]) and UUID7.match(second["id"]), (first, second)
    # Each turn sees its own row only, though both share one file.
    assert (first["rows"], second["rows"]) == (1, 1)


def test_two_backends_started_as_pid_1_on_one_database_get_different_ids_and_their_own_rows(tmp_path: Path) -> None:
    # The trial's case: in a container the backend is PID 1 on every start,
    # so an id made of the pid and a counter repeats across restarts.
    if shutil.which("unshare") is None:
        pytest.fail("`unshare` (util-linux) is needed: the CI installs it")
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", "echo $$"], capture_output=True, text=True)
    assert probe.returncode == 0 and probe.stdout.strip() == "1", f"no PID namespace here: {probe.stderr}"
    db = tmp_path / "audit.db"
    first, second = open_in_a_new_process(db, as_pid_1=True), open_in_a_new_process(db, as_pid_1=True)
    assert first["id"] != second["id"] and UUID7.match(first["id"]) and UUID7.match(second["id"]), (first, second)
    assert (first["rows"], second["rows"]) == (1, 1), "the second start sees none of the first's rows"


async def test_an_id_the_sqlite_file_already_holds_is_refused_at_open_and_nothing_is_mixed(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    assert open_in_a_new_process(db, "turn-reused")["rows"] == 1
    with pytest.raises(tether.ConfigError, match=r"turn id `turn-reused` is taken.*pass a fresh turn id, or omit it"):
        await tether.Turn.open([], audit=f"sqlite:{db}", sidecar=None, turn_id="turn-reused")
    # The refused turn wrote nothing: the first turn's rows are as they were.
    rows = await tether.read_audit_log(f"sqlite:{db}", "turn-reused")
    assert [r.call_id for r in rows] == ["c1"]
    # A fresh id on the same file opens.
    async with tether.Turn.open([], audit=f"sqlite:{db}", sidecar=None, turn_id="turn-fresh") as turn:
        assert turn.id == "turn-fresh"


async def test_the_approvers_reason_is_in_the_audit_log_for_a_yes_and_a_no() -> None:
    world = World()

    def decide(request: tether.ApprovalRequest) -> tether.Decision:
        if request.args["to"] == "dana@example.com":
            return tether.Decision(True, decided_by="ops@example.com", reason="dana asked for it")
        return tether.Decision(False, decided_by="ops@example.com", reason="no mail to strangers")

    async with tether.Turn.open(world.tools(), approver=decide, sidecar=None) as turn:
        for n, to in enumerate(["dana@example.com", "eve@example.com"]):
            await turn.execute(f"c{n}", "send_email", {"to": to, "subject": "s", "body": "b"})
        rows = await turn.audit_log()
    assert [(r.approval, r.approval_reason) for r in rows] == [
        ("approved", "dana asked for it"),
        ("denied", "no mail to strangers"),
    ]


async def test_long_arguments_of_other_calls_are_a_marked_cut_with_their_size_and_hash() -> None:
    import hashlib

    def note(text: str) -> str:
        """Notes `text` down."""
        return "noted"

    text = "ü" * 3000  # 6,000 bytes of UTF-8, over the 4 KiB cap
    async with tether.Turn.open([note], sidecar=None) as turn:
        assert (await turn.execute("c1", "note", {"text": text})).ok
        (row,) = await turn.audit_log()
    whole = json.dumps({"text": text}, ensure_ascii=False, separators=(",", ":")).encode()
    assert row.args_truncated is True and row.args["$truncated"] is True, row.args
    assert row.args["bytes"] == len(whole) and row.args["sha256"] == hashlib.sha256(whole).hexdigest(), row.args
    assert isinstance(row.args["head"], str) and whole.decode().startswith(row.args["head"])


async def test_a_7_kb_script_is_kept_whole_and_valid_json_in_the_audit_log() -> None:
    # 7 KB of code, over the 4 KiB `audit_args_bytes`: a comment block, then 1.
    code = "".join(f"# line {n:04} of a long script, kept whole by the audit\n" for n in range(130)) + "1"
    assert len(code) > 7000
    async with tether.Turn.open([]) as turn:
        result = await turn.execute("c1", "run_script", {"code": code, "input": {"n": 1}})
        assert result.ok, result.error
        (row,) = await turn.audit_log()
    assert row.args == {"code": code, "input": {"n": 1}}
    assert row.args_truncated is False
