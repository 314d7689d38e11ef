//! One run of a script: compile it (or read it back from its parked state),
//! drive monty from suspension to suspension, answer each one, report the
//! outcome.
//!
//! The host is reached only through the `host` closure, so the whole loop
//! runs natively in tests with a fake host. A batch that is answered live and
//! one answered by a resuming start go through the same code (`answer`), so
//! a parked run goes on exactly as one that waited.

use std::{
    collections::BTreeMap,
    io::Write,
    time::{Duration, Instant},
};

use monty::{FunctionCall, MontyRun, NameLookup, OsCall, ResolveFutures, RunProgress};
use monty_types::{
    CompileOptions, ExcType, ExtFunctionResult, MontyException, MontyObject, NameLookupResult, OsPolicy, PrintWriter,
    PrintWriterCallback, ResourceLimits, ResourceTracker, SleepMode,
};
use tether_codes::{Reason, RunErrorKind};
use tether_guest::wire::Resume;
use tether_guest::{CallRequest, CallResult, Failure, Outcome, ScriptError, StartDoc};

use crate::{
    api::{self, Bindings, CALL, CALL_ASYNC, UNWRAP},
    check,
    convert::{call_result_to_object, result_to_json},
    errors::{SCRIPT_NAME, limit_error, runtime_error, syntax_error},
    output::Printer,
    park::{self, Parked, Suspended, Waiting},
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

/// How a host that asks the run to park gets the run's state: called with
/// the largest state the host takes, it gives the state, or `None` if the
/// run has none that fits (monty could not dump it, or it is larger).
pub type ParkState<'a> = dyn FnMut(u64) -> Option<Vec<u8>> + 'a;

/// Runs `doc`'s script to its outcome with a host that never parks it.
/// `call_batch` sends tool calls to the host and returns one result per
/// call, in order; `printer` receives the script's output and is flushed
/// before every batch and at the end.
pub fn run<O: Write, E: Write>(
    doc: &StartDoc,
    mut call_batch: impl FnMut(Vec<CallRequest>) -> Vec<CallResult>,
    printer: &mut Printer<O, E>,
) -> Outcome {
    run_parkable(doc, |calls, _: &mut ParkState<'_>| call_batch(calls), printer)
}

/// Runs `doc`'s script to its outcome: from the top, or, when `doc.resume`
/// is set, from the state it parked with, taking `resume.results` as the
/// answer to the batch it parked on (it never compiles or runs the script
/// again).
///
/// `host` sends a batch and returns one result per call, in order. A host
/// that asks the run to park calls the [`ParkState`] it is given for the
/// state; if it takes the state, it does not return (in the guest the
/// instance ends inside `tether_v1.park`), otherwise it returns the results
/// as if it had not asked. `printer` is flushed before every batch and at
/// the end.
pub fn run_parkable<O: Write, E: Write>(
    doc: &StartDoc,
    host: impl FnMut(Vec<CallRequest>, &mut ParkState<'_>) -> Vec<CallResult>,
    printer: &mut Printer<O, E>,
) -> Outcome {
    run_with_sleep_budget(doc, host, printer, SleepBudget::default())
}

/// [`run_parkable`] with a sleep budget of `sleep` for a fresh run (a
/// resumed one goes on with what its state says was left).
fn run_with_sleep_budget<O: Write, E: Write>(
    doc: &StartDoc,
    host: impl FnMut(Vec<CallRequest>, &mut ParkState<'_>) -> Vec<CallResult>,
    printer: &mut Printer<O, E>,
    sleep: SleepBudget,
) -> Outcome {
    match &doc.resume {
        None => start(doc, host, printer, sleep),
        Some(resume) => resume_parked(doc, resume, host, printer),
    }
}

/// Compiles the script and runs it from the top.
fn start<O: Write, E: Write>(
    doc: &StartDoc,
    host: impl FnMut(Vec<CallRequest>, &mut ParkState<'_>) -> Vec<CallResult>,
    printer: &mut Printer<O, E>,
    sleep: SleepBudget,
) -> Outcome {
    let bindings = Bindings::new(&doc.tools);
    let compiled = MontyRun::new(doc.source.clone(), SCRIPT_NAME, bindings.input_names(), CompileOptions::default());
    // What cannot run is refused here, before the first line (`check`):
    // in the guest, because monty is the judge of what it compiles and
    // which modules it ships, and the script's source is parsed only inside
    // the sandbox; the sidecar hands over the schemas of the tools the
    // source names, so one place checks everything, for the price of a
    // second parse by monty's own parser.
    let mut findings = Vec::new();
    let program = match compiled {
        Ok(program) => Some(program),
        Err(exception) => match check::compile_finding(&exception) {
            Some(finding) => {
                findings.push(finding);
                None
            }
            None => return Outcome::Err(syntax_error(&exception)),
        },
    };
    findings.extend(check::script_findings(&doc.source, &doc.tools, &bindings));
    let program = match program {
        // Sleeps come to us uncapped, so the budget sees what was asked for.
        Some(program) if findings.is_empty() => {
            program.with_os_policy(OsPolicy { sleep: SleepMode::CallHost, ..OsPolicy::default() })
        }
        _ => return Outcome::Err(check::script_refused(findings)),
    };
    // Time and memory are the host's to enforce (fuel/epochs, the store's
    // memory cap); only the depth needs a limit in here.
    let limits = ResourceLimits::default().max_recursion_depth(MAX_RECURSION_DEPTH);
    let inputs = bindings.input_values(&doc.input);
    let mut session = Session {
        source: &doc.source,
        bindings,
        printer,
        host,
        pending_calls: BTreeMap::new(),
        pending_sleeps: BTreeMap::new(),
        sleep,
        limit: None,
    };
    let started = program.start(inputs, ResourceTracker::new(limits), session.print());
    session.finish(started)
}

/// Reads the run back from its parked state and answers the batch it parked
/// on with `resume.results`. A state that does not read ends the run with
/// `parked_state_invalid`.
fn resume_parked<O: Write, E: Write>(
    doc: &StartDoc,
    resume: &Resume,
    host: impl FnMut(Vec<CallRequest>, &mut ParkState<'_>) -> Vec<CallResult>,
    printer: &mut Printer<O, E>,
) -> Outcome {
    let parked =
        resume.state_bytes().map_err(park::InvalidState::from).and_then(|bytes| park::read(&bytes, &doc.source));
    let Parked { progress, waiting, unsent_calls, sleeps, sleep } = match parked {
        Ok(parked) => parked,
        Err(invalid) => return Outcome::Err(invalid.into()),
    };
    let now = Instant::now();
    let mut session = Session {
        source: &doc.source,
        bindings: Bindings::new(&doc.tools),
        printer,
        host,
        pending_calls: unsent_calls,
        pending_sleeps: sleeps.into_iter().map(|(id, left)| (id, now.checked_add(left).unwrap_or(now))).collect(),
        sleep,
        limit: None,
    };
    let results = session.results(resume.results.clone(), waiting.calls());
    let step = session.answer(progress, waiting, results);
    session.finish(step)
}

/// The state of a run between suspensions.
struct Session<'p, O: Write, E: Write, H> {
    /// The script, for repairing tracebacks and fingerprinting a parked state.
    source: &'p str,
    bindings: Bindings,
    printer: &'p mut Printer<O, E>,
    host: H,
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

impl<O: Write, E: Write, H: FnMut(Vec<CallRequest>, &mut ParkState<'_>) -> Vec<CallResult>> Session<'_, O, E, H> {
    fn print(&mut self) -> PrintWriter<'_> {
        PrintWriter::Callback(&mut *self.printer)
    }

    /// Drives the run from `step` to its outcome, output flushed.
    fn finish(&mut self, step: Step) -> Outcome {
        let outcome = self.drive(step);
        self.printer.flush();
        outcome
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
                Ok(RunProgress::Complete(result)) => return self.outcome_of(&result),
                Ok(RunProgress::FunctionCall(call)) => self.function_call(call),
                Ok(RunProgress::OsCall(call)) => self.os_call(call),
                Ok(RunProgress::ResolveFutures(state)) => self.resolve_futures(state),
                Ok(RunProgress::NameLookup(lookup)) => self.name_lookup(lookup),
            };
        }
    }

    /// A name the script uses and never defined: a tool's function (made on
    /// first use, then kept in the namespace), else a `NameError`. Attributes
    /// of host objects: this runtime hands out none.
    fn name_lookup(&mut self, lookup: NameLookup) -> Step {
        let value = match lookup.object_id() {
            None => self.bindings.lookup(&lookup.name),
            Some(_) => None,
        };
        lookup.resume(value.map_or(NameLookupResult::Undefined, NameLookupResult::Value), self.print())
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
        let waiting = if call.function_name != CALL_ASYNC {
            Waiting::Call
        } else if call.allow_eager_await {
            // Awaited on the spot with nothing else runnable: no batch to wait for.
            Waiting::AwaitedCall
        } else {
            self.pending_calls.insert(call.call_id, request);
            return call.resume_pending(self.print());
        };
        let progress = RunProgress::FunctionCall(call);
        let results = self.send(vec![request], &progress, &waiting);
        self.answer(progress, waiting, results)
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
        let waiting = sorted_ids(&state);
        let batch: Vec<u32> = waiting.iter().copied().filter(|id| self.pending_calls.contains_key(id)).collect();
        if !batch.is_empty() {
            let requests = batch.iter().filter_map(|id| self.pending_calls.remove(id)).collect();
            let progress = RunProgress::ResolveFutures(state);
            let waiting = Waiting::Futures { batch };
            let results = self.send(requests, &progress, &waiting);
            return self.answer(progress, waiting, results);
        }
        let all_sleeps = waiting.iter().all(|id| self.pending_sleeps.contains_key(id));
        let earliest = waiting.iter().filter_map(|id| self.pending_sleeps.get(id)).min().copied();
        if all_sleeps
            && let Some(due) = earliest
            && let Err(carrier) = self.sleep(due.saturating_duration_since(Instant::now()))
        {
            return state.abort(carrier, self.print());
        }
        self.settle(state, Vec::new())
    }

    /// Resumes monty at the suspension `waiting` names with `results`, one
    /// per call of its batch: the batch just answered live, or the one a
    /// resumed run parked on.
    fn answer(&mut self, progress: RunProgress, waiting: Waiting, results: Vec<MontyObject>) -> Step {
        let mut results = results.into_iter();
        let mut next = || results.next().unwrap_or_else(|| call_result_to_object(&missing_result()));
        match (progress, waiting) {
            (RunProgress::FunctionCall(call), Waiting::Call) => call.resume(next(), self.print()),
            (RunProgress::FunctionCall(call), Waiting::AwaitedCall) => call.resume_eager(Ok(next()), self.print()),
            (RunProgress::ResolveFutures(state), Waiting::Futures { batch }) => {
                let answered = batch.into_iter().map(|id| (id, ExtFunctionResult::Return(next()))).collect();
                self.settle(state, answered)
            }
            // `park::read` refuses such a pair, and the live runner makes none.
            _ => Err(MontyException::new(
                ExcType::RuntimeError,
                Some("the runtime lost track of where the script waits (a bug in tether-python)".into()),
            )),
        }
    }

    /// Resumes the tasks with `resolved` (the answered calls), the sleeps now
    /// due, and an error for any awaitable the runtime does not know.
    fn settle(&mut self, state: ResolveFutures, mut resolved: Vec<(u32, ExtFunctionResult)>) -> Step {
        let now = Instant::now();
        for id in sorted_ids(&state) {
            if resolved.iter().any(|(answered, _)| *answered == id) {
                continue;
            }
            match self.pending_sleeps.get(&id) {
                Some(due) if *due <= now => {
                    self.pending_sleeps.remove(&id);
                    resolved.push((id, ExtFunctionResult::Return(MontyObject::none())));
                }
                Some(_) => {}
                None if self.pending_calls.contains_key(&id) => {}
                None => {
                    let message = "the runtime lost track of this awaitable (a bug in tether-python)";
                    resolved.push((
                        id,
                        ExtFunctionResult::Error(MontyException::new(ExcType::RuntimeError, Some(message.into()))),
                    ));
                }
            }
        }
        if resolved.is_empty() {
            // Only reachable if monty waits on nothing; resuming with nothing would spin.
            let exception = MontyException::new(ExcType::RuntimeError, Some("every task waits, on nothing".into()));
            return state.abort(exception, self.print());
        }
        state.resume(resolved, self.print())
    }

    /// Sends one batch, output first so the host sees it in order; returns
    /// one result dict per request whatever the host answered. Should the
    /// host ask to park, the state it gets is `progress` waiting at `waiting`.
    fn send(&mut self, requests: Vec<CallRequest>, progress: &RunProgress, waiting: &Waiting) -> Vec<MontyObject> {
        self.printer.flush();
        let count = requests.len();
        let suspended = Suspended {
            source: self.source,
            progress,
            waiting,
            unsent_calls: &self.pending_calls,
            sleeps: &self.pending_sleeps,
            sleep: &self.sleep,
        };
        let results = (self.host)(requests, &mut |max_bytes| suspended.park(max_bytes));
        self.results(results, count)
    }

    /// `results` as `count` result dicts: a call the host left unanswered
    /// fails with `missing_result`, answers past `count` are dropped.
    fn results(&self, mut results: Vec<CallResult>, count: usize) -> Vec<MontyObject> {
        results.resize_with(count, missing_result);
        results.iter().map(call_result_to_object).collect()
    }

    /// The outcome of a script that completed with `result`: the result as
    /// JSON, what `json.dumps` would refuse converted (`convert::result_to_json`)
    /// and noted on stderr, where the model reads it with the output.
    fn outcome_of(&mut self, result: &MontyObject) -> Outcome {
        match result_to_json(result.as_ref()) {
            Ok(converted) => {
                if let Some(note) = converted.note() {
                    // A write error only means the host capped the output.
                    let _ = self.printer.stderr_write(note.into());
                }
                Outcome::Ok(converted.value)
            }
            // Only a result too large for any host.
            Err(error) => Outcome::Err(ScriptError {
                kind: RunErrorKind::RuntimeError.as_str().to_owned(),
                message: format!("the script's result cannot be sent: {error}"),
                exception_type: error.exc_type().to_string(),
                ..ScriptError::default()
            }),
        }
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

/// The ids of the awaitables every task waits on, oldest first: monty lists
/// the newest first, and ids grow with each call, so a batch goes out in the
/// order the script made its calls.
fn sorted_ids(state: &ResolveFutures) -> Vec<u32> {
    let mut ids = state.pending_call_ids().to_vec();
    ids.sort_unstable();
    ids
}

fn missing_result() -> CallResult {
    CallResult::Err(Failure::from(&Reason::MissingResult))
}

#[cfg(test)]
mod tests;
