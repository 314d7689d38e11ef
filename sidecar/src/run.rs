//! One run: a fresh store and instance, the guest's `_start`, and how it ended.

use crate::abi::HostLink;
use crate::calls::{CallPort, RunLink};
use crate::config::Limits;
use crate::cpu::CpuMeter;
use crate::engine::ToolFields;
use crate::error::{LimitExceeded, RejectRun, RunEnd};
use crate::memory::{MemoryBudget, MemoryLimiter};
use crate::output::{CapturedOutput, Stream};
use crate::state::RunState;
use crate::stream::BackendGone;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tether_guest::{Outcome, StartDoc, ToolDoc, ToolSchema};
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
}

impl RunPlan {
    /// Checks `start` against the sidecar's `limits` and writes the start
    /// document of a runtime that reads `tool_fields` of each tool.
    ///
    /// # Errors
    /// [`RejectRun::Protocol`] for a malformed `Start` (missing run id,
    /// unreadable input, or a tool schema the guest would read that is not
    /// JSON).
    pub(crate) fn new(
        start: pb::Start,
        sidecar_limits: &Limits,
        tool_fields: ToolFields,
    ) -> Result<RunPlan, RejectRun> {
        if start.run_id.is_empty() {
            return Err(RejectRun::Protocol("`Start.run_id` is required".into()));
        }
        let limits = sidecar_limits.tightened_by(start.limits.as_ref());
        // The document's size, near enough that writing it seldom reallocates:
        // with MCP tools it runs to a hundred kilobytes.
        let tool_bytes = |t: &pb::ToolSpec| match tool_fields {
            ToolFields::All => 64 + t.name.len() + t.description.len() + t.input_schema_json.len(),
            ToolFields::NamesOnly => 64 + t.name.len(),
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
            if tool_fields == ToolFields::NamesOnly {
                tools.push(ToolDoc {
                    name: tool.name,
                    description: String::new(),
                    input_schema: ToolSchema::default(),
                });
                continue;
            }
            // Checked and passed on as text: the guest reads it only if it wants it.
            let schema_json = if tool.input_schema_json.trim().is_empty() {
                r#"{"type":"object"}"#.to_owned()
            } else {
                tool.input_schema_json
            };
            let input_schema = ToolSchema::from_json(schema_json).map_err(|e| {
                RejectRun::Protocol(format!("the input schema of tool `{}` is not valid JSON: {e}", tool.name))
            })?;
            tools.push(ToolDoc { name: tool.name, description: tool.description, input_schema });
        }
        let parent_call_id = if start.parent_call_id.is_empty() { start.run_id.clone() } else { start.parent_call_id };
        let source_bytes = start.source.len() as u64;
        let doc = StartDoc {
            abi: tether_guest::ABI_VERSION,
            language: start.language.clone(),
            source: start.source,
            input,
            tools,
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
        })
    }
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
    output: &CapturedOutput,
    meters: Meters<'_>,
) -> (RunEnd, Option<Spent>) {
    if plan.source_bytes > plan.limits.script_bytes {
        let end = RunEnd::Limit(LimitExceeded::ScriptSize { size: plan.source_bytes, limit: plan.limits.script_bytes });
        return (end, None);
    }
    let wasi = WasiCtxBuilder::new().stdout(output.pipe(Stream::Stdout)).stderr(output.pipe(Stream::Stderr)).build_p1();
    let state = RunState {
        wasi,
        limiter: MemoryLimiter::new(plan.limits.memory_bytes, meters.memory),
        host: HostLink::new(start_doc, calls),
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

    fn guest_tool(plan: &RunPlan) -> serde_json::Value {
        let doc: serde_json::Value = serde_json::from_slice(&plan.start_doc).unwrap();
        doc["tools"][0].clone()
    }

    #[test]
    fn a_tool_schema_reaches_the_guest_as_given_and_a_broken_one_is_refused() {
        let limits = Limits::default();
        let schema = r#"{"type": "object", "required": ["x"]}"#;
        let plan = RunPlan::new(start_with_schema(schema), &limits, ToolFields::All).unwrap();
        assert_eq!(guest_tool(&plan)["input_schema"], serde_json::json!({"type": "object", "required": ["x"]}));
        let plan = RunPlan::new(start_with_schema("  "), &limits, ToolFields::All).unwrap();
        assert_eq!(guest_tool(&plan)["input_schema"], serde_json::json!({"type": "object"}), "no schema: any object");
        let Err(RejectRun::Protocol(message)) =
            RunPlan::new(start_with_schema(r#"{"type": "#), &limits, ToolFields::All)
        else {
            panic!("a schema that is not JSON must be refused");
        };
        assert!(message.contains("tool `t`"), "{message}");
    }

    #[test]
    fn a_guest_that_reads_names_only_gets_names_only() {
        let mut start = start_with_schema(r#"{"type": "object", "required": ["x"]}"#);
        start.tools[0].description = "Does t.".into();
        let plan = RunPlan::new(start, &Limits::default(), ToolFields::NamesOnly).unwrap();
        assert_eq!(guest_tool(&plan), serde_json::json!({"name": "t", "description": "", "input_schema": null}));
        // What it never reads is not checked either.
        assert!(RunPlan::new(start_with_schema(r#"{"type": "#), &Limits::default(), ToolFields::NamesOnly).is_ok());
    }
}
