//! `tether approve`, `deny` and `expire`: the calls that parked runs wait
//! on, read from the audit store and answered from any process — the one that parked them may be long gone (`docs/parking.md`,
//! "Durable turns").

use crate::answer_all::AnswerAll;
use crate::chat::ParkedAsk;
use crate::waiting::{print_waiting, top_turn, turn_tree};
use crate::wiring::{Backend, BackendArgs, Source, audit_store_url};
use anyhow::Context;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;
use tether_backend::agent::{AgentPark, WaitsOn, nested_turn_id};
use tether_backend::turn::{
    Answers, ApprovalDecision, Approver, Code, DeferredApprover, Failure, ParkedAnswer, ParkedRun, Reason, Resumed,
    Step, Turn, runs_waiting_on, unix_ms,
};

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

/// Answers the turn's waiting calls as `answer` says, resumes each parked
/// run they free on the sidecar `args` names (or an embedded one) to its end
/// or next park, and returns the script tool's result as `run` prints it
/// (or what still waits).
///
/// # Errors
/// If nothing of the turn waits, the call is not one that waits, another
/// process holds the run, or the backend cannot be started.
pub async fn answer(args: &BackendArgs, mut answer: Answer) -> anyhow::Result<Value> {
    let url = audit_store_url(&args.store)?;
    let runs = {
        let store = url.open().await.with_context(|| format!("cannot open the audit store `{url}`"))?;
        // A nested agent turn is answered from the top: the turns around it go on too.
        answer.turn = top_turn(&*store, &answer.turn).await?;
        turn_tree(&*store, &answer.turn).await?
    };
    if runs.is_empty() {
        anyhow::bail!(
            "nothing of turn `{}` waits for an answer in `{url}`; `tether pending --audit-store '{url}'` lists what waits",
            answer.turn
        );
    }
    let chosen = runs_waiting_on(&runs, &answer.turn, answer.call.as_deref())?;
    if let Some(direct) = chosen.iter().find(|run| run.is_direct_call()) {
        // Its tool is the application's (a Python function), not one the CLI's config has.
        let call = direct.awaiting.first().map_or("", String::as_str);
        anyhow::bail!(
            "call `{call}` of turn `{}` is a direct call an application's turn stored (the Python package's \
             `Turn.execute_or_park`): its tool is the application's, so answer it there, with \
             `tether.answer(\"{}\", call_id=\"{call}\", approve=..., decided_by=..., tools=..., audit=\"{url}\")`",
            direct.turn_id,
            direct.turn_id
        );
    }
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
        Some(decision) if answer.all => Arc::new(AnswerAll::new(decision)),
        _ => Arc::new(DeferredApprover),
    };
    // An agent turn's model loop goes on once the call it waits on is answered.
    let model_loop = runs.iter().find(|run| run.is_model_loop() && run.turn_id == answer.turn);
    let owner = &model_loop.unwrap_or(chosen[0]).owner;
    let owned = |key: &str| owner.get(key).and_then(Value::as_str).map(PathBuf::from);
    let source = Source::reopen(
        answer.config.clone().or_else(|| owned("config")),
        args.world.demo_db.clone().or_else(|| owned("demo_db")),
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
    let outcome = match model_loop {
        Some(record) => resume_agent_turn(&backend, &answer, &answers, record, &chosen).await,
        None => resume_each(&backend, &answer, &answers, &chosen).await,
    };
    backend.stop().await?;
    outcome
}

/// What `approve` says when the sidecar could not take `run` to its end.
fn interrupted(run: &ParkedRun, error: &dyn std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!(
        "run {} of turn {} did not reach its end: {error}. Nothing is lost: it is parked again with every \
         answer, and the calls it made meanwhile are in the effect ledger, so none runs twice. Resume it with \
         the same command (another sidecar: `--sidecar ADDR`)",
        run.run_id,
        run.turn_id
    )
}

/// Whoever resumes: one per `approve` / `deny` / `expire`.
fn claimant(verdict: Verdict) -> String {
    format!("tether {} (pid {}) {}", verdict.command(), std::process::id(), uuid::Uuid::now_v7())
}

/// An agent turn parked by `tether ask --approval later`: its model loop
/// record is claimed first (one process drives the turn), then the script
/// runs `runs` the answers free are resumed, and the model's own call that
/// waits for a person is answered; once the call the model waits on has
/// its result (stored before the model sees it), the model goes on
/// ([`ParkedAsk::resume`]). Otherwise the record is parked again with
/// what was answered.
async fn resume_agent_turn(
    backend: &Backend,
    answer: &Answer,
    answers: &Answers,
    record: &ParkedRun,
    runs: &[&ParkedRun],
) -> anyhow::Result<Value> {
    let claimant = claimant(answer.verdict);
    let store = backend.setup.audit.clone();
    let now = unix_ms(SystemTime::now());
    let mut record = store.claim_parked(&record.turn_id, &record.run_id, &claimant, answer.take_over, now).await?;
    let answered = async {
        let ask = ParkedAsk::of(backend, &record)?;
        let turn = backend.setup.resume(
            &record.turn_id,
            record.turn.clone(),
            &backend.tools,
            &backend.script,
            ask.agent_tools()?,
        )?;
        let result = answer_agent_turn(backend, &ask, &turn, answer, answers, &mut record, runs, &claimant).await?;
        Ok::<_, anyhow::Error>(result.map(|result| (ask, turn, result)))
    }
    .await;
    let (ask, turn, result) = match answered {
        Ok(Some(answered)) => answered,
        Ok(None) => {
            // Still waiting: parked again as it is, its answers kept and the claim released.
            store.park_run(&record).await?;
            print_waiting(&*store, &record.turn_id, backend.audit_url()).await?;
            return Ok(json!({"ok": false, "parked": true, "turn_id": record.turn_id}));
        }
        Err(error) => {
            // The claim is released, with what was answered: the same command goes on.
            if let Err(release) = store.park_run(&record).await {
                tracing::error!(%release, turn_id = %record.turn_id, "cannot release the agent turn's claim");
            }
            return Err(error);
        }
    };
    eprintln!("the model's call has its result; the turn {} goes on", record.turn_id);
    let outcome = ask.resume(backend, &turn, &record, &result).await?;
    if outcome.get("parked") != Some(&Value::Bool(true)) {
        store.unpark(&record.turn_id, &record.run_id, &claimant).await?;
    }
    Ok(outcome)
}

/// The part of [`resume_agent_turn`] before the model goes on: the runs
/// `runs` of `turn` and the model's own call answered as `answers` says —
/// or, when the call the model waits on started a nested agent turn, that
/// turn answered and gone on to its answer first — each result stored in
/// `record` (claimed by `claimant`) as it comes; the result of the call the
/// model waits on, or `None` while it still waits.
#[allow(clippy::too_many_arguments)]
async fn answer_agent_turn(
    backend: &Backend,
    ask: &ParkedAsk,
    turn: &Turn,
    answer: &Answer,
    answers: &Answers,
    record: &mut ParkedRun,
    runs: &[&ParkedRun],
    claimant: &str,
) -> anyhow::Result<Option<Value>> {
    let store = backend.setup.audit.clone();
    let now = unix_ms(SystemTime::now());
    let park = AgentPark::of(record).map_err(anyhow::Error::msg)?;
    let waiting = park.waiting.id.clone();
    let all = store.parked_runs(Some(&record.turn_id)).await?;
    for run in runs.iter().filter(|run| !run.is_model_loop() && run.turn_id == record.turn_id) {
        let claimed = store.claim_parked(&run.turn_id, &run.run_id, claimant, answer.take_over, now).await?;
        let started_by = claimed.call.as_ref().map(|call| call.call_id.clone());
        eprintln!("resuming run {} of turn {} on the sidecar at {}", claimed.run_id, claimed.turn_id, backend.address);
        match backend.script_tool.resume_parked(turn, claimed, answers, claimant).await? {
            Resumed::Settled(result)
                if started_by.as_deref() == Some(waiting.as_str())
                    && result.failure().is_none_or(|failure| failure.code != Code::RunParked) =>
            {
                record.answered.insert(waiting.clone(), ParkedAnswer::Ok(result.to_model_value()));
                store.update_parked(record, claimant).await?;
            }
            Resumed::Interrupted(error) => return Err(interrupted(run, &error)),
            _ => {}
        }
    }
    // Where the call the model waits on went: its run, or its nested turn.
    let gone_on = match park.on {
        WaitsOn::Person => true,
        _ if record.answered.contains_key(&waiting) => true,
        WaitsOn::Run => all.iter().any(|run| run.call.as_ref().is_some_and(|call| call.call_id == waiting)),
        WaitsOn::Agent => {
            let nested_id = nested_turn_id(&record.turn_id, &waiting);
            match store.parked_runs(Some(&nested_id)).await?.into_iter().find(ParkedRun::is_model_loop) {
                None => false,
                Some(nested) => {
                    let mut nested =
                        store.claim_parked(&nested.turn_id, &nested.run_id, claimant, answer.take_over, now).await?;
                    let went_on =
                        Box::pin(answer_nested(backend, ask, turn, answer, answers, &mut nested, runs, claimant)).await;
                    match went_on {
                        Ok(Some(result)) => {
                            store.unpark(&nested.turn_id, &nested.run_id, claimant).await?;
                            record.answered.insert(waiting.clone(), ParkedAnswer::Ok(result));
                            store.update_parked(record, claimant).await?;
                        }
                        Ok(None) => {}
                        Err(error) => {
                            // The nested turn's claim is released with what was answered.
                            if let Err(release) = store.park_run(&nested).await {
                                tracing::error!(%release, turn_id = %nested.turn_id, "cannot release the nested turn's claim");
                            }
                            return Err(error);
                        }
                    }
                    true
                }
            }
        }
    };
    if !gone_on {
        // The run (or nested turn) ended in a process that stopped before its
        // result reached this record: what it did is in the audit log, and it
        // is not run again.
        let reason = Reason::PossiblyExecuted { tool: park.waiting.name.clone(), call_id: waiting.clone() };
        let lost = Failure::new(&reason, Step::Execution).to_model_value();
        record.answered.insert(waiting.clone(), ParkedAnswer::Ok(lost));
        store.update_parked(record, claimant).await?;
    }
    let unanswered = record.unanswered().next().cloned();
    if let Some(pending) = unanswered {
        let decision = answers.get(&pending.request.call_id);
        if decision.is_some() || turn.approval_left(&pending).is_zero() {
            let result = turn.answer_pending(&pending, decision).await;
            record.answered.insert(pending.request.call_id.clone(), ParkedAnswer::Ok(result.to_model_value()));
            store.update_parked(record, claimant).await?;
        }
    }
    Ok(match record.answered.get(&waiting) {
        Some(ParkedAnswer::Ok(result)) => Some(result.clone()),
        _ => None,
    })
}

/// A nested agent turn's part of [`answer_agent_turn`]: `nested`, its
/// model-loop record (claimed), answered in its own turn — built again under
/// `parent` — and, once the call its model waits on has its result, its
/// loop gone on to its answer, which is the result of the agent tool's call
/// in `parent` (its row written there) and is returned as the model there
/// reads it. `None` while it still waits: its record is parked again (the
/// claim released) with what was answered, or replaced by its next park.
#[allow(clippy::too_many_arguments)]
async fn answer_nested(
    backend: &Backend,
    ask: &ParkedAsk,
    parent: &Turn,
    answer: &Answer,
    answers: &Answers,
    nested: &mut ParkedRun,
    runs: &[&ParkedRun],
    claimant: &str,
) -> anyhow::Result<Option<Value>> {
    let turn = ask.peers().resumed_turn(parent, nested)?;
    let Some(result) = answer_agent_turn(backend, ask, &turn, answer, answers, nested, runs, claimant).await? else {
        backend.setup.audit.park_run(nested).await?;
        return Ok(None);
    };
    eprintln!("the nested turn {}'s call has its result; it goes on", nested.turn_id);
    let outcome = ask.peers().resume_nested(parent, &turn, nested, &result).await?;
    if outcome.failure().is_some_and(|failure| failure.code == Code::RunParked) {
        return Ok(None);
    }
    Ok(Some(outcome.to_model_value()))
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
    let url = audit_store_url(&args.store)?;
    let mut turns = Vec::new();
    {
        let store = url.open().await.with_context(|| format!("cannot open the audit store `{url}`"))?;
        // A nested agent turn is answered with the top-level turn it belongs to.
        for run in store.parked_runs(turn).await? {
            turns.push(top_turn(&*store, &run.turn_id).await?);
        }
    }
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
    let claimant = claimant(answer.verdict);
    let store = backend.setup.audit.clone();
    let mut last = Value::Null;
    for run in runs {
        let now = unix_ms(SystemTime::now());
        let record = store.claim_parked(&run.turn_id, &run.run_id, &claimant, answer.take_over, now).await?;
        let turn =
            backend.setup.resume(&record.turn_id, record.turn.clone(), &backend.tools, &backend.script, Vec::new())?;
        eprintln!("resuming run {} of turn {} on the sidecar at {}", record.run_id, record.turn_id, backend.address);
        last = match backend.script_tool.resume_parked(&turn, record, answers, &claimant).await? {
            Resumed::Waiting(calls) => {
                let ids: Vec<&str> = calls.iter().map(|c| c.request.call_id.as_str()).collect();
                eprintln!("the run still waits on {}; answer them to resume it", ids.join(", "));
                json!({"ok": false, "waiting": ids})
            }
            Resumed::Settled(result) => {
                if result.failure().is_some_and(|failure| failure.code == Code::RunParked) {
                    print_waiting(&*store, &run.turn_id, backend.audit_url()).await?;
                }
                let rows = turn.audit_log().await?.len();
                eprintln!("audit log: {rows} rows for turn {} ({})", run.turn_id, backend.audit_hint(&run.turn_id));
                result.to_model_value()
            }
            Resumed::Interrupted(error) => return Err(interrupted(run, &error)),
        };
    }
    Ok(last)
}
