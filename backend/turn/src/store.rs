//! [`AuditStore`]: where audit rows and ledger rows go — the seam a host plugs
//! its own store into. [`MemoryAuditStore`](super::MemoryAuditStore) keeps
//! rows in memory; the durable stores are the `tether-stores` crate's:
//! `SqliteAuditStore` is the default, `PostgresAuditStore` serves many
//! backend replicas, and `open_audit_store` picks one from a URL.
//!
//! The shape follows what the turn needs from a store that commits in
//! groups: a write is ENQUEUED at call time, in order, and a [`Commit`] tells
//! when it is durable. Only `started` is waited on (a tool with effects runs
//! after its row is on disk); audit rows and `settled` are committed by the
//! next group commit while the call goes on.

use super::audit::{AuditRecord, LedgerEntry, LedgerState};
use super::call::CallStatus;
use super::error::StoreError;
use super::parked::ParkedRun;
use super::tool::ToolReplay;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// One write to an [`AuditStore`]. A store applies writes in the order they
/// were enqueued.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreWrite {
    /// Claims a turn id for a turn being opened: atomically, against every
    /// process that shares the store. Fails with [`StoreError::TurnTaken`]
    /// if the store already holds the id (a claim, or rows of it).
    OpenTurn {
        /// The turn.
        turn_id: String,
        /// When, Unix milliseconds.
        opened_at_ms: i64,
    },
    /// Appends an audit row.
    Audit(AuditRecord),
    /// Records a ledger row `started` under the tool's replay rule: see
    /// [`start_verdict`] for what happens when the call id is already there.
    Started {
        /// The row, in state `started`.
        entry: LedgerEntry,
        /// The tool's replay rule.
        replay: ToolReplay,
    },
    /// Marks the ledger row of `(turn_id, call_id)` settled with `outcome`
    /// (nothing happens if there is no such row).
    Settled {
        /// The turn.
        turn_id: String,
        /// The call.
        call_id: String,
        /// How the tool returned (`ok` or `error`).
        outcome: CallStatus,
        /// When, Unix milliseconds.
        settled_at_ms: i64,
        /// What it returned ([`LedgerEntry::result`](crate::LedgerEntry::result)).
        result: Option<String>,
    },
}

/// Where audit rows and ledger rows go.
///
/// Writes are enqueued, never performed on the caller's thread: an async
/// worker never waits on a disk. A store keeps the order of enqueued writes,
/// and a read sees every write enqueued before it (read-your-writes).
///
/// Backpressure: [`AuditStore::enqueue`] waits for room when the store's
/// queue is full; [`AuditStore::try_enqueue`], for code that cannot await
/// (a `Drop`), fails at once instead, and the store logs the lost write.
#[async_trait::async_trait]
pub trait AuditStore: Send + Sync + 'static {
    /// Enqueues `write` behind every write enqueued before it, waiting for
    /// room if the queue is full. Resolves once the write is queued — not
    /// durable: await the returned [`Commit`] for that.
    ///
    /// # Errors
    /// If the store no longer takes writes ([`StoreError::Closed`]).
    ///
    /// # Cancel safety
    /// Cancel-safe: if the future is dropped before it resolves, the write
    /// was not enqueued (and its place in the queue is lost).
    async fn enqueue(&self, write: StoreWrite) -> Result<Commit, StoreError>;

    /// Enqueues `write` now, without waiting: for code that cannot await
    /// (a call's guard writing its audit row from `Drop`).
    ///
    /// # Errors
    /// [`StoreError::QueueFull`] if the queue has no room — the write is
    /// lost, and the store logs it (the row's content included) at error
    /// level; [`StoreError::Closed`] if the store no longer takes writes.
    fn try_enqueue(&self, write: StoreWrite) -> Result<Commit, StoreError>;

    /// The turn's audit rows, in the order they were written, including
    /// every row enqueued before this call.
    ///
    /// # Errors
    /// If the rows could not be read.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    async fn audit_log(&self, turn_id: &str) -> Result<Vec<AuditRecord>, StoreError>;

    /// The turn's ledger rows, in the order they first started, including
    /// every write enqueued before this call.
    ///
    /// # Errors
    /// If the rows could not be read.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    async fn ledger(&self, turn_id: &str) -> Result<Vec<LedgerEntry>, StoreError>;

    /// Records `started` for `entry` under the tool's `replay` rule and
    /// resolves once the row is DURABLE: a tool with effects runs only after
    /// this returned `Ok`.
    ///
    /// # Errors
    /// [`StoreError::Replayed`] if the replay rule refuses the call id (see
    /// [`start_verdict`]); any other error if the row is not durable. Either
    /// way the tool must not run.
    ///
    /// # Cancel safety
    /// If dropped after the write was enqueued, the row may still be
    /// committed (`started`, which says the effect may have happened).
    async fn ledger_started(&self, entry: LedgerEntry, replay: ToolReplay) -> Result<(), StoreError> {
        self.enqueue(StoreWrite::Started { entry, replay }).await?.await
    }

    /// Claims `turn_id` for a turn being opened ([`StoreWrite::OpenTurn`])
    /// and resolves once the claim is durable. The claim is atomic across
    /// every process sharing the store: of two opening one id at once,
    /// exactly one gets `Ok`.
    ///
    /// # Errors
    /// [`StoreError::TurnTaken`] if the store already holds the id; any
    /// other error if the claim is not durable. Either way the turn must
    /// not be opened.
    ///
    /// # Cancel safety
    /// If dropped after the write was enqueued, the claim may still be
    /// committed (the id is then taken, and unused).
    async fn claim_turn(&self, turn_id: &str, opened_at_ms: i64) -> Result<(), StoreError> {
        self.enqueue(StoreWrite::OpenTurn { turn_id: turn_id.to_owned(), opened_at_ms }).await?.await
    }

    /// The turns opened in this store ([`claim_turn`](Self::claim_turn)),
    /// newest first, at most `limit` of them — only `turn_id`'s with `Some`
    /// — each with the number of its audit rows and of those not `ok`. A
    /// turn built without a claim (a nested agent turn) is not listed.
    ///
    /// # Errors
    /// If they could not be read; [`StoreError::Unsupported`] for a store
    /// that keeps no list of turns (the default).
    async fn turns(&self, turn_id: Option<&str>, limit: usize) -> Result<Vec<TurnListing>, StoreError> {
        let _ = (turn_id, limit);
        Err(StoreError::Unsupported("turns"))
    }

    /// Keeps `run` parked: inserts it, or replaces the record of the same
    /// `(turn_id, run_id)` (a run that parks again), releasing any claim on
    /// it. Resolves once the record is DURABLE: only then may the process
    /// that parked it forget the run.
    ///
    /// # Errors
    /// If the record could not be made durable; [`StoreError::Unsupported`]
    /// for a store that keeps no parked runs (the default).
    async fn park_run(&self, run: &ParkedRun) -> Result<(), StoreError> {
        let _ = run;
        Err(StoreError::Unsupported("park_run"))
    }

    /// The parked runs of `turn_id` (every turn's with `None`), oldest first,
    /// claimed or not.
    ///
    /// # Errors
    /// If they could not be read.
    async fn parked_runs(&self, turn_id: Option<&str>) -> Result<Vec<ParkedRun>, StoreError> {
        let _ = turn_id;
        Err(StoreError::Unsupported("parked_runs"))
    }

    /// Claims parked run `(turn_id, run_id)` for `claimant` to resume it, and
    /// returns its record. Atomic across every process sharing the store: of
    /// two claiming at once, exactly one gets it. A run already claimed is
    /// refused unless `take_over` (its claimant is known to be gone).
    ///
    /// # Errors
    /// [`StoreError::NotParked`], [`StoreError::ParkedClaimed`], or a store failure.
    async fn claim_parked(
        &self,
        turn_id: &str,
        run_id: &str,
        claimant: &str,
        take_over: bool,
        now_ms: i64,
    ) -> Result<ParkedRun, StoreError> {
        let _ = (turn_id, run_id, claimant, take_over, now_ms);
        Err(StoreError::Unsupported("claim_parked"))
    }

    /// Replaces the record of a run `claimant` holds (answers recorded as they
    /// are decided), durably.
    ///
    /// # Errors
    /// [`StoreError::ParkedClaimed`] when another claimant took it over,
    /// [`StoreError::NotParked`] when it is gone, or a store failure.
    async fn update_parked(&self, run: &ParkedRun, claimant: &str) -> Result<(), StoreError> {
        let _ = (run, claimant);
        Err(StoreError::Unsupported("update_parked"))
    }

    /// Removes the record of a run `claimant` holds: the run ended.
    ///
    /// # Errors
    /// As [`update_parked`](Self::update_parked).
    async fn unpark(&self, turn_id: &str, run_id: &str, claimant: &str) -> Result<(), StoreError> {
        let _ = (turn_id, run_id, claimant);
        Err(StoreError::Unsupported("unpark"))
    }

    /// What the store has committed since it was created, if it counts
    /// (default: `None`).
    fn stats(&self) -> Option<StoreStats> {
        None
    }
}

/// A turn as [`AuditStore::turns`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnListing {
    /// The turn's id.
    pub turn_id: String,
    /// When it was opened, Unix milliseconds.
    pub opened_at_ms: i64,
    /// Its audit rows (its own calls; a nested turn's are its own).
    pub calls: u64,
    /// Of those, the ones whose status is not `ok`.
    pub not_ok: u64,
}

/// What a store that commits in groups has committed since it was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Transactions committed: one fsync each.
    pub commits: u64,
    /// Writes committed (audit rows, `started`, `settled`).
    pub writes: u64,
    /// Transactions run again: after a conflict with another writer of the
    /// same tables (PostgreSQL: a deadlock or serialization failure), or
    /// because the connection had closed before the transaction began.
    pub retries: u64,
}

/// Resolves once a write is durable (`Ok`) or known to have failed (`Err`:
/// the replay rule refused it, its statement failed, or its group could not
/// be committed). Dropping it does not cancel the write; a store logs a
/// failure nobody waited for.
pub struct Commit(Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>);

impl Commit {
    /// A commit already decided: for stores that write synchronously.
    pub fn done(result: Result<(), StoreError>) -> Commit {
        Commit(Box::pin(std::future::ready(result)))
    }

    /// A commit that resolves with `future`.
    pub fn from_future(future: impl Future<Output = Result<(), StoreError>> + Send + 'static) -> Commit {
        Commit(Box::pin(future))
    }
}

impl Future for Commit {
    type Output = Result<(), StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for Commit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Commit").finish_non_exhaustive()
    }
}

/// What a `started` write does to the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartVerdict {
    /// No row for the call id: insert one, `started`.
    Insert,
    /// A settled row of a replay-safe tool: restart it (`started`, a new
    /// `started_at_ms`, the settled fields cleared).
    Restart,
}

/// The replay rule every store applies to a `started` write for a call id
/// whose row is in state `existing` (`None`: no row).
///
/// # Errors
/// [`StoreError::Replayed`] when the row is `started` (whatever the tool:
/// nobody knows whether it ran), or `settled` and the tool is
/// [`ToolReplay::Never`].
pub fn start_verdict(
    call_id: &str,
    existing: Option<LedgerState>,
    replay: ToolReplay,
) -> Result<StartVerdict, StoreError> {
    match (existing, replay) {
        (None, _) => Ok(StartVerdict::Insert),
        (Some(LedgerState::Settled), ToolReplay::Safe) => Ok(StartVerdict::Restart),
        (Some(state), _) => Err(StoreError::Replayed { call_id: call_id.to_owned(), state }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replay_rule() {
        use LedgerState::{Settled, Started};
        use ToolReplay::{Never, Safe};
        assert_eq!(start_verdict("c", None, Never).unwrap(), StartVerdict::Insert);
        assert_eq!(start_verdict("c", None, Safe).unwrap(), StartVerdict::Insert);
        assert_eq!(start_verdict("c", Some(Settled), Safe).unwrap(), StartVerdict::Restart);
        for (state, replay) in [(Started, Never), (Started, Safe), (Settled, Never)] {
            let refused = start_verdict("c", Some(state), replay).unwrap_err();
            assert!(
                matches!(&refused, StoreError::Replayed { call_id, state: s } if call_id == "c" && *s == state),
                "{refused}"
            );
        }
    }
}
