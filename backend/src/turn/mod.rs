//! The turn: ONE execution path for model-issued and script-issued tool calls.
//!
//! Where things are:
//! - `state` / `builder`: [`Turn`] and [`TurnBuilder`] — the one tool list,
//!   the checks' state, approver, audit store, cap, deadline, cancellation
//! - `limits`: [`TurnLimits`], every limit of a turn and its default
//! - `execute`: [`Turn::execute`], the ordered steps every call goes through
//! - `step`: the [`Step`]s; failure codes and their messages are defined once
//!   for the whole system in `tether_codes` ([`Code`], [`Reason`])
//! - `call` / `origin`: a call's request, result and failure; who issued it
//!   and how deep it is nested
//! - `tool` / `executor` / `registry`: tools as data, how they run (and what
//!   they may do with the turn: [`TurnAccess`]), the one list
//! - `policy`, `precheck`, `budget`, `approval`: the individual checks
//! - `audit`: the records (audit row, ledger row, their shared call identity)
//! - `store` / `url`: where records go — the [`AuditStore`] trait, and
//!   choosing a store by URL ([`open_audit_store`])
//! - `group_commit` / `sqlite` / `postgres` / `memory`: the stores — one
//!   writer thread with group commit that the SQL stores share, SQLite (the
//!   default, one host), PostgreSQL (many backend replicas), in memory
//! - `events`, `summary`, `guard`: events, the nested-call summary, and
//!   the guard that makes every started call settle exactly once
//! - `script`: the script tool `run_script` — the one adapter to the sidecar
//!   client — and the `activate_tools` meta tool

mod approval;
mod audit;
mod budget;
mod builder;
mod call;
mod error;
mod events;
mod execute;
mod executor;
mod group_commit;
mod guard;
mod limits;
mod memory;
mod origin;
mod policy;
mod postgres;
mod precheck;
mod registry;
mod script;
mod sqlite;
mod state;
mod step;
mod store;
#[cfg(test)]
mod store_suite;
mod stubs;
mod summary;
mod tool;
mod url;

pub use self::postgres::{DEFAULT_APPLICATION_NAME, DEFAULT_CONNECT_TIMEOUT, PostgresAuditStore};
pub use approval::{
    Answer, ApprovalDecision, ApprovalRecord, ApprovalRequest, ApprovalVerdict, Approver, PolicyApprover,
};
pub(crate) use audit::cut;
pub use audit::{
    AuditRecord, CallIdentity, DEFAULT_AUDIT_ARGS_BYTES, LedgerEntry, LedgerState, Redactor, TRUNCATED_KEY, record_args,
};
pub use budget::{CallBudget, Reservation};
pub use builder::{TurnBuilder, new_turn_id};
pub use call::{CallOutcome, CallRequest, CallResult, CallStatus, Failure};
pub use error::{StoreError, TurnError};
pub use events::{EventLog, EventSink, NoEvents, ToolEvent};
pub use executor::{ToolContext, ToolExecutor, TurnAccess, executor_fn};
pub use group_commit::DEFAULT_QUEUE_CAPACITY;
pub use limits::{DEFAULT_MAX_RESULT_BYTES, TurnLimits};
pub use memory::MemoryAuditStore;
pub use origin::CallOrigin;
pub use policy::{
    AdminPolicy, ArgMatch, ArgPattern, CallPattern, PolicyAction, PolicyRule, UserPermissions, glob_match,
};
pub use precheck::PreExecutionCheck;
pub use registry::{ListedTool, Lookup, Tool, ToolRegistry};
pub use script::{SCRIPT_TOOL_NAME, ScriptTool, activate_tools_tool};
pub use sqlite::SqliteAuditStore;
pub use state::Turn;
pub use step::Step;
pub use store::{AuditStore, Commit, StartVerdict, StoreStats, StoreWrite, start_verdict};
pub use stubs::python_stubs;
pub use summary::{MAX_NESTED_ENTRIES, NESTED_ARGS_BYTES, NESTED_ERROR_BYTES};
pub use tether_codes::{Code, Reason};
pub use tool::{ApprovalRequirement, RepeatRule, ToolDef, ToolError, ToolMeta, ToolOutput, ToolReplay, ToolSpec};
pub use url::{AuditStoreUrl, open_audit_store};
