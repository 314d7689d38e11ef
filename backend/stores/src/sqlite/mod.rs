//! The default [`AuditStore`](tether_turn::AuditStore): SQLite (bundled), WAL,
//! `synchronous=FULL`, one file on the backend's host.
//!
//! Threading, group commit, durability, backpressure and shutdown are those
//! of every SQL store (`group_commit/`): one writer thread owns the
//! connection; `started` resolves once its row is on disk.
//!
//! Layout: `schema.rs` (tables, the identity ↔ columns mapping, opening),
//! `commit.rs` (one group's transaction), this file (the store).

mod commit;
mod schema;

use super::group_commit::parked::{Holder, ParkedRow};
use super::group_commit::{
    Committed, DEFAULT_QUEUE_CAPACITY, Database, GroupCommitStore, GroupFailure, delegate_audit_store,
};
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use tether_turn::StoreError;
use tether_turn::{AuditRecord, LedgerEntry};
use tether_turn::{StoreStats, StoreWrite, TurnListing};

/// An audit log, effect ledger and parked runs in one SQLite file, created (with its
/// tables, or with the columns an older file lacks) on first use. Several
/// turns may share one store; one process should write a file (a second
/// process waits on SQLite's lock — use [`PostgresAuditStore`] for many
/// backend replicas). See the `turn` module's documentation and
/// `docs/audit.md` for threading, durability and backpressure.
///
/// [`PostgresAuditStore`]: super::PostgresAuditStore
///
/// # Shutdown
/// Dropping the store closes its queue; the writer commits everything
/// already queued and stops, and `drop` returns once it has (at most one
/// group commit's wait, on the dropping thread).
#[derive(Debug)]
pub struct SqliteAuditStore {
    path: PathBuf,
    store: GroupCommitStore<Sqlite>,
}

delegate_audit_store!(SqliteAuditStore, store);

impl SqliteAuditStore {
    /// A store at `path` with a queue of [`DEFAULT_QUEUE_CAPACITY`]. Starts
    /// the writer thread; nothing is opened until the first read or write.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteAuditStore::with_queue_capacity(path, DEFAULT_QUEUE_CAPACITY)
    }

    /// A store at `path` whose queue holds `capacity` operations (at least 1).
    /// If the writer thread cannot start, every operation fails with
    /// [`StoreError::Closed`].
    pub fn with_queue_capacity(path: impl Into<PathBuf>, capacity: usize) -> Self {
        let path = path.into();
        let database = Sqlite { describe: path.display().to_string(), path: path.clone() };
        SqliteAuditStore { path, store: GroupCommitStore::new(database, capacity) }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the writer has committed so far.
    pub fn stats(&self) -> StoreStats {
        self.store.stats()
    }

    /// Opens the database now, if it is not open yet, creating the file and
    /// its tables: a bad path is reported here rather than at the first
    /// tool call.
    ///
    /// # Errors
    /// [`StoreError::Open`]: why the file cannot be opened.
    ///
    /// # Cancel safety
    /// Cancel-safe: the database is opened by the writer either way.
    pub async fn ready(&self) -> Result<(), StoreError> {
        self.store.ready().await
    }

    /// The journal mode and synchronous level in force (opens the database).
    ///
    /// # Errors
    /// If the database cannot be opened or read.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn settings(&self) -> Result<(String, i64), StoreError> {
        self.store
            .read(|c| {
                let mode: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0)).map_err(crate::db)?;
                let sync: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0)).map_err(crate::db)?;
                Ok((mode, sync))
            })
            .await
    }
}

/// SQLite as a [`Database`] for group commit.
struct Sqlite {
    path: PathBuf,
    describe: String,
}

impl Database for Sqlite {
    type Connection = Connection;

    fn describe(&self) -> &str {
        &self.describe
    }

    fn open(&self) -> Result<Connection, StoreError> {
        schema::open(&self.path)
    }

    fn commit(connection: &mut Connection, writes: &[&StoreWrite]) -> Result<Committed, GroupFailure> {
        Ok(Committed { results: commit::commit(connection, writes)?, retries: 0 })
    }

    fn is_broken(_: &mut Connection) -> bool {
        // A file does not hang up.
        false
    }

    fn audit_rows(connection: &mut Connection, turn_id: &str) -> Result<Vec<AuditRecord>, StoreError> {
        schema::audit_rows(connection, turn_id).map_err(crate::db)
    }

    fn ledger_rows(connection: &mut Connection, turn_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        schema::ledger_rows(connection, turn_id).map_err(crate::db)
    }

    fn put_parked(connection: &mut Connection, row: &ParkedRow) -> Result<(), StoreError> {
        schema::put_parked(connection, row).map_err(crate::db)
    }

    fn turn_rows(
        connection: &mut Connection,
        turn_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TurnListing>, StoreError> {
        schema::turn_rows(connection, turn_id, limit).map_err(crate::db)
    }

    fn parked_rows(connection: &mut Connection, turn_id: Option<&str>) -> Result<Vec<ParkedRow>, StoreError> {
        schema::parked_rows(connection, turn_id).map_err(crate::db)
    }

    fn claim_parked(
        connection: &mut Connection,
        turn_id: &str,
        run_id: &str,
        claimant: &str,
        take_over: bool,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError> {
        schema::claim_parked(connection, turn_id, run_id, claimant, take_over, now_ms).map_err(crate::db)
    }

    fn parked_holder(connection: &mut Connection, turn_id: &str, run_id: &str) -> Result<Holder, StoreError> {
        schema::parked_holder(connection, turn_id, run_id).map_err(crate::db)
    }

    fn replace_parked(connection: &mut Connection, row: &ParkedRow, claimant: &str) -> Result<bool, StoreError> {
        schema::replace_parked(connection, row, claimant).map_err(crate::db)
    }

    fn delete_parked(
        connection: &mut Connection,
        turn_id: &str,
        run_id: &str,
        claimant: &str,
    ) -> Result<bool, StoreError> {
        schema::delete_parked(connection, turn_id, run_id, claimant).map_err(crate::db)
    }
}

#[cfg(test)]
mod tests;
