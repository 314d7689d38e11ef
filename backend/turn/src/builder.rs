//! [`TurnBuilder`]: how a [`Turn`] is put together, with every default, and
//! how it is opened: [`TurnBuilder::open`] claims the turn's id in the audit
//! store, so that two turns never share one id's rows.

use super::approval::{Approver, PolicyApprover};
use super::audit::{Redactor, unix_ms};
use super::budget::CallBudget;
use super::deferred::Deferred;
use super::error::TurnError;
use super::events::{EventSink, NoEvents};
use super::executor::ToolExecutor;
use super::limits::{ModelOffer, TurnLimits};
use super::memory::MemoryAuditStore;
use super::parked::TurnSnapshot;
use super::policy::{AdminPolicy, UserPermissions};
use super::precheck::PreExecutionCheck;
use super::registry::{Lookup, Tool, ToolRegistry};
use super::search::{describe_tools_tool, search_tools_tool};
use super::state::{Inner, Turn};
use super::store::AuditStore;
use super::tool::ToolSpec;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Builds a [`Turn`]. Defaults: no tools, an empty policy (allow all), no
/// permission blocks, an approver that denies everything
/// ([`PolicyApprover::deny_all`]), an in-memory audit store (use
/// `tether_stores::SqliteAuditStore` for a durable one), no
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
    resumed: Option<TurnSnapshot>,
}

impl fmt::Debug for TurnBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnBuilder").field("id", &self.id).field("limits", &self.limits).finish_non_exhaustive()
    }
}

/// A new turn id, unique across processes and hosts: `turn-` and a UUID v7
/// (48 bits of Unix milliseconds, then random bits), so ids sort by when
/// they were made. The default id of every turn Tether opens for you.
pub fn new_turn_id() -> String {
    format!("turn-{}", uuid::Uuid::now_v7())
}

impl Turn {
    /// A builder for turn `id`.
    pub fn builder(id: impl Into<String>) -> TurnBuilder {
        TurnBuilder::new(id)
    }

    /// A builder for a turn with a new unique id ([`new_turn_id`]).
    pub fn builder_with_new_id() -> TurnBuilder {
        TurnBuilder::new(new_turn_id())
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
            resumed: None,
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

    /// The deepest a call may be nested (see [`TurnLimits::max_depth`]).
    pub fn max_depth(mut self, max: u32) -> Self {
        self.limits.max_depth = max;
        self
    }

    /// Calls one script run may have refused (see
    /// [`TurnLimits::max_refused_script_calls`]).
    pub fn max_refused_script_calls(mut self, max: u32) -> Self {
        self.limits.max_refused_script_calls = max;
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

    /// The turn goes on from `snapshot` (a parked run's, `docs/parking.md`):
    /// its tool-call and approval counts, the repeat rule's memory and its
    /// run counter are the snapshot's, and its deadline is the time the
    /// snapshot had left from when it is built (it replaces
    /// [`deadline`](Self::deadline)). Build it with [`build`](Self::build):
    /// its id is already claimed.
    pub fn resumed(mut self, snapshot: TurnSnapshot) -> Self {
        self.resumed = Some(snapshot);
        self
    }

    /// The redaction hook for host-side records.
    pub fn redactor(mut self, redact: impl Fn(&str, &Value) -> Value + Send + Sync + 'static) -> Self {
        self.redactor = Some(Arc::new(redact));
        self
    }

    /// Builds the turn and opens it: claims its id in the audit store
    /// ([`AuditStore::claim_turn`]), atomically against every process that
    /// shares the store. This is how a turn you start is made; a turn id
    /// the store already holds is refused, never mixed with the rows there.
    ///
    /// # Errors
    /// [`TurnError::InvalidSchema`] or [`TurnError::DuplicateTool`], as
    /// [`build`](Self::build);
    /// [`StoreError::TurnTaken`](super::StoreError::TurnTaken) (in
    /// [`TurnError::Store`]) if the store already holds the id — pass a
    /// fresh one, or use [`Turn::builder_with_new_id`]; any other store
    /// error if the claim could not be made durable.
    ///
    /// # Cancel safety
    /// If dropped while the claim is being committed, the id may end up
    /// claimed by no turn (it is then taken).
    pub async fn open(self) -> Result<Turn, TurnError> {
        let turn = self.build()?;
        turn.inner.store.claim_turn(turn.id(), unix_ms(std::time::SystemTime::now())).await?;
        tracing::debug!(turn_id = %turn.id(), "turn opened");
        Ok(turn)
    }

    /// Builds the turn WITHOUT claiming its id in the audit store: for a
    /// turn whose id is already its own — a nested turn, whose id is made
    /// from its parent's (claimed) id and the call that started it, or a
    /// turn taken over from a replica that crashed (`docs/audit.md`), whose
    /// rows the store holds. A turn you start: [`open`](Self::open).
    ///
    /// # Errors
    /// [`TurnError::InvalidSchema`] or [`TurnError::DuplicateTool`].
    pub fn build(self) -> Result<Turn, TurnError> {
        let registry = ToolRegistry::new();
        for tool in self.tools {
            registry.register(tool?)?;
        }
        if self.limits.model_offer == ModelOffer::Search {
            // The turn's own way to find its tools: added here, so every turn
            // offering `search` has them (a turn that registered its own keeps those).
            for tool in [search_tools_tool()?, describe_tools_tool()?] {
                if matches!(registry.lookup(tool.name()), Lookup::NotFound) {
                    registry.register(tool)?;
                }
            }
        }
        let resumed = self.resumed.is_some();
        let (budget, precheck, runs, deadline) = match self.resumed {
            None => (
                CallBudget::new(self.limits.max_tool_calls),
                PreExecutionCheck::new(self.limits.max_approval_calls),
                0,
                self.deadline,
            ),
            Some(snapshot) => (
                CallBudget::with_used(self.limits.max_tool_calls, snapshot.calls_used),
                PreExecutionCheck::restored(self.limits.max_approval_calls, snapshot.seen, snapshot.approval_calls),
                snapshot.runs,
                snapshot.remaining_ms.map(|ms| Instant::now() + Duration::from_millis(ms)),
            ),
        };
        Ok(Turn {
            inner: Arc::new(Inner {
                id: self.id,
                registry,
                policy: self.policy,
                permissions: self.permissions,
                approver: self.approver,
                store: self.store,
                events: self.events,
                budget,
                precheck,
                limits: self.limits,
                deadline,
                cancel: self.cancel,
                redactor: self.redactor,
                gate: tokio::sync::RwLock::new(()),
                runs: AtomicU64::new(runs),
                deferred: Deferred::default(),
                resumed,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreError;

    #[test]
    fn default_turn_ids_are_uuid_v7_and_unique() {
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| new_turn_id()).collect();
        assert_eq!(ids.len(), 10_000);
        let id = Turn::builder_with_new_id().build().unwrap().id().to_owned();
        let uuid = id.strip_prefix("turn-").and_then(|u| uuid::Uuid::parse_str(u).ok());
        assert_eq!(uuid.map(|u| u.get_version_num()), Some(7), "{id}");
    }

    #[tokio::test]
    async fn opening_claims_the_id_and_an_id_the_store_holds_is_refused_with_what_to_do() {
        let store: Arc<dyn AuditStore> = Arc::new(MemoryAuditStore::new());
        let turn = Turn::builder("turn-42").audit_store(store.clone()).open().await.unwrap();
        assert_eq!(turn.id(), "turn-42");
        let refused = Turn::builder("turn-42").audit_store(store.clone()).open().await.unwrap_err();
        assert!(matches!(&refused, TurnError::Store(StoreError::TurnTaken { turn_id }) if turn_id == "turn-42"));
        let text = refused.to_string();
        assert!(text.contains("`turn-42` is taken") && text.contains("omit it to get a new unique one"), "{text}");
        // `build` does not claim: a turn taken over keeps its id.
        assert_eq!(Turn::builder("turn-42").audit_store(store.clone()).build().unwrap().id(), "turn-42");
        // Fresh ids open, one after another, on the same store.
        for _ in 0..3 {
            Turn::builder_with_new_id().audit_store(store.clone()).open().await.unwrap();
        }
    }
}
