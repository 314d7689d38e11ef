//! One run: a fresh store and instance, the guest's `_start`, and how it ended.

use crate::abi::{HostLink, ParkPlan, Parked};
use crate::calls::{CallPort, RunLink, to_call_result};
use crate::config::Limits;
use crate::cpu::CpuMeter;
use crate::engine::ToolFields;
use crate::error::{LimitExceeded, RejectRun, RunEnd};
use crate::memory::{MemoryBudget, MemoryLimiter};
use crate::output::{CapturedOutput, Stream};
use crate::park::{self, Carried, ParkKey, ResumeRefused};
use crate::state::RunState;
use crate::stream::BackendGone;
use prost::Message as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tether_codes::Reason;
use tether_guest::wire::Resume;
use tether_guest::{CallResult, Failure, Outcome, StartDoc, ToolDoc, ToolSchema};
use tether_proto::pb;
use wasmtime::{InstancePre, Store, Trap, UpdateDeadline};
use wasmtime_wasi::{I32Exit, WasiCtxBuilder};

/// A `Start` message, checked, with the limits that apply to it.
#[derive(Debug)]
pub(crate) struct RunPlan {
    /// The backend's run id.
    pub(crate) run_id: String,
    /// The turn that owns the run.
    pub(crate) turn_id: String,
    /// The call that started the script; nested ids hang below it.
    pub(crate) parent_call_id: String,
    /// The runtime name.
    pub(crate) language: String,
    /// The limits in force: the sidecar's, tightened by the request.
    pub(crate) limits: Limits,
    /// The serialized start document for the guest; the run hands it to
    /// [`execute`], keeping no copy.
    pub(crate) start_doc: Vec<u8>,
    /// The script's size, checked against `limits.script_bytes` when the run starts.
    pub(crate) source_bytes: u64,
    /// About how many bytes the `Start` had on the wire.
    pub(crate) start_bytes: u64,
    /// The backend accepts `Parked` (`Start.may_park`).
    pub(crate) may_park: bool,
    /// For a resumed run, how each call it awaited ended (the values left
    /// out): counted in the metrics as the run starts.
    pub(crate) resumed_results: Vec<CallResult>,
    /// For a run resumed from a park: what it carried (its guest state is
    /// in `start_doc` now), or why it cannot resume.
    pub(crate) resumed: Option<Result<Carried, ResumeRefused>>,
}

/// What a `Start` is checked against: the sidecar's limits, and the runtime
/// it names with the key that sealed its parked states.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Admitting<'a> {
    /// The sidecar's limits.
    pub(crate) limits: &'a Limits,
    /// What the runtime's start document carries of each tool.
    pub(crate) tool_fields: ToolFields,
    /// The runtime's build (a parked state must come from it).
    pub(crate) build: &'a [u8; 32],
    /// What sealed parked states.
    pub(crate) park_key: &'a ParkKey,
}

impl RunPlan {
    /// Checks `start` against what it is `admitting` to and writes the
    /// start document; for a resumed run (`Start.resume`), unseals its
    /// parked state and answers the batch it waits on.
    ///
    /// # Errors
    /// [`RejectRun::Protocol`] for a malformed `Start` (missing run id,
    /// unreadable input, a tool schema the guest would read that is not
    /// JSON, resume results that do not answer exactly the calls the run
    /// waits on). A parked state that cannot resume is not an error here:
    /// the run ends with why ([`RunPlan::resumed`]).
    pub(crate) fn new(mut start: pb::Start, admitting: Admitting<'_>) -> Result<RunPlan, RejectRun> {
        if start.run_id.is_empty() {
            return Err(RejectRun::Protocol("`Start.run_id` is required".into()));
        }
        let tool_fields = admitting.tool_fields;
        let start_bytes = self::start_bytes(&start);
        let resume = start.resume.take();
        let parent_call_id = if start.parent_call_id.is_empty() { &start.run_id } else { &start.parent_call_id };
        let carried = resume.as_ref().map(|resume| {
            let carried =
                park::unseal(admitting.park_key, &resume.state, admitting.build, &start.turn_id, &start.run_id)?;
            // Call ids go on from the parked run's: the same parent's.
            if carried.parent_call_id != *parent_call_id {
                return Err(ResumeRefused::OtherRun {
                    field: "parent_call_id",
                    sealed: carried.parent_call_id,
                    given: parent_call_id.clone(),
                });
            }
            Ok(carried)
        });
        // A resumed run keeps the limits it parked under, tightened again.
        let parked_limits = match &carried {
            Some(Ok(carried)) => admitting.limits.tightened_by(carried.limits.as_ref()),
            _ => *admitting.limits,
        };
        let limits = parked_limits.tightened_by(start.limits.as_ref());
        // The document's size, near enough that writing it seldom reallocates:
        // with MCP tools it runs to a hundred kilobytes.
        let tool_bytes = |t: &pb::ToolSpec| match tool_fields {
            ToolFields::All => 64 + t.name.len() + t.description.len() + t.input_schema_json.len(),
            ToolFields::NamesOnly => 64 + t.name.len(),
            ToolFields::SchemasIfNamed => 64 + t.name.len() + t.input_schema_json.len(),
        };
        let doc_bytes =
            256 + start.source.len() + start.input_json.len() + start.tools.iter().map(tool_bytes).sum::<usize>();
        let input = if start.input_json.trim().is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&start.input_json)
                .map_err(|e| RejectRun::Protocol(format!("`Start.input_json` is not valid JSON: {e}")))?
        };
        if tether_guest::wire::depth(&input) > tether_guest::wire::MAX_DEPTH {
            let max = tether_guest::wire::MAX_DEPTH;
            return Err(RejectRun::Protocol(format!("`Start.input_json` nests deeper than `{max}` levels")));
        }
        let mut tools = Vec::with_capacity(start.tools.len());
        for tool in start.tools {
            // A guest that checks a script's calls before it runs reads the
            // schemas of the tools the script could call by name; a substring
            // test over-approximates "names", which only costs a schema.
            let schema_read = match tool_fields {
                ToolFields::All => true,
                ToolFields::NamesOnly => false,
                ToolFields::SchemasIfNamed => resume.is_none() && start.source.contains(&tool.name),
            };
            if !schema_read {
                tools.push(ToolDoc {
                    name: tool.name,
                    description: String::new(),
                    input_schema: ToolSchema::default(),
                });
                continue;
            }
            let description = if tool_fields == ToolFields::All { tool.description } else { String::new() };
            // Checked and passed on as text: the guest reads it only if it wants it.
            let schema_json = if tool.input_schema_json.trim().is_empty() {
                r#"{"type":"object"}"#.to_owned()
            } else {
                tool.input_schema_json
            };
            let input_schema = ToolSchema::from_json(schema_json).map_err(|e| {
                RejectRun::Protocol(format!("the input schema of tool `{}` is not valid JSON: {e}", tool.name))
            })?;
            tools.push(ToolDoc { name: tool.name, description, input_schema });
        }
        let parent_call_id = if start.parent_call_id.is_empty() { start.run_id.clone() } else { start.parent_call_id };
        let source_bytes = start.source.len() as u64;
        let mut resumed_results = Vec::new();
        let (resumed, resume_doc) = match (carried, resume) {
            (Some(Ok(mut carried)), Some(resume)) => {
                let results = answer_parked_batch(&carried, resume.results, limits.result_bytes)?;
                resumed_results = carried
                    .batch
                    .iter()
                    .zip(&results)
                    .filter(|(call, _)| call.answer_json.is_none())
                    .map(|(_, result)| match result {
                        CallResult::Ok(_) => CallResult::Ok(serde_json::Value::Null),
                        CallResult::Err(failure) => CallResult::Err(failure.clone()),
                    })
                    .collect();
                // Only the guest needs these now.
                carried.batch.clear();
                let doc = Resume::new(&std::mem::take(&mut carried.guest_state), results);
                (Some(Ok(carried)), Some(doc))
            }
            (Some(Err(refused)), _) => (Some(Err(refused)), None),
            _ => (None, None),
        };
        let doc = StartDoc {
            abi: tether_guest::ABI_VERSION,
            language: start.language.clone(),
            source: start.source,
            input,
            tools,
            resume: resume_doc,
        };
        let mut start_doc = Vec::with_capacity(doc_bytes);
        serde_json::to_writer(&mut start_doc, &doc)
            .map_err(|e| RejectRun::Protocol(format!("unusable `Start`: {e}")))?;
        Ok(RunPlan {
            run_id: start.run_id,
            turn_id: start.turn_id,
            parent_call_id,
            language: start.language,
            limits,
            start_doc,
            source_bytes,
            start_bytes,
            may_park: start.may_park,
            resumed_results,
            resumed,
        })
    }
}

/// The results a resumed run's guest gets for the batch it parked on: the
/// answers sealed with it, and `results` for the calls it awaited.
///
/// # Errors
/// [`RejectRun::Protocol`] unless `results` answer each awaited call once
/// and nothing else.
fn answer_parked_batch(
    carried: &Carried,
    results: Vec<pb::ToolResult>,
    result_bytes: u64,
) -> Result<Vec<CallResult>, RejectRun> {
    let awaiting = carried.awaiting();
    let mut by_id = std::collections::HashMap::with_capacity(results.len());
    for result in results {
        if !awaiting.contains(&result.id) {
            return Err(RejectRun::Protocol(format!(
                "`Start.resume.results` answers `{}`, which the parked run does not wait on (it waits on {awaiting:?})",
                result.id
            )));
        }
        if result.outcome.is_none() {
            return Err(RejectRun::Protocol(format!(
                "`ToolResult` `{}` has neither `value_json` nor `failure`",
                result.id
            )));
        }
        if let Some(repeated) = by_id.insert(result.id.clone(), result) {
            return Err(RejectRun::Protocol(format!("`Start.resume.results` answers `{}` twice", repeated.id)));
        }
    }
    carried
        .batch
        .iter()
        .map(|call| match &call.answer_json {
            // Sealed by this sidecar's key, so it reads; a failure is a bug.
            Some(json) => {
                Ok(serde_json::from_str(json)
                    .unwrap_or_else(|_| CallResult::Err(Failure::from(&Reason::MissingResult))))
            }
            None => match by_id.remove(&call.id) {
                Some(result) => Ok(to_call_result(&call.name, Some(result), result_bytes)),
                None => Err(RejectRun::Protocol(format!(
                    "`Start.resume.results` has no result for `{}`; answer every id in `Parked.awaiting`",
                    call.id
                ))),
            },
        })
        .collect()
}

/// The bytes `start` held on the wire, near enough: its payloads, and room
/// for its ids and framing.
pub(crate) fn start_bytes(start: &pb::Start) -> u64 {
    let tools: usize =
        start.tools.iter().map(|t| 16 + t.name.len() + t.description.len() + t.input_schema_json.len()).sum();
    let ids = start.run_id.len() + start.turn_id.len() + start.parent_call_id.len() + start.language.len();
    // A resumed run's state (as the guest gets it, in base64) and results.
    let resume = start.resume.as_ref().map_or(0, |resume| {
        resume.state.len() * 2 + resume.results.iter().map(|result| 64 + result.encoded_len()).sum::<usize>()
    });
    (256 + start.source.len() + start.input_json.len() + ids + tools + resume) as u64
}

/// What a run is measured and charged against.
#[derive(Debug)]
pub(crate) struct Meters<'a> {
    /// The run's CPU time.
    pub(crate) cpu: Arc<CpuMeter>,
    /// The sidecar's guest memory budget.
    pub(crate) memory: Arc<MemoryBudget>,
    /// Where the run's peak memory is reported.
    pub(crate) peak_memory: &'a AtomicU64,
    /// The run's stream, for output sent while the guest computes.
    pub(crate) link: RunLink,
}

/// A run's instance after the guest ended. Dropping it returns the instance,
/// its memory and its slot to the pool (resetting the pages the run dirtied),
/// so the caller may answer the backend first.
pub(crate) struct Spent {
    _store: Store<RunState>,
}

/// Runs the guest to its end. The caller bounds it by the deadline and drops
/// it on cancellation; dropping it frees the instance (and its memory) at once.
/// When the guest ran, the instance comes back as [`Spent`]. `start_doc` is
/// the plan's start document, which the guest takes when it starts.
pub(crate) async fn execute(
    pre: &InstancePre<RunState>,
    plan: &RunPlan,
    start_doc: Vec<u8>,
    calls: CallPort,
    park: Option<ParkPlan>,
    output: &CapturedOutput,
    meters: Meters<'_>,
) -> (RunEnd, Option<Spent>) {
    if let Some(Err(refused)) = &plan.resumed {
        return (RunEnd::ResumeRefused(refused.clone()), None);
    }
    if plan.source_bytes > plan.limits.script_bytes {
        let end = RunEnd::Limit(LimitExceeded::ScriptSize { size: plan.source_bytes, limit: plan.limits.script_bytes });
        return (end, None);
    }
    let wasi = WasiCtxBuilder::new().stdout(output.pipe(Stream::Stdout)).stderr(output.pipe(Stream::Stderr)).build_p1();
    let state = RunState {
        wasi,
        limiter: MemoryLimiter::new(plan.limits.memory_bytes, meters.memory),
        host: HostLink::new(start_doc, calls, park),
    };
    let mut store = Store::new(pre.module().engine(), state);
    store.limiter(|state| &mut state.limiter);
    let cpu_limit = plan.limits.cpu_time;
    store.set_epoch_deadline(1);
    let cpu = meters.cpu;
    let link = meters.link;
    store.epoch_deadline_callback(move |_| {
        if cpu.used() > cpu_limit {
            return Err(LimitExceeded::CpuTime { limit: cpu_limit }.into());
        }
        link.stream_output_if_due();
        // Yield at every tick so other runs and the gRPC server get the thread.
        Ok(UpdateDeadline::Yield(1))
    });

    let end = match run_guest(pre, &mut store).await {
        RunEnd::Completed(value) => within_result_limit(value, plan.limits.script_result_bytes),
        end => end,
    };
    meters.peak_memory.store(store.data().limiter.peak_bytes() as u64, Ordering::Relaxed);
    (end, Some(Spent { _store: store }))
}

async fn run_guest(pre: &InstancePre<RunState>, store: &mut Store<RunState>) -> RunEnd {
    let instance = match pre.instantiate_async(&mut *store).await {
        Ok(instance) => instance,
        Err(error) => {
            // A trap here is the guest's own start code trapping: its fault.
            return match (error.downcast_ref::<LimitExceeded>(), error.downcast_ref::<Trap>()) {
                (Some(limit), _) => RunEnd::Limit(limit.clone()),
                (None, Some(_)) => classify_trap(error),
                (None, None) => RunEnd::Internal(format!("instantiating the guest failed: {error:#}")),
            };
        }
    };
    let entry = match instance.get_typed_func::<(), ()>(&mut *store, "_start") {
        Ok(entry) => entry,
        Err(error) => return RunEnd::GuestFault(format!("the guest has no `_start`: {error:#}")),
    };
    let result = entry.call_async(&mut *store, ()).await;
    let outcome = store.data_mut().host.take_outcome();
    match result {
        Ok(()) => from_outcome(outcome),
        Err(error) if error.downcast_ref::<Parked>().is_some() => match store.data_mut().host.take_parked() {
            Some(parked) => RunEnd::Parked(Box::new(parked)),
            None => RunEnd::Internal("the guest parked with no state recorded".into()),
        },
        Err(error) => match error.downcast_ref::<I32Exit>() {
            Some(I32Exit(0)) => from_outcome(outcome),
            _ => classify_trap(error),
        },
    }
}

/// The script's result, unless it is too large to send back in `Finished`.
fn within_result_limit(value: serde_json::Value, limit: u64) -> RunEnd {
    let size = value.to_string().len() as u64;
    if size > limit {
        return RunEnd::Limit(LimitExceeded::ScriptResult { size, limit });
    }
    RunEnd::Completed(value)
}

fn from_outcome(outcome: Option<Outcome>) -> RunEnd {
    match outcome {
        Some(Outcome::Ok(value)) => RunEnd::Completed(value),
        Some(Outcome::Err(error)) => RunEnd::ScriptFailed(error),
        None => RunEnd::GuestFault("the guest exited without reporting an outcome (`tether_v1.finish`)".into()),
    }
}

fn classify_trap(error: wasmtime::Error) -> RunEnd {
    if let Some(limit) = error.downcast_ref::<LimitExceeded>() {
        return RunEnd::Limit(limit.clone());
    }
    if error.downcast_ref::<BackendGone>().is_some() {
        return RunEnd::BackendGone;
    }
    if let Some(Trap::StackOverflow) = error.downcast_ref::<Trap>() {
        return RunEnd::Limit(LimitExceeded::Stack);
    }
    RunEnd::GuestFault(format!("{error:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start_with_schema(schema: &str) -> pb::Start {
        pb::Start {
            run_id: "r".into(),
            language: "python".into(),
            source: "1".into(),
            tools: vec![pb::ToolSpec {
                name: "t".into(),
                description: String::new(),
                input_schema_json: schema.into(),
            }],
            ..Default::default()
        }
    }

    fn planned(start: pb::Start, limits: &Limits, tool_fields: ToolFields) -> Result<RunPlan, RejectRun> {
        let key = ParkKey::from_secret(&[9; 32]).unwrap();
        RunPlan::new(start, Admitting { limits, tool_fields, build: &[0; 32], park_key: &key })
    }

    fn guest_tool(plan: &RunPlan) -> serde_json::Value {
        let doc: serde_json::Value = serde_json::from_slice(&plan.start_doc).unwrap();
        doc["tools"][0].clone()
    }

    #[test]
    fn a_tool_schema_reaches_the_guest_as_given_and_a_broken_one_is_refused() {
        let limits = Limits::default();
        let schema = r#"{"type": "object", "required": ["x"]}"#;
        let plan = planned(start_with_schema(schema), &limits, ToolFields::All).unwrap();
        assert_eq!(guest_tool(&plan)["input_schema"], serde_json::json!({"type": "object", "required": ["x"]}));
        let plan = planned(start_with_schema("  "), &limits, ToolFields::All).unwrap();
        assert_eq!(guest_tool(&plan)["input_schema"], serde_json::json!({"type": "object"}), "no schema: any object");
        let Err(RejectRun::Protocol(message)) = planned(start_with_schema(r#"{"type": "#), &limits, ToolFields::All)
        else {
            panic!("a schema that is not JSON must be refused");
        };
        assert!(message.contains("tool `t`"), "{message}");
    }

    #[test]
    fn a_guest_that_reads_names_only_gets_names_only() {
        let mut start = start_with_schema(r#"{"type": "object", "required": ["x"]}"#);
        start.tools[0].description = "Does t.".into();
        let plan = planned(start, &Limits::default(), ToolFields::NamesOnly).unwrap();
        assert_eq!(guest_tool(&plan), serde_json::json!({"name": "t", "description": "", "input_schema": null}));
        // What it never reads is not checked either.
        assert!(planned(start_with_schema(r#"{"type": "#), &Limits::default(), ToolFields::NamesOnly).is_ok());
    }

    #[test]
    fn a_guest_that_reads_the_schemas_of_named_tools_gets_those_alone() {
        let schema = r#"{"type": "object", "required": ["x"]}"#;
        let mut start = start_with_schema(schema);
        start.tools[0].description = "Does t.".into();
        start.tools.push(pb::ToolSpec {
            name: "other".into(),
            description: "Other.".into(),
            input_schema_json: schema.into(),
        });
        start.source = "t(x=1)".into();
        let plan = planned(start.clone(), &Limits::default(), ToolFields::SchemasIfNamed).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&plan.start_doc).unwrap();
        assert_eq!(
            doc["tools"],
            serde_json::json!([
                {"name": "t", "description": "", "input_schema": {"type": "object", "required": ["x"]}},
                {"name": "other", "description": "", "input_schema": null},
            ])
        );
        // A named tool's schema is read, so it is checked; an unnamed one's is not.
        start.tools[0].input_schema_json = r#"{"type": "#.into();
        assert!(matches!(
            planned(start.clone(), &Limits::default(), ToolFields::SchemasIfNamed),
            Err(RejectRun::Protocol(_))
        ));
        start.source = "1".into();
        assert!(planned(start, &Limits::default(), ToolFields::SchemasIfNamed).is_ok());
    }
}
