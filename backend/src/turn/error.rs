//! Errors of building and driving a turn. A refused or failed CALL is not an
//! error: it is a [`CallResult`](super::CallResult) with a failure outcome.

use super::audit::LedgerState;

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
    /// PostgreSQL failed (the server's message, with its SQLSTATE code, is
    /// part of the text).
    #[error("the audit database failed: {}", postgres_message(.0))]
    Postgres(#[from] postgres::Error),
    /// The URL naming the audit store cannot be used.
    #[error("the audit store URL `{url}` cannot be used: {reason}")]
    Url {
        /// The URL, its password hidden.
        url: String,
        /// Why, and what to write instead.
        reason: String,
    },
    /// The database file could not be prepared.
    #[error("cannot open the audit database at `{path}`: {reason}")]
    Open {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
    /// The ledger already holds this call id and the tool's replay rule
    /// refuses to run it again (see [`start_verdict`](super::start_verdict)).
    #[error("the ledger already holds call `{call_id}` ({state})")]
    Replayed {
        /// The call id.
        call_id: String,
        /// The state of the row already there.
        state: LedgerState,
    },
    /// A turn was opened with an id the audit store already holds (its own
    /// turn, or rows another process wrote): the turn is refused at open, so
    /// that two turns' rows are never mixed.
    #[error(
        "the turn id `{turn_id}` is taken: the audit store already holds a turn with this id; \
         pass a fresh turn id, or omit it to get a new unique one"
    )]
    TurnTaken {
        /// The turn id.
        turn_id: String,
    },
    /// The group of writes this write was committed with failed: nothing in
    /// it is durable.
    #[error("the audit database could not commit: {0}")]
    Commit(String),
    /// The store's write queue is full and the caller could not wait.
    #[error("the audit store's queue is full (`{capacity}` writes waiting)")]
    QueueFull {
        /// The queue's capacity.
        capacity: usize,
    },
    /// The store no longer takes writes (its writer stopped or never started).
    #[error("the audit store is closed: {0}")]
    Closed(String),
    /// Another store implementation failed.
    #[error("the audit store failed: {0}")]
    Other(String),
}

/// A PostgreSQL error with everything that explains it: the client's own
/// words, then each cause — for a server error, its message, SQLSTATE code,
/// detail and hint.
pub(crate) fn postgres_message(error: &postgres::Error) -> String {
    let mut text = error.to_string();
    if let Some(db) = error.as_db_error() {
        text.push_str(&format!(": {db} (SQLSTATE {})", db.code().code()));
        return text;
    }
    let mut cause = std::error::Error::source(error);
    while let Some(error) = cause {
        text.push_str(&format!(": {error}"));
        cause = error.source();
    }
    text
}
