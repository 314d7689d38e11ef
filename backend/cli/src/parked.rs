//! `tether pending`, `tether approve`, `deny` and `expire`: the calls that
//! parked runs wait on, read from the audit store and answered from any
//! process — the one that parked them may be long gone (`docs/parking.md`,
//! "Durable turns").

use crate::wiring::{Backend, BackendArgs, Source, audit_store_url};
use anyhow::Context;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;
use tether_backend::turn::{
    Answers, ApprovalDecision, ApprovalRequest, Approver, AuditStore, AuditStoreUrl, Code, DeferredApprover, ParkedRun,
    PendingCall, Resumed, runs_waiting_on, unix_ms,
};

/// The pending calls of every parked run of `turn` (of every turn without
/// one) in the store at `url`: as JSON with `json`, else a line per call
/// with its exact arguments.
///
/// # Errors
/// If the store cannot be opened or read.
pub async fn pending(url: &AuditStoreUrl, turn: Option<&str>, json: bool) -> anyhow::Result<String> {
    let store = url.open().await.with_context(|| format!("cannot open the audit store `{url}`"))?;
    let runs = store.parked_runs(turn).await?;
    if json {
        let listed: Vec<Value> = runs.iter().map(run_json).collect();
        return Ok(format!("{}\n", serde_json::to_string_pretty(&listed)?));
    }
    if runs.is_empty() {
        return Ok(format!("nothing waits for an answer in `{url}`\n"));
    }
    Ok(runs.iter().map(describe).collect())
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

fn ago(ms: i64) -> String {
    let seconds = unix_ms(SystemTime::now()).saturating_sub(ms).max(0) / 1000;
    match seconds {
        0..60 => format!("{seconds} s ago"),
        60..3600 => format!("{} min ago", seconds / 60),
        _ => format!("{:.1} h ago", seconds as f64 / 3600.0),
    }
}

/// What `tether approve`, `deny` or `expire` says of the calls it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Approved.
    Approve,
    /// Denied.
    Deny,
    /// No answer: only calls whose approval wait ran out are answered, as
    /// timed out (`approval_timeout`).
    Expire,
}

impl Verdict {
    fn command(self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::Deny => "deny",
            Verdict::Expire => "expire",
        }
    }
}

/// What `tether approve` / `deny` / `expire` were asked.
#[derive(Debug, Clone)]
pub struct Answer {
    /// How the calls are answered.
    pub verdict: Verdict,
    /// The turn.
    pub turn: String,
    /// One call (`None`: `all`).
    pub call: Option<String>,
    /// Every call of the turn that waits — also those its runs make while
    /// they go on, until they end.
    pub all: bool,
    /// Why, for the audit row (and the script, on a denial).
    pub reason: Option<String>,
    /// Who decides, for the audit row.
    pub by: String,
    /// Resume a run another process claimed and did not finish (it is gone).
    pub take_over: bool,
    /// The config the run's tools come from (default: the one it parked with).
    pub config: Option<PathBuf>,
}

/// Who decides the calls a resumed run makes under `--all`: the person who
/// answered, at once.
struct AnswersEvery {
    decision: ApprovalDecision,
}

#[async_trait::async_trait]
impl Approver for AnswersEvery {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision {
        let verb = if self.decision.approved { "approved" } else { "denied" };
        eprintln!("{verb} by {}: {} {} {}", self.decision.decided_by, request.call_id, request.tool, request.args);
        self.decision.clone()
    }

    fn asks_a_person(&self) -> bool {
        false
    }
}

/// Answers the turn's waiting calls as `answer` says, resumes each parked
/// run they free on the sidecar `args` names (or an embedded one) to its end
/// or next park, and returns the script tool's result as `run` prints it
/// (or what still waits).
///
/// # Errors
/// If nothing of the turn waits, the call is not one that waits, another
/// process holds the run, or the backend cannot be started.
pub async fn answer(args: &BackendArgs, answer: Answer) -> anyhow::Result<Value> {
    let url = audit_store_url(args)?;
    let runs = {
        let store = url.open().await.with_context(|| format!("cannot open the audit store `{url}`"))?;
        store.parked_runs(Some(&answer.turn)).await?
    };
    if runs.is_empty() {
        anyhow::bail!(
            "nothing of turn `{}` waits for an answer in `{url}`; `tether pending --audit-store '{url}'` lists what waits",
            answer.turn
        );
    }
    let chosen = runs_waiting_on(&runs, &answer.turn, answer.call.as_deref())?;
    let decision = match answer.verdict {
        Verdict::Approve => {
            Some(ApprovalDecision { approved: true, decided_by: answer.by.clone(), reason: answer.reason.clone() })
        }
        Verdict::Deny => Some(ApprovalDecision::deny(answer.by.clone(), answer.reason.clone())),
        Verdict::Expire => None,
    };
    let answers = match (&answer.call, &decision) {
        (Some(call), Some(decision)) => Answers::none().call(call.clone(), decision.clone()),
        (None, Some(decision)) => Answers::every(decision.clone()),
        (_, None) => Answers::none(),
    };
    // Calls the resumed runs make: answered at once under `--all`, else
    // they park again for the next answer.
    let approver: Arc<dyn Approver> = match decision {
        Some(decision) if answer.all => Arc::new(AnswersEvery { decision }),
        _ => Arc::new(DeferredApprover),
    };
    let owner = &chosen[0].owner;
    let owned = |key: &str| owner.get(key).and_then(Value::as_str).map(PathBuf::from);
    let source = Source::reopen(
        answer.config.clone().or_else(|| owned("config")),
        args.demo_db.clone().or_else(|| owned("demo_db")),
    )?;
    if answer.verdict == Verdict::Expire {
        let wait = source.config.turn.limits.approval_timeout;
        let now = unix_ms(SystemTime::now());
        let expired =
            |since_ms: i64| now.saturating_sub(since_ms) > i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        if !chosen.iter().any(|run| run.unanswered().any(|call| expired(call.since_ms))) {
            eprintln!("nothing of turn `{}` has waited past the approval wait limit ({wait:?})", answer.turn);
            return Ok(json!({"ok": true, "expired": 0}));
        }
    }
    let backend = Backend::resuming(args, source, approver).await?;
    let outcome = resume_each(&backend, &answer, &answers, &chosen).await;
    backend.stop().await?;
    outcome
}

/// `tether expire`: every parked run of `turn` (of every turn without one)
/// whose calls have waited past the approval wait limit is resumed with
/// those calls timed out; the outcome of each turn's last run, by turn.
///
/// # Errors
/// If the store cannot be read, or a turn's run cannot be resumed.
pub async fn expire(
    args: &BackendArgs,
    turn: Option<&str>,
    take_over: bool,
    config: Option<PathBuf>,
) -> anyhow::Result<Value> {
    let url = audit_store_url(args)?;
    let runs = {
        let store = url.open().await.with_context(|| format!("cannot open the audit store `{url}`"))?;
        store.parked_runs(turn).await?
    };
    let mut turns: Vec<String> = runs.into_iter().map(|run| run.turn_id).collect();
    turns.sort_unstable();
    turns.dedup();
    let mut outcomes = serde_json::Map::new();
    for turn in turns {
        let by = "expiry".to_owned();
        let asked = Answer {
            verdict: Verdict::Expire,
            turn: turn.clone(),
            call: None,
            all: false,
            reason: None,
            by,
            take_over,
            config: config.clone(),
        };
        outcomes.insert(turn, answer(args, asked).await?);
    }
    Ok(Value::Object(outcomes))
}

async fn resume_each(
    backend: &Backend,
    answer: &Answer,
    answers: &Answers,
    runs: &[&ParkedRun],
) -> anyhow::Result<Value> {
    let claimant = format!("tether {} (pid {}) {}", answer.verdict.command(), std::process::id(), uuid::Uuid::now_v7());
    let store = backend.setup.audit.clone();
    let mut last = Value::Null;
    for run in runs {
        let now = unix_ms(SystemTime::now());
        let record = store.claim_parked(&run.turn_id, &run.run_id, &claimant, answer.take_over, now).await?;
        let record_run = record.run_id.clone();
        let turn = backend.setup.resume(&record.turn_id, record.turn.clone(), &backend.tools, &backend.script)?;
        eprintln!("resuming run {} of turn {} on the sidecar at {}", record.run_id, record.turn_id, backend.address);
        last = match backend.script_tool.resume_parked(&turn, record, answers, &claimant).await? {
            Resumed::Waiting(calls) => {
                let ids: Vec<&str> = calls.iter().map(|c| c.request.call_id.as_str()).collect();
                eprintln!("the run still waits on {}; answer them to resume it", ids.join(", "));
                json!({"ok": false, "waiting": ids})
            }
            Resumed::Settled(result) => {
                if result.failure().is_some_and(|failure| failure.code == Code::RunParked) {
                    print_waiting(&*store, &run.turn_id, backend).await?;
                }
                let rows = turn.audit_log().await?.len();
                eprintln!("audit log: {rows} rows for turn {} ({})", run.turn_id, backend.audit_hint(&run.turn_id));
                result.to_model_value()
            }
            Resumed::Interrupted(error) => anyhow::bail!(
                "run {} of turn {} did not reach its end: {error}. Nothing is lost: it is parked again with \
                 every answer, and the calls it made meanwhile are in the effect ledger, so none runs twice. \
                 Resume it with the same command (another sidecar: `--sidecar ADDR`)",
                record_run,
                run.turn_id
            ),
        };
    }
    Ok(last)
}

/// After a run parked: what waits in turn `turn_id`, and how to answer it.
///
/// # Errors
/// If the store cannot be read.
pub async fn print_waiting(store: &dyn AuditStore, turn_id: &str, backend: &Backend) -> anyhow::Result<()> {
    for run in store.parked_runs(Some(turn_id)).await? {
        eprint!("parked, waiting for a person:\n{}", describe(&run));
    }
    let url = backend.audit_url();
    eprintln!(
        "answer with: tether approve --audit-store '{url}' --turn {turn_id} --all   (or --call ID; `tether deny` the same)"
    );
    Ok(())
}
