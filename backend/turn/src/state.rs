//! The [`Turn`]: the one tool list, the checks' state, the approver, the audit
//! store, the turn-wide cap, the deadline and the cancellation token. Built
//! by [`TurnBuilder`](super::TurnBuilder).

use super::activate::ACTIVATE_TOOLS_NAME;
use super::approval::Approver;
use super::audit::{AuditRecord, LedgerEntry, Redactor};
use super::budget::CallBudget;
use super::call::{CallRequest, CallResult, Failure};
use super::error::TurnError;
use super::events::EventSink;
use super::executor::TurnAccess;
use super::limits::{ModelOffer, TurnLimits};
use super::origin::CallOrigin;
use super::policy::{AdminPolicy, UserPermissions};
use super::precheck::PreExecutionCheck;
use super::registry::{ListedTool, Tool, ToolRegistry};
use super::search::{DESCRIBE_TOOLS_NAME, SEARCH_TOOLS_NAME};
use super::store::AuditStore;
use super::tool::{ToolDef, ToolSpec};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tether_codes::{Code, Reason};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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
    pub(crate) runs: AtomicU64,
    /// Calls waiting on a deferring approver, and those handed to the store.
    pub(crate) deferred: super::deferred::Deferred,
    /// Built from a parked run's snapshot ([`TurnBuilder::resumed`](crate::TurnBuilder::resumed)):
    /// a call id the effect ledger already holds is then one an earlier
    /// process made before it ended, and is answered from the ledger.
    pub(crate) resumed: bool,
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
    /// The turn's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The limits.
    pub fn limits(&self) -> &TurnLimits {
        &self.inner.limits
    }

    /// The tool list as the model sees it (deferred tools by name only), for
    /// a model whose calls are depth 0: [`tools_for_model_at(0)`](Self::tools_for_model_at).
    pub fn tools_for_model(&self) -> Vec<ListedTool> {
        self.tools_for_model_at(0)
    }

    /// The tool list as a model whose calls are at `depth` sees it: deferred
    /// tools by name only, and at the turn's deepest level no tool that nests
    /// (its calls would be refused). The script tool's description ends with
    /// the typed stubs of the tools a script it starts may call
    /// ([`script_stubs_at(depth + 1)`](Self::script_stubs_at)), so the model
    /// reads the Python API it writes against. A nested agent turn's model
    /// calls at the agent tool's depth + 1, so its list shrinks with depth.
    /// Under [`ModelOffer::ScriptOnly`] the script tool is the only function
    /// offered (with `activate_tools`, and deferred tools by name): the rest
    /// reach the model as its stubs. Under [`ModelOffer::Search`] its
    /// description names the tools only, and `search_tools` and
    /// `describe_tools` are offered beside it.
    pub fn tools_for_model_at(&self, depth: u32) -> Vec<ListedTool> {
        let registry = &self.inner.registry;
        let found = |name: &str| match registry.lookup(name) {
            super::registry::Lookup::Found(tool) => Some(tool),
            _ => None,
        };
        let too_deep = depth >= self.inner.limits.max_depth;
        let mut listed: Vec<ListedTool> = registry
            .model_view()
            .into_iter()
            .filter(|tool| match tool {
                ListedTool::Full(def) => !(too_deep && found(def.name()).is_some_and(|t| t.meta().nests)),
                ListedTool::NameOnly(_) => true,
            })
            .collect();
        let scripted = |name: &str| found(name).is_some_and(|tool| tool.meta().is_script_tool);
        if listed.iter().any(|tool| matches!(tool, ListedTool::Full(def) if scripted(def.name()))) {
            let offer = self.inner.limits.model_offer;
            if offer != ModelOffer::Every {
                let own = [ACTIVATE_TOOLS_NAME, SEARCH_TOOLS_NAME, DESCRIBE_TOOLS_NAME];
                listed.retain(|tool| match tool {
                    ListedTool::Full(def) => scripted(def.name()) || own.contains(&def.name()),
                    ListedTool::NameOnly(_) => true,
                });
            }
            let tools = match offer {
                ModelOffer::Search => {
                    let callable = self.callable_tools(depth + 1);
                    let names: Vec<&str> = callable.iter().map(ToolDef::name).collect();
                    format!(
                        "The tools a script can call, by name (`{DESCRIBE_TOOLS_NAME}` gives their Python \
                         signatures, `{SEARCH_TOOLS_NAME}` finds them by words): {}.",
                        names.join(", ")
                    )
                }
                ModelOffer::Every | ModelOffer::ScriptOnly => {
                    format!("The tools, as Python:\n```python\n{}```", self.script_stubs_at(depth + 1))
                }
            };
            for tool in &mut listed {
                if let ListedTool::Full(def) = tool
                    && scripted(def.name())
                {
                    let description = format!("{}\n\n{tools}", def.description());
                    *def = ToolDef::new(def.name(), description, def.input_schema().clone());
                }
            }
        }
        listed
    }

    /// The typed Python stubs of the tools a script started by the model may
    /// call (depth 1: exclusions and the depth limit applied), the text
    /// `tether stubs` prints.
    pub fn script_stubs(&self) -> String {
        self.script_stubs_at(1)
    }

    /// The typed Python stubs of the tools a script whose calls are at
    /// `depth` may call (exclusions and the depth limit applied).
    pub fn script_stubs_at(&self, depth: u32) -> String {
        super::stubs::python_stubs(&self.callable_specs(depth))
    }

    /// [`callable_tools`](Self::callable_tools) with their whole specs
    /// (output schemas, metadata): what the typed stubs are made from.
    pub fn callable_specs(&self, depth: u32) -> Vec<ToolSpec> {
        self.inner.registry.callable_specs(depth, self.inner.limits.max_depth)
    }

    /// The tools a caller at `depth` may call, as a script whose calls are
    /// at `depth` is started with them: callable, not excluded from scripts,
    /// and at the turn's deepest level none that nest.
    pub fn callable_tools(&self, depth: u32) -> Vec<ToolDef> {
        self.inner.registry.callable_tools(depth, self.inner.limits.max_depth)
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

    /// The audit store the turn writes to.
    pub fn audit_store(&self) -> &Arc<dyn AuditStore> {
        &self.inner.store
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
        Ok(self.ledger().await?.into_iter().filter(|e| e.approval_required).collect())
    }
}

/// The reason a turn that ended (`end_reason`) gives its calls.
pub fn ended_reason(code: Code) -> Reason {
    match code {
        Code::TurnDeadlineExceeded => Reason::TurnDeadline,
        _ => Reason::TurnCancelled,
    }
}

#[async_trait::async_trait]
impl TurnAccess for Turn {
    fn id(&self) -> &str {
        Turn::id(self)
    }

    fn limits(&self) -> &TurnLimits {
        Turn::limits(self)
    }

    fn remaining(&self) -> Option<Duration> {
        Turn::remaining(self)
    }

    fn deadline(&self) -> Option<Instant> {
        Turn::deadline(self)
    }

    fn cancel_token(&self) -> CancellationToken {
        Turn::cancel_token(self)
    }

    fn activate(&self, name: &str) -> Result<bool, TurnError> {
        Turn::activate(self, name)
    }

    fn callable_tools(&self, depth: u32) -> Vec<ToolDef> {
        Turn::callable_tools(self, depth)
    }

    fn callable_specs(&self, depth: u32) -> Vec<ToolSpec> {
        Turn::callable_specs(self, depth)
    }

    fn next_run_id(&self) -> String {
        Turn::next_run_id(self)
    }

    async fn execute(&self, request: CallRequest, origin: CallOrigin) -> CallResult {
        Turn::execute(self, request, origin).await
    }

    async fn record_refused(&self, request: CallRequest, origin: CallOrigin, failure: Failure) -> CallResult {
        Turn::record_refused(self, request, origin, failure).await
    }

    fn hand_off(&self, awaiting: &[String]) -> Option<Vec<super::parked::PendingCall>> {
        Turn::hand_off(self, awaiting)
    }

    fn snapshot(&self) -> super::parked::TurnSnapshot {
        Turn::snapshot(self)
    }

    fn report_progress(&self, call_id: &str, tool: &str, origin: &CallOrigin, progress: super::events::ToolProgress) {
        self.inner.events.emit(&super::events::ToolEvent::ToolProgress {
            turn_id: self.id().to_owned(),
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            parent_call_id: origin.parent_call_id().map(str::to_owned),
            progress,
        });
    }

    async fn park(&self, run: &super::parked::ParkedRun) -> Result<(), TurnError> {
        Turn::park(self, run).await
    }
}
