//! THE one execution path. Every call — the model's and every script's —
//! goes through [`Turn::execute`], in this order; a call refused at a step
//! never reaches the next:
//!
//! 1. budget  2. lookup  3. script exclusions (script origin only)
//! 4. arguments  5. policy  6. pre-execution check (judges and records)
//! 7. approval  8. execution  9. record (audit row; ledger around step 8)

use super::approval::{ApprovalRecord, ApprovalRequest, ApprovalVerdict};
use super::audit::{LedgerEntry, LedgerState, unix_ms};
use super::call::{CallOrigin, CallRequest, CallResult, CallStatus, Failure};
use super::codes::{Code, Step};
use super::error::StoreError;
use super::guard::{CallGuard, StepsOutcome};
use super::policy::PolicyAction;
use super::registry::Lookup;
use super::state::Turn;
use super::store::StoreWrite;
use super::tool::{ApprovalRequirement, Tool, ToolContext};
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::time::SystemTime;
use tracing::Instrument;

/// How a script call holds the turn's concurrency gate during execution.
enum Held<'a> {
    Shared(#[allow(dead_code)] tokio::sync::RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] tokio::sync::RwLockWriteGuard<'a, ()>),
}

fn ended_message(code: Code) -> &'static str {
    match code {
        Code::TurnDeadlineExceeded => "the turn's deadline passed; the call was not completed",
        _ => "the turn was cancelled; the call was not completed",
    }
}

impl Turn {
    /// Runs one tool call through the one execution path and returns what
    /// the caller receives. `origin` only decides the script exclusions
    /// (step 3) and what the records say: a refusal has the same code,
    /// display name and audit row (apart from origin) for both origins.
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
        let span = tracing::info_span!(
            "tool_call",
            turn_id = %self.id(),
            call_id = %request.id,
            tool = %request.name,
            origin = origin.kind(),
        );
        async move {
            let mut guard = CallGuard::start(self.clone(), &request, &origin);
            let outcome = self.steps(&request, &origin, &mut guard).await;
            guard.finish(outcome).await
        }
        .instrument(span)
        .await
    }

    async fn steps(&self, request: &CallRequest, origin: &CallOrigin, guard: &mut CallGuard) -> StepsOutcome {
        let inner = &self.inner;
        let name = request.name.as_str();

        // 1. Budget: the turn is running and the one pool has a slot.
        guard.step = Step::Budget;
        if let Some(code) = self.end_reason() {
            return Err(Failure::new(code, Step::Budget, ended_message(code)));
        }
        let Some(slot) = inner.budget.try_reserve() else {
            return Err(Failure::new(
                Code::ToolCallCapReached,
                Step::Budget,
                format!(
                    "this turn's cap of `{}` tool calls is spent (calls still running count); finish with the results you have",
                    inner.budget.max()
                ),
            ));
        };

        // 2. Lookup in the CURRENT list.
        guard.step = Step::Lookup;
        let tool = match inner.registry.lookup(name) {
            Lookup::Found(tool) => tool,
            Lookup::NotActivated => {
                return Err(Failure::new(
                    Code::ToolNotActivated,
                    Step::Lookup,
                    format!(
                        "the tool `{name}` is listed by name only and is not activated; activate it outside the script first, then call it"
                    ),
                ));
            }
            Lookup::NotFound => {
                return Err(Failure::new(
                    Code::ToolNotFound,
                    Step::Lookup,
                    format!("there is no tool `{name}` in this turn"),
                ));
            }
        };

        // 3. Script exclusions, decided by code from the tool's metadata.
        if origin.is_script() {
            guard.step = Step::ScriptExclusion;
            if let Some(why) = tool.meta().script_exclusion() {
                return Err(Failure::new(
                    Code::NotCallableFromScript,
                    Step::ScriptExclusion,
                    format!("`{name}` cannot be called from a script ({why}); call it directly in your next response"),
                ));
            }
        }

        // 4. Arguments.
        guard.step = Step::Arguments;
        if let Err(errors) = tool.validate(&request.args) {
            return Err(Failure::new(
                Code::InvalidArguments,
                Step::Arguments,
                format!("the arguments of `{name}` do not match its schema: {errors}"),
            ));
        }

        // 5. Policy: the user's permission blocks, then the administrator's rules.
        guard.step = Step::Policy;
        if let Some(reason) = inner.permissions.blocked(name, &request.args) {
            return Err(Failure::new(
                Code::PermissionDenied,
                Step::Policy,
                format!("the user's permissions do not allow this call to `{name}`: {reason}"),
            ));
        }
        let (action, reason) = inner.policy.judge(name, &request.args);
        if action == PolicyAction::Deny {
            let reason = reason.map(|r| format!(": {r}")).unwrap_or_default();
            return Err(Failure::new(
                Code::PolicyDenied,
                Step::Policy,
                format!("the administrator's policy blocks this call to `{name}`{reason}"),
            ));
        }
        let needs_approval =
            action == PolicyAction::NeedsApproval || tool.meta().approval == ApprovalRequirement::Always;
        let approval_reason = reason.map(str::to_owned);

        // 6. Pre-execution check: judges and records in one step.
        guard.step = Step::PreExecution;
        inner
            .precheck
            .judge_and_record(name, &request.args, tool.meta().refuse_identical_repeat, needs_approval)
            .map_err(|code| {
                let message = match code {
                    Code::RepeatedCall => {
                        format!("an identical call to `{name}` was already made in this turn; use its result")
                    }
                    _ => format!(
                        "this turn's cap of `{}` approval-required calls is spent; the call was not made",
                        inner.precheck.max_approval_calls()
                    ),
                };
                Failure::new(code, Step::PreExecution, message)
            })?;

        // 7. Approval, with the same wait limit for both origins.
        if needs_approval {
            guard.step = Step::Approval;
            self.approve(&tool, request, origin, approval_reason, guard).await?;
        }

        // 8. Execution (and the ledger around it).
        guard.step = Step::Execution;
        self.run_tool(&tool, request, origin, needs_approval, slot, guard).await
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
        let decided = tokio::select! {
            biased;
            code = self.ended() => {
                guard.approval = Some(ApprovalRecord { verdict: ApprovalVerdict::Abandoned, decided_by: "turn".into() });
                return Err(Failure::new(code, Step::Approval, ended_message(code)));
            }
            decided = tokio::time::timeout(wait, self.inner.approver.decide(&shown)) => decided,
        };
        match decided {
            Err(_) => {
                guard.approval =
                    Some(ApprovalRecord { verdict: ApprovalVerdict::TimedOut, decided_by: "timeout".into() });
                Err(Failure::new(
                    Code::ApprovalTimeout,
                    Step::Approval,
                    format!("no approval for `{name}` within `{wait:?}`; the call was not made"),
                ))
            }
            Ok(decision) if decision.approved => {
                guard.approval =
                    Some(ApprovalRecord { verdict: ApprovalVerdict::Approved, decided_by: decision.decided_by });
                Ok(())
            }
            Ok(decision) => {
                let why = decision.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
                let message = format!(
                    "approval for `{name}` was denied by `{}`{why}; the call was not made",
                    decision.decided_by
                );
                guard.approval =
                    Some(ApprovalRecord { verdict: ApprovalVerdict::Denied, decided_by: decision.decided_by });
                Err(Failure::new(Code::ApprovalDenied, Step::Approval, message))
            }
        }
    }

    async fn run_tool(
        &self,
        tool: &Tool,
        request: &CallRequest,
        origin: &CallOrigin,
        approval_required: bool,
        slot: super::budget::Reservation,
        guard: &mut CallGuard,
    ) -> StepsOutcome {
        let name = request.name.as_str();
        let meta = tool.meta();
        let limit = meta.time_limit.unwrap_or(self.inner.limits.default_tool_time_limit);
        let effects = !meta.read_only;
        let ledger = LedgerEntry::started(guard.identity().clone(), approval_required, unix_ms(SystemTime::now()));
        let context = ToolContext { turn: self.clone(), call_id: request.id.clone(), origin: origin.clone() };
        let executor = tool.executor();
        let args = request.args.clone();

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
                        let done = if state == LedgerState::Settled { "ran" } else { "started" };
                        return Err(Failure::new(
                            Code::ReplayedCall,
                            Step::Execution,
                            format!(
                                "call id `{call_id}` already {done} in this turn; a tool with effects never runs twice under one call id — use the earlier result"
                            ),
                        ));
                    }
                    Err(error) => {
                        tracing::error!(%error, "cannot record `started` in the effect ledger; not running the tool");
                        return Err(Failure::new(
                            Code::LedgerUnavailable,
                            Step::Execution,
                            format!("`{name}` was not run: the effect ledger could not record it"),
                        ));
                    }
                }
                slot.keep();
                let returned = self.run_executor(executor, context, args, limit, name).await?;
                let outcome = if returned.is_ok() { CallStatus::Ok } else { CallStatus::Error };
                let settled = StoreWrite::Settled { turn_id, call_id, outcome, settled_at_ms: unix_ms(SystemTime::now()) };
                // Enqueued in order; committed by the next group commit, which the call does not wait for.
                if let Err(error) = self.inner.store.enqueue(settled).await {
                    tracing::error!(%error, "cannot record `settled` in the effect ledger");
                }
                Ok(returned)
            } else {
                slot.keep();
                self.run_executor(executor, context, args, limit, name).await
            }
        };
        tokio::select! {
            biased;
            code = self.ended() => Err(Failure::new(code, Step::Execution, ended_message(code))),
            outcome = work => outcome,
        }
    }

    async fn run_executor(
        &self,
        executor: std::sync::Arc<dyn super::tool::ToolExecutor>,
        context: ToolContext,
        args: serde_json::Value,
        limit: std::time::Duration,
        name: &str,
    ) -> StepsOutcome {
        let run = AssertUnwindSafe(executor.execute(context, args)).catch_unwind();
        match tokio::time::timeout(limit, run).await {
            Err(_) => Err(Failure::new(
                Code::ToolTimeout,
                Step::Execution,
                format!("`{name}` did not finish within its time limit of `{limit:?}`; it may have had effects"),
            )),
            Ok(Err(_panic)) => {
                tracing::error!("the tool's executor panicked");
                Err(Failure::new(
                    Code::ToolFailed,
                    Step::Execution,
                    format!("`{name}` failed inside the host; the cause is in the host's logs"),
                ))
            }
            Ok(Ok(returned)) => Ok(returned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::turn::{
        AdminPolicy, Answer, ApprovalVerdict, ArgMatch, AuditStore, CallOutcome, CallPattern, EventLog, LedgerState,
        MemoryAuditStore, PolicyApprover, ToolEvent, ToolMeta, ToolOutput, ToolReplay, ToolSpec, TurnBuilder,
        UserPermissions, executor_fn,
    };
    use crate::turn::audit::CallIdentity;
    use serde_json::{Value, json};
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tokio::sync::Notify;

    /// Counts executions per tool; `hold` waits for `release`;
    /// `overlap_safe` waits until three of it run at once.
    struct Probe {
        runs: Mutex<HashMap<String, u32>>,
        entered: Notify,
        release: Notify,
        live: AtomicU32,
        peak: AtomicU32,
        together: tokio::sync::Barrier,
    }

    impl Default for Probe {
        fn default() -> Self {
            Probe {
                runs: Mutex::default(),
                entered: Notify::new(),
                release: Notify::new(),
                live: AtomicU32::new(0),
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

    fn counting(probe: &Arc<Probe>, name: &'static str) -> Arc<dyn crate::turn::ToolExecutor> {
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
                        let now = probe.live.fetch_add(1, Ordering::SeqCst) + 1;
                        probe.peak.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        probe.live.fetch_sub(1, Ordering::SeqCst);
                    }
                    "panics" => panic!("boom"),
                    "fails" => return Err(crate::turn::ToolError::new("not_found", "nothing there")),
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
            (ToolSpec::new("ping", "", schema()), "ping"),
            (ToolSpec::new("mail", "", schema()).requires_approval(), "mail"),
            (ToolSpec::new("once", "", schema()).refuse_identical_repeat(), "once"),
            (ToolSpec::new("later", "", schema()).deferred(), "later"),
            (ToolSpec::new("ask", "", schema()).asks_user(), "ask"),
            (ToolSpec::new("hold", "", schema()).requires_approval(), "hold"),
            (ToolSpec::new("slow", "", schema()).time_limit(Duration::from_millis(30)).requires_approval(), "hold"),
            (ToolSpec::new("overlap", "", schema()), "overlap"),
            (ToolSpec::new("again", "", schema()).meta(ToolMeta { replay: ToolReplay::Safe, ..ToolMeta::default() }), "again"),
            (ToolSpec::new("overlap_safe", "", schema()).concurrency_safe(), "overlap_safe"),
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

    fn script(n: u32) -> CallOrigin {
        CallOrigin::Script { run_id: "t1/run-1".into(), parent_call_id: "p".into(), index: n }
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
        assert_eq!(code(&model(&s.turn, "c2", "once", json!({"n": 1})).await), Some(Code::RepeatedCall));
        assert!(model(&s.turn, "c3", "once", json!({"n": 2})).await.failure().is_none());
        assert_eq!(s.probe.runs("once"), 2);

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
        let from_script = s.turn.execute(CallRequest::new("p/1", "ask", json!({})), script(1)).await;
        assert_eq!(code(&from_script), Some(Code::NotCallableFromScript));
        assert_eq!(s.probe.runs("ask"), 1);
        let row = s.store.audit_log("t1").await.unwrap().pop().unwrap();
        assert_eq!(
            (row.call.origin.as_str(), row.call.parent_call_id.as_deref(), row.call.script_run_id.as_deref(), row.call.depth),
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
    async fn script_calls_of_unsafe_tools_run_alone() {
        let s = setup(PolicyApprover::approve_all(), |b| b);
        let calls =
            (1..=3).map(|n| s.turn.execute(CallRequest::new(format!("p/{n}"), "overlap", json!({})), script(n)));
        futures::future::join_all(calls).await;
        assert_eq!(s.probe.peak.load(Ordering::SeqCst), 1, "unsafe: one at a time");
        // Safe calls only finish once all three run at once; run alone they would wait forever.
        let calls =
            (4..=6).map(|n| s.turn.execute(CallRequest::new(format!("p/{n}"), "overlap_safe", json!({})), script(n)));
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
        assert_eq!(
            failure.message,
            "call id `c1` already ran in this turn; a tool with effects never runs twice under one call id — use the earlier result"
        );
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
            let expected = format!("call id `{id}` already started in this turn;");
            assert!(refused.failure().unwrap().message.starts_with(&expected), "{refused:?}");
        }
        assert_eq!((s.probe.runs("ping"), s.probe.runs("again")), (0, 0), "neither ran");
    }

    /// A store whose ledger refuses every `started`.
    struct BrokenLedger(MemoryAuditStore);

    #[async_trait::async_trait]
    impl AuditStore for BrokenLedger {
        async fn enqueue(&self, write: StoreWrite) -> Result<crate::turn::Commit, StoreError> {
            self.try_enqueue(write)
        }
        fn try_enqueue(&self, write: StoreWrite) -> Result<crate::turn::Commit, StoreError> {
            match write {
                StoreWrite::Started { .. } => Ok(crate::turn::Commit::done(Err(StoreError::Other("disk full".into())))),
                other => self.0.try_enqueue(other),
            }
        }
        async fn ledger(&self, t: &str) -> Result<Vec<crate::turn::LedgerEntry>, StoreError> {
            self.0.ledger(t).await
        }
        async fn audit_log(&self, t: &str) -> Result<Vec<crate::turn::AuditRecord>, StoreError> {
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
        let turn = s.turn.clone();
        let extra = ToolSpec::new("look", "", schema()).read_only();
        turn.register(crate::turn::Tool::new(extra, counting(&s.probe, "look")).unwrap()).unwrap();
        assert!(model(&s.turn, "c2", "look", json!({})).await.failure().is_none());
        assert_eq!(store.audit_log("t1").await.unwrap().len(), 2, "both calls were audited");
    }
}
