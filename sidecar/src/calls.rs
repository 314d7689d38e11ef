//! A script's tool calls, from the guest to the backend's stream and back.
//!
//! This is where the per-script call cap lives. Every call is counted here
//! BEFORE anything else looks at it, so calls that will be refused count too:
//! a script looping over a tool that does not exist is stopped like any other.
//! Past the cap a call is refused without a trip to the backend; the backend is
//! told once, with `CallCapExceeded`.
//!
//! While a batch waits on the backend the run gives back its execution slot
//! and holds a place among the waiting runs instead; when that cap is full the
//! batch is refused with "call it directly in your next response".

use crate::output::CapturedOutput;
use crate::slots::{Capacity, SlotPermit};
use futures::future::join_all;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tether_guest::{CallRequest, CallResult, Failure};
use tether_proto::pb;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;
use tracing::Instrument;

/// Where a run's messages to the backend go.
pub type Outbound = mpsc::Sender<Result<pb::SidecarMessage, Status>>;

/// The failure codes the sidecar itself gives. The backend's codes come
/// through unchanged.
pub mod codes {
    /// The script passed its per-script call cap.
    pub const CALL_LIMIT: &str = "call_limit_exceeded";
    /// Too many runs are waiting on tool results.
    pub const SIDECAR_BUSY: &str = "sidecar_busy";
    /// The call's arguments are not a JSON object.
    pub const INVALID_ARGUMENTS: &str = "invalid_arguments";
    /// The call's arguments are over the size limit.
    pub const ARGS_TOO_LARGE: &str = "arguments_too_large";
    /// The tool's result is over the size limit.
    pub const RESULT_TOO_LARGE: &str = "result_too_large";
    /// The tool's result is not JSON, or nests too deep for a guest to read.
    pub const INVALID_RESULT: &str = "invalid_result";
    /// The run is ending; the call was abandoned.
    pub const CANCELLED: &str = "cancelled";
}

/// Results the backend still owes a run, by call id. The run's inbound reader
/// delivers into it; the [`CallPort`] waits on it.
#[derive(Debug, Clone, Default)]
pub struct PendingCalls {
    waiting: Arc<Mutex<HashMap<String, oneshot::Sender<pb::ToolResult>>>>,
}

impl PendingCalls {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, oneshot::Sender<pb::ToolResult>>> {
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn register(&self, id: &str) -> oneshot::Receiver<pb::ToolResult> {
        let (sender, receiver) = oneshot::channel();
        self.lock().insert(id.to_owned(), sender);
        receiver
    }

    /// Hands `result` to the call waiting for it.
    ///
    /// # Errors
    /// Returns the result back if no call of this run waits for its id.
    pub fn deliver(&self, result: pb::ToolResult) -> Result<(), pb::ToolResult> {
        match self.lock().remove(&result.id) {
            // A send fails only if the call was abandoned meanwhile; nothing waits then.
            Some(sender) => {
                let _ = sender.send(result);
                Ok(())
            }
            None => Err(result),
        }
    }
}

/// Counters of one run, shared with the task that reports them.
#[derive(Debug, Default)]
pub struct CallStats {
    /// Calls the script made, refused ones included.
    pub calls: AtomicU32,
    /// Calls refused because the cap was passed.
    pub refused_by_cap: AtomicU32,
    /// Microseconds spent waiting on the backend.
    pub wait_us: AtomicU64,
}

/// A run's end of the tether: counts, refuses or forwards each call.
#[derive(Debug)]
pub struct CallPort {
    parent_call_id: String,
    max_calls: u32,
    args_bytes: u64,
    result_bytes: u64,
    made: u32,
    batches: u32,
    cap_reported: bool,
    outbound: Outbound,
    pending: PendingCalls,
    capacity: Arc<Capacity>,
    slot: Option<SlotPermit>,
    output: CapturedOutput,
    stats: Arc<CallStats>,
}

/// What a [`CallPort`] needs to know of its run.
#[derive(Debug)]
pub struct CallPortSetup {
    /// Nested ids are `<parent_call_id>/<n>`.
    pub parent_call_id: String,
    /// The per-script call cap.
    pub max_calls: u32,
    /// The size limit of one call's arguments.
    pub args_bytes: u64,
    /// The size limit of one call's result.
    pub result_bytes: u64,
}

impl CallPort {
    /// A port for a run that holds `slot`.
    pub fn new(
        setup: CallPortSetup,
        outbound: Outbound,
        pending: PendingCalls,
        capacity: Arc<Capacity>,
        slot: SlotPermit,
        output: CapturedOutput,
        stats: Arc<CallStats>,
    ) -> Self {
        CallPort {
            parent_call_id: setup.parent_call_id,
            max_calls: setup.max_calls,
            args_bytes: setup.args_bytes,
            result_bytes: setup.result_bytes,
            made: 0,
            batches: 0,
            cap_reported: false,
            outbound,
            pending,
            capacity,
            slot: Some(slot),
            output,
            stats,
        }
    }

    /// Makes a batch of calls and returns one result per call, in order.
    ///
    /// # Errors
    /// Only when the backend is gone (the run is ending anyway).
    pub async fn call_batch(&mut self, requests: Vec<CallRequest>) -> wasmtime::Result<Vec<CallResult>> {
        let mut results: Vec<Option<CallResult>> = vec![None; requests.len()];
        let mut outgoing = Vec::new();
        for (index, request) in requests.into_iter().enumerate() {
            // Counted first, before any judgement: see the module docs.
            self.made += 1;
            self.stats.calls.fetch_add(1, Ordering::Relaxed);
            let id = format!("{}/{}", self.parent_call_id, self.made);
            if self.made > self.max_calls {
                results[index] = Some(self.refuse_over_cap(&id, &request.name).await?);
                continue;
            }
            match self.check(&request) {
                Ok(args_json) => outgoing.push((index, pb::ToolCall { id, name: request.name, args_json, batch: 0, batch_size: 0 })),
                Err(failure) => results[index] = Some(CallResult::Err(failure)),
            }
        }
        if !outgoing.is_empty() {
            let answered = self.send_and_wait(outgoing.iter().map(|(_, call)| call.clone()).collect()).await?;
            for ((index, _), result) in outgoing.into_iter().zip(answered) {
                results[index] = Some(result);
            }
        }
        Ok(results.into_iter().map(|r| r.unwrap_or_else(|| CallResult::Err(failure(codes::CANCELLED, "the call was not made")))).collect())
    }

    /// What the sidecar itself refuses before a call may leave: arguments
    /// that are not an object, or too large.
    fn check(&self, request: &CallRequest) -> Result<String, Failure> {
        if !request.args.is_object() {
            return Err(failure(codes::INVALID_ARGUMENTS, "tool arguments must be a JSON object (keyword arguments)"));
        }
        let args_json = request.args.to_string();
        if args_json.len() as u64 > self.args_bytes {
            return Err(failure(
                codes::ARGS_TOO_LARGE,
                &format!("the arguments are `{}` bytes, over the `{}`-byte limit (max_args_bytes); pass less data per call", args_json.len(), self.args_bytes),
            ));
        }
        Ok(args_json)
    }

    async fn refuse_over_cap(&mut self, id: &str, name: &str) -> wasmtime::Result<CallResult> {
        self.stats.refused_by_cap.fetch_add(1, Ordering::Relaxed);
        if !self.cap_reported {
            self.cap_reported = true;
            tracing::warn!(call_id = id, tool = name, max_calls = self.max_calls, "script passed its call cap");
            let breach = pb::CallCapExceeded { call_id: id.to_owned(), name: name.to_owned(), max_calls: self.max_calls };
            self.send(pb::sidecar_message::Kind::CallCapExceeded(breach)).await?;
        }
        Ok(CallResult::Err(failure(
            codes::CALL_LIMIT,
            &format!(
                "this script has used its `{}` tool calls; narrow the scope or split the work across scripts",
                self.max_calls
            ),
        )))
    }

    async fn send_and_wait(&mut self, mut calls: Vec<pb::ToolCall>) -> wasmtime::Result<Vec<CallResult>> {
        let Some(waiting_place) = self.capacity.waiting().try_enter() else {
            let busy = failure(
                codes::SIDECAR_BUSY,
                "the script sidecar has too many scripts waiting on tools; call it directly in your next response",
            );
            return Ok(calls.iter().map(|_| CallResult::Err(busy.clone())).collect());
        };
        self.forward_output().await?;
        self.batches += 1;
        let batch_size = calls.len() as u32;
        let mut answers = Vec::with_capacity(calls.len());
        for call in &mut calls {
            call.batch = self.batches;
            call.batch_size = batch_size;
            answers.push(self.pending.register(&call.id));
        }
        for call in &calls {
            tracing::debug!(call_id = %call.id, tool = %call.name, "tool call sent");
            self.send(pb::sidecar_message::Kind::ToolCall(call.clone())).await?;
        }

        // The script cannot compute while it waits: give the slot to another run.
        self.slot = None;
        let waited_from = Instant::now();
        let results = join_all(calls.iter().zip(answers).map(|(call, answer)| {
            let span = tracing::info_span!("call", call_id = %call.id, tool = %call.name);
            async move { answer.await.ok() }.instrument(span)
        }))
        .await;
        self.slot = Some(self.capacity.acquire_slot().await);
        // Only now: until it has a slot again this run still holds its instance.
        drop(waiting_place);
        self.stats.wait_us.fetch_add(waited_from.elapsed().as_micros() as u64, Ordering::Relaxed);

        Ok(results.into_iter().map(|result| self.to_call_result(result)).collect())
    }

    fn to_call_result(&self, result: Option<pb::ToolResult>) -> CallResult {
        use pb::tool_result::Outcome;
        let Some(result) = result else {
            return CallResult::Err(failure(codes::CANCELLED, "the run ended before the tool answered"));
        };
        match result.outcome {
            Some(Outcome::ValueJson(json)) if json.len() as u64 > self.result_bytes => CallResult::Err(failure(
                codes::RESULT_TOO_LARGE,
                &format!("the tool's result is `{}` bytes, over the `{}`-byte limit (max_result_bytes); ask for less data", json.len(), self.result_bytes),
            )),
            Some(Outcome::ValueJson(json)) => match serde_json::from_str::<serde_json::Value>(&json) {
                Ok(value) if tether_guest::wire::depth(&value) > tether_guest::wire::MAX_DEPTH => CallResult::Err(failure(
                    codes::INVALID_RESULT,
                    &format!("the tool's result nests deeper than `{}` levels", tether_guest::wire::MAX_DEPTH),
                )),
                Ok(value) => CallResult::Ok(value),
                Err(error) => CallResult::Err(failure(codes::INVALID_RESULT, &format!("the tool's result is not valid JSON: {error}"))),
            },
            Some(Outcome::Failure(f)) => CallResult::Err(Failure { code: f.code, message: f.message }),
            // The inbound reader rejects results with no outcome; this is unreachable in practice.
            None => CallResult::Err(failure(codes::INVALID_RESULT, "the backend sent a result with no outcome")),
        }
    }

    /// Sends what the script printed since the last call, so output reaches
    /// the backend in order with the calls.
    async fn forward_output(&self) -> wasmtime::Result<()> {
        let (stdout, stderr) = self.output.take_new();
        for (stream, data) in [(pb::OutputStream::Stdout, stdout), (pb::OutputStream::Stderr, stderr)] {
            if !data.is_empty() {
                self.send(pb::sidecar_message::Kind::Output(pb::Output { stream: stream as i32, data: data.to_vec() })).await?;
            }
        }
        Ok(())
    }

    async fn send(&self, kind: pb::sidecar_message::Kind) -> wasmtime::Result<()> {
        self.outbound
            .send(Ok(pb::SidecarMessage { kind: Some(kind) }))
            .await
            .map_err(|_| wasmtime::format_err!("the backend's stream is gone"))
    }
}

fn failure(code: &str, message: &str) -> Failure {
    Failure { code: code.to_owned(), message: message.to_owned() }
}
