//! How a backend answers a script's calls.

use serde_json::Value;
use tether_proto::pb;
use tether_telemetry::TraceContext;
use tether_turn::OnAwaitingPerson;

/// One tool call a script made.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptCall {
    /// `<parent call id>/<n>`, n counting from 1.
    pub id: String,
    /// The tool the script named (it may not exist).
    pub name: String,
    /// The arguments, a JSON object.
    pub args: Value,
    /// Calls made together share a batch number; run them concurrently.
    pub batch: u32,
    /// How many calls the batch holds.
    pub batch_size: u32,
    /// The most bytes the result may have as JSON (the run's
    /// `max_result_bytes`); a larger one does not reach the script.
    pub max_result_bytes: u64,
    /// The trace context of the sidecar's span for this call (empty when
    /// the sidecar exports no traces): make your span for the call its child
    /// with [`TraceContext::set_parent_of`], as the turn does.
    pub trace_context: TraceContext,
    /// Call it when the call starts waiting for a person (an approval): a
    /// run that may park then parks at once (`docs/parking.md`). The turn
    /// does, when it is handed this in `CallRequest::on_awaiting_person`.
    pub on_awaiting_person: OnAwaitingPerson,
}

/// A call the sidecar refused by itself (past the per-script cap, arguments
/// not an object or too large, too many runs waiting on tools). The script
/// already has its answer; the backend records the call so every call a
/// script made is audited.
#[derive(Debug, Clone, PartialEq)]
pub struct RefusedCall {
    /// `<parent call id>/<n>`, n counting from 1.
    pub id: String,
    /// The tool the script named.
    pub name: String,
    /// The arguments as JSON text, cut to at most 4 KiB.
    pub args_json: String,
    /// True when `args_json` was cut.
    pub args_truncated: bool,
    /// The code the script got.
    pub code: String,
    /// The message the script got.
    pub message: String,
    /// The trace context of the sidecar's span for this call, as in
    /// [`ScriptCall::trace_context`].
    pub trace_context: TraceContext,
}

/// What a call produced: a value, or the failure-shaped result (refusal,
/// denial, tool error, cancellation) the script receives as a value.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// The tool ran and returned this value.
    Ok(Value),
    /// The call produced no value.
    Failed {
        /// A stable machine code, e.g. `policy_denied`.
        code: String,
        /// A reason written for the model that reads the script's result.
        message: String,
    },
}

impl ToolOutcome {
    /// A failure with `code` and `message`.
    pub fn failed(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolOutcome::Failed { code: code.into(), message: message.into() }
    }

    pub(crate) fn into_proto(self, id: String) -> pb::ToolResult {
        use pb::tool_result::Outcome;
        let outcome = match self {
            ToolOutcome::Ok(value) => Outcome::ValueJson(value.to_string()),
            ToolOutcome::Failed { code, message } => Outcome::Failure(pb::Failure { code, message }),
        };
        pb::ToolResult { id, outcome: Some(outcome) }
    }

    /// A result as the sidecar gets it, back as an outcome (a value that is
    /// not JSON, or no outcome, as the failure the guest would see).
    pub(crate) fn from_proto(result: pb::ToolResult) -> Self {
        use pb::tool_result::Outcome;
        match result.outcome {
            Some(Outcome::ValueJson(json)) => match serde_json::from_str(&json) {
                Ok(value) => ToolOutcome::Ok(value),
                Err(error) => ToolOutcome::failed("invalid_result", format!("the result is not JSON: {error}")),
            },
            Some(Outcome::Failure(failure)) => ToolOutcome::Failed { code: failure.code, message: failure.message },
            None => ToolOutcome::failed("internal", "a result with no outcome"),
        }
    }
}

/// Answers the calls of a run. Implement [`CallHandler::call`] by sending the
/// call through the same path as a call the model makes.
///
/// Calls of one batch are handled concurrently; `call` must be cancel-safe in
/// the sense that dropping its future (the run ended) abandons the call.
#[async_trait::async_trait]
pub trait CallHandler: Send + Sync {
    /// Handles one call and returns what the script receives.
    async fn call(&self, call: ScriptCall) -> ToolOutcome;

    /// The script printed `data` to `stream`. Default: ignored (it is also in
    /// the outcome).
    fn output(&self, _stream: pb::OutputStream, _data: &[u8]) {}

    /// The sidecar refused a call by itself; the script already has its
    /// answer. Past the per-script cap this comes once, for the first refused
    /// call. Default: ignored.
    async fn refused(&self, _call: RefusedCall) {}

    /// The run parked while the calls `awaiting` are still being served:
    /// return true to take them out of this process (each waits for a
    /// person who answers from elsewhere), and the run ends here with
    /// [`RunOutcome::handed_off`](crate::RunOutcome::handed_off) — what resumes it
    /// anywhere — instead of waiting for them. The calls' futures are then
    /// dropped. Default: false, the client waits and resumes the run itself.
    fn hand_off(&self, _awaiting: &[String]) -> bool {
        false
    }
}
