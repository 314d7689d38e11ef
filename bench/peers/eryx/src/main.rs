//! eryx (crates.io `eryx`: CPython 3.14 compiled to WebAssembly, in
//! wasmtime) as a peer of Tether's bench, timed around one run: from
//! `Sandbox::execute` to its result. Each run is a fresh instance of a
//! pre-initialised interpreter (eryx's stateless `execute`), as each Tether
//! run is a fresh instance. Tool calls are eryx callbacks answered here over
//! the demo data, as the other peers answer them (`world.py`).
//!
//!     tether-eryx-peer --prepare --runtime FILE
//!         links the sandbox component from the CPython libraries the
//!         eryx-runtime crate ships, snapshots an initialised interpreter
//!         (eryx's `preinit`), compiles it to native code and writes FILE
//!         (once: `tools/bench/peers.sh` does it after building this)
//!     tether-eryx-peer --runtime FILE --script S --input JSON --world W
//!         --samples N --warmup N --concurrency N --mode execute
//!         runs the workload; prints one JSON object (`samples_us`,
//!         `elapsed_s`, `result`, `version`) as every peer driver does
//!
//! eryx's callbacks are async functions only (`await get_contract(...)`): a
//! synchronous call cannot reach the host. So the script is rewritten once,
//! untimed, before the runs, by Python's `ast` in the sandbox: each call of a
//! tool function or of `call` is awaited (top-level `await` works in eryx),
//! and the last expression is assigned to the result variable eryx returns.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use eryx::{CallbackError, DynamicCallback, ExecuteResult, RuntimeLibrary, Sandbox};
use serde_json::{Value, json};

/// The eryx crate's version, pinned in Cargo.toml.
const ERYX_VERSION: &str = "0.10.1";

/// The variable eryx returns as the run's result.
const RESULT: &str = "__tether_result__";

/// What every peer runs before the script (`unwrap`), shared with the others.
const PRELUDE: &str = include_str!("../../prelude.py");

/// The tools a workload may call, with their parameters (all strings).
const TOOLS: [(&str, &[&str]); 4] = [
    ("noop", &[]),
    ("list_issues", &["opened_after"]),
    ("get_contract", &["customer_id"]),
    ("send_email", &["to", "subject", "body"]),
];

/// Turns the script into what eryx runs: tool calls awaited, the last
/// expression assigned to the result variable. Runs once in the sandbox;
/// its input is the script as a JSON string in `SOURCE`.
const REWRITE: &str = r#"
import ast as _ast
class _Awaited(_ast.NodeTransformer):
    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, _ast.Name) and node.func.id in TOOLS:
            return _ast.Await(node)
        return node
_tree = _Awaited().visit(_ast.parse(SOURCE))
if _tree.body and isinstance(_tree.body[-1], _ast.Expr):
    _tree.body[-1] = _ast.Assign([_ast.Name(RESULT, _ast.Store())], _tree.body[-1].value)
_ast.fix_missing_locations(_tree)
__tether_result__ = _ast.unparse(_tree)
"#;

#[derive(Debug)]
struct Args {
    runtime: PathBuf,
    prepare: bool,
    script: Option<PathBuf>,
    input: Value,
    world: Option<PathBuf>,
    samples: usize,
    warmup: usize,
    concurrency: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        runtime: PathBuf::new(),
        prepare: false,
        script: None,
        input: Value::Null,
        world: None,
        samples: 50,
        warmup: 5,
        concurrency: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--prepare" {
            args.prepare = true;
            continue;
        }
        let value = it.next().with_context(|| format!("`{flag}` needs a value"))?;
        let number = |value: &str| value.parse::<usize>().with_context(|| format!("`{flag} {value}`: not a count"));
        match flag.as_str() {
            "--runtime" => args.runtime = value.into(),
            "--script" => args.script = Some(value.into()),
            "--input" => args.input = serde_json::from_str(&value).context("--input is not JSON")?,
            "--world" => args.world = Some(value.into()),
            "--samples" => args.samples = number(&value)?,
            "--warmup" => args.warmup = number(&value)?,
            "--concurrency" => args.concurrency = number(&value)?,
            "--mode" if value == "execute" => {}
            "--mode" => bail!("--mode must be `execute`, not `{value}`"),
            _ => bail!("unknown flag `{flag}`"),
        }
    }
    if args.runtime.as_os_str().is_empty() {
        bail!("--runtime FILE is required: the compiled sandbox component (`--prepare` writes it)");
    }
    if !args.prepare && (args.samples < 1 || args.concurrency < 1) {
        bail!("--samples and --concurrency must be at least 1");
    }
    Ok(args)
}

/// The demo's tools over its data, as `bench/peers/world.py` answers them.
struct World {
    issues: Vec<Value>,
    contracts: Vec<Value>,
    sent: AtomicUsize,
}

impl World {
    fn read(path: &Path) -> anyhow::Result<World> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading `{}`", path.display()))?;
        let data: Value = serde_json::from_str(&text).context("the world is not JSON")?;
        let list = |key: &str| data[key].as_array().cloned().with_context(|| format!("the world has no `{key}`"));
        Ok(World { issues: list("issues")?, contracts: list("contracts")?, sent: AtomicUsize::new(0) })
    }

    fn execute(&self, name: &str, args: &Value) -> Value {
        let arg = |key: &str| args.get(key).and_then(Value::as_str).unwrap_or_default();
        let ok = |value: Value| json!({"ok": true, "value": value});
        match name {
            "noop" => ok(Value::Null),
            "list_issues" => {
                let since = arg("opened_after");
                let issues = self.issues.iter().filter(|i| i["opened"].as_str().unwrap_or_default() >= since);
                ok(issues.cloned().collect())
            }
            "get_contract" => {
                let id = arg("customer_id");
                match self.contracts.iter().find(|c| c["customer_id"] == id) {
                    Some(contract) => ok(contract.clone()),
                    None => {
                        json!({"ok": false, "error": {"code": "not_found", "message": format!("no contract on file for customer `{id}`")}})
                    }
                }
            }
            "send_email" => {
                let sent = self.sent.fetch_add(1, Ordering::Relaxed) + 1;
                ok(json!({"message_id": format!("msg-{sent}")}))
            }
            other => {
                json!({"ok": false, "error": {"code": "tool_not_found", "message": format!("there is no tool `{other}`")}})
            }
        }
    }
}

fn callbacks(world: &Arc<World>) -> Vec<DynamicCallback> {
    TOOLS
        .iter()
        .map(|&(name, params)| {
            let world = Arc::clone(world);
            let handler = move |args: Value| {
                let world = Arc::clone(&world);
                Box::pin(async move { Ok::<_, CallbackError>(world.execute(name, &args)) })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, CallbackError>> + Send>>
            };
            params
                .iter()
                .fold(DynamicCallback::builder(name, format!("the demo's `{name}`"), handler), |builder, param| {
                    builder.param(*param, "string", *param, true)
                })
                .build()
        })
        .collect()
}

/// What runs before each script: the input, the shared prelude, and `call`
/// / `call_async` over the callbacks (eryx defines one async function per
/// callback).
fn preamble(input: &Value) -> String {
    let tools: Vec<String> = TOOLS.iter().map(|(name, _)| format!("{name:?}: {name}")).collect();
    format!(
        "import json as _json\ninput = _json.loads({input})\n{PRELUDE}\n_TOOLS = {{{tools}}}\n\
         async def call(name, args=None, **kwargs):\n    merged = dict(args or {{}})\n    merged.update(kwargs)\n    \
         return await _TOOLS[name](**merged)\ncall_async = call\n",
        // A JSON string is a Python string literal too.
        input = Value::from(input.to_string()),
        tools = tools.join(", "),
    )
}

/// The compiled component, made once by `--prepare`: eryx's pre-initialised
/// interpreter (with the tools' callbacks declared, so an instance skips
/// their setup), compiled to native code.
async fn prepare(path: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let stdlib = eryx::embedded_stdlib::EmbeddedStdlib::get().context("extracting eryx's standard library")?;
    let declarations = callbacks(&Arc::new(World { issues: vec![], contracts: vec![], sent: AtomicUsize::new(0) }))
        .iter()
        .map(|callback| eryx::preinit::callback_declaration(callback))
        .collect();
    let options =
        eryx::preinit::PreInitOptions::new(stdlib.path()).imports(["json", "ast", "asyncio"]).callbacks(declarations);
    let component = eryx::preinit::pre_initialize_with_options(options).await.context("pre-initialising CPython")?;
    let compiled = eryx::PythonExecutor::precompile(&component).context("compiling the component")?;
    let partial = path.with_extension("partial");
    std::fs::write(&partial, &compiled).with_context(|| format!("writing `{}`", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing `{}`", path.display()))?;
    eprintln!(
        "eryx peer: prepared `{}` ({:.1} MB) in {:.1} s",
        path.display(),
        compiled.len() as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn sandbox(runtime: &Path, world: &Arc<World>, input: &Value) -> anyhow::Result<Sandbox> {
    let callbacks =
        callbacks(world).into_iter().map(|callback| Box::new(callback) as Box<dyn eryx::Callback>).collect();
    // SAFETY: the file is the one `--prepare` compiled with this binary's
    // eryx and wasmtime (tools/bench/peers.sh writes it after each build).
    #[allow(unsafe_code)]
    let builder = unsafe { Sandbox::builder().with_precompiled_file(runtime) };
    let sandbox = builder
        .with_embedded_stdlib()?
        .with_callbacks(callbacks)
        .with_library(RuntimeLibrary::new().with_preamble(preamble(input)))
        .with_result_variable(RESULT)
        // Tracing (`sys.settrace` on every line) is on by default; its cost
        // grows with the Python run, and nothing here reads the trace.
        .with_trace_collection(false)
        .with_resource_limits(eryx::ResourceLimits::default().with_execution_timeout(Duration::from_secs(600)))
        .build()?;
    Ok(sandbox)
}

fn result(outcome: &ExecuteResult) -> anyhow::Result<Value> {
    match (&outcome.result, &outcome.result_error) {
        (Some(json), _) => serde_json::from_str(json).context("the result is not JSON"),
        (None, Some(error)) => bail!("the result has no JSON form: {error}"),
        (None, None) => Ok(Value::Null),
    }
}

async fn measure(args: Args) -> anyhow::Result<()> {
    let script = args.script.as_deref().context("--script is required")?;
    let source = std::fs::read_to_string(script).with_context(|| format!("reading `{}`", script.display()))?;
    let world = Arc::new(World::read(args.world.as_deref().context("--world is required")?)?);
    let sandbox = Arc::new(sandbox(&args.runtime, &world, &args.input)?);

    // Untimed: the script as eryx runs it, and CPython's version.
    let names: Vec<&str> = TOOLS.iter().map(|(name, _)| *name).chain(["call"]).collect();
    let rewrite = format!(
        "SOURCE = {source}\nTOOLS = {names}\nRESULT = {RESULT:?}\n{REWRITE}",
        source = Value::from(source.as_str()),
        names = json!(names),
    );
    let rewritten = result(&sandbox.execute(&rewrite).await.context("rewriting the script")?)?;
    let code = rewritten.as_str().context("the rewrite returned no text")?.to_owned();
    let version = result(&sandbox.execute("import sys\n__tether_result__ = sys.version.split()[0]").await?)?;
    let version = format!("{ERYX_VERSION} (CPython {})", version.as_str().unwrap_or("?"));

    let remaining = Arc::new(AtomicUsize::new(args.warmup + args.samples));
    let started = Instant::now();
    let mut runners = tokio::task::JoinSet::new();
    for _ in 0..args.concurrency {
        let (sandbox, code, remaining) = (Arc::clone(&sandbox), code.clone(), Arc::clone(&remaining));
        runners.spawn(async move {
            let mut timed = Vec::new();
            // Runs are handed out in order: the first `warmup` are untimed.
            while let Some(left) = remaining.try_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).ok() {
                let at = Instant::now();
                let outcome = sandbox.execute(&code).await.context("a run failed")?;
                let elapsed = at.elapsed();
                let value = result(&outcome)?;
                if left <= args.samples {
                    timed.push((elapsed, value));
                }
            }
            anyhow::Ok(timed)
        });
    }
    let mut samples = Vec::new();
    while let Some(done) = runners.join_next().await {
        samples.extend(done.context("a runner panicked")??);
    }
    let elapsed = started.elapsed();
    let last = samples.last().map(|(_, value)| value.clone()).unwrap_or(Value::Null);
    let report = json!({
        "samples_us": samples.iter().map(|(d, _)| d.as_secs_f64() * 1e6).collect::<Vec<_>>(),
        "elapsed_s": elapsed.as_secs_f64(),
        "result": last,
        "version": version,
    });
    println!("{report}");
    Ok(())
}

#[tokio::main]
async fn main() {
    let outcome = match parse_args() {
        Ok(args) if args.prepare => prepare(&args.runtime).await,
        Ok(args) => measure(args).await,
        Err(error) => Err(error),
    };
    if let Err(error) = outcome {
        eprintln!("eryx peer: {error:#}");
        std::process::exit(2);
    }
}
