//! Agent-style scripts in the sandbox and under CPython (issue 25,
//! "Measure"): chains of tool calls as models write them (loops,
//! comprehensions, f-strings, `json`/`re`/`datetime`, `gather`, classes,
//! generators, custom exceptions, …), each run twice over the same tools:
//!
//! - in Tether: the Python guest in a real sidecar, its calls answered by
//!   this test through the real gRPC stream;
//! - under CPython (`TETHER_PYTHON`, else `python3`; 3.11 or later), with
//!   `cpython_run.py` giving the script what a Tether script sees.
//!
//! The tools and their data are defined once, in `tools.py`: CPython imports
//! it, and the sandbox's calls reach the same functions through one
//! `tools.py --serve` process. Every tool is a pure function of its
//! arguments, so both sides see the same results.
//!
//! Compared: the result (or the exception's type and message), what the
//! script printed, and the calls it made (name and arguments, in call
//! order). A script that differs must be listed in `expected_differences.txt`
//! with why; a listed script that no longer differs fails the test too, so
//! the list stays true. Run with `--nocapture` for the counts and every
//! difference.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tether_backend::{CallHandler, RunOutcome, RunRequest, ScriptCall, SidecarClient, ToolDef, ToolOutcome, pb};
use tokio::{sync::Semaphore, task::JoinSet};

use crate::support::sidecar;

/// The committed differences: `<script> <reason>` per line, `#` comments.
const EXPECTED_DIFFERENCES: &str = include_str!("expected_differences.txt");

/// Scripts in flight at once in the sidecar.
const SANDBOX_CONCURRENCY: usize = 6;

/// CPython processes at once.
const CPYTHON_CONCURRENCY: usize = 2;

/// The parent call id of every sandbox run: calls get `call_1/<n>`.
const PARENT_CALL: &str = "call_1";

#[tokio::test(flavor = "multi_thread")]
async fn agent_style_scripts_behave_in_the_sandbox_as_under_cpython() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/agent_scripts");
    let python = python();
    let scripts = Arc::new(crate::corpus::read_py_files(&dir.join("scripts")));
    let expected = crate::corpus::listed(EXPECTED_DIFFERENCES);

    let cpython = {
        let (python, dir, scripts) = (python.clone(), dir.clone(), Arc::clone(&scripts));
        tokio::spawn(async move { run_cpython(&python, &dir, &scripts).await })
    };
    let server = Arc::new(ToolServer::start(&python, &dir));
    let (_sidecar, client) = sidecar().await;
    let sandbox = run_sandbox(&client, &server, &scripts).await;
    let cpython = cpython.await.expect("the CPython runs finish");

    let mut unexpected = Vec::new();
    let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut report = Vec::new();
    for (((file, _), sandbox), cpython) in scripts.iter().zip(&sandbox).zip(&cpython) {
        let differences = sandbox.differences(cpython);
        if !differences.is_empty() {
            report.push(format!("{file}:\n  {}", differences.join("\n  ")));
        }
        match (differences.is_empty(), expected.get(file.as_str())) {
            (false, None) => unexpected.push(format!("{file} differs:\n  {}", differences.join("\n  "))),
            (true, Some(reason)) => {
                unexpected.push(format!("{file}: listed as a difference ({reason}) but no longer differs"));
            }
            (false, Some(reason)) => by_reason.entry(reason).or_default().push(file),
            (true, None) => {}
        }
    }
    for listed in expected.keys() {
        if !scripts.iter().any(|(file, _)| file == listed) {
            unexpected.push(format!("{listed}: listed but there is no such script"));
        }
    }
    println!("{}", report.join("\n"));
    let different: usize = by_reason.values().map(Vec::len).sum();
    let counts = format!(
        "{} agent-style scripts: {} the same in the sandbox as under CPython, {different} expected to differ",
        scripts.len(),
        scripts.len() - report.len(),
    );
    println!("{counts}");
    for (reason, files) in &by_reason {
        println!("  {} × {reason}: {}", files.len(), files.join(", "));
    }
    assert!(unexpected.is_empty(), "{counts}; unexpected:\n{}", unexpected.join("\n"));
}

/// The CPython to compare with: `TETHER_PYTHON` (what `./x test` sets up),
/// else `python3`, and 3.11 or later.
fn python() -> PathBuf {
    let python = std::env::var_os("TETHER_PYTHON").map_or_else(|| PathBuf::from("python3"), PathBuf::from);
    let output = Command::new(&python)
        .args(["-c", "import sys; print(sys.version_info >= (3, 11))"])
        .output()
        .unwrap_or_else(|error| panic!("the agent-style scripts need CPython 3.11+ (`{}`): {error}", python.display()));
    let answer = String::from_utf8_lossy(&output.stdout);
    assert_eq!(answer.trim(), "True", "the agent-style scripts need CPython 3.11 or later, not `{}`", python.display());
    python
}

/// A CPython process with no bytecode written into the source tree and a
/// fixed hash seed.
fn python_command(python: &Path, dir: &Path) -> Command {
    let mut command = Command::new(python);
    command.current_dir(dir).env("PYTHONHASHSEED", "0").env("PYTHONIOENCODING", "utf-8").arg("-B");
    command
}

/// What one run did, on either side.
#[derive(Debug, Clone)]
struct Observed {
    /// The result, or the exception's type (or the error's kind) and message.
    result: Result<Value, (String, String)>,
    stdout: String,
    /// Name and arguments of each call, in call order.
    calls: Vec<(String, Value)>,
}

impl Observed {
    /// What differs between the sandbox's run (`self`) and CPython's, one line each.
    fn differences(&self, cpython: &Observed) -> Vec<String> {
        let mut out = Vec::new();
        let same_result = match (&self.result, &cpython.result) {
            (Ok(a), Ok(b)) => same_json(a, b),
            (a, b) => a == b,
        };
        if !same_result {
            out.push(format!("result: sandbox {}, CPython {}", show(&self.result), show(&cpython.result)));
        }
        if self.stdout != cpython.stdout {
            out.push(format!("stdout: sandbox {:?}, CPython {:?}", clip(&self.stdout), clip(&cpython.stdout)));
        }
        let same_calls = self.calls.len() == cpython.calls.len()
            && self.calls.iter().zip(&cpython.calls).all(|((n1, a1), (n2, a2))| n1 == n2 && same_json(a1, a2));
        if !same_calls {
            fn names(calls: &[(String, Value)]) -> Vec<&str> {
                calls.iter().map(|(name, _)| name.as_str()).collect()
            }
            let first =
                self.calls.iter().zip(&cpython.calls).position(|((n1, a1), (n2, a2))| n1 != n2 || !same_json(a1, a2));
            let detail = first.map_or(String::new(), |at| {
                format!("; call {} differs: sandbox {:?}, CPython {:?}", at + 1, self.calls[at], cpython.calls[at])
            });
            out.push(format!(
                "calls: sandbox {} {:?}, CPython {} {:?}{detail}",
                self.calls.len(),
                names(&self.calls),
                cpython.calls.len(),
                names(&cpython.calls)
            ));
        }
        out
    }
}

fn show(result: &Result<Value, (String, String)>) -> String {
    match result {
        Ok(value) => clip(&value.to_string()),
        Err((kind, message)) => format!("raised {kind}: {}", clip(message)),
    }
}

fn clip(text: &str) -> String {
    const MAX: usize = 300;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(MAX).collect::<String>())
    }
}

/// JSON equality where a number is an int (compared exactly, by its digits)
/// or a float (compared by value): `4` and `4.0` differ, as in Python, and
/// `1e-05` equals `1e-5`.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.to_string(), y.to_string());
            let is_float = |text: &str| text.contains(['.', 'e', 'E']);
            match (is_float(&x), is_float(&y)) {
                (false, false) => x == y,
                (true, true) => x.parse::<f64>().ok() == y.parse::<f64>().ok(),
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(key, x)| y.get(key).is_some_and(|y| same_json(x, y)))
        }
        _ => a == b,
    }
}

/// Runs every script under CPython, a few at a time, in script order.
async fn run_cpython(python: &Path, dir: &Path, scripts: &Arc<Vec<(String, String)>>) -> Vec<Observed> {
    let permits = Arc::new(Semaphore::new(CPYTHON_CONCURRENCY));
    let mut runs = JoinSet::new();
    for index in 0..scripts.len() {
        let (python, dir, scripts, permits) =
            (python.to_owned(), dir.to_owned(), Arc::clone(scripts), Arc::clone(&permits));
        runs.spawn(async move {
            let _permit = permits.acquire_owned().await.expect("the semaphore is never closed");
            let observed = tokio::task::spawn_blocking(move || run_one_cpython(&python, &dir, &scripts[index].0)).await;
            (index, observed.expect("a CPython run finishes"))
        });
    }
    let mut observed = vec![None; scripts.len()];
    while let Some(done) = runs.join_next().await {
        let (index, outcome) = done.expect("a CPython run finishes");
        observed[index] = Some(outcome);
    }
    observed.into_iter().map(|outcome| outcome.expect("every script ran")).collect()
}

fn run_one_cpython(python: &Path, dir: &Path, file: &str) -> Observed {
    let output = python_command(python, dir)
        .arg("cpython_run.py")
        .arg(Path::new("scripts").join(file))
        .output()
        .unwrap_or_else(|error| panic!("{file}: CPython does not start: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let outcome: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|error| {
        panic!("{file}: cpython_run.py gave no outcome ({error}); stderr:\n{}", String::from_utf8_lossy(&output.stderr))
    });
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let result = match outcome.get("error") {
        Some(error) => Err((text(&error["type"]), text(&error["message"]))),
        None => Ok(outcome["result"].clone()),
    };
    let calls = outcome["calls"]
        .as_array()
        .map(|calls| calls.iter().map(|call| (text(&call[0]), call[1].clone())).collect())
        .unwrap_or_default();
    Observed { result, stdout: text(&outcome["stdout"]), calls }
}

/// `python3 tools.py --serve`: the same tool functions CPython calls, for
/// the sandbox's calls. One request at a time; each is a dictionary look-up.
struct ToolServer {
    child: Child,
    pipes: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
    tools: Vec<ToolDef>,
    input: Value,
}

impl ToolServer {
    fn start(python: &Path, dir: &Path) -> Self {
        let mut child = python_command(python, dir)
            .args(["tools.py", "--serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the tool server starts");
        let stdin = child.stdin.take().expect("the tool server's stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("the tool server's stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the tool server describes its tools");
        let description: Value = serde_json::from_str(&line).expect("the tool server's description is JSON");
        let tools = description["tools"]
            .as_array()
            .expect("a tool list")
            .iter()
            .map(|tool| {
                let text = |key: &str| tool[key].as_str().expect("a tool's name and description").to_owned();
                ToolDef::new(text("name"), text("description"), tool["input_schema"].clone())
            })
            .collect();
        ToolServer { child, pipes: Mutex::new((stdin, stdout)), tools, input: description["input"].clone() }
    }

    fn execute(&self, name: &str, args: &Value) -> ToolOutcome {
        let mut pipes = self.pipes.lock().expect("the tool server's pipes");
        let (stdin, stdout) = &mut *pipes;
        let request = json!({"name": name, "args": args});
        writeln!(stdin, "{request}").and_then(|()| stdin.flush()).expect("the tool server takes a request");
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the tool server answers");
        let answer: Value = serde_json::from_str(&line).expect("the tool server's answer is JSON");
        if answer["ok"] == json!(true) {
            ToolOutcome::Ok(answer["value"].clone())
        } else {
            let text = |key: &str| answer[key].as_str().unwrap_or_default().to_owned();
            ToolOutcome::failed(text("code"), text("message"))
        }
    }
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Answers one run's calls from the tool server and records them.
struct ServedTools {
    server: Arc<ToolServer>,
    /// `(n of call_1/<n>, name, args)`: calls of one batch may arrive in any order.
    calls: Mutex<Vec<(u64, String, Value)>>,
}

#[async_trait::async_trait]
impl CallHandler for ServedTools {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        let n = call.id.rsplit_once('/').and_then(|(_, n)| n.parse().ok()).expect("a nested call id");
        self.calls.lock().expect("the call log").push((n, call.name.clone(), call.args.clone()));
        let server = Arc::clone(&self.server);
        tokio::task::spawn_blocking(move || server.execute(&call.name, &call.args))
            .await
            .expect("the tool server's answer")
    }
}

/// Runs every script through the sidecar, a few at a time, in script order.
async fn run_sandbox(
    client: &SidecarClient,
    server: &Arc<ToolServer>,
    scripts: &Arc<Vec<(String, String)>>,
) -> Vec<Observed> {
    let permits = Arc::new(Semaphore::new(SANDBOX_CONCURRENCY));
    let mut runs = JoinSet::new();
    for index in 0..scripts.len() {
        let (client, server, scripts, permits) =
            (client.clone(), Arc::clone(server), Arc::clone(scripts), Arc::clone(&permits));
        runs.spawn(async move {
            let _permit = permits.acquire_owned().await.expect("the semaphore is never closed");
            let (file, source) = &scripts[index];
            let request = RunRequest {
                turn_id: "agent-scripts".into(),
                parent_call_id: PARENT_CALL.into(),
                input: server.input.clone(),
                tools: server.tools.clone(),
                ..RunRequest::python(file.clone(), source.clone())
            };
            let handler = ServedTools { server, calls: Mutex::new(Vec::new()) };
            let outcome = client.run(request, &handler).await.unwrap_or_else(|error| panic!("{file}: {error}"));
            let mut calls = handler.calls.into_inner().expect("the call log");
            calls.sort_by_key(|(n, _, _)| *n);
            (index, observed(outcome, calls.into_iter().map(|(_, name, args)| (name, args)).collect()))
        });
    }
    let mut observed = vec![None; scripts.len()];
    while let Some(done) = runs.join_next().await {
        let (index, outcome) = done.expect("a sandbox run finishes");
        observed[index] = Some(outcome);
    }
    observed.into_iter().map(|outcome| outcome.expect("every script ran")).collect()
}

fn observed(outcome: RunOutcome, calls: Vec<(String, Value)>) -> Observed {
    let result = if outcome.status == pb::RunStatus::Ok {
        Ok(outcome.result.unwrap_or(Value::Null))
    } else {
        let error = outcome.error.unwrap_or_default();
        let kind = if error.exception_type.is_empty() {
            if error.kind.is_empty() { format!("{:?}", outcome.status) } else { error.kind }
        } else {
            error.exception_type
        };
        Err((kind, error.message))
    };
    Observed { result, stdout: outcome.stdout, calls }
}
