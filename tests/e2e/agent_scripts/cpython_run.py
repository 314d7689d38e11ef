"""Runs one agent-style script under CPython as Tether runs it in the sandbox.

    python3 cpython_run.py SCRIPT.py

The script sees what a Tether script sees (guest-sdk/python/README.md):
`call`, `call_async`, `unwrap`, `input`, and one function per tool whose
name is an identifier, over the same tools (`tools.py`). Its last
expression is its result, converted to JSON as Tether converts it; top-level
`await` works. Prints one JSON line: the result or the exception, what the
script printed, and the calls it made (name and arguments, in order).
"""

import ast
import asyncio
import contextlib
import dataclasses
import io
import json
import math
import sys

import tools

MARK = "!repr: "


def to_json(value, depth=0):
    """The script's result as JSON, as `convert::result_to_json` makes it."""
    if depth > 100:
        return MARK + "<list nested too deep>"
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else MARK + repr(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(item, depth + 1) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(key, str):
                out[key] = to_json(item, depth + 1)
            elif key is None or isinstance(key, (bool, int, float)):
                out[json.dumps(key)] = to_json(item, depth + 1)
            else:
                out[repr(key)] = to_json(item, depth + 1)
        return out
    return MARK + repr(value)


def main(path):
    with open(path, encoding="utf-8") as file:
        source = file.read()
    calls = []

    def invoke(name, args):
        try:
            args = json.loads(json.dumps(args, allow_nan=False))
        except (TypeError, ValueError) as error:
            raise type(error)(f"argument is not JSON-serializable: {error}") from None
        calls.append([name, args])
        answer = tools.execute(name, args)
        if answer["ok"]:
            return {"ok": True, "value": answer["value"], "error": None}
        return {"ok": False, "value": None, "error": {"code": answer["code"], "message": answer["message"]}}

    def merged(function, args, kwargs):
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise TypeError(f"{function}() args must be a dict, not '{type(args).__name__}'")
        args = dict(args)
        for key, value in kwargs.items():
            if key in args:
                raise TypeError(f"{function}() got multiple values for argument '{key}'")
            args[key] = value
        return args

    def call(name, args=None, **kwargs):
        return invoke(name, merged("call", args, kwargs))

    async def call_async(name, args=None, **kwargs):
        return invoke(name, merged("call_async", args, kwargs))

    def unwrap(result):
        if result["ok"]:
            return result["value"]
        raise RuntimeError(f"tool call failed: {result['error']['code']}: {result['error']['message']}")

    def tool_function(tool):
        def function(*positional, **kwargs):
            if len(positional) > 1 or (positional and not isinstance(positional[0], dict)):
                raise TypeError(f"{tool}() takes keyword arguments only, e.g. {tool}(id=7), or a single dict of arguments")
            return invoke(tool, merged(tool, positional[0] if positional else None, kwargs))

        function.__name__ = tool
        return function

    scope = {"__name__": "__main__", "__file__": "main.py", "call": call, "call_async": call_async,
             "unwrap": unwrap, "input": json.loads(json.dumps(tools.INPUT))}
    for name in tools.TOOLS:
        if name.isidentifier():
            scope[name] = tool_function(name)

    tree = ast.parse(source, "main.py")
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1]
        tree.body[-1] = ast.Assign(targets=[ast.Name("__tether_result__", ast.Store())], value=last.value)
        ast.copy_location(tree.body[-1], last)
        ast.fix_missing_locations(tree)
    code = compile(tree, "main.py", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)

    stdout, stderr = io.StringIO(), io.StringIO()
    outcome = {}
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            running = eval(code, scope)
            if asyncio.iscoroutine(running):
                asyncio.run(running)
        outcome["result"] = to_json(scope.get("__tether_result__"))
    except Exception as error:
        message = str(error) or type(error).__name__
        outcome["error"] = {"type": type(error).__name__, "message": message}
    outcome["stdout"] = stdout.getvalue()
    outcome["calls"] = calls
    sys.stdout.write(json.dumps(outcome) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
