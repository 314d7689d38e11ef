"""What the Python peers share: the command line every peer driver takes,
the demo tools answered on the host, and the JSON the Rust bench reads.

The tools mirror `DemoWorld::execute` (backend/cli/src/demo.rs) over the
data the bench writes to `--world` from that same `DemoWorld`, plus `noop`.
"""

import argparse
import json
import pathlib
import sys
import threading
import time

PRELUDE = (pathlib.Path(__file__).with_name("prelude.py")).read_text()


def parse_args(modes):
    """The flags of every peer driver (`pyodide_peer.mjs` takes the same)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--script", required=True, help="the Python file to run")
    parser.add_argument("--input", default="null", help="the value the script reads as `input`, JSON")
    parser.add_argument("--world", required=True, help="the demo data, JSON (issues, contracts)")
    parser.add_argument("--samples", type=int, default=50, help="timed runs")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs first")
    parser.add_argument("--concurrency", type=int, default=1, help="runs in flight at once")
    parser.add_argument("--mode", choices=modes, default=modes[0])
    args = parser.parse_args()
    if args.samples < 1 or args.warmup < 0 or args.concurrency < 1:
        parser.error("--samples and --concurrency must be at least 1, --warmup at least 0")
    try:
        args.input = json.loads(args.input)
    except json.JSONDecodeError as error:
        parser.error(f"--input is not JSON: {error}")
    args.source = pathlib.Path(args.script).read_text()
    args.world = World(json.loads(pathlib.Path(args.world).read_text()))
    return args


def ok(value):
    return {"ok": True, "value": value}


def failed(code, message):
    return {"ok": False, "error": {"code": code, "message": message}}


class World:
    """The demo's tools over its data; `send_email` only counts."""

    def __init__(self, data):
        self.issues = data["issues"]
        self.contracts = {c["customer_id"]: c for c in data["contracts"]}
        self.sent = 0
        self.lock = threading.Lock()

    def execute(self, name, args):
        """One tool call: the result envelope a Tether script sees."""
        if name == "noop":
            return ok(None)
        if name == "list_issues":
            since = args.get("opened_after", "")
            return ok([dict(i) for i in self.issues if i["opened"] >= since])
        if name == "get_contract":
            customer_id = args.get("customer_id", "")
            contract = self.contracts.get(customer_id)
            if contract is None:
                return failed("not_found", f"no contract on file for customer `{customer_id}`")
            return ok(dict(contract))
        if name == "send_email":
            with self.lock:
                self.sent += 1
                return ok({"message_id": f"msg-{self.sent}"})
        return failed("tool_not_found", f"there is no tool `{name}`")

    TOOLS = ("noop", "list_issues", "get_contract", "send_email")


def call_args(args, kwargs):
    """`call(name, args=None, **kwargs)`'s arguments as one dict."""
    merged = dict(args or {})
    merged.update(kwargs)
    return merged


def report(samples_s, elapsed_s, result, version):
    """Prints what the Rust bench reads: one JSON object on stdout."""
    json.dump(
        {
            "samples_us": [s * 1e6 for s in samples_s],
            "elapsed_s": elapsed_s,
            "result": result,
            "version": version,
        },
        sys.stdout,
    )
    sys.stdout.write("\n")


def clock():
    return time.perf_counter()
