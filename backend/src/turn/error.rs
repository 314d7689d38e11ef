//! Errors of building and driving a turn. A refused or failed CALL is not an
//! error: it is a [`CallResult`](super::CallResult) with a failure outcome.

/// Why a turn could not be built, or a turn-level operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// A tool's input schema does not compile.
    #[error("the input schema of tool `{tool}` is invalid: {reason}")]
    InvalidSchema {
        /// The tool.
        tool: String,
        /// What the schema compiler said.
        reason: String,
    },
    /// Two tools share a name.
    #[error("a tool named `{0}` is already in the turn's list")]
    DuplicateTool(String),
    /// No tool of that name is in the turn's list.
    #[error("no tool named `{0}` is in the turn's list")]
    UnknownTool(String),
    /// The audit store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why the audit store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("the audit database failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The database file could not be prepared.
    #[error("cannot open the audit database at `{path}`: {reason}")]
    Open {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
    /// A ledger row for this call already exists.
    #[error("the ledger already holds call `{0}`")]
    DuplicateLedgerRow(String),
    /// The blocking task that ran the write did not finish (it panicked).
    #[error("the audit write did not finish: {0}")]
    Task(String),
    /// Another store implementation failed.
    #[error("the audit store failed: {0}")]
    Other(String),
}
