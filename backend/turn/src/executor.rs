//! How a tool runs: the [`ToolExecutor`] seam, the [`ToolContext`] it is
//! given, and [`TurnAccess`] — what an executor may do with the turn it runs
//! in. Executors see the turn only through that trait, so tools do not depend
//! on the turn's internals (and the turn's modules import each other one way).

use super::call::{CallRequest, CallResult};
use super::error::TurnError;
use super::limits::TurnLimits;
use super::origin::CallOrigin;
use super::parked::{ParkedRun, PendingCall, TurnSnapshot};
use super::tool::{ToolDef, ToolError, ToolOutput, ToolSpec};
use serde_json::Value;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What a tool's executor may do with its turn. [`Turn`](super::Turn)
/// implements it; executors reach it through [`ToolContext::turn`].
#[async_trait::async_trait]
pub trait TurnAccess: Send + Sync {
    /// The turn's id.
    fn id(&self) -> &str;

    /// The turn's limits.
    fn limits(&self) -> &TurnLimits;

    /// Time left until the turn's deadline, or `None` without one.
    fn remaining(&self) -> Option<Duration>;

    /// The turn's deadline: the ONE deadline of the whole call tree, which a
    /// nested turn (an agent tool's) takes over unchanged.
    fn deadline(&self) -> Option<tokio::time::Instant>;

    /// The turn's cancellation token; a nested turn takes a child of it, so
    /// cancelling this turn cancels every turn below it.
    fn cancel_token(&self) -> tokio_util::sync::CancellationToken;

    /// Activates the deferred tool `name` (see [`Turn::activate`](super::Turn::activate)).
    ///
    /// # Errors
    /// [`TurnError::UnknownTool`] if no tool of that name is listed.
    fn activate(&self, name: &str) -> Result<bool, TurnError>;

    /// The tools a caller at `depth` may call: callable, not excluded from
    /// scripts, and at the deepest level none that nest.
    fn callable_tools(&self, depth: u32) -> Vec<ToolDef>;

    /// [`callable_tools`](Self::callable_tools) with their whole specs
    /// (output schemas, metadata): what the typed stubs are made from.
    fn callable_specs(&self, depth: u32) -> Vec<ToolSpec>;

    /// A fresh id for a script run of this turn.
    fn next_run_id(&self) -> String;

    /// Runs a call through the one execution path.
    async fn execute(&self, request: CallRequest, origin: CallOrigin) -> CallResult;

    /// Takes the calls `awaiting` out of this process when each waits for a
    /// person who answers from elsewhere (see [`Turn::hand_off`](super::Turn::hand_off)).
    fn hand_off(&self, awaiting: &[String]) -> Option<Vec<PendingCall>>;

    /// What the turn's checks have now (see [`Turn::snapshot`](super::Turn::snapshot)).
    fn snapshot(&self) -> TurnSnapshot;

    /// Reports how far the call `call_id` of `tool` (issued by `origin`)
    /// got, as a [`ToolEvent::ToolProgress`](super::ToolEvent::ToolProgress).
    fn report_progress(&self, call_id: &str, tool: &str, origin: &CallOrigin, progress: super::ToolProgress);

    /// Stores a parked run durably (see [`Turn::park`](super::Turn::park)).
    ///
    /// # Errors
    /// If the store could not keep it.
    async fn park(&self, run: &ParkedRun) -> Result<(), TurnError>;

    /// Records a call that was refused before it could be evaluated (by the
    /// sidecar, or past a run's refusal cap) through the same bookkeeping as
    /// any call: events, audit row. Returns what the caller was told.
    async fn record_refused(
        &self,
        request: CallRequest,
        origin: CallOrigin,
        failure: super::call::Failure,
    ) -> CallResult;
}

/// What a tool's executor is given besides the arguments.
#[derive(Clone)]
pub struct ToolContext {
    /// The turn the call belongs to.
    pub turn: Arc<dyn TurnAccess>,
    /// The call's id.
    pub call_id: String,
    /// The tool's name, as the call named it.
    pub tool: String,
    /// Who issued the call (its depth included).
    pub origin: CallOrigin,
}

impl ToolContext {
    /// The depth of the call being executed.
    pub fn depth(&self) -> u32 {
        self.origin.depth()
    }

    /// Calls another tool from inside this one: through the one execution
    /// path, one level deeper, as a child of this call — never as the model.
    /// `n` numbers this tool's calls (the nested id is `<call id>/<n>`).
    pub async fn call(&self, n: u32, name: &str, args: Value) -> CallResult {
        let request = CallRequest::new(format!("{}/{n}", self.call_id), name, args);
        let origin = CallOrigin::Tool { parent_call_id: self.call_id.clone(), depth: self.depth() + 1 };
        self.turn.execute(request, origin).await
    }

    /// Says how far this call got while it works (an MCP server's progress
    /// notifications come here): the host's event sink shows it.
    pub fn report_progress(&self, progress: super::ToolProgress) {
        self.turn.report_progress(&self.call_id, &self.tool, &self.origin, progress);
    }
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("turn", &self.turn.id())
            .field("call_id", &self.call_id)
            .field("tool", &self.tool)
            .field("origin", &self.origin)
            .finish()
    }
}

/// Runs a tool. Called only by step 8 of the one execution path, after every
/// check passed.
///
/// # Cancel safety
/// The future may be dropped at any await point (tool time limit, turn
/// deadline, cancellation); the ledger then keeps the call `started`.
#[async_trait::async_trait]
pub trait ToolExecutor: Send + Sync {
    /// Runs the tool with validated `args`.
    async fn execute(&self, context: ToolContext, args: Value) -> Result<ToolOutput, ToolError>;
}

struct FnExecutor<F>(F);

#[async_trait::async_trait]
impl<F, Fut> ToolExecutor for FnExecutor<F>
where
    F: Fn(ToolContext, Value) -> Fut + Send + Sync,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send,
{
    async fn execute(&self, context: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        (self.0)(context, args).await
    }
}

/// An executor from an async closure.
pub fn executor_fn<F, Fut>(f: F) -> Arc<dyn ToolExecutor>
where
    F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    Arc::new(FnExecutor(f))
}
