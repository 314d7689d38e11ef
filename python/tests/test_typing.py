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


ADAPTER_USE = """
from typing import Any, Dict, List
from agents import Agent, RunState, Runner
from pydantic_ai import Agent as PydanticAgent, DeferredToolRequests, DeferredToolResults
import tether
from tether.adapters import openai_agents, pydantic_ai

def send(to: str) -> Dict[str, Any]:
    return {"to": to}

async def main() -> None:
    async with openai_agents.open_turn([send], audit="memory:", max_tool_calls=10) as turn_tools:
        Agent(name="a", tools=turn_tools.tools)
    async with pydantic_ai.open_turn([send], approval_timeout=3.0) as toolset:
        PydanticAgent("test", toolsets=[toolset.toolset])
    if tether.codes.APPROVAL_DENIED == "approval_denied":
        pass

async def later(saved: str, turn_id: str, requests: DeferredToolRequests) -> None:
    async with openai_agents.open_turn([send], approver=tether.LATER, audit="sqlite:a.db") as turn_tools:
        agent = Agent(name="a", tools=turn_tools.tools)
        shown: List[openai_agents.Waiting] = await turn_tools.pending((await Runner.run(agent, "x")).interruptions)
        state = await RunState.from_string(agent, saved)
        still: List[openai_agents.Waiting] = await turn_tools.answer(state, turn_id=turn_id, approve=True, decided_by="a")
    listed: List[pydantic_ai.Waiting] = pydantic_ai.pending(requests)
    results: DeferredToolResults = pydantic_ai.answer(requests, approve=False, decided_by="b", reason="no", call_id="c")
    print(shown, still, listed[0].calls[0].args, results)
"""

ADAPTER_WRONG = """
from tether.adapters import openai_agents

async def main() -> None:
    async with openai_agents.open_turn([], max_tool_calls="ten") as turn_tools:
        pass
"""


def test_mypy_accepts_the_adapters_as_the_frameworks_type_them_and_checks_their_options(tmp_path: Path) -> None:
    use = tmp_path / "use.py"
    use.write_text(ADAPTER_USE)
    ok = mypy(str(use))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    wrong = tmp_path / "wrong_options.py"
    wrong.write_text(ADAPTER_WRONG)
    flagged = mypy(str(wrong))
    assert flagged.returncode == 1 and '"max_tool_calls"' in flagged.stdout, flagged.stdout


def test_turn_options_are_exactly_the_keyword_options_of_turn_open() -> None:
    import inspect

    import tether

    keywords = [p.name for p in inspect.signature(tether.Turn.open).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert list(tether.TurnOptions.__annotations__) == keywords


def test_pyright_accepts_the_adapters_as_the_frameworks_type_them(tmp_path: Path) -> None:
    import os

    try:
        import pyright  # noqa: F401
    except ImportError:
        pytest.fail(f"pyright is missing; {HOW}")
    use = tmp_path / "use.py"
    use.write_text(ADAPTER_USE)
    wrong = tmp_path / "wrong_options.py"
    wrong.write_text(ADAPTER_WRONG)
    env = {**os.environ, "PYRIGHT_PYTHON_CACHE_DIR": str(REPO / "target" / "py" / "pyright-cache")}
    checked = subprocess.run(
        [sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "--outputjson", str(use), str(wrong)],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )
    import json

    report = json.loads(checked.stdout)
    errors = [(Path(d["file"]).name, d["message"]) for d in report["generalDiagnostics"] if d["severity"] == "error"]
    assert [name for name, _ in errors] == ["wrong_options.py"], errors
    assert '"max_tool_calls"' in errors[0][1], errors
