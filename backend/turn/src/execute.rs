//! THE one execution path. Every call — the model's, every script's, and
//! every call a tool makes — goes through [`Turn::execute`], in this order; a
//! call refused at a step never reaches the next:
//!
//! 1. budget (turn running, turn-wide cap, depth)  2. lookup
//! 3. exclusions (script origin; nesting tools at the deepest level)
//! 4. arguments  5. policy  6. pre-execution check (judges and records)
//! 7. approval  8. execution (and the result limit)  9. record (audit row;
//!    ledger around step 8)
//!
//! The messages of every refusal live with their codes in `tether_codes`.

use super::approval::{ApprovalDecision, ApprovalRecord, ApprovalRequest, ApprovalVerdict};
use super::audit::{CallIdentity, LedgerEntry, LedgerState, RecordedResult, unix_ms};
use super::budget::Reservation;
use super::call::{CallRequest, CallResult, CallStatus, Failure};
use super::error::StoreError;
use super::executor::{ToolContext, ToolExecutor};
use super::guard::{CallGuard, StepsOutcome};
use super::origin::CallOrigin;
use super::parked::PendingCall;
use super::policy::PolicyAction;
use super::registry::{Lookup, Tool};
use super::state::{Turn, ended_reason};
use super::step::Step;
use super::store::StoreWrite;
use super::tool::{ApprovalRequirement, ToolError, ToolOutput};
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tether_codes::{Code, Reason};
use tracing::Instrument;

/// How a script call holds the turn's concurrency gate during execution.
enum Held<'a> {
    Shared(#[allow(dead_code)] tokio::sync::RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] tokio::sync::RwLockWriteGuard<'a, ()>),
}

/// Counts the bytes written to it: a result's JSON size without the JSON.
struct ByteCount(u64);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len() as u64;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Turn {
    /// Runs one tool call through the one execution path and returns what
    /// the caller receives. `origin` decides the exclusions (step 3) and the
    /// depth, and what the records say: a refusal has the same code, display
    /// name and audit row (apart from origin) for every origin.
    ///
    /// Emits `ToolStarted` and exactly one terminal event, and writes one
    /// audit row. A tool with effects gets a ledger row `started` (durable)
    /// before it runs and `settled` after it returns.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the call: its terminal event
    /// (`cancelled`, `turn_deadline_exceeded` or `parent_settled`) and audit
    /// row (status `abandoned`) are written from the drop, and a ledger row
    /// already `started` stays so — the effect may have happened.
    pub async fn execute(&self, request: CallRequest, origin: CallOrigin) -> CallResult {
        let span = self.call_span(&request, &origin);
        let guard_span = span.clone();
        async move {
            let mut guard = CallGuard::start(self.clone(), &request, &origin, guard_span);
            let outcome = self.steps(&request, &origin, &mut guard).await;
            guard.finish(outcome).await
        }
        .instrument(span)
        .await
    }

    /// Records a call that was refused before it could be evaluated — by the
    /// sidecar, or past a script run's refusal cap — through the same guard
    /// as every call: `ToolStarted`, one terminal event, one audit row. The
    /// call takes nothing from the turn's budget.
    pub async fn record_refused(&self, request: CallRequest, origin: CallOrigin, failure: Failure) -> CallResult {
        let span = self.call_span(&request, &origin);
        let guard_span = span.clone();
        async move {
            let mut guard = CallGuard::start(self.clone(), &request, &origin, guard_span);
            guard.step = failure.step;
            guard.finish(Err(failure)).await
        }
        .instrument(span)
        .await
    }

    /// The span of one call: a child of the request's remote trace context
    /// when it carries one (a script's call: the sidecar's span for it),
    /// else of the current span. The guard records `outcome` (the audit
    /// row's status), `code` and `step` when the call settles.
    pub(crate) fn call_span(&self, request: &CallRequest, origin: &CallOrigin) -> tracing::Span {
        let span = tracing::info_span!(
            "tool_call",
            turn_id = %self.id(),
            call_id = %request.id,
            tool = %request.name,
            origin = origin.kind(),
            // Signed: OpenTelemetry keeps unsigned numbers as text.
            depth = i64::from(origin.depth()),
            run_id = origin.run_id(),
            outcome = tracing::field::Empty,
            code = tracing::field::Empty,
            step = tracing::field::Empty,
        );
        request.trace_context.set_parent_of(&span);
        span
    }

    async fn steps(&self, request: &CallRequest, origin: &CallOrigin, guard: &mut CallGuard) -> StepsOutcome {
        let inner = &self.inner;
        let name = request.name.as_str();
        let refuse = |reason: Reason, step: Step| Err(Failure::new(&reason, step));

        // 1. Budget: the turn is running, the call is not too deep, and the one pool has a slot.
        guard.step = Step::Budget;
        if let Some(code) = self.end_reason() {
            return refuse(ended_reason(code), Step::Budget);
        }
        let (depth, max_depth) = (origin.depth(), inner.limits.max_depth);
        if depth > max_depth {
            return refuse(Reason::DepthLimit { tool: name.to_owned(), depth, max: max_depth }, Step::Budget);
        }
        let Some(slot) = inner.budget.try_reserve() else {
            return refuse(Reason::ToolCallCap { max: inner.budget.max() }, Step::Budget);
        };

        // 2. Lookup in the CURRENT list.
        guard.step = Step::Lookup;
        let tool = match inner.registry.lookup(name) {
            Lookup::Found(tool) => tool,
            Lookup::NotActivated => return refuse(Reason::ToolNotActivated { tool: name.to_owned() }, Step::Lookup),
            Lookup::NotFound => return refuse(Reason::ToolNotFound { tool: name.to_owned() }, Step::Lookup),
        };

        // 3. Exclusions, decided by code from the tool's metadata.
        guard.step = Step::ScriptExclusion;
        if origin.is_script()
            && let Some(why) = tool.meta().script_exclusion()
        {
            let reason = Reason::NotCallableFromScript { tool: name.to_owned(), why: why.to_owned() };
            return refuse(reason, Step::ScriptExclusion);
        }
        if tool.meta().nests && depth >= max_depth {
            // Its own calls would be deeper than the turn allows.
            let reason = Reason::DepthLimit { tool: name.to_owned(), depth: depth + 1, max: max_depth };
            return refuse(reason, Step::ScriptExclusion);
        }

        // 4. Arguments.
        guard.step = Step::Arguments;
        if let Err(errors) = tool.validate(&request.args) {
            return refuse(Reason::ArgumentsMismatch { tool: name.to_owned(), errors }, Step::Arguments);
        }

        // 5. Policy: the user's permission blocks, then the administrator's rules.
        guard.step = Step::Policy;
        if let Some(reason) = inner.permissions.blocked(name, &request.args) {
            return refuse(Reason::PermissionDenied { tool: name.to_owned(), reason: reason.to_owned() }, Step::Policy);
        }
        let (action, reason) = inner.policy.judge(name, &request.args);
        if action == PolicyAction::Deny {
            return refuse(
                Reason::PolicyDenied { tool: name.to_owned(), reason: reason.map(str::to_owned) },
                Step::Policy,
            );
        }
        let needs_approval =
            action == PolicyAction::NeedsApproval || tool.meta().approval == ApprovalRequirement::Always;
        let approval_reason = reason.map(str::to_owned);

        // 6. Pre-execution check: judges and records in one step.
        guard.step = Step::PreExecution;
        inner
            .precheck
            .judge_and_record(&request.id, name, &request.args, tool.meta().refuses_repeats(), needs_approval)
            .map_err(|reason| Failure::new(&reason, Step::PreExecution))?;

        // 7. Approval, with the same wait limit for every origin.
        if needs_approval {
            guard.step = Step::Approval;
            self.approve(&tool, request, origin, approval_reason, guard).await?;
        }

        // 8. Execution (and the ledger around it), then the result limit.
        guard.step = Step::Execution;
        let returned = self.run_tool(&tool, request, origin, needs_approval, slot, guard).await?;
        self.check_result(name, request, origin, returned)
    }

    /// The tool returned: a result the caller cannot receive (too large)
    /// becomes a failure that says the tool RAN, so it is not blindly retried.
    pub(crate) fn check_result(
        &self,
        tool: &str,
        request: &CallRequest,
        origin: &CallOrigin,
        returned: Result<ToolOutput, super::tool::ToolError>,
    ) -> StepsOutcome {
        let Ok(output) = &returned else { return Ok(returned) };
        let limit = match (request.max_result_bytes, self.inner.limits.max_result_bytes) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(limit) = limit {
            // Measured as the caller will receive it, without building the text.
            let mut counted = ByteCount(0);
            let size = serde_json::to_writer(&mut counted, &output.value).map_or(u64::MAX, |()| counted.0);
            if size > limit {
                return Err(Failure::new(
                    &Reason::ResultTooLarge { tool: tool.to_owned(), size, limit },
                    Step::Execution,
                ));
            }
        }
        // The nesting limit is a guest's (it must parse what it gets); the model reads any depth.
        if origin.is_script() && tether_guest::wire::depth(&output.value) > tether_guest::wire::MAX_DEPTH {
            let problem = format!("it nests deeper than `{}` levels", tether_guest::wire::MAX_DEPTH);
            return Err(Failure::new(&Reason::InvalidResult { tool: tool.to_owned(), problem }, Step::Execution));
        }
        Ok(returned)
    }

    async fn approve(
        &self,
        tool: &Tool,
        request: &CallRequest,
        origin: &CallOrigin,
        reason: Option<String>,
        guard: &mut CallGuard,
    ) -> Result<(), Failure> {
        let shown = ApprovalRequest {
            turn_id: self.id().to_owned(),
            call_id: request.id.clone(),
            tool: request.name.clone(),
            description: tool.spec().description.clone(),
            args: request.args.clone(),
            origin: origin.clone(),
            reason,
        };
        let wait = self.inner.limits.approval_timeout;
        let name = &request.name;
        // A person who answers from elsewhere: the call waits where the
        // script tool can hand it to the store with its parked run.
        let _waiting = self.inner.approver.defers().then(|| {
            self.inner.deferred.wait(PendingCall {
                request: shown.clone(),
                max_result_bytes: request.max_result_bytes,
                since_ms: unix_ms(SystemTime::now()),
            })
        });
        // After the call is noted: the run may be handed off as soon as it parks.
        if let Some(hook) = &request.on_awaiting_person
            && self.inner.approver.asks_a_person()
        {
            hook.notify();
        }
        let decided = tokio::select! {
            biased;
            code = self.ended() => {
                guard.approval = Some(ApprovalRecord::without_answer(ApprovalVerdict::Abandoned, "turn"));
                return Err(Failure::new(&ended_reason(code), Step::Approval));
            }
            decided = tokio::time::timeout(wait, self.inner.approver.decide(&shown)) => decided,
        };
        match decided {
            Err(_) => {
                guard.approval = Some(ApprovalRecord::without_answer(ApprovalVerdict::TimedOut, "timeout"));
                Err(Failure::new(&Reason::ApprovalTimeout { tool: name.clone(), wait }, Step::Approval))
            }
            Ok(decision) => self.settle_decision(name, decision, guard),
        }
    }

    /// The approver's answer, recorded on the call: a yes lets it go on, a
    /// no is its failure.
    pub(crate) fn settle_decision(
        &self,
        tool: &str,
        decision: ApprovalDecision,
        guard: &mut CallGuard,
    ) -> Result<(), Failure> {
        let verdict = if decision.approved { ApprovalVerdict::Approved } else { ApprovalVerdict::Denied };
        let denied = (!decision.approved).then(|| Reason::ApprovalDenied {
            tool: tool.to_owned(),
            decided_by: decision.decided_by.clone(),
            reason: decision.reason.clone(),
        });
        guard.approval = Some(ApprovalRecord { verdict, decided_by: decision.decided_by, reason: decision.reason });
        match denied {
            None => Ok(()),
            Some(reason) => Err(Failure::new(&reason, Step::Approval)),
        }
    }

    /// A call the effect ledger already holds, in a turn resumed after the
    /// process that made the call ended: started and never settled, it may
    /// have run (`possibly_executed`, and it is not run again); settled with
    /// the same tool and arguments, it is answered from the result the ledger
    /// kept; otherwise `replayed_call`.
    async fn replayed_after_resume(
        &self,
        name: &str,
        state: LedgerState,
        identity: &CallIdentity,
    ) -> Result<Result<ToolOutput, ToolError>, Failure> {
        let call_id = identity.call_id.clone();
        if state == LedgerState::Started {
            let reason = Reason::PossiblyExecuted { tool: name.to_owned(), call_id };
            return Err(Failure::new(&reason, Step::Execution));
        }
        let rows = self.inner.store.ledger(self.id()).await.map_err(|error| {
            tracing::error!(%error, "cannot read the effect ledger; not running the tool");
            Failure::new(&Reason::LedgerUnavailable { tool: name.to_owned() }, Step::Execution)
        })?;
        let recorded = rows
            .into_iter()
            .find(|row| row.call.call_id == call_id)
            .filter(|row| row.call.tool == identity.tool && row.call.args == identity.args && !identity.args_truncated)
            .and_then(|row| row.result.as_deref().and_then(RecordedResult::parse));
        match recorded {
            Some(recorded) => {
                tracing::info!(%call_id, "answered from the effect ledger: the call ran before its process ended");
                Ok(recorded.into_returned())
            }
            None => Err(Failure::new(&Reason::ReplayedCall { call_id, settled: true }, Step::Execution)),
        }
    }

    pub(crate) async fn run_tool(
        &self,
        tool: &Tool,
        request: &CallRequest,
        origin: &CallOrigin,
        approval_required: bool,
        slot: Reservation,
        guard: &mut CallGuard,
    ) -> StepsOutcome {
        let name = request.name.as_str();
        let meta = tool.meta();
        let limit = meta.time_limit.unwrap_or(self.inner.limits.default_tool_time_limit);
        let effects = !meta.read_only;
        let ledger = LedgerEntry::started(guard.identity().clone(), approval_required, unix_ms(SystemTime::now()));
        // Only a resumed turn replays calls an earlier process made.
        let resumed = self.inner.resumed.then(|| guard.identity().clone());
        let context = ToolContext {
            turn: Arc::new(self.clone()),
            call_id: request.id.clone(),
            tool: request.name.clone(),
            origin: origin.clone(),
        };
        let executor = tool.executor();
        let args = request.args.clone();
        // A failure around the tool keeps its full text here, for the audit row.
        let detail = &mut guard.detail;
        let once = &mut guard.audit_once;

        let work = async move {
            // Script calls: unsafe tools run alone among the turn's script calls.
            let _held = match (origin.is_script(), meta.concurrency_safe) {
                (false, _) => None,
                (true, true) => Some(Held::Shared(self.inner.gate.read().await)),
                (true, false) => Some(Held::Exclusive(self.inner.gate.write().await)),
            };
            if effects {
                let (turn_id, call_id) = (ledger.call.turn_id.clone(), ledger.call.call_id.clone());
                // Resolves once `started` is committed: the tool runs only after.
                match self.inner.store.ledger_started(ledger, meta.replay).await {
                    Ok(()) => {}
                    Err(StoreError::Replayed { call_id, state }) => {
                        tracing::warn!(%call_id, "the ledger already holds this call id; not running the tool again");
                        if let Some(identity) = &resumed {
                            // The earlier process may have written the call's row.
                            *once = true;
                            return self.replayed_after_resume(name, state, identity).await;
                        }
                        let settled = state == LedgerState::Settled;
                        return Err(Failure::new(&Reason::ReplayedCall { call_id, settled }, Step::Execution));
                    }
                    Err(error) => {
                        tracing::error!(%error, "cannot record `started` in the effect ledger; not running the tool");
                        return Err(Failure::new(
                            &Reason::LedgerUnavailable { tool: name.to_owned() },
                            Step::Execution,
                        ));
                    }
                }
                slot.keep();
                let returned = self.run_executor(executor, context, args, limit, name, detail).await?;
                let outcome = if returned.is_ok() { CallStatus::Ok } else { CallStatus::Error };
                let settled = StoreWrite::Settled {
                    turn_id,
                    call_id,
                    outcome,
                    settled_at_ms: unix_ms(SystemTime::now()),
                    // What a later resume of this run answers a replay with;
                    // a turn that was not resumed never replays its calls (a
                    // run's state is taken after them), so keeps none.
                    result: resumed.as_ref().and_then(|_| RecordedResult::record(&returned)),
                };
                // Enqueued in order; committed by the next group commit, which the call does not wait for.
                if let Err(error) = self.inner.store.enqueue(settled).await {
                    tracing::error!(%error, "cannot record `settled` in the effect ledger");
                }
                Ok(returned)
            } else {
                slot.keep();
                self.run_executor(executor, context, args, limit, name, detail).await
            }
        };
        tokio::select! {
            biased;
            code = self.ended() => Err(Failure::new(&ended_reason(code), Step::Execution)),
            outcome = work => outcome,
        }
    }

    async fn run_executor(
        &self,
        executor: Arc<dyn ToolExecutor>,
        context: ToolContext,
        args: serde_json::Value,
        limit: Duration,
        name: &str,
        detail: &mut Option<String>,
    ) -> StepsOutcome {
        let run = AssertUnwindSafe(executor.execute(context, args)).catch_unwind();
        match tokio::time::timeout(limit, run).await {
            Err(_) => Err(Failure::new(&Reason::ToolTimeout { tool: name.to_owned(), limit }, Step::Execution)),
            Ok(Err(_panic)) => {
                tracing::error!("the tool's executor panicked");
                Err(Failure::new(&Reason::ToolFailed { tool: name.to_owned() }, Step::Execution))
            }
            Ok(Ok(returned)) => Self::returned(returned, detail),
        }
    }

    /// What a tool returned, as the steps' outcome: a failure around the
    /// tool (its provider down or lost) is the turn's to record, at this
    /// step, like a time-out; its full text goes to `detail`.
    pub(crate) fn returned(returned: Result<ToolOutput, ToolError>, detail: &mut Option<String>) -> StepsOutcome {
        match returned {
            Err(error) => match error.as_failure() {
                // Not a fault: the run waits in the audit store.
                Some(failure) if failure.code == Code::RunParked => Err(failure),
                Some(failure) => {
                    tracing::warn!(
                        code = %failure.code,
                        detail = error.detail.as_deref(),
                        "the tool could not be run to the end: {}",
                        failure.message
                    );
                    // The row keeps what went wrong: the full text, else
                    // the message the model got.
                    *detail = Some(error.detail.unwrap_or_else(|| failure.message.clone()));
                    Err(failure)
                }
                None => {
                    *detail = Some(error.detail.clone().unwrap_or_else(|| error.message.clone()));
                    Ok(Err(error))
                }
            },
            Ok(output) => Ok(Ok(output)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::CallIdentity;
    use crate::{
        AdminPolicy, Answer, ApprovalVerdict, ArgMatch, AuditStore, CallOutcome, CallPattern, CallStatus, EventLog,
        LedgerState, MemoryAuditStore, PolicyApprover, ToolEvent, ToolOutput, ToolReplay, ToolSpec, TurnBuilder,
        UserPermissions, executor_fn,
    };
    use serde_json::{Value, json};
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tether_codes::Code;
    use tokio::sync::Notify;

    /// How long a call of `overlap` waits in the tool for another call to
    /// join it. Calls the turn lets run together are polled by the same
    /// `join_all` as the one waiting and join it at once, whatever the load;
    /// the limit only ends the wait of a call that runs alone, so no result
    /// depends on it.
    const JOIN_WAIT: Duration = Duration::from_millis(200);

    /// Counts executions per tool; `hold` waits for `release`;
    /// `overlap_safe` waits until three of it run at once; `overlap` counts
    /// the calls in it (`live`, most at once `peak`) and stays until another
    /// joins it, or for [`JOIN_WAIT`].
    struct Probe {
        runs: Mutex<HashMap<String, u32>>,
        entered: Notify,
        release: Notify,
        live: tokio::sync::watch::Sender<u32>,
        peak: AtomicU32,
        together: tokio::sync::Barrier,
    }

    impl Default for Probe {
        fn default() -> Self {
            Probe {
                runs: Mutex::default(),
                entered: Notify::new(),
                release: Notify::new(),
                live: tokio::sync::watch::Sender::new(0),
                peak: AtomicU32::new(0),
                together: tokio::sync::Barrier::new(3),
            }
        }
    }

    impl Probe {
        fn runs(&self, tool: &str) -> u32 {
            self.runs.lock().unwrap().get(tool).copied().unwrap_or(0)
        }
    }

    fn schema() -> Value {
        json!({"type": "object", "properties": {"n": {"type": "integer"}, "to": {"type": "string"}}, "additionalProperties": false})
    }

    fn counting(probe: &Arc<Probe>, name: &'static str) -> Arc<dyn crate::ToolExecutor> {
        let probe = probe.clone();
        executor_fn(move |_, args| {
            let probe = probe.clone();
            async move {
                *probe.runs.lock().unwrap().entry(name.to_owned()).or_default() += 1;
                match name {
                    "hold" => {
                        probe.entered.notify_one();
                        probe.release.notified().await;
                    }
                    "overlap_safe" => {
                        probe.together.wait().await;
                    }
                    "overlap" => {
                        let mut now = 0;
                        probe.live.send_modify(|live| {
                            *live += 1;
                            now = *live;
                        });
                        probe.peak.fetch_max(now, Ordering::SeqCst);
                        // Stay until another call is in the tool too (`peak` has seen both), or
                        // for `JOIN_WAIT` when none comes.
                        let mut live = probe.live.subscribe();
                        let _ = tokio::time::timeout(JOIN_WAIT, live.wait_for(|&live| live > 1)).await;
                        probe.live.send_modify(|live| *live -= 1);
                    }
                    "panics" => panic!("boom"),
                    "fails" => return Err(crate::ToolError::new("not_found", "nothing there")),
                    _ => {}
                }
                Ok(ToolOutput::new(json!({"tool": name, "args": args})))
            }
        })
    }

    struct Setup {
        turn: Turn,
        probe: Arc<Probe>,
        events: Arc<EventLog>,
        store: Arc<MemoryAuditStore>,
        approver: Arc<PolicyApprover>,
    }

    fn setup(approver: PolicyApprover, configure: impl FnOnce(TurnBuilder) -> TurnBuilder) -> Setup {
        let probe = Arc::new(Probe::default());
        let events = Arc::new(EventLog::new());
        let store = Arc::new(MemoryAuditStore::new());
        let approver = Arc::new(approver);
        let mut builder = Turn::builder("t1")
            .events(events.clone())
            .audit_store(store.clone())
            .approver(approver.clone())
            .approval_timeout(Duration::from_millis(100));
        for (spec, name) in [
            (ToolSpec::new("ping", "", schema()).allow_repeats(), "ping"),
            (ToolSpec::new("mail", "", schema()).requires_approval().allow_repeats(), "mail"),
            (ToolSpec::new("once", "", schema()), "once"),
            (ToolSpec::new("look", "", schema()).read_only(), "look"),
            (ToolSpec::new("nest", "", schema()).read_only().nests(), "nest"),
            (ToolSpec::new("later", "", schema()).deferred(), "later"),
            (ToolSpec::new("ask", "", schema()).asks_user(), "ask"),
            (ToolSpec::new("hold", "", schema()).requires_approval().allow_repeats(), "hold"),
            (ToolSpec::new("slow", "", schema()).time_limit(Duration::from_millis(30)).requires_approval(), "hold"),
            (ToolSpec::new("overlap", "", schema()).allow_repeats(), "overlap"),
            (ToolSpec::new("again", "", schema()).replay_safe(), "again"),
            (ToolSpec::new("overlap_safe", "", schema()).concurrency_safe().allow_repeats(), "overlap_safe"),
            (ToolSpec::new("panics", "", schema()), "panics"),
            (ToolSpec::new("fails", "", schema()), "fails"),
        ] {
            builder = builder.tool(spec, counting(&probe, name));
        }
        let turn = configure(builder).build().unwrap();
        Setup { turn, probe, events, store, approver }
    }

    async fn model(turn: &Turn, id: &str, tool: &str, args: Value) -> CallResult {
        turn.execute(CallRequest::new(id, tool, args), CallOrigin::Model).await
    }

    fn script() -> CallOrigin {
        CallOrigin::Script { run_id: "t1/run-1".into(), parent_call_id: "p".into(), depth: 1 }
    }

    fn code(result: &CallResult) -> Option<Code> {
        result.failure().map(|f| f.code)
    }

    #[tokio::test]
    async fn an_earlier_step_wins_over_every_later_one() {
        // Everything below is also denied by policy and needs approval: the
        // earlier refusal must win and nothing later may run.
        let s = setup(PolicyApprover::approve_all(), |b| {
            b.policy(AdminPolicy::default().deny(CallPattern::tool("*"), "nothing today"))
        });
        let later = model(&s.turn, "c1", "later", json!({})).await;
        assert_eq!(code(&later), Some(Code::ToolNotActivated));
        assert!(later.failure().unwrap().message.contains("activate it outside the script first"));
        let ghost = model(&s.turn, "c2", "ghost", json!({})).await;
        assert_eq!(code(&ghost), Some(Code::ToolNotFound));
        let bad = model(&s.turn, "c3", "mail", json!({"n": "x"})).await;
        assert_eq!((code(&bad), bad.failure().unwrap().step), (Some(Code::InvalidArguments), Step::Arguments));
        let denied = model(&s.turn, "c4", "mail", json!({"n": 1})).await;
        assert_eq!((code(&denied), denied.failure().unwrap().step), (Some(Code::PolicyDenied), Step::Policy));
        assert!(denied.failure().unwrap().message.contains("nothing today"));
        assert!(s.approver.asked().is_empty(), "a denied call never reaches the approver");
        assert_eq!(s.probe.runs("mail"), 0);
        assert!(s.store.ledger("t1").await.unwrap().is_empty(), "a refused call writes no ledger row");
        assert_eq!(s.turn.calls_used(), 0, "refused calls give their budget slot back");
        let audit = s.store.audit_log("t1").await.unwrap();
        assert_eq!(audit.len(), 4);
        assert_eq!(audit[3].display_name(), Some("Blocked by policy"));
        assert_eq!(s.events.unpaired(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn user_permissions_and_argument_patterns_block_at_the_policy_step() {
        let s = setup(PolicyApprover::approve_all(), |b| {
            b.permissions(
                UserPermissions::new()
                    .block(CallPattern::tool("ping").when("/n", ArgMatch::Equals(json!(13))), "unlucky"),
            )
            .policy(
                AdminPolicy::default()
                    .needs_approval(CallPattern::tool("ping").when("/to", ArgMatch::Glob("*@corp.com".into()))),
            )
        });
        let blocked = model(&s.turn, "c1", "ping", json!({"n": 13})).await;
        assert_eq!(code(&blocked), Some(Code::PermissionDenied));
        assert_eq!(blocked.failure().unwrap().display_name(), "Blocked by your permissions");
        assert!(model(&s.turn, "c2", "ping", json!({"n": 12})).await.failure().is_none());
        assert!(s.approver.asked().is_empty());
        let escalated = model(&s.turn, "c3", "ping", json!({"to": "a@corp.com"})).await;
        assert!(escalated.failure().is_none());
        assert_eq!(escalated.approval.as_ref().map(|a| a.verdict), Some(ApprovalVerdict::Approved));
        assert_eq!(s.approver.asked().len(), 1, "the policy added an approval requirement");
        assert_eq!(s.approver.asked()[0].args, json!({"to": "a@corp.com"}), "the approver sees the exact arguments");
    }

    #[tokio::test]
    async fn approval_granted_denied_and_timed_out() {
        let s = setup(PolicyApprover::approve_all().with_tool("hold", Answer::Deny), |b| b);
        let sent = model(&s.turn, "c1", "mail", json!({"n": 1})).await;
        assert!(matches!(sent.outcome, CallOutcome::Ok(_)), "{sent:?}");
        let ledger = s.store.ledger("t1").await.unwrap();
        assert_eq!((ledger.len(), ledger[0].state, ledger[0].approval_required), (1, LedgerState::Settled, true));

        let denied = model(&s.turn, "c2", "hold", json!({})).await;
        assert_eq!(code(&denied), Some(Code::ApprovalDenied));
        assert_eq!(denied.approval.as_ref().unwrap().decided_by, "policy");
        assert_eq!(s.probe.runs("hold"), 0, "a denied call never runs");
        assert_eq!(s.store.ledger("t1").await.unwrap().len(), 1, "nor gets a ledger row");

        let s = setup(PolicyApprover::never_answer(), |b| b);
        let waited = model(&s.turn, "c1", "mail", json!({})).await;
        assert_eq!(code(&waited), Some(Code::ApprovalTimeout));
        assert_eq!(waited.approval.as_ref().unwrap().verdict, ApprovalVerdict::TimedOut);
        assert_eq!(s.probe.runs("mail"), 0);
        let row = &s.store.audit_log("t1").await.unwrap()[0];
        assert_eq!((row.approval, row.decided_by.as_deref()), (Some(ApprovalVerdict::TimedOut), Some("timeout")));
    }

    #[tokio::test]
    async fn the_pre_execution_check_refuses_repeats_and_caps_approvals() {
        let s = setup(PolicyApprover::approve_all(), |b| b.max_approval_calls(1));
        assert!(model(&s.turn, "c1", "once", json!({"n": 1})).await.failure().is_none());
        let repeat = model(&s.turn, "c2", "once", json!({"n": 1})).await;
        assert_eq!(code(&repeat), Some(Code::RepeatedCall), "a tool with effects refuses repeats by default");
        assert!(repeat.failure().unwrap().message.contains("`c1`"), "the refusal names the earlier call");
        assert!(model(&s.turn, "c3", "once", json!({"n": 2})).await.failure().is_none());
        assert_eq!(s.probe.runs("once"), 2);
        for id in ["c6", "c7"] {
            assert!(
                model(&s.turn, id, "look", json!({"n": 1})).await.failure().is_none(),
                "read-only: repeats allowed"
            );
        }

        assert!(model(&s.turn, "c4", "mail", json!({"n": 1})).await.failure().is_none());
        let capped = model(&s.turn, "c5", "mail", json!({"n": 2})).await;
        assert_eq!(code(&capped), Some(Code::ApprovalCapReached));
        assert_eq!(s.approver.asked().len(), 1, "a capped call never reaches the approver");
    }

    #[tokio::test]
    async fn the_cap_counts_calls_in_flight() {
        let s = setup(PolicyApprover::approve_all(), |b| b.max_tool_calls(2));
        let turn = s.turn.clone();
        let held = tokio::spawn(async move { model(&turn, "c1", "hold", json!({})).await });
        s.probe.entered.notified().await;
        assert!(model(&s.turn, "c2", "ping", json!({})).await.failure().is_none());
        let over = model(&s.turn, "c3", "ping", json!({})).await;
        assert_eq!((code(&over), over.failure().unwrap().step), (Some(Code::ToolCallCapReached), Step::Budget));
        s.probe.release.notify_one();
        assert!(held.await.unwrap().failure().is_none());
        assert_eq!(s.probe.runs("ping"), 1);
    }

    #[tokio::test]
    async fn a_tool_past_its_time_limit_stays_started_in_the_ledger() {
        let s = setup(PolicyApprover::approve_all(), |b| b);
        let slow = model(&s.turn, "c1", "slow", json!({})).await;
        assert_eq!((code(&slow), slow.failure().unwrap().step), (Some(Code::ToolTimeout), Step::Execution));
        let possibly = s.turn.possibly_executed_approval_actions().await.unwrap();
        assert_eq!(possibly.iter().map(|e| e.call.call_id.as_str()).collect::<Vec<_>>(), ["c1"]);
    }

    #[tokio::test]
    async fn tool_errors_panics_and_script_exclusions() {
        let s = setup(PolicyApprover::approve_all(), |b| b);
        let failed = model(&s.turn, "c1", "fails", json!({})).await;
        assert_eq!(failed.status(), CallStatus::Error);
        assert_eq!(failed.error_code(), Some("not_found"));
        assert_eq!(s.store.ledger("t1").await.unwrap()[0].outcome, Some(CallStatus::Error), "a tool error settles");
        let panicked = model(&s.turn, "c2", "panics", json!({})).await;
        assert_eq!(code(&panicked), Some(Code::ToolFailed));
        // The same asks-the-user tool: fine for the model, refused for a script.
        assert!(model(&s.turn, "c3", "ask", json!({})).await.failure().is_none());
        let from_script = s.turn.execute(CallRequest::new("p/1", "ask", json!({})), script()).await;
        assert_eq!(code(&from_script), Some(Code::NotCallableFromScript));
        assert_eq!(s.probe.runs("ask"), 1);
        let row = s.store.audit_log("t1").await.unwrap().pop().unwrap();
        assert_eq!(
            (
                row.call.origin.as_str(),
                row.call.parent_call_id.as_deref(),
                row.call.script_run_id.as_deref(),
                row.call.depth
            ),
            ("script", Some("p"), Some("t1/run-1"), 1)
        );
    }

    #[tokio::test]
    async fn cancelling_ends_calls_in_flight_and_keeps_their_ledger_rows() {
        let s = setup(PolicyApprover::approve_all(), |b| b);
        let turn = s.turn.clone();
        let held = tokio::spawn(async move { model(&turn, "c1", "hold", json!({})).await });
        s.probe.entered.notified().await;
        s.turn.cancel();
        let result = held.await.unwrap();
        assert_eq!((code(&result), result.failure().unwrap().step), (Some(Code::Cancelled), Step::Execution));
        let possibly = s.turn.possibly_executed_approval_actions().await.unwrap();
        assert_eq!(possibly.len(), 1, "the cancelled call may have had its effect");
        let after = model(&s.turn, "c2", "ping", json!({})).await;
        assert_eq!((code(&after), after.failure().unwrap().step), (Some(Code::Cancelled), Step::Budget));
        assert_eq!(s.events.unpaired(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_passed_deadline_ends_the_call() {
        let s = setup(PolicyApprover::approve_all(), |b| b.deadline_in(Duration::from_millis(50)));
        let result = model(&s.turn, "c1", "hold", json!({})).await;
        assert_eq!(code(&result), Some(Code::TurnDeadlineExceeded));
        assert_eq!(s.turn.end_reason(), Some(Code::TurnDeadlineExceeded));
    }

    #[tokio::test]
    async fn a_dropped_call_still_gets_one_terminal_event_and_an_audit_row() {
        let s = setup(PolicyApprover::approve_all(), |b| b);
        {
            let call = model(&s.turn, "c1", "hold", json!({}));
            tokio::pin!(call);
            tokio::select! {
                _ = &mut call => panic!("hold returned"),
                () = s.probe.entered.notified() => {}
            }
        } // dropped mid-execution, as when its parent settles
        let events = s.events.events();
        assert!(
            matches!(
                events.last(),
                Some(ToolEvent::ToolFailed { code: Code::ParentSettled, step: Step::Execution, .. })
            ),
            "{events:?}"
        );
        assert_eq!(s.events.unpaired(), Vec::<String>::new());
        let row = s.store.audit_log("t1").await.unwrap().pop().unwrap();
        assert_eq!((row.status, row.code.as_deref()), (CallStatus::Abandoned, Some("parent_settled")));
        assert_eq!(s.store.ledger("t1").await.unwrap()[0].state, LedgerState::Started);
    }

    #[tokio::test]
    async fn a_call_its_caller_cancelled_and_dropped_is_recorded_cancelled_and_the_turn_goes_on() {
        let s = setup(PolicyApprover::approve_all(), |b| b);
        let token = tokio_util::sync::CancellationToken::new();
        {
            let request = CallRequest::new("c1", "hold", json!({})).cancelled_by(token.clone());
            let call = s.turn.execute(request, CallOrigin::Model);
            tokio::pin!(call);
            tokio::select! {
                _ = &mut call => panic!("hold returned"),
                () = s.probe.entered.notified() => {}
            }
            token.cancel();
        } // dropped after its caller cancelled it
        let row = s.store.audit_log("t1").await.unwrap().pop().unwrap();
        assert_eq!((row.status, row.code.as_deref()), (CallStatus::Abandoned, Some("cancelled")));
        assert_eq!(s.turn.end_reason(), None, "the turn goes on");
    }

    #[tokio::test]
    async fn script_calls_of_unsafe_tools_run_alone() {
        let s = setup(PolicyApprover::approve_all(), |b| b);
        // Each call stays in the tool until another joins it: run together, two would be in it at once.
        let calls = (1..=3).map(|n| s.turn.execute(CallRequest::new(format!("p/{n}"), "overlap", json!({})), script()));
        let results = futures::future::join_all(calls).await;
        assert!(results.iter().all(|r| r.failure().is_none()), "{results:?}");
        assert_eq!(s.probe.runs("overlap"), 3);
        assert_eq!(s.probe.peak.load(Ordering::SeqCst), 1, "unsafe: one at a time");
        // Safe calls only finish once all three run at once; run alone they would wait forever.
        let calls =
            (4..=6).map(|n| s.turn.execute(CallRequest::new(format!("p/{n}"), "overlap_safe", json!({})), script()));
        let together = tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(calls)).await;
        assert!(together.is_ok_and(|r| r.iter().all(|r| r.failure().is_none())), "safe calls run together");
    }

    #[tokio::test]
    async fn records_show_redacted_arguments_while_the_tool_gets_the_originals() {
        let s = setup(PolicyApprover::approve_all(), |b| {
            b.capture_payloads(true).redactor(|_, args| {
                let mut args = args.clone();
                if let Some(to) = args.get_mut("to") {
                    *to = json!("[redacted]");
                }
                args
            })
        });
        let result = model(&s.turn, "c1", "mail", json!({"to": "dana@example.com"})).await;
        assert_eq!(result.outcome, CallOutcome::Ok(json!({"tool": "mail", "args": {"to": "dana@example.com"}})));
        assert_eq!(s.store.audit_log("t1").await.unwrap()[0].call.args, r#"{"to":"[redacted]"}"#);
        assert_eq!(s.store.ledger("t1").await.unwrap()[0].call.args, r#"{"to":"[redacted]"}"#);
        assert!(
            matches!(&s.events.events()[0], ToolEvent::ToolStarted { args: Some(a), .. } if a["to"] == "[redacted]")
        );
        assert_eq!(result.to_model_value()["ok"], json!(true));
    }

    #[tokio::test]
    async fn a_call_id_the_ledger_holds_runs_again_only_for_a_replay_safe_tool() {
        let s = setup(PolicyApprover::approve_all(), |b| b);
        assert!(model(&s.turn, "c1", "ping", json!({"n": 1})).await.failure().is_none());
        // Other arguments, so that no earlier check refuses it as a repeat.
        let replayed = model(&s.turn, "c1", "ping", json!({"n": 2})).await;
        let failure = replayed.failure().unwrap();
        assert_eq!((failure.code, failure.step), (Code::ReplayedCall, Step::Execution));
        assert_eq!(failure.display_name(), "Replayed call refused");
        assert_eq!(failure.message, Reason::ReplayedCall { call_id: "c1".into(), settled: true }.message());
        assert!(failure.message.starts_with("call id `c1` already ran in this turn"), "{}", failure.message);
        assert_eq!(s.probe.runs("ping"), 1, "the tool ran once");
        assert_eq!(s.turn.calls_used(), 1, "the refused replay gave its budget slot back");

        for n in 1..=2 {
            assert!(model(&s.turn, "c2", "again", json!({"n": n})).await.failure().is_none());
        }
        assert_eq!(s.probe.runs("again"), 2, "a replay-safe tool runs again under its settled id");
        let ledger = s.store.ledger("t1").await.unwrap();
        assert_eq!(
            ledger.iter().map(|e| (e.call.call_id.as_str(), e.state)).collect::<Vec<_>>(),
            [("c1", LedgerState::Settled), ("c2", LedgerState::Settled)]
        );
        let audit = s.store.audit_log("t1").await.unwrap();
        assert_eq!(audit[1].code.as_deref(), Some("replayed_call"));
    }

    #[tokio::test]
    async fn a_call_id_still_started_is_refused_for_every_tool() {
        // As after a crash: rows `started`, whose effects may have happened.
        let store = Arc::new(MemoryAuditStore::new());
        for (id, tool) in [("c1", "ping"), ("c2", "again")] {
            let call = CallIdentity::new("t1", id, tool, &CallOrigin::Model, ("{}".into(), false));
            store.ledger_started(LedgerEntry::started(call, false, 1), ToolReplay::Never).await.unwrap();
        }
        let s = setup(PolicyApprover::approve_all(), |b| b.audit_store(store.clone()));
        for (id, tool) in [("c1", "ping"), ("c2", "again")] {
            let refused = model(&s.turn, id, tool, json!({})).await;
            assert_eq!(code(&refused), Some(Code::ReplayedCall), "{tool}");
            let expected = format!("call id `{id}` already started (it may have run) in this turn;");
            assert!(refused.failure().unwrap().message.starts_with(&expected), "{refused:?}");
        }
        assert_eq!((s.probe.runs("ping"), s.probe.runs("again")), (0, 0), "neither ran");
    }

    /// A store whose ledger refuses every `started`.
    struct BrokenLedger(MemoryAuditStore);

    #[async_trait::async_trait]
    impl AuditStore for BrokenLedger {
        async fn enqueue(&self, write: StoreWrite) -> Result<crate::Commit, StoreError> {
            self.try_enqueue(write)
        }
        fn try_enqueue(&self, write: StoreWrite) -> Result<crate::Commit, StoreError> {
            match write {
                StoreWrite::Started { .. } => Ok(crate::Commit::done(Err(StoreError::Other("disk full".into())))),
                other => self.0.try_enqueue(other),
            }
        }
        async fn ledger(&self, t: &str) -> Result<Vec<crate::LedgerEntry>, StoreError> {
            self.0.ledger(t).await
        }
        async fn audit_log(&self, t: &str) -> Result<Vec<crate::AuditRecord>, StoreError> {
            self.0.audit_log(t).await
        }
    }

    #[tokio::test]
    async fn a_tool_with_effects_never_runs_unless_started_is_recorded() {
        let store = Arc::new(BrokenLedger(MemoryAuditStore::new()));
        let s = setup(PolicyApprover::approve_all(), |b| b.audit_store(store.clone()));
        let refused = model(&s.turn, "c1", "mail", json!({})).await;
        assert_eq!((code(&refused), refused.failure().unwrap().step), (Some(Code::LedgerUnavailable), Step::Execution));
        assert_eq!(s.probe.runs("mail"), 0, "no effect without a durable `started`");
        assert_eq!(s.turn.calls_used(), 0, "and the call gave its budget slot back");
        // A read-only tool needs no ledger row and runs.
        let s = setup(PolicyApprover::approve_all(), |b| b.audit_store(store.clone()));
        assert!(model(&s.turn, "c2", "look", json!({})).await.failure().is_none());
        assert_eq!(store.audit_log("t1").await.unwrap().len(), 2, "both calls were audited");
    }

    #[tokio::test]
    async fn depth_is_capped_and_nesting_tools_are_refused_at_the_deepest_level() {
        let s = setup(PolicyApprover::approve_all(), |b| b.max_depth(2));
        let at = |depth| CallOrigin::Tool { parent_call_id: "p".into(), depth };
        assert!(s.turn.execute(CallRequest::new("a", "look", json!({})), at(2)).await.failure().is_none());
        let deep = s.turn.execute(CallRequest::new("b", "look", json!({})), at(3)).await;
        assert_eq!((code(&deep), deep.failure().unwrap().step), (Some(Code::DepthLimitExceeded), Step::Budget));
        assert!(s.turn.execute(CallRequest::new("c", "nest", json!({})), at(1)).await.failure().is_none());
        let nesting = s.turn.execute(CallRequest::new("d", "nest", json!({})), at(2)).await;
        assert_eq!(code(&nesting), Some(Code::DepthLimitExceeded), "its own calls would be too deep");
        assert_eq!(s.probe.runs("nest"), 1);
        let listed: Vec<String> = s.turn.callable_tools(2).into_iter().map(|t| t.name().to_owned()).collect();
        assert!(!listed.contains(&"nest".to_owned()) && listed.contains(&"look".to_owned()), "{listed:?}");
        let row = s.store.audit_log("t1").await.unwrap().into_iter().find(|r| r.call.call_id == "b").unwrap();
        assert_eq!((row.call.origin.as_str(), row.code.as_deref()), ("tool", Some("depth_limit_exceeded")));
    }

    #[tokio::test]
    async fn a_tool_calls_back_into_the_turn_one_level_deeper_never_as_the_model() {
        let probe = Arc::new(Probe::default());
        let store = Arc::new(MemoryAuditStore::new());
        let outer = executor_fn(|context: crate::ToolContext, _args: Value| async move {
            let inner = context.call(1, "ask", json!({})).await;
            Ok(ToolOutput::new(json!({"inner": inner.to_model_value()})))
        });
        let turn = Turn::builder("t1")
            .audit_store(store.clone())
            .tool(ToolSpec::new("outer", "", schema()).read_only().nests(), outer)
            .tool(ToolSpec::new("ask", "", schema()).read_only(), counting(&probe, "ask"))
            .build()
            .unwrap();
        let result = model(&turn, "c1", "outer", json!({})).await;
        assert!(result.failure().is_none(), "{result:?}");
        let rows = store.audit_log("t1").await.unwrap();
        let nested = rows.iter().find(|r| r.call.call_id == "c1/1").unwrap();
        assert_eq!((nested.call.origin.as_str(), nested.call.parent_call_id.as_deref()), ("tool", Some("c1")));
        assert_eq!(probe.runs("ask"), 1);
    }

    #[tokio::test]
    async fn a_result_over_the_limit_says_the_tool_ran_and_is_settled_once() {
        let s = setup(PolicyApprover::approve_all(), |b| b);
        let request = CallRequest::new("p/1", "once", json!({"to": "x".repeat(100)})).max_result_bytes(50);
        let result = s.turn.execute(request, script()).await;
        assert_eq!(code(&result), Some(Code::ResultTooLarge));
        assert_eq!(result.status(), CallStatus::Undelivered);
        let message = &result.failure().unwrap().message;
        assert!(
            message.contains("ran and its effect happened") && message.contains("do not call it again"),
            "{message}"
        );
        assert_eq!(s.probe.runs("once"), 1, "one effect");
        let ledger = s.store.ledger("t1").await.unwrap();
        assert_eq!(ledger.len(), 1);
        assert_eq!((ledger[0].state, ledger[0].outcome), (LedgerState::Settled, Some(CallStatus::Ok)));
        let row = s.store.audit_log("t1").await.unwrap().pop().unwrap();
        assert_eq!((row.status, row.code.as_deref()), (CallStatus::Undelivered, Some("result_too_large")));
    }

    #[tokio::test]
    async fn a_call_id_the_ledger_holds_is_a_replay_and_never_runs_twice() {
        let s = setup(PolicyApprover::approve_all(), |b| b);
        assert!(model(&s.turn, "c1", "once", json!({"n": 1})).await.failure().is_none());
        let replay = model(&s.turn, "c1", "once", json!({"n": 2})).await;
        assert_eq!(code(&replay), Some(Code::ReplayedCall));
        assert_eq!(s.probe.runs("once"), 1);
    }
}
