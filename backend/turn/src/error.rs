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
    /// The database behind the store failed. `message` says everything
    /// that explains it (for PostgreSQL, the server's message with its
    /// SQLSTATE code); `source` is the driver's own error.
    #[error("the audit database failed: {message}")]
    Database {
        /// The driver's words, with each cause.
        message: String,
        /// The driver's error, for a caller that inspects it.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
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
    /// No run of that id is parked in the turn (it was never parked, or it
    /// was resumed to its end).
    #[error("no run `{run_id}` of turn `{turn_id}` is parked in the audit store; `tether pending` lists what waits")]
    NotParked {
        /// The turn.
        turn_id: String,
        /// The run.
        run_id: String,
    },
    /// Another process claimed the parked run to resume it, and still holds
    /// the claim (or took it over from this one).
    #[error(
        "run `{run_id}` of turn `{turn_id}` is being resumed by `{claimant}` (since Unix ms {since_ms}); \
         if that process is gone, take the run over (`tether approve --take-over`)"
    )]
    ParkedClaimed {
        /// The turn.
        turn_id: String,
        /// The run.
        run_id: String,
        /// Who holds the claim.
        claimant: String,
        /// Since when, Unix milliseconds.
        since_ms: i64,
    },
    /// The store keeps no parked runs.
    #[error("this audit store keeps no parked runs ({0}); use the SQLite, PostgreSQL or memory store")]
    Unsupported(&'static str),
    /// Another store implementation failed.
    #[error("the audit store failed: {0}")]
    Other(String),
}

impl StoreError {
    /// A failure of the database driver `source`, in its own words.
    pub fn database(source: impl std::error::Error + Send + Sync + 'static) -> StoreError {
        StoreError::database_with_message(source.to_string(), source)
    }

    /// A failure of the database driver `source`, told as `message` (when
    /// the driver's `Display` leaves out what explains it).
    pub fn database_with_message(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Database { message: message.into(), source: Box::new(source) }
    }
}
