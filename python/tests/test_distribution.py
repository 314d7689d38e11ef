"""What a new user reads before the code: the distribution's name is one no
one else holds on PyPI (issue 26, item 10), the README says it is not yet
published, every install hint names a package that exists for it, and the
README's code awaits what must be awaited (item 9)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import tether

PYTHON = Path(__file__).resolve().parents[1]
README = (PYTHON / "README.md").read_text()

#: PyPI's `tether-agent` is an unrelated MQTT library: installing it by
#: mistake installs someone else's code.
TAKEN = "tether-agent"


def distribution_name() -> str:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - the test venv is 3.11
        pytest.skip("tomllib needs Python 3.11")
    with open(PYTHON / "pyproject.toml", "rb") as file:
        return str(tomllib.load(file)["project"]["name"])


def test_the_distribution_has_a_name_of_its_own_and_the_readme_says_it_is_not_yet_published() -> None:
    name = distribution_name()
    assert name == "tether-sandbox" and name != TAKEN
    assert f"The distribution is `{name}` (import name `tether`)" in README
    assert re.search(r"\*\*not\s+yet published\*\* on PyPI", README)
    # The taken name appears only where it is named as someone else's.
    assert [line for line in README.splitlines() if TAKEN in line] == [
        "`tether-agent` is an unrelated package.)"
    ], "the README names `tether-agent` only to say it is not this"


def test_no_install_hint_names_a_package_that_is_not_ours_or_the_frameworks() -> None:
    sources = [*PYTHON.glob("tether/**/*.py"), PYTHON / "README.md"]
    for source in sources:
        for hint in re.findall(r"pip install [^\n`)]+", source.read_text()):
            assert TAKEN not in hint, f"{source}: {hint}"
    # Without a framework, its adapter says which package to install.
    from tether.adapters import openai_agents, pydantic_ai

    assert "pip install openai-agents" in Path(openai_agents.__file__).read_text()
    assert "pip install 'pydantic-ai-slim[openai]'" in Path(pydantic_ai.__file__).read_text()


def test_the_readmes_code_awaits_every_coroutine_it_calls() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "the README has Python examples"
    coroutines = ["read_audit_log", "tether.pending", "tether.answer", "turn.audit_log", "turn.ledger"]
    for block in blocks:
        for line in block.splitlines():
            for name in coroutines:
                if re.search(rf"(?<![\w.]){re.escape(name)}\(", line) and not re.search(rf"await\s+{re.escape(name)}\(", line):
                    pytest.fail(f"the README calls `{name}` without `await`: {line.strip()}")
    assert "await tether.read_audit_log" in README


async def test_a_sqlite_path_in_a_folder_that_does_not_exist_fails_at_open_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder" / "audit.db"
    with pytest.raises(tether.AuditStoreError):
        async with tether.Turn.open([], audit=f"sqlite:{missing}"):
            pass
    assert not missing.parent.exists(), "the folder was not created"
