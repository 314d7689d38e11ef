//! The [`Turn`]: the one tool list, the checks' state, the approver, the audit
//! store, the turn-wide cap, the deadline and the cancellation token — and
//! its builder.

use super::approval::{Approver, PolicyApprover};
use super::audit::{AuditRecord, DEFAULT_AUDIT_ARGS_BYTES, LedgerEntry, Redactor};
use super::memory::MemoryAuditStore;
use super::store::AuditStore;
use super::budget::CallBudget;
use super::codes::Code;
use super::error::TurnError;
use super::events::{EventSink, NoEvents};
use super::policy::{AdminPolicy, UserPermissions};
use super::precheck::PreExecutionCheck;
use super::registry::{ListedTool, ToolRegistry};
use super::tool::{Tool, ToolExecutor, ToolSpec};
use crate::client::ToolDef;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The turn's limits. Each has a default, listed per field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnLimits {
    /// Tool calls per turn, model and script calls together, calls in flight
    /// included. Default 200.
    pub max_tool_calls: u32,
    /// Approval-required calls per turn (counted by the pre-execution check,
    /// whatever the approver decides). Default 25.
    pub max_approval_calls: u32,
    /// How long a call waits for the approver, the same for both origins.
    /// Default 5 minutes.
    pub approval_timeout: Duration,
    /// The time limit of a tool that sets none. Default 2 minutes.
    pub default_tool_time_limit: Duration,
    /// Bytes of arguments kept in an audit or ledger row. Default 4 KiB.
    pub audit_args_bytes: usize,
    /// Put (redacted) arguments in `ToolStarted` events and arguments and
    /// errors in the nested-call summary. Default off.
    pub capture_payloads: bool,
}

impl Default for TurnLimits {
    fn default() -> Self {
        TurnLimits {
            max_tool_calls: 200,
            max_approval_calls: 25,
            approval_timeout: Duration::from_secs(300),
            default_tool_time_limit: Duration::from_secs(120),
            audit_args_bytes: DEFAULT_AUDIT_ARGS_BYTES,
            capture_payloads: false,
        }
    }
}

/// One agent turn. Cheap to clone; clones share the turn.
///
/// Every tool call of the turn — the model's and every script's — goes
/// through [`Turn::execute`], which runs the same ordered checks, approval,
/// execution and record for both origins.
#[derive(Clone)]
pub struct Turn {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) id: String,
    pub(crate) registry: ToolRegistry,
    pub(crate) policy: AdminPolicy,
    pub(crate) permissions: UserPermissions,
    pub(crate) approver: Arc<dyn Approver>,
    pub(crate) store: Arc<dyn AuditStore>,
    pub(crate) events: Arc<dyn EventSink>,
    pub(crate) budget: CallBudget,
    pub(crate) precheck: PreExecutionCheck,
    pub(crate) limits: TurnLimits,
    pub(crate) deadline: Option<Instant>,
    pub(crate) cancel: CancellationToken,
    pub(crate) redactor: Option<Redactor>,
    /// Script calls of tools that are not concurrency-safe take this
    /// exclusively; safe ones share it.
    pub(crate) gate: tokio::sync::RwLock<()>,
    runs: AtomicU64,
}

impl fmt::Debug for Turn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Turn")
            .field("id", &self.inner.id)
            .field("limits", &self.inner.limits)
            .field("calls_used", &self.inner.budget.used())
            .field("deadline", &self.inner.deadline)
            .field("cancelled", &self.inner.cancel.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Turn {
    /// A builder for turn `id`.
    pub fn builder(id: impl Into<String>) -> TurnBuilder {
        TurnBuilder::new(id)
    }

    /// The turn's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The limits.
    pub fn limits(&self) -> &TurnLimits {
        &self.inner.limits
    }

    /// The tool list as the model sees it (deferred tools by name only).
    pub fn tools_for_model(&self) -> Vec<ListedTool> {
        self.inner.registry.model_view()
    }

    /// The callable tools as a script is started with them.
    pub fn script_tools(&self) -> Vec<ToolDef> {
        self.inner.registry.script_tools()
    }

    /// Adds a tool to the one list mid-turn.
    ///
    /// # Errors
    /// [`TurnError::DuplicateTool`] if the name is taken.
    pub fn register(&self, tool: Tool) -> Result<(), TurnError> {
        self.inner.registry.register(tool)
    }

    /// Activates the deferred tool `name` in the one list: from now on the
    /// model and any running script can call it. Returns `true` if it was not
    /// activated before.
    ///
    /// # Errors
    /// [`TurnError::UnknownTool`] if no tool of that name is listed.
    pub fn activate(&self, name: &str) -> Result<bool, TurnError> {
        let activated = self.inner.registry.activate(name)?;
        if activated {
            tracing::info!(turn_id = %self.inner.id, tool = name, "tool activated");
        }
        Ok(activated)
    }

    /// Cancels the turn: calls waiting on approval or running end with
    /// `cancelled`, every open sidecar stream of the turn is dropped (so its
    /// script ends), and new calls are refused at the budget step.
    pub fn cancel(&self) {
        self.inner.cancel.cancel();
    }

    /// The turn's cancellation token (cancelling it cancels the turn).
    pub fn cancel_token(&self) -> CancellationToken {
        self.inner.cancel.clone()
    }

    /// The deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.inner.deadline
    }

    /// Time left until the deadline (zero once passed), or `None` without one.
    pub fn remaining(&self) -> Option<Duration> {
        self.inner.deadline.map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Why the turn is over (`cancelled` or `turn_deadline_exceeded`), or
    /// `None` while it runs.
    pub fn end_reason(&self) -> Option<Code> {
        if self.inner.cancel.is_cancelled() {
            Some(Code::Cancelled)
        } else if self.inner.deadline.is_some_and(|d| Instant::now() >= d) {
            Some(Code::TurnDeadlineExceeded)
        } else {
            None
        }
    }

    /// Completes when the turn is cancelled or its deadline passes.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only waits.
    pub async fn ended(&self) -> Code {
        match self.inner.deadline {
            Some(deadline) => tokio::select! {
                biased;
                () = self.inner.cancel.cancelled() => Code::Cancelled,
                () = tokio::time::sleep_until(deadline) => Code::TurnDeadlineExceeded,
            },
            None => {
                self.inner.cancel.cancelled().await;
                Code::Cancelled
            }
        }
    }

    /// Slots of the turn-wide cap taken: calls that ran plus calls in flight.
    pub fn calls_used(&self) -> u32 {
        self.inner.budget.used()
    }

    /// The arguments as host-side records show them (after the redaction hook).
    pub fn redact(&self, tool: &str, args: &Value) -> Value {
        match &self.inner.redactor {
            Some(redact) => redact(tool, args),
            None => args.clone(),
        }
    }

    pub(crate) fn next_run_id(&self) -> String {
        let n = self.inner.runs.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{}/run-{n}", self.inner.id)
    }

    /// The turn's audit rows, in the order written, including every row
    /// enqueued before this call.
    ///
    /// # Errors
    /// If the store cannot be read.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn audit_log(&self) -> Result<Vec<AuditRecord>, TurnError> {
        Ok(self.inner.store.audit_log(&self.inner.id).await?)
    }

    /// The turn's effect-ledger rows, in the order they first started,
    /// including every write enqueued before this call.
    ///
    /// # Errors
    /// If the store cannot be read.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn ledger(&self) -> Result<Vec<LedgerEntry>, TurnError> {
        Ok(self.inner.store.ledger(&self.inner.id).await?)
    }

    /// Approval-required calls (the model's and every script's) that reached
    /// execution, so their effect may have happened: those that settled (the
    /// tool ran) and those still `started` (it may have run; nobody knows).
    /// Tell the user about these when the turn is cancelled or fails — an
    /// email a script sent is on this list — and do not re-run the turn's
    /// model call blindly. Each entry's `state` tells the two apart.
    ///
    /// # Errors
    /// If the store cannot be read.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn possibly_executed_approval_actions(&self) -> Result<Vec<LedgerEntry>, TurnError> {
        Ok(self
            .ledger()
            .await?
            .into_iter()
            .filter(|e| e.approval_required)
            .collect())
    }
}

/// Builds a [`Turn`]. Defaults: no tools, an empty policy (allow all), no
/// permission blocks, an approver that denies everything
/// ([`PolicyApprover::deny_all`]), an in-memory audit store (use
/// [`SqliteAuditStore`](super::SqliteAuditStore) for a durable one), no
/// event sink, [`TurnLimits::default`], no deadline, a fresh cancellation
/// token, no redaction.
pub struct TurnBuilder {
    id: String,
    tools: Vec<Result<Tool, TurnError>>,
    policy: AdminPolicy,
    permissions: UserPermissions,
    approver: Arc<dyn Approver>,
    store: Arc<dyn AuditStore>,
    events: Arc<dyn EventSink>,
    limits: TurnLimits,
    deadline: Option<Instant>,
    cancel: CancellationToken,
    redactor: Option<Redactor>,
}

impl fmt::Debug for TurnBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnBuilder").field("id", &self.id).field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl TurnBuilder {
    /// A builder with the defaults listed on [`TurnBuilder`].
    pub fn new(id: impl Into<String>) -> Self {
        TurnBuilder {
            id: id.into(),
            tools: Vec::new(),
            policy: AdminPolicy::default(),
            permissions: UserPermissions::default(),
            approver: Arc::new(PolicyApprover::deny_all()),
            store: Arc::new(MemoryAuditStore::new()),
            events: Arc::new(NoEvents),
            limits: TurnLimits::default(),
            deadline: None,
            cancel: CancellationToken::new(),
            redactor: None,
        }
    }

    /// Adds a tool from its spec and executor (schema errors surface in
    /// [`TurnBuilder::build`]).
    pub fn tool(mut self, spec: ToolSpec, executor: Arc<dyn ToolExecutor>) -> Self {
        self.tools.push(Tool::new(spec, executor));
        self
    }

    /// Adds a ready tool (e.g. the script tool).
    pub fn add_tool(mut self, tool: Tool) -> Self {
        self.tools.push(Ok(tool));
        self
    }

    /// The administrator's policy.
    pub fn policy(mut self, policy: AdminPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The user's permission blocks.
    pub fn permissions(mut self, permissions: UserPermissions) -> Self {
        self.permissions = permissions;
        self
    }

    /// The approver.
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = approver;
        self
    }

    /// The audit store (audit log and effect ledger).
    pub fn audit_store(mut self, store: Arc<dyn AuditStore>) -> Self {
        self.store = store;
        self
    }

    /// Where call events go.
    pub fn events(mut self, events: Arc<dyn EventSink>) -> Self {
        self.events = events;
        self
    }

    /// All limits at once.
    pub fn limits(mut self, limits: TurnLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The turn-wide tool-call cap.
    pub fn max_tool_calls(mut self, max: u32) -> Self {
        self.limits.max_tool_calls = max;
        self
    }

    /// The cap on approval-required calls.
    pub fn max_approval_calls(mut self, max: u32) -> Self {
        self.limits.max_approval_calls = max;
        self
    }

    /// The approval wait limit.
    pub fn approval_timeout(mut self, wait: Duration) -> Self {
        self.limits.approval_timeout = wait;
        self
    }

    /// Payload capture for events and the nested-call summary.
    pub fn capture_payloads(mut self, on: bool) -> Self {
        self.limits.capture_payloads = on;
        self
    }

    /// The turn's deadline.
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// A deadline `after` from now.
    pub fn deadline_in(self, after: Duration) -> Self {
        self.deadline(Instant::now() + after)
    }

    /// The cancellation token (e.g. a child of the session's).
    pub fn cancel_token(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// The redaction hook for host-side records.
    pub fn redactor(mut self, redact: impl Fn(&str, &Value) -> Value + Send + Sync + 'static) -> Self {
        self.redactor = Some(Arc::new(redact));
        self
    }

    /// Builds the turn.
    ///
    /// # Errors
    /// [`TurnError::InvalidSchema`] or [`TurnError::DuplicateTool`].
    pub fn build(self) -> Result<Turn, TurnError> {
        let registry = ToolRegistry::new();
        for tool in self.tools {
            registry.register(tool?)?;
        }
        Ok(Turn {
            inner: Arc::new(Inner {
                id: self.id,
                registry,
                policy: self.policy,
                permissions: self.permissions,
                approver: self.approver,
                store: self.store,
                events: self.events,
                budget: CallBudget::new(self.limits.max_tool_calls),
                precheck: PreExecutionCheck::new(self.limits.max_approval_calls),
                limits: self.limits,
                deadline: self.deadline,
                cancel: self.cancel,
                redactor: self.redactor,
                gate: tokio::sync::RwLock::new(()),
                runs: AtomicU64::new(0),
            }),
        })
    }
}
