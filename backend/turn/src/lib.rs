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
//! - `store` / `memory`: where records go — the [`AuditStore`] trait, and
//!   the in-memory store; the SQL stores and choosing one by URL are the
//!   `tether-stores` crate's
//! - `events`, `summary`, `guard`: events, the nested-call summary, and
//!   the guard that makes every started call settle exactly once
//! - `activate`: the `activate_tools` meta tool
//! - `search`: the `search_tools` and `describe_tools` meta tools
//! - `stubs`: the typed Python stubs a script's tools are shown as
//! - `error`: [`TurnError`] (a turn could not be built or driven) and
//!   [`StoreError`] (an audit store failed, its driver's error as the source)
//!
//! No transport and no database driver: the script tool `run_script` (the
//! sidecar client's adapter) is in `tether-client`, the SQL stores in
//! `tether-stores`.

mod activate;
mod approval;
mod audit;
mod budget;
mod builder;
mod call;
mod deferred;
mod error;
mod events;
mod execute;
mod executor;
mod guard;
mod handoff;
mod limits;
mod memory;
mod origin;
mod parked;
mod policy;
mod precheck;
mod registry;
mod search;
mod state;
mod step;
mod store;
mod stubs;
mod summary;
mod tool;

pub use activate::{ACTIVATE_TOOLS_NAME, activate_tools_tool};
pub use approval::{
    Answer, ApprovalDecision, ApprovalRecord, ApprovalRequest, ApprovalVerdict, Approver, DeferredApprover,
    PolicyApprover,
};
pub use audit::{
    AuditRecord, CallIdentity, DEFAULT_AUDIT_ARGS_BYTES, IDENTITY_COLUMNS, LEDGER_RESULT_MAX_BYTES, LedgerEntry,
    LedgerState, RecordedResult, Redactor, TRUNCATED_KEY, cut, record_args, unix_ms,
};
pub use budget::{CallBudget, Reservation};
pub use builder::{TurnBuilder, new_turn_id};
pub use call::{CallOutcome, CallRequest, CallResult, CallStatus, CallerCancel, Failure, OnAwaitingPerson};
pub use error::{StoreError, TurnError};
pub use events::{EventLog, EventSink, NoEvents, ToolEvent, ToolProgress};
pub use executor::{ToolContext, ToolExecutor, TurnAccess, executor_fn};
pub use limits::{DEFAULT_MAX_RESULT_BYTES, ModelOffer, TurnLimits};
pub use memory::MemoryAuditStore;
pub use origin::CallOrigin;
pub use parked::{
    CallNotWaiting, OwedCall, ParkedAnswer, ParkedRun, PendingCall, TurnSnapshot, direct_call_run_id,
    model_loop_run_id, runs_waiting_on,
};
pub use policy::{
    AdminPolicy, ArgMatch, ArgPattern, CallPattern, PolicyAction, PolicyRule, UserPermissions, glob_match,
};
pub use precheck::PreExecutionCheck;
pub use registry::{ListedTool, Lookup, Tool, ToolRegistry};
pub use search::{DESCRIBE_TOOLS_NAME, SEARCH_TOOLS_NAME, describe_tools_tool, search_tools_tool};
pub use state::{Turn, ended_reason};
pub use step::Step;
pub use store::{AuditStore, Commit, StartVerdict, StoreStats, StoreWrite, TurnListing, start_verdict};
pub use stubs::python_stubs;
pub use summary::{MAX_NESTED_ENTRIES, NESTED_ARGS_BYTES, NESTED_ERROR_BYTES, NestedSummary, Slot as NestedSlot};
pub use tether_codes::{Code, Reason};
pub use tool::{ApprovalRequirement, RepeatRule, ToolDef, ToolError, ToolMeta, ToolOutput, ToolReplay, ToolSpec};
