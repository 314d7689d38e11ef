//! The call guard: emits `ToolStarted` when a call arrives and guarantees
//! exactly one terminal event and one audit row per call — on the normal path
//! from [`CallGuard::finish`], and from `Drop` when the call is dropped
//! before it settled (its parent settled, or the turn ended and dropped it).

use super::approval::{ApprovalRecord, ApprovalVerdict};
use super::audit::{AuditRecord, CallIdentity, record_args, unix_ms};
use super::call::{CallOutcome, CallRequest, CallResult, CallStatus, CallerCancel, Failure};
use super::events::ToolEvent;
use super::origin::CallOrigin;
use super::registry::Lookup;
use super::state::{Turn, ended_reason};
use super::step::Step;
use super::store::StoreWrite;
use super::tool::{ToolError, ToolOutput};
use std::time::{Duration, Instant, SystemTime};
use tether_codes::{Code, Reason};

/// What the steps produced: the tool's return, or a failure.
pub(crate) type StepsOutcome = Result<Result<ToolOutput, ToolError>, Failure>;

/// One call's bookkeeping while it goes through the steps.
pub(crate) struct CallGuard {
    turn: Turn,
    identity: CallIdentity,
    started_wall: SystemTime,
    started: Instant,
    /// The step the call is at (the step recorded if it is dropped).
    pub(crate) step: Step,
    /// The approval verdict, once the approval step decided.
    pub(crate) approval: Option<ApprovalRecord>,
    /// The failure's full text for the audit row, never shown to the model:
    /// a tool error's [`ToolError::detail`], taken at the step that saw it.
    pub(crate) detail: Option<String>,
    settled: bool,
    /// Write the audit row only if the store holds none for the call id: a
    /// call of a resumed turn that an earlier process made (and may have
    /// recorded) before it ended.
    pub(crate) audit_once: bool,
    /// The audit row [`CallGuard::finish`] is enqueuing; written from `Drop`
    /// if the finish is dropped before the row is queued.
    unqueued: Option<AuditRecord>,
    /// The caller's cancellation of this call alone: dropped after it, the
    /// call is `cancelled`, not stopped with its parent.
    caller_cancel: Option<CallerCancel>,
    /// The call's span, which gets the audit row's status, code and step.
    span: tracing::Span,
}

impl CallGuard {
    /// Starts the bookkeeping and emits `ToolStarted`; the outcome will be
    /// recorded on `span`.
    pub(crate) fn start(turn: Turn, request: &CallRequest, origin: &CallOrigin, span: tracing::Span) -> CallGuard {
        let shown = turn.redact(&request.name, &request.args);
        // The audit keeps what ran: a script's code is never cut.
        let script =
            matches!(turn.inner.registry.lookup(&request.name), Lookup::Found(tool) if tool.meta().is_script_tool);
        let args = record_args(&shown, turn.limits().audit_args_bytes, script);
        turn.inner.events.emit(&ToolEvent::ToolStarted {
            turn_id: turn.id().to_owned(),
            call_id: request.id.clone(),
            parent_call_id: origin.parent_call_id().map(str::to_owned),
            tool: request.name.clone(),
            origin: origin.clone(),
            args: turn.limits().capture_payloads.then_some(shown),
        });
        let identity = CallIdentity::new(turn.id(), &request.id, &request.name, origin, args);
        CallGuard {
            turn,
            identity,
            started_wall: SystemTime::now(),
            started: Instant::now(),
            step: Step::Budget,
            approval: None,
            detail: None,
            settled: false,
            audit_once: false,
            unqueued: None,
            caller_cancel: request.caller_cancel.clone(),
            span,
        }
    }

    /// Dates the call from `started_at_ms` (Unix ms), when it first arrived
    /// — in a process that parked it, for a call resumed here — so that its
    /// row's start and duration span the whole call, its wait included, as a
    /// call that never parked has them.
    pub(crate) fn began_at(&mut self, started_at_ms: i64) {
        let Ok(ms) = u64::try_from(started_at_ms) else { return };
        let began = SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        let ago = SystemTime::now().duration_since(began).unwrap_or_default();
        if let Some(started) = Instant::now().checked_sub(ago) {
            (self.started_wall, self.started) = (began, started);
        }
    }

    /// The call's identity as its audit and ledger rows record it.
    pub(crate) fn identity(&self) -> &CallIdentity {
        &self.identity
    }

    /// The call's audit row; its status, code and step go on the call's span too.
    fn record(&self, status: CallStatus, step: Option<Step>, code: Option<String>, duration: Duration) -> AuditRecord {
        self.span.record("outcome", status.as_str());
        if let Some(code) = &code {
            self.span.record("code", code.as_str());
        }
        if let Some(step) = step {
            self.span.record("step", step.as_str());
        }
        AuditRecord {
            call: self.identity.clone(),
            step,
            code,
            approval: self.approval.as_ref().map(|a| a.verdict),
            decided_by: self.approval.as_ref().map(|a| a.decided_by.clone()),
            approval_reason: self.approval.as_ref().and_then(|a| a.reason.clone()),
            detail: self.detail.clone(),
            status,
            started_at_ms: unix_ms(self.started_wall),
            finished_at_ms: unix_ms(SystemTime::now()),
            duration_us: i64::try_from(duration.as_micros()).unwrap_or(i64::MAX),
        }
    }

    /// Settles the call: emits its terminal event and enqueues its audit row
    /// (step 9; committed by the store's next group commit, which the call
    /// does not wait for), then returns the result.
    ///
    /// # Cancel safety
    /// The event is emitted and the call marked settled before the first
    /// await; if this is dropped while the row waits for room in the
    /// store's queue, `Drop` enqueues it without waiting.
    pub(crate) async fn finish(mut self, outcome: StepsOutcome) -> CallResult {
        let duration = self.started.elapsed();
        let (outcome, metadata) = match outcome {
            Ok(Ok(output)) => (CallOutcome::Ok(output.value), output.metadata),
            Ok(Err(error)) => {
                if error.detail.is_some() {
                    self.detail = error.detail;
                }
                (CallOutcome::ToolError { code: error.code, message: error.message }, error.metadata)
            }
            Err(failure) => (CallOutcome::Failed(failure), None),
        };
        let result = CallResult {
            call_id: self.identity.call_id.clone(),
            tool: self.identity.tool.clone(),
            outcome,
            metadata,
            approval: self.approval.clone(),
            recorded_args: self.identity.args.clone(),
        };
        let (turn_id, parent_call_id) = (self.turn.id().to_owned(), self.identity.parent_call_id.clone());
        let (event, step, code) = match &result.outcome {
            CallOutcome::Ok(_) | CallOutcome::ToolError { .. } => (
                ToolEvent::ToolCompleted {
                    turn_id,
                    call_id: self.identity.call_id.clone(),
                    parent_call_id,
                    tool: self.identity.tool.clone(),
                    error_code: result.error_code().map(str::to_owned),
                    error_message: match &result.outcome {
                        CallOutcome::ToolError { message, .. } => Some(message.clone()),
                        _ => None,
                    },
                    duration,
                    metadata: result.metadata.clone(),
                },
                None,
                result.error_code().map(str::to_owned),
            ),
            CallOutcome::Failed(failure) => (
                ToolEvent::ToolFailed {
                    turn_id,
                    call_id: self.identity.call_id.clone(),
                    parent_call_id,
                    tool: self.identity.tool.clone(),
                    code: failure.code,
                    step: failure.step,
                    message: failure.message.clone(),
                    duration,
                },
                Some(failure.step),
                Some(failure.code.as_str().to_owned()),
            ),
        };
        self.settled = true;
        self.turn.inner.events.emit(&event);
        if code.as_deref() == Some(Code::RunParked.as_str()) {
            // The run is in the store: whoever resumes it to its end writes
            // this call's one row (`Turn::settle_resumed`).
            tracing::info!("the call's script run is parked in the audit store");
            return result;
        }
        let record = self.record(result.status(), step, code, duration);
        if let Some(failure) = result.failure() {
            tracing::info!(code = %failure.code, step = %failure.step, "call refused or ended: {}", failure.message);
        }
        if self.audit_once && self.recorded_before().await {
            tracing::info!("the call's audit row was written by the process that made it first");
            return result;
        }
        self.unqueued = Some(record.clone());
        // Durability is the next group commit's; the store logs a row it
        // fails to commit.
        if let Err(error) = self.turn.inner.store.enqueue(StoreWrite::Audit(record)).await {
            tracing::error!(%error, "cannot write the audit row");
        }
        self.unqueued = None;
        result
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(record) = self.unqueued.take() {
            self.enqueue_now(record);
        }
        if self.settled {
            return;
        }
        if self.turn.inner.deferred.was_handed(&self.identity.call_id) {
            // Handed to the store with its parked run: its row is written
            // by whoever answers it (`Turn::answer_pending`).
            return;
        }
        let reason = match self.turn.end_reason() {
            Some(code) => ended_reason(code),
            None if self.caller_cancel.as_ref().is_some_and(CallerCancel::is_cancelled) => Reason::CallCancelled,
            None => Reason::ParentSettled,
        };
        let code = reason.code();
        let message = match reason {
            Reason::ParentSettled | Reason::CallCancelled => reason.message(),
            _ => format!("{}: the call was dropped before it settled", code.display_name()),
        };
        if self.step == Step::Approval && self.approval.is_none() {
            self.approval = Some(ApprovalRecord::without_answer(ApprovalVerdict::Abandoned, "turn"));
        }
        let duration = self.started.elapsed();
        self.turn.inner.events.emit(&ToolEvent::ToolFailed {
            turn_id: self.turn.id().to_owned(),
            call_id: self.identity.call_id.clone(),
            parent_call_id: self.identity.parent_call_id.clone(),
            tool: self.identity.tool.clone(),
            code,
            step: self.step,
            message,
            duration,
        });
        let record = self.record(CallStatus::Abandoned, Some(self.step), Some(code.as_str().to_owned()), duration);
        self.enqueue_now(record);
    }
}

impl CallGuard {
    /// Whether the store already holds an audit row for this call id (a
    /// store that cannot be read: no, so the row is written).
    async fn recorded_before(&self) -> bool {
        match self.turn.inner.store.audit_log(self.turn.id()).await {
            Ok(rows) => rows.iter().any(|row| row.call.call_id == self.identity.call_id),
            Err(error) => {
                tracing::warn!(%error, "cannot read the audit log; writing the call's row");
                false
            }
        }
    }

    /// Enqueues `record` without waiting (no await is possible in `Drop`);
    /// if the store's queue is full the row is lost, and logged instead.
    fn enqueue_now(&self, record: AuditRecord) {
        if let Err(error) = self.turn.inner.store.try_enqueue(StoreWrite::Audit(record)) {
            tracing::error!(%error, call_id = %self.identity.call_id, "cannot write the audit row of a dropped call");
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        ApprovalDecision, ApprovalRequest, Approver, AuditStore, CallOrigin, CallOutcome, CallRequest, CallStatus,
        MemoryAuditStore, PolicyApprover, Reason, TRUNCATED_KEY, ToolError, ToolMeta, ToolOutput, ToolSpec, Turn,
        executor_fn,
    };
    use serde_json::{Value, json};
    use std::sync::Arc;

    /// Approves with a reason.
    struct Approves;

    #[async_trait::async_trait]
    impl Approver for Approves {
        async fn decide(&self, _: &ApprovalRequest) -> ApprovalDecision {
            ApprovalDecision { approved: true, decided_by: "ops".into(), reason: Some("expected".into()) }
        }
    }

    fn turn(approver: Arc<dyn Approver>, store: Arc<MemoryAuditStore>) -> Turn {
        let ok = || executor_fn(|_, _| async { Ok(ToolOutput::new(json!("done"))) });
        let script = ToolMeta { is_script_tool: true, nests: true, ..ToolMeta::default() };
        Turn::builder("t1")
            .audit_store(store)
            .approver(approver)
            .tool(ToolSpec::new("run_script", "", json!({"type": "object"})).meta(script), ok())
            .tool(ToolSpec::new("note", "", json!({"type": "object"})).allow_repeats(), ok())
            .tool(ToolSpec::new("pay", "", json!({"type": "object"})).requires_approval().allow_repeats(), ok())
            .build()
            .unwrap()
    }

    fn args_of(row: &crate::AuditRecord) -> Value {
        serde_json::from_str(&row.call.args).unwrap_or_else(|e| panic!("not JSON ({e}): {}", row.call.args))
    }

    #[tokio::test]
    async fn a_7_kb_script_is_recorded_whole_and_other_long_arguments_as_a_marked_cut() {
        let store = Arc::new(MemoryAuditStore::new());
        let turn = turn(Arc::new(PolicyApprover::approve_all()), store.clone());
        let code = "print('a line of a long script')\n".repeat(220);
        assert!(code.len() > 7000 && code.len() > turn.limits().audit_args_bytes);
        let script = json!({"code": code, "input": {"n": 1}});
        turn.execute(CallRequest::new("c1", "run_script", script.clone()), CallOrigin::Model).await;
        turn.execute(CallRequest::new("c2", "note", json!({"text": code})), CallOrigin::Model).await;
        let rows = store.audit_log("t1").await.unwrap();
        assert_eq!((args_of(&rows[0]), rows[0].call.args_truncated), (script, false), "the whole script");
        let cut = args_of(&rows[1]);
        assert!(rows[1].call.args_truncated);
        assert_eq!(cut[TRUNCATED_KEY], json!(true));
        assert_eq!(cut["bytes"], json!(json!({"text": code}).to_string().len()));
        assert_eq!(cut["sha256"].as_str().map(str::len), Some(64));
        assert!(rows[1].call.args.len() <= turn.limits().audit_args_bytes);
    }

    #[tokio::test]
    async fn the_approvers_reason_is_in_the_audit_row_for_a_yes_and_a_no() {
        for (approver, verdict, reason) in [
            (Arc::new(Approves) as Arc<dyn Approver>, "approved", "expected"),
            (Arc::new(PolicyApprover::deny_all()), "denied", "denied by the approval policy"),
        ] {
            let store = Arc::new(MemoryAuditStore::new());
            let turn = turn(approver, store.clone());
            let result = turn.execute(CallRequest::new("c1", "pay", json!({})), CallOrigin::Model).await;
            assert_eq!(result.approval.as_ref().and_then(|a| a.reason.as_deref()), Some(reason));
            let row = &store.audit_log("t1").await.unwrap()[0];
            assert_eq!(
                (row.approval.map(|a| a.as_str()), row.approval_reason.as_deref()),
                (Some(verdict), Some(reason))
            );
        }
    }

    #[tokio::test]
    async fn a_tool_errors_detail_is_in_the_audit_row_and_never_in_what_the_caller_gets() {
        let secret = "`RuntimeError`: db password=hunter2";
        let store = Arc::new(MemoryAuditStore::new());
        let turn = Turn::builder("t1")
            .audit_store(store.clone())
            .tool(
                ToolSpec::new("lookup", "", json!({"type": "object"})).read_only(),
                executor_fn(move |_, _| async move {
                    Err(ToolError::new("tool_failed", "it raised `RuntimeError`").with_detail(secret))
                }),
            )
            .tool(
                ToolSpec::new("fetch", "", json!({"type": "object"})).read_only(),
                executor_fn(move |_, _| async move {
                    let lost =
                        Reason::ProviderLost { tool: "fetch".into(), provider: "p".into(), detail: "gone".into() };
                    Err(ToolError::around(&lost).with_detail(secret))
                }),
            )
            .build()
            .unwrap();
        let reported = turn.execute(CallRequest::new("c1", "lookup", json!({})), CallOrigin::Model).await;
        let around = turn.execute(CallRequest::new("c2", "fetch", json!({})), CallOrigin::Model).await;
        for result in [&reported, &around] {
            assert!(!format!("{:?}", result.outcome).contains("hunter2"), "{:?}", result.outcome);
        }
        assert!(matches!(reported.outcome, CallOutcome::ToolError { .. }));
        assert!(matches!(around.outcome, CallOutcome::Failed(_)));
        let rows = store.audit_log("t1").await.unwrap();
        assert_eq!(
            rows.iter().map(|r| (r.status, r.detail.as_deref())).collect::<Vec<_>>(),
            [(CallStatus::Error, Some(secret)), (CallStatus::Failed, Some(secret))]
        );
    }
}
