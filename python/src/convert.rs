//! The turn's records as the JSON the Python layer reads: a call's result,
//! audit and ledger rows, events, the tool list. One function per record,
//! so each field is named once on this side of the boundary.

use serde_json::{Value, json};
use tether_turn::{AuditRecord, CallIdentity, CallOutcome, CallResult, Code, LedgerEntry, ListedTool, ToolEvent};

/// A call's result: status, value or error (with the step and display name
/// for the turn's own failures), approval, host-only metadata, and the
/// model-facing value.
pub(crate) fn result(result: &CallResult) -> Value {
    let error = match &result.outcome {
        CallOutcome::Ok(_) => Value::Null,
        CallOutcome::ToolError { code, message } => json!({
            "code": code, "message": message,
            "display_name": Code::parse(code).map(Code::display_name), "step": null,
        }),
        CallOutcome::Failed(failure) => json!({
            "code": failure.code.as_str(), "message": failure.message,
            "display_name": failure.display_name(), "step": failure.step.as_str(),
        }),
    };
    json!({
        "call_id": result.call_id,
        "tool": result.tool,
        "status": result.status().as_str(),
        "value": match &result.outcome { CallOutcome::Ok(value) => value.clone(), _ => Value::Null },
        "error": error,
        "approval": result.approval.as_ref().map(|a| json!({"verdict": a.verdict.as_str(), "decided_by": a.decided_by})),
        "metadata": result.metadata,
        "model_value": result.to_model_value(),
    })
}

fn identity(call: &CallIdentity) -> Value {
    json!({
        "turn_id": call.turn_id, "call_id": call.call_id, "parent_call_id": call.parent_call_id,
        "script_run_id": call.script_run_id, "tool": call.tool, "origin": call.origin, "depth": call.depth,
        "args": call.args, "args_truncated": call.args_truncated,
    })
}

fn merged(mut base: Value, extra: Value) -> Value {
    if let (Value::Object(base), Value::Object(extra)) = (&mut base, extra) {
        base.extend(extra);
    }
    base
}

/// One audit row.
pub(crate) fn audit(row: &AuditRecord) -> Value {
    merged(
        identity(&row.call),
        json!({
            "step": row.step.map(|s| s.as_str()), "code": row.code, "display_name": row.display_name(),
            "approval": row.approval.map(|a| a.as_str()), "decided_by": row.decided_by,
            "approval_reason": row.approval_reason, "detail": row.detail, "status": row.status.as_str(),
            "started_at_ms": row.started_at_ms, "finished_at_ms": row.finished_at_ms, "duration_us": row.duration_us,
        }),
    )
}

/// One effect-ledger row.
pub(crate) fn ledger(row: &LedgerEntry) -> Value {
    merged(
        identity(&row.call),
        json!({
            "approval_required": row.approval_required, "state": row.state.as_str(),
            "started_at_ms": row.started_at_ms, "settled_at_ms": row.settled_at_ms,
            "outcome": row.outcome.map(|o| o.as_str()),
        }),
    )
}

/// One event, with its kind: `started`, `progress`, `completed` or `failed`.
pub(crate) fn event(event: &ToolEvent) -> Value {
    match event {
        ToolEvent::ToolStarted { turn_id, call_id, parent_call_id, tool, origin, args } => json!({
            "kind": "started", "turn_id": turn_id, "call_id": call_id, "parent_call_id": parent_call_id,
            "tool": tool, "origin": origin.kind(), "depth": origin.depth(), "args": args,
        }),
        ToolEvent::ToolCompleted {
            turn_id,
            call_id,
            parent_call_id,
            tool,
            error_code,
            error_message,
            duration,
            metadata,
        } => json!({
            "kind": "completed", "turn_id": turn_id, "call_id": call_id, "parent_call_id": parent_call_id,
            "tool": tool, "code": error_code, "message": error_message, "duration_s": duration.as_secs_f64(),
            "metadata": metadata,
        }),
        ToolEvent::ToolProgress { turn_id, call_id, parent_call_id, tool, progress } => json!({
            "kind": "progress", "turn_id": turn_id, "call_id": call_id, "parent_call_id": parent_call_id, "tool": tool,
            "progress": progress.progress, "total": progress.total, "message": progress.message,
        }),
        ToolEvent::ToolFailed { turn_id, call_id, parent_call_id, tool, code, step, message, duration } => json!({
            "kind": "failed", "turn_id": turn_id, "call_id": call_id, "parent_call_id": parent_call_id,
            "tool": tool, "code": code.as_str(), "display_name": code.display_name(), "step": step.as_str(),
            "message": message, "duration_s": duration.as_secs_f64(),
        }),
    }
}

/// A tool as the model sees it; a deferred one by name only.
pub(crate) fn listed(tool: &ListedTool) -> Value {
    match tool {
        ListedTool::Full(def) => json!({
            "name": def.name(), "description": def.description(), "input_schema": def.input_schema(), "deferred": false
        }),
        ListedTool::NameOnly(name) => {
            json!({"name": name, "description": null, "input_schema": null, "deferred": true})
        }
    }
}
