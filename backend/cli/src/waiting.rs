//! What parked runs wait on, for a person: `tether pending`, and what the
//! commands that leave a run parked print about it (`docs/parking.md`).

use anyhow::Context;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::time::SystemTime;
use tether_backend::agent::{AgentPark, WaitsOn, nested_turn_id};
use tether_backend::turn::{AuditStore, AuditStoreUrl, ParkedRun, PendingCall, unix_ms};

/// How deep nested agent turns are followed: past any real `max_depth`, so a
/// forged chain of records cannot loop forever.
const MAX_NESTING: usize = 64;

/// The parked runs of turn `turn_id` and of the nested agent turns its model
/// loops wait on ([`WaitsOn::Agent`]), outermost first: everything that
/// answering the turn may resume.
///
/// # Errors
/// If the store cannot be read.
pub async fn turn_tree(store: &dyn AuditStore, turn_id: &str) -> anyhow::Result<Vec<ParkedRun>> {
    let mut runs = Vec::new();
    let mut next = Some(turn_id.to_owned());
    for _ in 0..MAX_NESTING {
        let Some(id) = next.take() else { break };
        let found = store.parked_runs(Some(&id)).await?;
        next = found
            .iter()
            .filter_map(|run| AgentPark::of(run).ok())
            .find(|park| park.on == WaitsOn::Agent)
            .map(|park| nested_turn_id(&id, &park.waiting.id));
        runs.extend(found);
    }
    Ok(runs)
}

/// The top-level turn that turn `turn_id` belongs to: itself, or — for an
/// agent tool's nested turn that parked — the turn that made the call, up
/// to the top. Answering starts there, so the turns around it go on too.
///
/// # Errors
/// If the store cannot be read.
pub async fn top_turn(store: &dyn AuditStore, turn_id: &str) -> anyhow::Result<String> {
    let mut id = turn_id.to_owned();
    for _ in 0..MAX_NESTING {
        let runs = store.parked_runs(Some(&id)).await?;
        let parent = runs.iter().filter_map(|run| AgentPark::of(run).ok()).find_map(|park| park.nested);
        match parent {
            Some(at) => id = at.parent_turn_id,
            None => break,
        }
    }
    Ok(id)
}

/// The pending calls of every parked run of `turn` (of every turn without
/// one) in the store at `url`: as JSON with `json`, else a line per call
/// with its exact arguments.
///
/// # Errors
/// If the store cannot be opened or read.
pub async fn pending(url: &AuditStoreUrl, turn: Option<&str>, json: bool) -> anyhow::Result<String> {
    let store = url.open().await.with_context(|| format!("cannot open the audit store `{url}`"))?;
    let mut runs = match turn {
        Some(turn) => turn_tree(&*store, turn).await?,
        None => store.parked_runs(None).await?,
    };
    runs.retain(waits_for_a_person);
    if json {
        let listed: Vec<Value> = runs.iter().map(run_json).collect();
        return Ok(format!("{}\n", serde_json::to_string_pretty(&listed)?));
    }
    if runs.is_empty() {
        return Ok(format!("nothing waits for an answer in `{url}`\n"));
    }
    Ok(runs.iter().map(describe).collect())
}

/// True unless `run` is an agent turn's model loop that waits on a script
/// run of its own (whose calls are listed with that run): nothing to answer
/// on it.
fn waits_for_a_person(run: &ParkedRun) -> bool {
    run.unanswered().next().is_some() || !run.is_model_loop()
}

/// One parked run as `pending --json` lists it.
fn run_json(run: &ParkedRun) -> Value {
    let calls: Vec<Value> = run.unanswered().map(PendingCall::listing).collect();
    json!({"turn_id": run.turn_id, "run_id": run.run_id, "parked_at_ms": run.parked_at_ms, "pending": calls})
}

/// One parked run for a person: each call waiting, its exact arguments, since when.
pub fn describe(run: &ParkedRun) -> String {
    let mut text = format!("turn {}  run {}  parked {}\n", run.turn_id, run.run_id, ago(run.parked_at_ms));
    for call in run.unanswered() {
        let _ = writeln!(text, "  {}  {}  waiting {}", call.request.call_id, call.request.tool, ago(call.since_ms));
        let _ = writeln!(text, "      {}", call.request.args);
        if let Some(reason) = &call.request.reason {
            let _ = writeln!(text, "      why approval: {reason}");
        }
    }
    text
}

/// How long ago Unix time `ms` was, for a person: `12 s ago`, `3 min ago`, `1.5 h ago`.
pub(crate) fn ago(ms: i64) -> String {
    let seconds = unix_ms(SystemTime::now()).saturating_sub(ms).max(0) / 1000;
    match seconds {
        0..60 => format!("{seconds} s ago"),
        60..3600 => format!("{} min ago", seconds / 60),
        _ => format!("{:.1} h ago", seconds as f64 / 3600.0),
    }
}

/// After a run parked: what waits in turn `turn_id`, and how to answer it.
///
/// # Errors
/// If the store cannot be read.
pub async fn print_waiting(store: &dyn AuditStore, turn_id: &str, url: &AuditStoreUrl) -> anyhow::Result<()> {
    for run in turn_tree(store, turn_id).await?.iter().filter(|run| waits_for_a_person(run)) {
        eprint!("parked, waiting for a person:\n{}", describe(run));
    }
    eprintln!(
        "answer with: tether approve --audit-store '{url}' --turn {turn_id} --all   (or --call ID; `tether deny` the same)"
    );
    Ok(())
}
