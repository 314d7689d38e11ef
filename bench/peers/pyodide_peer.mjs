// Pyodide (npm `pyodide`, CPython compiled to WebAssembly) in node, timed
// around one run: from handing over the script to its result. Tool calls go
// to `host_call`, answered here in JavaScript over the same data.
//
// Modes:
//   warm  one Pyodide instance for every run, a fresh globals dict per run
//   cold  a new Pyodide instance per run (its load is part of the run)
//
// Flags as the Python peers' (world.py): --script --input --world --samples
// --warmup --concurrency --mode. Node runs one interpreter at a time on its
// thread, so --concurrency must be 1. Prints one JSON object on stdout.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { performance } from "node:perf_hooks";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

function fail(message) {
  process.stderr.write(`pyodide peer: ${message}\n`);
  process.exit(2);
}

function options() {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        script: { type: "string" },
        input: { type: "string", default: "null" },
        world: { type: "string" },
        samples: { type: "string", default: "50" },
        warmup: { type: "string", default: "5" },
        concurrency: { type: "string", default: "1" },
        mode: { type: "string", default: "warm" },
        "node-modules": { type: "string" },
      },
    }));
  } catch (error) {
    fail(error.message);
  }
  if (!values.script || !values.world) fail("--script and --world are required");
  const samples = Number(values.samples), warmup = Number(values.warmup);
  if (!Number.isInteger(samples) || samples < 1 || !Number.isInteger(warmup) || warmup < 0) {
    fail("--samples must be at least 1 and --warmup at least 0");
  }
  if (values.concurrency !== "1") fail("--concurrency must be 1: node runs one Pyodide interpreter at a time");
  if (!["warm", "cold"].includes(values.mode)) fail(`--mode must be warm or cold, not \`${values.mode}\``);
  let input;
  try {
    input = JSON.parse(values.input);
  } catch (error) {
    fail(`--input is not JSON: ${error.message}`);
  }
  return { ...values, samples, warmup, input };
}

// The demo tools, as DemoWorld::execute (backend/cli/src/demo.rs) and world.py answer them.
function world(data) {
  const contracts = new Map(data.contracts.map((c) => [c.customer_id, c]));
  let sent = 0;
  const ok = (value) => ({ ok: true, value });
  const failed = (code, message) => ({ ok: false, error: { code, message } });
  return (name, args) => {
    switch (name) {
      case "noop":
        return ok(null);
      case "list_issues": {
        const since = args.opened_after ?? "";
        return ok(data.issues.filter((i) => i.opened >= since).map((i) => ({ ...i })));
      }
      case "get_contract": {
        const id = args.customer_id ?? "";
        const contract = contracts.get(id);
        return contract ? ok({ ...contract }) : failed("not_found", `no contract on file for customer \`${id}\``);
      }
      case "send_email":
        sent += 1;
        return ok({ message_id: `msg-${sent}` });
      default:
        return failed("tool_not_found", `there is no tool \`${name}\``);
    }
  }
}

// Python-side glue: calls cross to JavaScript as JSON text, as Tether's cross its ABI as JSON.
const GLUE = `
import json as _json
def call(name, args=None, **kwargs):
    merged = dict(args or {})
    merged.update(kwargs)
    return _json.loads(host_call(name, _json.dumps(merged)))
async def call_async(name, args=None, **kwargs):
    return call(name, args, **kwargs)
def _tool(name):
    return lambda args=None, **kwargs: call(name, args, **kwargs)
noop, list_issues, get_contract, send_email = (_tool(n) for n in ("noop", "list_issues", "get_contract", "send_email"))
`;

async function main() {
  const opts = options();
  const here = new URL(".", import.meta.url).pathname;
  const modules = opts["node-modules"] ?? process.env.TETHER_BENCH_NODE_MODULES;
  if (!modules) fail("--node-modules (or TETHER_BENCH_NODE_MODULES) must name the folder holding `pyodide`");
  const { loadPyodide, version } = require(`${modules}/pyodide/pyodide.js`);
  const source = readFileSync(opts.script, "utf8");
  const prelude = readFileSync(`${here}/prelude.py`, "utf8");
  const execute = world(JSON.parse(readFileSync(opts.world, "utf8")));
  const hostCall = (name, args) => JSON.stringify(execute(name, JSON.parse(args)));
  const load = () => loadPyodide({ stdout: () => {}, stderr: () => {} });

  // An instance with the glue and prelude run once in a base namespace;
  // each run gets a copy of it (fresh globals, the functions already made).
  const instance = async () => {
    const pyodide = await load();
    const base = pyodide.globals.get("dict")();
    base.set("host_call", hostCall);
    await pyodide.runPythonAsync(GLUE + prelude, { globals: base });
    return { pyodide, base };
  };
  const shared = opts.mode === "warm" ? await instance() : null;
  const runOnce = async () => {
    const { pyodide, base } = shared ?? (await instance());
    const globals = base.copy();
    globals.set("input", pyodide.toPy(opts.input));
    const value = await pyodide.runPythonAsync(source, { globals });
    const result = value?.toJs ? value.toJs({ dict_converter: Object.fromEntries }) : value;
    value?.destroy?.();
    globals.destroy();
    return result;
  };

  const samples = [];
  let result;
  for (let i = 0; i < opts.warmup; i++) await runOnce();
  const started = performance.now();
  for (let i = 0; i < opts.samples; i++) {
    const t = performance.now();
    result = await runOnce();
    samples.push((performance.now() - t) * 1000);
  }
  const elapsed = (performance.now() - started) / 1000;
  process.stdout.write(JSON.stringify({ samples_us: samples, elapsed_s: elapsed, result: result ?? null, version }) + "\n");
}

main().catch((error) => fail(error.stack ?? String(error)));
