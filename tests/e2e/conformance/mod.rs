//! Python that behaves like Python (issue 13): every case of monty's own test
//! suite runs through the Python guest in a real sidecar and through the same
//! runtime built natively (`tether_python::runner::run`), and is judged with
//! the suite's conventions ([`case`]). A case that ends differently in the two
//! (another result, or another error down to its traceback) must be on the
//! committed list `expected_differences.txt` with its reason; a listed case
//! that no longer differs fails the test too, so the list stays true.
//!
//! So that two equally broken runs cannot pass, every case that fails
//! natively must be on `native_failures.txt` with its reason too, unless it
//! needs monty's test-harness host. Run with `--nocapture` for the pass
//! counts and every failing case.

mod case;
mod locate;

use std::sync::Arc;

use case::{Case, Failure, Observed};
use tether_backend::{CallHandler, RunOutcome, RunRequest, ScriptCall, SidecarClient, ToolOutcome, pb};
use tether_guest::{CallResult, Outcome, StartDoc};
use tether_python::{output::Printer, runner};
use tokio::{sync::Semaphore, task::JoinSet};

use crate::support::*;

/// The committed differences: `<case file> <reason>` per line, `#` comments.
const EXPECTED_DIFFERENCES: &str = include_str!("expected_differences.txt");

/// The committed native failures, in the same form.
const NATIVE_FAILURES: &str = include_str!("native_failures.txt");

/// Runs in flight at once in the sidecar: enough to keep its slots busy.
const SANDBOX_CONCURRENCY: usize = 8;

/// Threads running cases natively. monty's recursive work (nested `==`,
/// `repr`, …) runs on the native stack, so each gets a large one.
const NATIVE_THREADS: usize = 2;
const NATIVE_STACK: usize = 256 << 20;

#[tokio::test(flavor = "multi_thread")]
async fn monty_test_cases_behave_in_the_sandbox_as_natively() {
    let dir = locate::test_cases_dir().unwrap_or_else(|error| panic!("{error}"));
    let cases = Arc::new(read_cases(&dir));
    let expected = crate::corpus::listed(EXPECTED_DIFFERENCES);
    let native_failures = crate::corpus::listed(NATIVE_FAILURES);

    let native = {
        let cases = Arc::clone(&cases);
        tokio::task::spawn_blocking(move || run_native(&cases))
    };
    let (_sidecar, client) = sidecar().await;
    let sandbox = run_sandbox(&client, &cases).await;
    let native = native.await.expect("the native runs finish");

    let mut report = Vec::new();
    let mut unexpected = Vec::new();
    let (mut native_passes, mut sandbox_passes) = (0, 0);
    for ((case, native), sandbox) in cases.iter().zip(&native).zip(&sandbox) {
        let (native_verdict, sandbox_verdict) = (case.judge(native), case.judge(sandbox));
        native_passes += usize::from(native_verdict.is_ok());
        sandbox_passes += usize::from(sandbox_verdict.is_ok());
        // Stricter than the verdicts: the same result, or the same error
        // down to its traceback.
        let differs = native != sandbox;
        match (differs, expected.get(case.file.as_str())) {
            (true, None) => unexpected.push(format!(
                "{}: native {}, sandbox {}\n  native:  {:?}\n  sandbox: {:?}",
                case.file,
                verdict_text(&native_verdict),
                verdict_text(&sandbox_verdict),
                native.result,
                sandbox.result
            )),
            (false, Some(reason)) => {
                unexpected.push(format!("{}: listed as a difference ({reason}) but no longer differs", case.file));
            }
            _ => {}
        }
        if !case.needs_harness_host {
            match (&native_verdict, native_failures.get(case.file.as_str())) {
                (Err(why), None) => unexpected.push(format!(
                    "{}: fails natively ({}); fix it, or list it in native_failures.txt with why",
                    case.file,
                    verdict_text(&Err(why.clone()))
                )),
                (Ok(()), Some(_)) => {
                    unexpected.push(format!("{}: listed in native_failures.txt but passes natively", case.file));
                }
                _ => {}
            }
        }
        if native_verdict.is_err() || sandbox_verdict.is_err() {
            report.push(format!(
                "{}\n  native:  {}\n  sandbox: {}",
                case.file,
                verdict_text(&native_verdict),
                verdict_text(&sandbox_verdict)
            ));
        }
    }
    for listed in expected.keys().chain(native_failures.keys()) {
        if !cases.iter().any(|case| case.file == *listed) {
            unexpected.push(format!("{listed}: listed but there is no such case"));
        }
    }
    println!("{}", report.join("\n"));
    let counts = format!(
        "{} cases ({} need monty's test-harness host): native passes {native_passes}, sandbox passes \
         {sandbox_passes}; {} expected differences, {} listed native failures",
        cases.len(),
        cases.iter().filter(|case| case.needs_harness_host).count(),
        expected.len(),
        native_failures.len()
    );
    println!("{counts}");
    assert!(unexpected.is_empty(), "{counts}; unexpected:\n{}", unexpected.join("\n"));
}

fn verdict_text(verdict: &Result<(), String>) -> String {
    match verdict {
        Ok(()) => "pass".to_owned(),
        Err(why) => format!("FAIL {}", why.chars().take(600).collect::<String>()),
    }
}

/// Every `*.py` in `dir`, in name order.
fn read_cases(dir: &std::path::Path) -> Vec<Case> {
    crate::corpus::read_py_files(dir)
        .iter()
        .map(|(file, text)| Case::parse(file, text).unwrap_or_else(|error| panic!("{error}")))
        .collect()
}

/// Runs every case with the runtime built natively, on a few big-stack threads.
fn run_native(cases: &[Case]) -> Vec<Observed> {
    let chunk = cases.len().div_ceil(NATIVE_THREADS).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = cases
            .chunks(chunk)
            .map(|chunk| {
                std::thread::Builder::new()
                    .stack_size(NATIVE_STACK)
                    .spawn_scoped(scope, move || chunk.iter().map(run_one_native).collect::<Vec<_>>())
                    .expect("a native worker thread starts")
            })
            .collect();
        workers.into_iter().flat_map(|worker| worker.join().expect("a native worker finishes")).collect()
    })
}

fn run_one_native(case: &Case) -> Observed {
    let doc = StartDoc {
        abi: tether_guest::ABI_VERSION,
        language: "python".into(),
        source: case.source.clone(),
        input: serde_json::Value::Null,
        tools: Vec::new(),
        resume: None,
    };
    let no_tools = |calls: Vec<tether_guest::CallRequest>| -> Vec<CallResult> {
        calls.iter().map(|_| CallResult::Err(no_tool())).collect()
    };
    let mut printer = Printer::new(std::io::sink(), std::io::sink());
    match runner::run(&doc, no_tools, &mut printer) {
        Outcome::Ok(value) => Observed { result: Ok(value) },
        Outcome::Err(error) => Observed {
            result: Err(Failure {
                kind: error.kind,
                exception_type: error.exception_type,
                message: error.message,
                traceback: error.traceback,
            }),
        },
    }
}

fn no_tool() -> tether_guest::Failure {
    tether_guest::Failure { code: "tool_not_found".into(), message: "the conformance runs have no tools".into() }
}

/// A backend with no tools: test cases make no tool calls.
#[derive(Debug)]
struct NoTools;

#[async_trait::async_trait]
impl CallHandler for NoTools {
    async fn call(&self, _call: ScriptCall) -> ToolOutcome {
        let failure = no_tool();
        ToolOutcome::failed(failure.code, failure.message)
    }
}

/// Runs every case through the sidecar, a few at a time, in case order.
async fn run_sandbox(client: &SidecarClient, cases: &Arc<Vec<Case>>) -> Vec<Observed> {
    let permits = Arc::new(Semaphore::new(SANDBOX_CONCURRENCY));
    let mut runs = JoinSet::new();
    for index in 0..cases.len() {
        let (client, cases, permits) = (client.clone(), Arc::clone(cases), Arc::clone(&permits));
        runs.spawn(async move {
            let _permit = permits.acquire_owned().await.expect("the semaphore is never closed");
            let case = &cases[index];
            let request = RunRequest {
                turn_id: "conformance".into(),
                ..RunRequest::python(case.file.clone(), case.source.clone())
            };
            let outcome = client.run(request, &NoTools).await.unwrap_or_else(|error| panic!("{}: {error}", case.file));
            (index, observed(outcome))
        });
    }
    let mut observed = vec![None; cases.len()];
    while let Some(done) = runs.join_next().await {
        let (index, outcome) = done.expect("a sandbox run finishes");
        observed[index] = Some(outcome);
    }
    observed.into_iter().map(|outcome| outcome.expect("every case ran")).collect()
}

fn observed(outcome: RunOutcome) -> Observed {
    if outcome.status == pb::RunStatus::Ok {
        return Observed { result: Ok(outcome.result.unwrap_or(serde_json::Value::Null)) };
    }
    let error = outcome.error.unwrap_or_default();
    Observed {
        result: Err(Failure {
            kind: if error.kind.is_empty() { format!("{:?}", outcome.status) } else { error.kind },
            exception_type: error.exception_type,
            message: error.message,
            traceback: error.traceback,
        }),
    }
}
