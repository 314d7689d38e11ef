#!/usr/bin/env bash
# The peers `./x bench` measures Tether against, installed under target/ and
# only when missing (pinned, so a rerun measures the same versions):
#   target/bench/py   a venv of the machine's python3 with pydantic-monty
#                     (the monty guest's version: same interpreter, its pool API);
#                     its python is also the CPython peer
#   target/bench/npm  pyodide from npm (loads offline from node_modules)
#   target/bench/eryx the eryx peer (bench/peers/eryx/, a cargo workspace of
#                     its own with its own wasmtime), built with Rust 1.99.1
#                     (eryx's rust-version; rustup installs it when missing),
#                     and its compiled sandbox component (runtime.cwasm);
#                     skipped when `--only` leaves eryx out (the first build
#                     takes about 20 minutes on 2 cores)
# Takes `./x bench`'s arguments; prints the paths as shell assignments for `eval`.
set -euo pipefail
cd "$(dirname "$0")/../.."

# eryx unless `--only` picks other systems only.
wants_eryx=1
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
        --only) [ "$wants_eryx" = 1 ] && wants_eryx=0; [ "${args[i + 1]:-}" = eryx ] && wants_eryx=2 ;;
        --only=eryx) wants_eryx=2 ;;
        --only=*) [ "$wants_eryx" = 1 ] && wants_eryx=0 ;;
    esac
done

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

if [ "$wants_eryx" != 0 ]; then
    ERYX_TOOLCHAIN=1.99.1
    eryx_dir="$(pwd)/$root/eryx"
    if ! rustup run "$ERYX_TOOLCHAIN" rustc --version >/dev/null 2>&1; then
        rustup toolchain install "$ERYX_TOOLCHAIN" --profile minimal >&2
    fi
    # A no-op once built. Its own target dir and lock file: the workspace's
    # builds never wait on it, and never build its wasmtime.
    CARGO_TARGET_DIR="$eryx_dir/target" cargo "+$ERYX_TOOLCHAIN" build --release --locked \
        --manifest-path bench/peers/eryx/Cargo.toml >&2
    eryx_bin="$eryx_dir/target/release/tether-eryx-peer"
    # The sandbox component: linked from the CPython libraries eryx ships,
    # pre-initialised and compiled once per build of the peer.
    if [ ! -f "$eryx_dir/runtime.cwasm" ] || [ "$eryx_bin" -nt "$eryx_dir/runtime.cwasm" ]; then
        "$eryx_bin" --prepare --runtime "$eryx_dir/runtime.cwasm" >&2
    fi
    echo "TETHER_BENCH_ERYX=$eryx_bin"
    echo "TETHER_BENCH_ERYX_RUNTIME=$eryx_dir/runtime.cwasm"
fi
