//! `tether audit`: a turn's audit rows and effect ledger, read back from the
//! audit store. Calls are shown as the tree they were made in — a script's
//! calls under its `run_script` call, an agent tool's nested turn under the
//! agent call — and can be filtered by script run or failure code.

use crate::waiting::ago;
use anyhow::Context;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;
use tether_backend::agent::{AGENT_TOOL_PREFIX, nested_turn_id};
use tether_backend::turn::{
    AuditRecord, AuditStore, AuditStoreUrl, CallIdentity, LedgerEntry, SCRIPT_TOOL_NAME, StoreError,
};

/// Which rows to show.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only calls of this script run.
    pub run: Option<String>,
    /// Only calls that ended with this failure (or tool error) code.
    pub code: Option<String>,
}

impl Filter {
    fn keeps(&self, row: &AuditRecord) -> bool {
        self.keeps_run(&row.call) && self.code.as_ref().is_none_or(|code| row.code.as_ref() == Some(code))
    }

    /// Ledger rows have no code: only the run filter applies to them.
    fn keeps_entry(&self, entry: &LedgerEntry) -> bool {
        self.keeps_run(&entry.call)
    }

    /// The run's whole id (`<turn>/run-1`), or its short one (`run-1`).
    fn keeps_run(&self, call: &CallIdentity) -> bool {
        self.run.as_ref().is_none_or(|run| {
            call.script_run_id
                .as_deref()
                .is_some_and(|id| id == run || id.strip_suffix(run.as_str()).is_some_and(|turn| turn.ends_with('/')))
        })
    }

    fn is_empty(&self) -> bool {
        self.run.is_none() && self.code.is_none()
    }
}

/// A turn's records with those of the agent turns nested in it.
#[derive(Debug, Default)]
pub struct TurnRecords {
    /// Audit rows, the turn's first, then each nested turn's.
    pub audit: Vec<AuditRecord>,
    /// Ledger rows, in the same order of turns.
    pub ledger: Vec<LedgerEntry>,
}

/// Reads turn `turn_id` and, under each of its calls, the nested turn that
/// call ran (agent tools), recursively.
///
/// # Errors
/// If the store cannot be read.
pub async fn read(store: &Arc<dyn AuditStore>, turn_id: &str) -> anyhow::Result<TurnRecords> {
    let mut records = TurnRecords::default();
    let mut pending = vec![turn_id.to_owned()];
    while let Some(turn) = pending.pop() {
        let audit = store.audit_log(&turn).await?;
        let ledger = store.ledger(&turn).await?;
        // A nested turn exists only for calls whose rows say so; looking up
        // every call's id would find nothing for the others.
        for row in &audit {
            if row.call.tool.starts_with(AGENT_TOOL_PREFIX) {
                pending.push(nested_turn_id(&turn, &row.call.call_id));
            }
        }
        records.audit.extend(audit);
        records.ledger.extend(ledger);
    }
    Ok(records)
}

/// The records as text: every call as a line in the tree of calls (nested
/// calls indented under their parent, in the order they started), then the
/// ledger. With a filter, the matching calls only, each with its depth.
pub fn render(turn_id: &str, records: &TurnRecords, filter: &Filter) -> String {
    let mut out = String::new();
    let shown: Vec<&AuditRecord> = records.audit.iter().filter(|r| filter.keeps(r)).collect();
    let _ =
        writeln!(out, "turn {turn_id}: {} calls{}", shown.len(), if filter.is_empty() { "" } else { " (filtered)" });
    if filter.is_empty() {
        for (row, level) in tree(&records.audit) {
            let _ = writeln!(out, "{}{}", "  ".repeat(level + 1), line(row));
        }
    } else {
        for row in shown {
            let _ = writeln!(out, "  {} (depth {})", line(row), row.call.depth);
        }
    }
    let ledger: Vec<&LedgerEntry> = records.ledger.iter().filter(|e| filter.keeps_entry(e)).collect();
    if !ledger.is_empty() {
        let _ = writeln!(out, "ledger (calls of tools with effects):");
        for entry in ledger {
            let outcome = entry.outcome.map_or("—", |o| o.as_str());
            let approval = if entry.approval_required { ", approval required" } else { "" };
            let _ = writeln!(
                out,
                "  {} {} {} → {outcome}{approval}  {}",
                entry.call.call_id,
                entry.call.tool,
                entry.state.as_str(),
                entry.call.args
            );
        }
    }
    out
}

fn line(row: &AuditRecord) -> String {
    let outcome = match (&row.code, row.display_name()) {
        (None, _) => row.status.as_str().to_owned(),
        (Some(code), Some(name)) => format!("{} `{code}` ({name})", row.status.as_str()),
        (Some(code), None) => format!("{} `{code}`", row.status.as_str()),
    };
    let mut approval = match (&row.approval, &row.decided_by) {
        (Some(verdict), Some(by)) => format!(", approval {} by {by}", verdict.as_str()),
        (Some(verdict), None) => format!(", approval {}", verdict.as_str()),
        _ => String::new(),
    };
    if let Some(reason) = &row.approval_reason {
        approval.push_str(&format!(" ({reason:?})"));
    }
    // The failure's full text, for the operator (the model got a short one).
    let detail = row.detail.as_deref().map(|d| format!(", detail {d:?}")).unwrap_or_default();
    let run = row.call.script_run_id.as_deref().map(|r| format!(" [run {r}]")).unwrap_or_default();
    format!(
        "{} {} ({}){run}: {outcome}{approval}{detail}, {:.1} ms  {}",
        row.call.call_id,
        row.call.tool,
        row.call.origin,
        row.duration_us as f64 / 1000.0,
        row.call.args
    )
}

/// The rows in tree order with their level: each call after its parent,
/// siblings in the order they started. A row whose parent is not among the
/// rows (a nested turn's first calls: their parent is the agent call of the
/// enclosing turn) hangs under the agent call whose nested turn it is in.
fn tree(rows: &[AuditRecord]) -> Vec<(&AuditRecord, usize)> {
    let key = |row: &AuditRecord| (row.call.turn_id.clone(), row.call.call_id.clone());
    let known: HashMap<(String, String), usize> = rows.iter().enumerate().map(|(i, r)| (key(r), i)).collect();
    let parent_of = |row: &AuditRecord| -> Option<usize> {
        if let Some(parent) = &row.call.parent_call_id
            && let Some(&i) = known.get(&(row.call.turn_id.clone(), parent.clone()))
        {
            return Some(i);
        }
        // `<turn>/<call>`: the nested turn of `call` in `turn`.
        let (outer, call) = row.call.turn_id.rsplit_once('/')?;
        known.get(&(outer.to_owned(), call.to_owned())).copied()
    };
    let mut children: HashMap<Option<usize>, Vec<usize>> = HashMap::new();
    for (i, row) in rows.iter().enumerate() {
        children.entry(parent_of(row)).or_default().push(i);
    }
    for list in children.values_mut() {
        list.sort_by_key(|&i| (rows[i].started_at_ms, i));
    }
    let mut ordered = Vec::with_capacity(rows.len());
    let mut stack: Vec<(usize, usize)> = children.get(&None).into_iter().flatten().rev().map(|&i| (i, 0)).collect();
    while let Some((i, level)) = stack.pop() {
        ordered.push((&rows[i], level));
        stack.extend(children.get(&Some(i)).into_iter().flatten().rev().map(|&c| (c, level + 1)));
    }
    ordered
}

/// The records as JSON: `{"turn_id", "audit": [...], "ledger": [...]}`,
/// filtered like [`render`].
pub fn to_json(turn_id: &str, records: &TurnRecords, filter: &Filter) -> Value {
    let identity = |call: &CallIdentity| {
        json!({
            "turn_id": call.turn_id,
            "call_id": call.call_id,
            "parent_call_id": call.parent_call_id,
            "script_run_id": call.script_run_id,
            "tool": call.tool,
            "origin": call.origin,
            "depth": call.depth,
            // A value, as recorded (a cut is recorded as JSON too); text only
            // if a row from elsewhere holds something else.
            "args": serde_json::from_str::<Value>(&call.args).unwrap_or_else(|_| Value::String(call.args.clone())),
            "args_truncated": call.args_truncated,
        })
    };
    let audit: Vec<Value> = records
        .audit
        .iter()
        .filter(|r| filter.keeps(r))
        .map(|r| {
            let mut row = identity(&r.call);
            row["step"] = json!(r.step.map(|s| s.as_str()));
            row["code"] = json!(r.code);
            row["approval"] = json!(r.approval.map(|a| a.as_str()));
            row["decided_by"] = json!(r.decided_by);
            row["approval_reason"] = json!(r.approval_reason);
            row["detail"] = json!(r.detail);
            row["status"] = json!(r.status.as_str());
            row["started_at_ms"] = json!(r.started_at_ms);
            row["finished_at_ms"] = json!(r.finished_at_ms);
            row["duration_us"] = json!(r.duration_us);
            row
        })
        .collect();
    let ledger: Vec<Value> = records
        .ledger
        .iter()
        .filter(|e| filter.keeps_entry(e))
        .map(|e| {
            let mut row = identity(&e.call);
            row["approval_required"] = json!(e.approval_required);
            row["state"] = json!(e.state.as_str());
            row["started_at_ms"] = json!(e.started_at_ms);
            row["settled_at_ms"] = json!(e.settled_at_ms);
            row["outcome"] = json!(e.outcome.map(|o| o.as_str()));
            row
        })
        .collect();
    json!({"turn_id": turn_id, "audit": audit, "ledger": ledger})
}

/// Which turn `tether audit` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    /// This one (`--turn ID`).
    Turn(String),
    /// The one opened last in the store (`--last`).
    Last,
}

impl Which {
    /// `--turn ID`, else `--last`.
    pub fn from_args(turn: Option<String>) -> Which {
        turn.map_or(Which::Last, Which::Turn)
    }

    /// The turn's id, and when it was opened if the store lists it.
    async fn resolve(&self, store: &dyn AuditStore, url: &AuditStoreUrl) -> anyhow::Result<(String, Option<i64>)> {
        let (wanted, limit) = match self {
            Which::Turn(id) => (Some(id.as_str()), 1),
            Which::Last => (None, 1),
        };
        let listed = match store.turns(wanted, limit).await {
            Ok(listed) => listed,
            Err(StoreError::Unsupported(_)) if wanted.is_some() => Vec::new(),
            Err(error) => return Err(error.into()),
        };
        match (self, listed.first()) {
            (_, Some(turn)) => Ok((turn.turn_id.clone(), Some(turn.opened_at_ms))),
            (Which::Turn(id), None) => Ok((id.clone(), None)),
            (Which::Last, None) => {
                anyhow::bail!("no turn has been opened in {url}; pass the audit store your turns use (--audit-store)")
            }
        }
    }
}

/// `tether audit`: the records of the turn `which` names in the audit store
/// at `url` that `filter` keeps, as [`render`]'s text or (with `json`) as
/// [`to_json`]'s JSON, pretty-printed on lines of its own. A turn the store
/// opened that made no call is shown with no calls.
///
/// # Errors
/// If the store cannot be opened or read, or knows nothing of the turn
/// (saying to pass the store the turn was run with, and how to list them).
pub async fn show(url: &AuditStoreUrl, which: &Which, filter: &Filter, json: bool) -> anyhow::Result<String> {
    let store = url.open().await.with_context(|| format!("cannot open the audit store `{url}`"))?;
    let (turn_id, opened_at_ms) = which.resolve(&*store, url).await?;
    let records = read(&store, &turn_id).await?;
    if records.audit.is_empty() && records.ledger.is_empty() && opened_at_ms.is_none() {
        anyhow::bail!(
            "no turn `{turn_id}` in {url}; pass the audit store the turn was run with (--audit-store), or list \
             its turns with `tether audit --list`"
        );
    }
    Ok(if json {
        let mut shown = to_json(&turn_id, &records, filter);
        shown["opened_at_ms"] = json!(opened_at_ms);
        format!("{}\n", serde_json::to_string_pretty(&shown)?)
    } else {
        render(&turn_id, &records, filter)
    })
}

/// `tether audit --list`: the turns of the audit store at `url`, newest
/// first, at most `limit`, each with when it was opened and its calls — a
/// line each, or (with `json`) a list.
///
/// # Errors
/// If the store cannot be opened or read, or keeps no list of turns.
pub async fn list(url: &AuditStoreUrl, limit: usize, json: bool) -> anyhow::Result<String> {
    let store = url.open().await.with_context(|| format!("cannot open the audit store `{url}`"))?;
    let turns = store.turns(None, limit).await?;
    if json {
        let listed: Vec<Value> = turns
            .iter()
            .map(
                |t| json!({"turn_id": t.turn_id, "opened_at_ms": t.opened_at_ms, "calls": t.calls, "not_ok": t.not_ok}),
            )
            .collect();
        return Ok(format!("{}\n", serde_json::to_string_pretty(&listed)?));
    }
    if turns.is_empty() {
        return Ok(format!("no turn has been opened in {url}\n"));
    }
    let mut out = String::new();
    for turn in &turns {
        let not_ok = if turn.not_ok > 0 { format!(" ({} not ok)", turn.not_ok) } else { String::new() };
        let calls = if turn.calls == 1 { "call" } else { "calls" };
        let _ = writeln!(out, "{}  opened {}  {} {calls}{not_ok}", turn.turn_id, ago(turn.opened_at_ms), turn.calls);
    }
    let _ = writeln!(out, "show one with: tether audit --audit-store '{url}' --turn ID   (or --last)");
    Ok(out)
}

/// The code of script call `call_id` of the turn `which` names (a `run_script` call
/// of it or of a turn nested in it), as the model wrote it: `tether audit
/// --script CALL`.
///
/// # Errors
/// If the store cannot be read, or the turn has no such script call (the
/// message lists the ones it has).
pub async fn script(url: &AuditStoreUrl, which: &Which, call_id: &str) -> anyhow::Result<String> {
    let store = url.open().await.with_context(|| format!("cannot open the audit store `{url}`"))?;
    let (turn_id, _) = which.resolve(&*store, url).await?;
    let records = read(&store, &turn_id).await?;
    let scripts: Vec<&AuditRecord> = records.audit.iter().filter(|row| row.call.tool == SCRIPT_TOOL_NAME).collect();
    let Some(row) = scripts.iter().find(|row| row.call.call_id == call_id) else {
        let ids: Vec<String> = scripts.iter().map(|row| format!("`{}`", row.call.call_id)).collect();
        let has = if ids.is_empty() { "none".to_owned() } else { ids.join(", ") };
        anyhow::bail!("turn `{turn_id}` has no script call `{call_id}` in {url}; its script calls: {has}");
    };
    let code = code_of(&row.call.args)
        .with_context(|| format!("the recorded arguments of `{call_id}` hold no script (`code`)"))?;
    Ok(if code.ends_with('\n') { code } else { format!("{code}\n") })
}

/// The script in a `run_script` call's recorded arguments.
pub fn code_of(args: &str) -> Option<String> {
    let args: Value = serde_json::from_str(args).ok()?;
    args.get("code").and_then(Value::as_str).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_backend::turn::CallStatus;

    fn raised() -> AuditRecord {
        AuditRecord {
            call: CallIdentity {
                turn_id: "t".into(),
                call_id: "c1".into(),
                parent_call_id: None,
                script_run_id: None,
                tool: "lookup".into(),
                origin: "model".into(),
                depth: 0,
                args: "{}".into(),
                args_truncated: false,
            },
            step: None,
            code: Some("tool_failed".into()),
            approval: None,
            decided_by: None,
            approval_reason: None,
            detail: Some("`RuntimeError`: db password=hunter2\nat line 2".into()),
            status: CallStatus::Error,
            started_at_ms: 1,
            finished_at_ms: 2,
            duration_us: 1500,
        }
    }

    #[test]
    fn a_failures_detail_is_shown_on_its_line_and_in_the_json() {
        let records = TurnRecords { audit: vec![raised()], ledger: vec![] };
        let text = render("t", &records, &Filter::default());
        assert!(text.contains(r#", detail "`RuntimeError`: db password=hunter2\nat line 2", 1.5 ms"#), "{text}");
        assert_eq!(text.lines().count(), 2, "one line per call, whatever the detail holds: {text}");
        let json = to_json("t", &records, &Filter::default());
        assert_eq!(json["audit"][0]["detail"], json!("`RuntimeError`: db password=hunter2\nat line 2"));
    }
}
