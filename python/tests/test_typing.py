"""The package ships its types (`py.typed`, `_native.pyi`): mypy checks code
that uses it, the extension included, and catches a wrong call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HOW, REPO

WRONG = """
import tether

async def main() -> None:
    turn = await tether.Turn.open([], sidecar=None)
    await turn.execute(1, "tool", {})
    tether._native.codes(3)
"""


def mypy(*paths: str) -> subprocess.CompletedProcess[str]:
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.fail(f"mypy is missing; {HOW}")
    cache = REPO / "target" / "py" / "mypy-cache"
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), *paths],
        capture_output=True, text=True, cwd=REPO,
    )


def test_mypy_accepts_the_package_and_the_quickstart_and_flags_wrong_calls(tmp_path: Path) -> None:
    ok = mypy("python/tether", "python/examples/quickstart.py")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    wrong = tmp_path / "wrong.py"
    wrong.write_text(WRONG)
    flagged = mypy(str(wrong))
    assert flagged.returncode == 1
    assert 'Argument 1 to "execute" of "Turn" has incompatible type "int"; expected "str"' in flagged.stdout
    assert 'Too many arguments for "codes"' in flagged.stdout
