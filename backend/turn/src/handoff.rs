//! Durable turns: handing a waiting turn's script run to the audit store,
//! and going on from it in any process that shares the store
//! (`docs/parking.md`, "Durable turns").
//!
//! - A call that reaches its approval step with a deferring approver
//!   ([`Approver::defers`](super::Approver::defers)) waits in the turn's
//!   `Deferred` (`deferred.rs`).
//! - When a script's run parks waiting only on such calls, the script tool
//!   takes them with [`Turn::hand_off`] and stores a
//!   [`ParkedRun`](super::ParkedRun) with the turn's [`Turn::snapshot`]. From
//!   then on, this process writes no row for them: they are the store's.
//! - Another process builds the turn again from the snapshot
//!   ([`TurnBuilder::resumed`](super::TurnBuilder::resumed)), answers each call
//!   with [`Turn::answer_pending`] — the rest of the one execution path, from
//!   the approval's verdict to the audit row — and writes the script tool's
//!   own row with [`Turn::settle_resumed`] when the run ends.

use super::approval::{ApprovalDecision, ApprovalRecord, ApprovalVerdict};
use super::audit::unix_ms;
use super::call::{CallRequest, CallResult, Failure, OnAwaitingPerson};
use super::error::TurnError;
use super::guard::{CallGuard, StepsOutcome};
use super::origin::CallOrigin;
use super::parked::{OwedCall, ParkedRun, PendingCall, TurnSnapshot, direct_call_run_id};
use super::registry::Lookup;
use super::state::{Turn, ended_reason};
use super::step::Step;
use super::tool::{ToolError, ToolOutput};
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tether_codes::Reason;
use tracing::Instrument;

impl Turn {
    /// Takes the calls `awaiting` out of this process when every one of them
    /// waits for a deferring approver, and returns them, to be stored with
    /// the parked run; `None` (and nothing taken) when any of them does not.
    /// The calls then write no audit row here when they are dropped: whoever
    /// answers them does ([`answer_pending`](Self::answer_pending)).
    pub fn hand_off(&self, awaiting: &[String]) -> Option<Vec<PendingCall>> {
        self.inner.deferred.hand_off(awaiting)
    }

    /// Runs `request` through the one execution path — or, when it comes to
    /// wait for a person who answers from outside this process (a deferring
    /// approver), takes it out of this process at its approval step and
    /// returns it, to be stored ([`park_direct`](Self::park_direct), or in a
    /// model loop's record): its row is then written by whoever answers it.
    /// A call its approver answers here after all goes on to its result.
    pub async fn execute_or_hand_off(
        &self,
        request: CallRequest,
        origin: CallOrigin,
    ) -> Result<CallResult, PendingCall> {
        let call_id = request.id.clone();
        let waits = Arc::new(tokio::sync::Notify::new());
        let told = waits.clone();
        let request = request.on_awaiting_person(OnAwaitingPerson::new(move || told.notify_one()));
        let execute = self.execute(request, origin);
        tokio::pin!(execute);
        tokio::select! {
            result = &mut execute => return Ok(result),
            () = waits.notified() => {}
        }
        match self.hand_off(std::slice::from_ref(&call_id)) {
            Some(mut handed) if !handed.is_empty() => Err(handed.remove(0)),
            // The approver answers here after all: the call goes on.
            _ => Ok(execute.await),
        }
    }

    /// Stores `pending` — a direct call of the model's that waits for a
    /// person, taken out of this process by
    /// [`execute_or_hand_off`](Self::execute_or_hand_off) — in the turn's
    /// audit store as a record of its own ([`direct_call_run_id`]), with
    /// the turn's counts and `owner` (the application's context). Any
    /// process that shares the store then lists it and answers it, once,
    /// within the approval wait limit counted from when it began waiting;
    /// its row is written in this turn by the one that answers it.
    ///
    /// # Errors
    /// If the store could not keep it: then the call was not made, and no
    /// row is written for it.
    pub async fn park_direct(&self, pending: PendingCall, owner: Value) -> Result<ParkedRun, TurnError> {
        let call_id = pending.request.call_id.clone();
        let record = ParkedRun {
            turn_id: self.id().to_owned(),
            run_id: direct_call_run_id(self.id(), &call_id),
            call: None,
            request: Vec::new(),
            state: Vec::new(),
            model_loop: None,
            awaiting: vec![call_id],
            pending: vec![pending],
            answered: Default::default(),
            refused: 0,
            turn: self.snapshot(),
            owner,
            parked_at_ms: unix_ms(SystemTime::now()),
        };
        self.park(&record).await?;
        Ok(record)
    }

    /// What the turn's checks have now, for a parked run: the turn resumed
    /// from it ([`TurnBuilder::resumed`](super::TurnBuilder::resumed)) goes on
    /// under the same counts.
    pub fn snapshot(&self) -> TurnSnapshot {
        let (seen, approval_calls) = self.inner.precheck.remembered();
        TurnSnapshot {
            calls_used: self.inner.budget.used(),
            approval_calls,
            seen,
            runs: self.inner.runs.load(std::sync::atomic::Ordering::Relaxed),
            remaining_ms: self.remaining().map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
        }
    }

    /// Stores `run` in the turn's audit store, durably: only then may this
    /// process forget it.
    ///
    /// # Errors
    /// If the store could not keep it.
    pub async fn park(&self, run: &ParkedRun) -> Result<(), TurnError> {
        Ok(self.inner.store.park_run(run).await?)
    }

    /// Answers a call of a parked run: `decision` (`None`: it expired) goes
    /// through the rest of the one execution path — the approval's verdict
    /// (a decision after the approval wait limit, counted from
    /// [`PendingCall::since_ms`], is a time-out), the tool as the turn lists it
    /// now, the effect ledger, the result limit — and the call's one audit
    /// row. A call the ledger already holds (a process answered it and ended
    /// before the answer was stored) is not run again: settled, it is
    /// answered from the ledger's record; only started, `possibly_executed`.
    pub async fn answer_pending(&self, pending: &PendingCall, decision: Option<ApprovalDecision>) -> CallResult {
        let shown = &pending.request;
        let mut request = CallRequest::new(shown.call_id.clone(), shown.tool.clone(), shown.args.clone());
        if let Some(max) = pending.max_result_bytes {
            request = request.max_result_bytes(max);
        }
        let origin = shown.origin.clone();
        let span = self.call_span(&request, &origin);
        let guard_span = span.clone();
        async move {
            let mut guard = CallGuard::start(self.clone(), &request, &origin, guard_span);
            guard.began_at(pending.since_ms);
            guard.step = Step::Approval;
            let outcome = self.answered(pending, decision, &request, &origin, &mut guard).await;
            guard.finish(outcome).await
        }
        .instrument(span)
        .await
    }

    async fn answered(
        &self,
        pending: &PendingCall,
        decision: Option<ApprovalDecision>,
        request: &CallRequest,
        origin: &CallOrigin,
        guard: &mut CallGuard,
    ) -> StepsOutcome {
        let name = request.name.as_str();
        if let Some(code) = self.end_reason() {
            guard.approval = Some(ApprovalRecord::without_answer(ApprovalVerdict::Abandoned, "turn"));
            return Err(Failure::new(&ended_reason(code), Step::Approval));
        }
        let wait = self.inner.limits.approval_timeout;
        let in_time = waited(pending) <= wait;
        match decision {
            Some(decision) if in_time => self.settle_decision(name, decision, guard)?,
            _ => {
                guard.approval = Some(ApprovalRecord::without_answer(ApprovalVerdict::TimedOut, "timeout"));
                return Err(Failure::new(&Reason::ApprovalTimeout { tool: name.to_owned(), wait }, Step::Approval));
            }
        }
        // The slot it took in the process that parked it was given back
        // when the call was handed off: it takes one again to run.
        let Some(slot) = self.inner.budget.try_reserve() else {
            return Err(Failure::new(&Reason::ToolCallCap { max: self.inner.budget.max() }, Step::Budget));
        };
        guard.step = Step::Lookup;
        let tool = match self.inner.registry.lookup(name) {
            Lookup::Found(tool) => tool,
            Lookup::NotActivated | Lookup::NotFound => {
                return Err(Failure::new(&Reason::ToolNotFound { tool: name.to_owned() }, Step::Lookup));
            }
        };
        guard.step = Step::Execution;
        // A call the ledger already holds (a process answered it and ended
        // before the answer was stored) is answered from the ledger.
        let returned = self.run_tool(&tool, request, origin, true, slot, guard).await?;
        self.check_result(name, request, origin, returned)
    }

    /// Writes the audit row of the script tool's call whose run parked, once
    /// `work` — the resumed run, to its end — returns: the call's terminal
    /// event and one row, as if it had never parked. Ended early, like any
    /// call, when the turn ends.
    pub async fn settle_resumed(
        &self,
        call: &OwedCall,
        work: impl Future<Output = Result<ToolOutput, ToolError>> + Send,
    ) -> CallResult {
        let request = CallRequest::new(call.call_id.clone(), call.tool.clone(), call.args.clone());
        let origin = call.origin.clone();
        let span = self.call_span(&request, &origin);
        let guard_span = span.clone();
        async move {
            let mut guard = CallGuard::start(self.clone(), &request, &origin, guard_span);
            guard.began_at(call.started_at_ms);
            guard.step = Step::Execution;
            // A process that resumed the run before may have ended just after writing it.
            guard.audit_once = true;
            let returned = tokio::select! {
                biased;
                code = self.ended() => Err(Failure::new(&ended_reason(code), Step::Execution)),
                returned = work => Self::returned(returned, &mut guard.detail),
            };
            let outcome = match returned {
                Ok(returned) => self.check_result(&request.name, &request, &origin, returned),
                Err(failure) => Err(failure),
            };
            guard.finish(outcome).await
        }
        .instrument(span)
        .await
    }

    /// How long a call of a parked run may still wait for its answer.
    pub fn approval_left(&self, pending: &PendingCall) -> Duration {
        self.inner.limits.approval_timeout.saturating_sub(waited(pending))
    }
}

/// How long `pending` has waited for its answer, across processes.
fn waited(pending: &PendingCall) -> Duration {
    let ms = unix_ms(SystemTime::now()).saturating_sub(pending.since_ms);
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use crate::{
        ApprovalDecision, AuditStore, CallOrigin, CallOutcome, CallRequest, Code, DeferredApprover, MemoryAuditStore,
        ToolOutput, ToolSpec, Turn, TurnBuilder, executor_fn,
    };
    use serde_json::json;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn builder(store: Arc<MemoryAuditStore>, ran: Arc<AtomicU32>) -> TurnBuilder {
        Turn::builder("t1").audit_store(store).approver(Arc::new(DeferredApprover)).tool(
            ToolSpec::new("pay", "Pays.", json!({"type": "object"})).requires_approval(),
            executor_fn(move |_, args| {
                let ran = ran.clone();
                async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolOutput::new(json!({"paid": args["amount"]})))
                }
            }),
        )
    }

    fn script() -> CallOrigin {
        CallOrigin::Script { run_id: "t1/run-1".into(), parent_call_id: "c".into(), depth: 1 }
    }

    fn code(outcome: &CallOutcome) -> Option<Code> {
        match outcome {
            CallOutcome::Failed(failure) => Some(failure.code),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_call_handed_off_is_answered_once_by_another_turn_that_goes_on_under_the_same_checks() {
        let store = Arc::new(MemoryAuditStore::new());
        let ran = Arc::new(AtomicU32::new(0));
        let turn = builder(store.clone(), ran.clone()).build().unwrap();
        assert!(turn.hand_off(&["c/1".into()]).is_none(), "nothing waits yet");
        let waiting = tokio::spawn({
            let turn = turn.clone();
            async move { turn.execute(CallRequest::new("c/1", "pay", json!({"amount": 5})), script()).await }
        });
        let pending = loop {
            if let Some(pending) = turn.hand_off(&["c/1".into()]) {
                break pending;
            }
            tokio::task::yield_now().await;
        };
        assert_eq!((pending.len(), pending[0].request.args.clone()), (1, json!({"amount": 5})));
        waiting.abort();
        assert!(waiting.await.unwrap_err().is_cancelled());
        assert!(store.audit_log("t1").await.unwrap().is_empty(), "a handed-off call writes no row here");
        let snapshot = turn.snapshot();
        assert_eq!((snapshot.approval_calls, snapshot.seen.len()), (1, 1));

        let resumed = builder(store.clone(), ran.clone()).resumed(snapshot).build().unwrap();
        let answered = resumed.answer_pending(&pending[0], Some(ApprovalDecision::approve("dana"))).await;
        assert_eq!(answered.outcome, CallOutcome::Ok(json!({"paid": 5})));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        let rows = store.audit_log("t1").await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].decided_by.as_deref(), Some("dana"));

        // Answered again (a process that died before storing the answer): not
        // run again, but answered from the ledger's record, and no second row.
        let again = resumed.answer_pending(&pending[0], Some(ApprovalDecision::approve("dana"))).await;
        assert_eq!(again.outcome, CallOutcome::Ok(json!({"paid": 5})));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(store.audit_log("t1").await.unwrap().len(), 1, "one row per call");
        // The repeat rule remembers the call from before the park.
        let repeat = resumed.execute(CallRequest::new("c/2", "pay", json!({"amount": 5})), script()).await;
        assert_eq!(code(&repeat.outcome), Some(Code::RepeatedCall));
    }

    #[tokio::test]
    async fn a_resumed_turn_answers_calls_an_ended_process_made_from_the_ledger_and_never_runs_them_again() {
        let store = Arc::new(MemoryAuditStore::new());
        let ran = Arc::new(AtomicU32::new(0));
        let with_note = |store: Arc<MemoryAuditStore>| {
            let ran = ran.clone();
            builder(store, ran.clone()).tool(
                ToolSpec::new("note", "Notes.", json!({"type": "object"})),
                executor_fn(move |_, args| {
                    let ran = ran.clone();
                    async move {
                        ran.fetch_add(1, Ordering::SeqCst);
                        Ok(ToolOutput::new(json!({"noted": args["text"]})))
                    }
                }),
            )
        };
        // The process that resumed the run and ended: one call settled, one
        // started only, after the run's last park (its snapshot).
        let snapshot = with_note(store.clone()).build().unwrap().snapshot();
        let first = with_note(store.clone()).resumed(snapshot.clone()).build().unwrap();
        let note = || CallRequest::new("c/2", "note", json!({"text": "ünï"}));
        assert_eq!(first.execute(note(), script()).await.outcome, CallOutcome::Ok(json!({"noted": "ünï"})));
        let identity = crate::CallIdentity::new("t1", "c/3", "note", &script(), (json!({}).to_string(), false));
        store.ledger_started(crate::LedgerEntry::started(identity, false, 1), crate::ToolReplay::Never).await.unwrap();
        drop(first);

        let resumed = with_note(store.clone()).resumed(snapshot).build().unwrap();
        let again = resumed.execute(note(), script()).await;
        assert_eq!(again.outcome, CallOutcome::Ok(json!({"noted": "ünï"})), "from the ledger's record");
        let other_args = resumed.execute(CallRequest::new("c/2", "note", json!({"text": "x"})), script()).await;
        assert_eq!(code(&other_args.outcome), Some(Code::ReplayedCall), "not the call the ledger holds");
        let started = resumed.execute(CallRequest::new("c/3", "note", json!({})), script()).await;
        assert_eq!(code(&started.outcome), Some(Code::PossiblyExecuted));
        assert_eq!(ran.load(Ordering::SeqCst), 1, "the tool ran once");
        let rows = store.audit_log("t1").await.unwrap();
        let ids: Vec<&str> = rows.iter().map(|row| row.call.call_id.as_str()).collect();
        assert_eq!(ids, ["c/2", "c/3"], "one row per call: the first process's for c/2");

        // A turn that was not resumed refuses a repeated id, as always.
        let live = with_note(store.clone()).build().unwrap();
        assert_eq!(code(&live.execute(note(), script()).await.outcome), Some(Code::ReplayedCall));
    }

    #[tokio::test]
    async fn a_direct_call_that_comes_to_wait_is_stored_as_its_own_record_and_one_that_needs_no_person_runs() {
        let store = Arc::new(MemoryAuditStore::new());
        let ran = Arc::new(AtomicU32::new(0));
        let turn = builder(store.clone(), ran.clone())
            .tool(
                ToolSpec::new("look", "Looks.", json!({"type": "object"})),
                executor_fn(|_, _| async { Ok(ToolOutput::new(json!("seen"))) }),
            )
            .build()
            .unwrap();
        let look = turn.execute_or_hand_off(CallRequest::new("m1", "look", json!({})), CallOrigin::Model).await;
        assert_eq!(look.map(|result| result.outcome), Ok(CallOutcome::Ok(json!("seen"))));
        let pending = turn
            .execute_or_hand_off(CallRequest::new("m2", "pay", json!({"amount": 3})), CallOrigin::Model)
            .await
            .expect_err("it waits for a person");
        assert_eq!((pending.request.call_id.as_str(), ran.load(Ordering::SeqCst)), ("m2", 0));
        let rows = store.audit_log("t1").await.unwrap();
        assert_eq!(rows.len(), 1, "the waiting call has no row here: {rows:?}");

        let record = turn.park_direct(pending.clone(), json!({"app": 1})).await.unwrap();
        let stored = store.parked_runs(Some("t1")).await.unwrap();
        assert_eq!(stored, vec![record.clone()]);
        assert!(record.is_direct_call() && !record.is_model_loop());
        assert_eq!((record.run_id.as_str(), record.awaiting.clone()), ("t1/direct/m2", vec!["m2".to_owned()]));
        assert_eq!(record.turn.calls_used, 1, "the call's slot was given back when it was handed off");

        let resumed = builder(store.clone(), ran.clone()).resumed(record.turn.clone()).build().unwrap();
        let answered = resumed.answer_pending(&record.pending[0], Some(ApprovalDecision::approve("dana"))).await;
        assert_eq!(answered.outcome, CallOutcome::Ok(json!({"paid": 3})));
        let rows = store.audit_log("t1").await.unwrap();
        assert_eq!(rows.iter().map(|row| row.call.call_id.as_str()).collect::<Vec<_>>(), ["m1", "m2"]);
    }

    #[tokio::test]
    async fn an_answer_after_the_wait_limit_is_a_time_out_and_a_denial_runs_nothing() {
        let store = Arc::new(MemoryAuditStore::new());
        let ran = Arc::new(AtomicU32::new(0));
        let turn = builder(store.clone(), ran.clone()).build().unwrap();
        let waiting = tokio::spawn({
            let turn = turn.clone();
            async move { turn.execute(CallRequest::new("c/1", "pay", json!({"amount": 1})), script()).await }
        });
        let mut pending = loop {
            if let Some(pending) = turn.hand_off(&["c/1".into()]) {
                break pending;
            }
            tokio::task::yield_now().await;
        };
        waiting.abort();
        let mut late = pending[0].clone();
        late.since_ms -= i64::try_from(turn.limits().approval_timeout.as_millis()).unwrap() + 1000;
        assert!(turn.approval_left(&late).is_zero());
        let timed_out = turn.answer_pending(&late, Some(ApprovalDecision::approve("dana"))).await;
        assert_eq!(code(&timed_out.outcome), Some(Code::ApprovalTimeout));
        let call = pending.remove(0);
        let mut other = call.clone();
        other.request.call_id = "c/9".into();
        let denied = turn.answer_pending(&other, Some(ApprovalDecision::deny("dana", Some("no".into())))).await;
        assert_eq!(code(&denied.outcome), Some(Code::ApprovalDenied));
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        let rows = store.audit_log("t1").await.unwrap();
        let verdicts: Vec<_> = rows.iter().map(|row| row.approval.map(|a| a.as_str())).collect();
        assert_eq!(verdicts, [Some("timed_out"), Some("denied")]);
        // Each row dates from when its call arrived, not from its answer.
        assert_eq!(rows[0].started_at_ms, late.since_ms);
        let waited_us = (turn.limits().approval_timeout.as_millis() + 1000) * 1000;
        assert!(u128::try_from(rows[0].duration_us).unwrap() >= waited_us, "{:?}", rows[0]);
    }

    #[tokio::test]
    async fn a_resumed_script_calls_row_dates_from_when_the_call_arrived() {
        let store = Arc::new(MemoryAuditStore::new());
        let turn = builder(store.clone(), Arc::new(AtomicU32::new(0))).build().unwrap();
        let arrived = crate::unix_ms(std::time::SystemTime::now()) - 3_600_000;
        let owed = crate::OwedCall {
            call_id: "c".into(),
            tool: "run_script".into(),
            args: json!({"code": "1"}),
            origin: CallOrigin::Model,
            started_at_ms: arrived,
        };
        let settled = turn.settle_resumed(&owed, async { Ok(ToolOutput::new(json!(1))) }).await;
        assert_eq!(settled.outcome, CallOutcome::Ok(json!(1)));
        let rows = store.audit_log("t1").await.unwrap();
        assert_eq!((rows.len(), rows[0].started_at_ms), (1, arrived), "{rows:?}");
        assert!(rows[0].duration_us >= 3_600_000_000, "the hour it was parked counts: {:?}", rows[0]);
    }
}
