//! [`PostgresAuditStore`]: the audit log and effect ledger in PostgreSQL,
//! for backends with many replicas sharing one set of tables.
//!
//! Threading, group commit, durability, backpressure and shutdown are those
//! of every SQL store (`group_commit/`): one writer thread per store owns
//! one connection (the sync `postgres` crate, whose client runs its own
//! small runtime on that thread); `started` resolves once its transaction
//! has committed, with `synchronous_commit` on, so the row is flushed to the
//! server's WAL before the tool runs.
//!
//! Many backends, one table: every write is a statement in a transaction,
//! `(turn_id, call_id)` is unique in the ledger, and the replay rule is
//! decided on the locked row (`commit.rs`), so two processes starting the
//! same call id never both run it. Connections are plain TCP or a Unix
//! socket: this store does not speak TLS (put the database on a trusted
//! network, or reach it through a local TLS proxy).
//!
//! Layout: `schema.rs` (tables, version, statements, the identity ↔ columns
//! mapping), `commit.rs` (one group's transaction), `redact.rs` (a URL's
//! password hidden), this file (the store).

mod commit;
mod redact;
mod schema;

pub(crate) use redact::redact;

use super::group_commit::parked::{Holder, ParkedRow};
use super::group_commit::{
    Committed, DEFAULT_QUEUE_CAPACITY, Database, GroupCommitStore, GroupFailure, delegate_audit_store,
};
use postgres::{Client, NoTls};
use std::time::Duration;
use tether_turn::StoreError;
use tether_turn::{AuditRecord, LedgerEntry};
use tether_turn::{StoreStats, StoreWrite, TurnListing};

/// How long opening a connection may take when the URL sets no
/// `connect_timeout`: 10 seconds.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The `application_name` a connection reports when the URL sets none:
/// `tether-audit` (what `pg_stat_activity` shows).
pub const DEFAULT_APPLICATION_NAME: &str = "tether-audit";

/// An audit log, effect ledger and parked runs in a PostgreSQL database, in
/// the tables `tether_audit`, `tether_ledger`, `tether_turns`,
/// `tether_parked_runs` and `tether_schema` of the connection's
/// schema (the first of its `search_path`), created on first use if
/// missing. Any number of backend processes may share them; see
/// `docs/audit.md` for what two replicas sharing a turn may and may not do.
///
/// The URL is libpq's: `postgres://USER:PASSWORD@HOST:PORT/DATABASE?…`
/// (`postgresql://` too), with its parameters (`connect_timeout`,
/// `application_name`, `options=-c search_path%3Dmy_schema`, …). A host that
/// is a directory (`host=/run/postgresql`, percent-encoded in the URL's
/// authority) means a Unix socket. No TLS: `sslmode` must be `disable` or
/// `prefer` (the default, which falls back to plain).
///
/// # Shutdown
/// Dropping the store closes its queue; the writer commits everything
/// already queued, closes the connection and stops, and `drop` returns once
/// it has.
#[derive(Debug)]
pub struct PostgresAuditStore {
    store: GroupCommitStore<Postgres>,
}

delegate_audit_store!(PostgresAuditStore, store);

impl PostgresAuditStore {
    /// A store for the database at `url`, with a queue of
    /// [`DEFAULT_QUEUE_CAPACITY`]. Starts the writer thread; nothing
    /// connects until the first read or write (or [`ready`](Self::ready)).
    ///
    /// # Errors
    /// [`StoreError::Url`] if `url` is not a PostgreSQL URL this store can use.
    pub fn new(url: &str) -> Result<Self, StoreError> {
        PostgresAuditStore::with_queue_capacity(url, DEFAULT_QUEUE_CAPACITY)
    }

    /// A store for the database at `url` whose queue holds `capacity`
    /// operations (at least 1).
    ///
    /// # Errors
    /// [`StoreError::Url`] if `url` is not a PostgreSQL URL this store can use.
    pub fn with_queue_capacity(url: &str, capacity: usize) -> Result<Self, StoreError> {
        let describe = redact(url);
        let refuse = |reason: String| StoreError::Url { url: describe.clone(), reason };
        let mut config: postgres::Config = url.parse().map_err(|e: postgres::Error| refuse(postgres_message(&e)))?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(refuse("it names no host: write `postgres://USER@HOST:PORT/DATABASE`".into()));
        }
        if config.get_ssl_mode() == postgres::config::SslMode::Require {
            return Err(refuse("it requires TLS (`sslmode=require`), which this store does not speak".into()));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name(DEFAULT_APPLICATION_NAME);
        }
        let database = Postgres { config, describe };
        Ok(PostgresAuditStore { store: GroupCommitStore::new(database, capacity) })
    }

    /// The URL, its password hidden.
    pub fn target(&self) -> &str {
        self.store.describe()
    }

    /// What the writer has committed so far.
    pub fn stats(&self) -> StoreStats {
        self.store.stats()
    }

    /// Connects now, if not connected yet, creating the tables if they are
    /// missing: a wrong URL, an unreachable server or tables of a newer
    /// version are reported here rather than at the first tool call.
    ///
    /// # Errors
    /// [`StoreError::Open`]: why the database cannot be used.
    ///
    /// # Cancel safety
    /// Cancel-safe: the writer connects either way.
    pub async fn ready(&self) -> Result<(), StoreError> {
        self.store.ready().await
    }

    /// The schema version recorded with the tables (connects if needed).
    ///
    /// # Errors
    /// If the database cannot be reached or read.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn schema_version(&self) -> Result<i32, StoreError> {
        self.store.read(|c| schema::version(&mut c.client)).await
    }
}

/// PostgreSQL as a [`Database`] for group commit.
struct Postgres {
    config: postgres::Config,
    describe: String,
}

/// A session, ready to write: its statements are prepared.
struct Session {
    client: Client,
    statements: schema::Statements,
    /// Something failed since [`Database::is_broken`] last asked.
    failed: bool,
}

impl Session {
    /// `result`, noting a failure.
    fn note<T, E>(&mut self, result: Result<T, E>) -> Result<T, E> {
        self.failed |= result.is_err();
        result
    }
}

/// How long checking a session after a failure may take: 5 seconds.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

impl Database for Postgres {
    type Connection = Session;

    fn describe(&self) -> &str {
        &self.describe
    }

    fn open(&self) -> Result<Session, StoreError> {
        let fail = |reason: String| StoreError::Open { path: self.describe.clone(), reason };
        let mut client = self.config.connect(NoTls).map_err(|e| fail(postgres_message(&e)))?;
        let statements = schema::prepare(&mut client, &self.describe).map_err(|error| match error {
            StoreError::Open { .. } => error,
            other => fail(other.to_string()),
        })?;
        tracing::debug!(database = %self.describe, "connected to the audit database");
        Ok(Session { client, statements, failed: false })
    }

    fn commit(session: &mut Session, writes: &[&StoreWrite]) -> Result<Committed, GroupFailure> {
        let result = commit::commit(&mut session.client, &session.statements, writes);
        session.note(result)
    }

    fn is_broken(session: &mut Session) -> bool {
        if session.client.is_closed() {
            return true;
        }
        // The client learns that the server hung up only when it next talks
        // to it: after a failure, ask (one round trip, on failures only).
        std::mem::take(&mut session.failed) && session.client.is_valid(CHECK_TIMEOUT).is_err()
    }

    fn audit_rows(session: &mut Session, turn_id: &str) -> Result<Vec<AuditRecord>, StoreError> {
        let result = session.statements.audit_rows(&mut session.client, turn_id);
        session.note(result)
    }

    fn ledger_rows(session: &mut Session, turn_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let result = session.statements.ledger_rows(&mut session.client, turn_id);
        session.note(result)
    }

    fn put_parked(session: &mut Session, row: &ParkedRow) -> Result<(), StoreError> {
        let result = session.statements.put_parked(&mut session.client, row);
        session.note(result)
    }

    fn turn_rows(session: &mut Session, turn_id: Option<&str>, limit: usize) -> Result<Vec<TurnListing>, StoreError> {
        let result = session.statements.turn_rows(&mut session.client, turn_id, limit).map_err(crate::db);
        session.note(result)
    }

    fn parked_rows(session: &mut Session, turn_id: Option<&str>) -> Result<Vec<ParkedRow>, StoreError> {
        let result = session.statements.parked_rows(&mut session.client, turn_id);
        session.note(result)
    }

    fn claim_parked(
        session: &mut Session,
        turn_id: &str,
        run_id: &str,
        claimant: &str,
        take_over: bool,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError> {
        let result = session.statements.claim_parked(&mut session.client, turn_id, run_id, claimant, take_over, now_ms);
        session.note(result)
    }

    fn parked_holder(session: &mut Session, turn_id: &str, run_id: &str) -> Result<Holder, StoreError> {
        let result = session.statements.parked_holder(&mut session.client, turn_id, run_id);
        session.note(result)
    }

    fn replace_parked(session: &mut Session, row: &ParkedRow, claimant: &str) -> Result<bool, StoreError> {
        let result = session.statements.replace_parked(&mut session.client, row, claimant);
        session.note(result)
    }

    fn delete_parked(session: &mut Session, turn_id: &str, run_id: &str, claimant: &str) -> Result<bool, StoreError> {
        let result = session.statements.delete_parked(&mut session.client, turn_id, run_id, claimant);
        session.note(result)
    }
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

#[cfg(test)]
mod tests;
