"""The tools of the parked-run tests (`test_parked.py`), importable by the
fresh processes those tests start, so a run parked by one process is
answered by another with the same tool definitions."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Dict, List, Union

import tether

#: Set in a process's environment: `wire` writes this file when it starts
#: and then never returns (a process killed mid-tool).
HANG_MARKER = "PARKED_WORLD_HANG_MARKER"


def tools(effects: Union[str, Path]) -> List[tether.Tool]:
    """`wire(amount)`, which needs approval and appends a line to `effects`
    for each transfer it makes, and the read-only `balance()`."""
    effects = Path(effects)

    async def wire(amount: int) -> Dict[str, int]:
        """Wire `amount` to the supplier. Moves money: needs approval."""
        marker = os.environ.get(HANG_MARKER)
        if marker:
            Path(marker).write_text("started")
            await asyncio.sleep(3600)
        with effects.open("a") as file:
            file.write(f"wired {amount}\n")
        return {"sent": amount}

    def balance() -> int:
        """The account's balance."""
        return 1000

    return [tether.make_tool(wire, requires_approval=True), tether.make_tool(balance, read_only=True)]
