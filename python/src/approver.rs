//! An approver written in Python (sync or `async def`), run on the caller's
//! event loop. It is shown the exact arguments the tool will receive; when
//! the turn's approval wait passes or the turn ends, the turn drops the
//! decision and the Python task is cancelled.

use crate::invoke::{Invoked, invoke};
use pyo3::prelude::*;
use serde_json::json;
use tether_turn::{ApprovalDecision, ApprovalRequest, Approver};

/// Who decided, in the audit log, when the Python approver could not.
const DECIDED_BY_FAULT: &str = "python-approver-error";

/// Runs `decide`, `Approver._decide` of `tether/_turn.py`: an `async def`
/// that takes the request as JSON text and returns
/// `(approved, decided_by, reason)`.
pub(crate) struct PyApprover {
    decide: Py<PyAny>,
}

impl PyApprover {
    /// The approver calling `decide`.
    pub(crate) fn new(decide: Py<PyAny>) -> PyApprover {
        PyApprover { decide }
    }
}

/// The request as the Python approver receives it.
pub(crate) fn request_json(request: &ApprovalRequest) -> String {
    json!({
        "turn_id": request.turn_id,
        "call_id": request.call_id,
        "tool": request.tool,
        "description": request.description,
        "args": request.args,
        "origin": request.origin.kind(),
        "parent_call_id": request.origin.parent_call_id(),
        "script_run_id": request.origin.run_id(),
        "depth": request.origin.depth(),
        "reason": request.reason,
    })
    .to_string()
}

/// `(approved, decided_by, reason)`, read on the loop thread.
type Answer = Result<(bool, String, Option<String>), String>;

fn read_answer(answer: &Bound<'_, PyAny>) -> Answer {
    answer.extract().map_err(|error: PyErr| error.to_string())
}

#[async_trait::async_trait]
impl Approver for PyApprover {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision {
        let fault = |why: String| {
            tracing::warn!(tool = %request.tool, call_id = %request.call_id, "{why}");
            ApprovalDecision::deny(DECIDED_BY_FAULT, Some(why))
        };
        match invoke(&self.decide, request_json(request), read_answer).await {
            // A yes keeps its reason too: the audit row records it.
            Ok(Invoked::Returned(Ok((true, by, reason)))) => {
                ApprovalDecision { approved: true, decided_by: by, reason }
            }
            Ok(Invoked::Returned(Ok((false, by, reason)))) => ApprovalDecision::deny(by, reason),
            Ok(Invoked::Returned(Err(error))) => fault(format!("the approver's answer could not be read: {error}")),
            Ok(Invoked::Raised { kind, message }) => fault(format!("the approver raised `{kind}`: {message}")),
            Ok(Invoked::Cancelled) => fault("the approver's task was cancelled".into()),
            Err(error) => fault(format!("the approver could not run: {error}")),
        }
    }
}
