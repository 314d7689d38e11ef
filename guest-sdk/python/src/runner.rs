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

use monty::{FunctionCall, MontyRun, NameLookup, OsCall, ResolveFutures, RunProgress};
use monty_types::{
    CompileOptions, ExcType, ExtFunctionResult, MontyException, MontyObject, NameLookupResult, OsPolicy, PrintWriter,
    ResourceLimits, ResourceTracker, SleepMode,
};
use tether_codes::{Reason, RunErrorKind};
use tether_guest::{CallRequest, CallResult, Failure, Outcome, ScriptError, StartDoc};

use crate::{
    api::{self, Bindings, CALL, CALL_ASYNC, UNWRAP},
    convert::{call_result_to_object, to_json},
    errors::{SCRIPT_NAME, limit_error, runtime_error, syntax_error},
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
        results.pop().unwrap_or_else(|| call_result_to_object(&CallResult::Err(Failure::from(&Reason::MissingResult))))
    }

    /// Sends one batch, output first so the host sees it in order; returns
    /// one result dict per request whatever the host answered.
    fn send(&mut self, requests: Vec<CallRequest>) -> Vec<MontyObject> {
        self.printer.flush();
        let count = requests.len();
        let mut results = (self.call_batch)(requests);
        results.resize_with(count, || CallResult::Err(Failure::from(&Reason::MissingResult)));
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

/// The outcome of a script that completed with `result`.
fn outcome_of(result: &MontyObject) -> Outcome {
    match to_json(result.as_ref()) {
        Ok(value) => Outcome::Ok(value),
        // The exception `json.dumps(result)` would raise.
        Err(error) => Outcome::Err(ScriptError {
            kind: RunErrorKind::RuntimeError.as_str().to_owned(),
            message: format!("the script's result is not JSON-serializable: {error}"),
            exception_type: error.exc_type().to_string(),
            ..ScriptError::default()
        }),
    }
}

#[cfg(test)]
mod tests;
