//! One run of a script: compile it, drive monty from suspension to
//! suspension, answer each one, report the outcome.
//!
//! The host is reached only through the `call_batch` closure, so the whole
//! loop runs natively in tests with a fake host.

use std::{
    collections::BTreeMap,
    io::Write,
    time::{Duration, Instant},
};

use monty::{FunctionCall, MontyRun, OsCall, ResolveFutures, RunProgress};
use monty_types::{
    CompileOptions, ExcType, ExtFunctionResult, MontyException, MontyObject, NameLookupResult, OsPolicy, PrintWriter,
    ResourceLimits, ResourceTracker, SleepMode,
};
use tether_guest::{CallRequest, CallResult, Failure, Outcome, ScriptError, StartDoc};

use crate::{
    api::{self, Bindings, CALL, CALL_ASYNC, UNWRAP},
    convert::{call_result_to_object, to_json},
    errors::{RUNTIME_ERROR, SCRIPT_NAME, limit_error, runtime_error, syntax_error},
    output::Printer,
    sandbox::{self, OsAnswer},
    sleep::SleepBudget,
    traceback,
};

/// Python call depth at which a script gets a `RecursionError`: CPython's
/// default limit.
///
/// monty charges this depth for its recursive Rust work too (`==`, `repr`,
/// `hash`, `deepcopy`, `json.dumps` of nested containers; callbacks such as
/// `sorted(key=…)`, which it also caps at 12 nested), and that work runs on
/// the Wasm stacks: overflowing them ends the run instead of raising.
/// Measured with `tests/e2e/python_depth.rs` under wasmtime 48, the worst work
/// found at this depth (`==` of dicts nested 1,000 deep) needs between 1 and
/// 1.5 MiB of linear-memory stack (the guest links 4 MiB, see `build.rs`) and
/// between 512 KiB and 1 MiB of `max_wasm_stack` (the sidecar allows 4 MiB).
pub const MAX_RECURSION_DEPTH: usize = 1000;

/// Runs `doc`'s script to its outcome. `call_batch` sends tool calls to the
/// host and returns one result per call, in order; `printer` receives the
/// script's output and is flushed before every batch and at the end.
pub fn run<O: Write, E: Write>(
    doc: &StartDoc,
    call_batch: impl FnMut(Vec<CallRequest>) -> Vec<CallResult>,
    printer: &mut Printer<O, E>,
) -> Outcome {
    run_with_sleep_budget(doc, call_batch, printer, SleepBudget::default())
}

fn run_with_sleep_budget<O: Write, E: Write>(
    doc: &StartDoc,
    call_batch: impl FnMut(Vec<CallRequest>) -> Vec<CallResult>,
    printer: &mut Printer<O, E>,
    sleep: SleepBudget,
) -> Outcome {
    let bindings = Bindings::new(&doc.tools);
    let compiled = MontyRun::new(doc.source.clone(), SCRIPT_NAME, bindings.input_names(), CompileOptions::default());
    let program = match compiled {
        // Sleeps come to us uncapped, so the budget sees what was asked for.
        Ok(program) => program.with_os_policy(OsPolicy { sleep: SleepMode::CallHost, ..OsPolicy::default() }),
        Err(exception) => return Outcome::Err(syntax_error(&exception)),
    };
    // Time and memory are the host's to enforce (fuel/epochs, the store's
    // memory cap); only the depth needs a limit in here.
    let limits = ResourceLimits::default().max_recursion_depth(MAX_RECURSION_DEPTH);
    let inputs = bindings.input_values(&doc.input);
    let mut session = Session {
        source: &doc.source,
        bindings,
        printer,
        call_batch,
        pending_calls: BTreeMap::new(),
        pending_sleeps: BTreeMap::new(),
        sleep,
        limit: None,
    };
    let started = program.start(inputs, ResourceTracker::new(limits), session.print());
    let outcome = session.drive(started);
    session.printer.flush();
    outcome
}

/// The state of a run between suspensions.
struct Session<'p, O: Write, E: Write, F> {
    /// The script, for repairing tracebacks.
    source: &'p str,
    bindings: Bindings,
    printer: &'p mut Printer<O, E>,
    call_batch: F,
    /// `call_async` calls not yet sent, by monty call id: they go out together
    /// at the next `ResolveFutures`, which is what makes a gather one batch.
    pending_calls: BTreeMap<u32, CallRequest>,
    /// `asyncio.sleep` awaitables not yet resolved, and when they are due.
    pending_sleeps: BTreeMap<u32, Instant>,
    /// What is left of the run's sleep budget.
    sleep: SleepBudget,
    /// The limit the run passed, once it has: the uncatchable exception that
    /// ends the run carries the traceback, this the error to report.
    limit: Option<ScriptError>,
}

type Step = Result<RunProgress, MontyException>;

impl<O: Write, E: Write, F: FnMut(Vec<CallRequest>) -> Vec<CallResult>> Session<'_, O, E, F> {
    fn print(&mut self) -> PrintWriter<'_> {
        PrintWriter::Callback(&mut *self.printer)
    }

    fn drive(&mut self, mut step: Step) -> Outcome {
        loop {
            step = match step {
                Err(exception) => {
                    let exception = traceback::repair(&exception, self.source);
                    return Outcome::Err(match self.limit.take() {
                        Some(limit) => limit_error(limit, &exception),
                        None => runtime_error(&exception),
                    });
                }
                Ok(RunProgress::Complete(result)) => return outcome_of(&result),
                Ok(RunProgress::FunctionCall(call)) => self.function_call(call),
                Ok(RunProgress::OsCall(call)) => self.os_call(call),
                Ok(RunProgress::ResolveFutures(state)) => self.resolve_futures(state),
                // Scripts get no names beyond the inputs: an unknown name is a NameError.
                Ok(RunProgress::NameLookup(lookup)) => lookup.resume(NameLookupResult::Undefined, self.print()),
            };
        }
    }

    fn function_call(&mut self, call: FunctionCall) -> Step {
        // Method calls on host objects: this runtime hands out none.
        if call.object_id.is_some() {
            let name = call.function_name.clone();
            return call.resume(ExtFunctionResult::NotFound(name), self.print());
        }
        let request = match call.function_name.as_str() {
            CALL => api::parse_call(CALL, &call.args),
            CALL_ASYNC => api::parse_call(CALL_ASYNC, &call.args),
            UNWRAP => {
                let result = api::unwrap(&call.args);
                return call
                    .resume(result.map_or_else(ExtFunctionResult::Error, ExtFunctionResult::Return), self.print());
            }
            name if self.bindings.is_tool_function(name) => api::parse_tool_call(name, &call.args),
            name => {
                let name = name.to_owned();
                return call.resume(ExtFunctionResult::NotFound(name), self.print());
            }
        };
        let request = match request {
            Ok(request) => request,
            Err(exception) => return call.resume(exception, self.print()),
        };
        if call.function_name != CALL_ASYNC {
            let result = self.call_one(request);
            call.resume(result, self.print())
        } else if call.allow_eager_await {
            // Awaited on the spot with nothing else runnable: no batch to wait for.
            let result = self.call_one(request);
            call.resume_eager(Ok(result), self.print())
        } else {
            self.pending_calls.insert(call.call_id, request);
            call.resume_pending(self.print())
        }
    }

    fn os_call(&mut self, call: OsCall) -> Step {
        match sandbox::answer(&call.function_call) {
            OsAnswer::Refuse(exception) => call.resume(exception, self.print()),
            OsAnswer::Sleep(duration) => match self.sleep(duration) {
                Ok(()) => call.resume(MontyObject::none(), self.print()),
                Err(carrier) => call.abort(carrier, self.print()),
            },
            OsAnswer::AsyncSleep(duration) if call.allow_eager_await => match self.sleep(duration) {
                Ok(()) => call.resume_eager(Ok(MontyObject::none()), self.print()),
                Err(carrier) => call.abort(carrier, self.print()),
            },
            OsAnswer::AsyncSleep(duration) => {
                let now = Instant::now();
                self.pending_sleeps.insert(call.call_id, now.checked_add(duration).unwrap_or(now));
                let call_id = call.call_id;
                call.resume(ExtFunctionResult::Future(call_id), self.print())
            }
        }
    }

    /// Every task waits: send all pending tool calls as one batch, or, with
    /// only sleeps pending, wait for the earliest. Then resolve what is done.
    fn resolve_futures(&mut self, state: ResolveFutures) -> Step {
        let mut waiting = state.pending_call_ids().to_vec();
        // monty lists the newest first; ids grow with each call, so this
        // sends a batch in the order the script made its calls.
        waiting.sort_unstable();
        let mut resolved = Vec::with_capacity(waiting.len());
        let mut batch = Vec::new();
        for id in &waiting {
            if let Some(request) = self.pending_calls.remove(id) {
                batch.push((*id, request));
            } else if !self.pending_sleeps.contains_key(id) {
                let message = "the runtime lost track of this awaitable (a bug in tether-python)";
                resolved.push((
                    *id,
                    ExtFunctionResult::Error(MontyException::new(ExcType::RuntimeError, Some(message.into()))),
                ));
            }
        }
        if !batch.is_empty() {
            let (ids, requests): (Vec<u32>, Vec<CallRequest>) = batch.into_iter().unzip();
            let results = self.send(requests);
            resolved.extend(ids.into_iter().zip(results).map(|(id, result)| (id, result.into())));
        } else if resolved.is_empty() {
            let earliest = waiting.iter().filter_map(|id| self.pending_sleeps.get(id)).min().copied();
            if let Some(due) = earliest
                && let Err(carrier) = self.sleep(due.saturating_duration_since(Instant::now()))
            {
                return state.abort(carrier, self.print());
            }
        }
        let now = Instant::now();
        for id in &waiting {
            if self.pending_sleeps.get(id).is_some_and(|due| *due <= now) {
                self.pending_sleeps.remove(id);
                resolved.push((*id, ExtFunctionResult::Return(MontyObject::none())));
            }
        }
        if resolved.is_empty() {
            // Only reachable if monty waits on nothing; resuming with nothing would spin.
            let exception = MontyException::new(ExcType::RuntimeError, Some("every task waits, on nothing".into()));
            return state.abort(exception, self.print());
        }
        state.resume(resolved, self.print())
    }

    fn call_one(&mut self, request: CallRequest) -> MontyObject {
        let mut results = self.send(vec![request]);
        results.pop().unwrap_or_else(|| call_result_to_object(&CallResult::Err(missing_result())))
    }

    /// Sends one batch, output first so the host sees it in order; returns
    /// one result dict per request whatever the host answered.
    fn send(&mut self, requests: Vec<CallRequest>) -> Vec<MontyObject> {
        self.printer.flush();
        let count = requests.len();
        let mut results = (self.call_batch)(requests);
        results.resize_with(count, || CallResult::Err(missing_result()));
        results.iter().map(call_result_to_object).collect()
    }

    /// Sleeps out of the budget, output first. Past the budget it sleeps
    /// not at all: it records the limit and returns the exception that ends
    /// the run (uncatchable, through `abort`) at the sleep's call site.
    fn sleep(&mut self, duration: Duration) -> Result<(), MontyException> {
        self.printer.flush();
        self.sleep.sleep(duration).map_err(|limit| {
            let carrier = MontyException::new(ExcType::RuntimeError, Some(limit.to_string()));
            self.limit = Some(limit.into());
            carrier
        })
    }
}

fn missing_result() -> Failure {
    Failure { code: "internal".into(), message: "the host returned no result for this call".into() }
}

/// The outcome of a script that completed with `result`.
fn outcome_of(result: &MontyObject) -> Outcome {
    match to_json(result.as_ref()) {
        Ok(value) => Outcome::Ok(value),
        // The exception `json.dumps(result)` would raise.
        Err(error) => Outcome::Err(ScriptError {
            kind: RUNTIME_ERROR.to_owned(),
            message: format!("the script's result is not JSON-serializable: {error}"),
            exception_type: error.exc_type().to_string(),
            ..ScriptError::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::RefCell, io, rc::Rc};

    use serde_json::{Value, json};
    use tether_guest::ToolSpec;

    use super::*;
    use crate::sleep::{SLEEP_LIMIT, SLEEP_LIMIT_NAME};

    /// A writer whose bytes the fake host can read while the printer owns it.
    #[derive(Clone, Default)]
    struct Shared(Rc<RefCell<Vec<u8>>>);

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.borrow()).into_owned()
        }
    }

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// What a fake host saw of one run.
    struct Run {
        outcome: Outcome,
        /// Every batch, in order.
        batches: Vec<Vec<CallRequest>>,
        /// The script's output as the host saw it when each batch arrived.
        output_at_batch: Vec<String>,
        output: String,
        /// What the script wrote to stderr.
        errors: String,
    }

    /// Runs `source` against a host whose tools echo their call, except
    /// `fail`, which fails with `denied`.
    fn run_with(source: &str, tools: &[&str], input: Value) -> Run {
        run_doc(start_doc(source, tools, input), SleepBudget::default())
    }

    fn start_doc(source: &str, tools: &[&str], input: Value) -> StartDoc {
        StartDoc {
            abi: 1,
            language: "python".into(),
            source: source.into(),
            input,
            tools: tools
                .iter()
                .map(|name| ToolSpec { name: (*name).into(), description: String::new(), input_schema: json!({}) })
                .collect(),
        }
    }

    fn run_doc(doc: StartDoc, sleep: SleepBudget) -> Run {
        let (out, err) = (Shared::default(), Shared::default());
        let mut printer = Printer::new(out.clone(), err.clone());
        let mut batches = Vec::new();
        let mut output_at_batch = Vec::new();
        let outcome = run_with_sleep_budget(
            &doc,
            |calls: Vec<CallRequest>| {
                output_at_batch.push(out.text());
                let results = calls
                    .iter()
                    .map(|call| match call.name.as_str() {
                        "fail" => CallResult::Err(Failure { code: "denied".into(), message: "no".into() }),
                        name => CallResult::Ok(json!({"tool": name, "args": call.args})),
                    })
                    .collect();
                batches.push(calls);
                results
            },
            &mut printer,
            sleep,
        );
        Run { outcome, batches, output_at_batch, output: out.text(), errors: err.text() }
    }

    fn run_script(source: &str) -> Run {
        run_with(source, &[], Value::Null)
    }

    fn value(run: &Run) -> &Value {
        match &run.outcome {
            Outcome::Ok(value) => value,
            Outcome::Err(error) => panic!("the script failed: {error:?}"),
        }
    }

    fn failure(run: &Run) -> ScriptError {
        match &run.outcome {
            Outcome::Err(error) => error.clone(),
            Outcome::Ok(value) => panic!("the script succeeded with {value}"),
        }
    }

    fn request(name: &str, args: Value) -> CallRequest {
        CallRequest { name: name.into(), args }
    }

    #[test]
    fn the_result_is_the_last_expression() {
        assert_eq!(value(&run_script("x = 20\nx * 2 + 2")), &json!(42));
        assert_eq!(value(&run_script("x = 1")), &Value::Null);
    }

    #[test]
    fn call_sends_one_call_and_returns_a_result_dict() {
        let run = run_script("r = call('get', {'id': 1}, extra=[2, 3])\nr");
        assert_eq!(run.batches, [vec![request("get", json!({"id": 1, "extra": [2, 3]}))]]);
        assert_eq!(
            value(&run),
            &json!({"ok": true, "value": {"tool": "get", "args": {"id": 1, "extra": [2, 3]}}, "error": null})
        );
    }

    #[test]
    fn failures_are_values() {
        let run = run_script("r = call('fail')\n[r['ok'], r['value'], r['error']]");
        assert_eq!(value(&run), &json!([false, null, {"code": "denied", "message": "no"}]));
    }

    #[test]
    fn tools_get_functions() {
        let run = run_with("unwrap(get_contract(id=7))['args']", &["get_contract", "print"], Value::Null);
        assert_eq!(run.batches, [vec![request("get_contract", json!({"id": 7}))]]);
        assert_eq!(value(&run), &json!({"id": 7}));
        // `print` shadows nothing: it is still the builtin.
        let run = run_with("print('hi')\nget_contract({'id': 1})['ok']", &["get_contract", "print"], Value::Null);
        assert_eq!((value(&run), run.output.as_str()), (&json!(true), "hi\n"));
    }

    #[test]
    fn positional_tool_arguments_are_a_clear_type_error() {
        let run = run_with("get_contract(7)", &["get_contract"], Value::Null);
        let error = &failure(&run);
        assert_eq!((error.exception_type.as_str(), error.line), ("TypeError", 1));
        assert!(error.message.contains("keyword arguments only"), "{}", error.message);
        assert!(run.batches.is_empty());
    }

    #[test]
    fn gather_sends_one_batch() {
        let source = "
import asyncio

async def main():
    return await asyncio.gather(call_async('a', n=1), call_async('b'), call_async('c', {'x': True}))

results = await main()
[unwrap(r)['tool'] for r in results]
";
        let run = run_script(source);
        assert_eq!(
            run.batches,
            [vec![request("a", json!({"n": 1})), request("b", json!({})), request("c", json!({"x": true}))]]
        );
        assert_eq!(value(&run), &json!(["a", "b", "c"]));
    }

    #[test]
    fn top_level_gather_sends_one_batch() {
        let run =
            run_script("import asyncio\nrs = await asyncio.gather(*[call_async('t', i=i) for i in range(5)])\nlen(rs)");
        assert_eq!(run.batches.len(), 1);
        assert_eq!(run.batches[0].len(), 5);
        assert_eq!(value(&run), &json!(5));
    }

    #[test]
    fn awaiting_one_call_sends_it_alone() {
        let run = run_script(
            "a = await call_async('a')\nb = await call_async('b')\n[a['value']['tool'], b['value']['tool']]",
        );
        assert_eq!(run.batches, [vec![request("a", json!({}))], vec![request("b", json!({}))]]);
        assert_eq!(value(&run), &json!(["a", "b"]));
    }

    #[test]
    fn unwrap_raises_on_failure() {
        let run = run_script("x = unwrap(call('ok'))['tool']\ny = unwrap(call('fail'))\n");
        let error = &failure(&run);
        assert_eq!(error.kind, RUNTIME_ERROR);
        assert_eq!(error.exception_type, "RuntimeError");
        assert_eq!(error.message, "tool call failed: denied: no");
        assert_eq!(error.line, 2);
        let caught = run_script("try:\n    unwrap(call('fail'))\nexcept RuntimeError as e:\n    r = str(e)\nr");
        assert_eq!(value(&caught), &json!("tool call failed: denied: no"));
    }

    #[test]
    fn input_is_a_global() {
        let run = run_with("input['n'] * 3", &[], json!({"n": 2}));
        assert_eq!(value(&run), &json!(6));
    }

    #[test]
    fn output_reaches_the_host_before_each_batch() {
        let run = run_script("print('before', 1)\ncall('a')\nprint('after')\ncall('b')\nprint('end')");
        assert_eq!(run.output_at_batch, ["before 1\n", "before 1\nafter\n"]);
        assert_eq!(run.output, "before 1\nafter\nend\n");
    }

    #[test]
    fn output_survives_an_error() {
        let run = run_script("print('partial')\n1 / 0");
        assert_eq!(run.output, "partial\n");
        assert_eq!(failure(&run).exception_type, "ZeroDivisionError");
    }

    #[test]
    fn syntax_errors_carry_the_line() {
        let run = run_script("x = 1\ny = (\nz = 3\n");
        let error = &failure(&run);
        assert_eq!((error.kind.as_str(), error.exception_type.as_str()), ("syntax_error", "SyntaxError"));
        assert!(error.line >= 2, "{error:?}");
        assert!(!error.traceback.is_empty());
    }

    #[test]
    fn runtime_errors_carry_line_and_traceback() {
        let run = run_script("def f(x):\n    return x / 0\n\nf(1)\n");
        let error = &failure(&run);
        assert_eq!(error.kind, "runtime_error");
        assert_eq!(error.exception_type, "ZeroDivisionError");
        assert_eq!(error.line, 2);
        assert!(error.traceback.starts_with("Traceback (most recent call last):"), "{}", error.traceback);
        assert!(error.traceback.contains("line 4") && error.traceback.contains("in f"), "{}", error.traceback);
        assert!(error.traceback.ends_with(&format!("ZeroDivisionError: {}", error.message)), "{}", error.traceback);
    }

    #[test]
    fn unknown_modules_are_refused() {
        let run = run_script("import json\nimport requests\n");
        let error = &failure(&run);
        assert_eq!((error.exception_type.as_str(), error.line), ("ModuleNotFoundError", 2));
        assert!(error.message.contains("every effect goes through a tool call"), "{}", error.message);
    }

    #[test]
    fn files_are_refused() {
        let run = run_script("f = open('data.txt')");
        let error = &failure(&run);
        assert_eq!(error.exception_type, "PermissionError");
        assert!(error.message.starts_with("file access is not available"), "{}", error.message);
        let run = run_script("from pathlib import Path\nPath('/etc/passwd').read_text()");
        assert_eq!(failure(&run).exception_type, "PermissionError");
    }

    #[test]
    fn the_environment_is_refused() {
        let run = run_script("import os\nos.environ['HOME']");
        assert_eq!(failure(&run).exception_type, "PermissionError");
        let run = run_script("import os\ntry:\n    os.getenv('HOME')\nexcept PermissionError as e:\n    r = str(e)\nr");
        assert!(value(&run).as_str().unwrap_or_default().starts_with("environment access is not available"));
    }

    #[test]
    fn unknown_names_are_name_errors() {
        let error = &failure(&run_script("x = 1\nundefined_thing + x"));
        assert_eq!((error.exception_type.as_str(), error.line), ("NameError", 2));
    }

    #[test]
    fn a_name_error_points_at_the_name() {
        let error = failure(&run_script("def f():\n    return snap(1) + 1\nf()\n"));
        assert_eq!((error.exception_type.as_str(), error.line), ("NameError", 2), "{error:?}");
        assert!(error.traceback.contains("    return snap(1) + 1\n           ~~~~\n"), "{}", error.traceback);
    }

    #[test]
    fn a_bare_raise_without_an_exception_names_the_script() {
        let error = failure(&run_script("def f():\n    raise\nf()\n"));
        assert_eq!((error.exception_type.as_str(), error.line), ("RuntimeError", 2), "{error:?}");
        assert!(!error.traceback.contains('\0'), "{:?}", error.traceback);
        assert!(error.traceback.contains("File \"main.py\", line 2, in f\n    raise\n"), "{}", error.traceback);
    }

    #[test]
    fn deep_recursion_is_a_recursion_error() {
        let error = &failure(&run_script("def f(n):\n    return f(n + 1)\nf(0)"));
        assert_eq!(error.exception_type, "RecursionError");
    }

    #[test]
    fn non_json_arguments_are_a_type_error() {
        let run = run_script("try:\n    call('a', f=print)\nexcept TypeError as e:\n    r = str(e)\nr");
        let message = value(&run).as_str().unwrap_or_default().to_owned();
        assert!(message.starts_with("argument is not JSON-serializable"), "{message}");
        assert!(run.batches.is_empty());
    }

    #[test]
    fn results_and_arguments_follow_json_dumps() {
        let source = "r = call('a', {7: 'x', 2.5: 'y', True: 'z', None: 'n'}, t=(1, 2))\n{2024: 'year', 'args': r['value']['args']}";
        let run = run_script(source);
        let args = json!({"7": "x", "2.5": "y", "true": "z", "null": "n", "t": [1, 2]});
        assert_eq!(run.batches, [vec![request("a", args.clone())]]);
        assert_eq!(value(&run), &json!({"2024": "year", "args": args}));
    }

    #[test]
    fn values_json_dumps_refuses_are_refused_with_its_exception() {
        let error = failure(&run_script("a = []\na.append(a)\na"));
        assert_eq!(error.exception_type, "ValueError", "{error:?}");
        assert!(error.message.ends_with("Circular reference detected"), "{error:?}");
        let error = failure(&run_script("float('nan')"));
        assert_eq!(error.exception_type, "ValueError", "{error:?}");
        let error = failure(&run_script("b'x'"));
        assert_eq!(error.exception_type, "TypeError", "{error:?}");
        assert!(error.message.ends_with("Object of type bytes is not JSON serializable"), "{error:?}");
        let run = run_script("try:\n    call('a', x=float('inf'))\nexcept ValueError as e:\n    r = str(e)\nr");
        assert_eq!(value(&run), &json!("argument is not JSON-serializable: Out of range float values are not JSON compliant: inf"));
        assert!(run.batches.is_empty());
    }

    #[test]
    fn a_non_json_result_is_an_error() {
        let error = &failure(&run_script("{1, 2}"));
        assert_eq!((error.kind.as_str(), error.exception_type.as_str()), ("runtime_error", "TypeError"));
        assert!(error.message.starts_with("the script's result is not JSON-serializable"), "{}", error.message);
    }

    fn run_with_sleep(source: &str, budget: Duration) -> Run {
        run_doc(start_doc(source, &[], Value::Null), SleepBudget::new(budget))
    }

    #[test]
    fn sleeps_within_the_budget_are_obeyed() {
        let run = run_with_sleep("import time\ntime.sleep(0.02)\ntime.sleep(0.02)\n'done'", Duration::from_millis(50));
        assert_eq!(value(&run), &json!("done"));
    }

    #[test]
    fn a_sleep_past_the_budget_ends_the_run_at_once() {
        let started = Instant::now();
        let source = "import time\nprint('before')\ntime.sleep(0.02)\ntry:\n    time.sleep(100000)\nexcept BaseException:\n    pass\nprint('after')\n";
        let run = run_with_sleep(source, Duration::from_secs(10));
        assert!(started.elapsed() < Duration::from_secs(1), "the limit must not sleep what is left first");
        let error = failure(&run);
        assert_eq!((error.kind.as_str(), error.limit.as_str()), (SLEEP_LIMIT, SLEEP_LIMIT_NAME), "{error:?}");
        assert_eq!((error.exception_type.as_str(), error.line), ("", 5), "{error:?}");
        assert!(error.message.contains("`10` s sleep budget"), "{error:?}");
        assert!(error.traceback.contains("line 5") && error.traceback.ends_with(&error.message), "{error:?}");
        // Not catchable: the script did not go on.
        assert_eq!(run.output, "before\n");
    }

    #[test]
    fn sleeps_that_add_up_past_the_budget_end_the_run() {
        let source = "import time\nfor _ in range(10):\n    time.sleep(0.02)\n";
        let error = failure(&run_with_sleep(source, Duration::from_millis(50)));
        assert_eq!((error.kind.as_str(), error.line), (SLEEP_LIMIT, 3), "{error:?}");
    }

    #[test]
    fn pending_async_sleeps_past_the_budget_end_the_run() {
        let started = Instant::now();
        let source = "import asyncio\nasync def nap(s):\n    await asyncio.sleep(s)\n    return s\nawait asyncio.gather(nap(0.01), nap(1000))\n";
        let error = failure(&run_with_sleep(source, Duration::from_secs(1)));
        assert!(started.elapsed() < Duration::from_millis(900), "the limit must not sleep what is left first");
        assert_eq!((error.kind.as_str(), error.limit.as_str()), (SLEEP_LIMIT, SLEEP_LIMIT_NAME), "{error:?}");
        // Within the budget, the same script completes.
        let run = run_with_sleep(source.replace("1000", "0.02").as_str(), Duration::from_secs(1));
        assert_eq!(value(&run), &json!([0.01, 0.02]));
    }

    #[test]
    fn an_awaited_sleep_past_the_budget_ends_the_run() {
        let error = failure(&run_with_sleep("import asyncio\nawait asyncio.sleep(5)\n", Duration::from_secs(1)));
        assert_eq!((error.kind.as_str(), error.line), (SLEEP_LIMIT, 2), "{error:?}");
    }

    #[test]
    fn print_to_stderr_reaches_stderr() {
        let run = run_script("import sys\nprint('out')\nprint('err', 1, file=sys.stderr)\nprint('out2', file=sys.stdout)\n");
        assert_eq!((run.output.as_str(), run.errors.as_str()), ("out\nout2\n", "err 1\n"));
    }

    #[test]
    fn stream_methods_are_an_error_that_says_what_to_use() {
        let error = failure(&run_script("import sys\nsys.stderr.write('x')\n"));
        assert_eq!((error.exception_type.as_str(), error.line), ("AttributeError", 2), "{error:?}");
        assert!(error.message.contains("print(..., file=sys.stderr"), "{error:?}");
    }

    #[test]
    fn sleeps_wait_and_mix_with_calls() {
        let started = Instant::now();
        let source = "
import asyncio, time
time.sleep(0.01)
async def later():
    await asyncio.sleep(0.02)
    return await call_async('after_sleep')
r = await asyncio.gather(later(), call_async('now'), asyncio.sleep(0.01))
[r[0]['value']['tool'], r[1]['value']['tool'], r[2]]
";
        let run = run_script(source);
        assert_eq!(value(&run), &json!(["after_sleep", "now", null]));
        assert_eq!(run.batches, [vec![request("now", json!({}))], vec![request("after_sleep", json!({}))]]);
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
