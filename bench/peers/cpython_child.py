"""One script in a CPython process of its own, started by `cpython_peer.py`.

Reads one JSON line `{"source", "input"}` on stdin; each tool call is a JSON
line `{"call": name, "args": {...}}` on stdout answered by one line on stdin;
ends with `{"result": value}` (the value of the script's last expression, as
Tether returns it) or `{"error": text}`.
"""

import ast
import asyncio
import json
import sys
import traceback

_out = sys.stdout
sys.stdout = sys.stderr  # the script's prints must not mix with the protocol


def _ask(name, args):
    _out.write(json.dumps({"call": name, "args": args}) + "\n")
    _out.flush()
    return json.loads(sys.stdin.readline())


def _call(name, args=None, **kwargs):
    merged = dict(args or {})
    merged.update(kwargs)
    return _ask(name, merged)


async def _call_async(name, args=None, **kwargs):
    return _call(name, args, **kwargs)


def _main():
    job = json.loads(sys.stdin.readline())
    namespace = {"input": job["input"], "call": _call, "call_async": _call_async, "__name__": "__main__"}
    for tool in ("noop", "list_issues", "get_contract", "send_email"):
        namespace[tool] = lambda args=None, _tool=tool, **kwargs: _call(_tool, args, **kwargs)
    tree = ast.parse(job["prelude"] + "\n" + job["source"])
    # The last expression is the result, as in Tether and monty.
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        tree.body[-1] = ast.Assign(targets=[ast.Name("__result__", ast.Store())], value=tree.body[-1].value)
        ast.fix_missing_locations(tree)
    code = compile(tree, "main.py", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    outcome = eval(code, namespace)
    if asyncio.iscoroutine(outcome):
        asyncio.run(outcome)
    return namespace.get("__result__")


try:
    reply = {"result": _main()}
except Exception:  # the script's failure is reported, not raised
    reply = {"error": traceback.format_exc()}
_out.write(json.dumps(reply) + "\n")
_out.flush()
