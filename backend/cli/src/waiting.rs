//! What parked runs wait on, for a person: `tether pending`, and what the
//! commands that leave a run parked print about it (`docs/parking.md`).

use anyhow::Context;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::time::SystemTime;
use tether_backend::turn::{AuditStore, AuditStoreUrl, ParkedRun, PendingCall, unix_ms};

/// The pending calls of every parked run of `turn` (of every turn without
/// one) in the store at `url`: as JSON with `json`, else a line per call
/// with its exact arguments.
///
/// # Errors
/// If the store cannot be opened or read.
pub async fn pending(url: &AuditStoreUrl, turn: Option<&str>, json: bool) -> anyhow::Result<String> {
    let store = url.open().await.with_context(|| format!("cannot open the audit store `{url}`"))?;
    let mut runs = store.parked_runs(turn).await?;
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
    for run in store.parked_runs(Some(turn_id)).await?.iter().filter(|run| waits_for_a_person(run)) {
        eprint!("parked, waiting for a person:\n{}", describe(run));
    }
    eprintln!(
        "answer with: tether approve --audit-store '{url}' --turn {turn_id} --all   (or --call ID; `tether deny` the same)"
    );
    Ok(())
}
