//! The turn: ONE execution path for model-issued and script-issued tool calls.
//!
//! Where things are:
//! - `state`: [`Turn`] and [`TurnBuilder`] — the one tool list, the checks'
//!   state, approver, audit store, cap, deadline and cancellation
//! - `execute`: [`Turn::execute`], the ordered steps every call goes through
//! - `codes`: every failure [`Code`] (machine code + display name) and [`Step`]
//! - `tool` / `registry`: tools, their code-decided metadata, the list
//! - `policy`, `precheck`, `budget`, `approval`: the individual checks
//! - `audit`: the records (audit row, ledger row, their shared call identity)
//! - `store` / `sqlite` / `memory`: where records go — the [`AuditStore`]
//!   trait, the SQLite store (one writer thread, group commit), the in-memory one
//! - `events`, `summary`, `guard`: events, the nested-call summary, and
//!   the guard that makes every started call settle exactly once
//! - `script`: the script tool `run_script` and the `activate_tools` meta tool

mod approval;
mod audit;
mod budget;
mod call;
mod codes;
mod error;
mod events;
mod execute;
mod guard;
mod memory;
mod policy;
mod precheck;
mod registry;
mod script;
mod sqlite;
mod state;
mod store;
mod summary;
mod tool;

pub use approval::{
    Answer, ApprovalDecision, ApprovalRecord, ApprovalRequest, ApprovalVerdict, Approver, PolicyApprover,
    TerminalApprover,
};
pub use audit::{AuditRecord, CallIdentity, DEFAULT_AUDIT_ARGS_BYTES, LedgerEntry, LedgerState, Redactor};
pub use budget::{CallBudget, Reservation};
pub use call::{CallOrigin, CallOutcome, CallRequest, CallResult, CallStatus, Failure};
pub use codes::{Code, Step};
pub use error::{StoreError, TurnError};
pub use events::{EventLog, EventSink, NoEvents, ToolEvent};
pub use policy::{
    AdminPolicy, ArgMatch, ArgPattern, CallPattern, PolicyAction, PolicyRule, UserPermissions, glob_match,
};
pub use precheck::PreExecutionCheck;
pub use registry::{ListedTool, Lookup, ToolRegistry};
pub use script::{SCRIPT_TOOL_NAME, ScriptTool, activate_tools_tool};
pub use memory::MemoryAuditStore;
pub use sqlite::{DEFAULT_QUEUE_CAPACITY, SqliteAuditStore, StoreStats};
pub use state::{Turn, TurnBuilder, TurnLimits};
pub use store::{AuditStore, Commit, StartVerdict, StoreWrite, start_verdict};
pub use summary::{MAX_NESTED_ENTRIES, NESTED_ARGS_BYTES, NESTED_ERROR_BYTES};
pub use tool::{
    ApprovalRequirement, Tool, ToolContext, ToolError, ToolExecutor, ToolMeta, ToolOutput, ToolReplay, ToolSpec,
    executor_fn,
};
