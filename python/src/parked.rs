//! `tether.pending` and `tether.answer`: the calls that parked runs wait on,
//! read from the audit store, and answered from any process — the one that
//! parked them may be long gone (`docs/parking.md`, "Durable turns"). The
//! same steps as the CLI's `tether pending` / `approve` / `deny`
//! (`backend/cli/src/parked.rs`): list the turn's parked runs, claim each
//! one answered, build its turn again from the snapshot with the same
//! equipment a new turn gets (`kit.rs`), and resume it through
//! [`ScriptTool::resume_parked`](tether_client::ScriptTool::resume_parked).

use crate::awaitable::awaitable;
use crate::error;
use crate::kit::{Kit, Plan};
use crate::turn::json_text;
use pyo3::prelude::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::SystemTime;
use tether_client::{Answers, Resumed};
use tether_stores::AuditStoreUrl;
use tether_turn::{
    ApprovalDecision, AuditStore, Code, ParkedRun, PendingCall, StoreError, Turn, TurnError, runs_waiting_on, unix_ms,
};

/// What `pending()` and `answer()` say of a store that keeps nothing
/// another process could see.
fn durable(url: &AuditStoreUrl) -> PyResult<()> {
    if *url == AuditStoreUrl::Memory {
        return Err(error::config(
            "`memory:` keeps no parked runs another process could see, and a new `memory:` store holds \
             none: name the store the turn was opened with (`sqlite:PATH` or a PostgreSQL URL)",
        ));
    }
    Ok(())
}

/// One parked run as Python reads it (`tether.ParkedRun`): the calls not
/// answered yet.
fn run_json(run: &ParkedRun) -> Value {
    json!({
        "turn_id": run.turn_id,
        "run_id": run.run_id,
        "parked_at_ms": run.parked_at_ms,
        "calls": run.unanswered().map(PendingCall::listing).collect::<Vec<_>>(),
    })
}

/// The parked runs of `turn_id` (of every turn without one) in the store
/// `audit` names, each with the calls it waits on: JSON text.
#[pyfunction]
#[pyo3(signature = (audit, turn_id=None))]
pub(crate) fn pending<'py>(py: Python<'py>, audit: String, turn_id: Option<String>) -> PyResult<Bound<'py, PyAny>> {
    let url = AuditStoreUrl::parse(&audit).map_err(error::store)?;
    durable(&url)?;
    awaitable(py, async move {
        let store = url.open().await.map_err(error::store)?;
        let runs = store.parked_runs(turn_id.as_deref()).await.map_err(error::store)?;
        Ok(json_text(&runs.iter().map(run_json).collect::<Value>()))
    })
}

/// A store error met while claiming or resuming a run, as the exception
/// that says what to do.
fn claim_error(error: StoreError) -> PyErr {
    match error {
        StoreError::ParkedClaimed { turn_id, run_id, claimant, since_ms } => {
            let ago_s = unix_ms(SystemTime::now()).saturating_sub(since_ms).max(0) / 1000;
            error::RunClaimed::new_err(format!(
                "run `{run_id}` of turn `{turn_id}` is being resumed by `{claimant}`, which claimed it {ago_s} s \
                 ago (Unix ms {since_ms}); if that process is gone (it died, or was killed), \
                 `tether.answer(..., take_over=True)` resumes the run — calls it started and did not \
                 settle come back `possibly_executed`, none runs twice"
            ))
        }
        StoreError::NotParked { turn_id, run_id } => error::not_waiting(format!(
            "run `{run_id}` of turn `{turn_id}` is no longer parked: another process answered it \
             meanwhile; `await tether.pending(audit, turn_id)` lists what still waits"
        )),
        other => error::store(other),
    }
}

/// A tool a chosen run waits on that the tools given lack: its call would
/// find no tool.
fn missing_tool(runs: &[&ParkedRun], names: &[String]) -> PyResult<()> {
    for run in runs {
        if let Some(call) = run.unanswered().find(|call| !names.contains(&call.request.tool)) {
            return Err(error::config(format!(
                "call `{}` of turn `{}` waits on tool `{}`, which is not among the tools given: pass \
                 `tether.answer` the same tools the turn was opened with",
                call.request.call_id, run.turn_id, call.request.tool
            )));
        }
    }
    Ok(())
}

/// What `answer` was asked, besides the turn's equipment.
struct Asked {
    turn_id: String,
    call_id: Option<String>,
    decision: ApprovalDecision,
    take_over: bool,
}

/// Answers the calls `asked` names, resumes each parked run they free, and
/// returns the last one's outcome as JSON: what it still waits on and, when
/// it went on, the `run_script` call's result.
async fn answer_runs(plan: Plan, names: Vec<String>, asked: Asked) -> PyResult<String> {
    let url = plan.audit.clone();
    let store = url.open().await.map_err(error::store)?;
    let runs = store.parked_runs(Some(&asked.turn_id)).await.map_err(error::store)?;
    if runs.is_empty() {
        return Err(error::not_waiting(format!(
            "nothing of turn `{}` waits for an answer in `{url}`; `await tether.pending(\"{url}\")` lists what \
             waits (`tether pending --audit-store '{url}'` too)",
            asked.turn_id
        )));
    }
    if runs.iter().any(ParkedRun::is_model_loop) {
        return Err(error::config(format!(
            "turn `{}` is an agent turn the CLI parked (`tether ask --approval later`): its model goes on after \
             the answer, so answer it with `tether approve --audit-store '{url}' --turn {}` (or `tether deny`)",
            asked.turn_id, asked.turn_id
        )));
    }
    let chosen = runs_waiting_on(&runs, &asked.turn_id, asked.call_id.as_deref()).map_err(error::not_waiting)?;
    missing_tool(&chosen, &names)?;
    let answers = match &asked.call_id {
        Some(call) => Answers::none().call(call.clone(), asked.decision.clone()),
        None => Answers::every(asked.decision.clone()),
    };
    let kit = plan.kit(store, true).await?;
    let claimant = format!("tether-python (pid {}) {}", std::process::id(), uuid::Uuid::now_v7());
    let mut last = Value::Null;
    for run in chosen {
        last = if run.is_direct_call() {
            answer_direct(&kit, run, &answers, &claimant, asked.take_over).await?
        } else {
            resume_one(&kit, run, &answers, &claimant, asked.take_over).await?
        };
    }
    Ok(json_text(&last))
}

/// Claims `run`, the record of a direct call of the model's that waits for
/// a person ([`Turn::park_direct`]), answers the call through its turn built
/// again from the record's snapshot — the rest of the one execution path,
/// the approval wait limit counted from when it began waiting, its one row
/// in the turn it was made in — and removes the record. A process that
/// dies in between leaves it claimed: `take_over` answers it again from the
/// effect ledger, never running the tool twice.
async fn answer_direct(
    kit: &Kit,
    run: &ParkedRun,
    answers: &Answers,
    claimant: &str,
    take_over: bool,
) -> PyResult<Value> {
    let store: &Arc<dyn AuditStore> = &kit.store;
    let now = unix_ms(SystemTime::now());
    let record = store.claim_parked(&run.turn_id, &run.run_id, claimant, take_over, now).await.map_err(claim_error)?;
    let turn = kit.equip(Turn::builder(&record.turn_id).resumed(record.turn.clone())).build().map_err(error::config)?;
    let mut result = None;
    for pending in record.unanswered() {
        let decision = answers.get(&pending.request.call_id);
        result = Some(turn.answer_pending(pending, decision).await);
    }
    // The row is committed before the record goes: a crash between the two
    // leaves a claimed record whose call the ledger already holds.
    turn.audit_log().await.map_err(error::store)?;
    store.unpark(&record.turn_id, &record.run_id, claimant).await.map_err(claim_error)?;
    Ok(json!({
        "turn_id": record.turn_id, "run_id": record.run_id, "waiting": [],
        "result": result.as_ref().map(crate::convert::result),
    }))
}

/// Claims `run`, builds its turn again from its snapshot, and resumes it.
async fn resume_one(kit: &Kit, run: &ParkedRun, answers: &Answers, claimant: &str, take_over: bool) -> PyResult<Value> {
    let Some(script) = kit.script() else {
        return Err(error::config(
            "a parked run resumes on a sidecar: give `sidecar=\"embedded\"` (the default) or a sidecar's address",
        ));
    };
    let store: &Arc<dyn AuditStore> = &kit.store;
    let now = unix_ms(SystemTime::now());
    let record = store.claim_parked(&run.turn_id, &run.run_id, claimant, take_over, now).await.map_err(claim_error)?;
    let (turn_id, run_id) = (record.turn_id.clone(), record.run_id.clone());
    // The id is the turn's already (claimed when it opened): built, not opened.
    let turn = kit.equip(Turn::builder(&turn_id).resumed(record.turn.clone())).build().map_err(error::config)?;
    let resumed = script.resume_parked(&turn, record, answers, claimant).await.map_err(|e| match e {
        TurnError::Store(store_error) => claim_error(store_error),
        other => error::store(other),
    });
    // Every row the resume wrote is committed before Python reads on.
    turn.audit_log().await.map_err(error::store)?;
    match resumed? {
        Resumed::Waiting(calls) => Ok(json!({
            "turn_id": turn_id, "run_id": run_id,
            "waiting": calls.iter().map(PendingCall::listing).collect::<Vec<_>>(), "result": null,
        })),
        Resumed::Settled(result) => {
            // Parked again, at calls made since: what it waits on now.
            let waiting: Vec<Value> = if result.failure().is_some_and(|failure| failure.code == Code::RunParked) {
                let runs = store.parked_runs(Some(&turn_id)).await.map_err(error::store)?;
                runs.iter()
                    .filter(|r| r.run_id == run_id)
                    .flat_map(|r| r.unanswered().map(PendingCall::listing))
                    .collect()
            } else {
                Vec::new()
            };
            Ok(json!({
                "turn_id": turn_id, "run_id": run_id, "waiting": waiting,
                "result": crate::convert::result(&result),
            }))
        }
        Resumed::Interrupted(error) => Err(error::ResumeInterrupted::new_err(format!(
            "run `{run_id}` of turn `{turn_id}` did not reach its end: {error}. Nothing is lost: it is parked \
             again with every answer, and the calls it made meanwhile are in the effect ledger, so none runs \
             twice; resume it with `tether.answer(\"{turn_id}\", ...)` without `call_id` (on another sidecar if \
             this one is gone: `sidecar=`)"
        ))),
    }
}

/// Answers turn `turn_id`'s waiting calls — `call_id`'s, or (`None`) every
/// one that waits — as `approve` says, decided by `decided_by` with
/// `reason`, and resumes the parked runs they free with the turn's tools;
/// `approver` (`None`: `tether.LATER`) decides the calls the runs make
/// later. The rest as `Turn.open` takes them. Resolves to JSON text:
/// `turn_id`, `run_id`, `waiting` (the calls the run waits on now) and
/// `result` (the `run_script` call's, when the run went on).
#[pyfunction]
#[pyo3(signature = (
    turn_id, approve, call_id, decided_by, reason, tools, approver, audit, sidecar, token, take_over,
    park_key_file, limits, verbatim_tool_errors
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn answer<'py>(
    py: Python<'py>,
    turn_id: String,
    approve: bool,
    call_id: Option<String>,
    decided_by: String,
    reason: Option<String>,
    tools: Vec<(String, Py<PyAny>)>,
    approver: Option<Py<PyAny>>,
    audit: String,
    sidecar: Option<String>,
    token: Option<String>,
    take_over: bool,
    park_key_file: Option<String>,
    limits: String,
    verbatim_tool_errors: bool,
) -> PyResult<Bound<'py, PyAny>> {
    durable(&AuditStoreUrl::parse(&audit).map_err(error::store)?)?;
    if decided_by.trim().is_empty() {
        return Err(error::config("`decided_by` is empty: name who decides, for the audit log (a user id)"));
    }
    let plan = Plan::read(tools, approver, &audit, sidecar, token, park_key_file, &limits, verbatim_tool_errors)?;
    if plan.limits.deadline.is_some() {
        return Err(error::config(
            "a resumed turn keeps the time its deadline had left when its run parked: drop `deadline`",
        ));
    }
    let names = plan.tools.iter().map(|(spec, _)| spec.name.clone()).collect();
    let decision = if approve {
        ApprovalDecision { approved: true, decided_by, reason }
    } else {
        ApprovalDecision::deny(decided_by, reason)
    };
    let asked = Asked { turn_id, call_id, decision, take_over };
    awaitable(py, answer_runs(plan, names, asked))
}
