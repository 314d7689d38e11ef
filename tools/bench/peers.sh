#!/usr/bin/env bash
# The peers `./x bench` measures Tether against, installed under target/ and
# only when missing (pinned, so a rerun measures the same versions):
#   target/bench/py   a venv of the machine's python3 with pydantic-monty
#                     (the monty guest's version: same interpreter, its pool API);
#                     its python is also the CPython peer
#   target/bench/npm  pyodide from npm (loads offline from node_modules)
# Prints the two paths as shell assignments for `eval`.
set -euo pipefail
cd "$(dirname "$0")/../.."

MONTY_VERSION=1.4.0
PYODIDE_VERSION=314.0.7
root=target/bench

venv="$root/py"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('pydantic-monty') != '$MONTY_VERSION')" >/dev/null 2>&1; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pydantic-monty==$MONTY_VERSION" >&2
fi

npm_dir="$root/npm"
if [ "$(node -p "require('./$npm_dir/node_modules/pyodide/package.json').version" 2>/dev/null)" != "$PYODIDE_VERSION" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        echo "x: npm (Node.js 18+) is required for the Pyodide peer" >&2
        exit 1
    fi
    mkdir -p "$npm_dir"
    [ -f "$npm_dir/package.json" ] || echo '{"private": true}' >"$npm_dir/package.json"
    (cd "$npm_dir" && npm install --no-audit --no-fund --loglevel=error --save-exact "pyodide@$PYODIDE_VERSION" >&2)
fi

echo "TETHER_BENCH_PYTHON=$(pwd)/$venv/bin/python"
echo "TETHER_BENCH_NODE_MODULES=$(pwd)/$npm_dir/node_modules"
