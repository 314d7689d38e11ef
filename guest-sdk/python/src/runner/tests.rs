//! The run loop against a fake host: calls, batches, output, errors, sleeps.

use std::{cell::RefCell, io, rc::Rc};

use serde_json::{Value, json};
use tether_guest::ToolDoc;

use super::*;
use crate::sleep::SLEEP_LIMIT_NAME;

mod parking;

const SLEEP_LIMIT: &str = "sleep_limit";

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
    /// How the run ended; `None` if it parked.
    outcome: Option<Outcome>,
    /// The state the run parked with, if it did.
    parked: Option<Vec<u8>>,
    /// Every batch, in order (the one it parked on included).
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
            .map(|name| ToolDoc { name: (*name).into(), description: String::new(), input_schema: (&json!({})).into() })
            .collect(),
        resume: None,
    }
}

/// The fake host's answer to one call: its echo, or `denied` for `fail`.
fn echo(call: &CallRequest) -> CallResult {
    match call.name.as_str() {
        "fail" => CallResult::Err(Failure { code: "denied".into(), message: "no".into() }),
        name => CallResult::Ok(json!({"tool": name, "args": call.args})),
    }
}

fn run_doc(doc: StartDoc, sleep: SleepBudget) -> Run {
    run_host(&doc, sleep, echo, None)
}

/// What a fake host unwinds with once it has taken a run's state: in the
/// guest, `tether_v1.park` does not return either.
struct TookState(Vec<u8>);

/// Runs `doc` against a host that answers each call with `answer` and, if
/// `park_at` is `Some(n)`, asks the run to park at its `n`th batch (from 0)
/// and takes the state.
fn run_host(doc: &StartDoc, sleep: SleepBudget, answer: fn(&CallRequest) -> CallResult, park_at: Option<usize>) -> Run {
    let (out, err) = (Shared::default(), Shared::default());
    let mut printer = Printer::new(out.clone(), err.clone());
    let mut batches = Vec::new();
    let mut output_at_batch = Vec::new();
    let host = |calls: Vec<CallRequest>, park: &mut ParkState<'_>| {
        output_at_batch.push(out.text());
        let results = calls.iter().map(answer).collect();
        batches.push(calls);
        if park_at == Some(batches.len() - 1) {
            match park(u64::MAX) {
                // `resume_unwind`, not `panic!`: no panic hook, no noise.
                Some(state) => std::panic::resume_unwind(Box::new(TookState(state))),
                None => panic!("asked to park, the run had no state to give"),
            }
        }
        results
    };
    let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_with_sleep_budget(doc, host, &mut printer, sleep)
    }));
    let (outcome, parked) = match ended {
        Ok(outcome) => (Some(outcome), None),
        Err(payload) => match payload.downcast::<TookState>() {
            Ok(state) => (None, Some(state.0)),
            Err(payload) => std::panic::resume_unwind(payload),
        },
    };
    Run { outcome, parked, batches, output_at_batch, output: out.text(), errors: err.text() }
}

fn run_script(source: &str) -> Run {
    run_with(source, &[], Value::Null)
}

fn value(run: &Run) -> &Value {
    match &run.outcome {
        Some(Outcome::Ok(value)) => value,
        Some(Outcome::Err(error)) => panic!("the script failed: {error:?}"),
        None => panic!("the script parked"),
    }
}

fn failure(run: &Run) -> ScriptError {
    match &run.outcome {
        Some(Outcome::Err(error)) => error.clone(),
        Some(Outcome::Ok(value)) => panic!("the script succeeded with {value}"),
        None => panic!("the script parked"),
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
fn a_call_the_host_left_unanswered_fails_with_missing_result() {
    let source = "
import asyncio

async def main():
    return await asyncio.gather(call_async('a'), call_async('b'))

[call('c'), *(await main())]
";
    let mut printer = Printer::new(io::sink(), io::sink());
    // The host answers only the first call of each batch.
    let host = |calls: Vec<CallRequest>, _: &mut ParkState<'_>| {
        calls.into_iter().take(1).map(|_| CallResult::Ok(json!(1))).collect()
    };
    let outcome =
        run_with_sleep_budget(&start_doc(source, &[], Value::Null), host, &mut printer, SleepBudget::default());
    let missing = Failure::from(&Reason::MissingResult);
    assert_eq!(missing.code, "internal");
    let missing = json!({"ok": false, "value": null, "error": {"code": missing.code, "message": missing.message}});
    let answered = json!({"ok": true, "value": 1, "error": null});
    assert_eq!(outcome, Outcome::Ok(json!([answered, answered, missing])));
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
fn a_tool_function_is_there_wherever_the_script_names_it() {
    let tools = ["get_contract", "list_issues"];
    // In a function, a comprehension and a lambda; passed around as a value;
    // named twice (made once, then kept).
    let source = "
def owner(i):
    return unwrap(get_contract(id=i))['args']['id']
ids = [owner(i) for i in range(2)]
f = list_issues
g = lambda: get_contract(id=9)
[ids, unwrap(f(day=1))['tool'], unwrap(g())['args'], get_contract is get_contract]
";
    let run = run_with(source, &tools, Value::Null);
    assert_eq!(value(&run), &json!([[0, 1], "list_issues", {"id": 9}, true]));
    assert_eq!(run.batches.len(), 4);
    // A script's own name wins over a tool's, as any assignment does.
    let run = run_with("get_contract = 5\nget_contract + 1", &tools, Value::Null);
    assert_eq!((value(&run), run.batches.len()), (&json!(6), 0));
    // A name that is no tool of this turn is a NameError, as before.
    let error = failure(&run_with("send_email(to='x')", &tools, Value::Null));
    assert_eq!((error.exception_type.as_str(), error.line), ("NameError", 1), "{error:?}");
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
    let run =
        run_script("a = await call_async('a')\nb = await call_async('b')\n[a['value']['tool'], b['value']['tool']]");
    assert_eq!(run.batches, [vec![request("a", json!({}))], vec![request("b", json!({}))]]);
    assert_eq!(value(&run), &json!(["a", "b"]));
}

#[test]
fn unwrap_raises_on_failure() {
    let run = run_script("x = unwrap(call('ok'))['tool']\ny = unwrap(call('fail'))\n");
    let error = &failure(&run);
    assert_eq!(error.kind, "runtime_error");
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
fn a_script_that_cannot_run_is_refused_before_its_first_call() {
    let mut doc = start_doc("", &["send"], Value::Null);
    doc.tools[0].input_schema = (&json!({"type": "object", "properties": {"to": {"type": "string"}}})).into();
    // Two calls would go out before the bad third line, and a fourth after it.
    doc.source = "send(to='a')\nsend(to='b')\nsend(too='c')\nclass E(metaclass=type):\n    pass\n".into();
    let run = run_doc(doc, SleepBudget::default());
    assert!(run.batches.is_empty(), "no call was made: {:?}", run.batches);
    let error = failure(&run);
    assert_eq!((error.kind.as_str(), error.line, error.exception_type.as_str()), ("script_refused", 3, "TypeError"));
    assert!(error.message.starts_with("the script was refused before it ran"), "{}", error.message);
    assert!(
        error.message.contains("\n- line 3, column 6: send() has no parameter 'too': did you mean 'to'?"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("\n- line 4, column 1: metaclasses and class keywords are not available here"),
        "monty's refusal is listed too: {}",
        error.message
    );
    assert!(error.traceback.contains("line 3\n    send(too='c')\n         ^^^^^^^"), "{}", error.traceback);
}

#[test]
fn a_refusal_lists_ten_findings_and_counts_the_rest() {
    let source: String = (0..13).map(|i| format!("import missing{i}\n")).collect();
    let error = failure(&run_script(&source));
    assert_eq!(error.kind, "script_refused");
    assert_eq!(error.message.matches("\n- line ").count(), crate::check::MAX_FINDINGS_LISTED, "{}", error.message);
    assert!(error.message.contains("fix these 13 and run it again"), "{}", error.message);
    assert!(error.message.ends_with("\n- and 3 more"), "{}", error.message);
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
    let source =
        "r = call('a', {7: 'x', 2.5: 'y', True: 'z', None: 'n'}, t=(1, 2))\n{2024: 'year', 'args': r['value']['args']}";
    let run = run_script(source);
    let args = json!({"7": "x", "2.5": "y", "true": "z", "null": "n", "t": [1, 2]});
    assert_eq!(run.batches, [vec![request("a", args.clone())]]);
    assert_eq!(value(&run), &json!({"2024": "year", "args": args}));
}

#[test]
fn arguments_json_dumps_refuses_are_refused_with_its_exception() {
    let run = run_script("try:\n    call('a', x=float('inf'))\nexcept ValueError as e:\n    r = str(e)\nr");
    assert_eq!(
        value(&run),
        &json!("argument is not JSON-serializable: Out of range float values are not JSON compliant: inf")
    );
    let run = run_script("try:\n    call('a', x={1, 2})\nexcept TypeError as e:\n    r = str(e)\nr");
    assert_eq!(value(&run), &json!("argument is not JSON-serializable: Object of type set is not JSON serializable"));
    assert!(run.batches.is_empty());
}

/// The issue 25 sample's last line: every call ran, and the dataclass result
/// used to fail the run.
#[test]
fn a_dataclass_result_is_its_dict_and_the_run_notes_it_on_stderr() {
    let source = "from dataclasses import dataclass\n\
        @dataclass\nclass Report:\n    sent: int\n    owners: list\n\
        r = call('send', to='a')\nReport(sent=1, owners=[r['value']['args']['to']])";
    let run = run_script(source);
    assert_eq!(run.batches.len(), 1);
    assert_eq!(value(&run), &json!({"sent": 1, "owners": ["a"]}));
    assert_eq!(
        run.errors,
        "note: the script's result was converted to JSON: dataclass `Report` → dict of its fields\n"
    );
}

#[test]
fn a_result_json_dumps_refuses_is_converted_and_noted() {
    let run = run_script(
        "from collections import namedtuple\nP = namedtuple('P', 'x y')\n\
         a = []\na.append(a)\n\
         class C:\n    pass\n\
         {'sets': [{3}, frozenset()], 'point': P(1, 2), 'pair': (1, 2), 'nan': float('nan'), \
          'bytes': b'x', 'cycle': a, 'fn': len, (1, 2): 'key', 'obj': C() is not None}",
    );
    let result = value(&run);
    assert_eq!(
        result,
        &json!({"sets": [[3], []], "point": [1, 2], "pair": [1, 2], "nan": "!repr: nan", "bytes": "!repr: b'x'",
                "cycle": ["!repr: [...]"], "fn": "!repr: <built-in function len>", "(1, 2)": "key", "obj": true})
    );
    let note = run.errors.as_str();
    assert!(note.starts_with("note: the script's result was converted to JSON: "), "{note}");
    for what in ["frozenset → list", "set → list", "bytes → its repr", "float → its repr", "tuple dict key → its repr"]
    {
        assert!(note.contains(what), "{what} missing from {note}");
    }
    // Tuples and named tuples are lists to `json.dumps` too: not worth a note.
    assert!(!note.contains("tuple →"), "{note}");
}

#[test]
fn a_plain_object_result_is_its_marked_repr() {
    // The repr the value has outside the interpreter: monty exports an
    // instance without running its `__repr__`.
    let run = run_script("class C:\n    def __init__(self):\n        self.x = 7\nC()");
    assert_eq!(value(&run), &json!("!repr: C(x=7)"));
    assert!(run.errors.contains("C → its repr"), "{}", run.errors);
}

#[test]
fn ints_of_any_size_travel_exactly_both_ways() {
    // Fibonacci past 2**64, as a result, as an argument and back in a tool's result.
    let source = "a, b = 0, 1\nfor _ in range(100):\n    a, b = b, a + b\n\
                  r = call('echo', n=a, neg=-a)\n[a, r['value']['args']['n'] == a, r['value']['args']['neg'] + a]";
    let run = run_script(source);
    let fib_100 = "354224848179261915075";
    let sent = serde_json::to_string(&run.batches[0][0].args).unwrap();
    assert_eq!(sent, format!(r#"{{"n":{fib_100},"neg":-{fib_100}}}"#));
    assert_eq!(serde_json::to_string(value(&run)).unwrap(), format!("[{fib_100},true,0]"));
    assert_eq!(run.errors, "");
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
    let run =
        run_script("import sys\nprint('out')\nprint('err', 1, file=sys.stderr)\nprint('out2', file=sys.stdout)\n");
    assert_eq!((run.output.as_str(), run.errors.as_str()), ("out\nout2\n", "err 1\n"));
}

#[test]
fn stream_writes_reach_their_stream_in_order_with_prints() {
    let source = "import sys\nn = sys.stderr.write('é1\\n')\nprint('out')\nsys.stdout.write('a')\nsys.stdout.flush()\n\
                  print('b', file=sys.stderr)\nsys.stdout.write('c\\n')\nn";
    let run = run_script(source);
    assert_eq!((run.output.as_str(), run.errors.as_str()), ("out\nac\n", "é1\nb\n"));
    // write() returns the characters written, as CPython's does.
    assert_eq!(value(&run), &serde_json::json!(3));
}

#[test]
fn other_stream_methods_are_an_error_that_says_what_there_is() {
    let error = failure(&run_script("import sys\nsys.stderr.isatty()\n"));
    assert_eq!((error.exception_type.as_str(), error.line), ("AttributeError", 2), "{error:?}");
    assert!(error.message.contains("only write(str) and flush()"), "{error:?}");
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

/// third_party/monty's patch 0003: CPython's answers, where scaling by
/// `10**n` in floats gave another (2.675 * 100 is exactly 267.5).
#[test]
fn round_rounds_the_exact_binary_value_as_cpython_does() {
    let run = run_script("[round(2.675, 2), round(0.0025, 3), round(0.125, 2), round(1250.0, -2), round(-0.004, 2)]");
    assert_eq!(value(&run), &json!([2.67, 0.003, 0.12, 1200.0, -0.0]));
    let run =
        run_script("try:\n    round(1.7976931348623157e308, -308)\nexcept OverflowError as e:\n    r = str(e)\nr");
    assert_eq!(value(&run), &json!("rounded value too large to represent"));
}

/// third_party/monty's patch 0004: a repeat no buffer can hold is a
/// `MemoryError` the script catches, never an abort of the guest.
#[test]
fn a_repeat_no_buffer_can_hold_is_a_memory_error_the_script_catches() {
    let source = "r = []\nfor v in ['x', b'x', [0], (0,)]:\n    try:\n        v * 2**62\n    except MemoryError:\n        r.append('caught')\nr + ['x' * 3, b'ab' * 2 == b'abab', 'é' * 2]";
    assert_eq!(value(&run_script(source)), &json!(["caught", "caught", "caught", "caught", "xxx", true, "éé"]));
}
