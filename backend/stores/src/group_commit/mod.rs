//! Group commit, the part the SQL audit stores share: ONE writer thread owns
//! the database connection, fed by a bounded queue, and commits in groups
//! (`writer.rs`); this file is the handle the turn holds. What differs per
//! database — opening, one group's transaction, reading rows — is a
//! [`Database`] (`sqlite/`, `postgres/`).
//!
//! - `started` ([`AuditStore::ledger_started`]) resolves only once its row
//!   is committed: a tool with effects runs after `started` is durable.
//! - Audit rows and `settled` are enqueued in order at call time and
//!   committed by the next group; the call does not wait for their commit.
//! - Reads go through the queue too, so they see every write enqueued
//!   before them.
//! - Parked runs (`parked.rs`) go through the queue as reads do: each
//!   operation is one statement in autocommit, run after the round's group
//!   committed, durable when it returns.
//! - A failed commit is reported to every waiter of its group; a failure
//!   nobody waits for is logged with the write.
//! - Backpressure: the queue holds [`DEFAULT_QUEUE_CAPACITY`] operations
//!   unless told otherwise. [`AuditStore::enqueue`] waits for room;
//!   [`AuditStore::try_enqueue`] fails at once with
//!   [`StoreError::QueueFull`] and the write is logged at error level.
//! - Shutdown: dropping the store closes the queue, lets the writer commit
//!   everything already queued, and waits for the thread to end.

pub(crate) mod parked;
mod writer;

use parked::{Holder, ParkedRow};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use tether_turn::StoreError;
use tether_turn::{AuditRecord, LedgerEntry, ParkedRun};
use tether_turn::{AuditStore, Commit, StoreStats, StoreWrite, TurnListing};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use writer::{Counters, Op, Writer};

/// Operations a store's queue holds by default before writers wait: 1,024.
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;

/// What one database brings to group commit. Everything runs on the writer
/// thread, which owns the connection; nothing here is called from an async
/// worker.
pub(crate) trait Database: Send + 'static {
    /// An open connection.
    type Connection;

    /// Where the database is, for logs and errors: never a password.
    fn describe(&self) -> &str;

    /// Opens a connection, creating the tables if they are missing.
    ///
    /// # Errors
    /// [`StoreError::Open`], saying what to fix.
    fn open(&self) -> Result<Self::Connection, StoreError>;

    /// Applies `writes` in ONE transaction, in order, and commits it. On
    /// success, each write's own outcome: `Ok`, or why that write alone was
    /// refused or failed (a replay the rule refuses, a statement the database
    /// rejected) while the rest of the group committed.
    ///
    /// # Errors
    /// If the group could not commit: then no write of it is durable.
    fn commit(connection: &mut Self::Connection, writes: &[&StoreWrite]) -> Result<Committed, GroupFailure>;

    /// Whether `connection` is unusable (the server closed it): the writer
    /// asks after every round, drops a broken connection and opens a new one
    /// next round. Cheap unless something failed since it was last asked.
    fn is_broken(connection: &mut Self::Connection) -> bool;

    /// The turn's audit rows, in the order they were written.
    ///
    /// # Errors
    /// If they could not be read.
    fn audit_rows(connection: &mut Self::Connection, turn_id: &str) -> Result<Vec<AuditRecord>, StoreError>;

    /// The turn's ledger rows, in the order they first started.
    ///
    /// # Errors
    /// If they could not be read.
    fn ledger_rows(connection: &mut Self::Connection, turn_id: &str) -> Result<Vec<LedgerEntry>, StoreError>;

    // Parked runs: each one statement in autocommit (never inside a group's
    // transaction), durable when it returns; `parked.rs` has the rules.

    /// Inserts `row`, or replaces the row of its `(turn_id, run_id)`,
    /// releasing any claim on it.
    ///
    /// # Errors
    /// If the row is not durable.
    fn put_parked(connection: &mut Self::Connection, row: &ParkedRow) -> Result<(), StoreError>;

    /// The parked runs of `turn_id` (every turn's with `None`), by
    /// `parked_at_ms`, then turn id, then run id (byte order).
    ///
    /// # Errors
    /// If they could not be read.
    fn parked_rows(connection: &mut Self::Connection, turn_id: Option<&str>) -> Result<Vec<ParkedRow>, StoreError>;

    /// The opened turns as [`AuditStore::turns`] lists them.
    ///
    /// # Errors
    /// If they could not be read.
    fn turn_rows(
        connection: &mut Self::Connection,
        turn_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TurnListing>, StoreError>;

    /// Sets the claim on `(turn_id, run_id)` to `claimant` since `now_ms`,
    /// in one statement, if nobody holds it or `take_over`: the record, or
    /// `None` if no row changed.
    ///
    /// # Errors
    /// If the statement failed.
    fn claim_parked(
        connection: &mut Self::Connection,
        turn_id: &str,
        run_id: &str,
        claimant: &str,
        take_over: bool,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError>;

    /// Who holds the claim on `(turn_id, run_id)`.
    ///
    /// # Errors
    /// If it could not be read.
    fn parked_holder(connection: &mut Self::Connection, turn_id: &str, run_id: &str) -> Result<Holder, StoreError>;

    /// Replaces the record (and `parked_at_ms`) of `row`'s run if `claimant`
    /// holds it: whether it did.
    ///
    /// # Errors
    /// If the statement failed.
    fn replace_parked(connection: &mut Self::Connection, row: &ParkedRow, claimant: &str) -> Result<bool, StoreError>;

    /// Deletes the row of `(turn_id, run_id)` if `claimant` holds it:
    /// whether it did.
    ///
    /// # Errors
    /// If the statement failed.
    fn delete_parked(
        connection: &mut Self::Connection,
        turn_id: &str,
        run_id: &str,
        claimant: &str,
    ) -> Result<bool, StoreError>;
}

/// A group that committed.
#[derive(Debug)]
pub(crate) struct Committed {
    /// Each write's own outcome, in the order of the group.
    pub(crate) results: Vec<Result<(), StoreError>>,
    /// How many times the transaction was run again before it committed.
    pub(crate) retries: u64,
}

/// Why a group could not commit.
#[derive(Debug)]
pub(crate) struct GroupFailure {
    /// What went wrong.
    pub(crate) error: StoreError,
    /// True when the transaction could not begin (typically: the connection
    /// had closed): nothing of the group reached the database, so the writer
    /// runs it again, once, on a new connection.
    pub(crate) before_begin: bool,
}

impl From<StoreError> for GroupFailure {
    fn from(error: StoreError) -> Self {
        GroupFailure { error, before_begin: false }
    }
}

/// An [`AuditStore`] over a [`Database`], with one writer thread that
/// commits in groups. See the module documentation.
pub(crate) struct GroupCommitStore<D: Database> {
    describe: String,
    capacity: usize,
    /// `Err`: why the queue takes nothing (the writer could not start, or
    /// the store is being dropped).
    queue: Result<mpsc::Sender<Op<D::Connection>>, String>,
    writer: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
    #[cfg(test)]
    hold: Arc<writer::Hold>,
}

impl<D: Database> GroupCommitStore<D> {
    /// A store over `database` whose queue holds `capacity` operations (at
    /// least 1). Starts the writer thread; nothing is opened until the first
    /// read or write. If the thread cannot start, every operation fails with
    /// [`StoreError::Closed`].
    pub(crate) fn new(database: D, capacity: usize) -> Self {
        let (describe, capacity) = (database.describe().to_owned(), capacity.max(1));
        let (sender, receiver) = mpsc::channel(capacity);
        let counters = Arc::new(Counters::default());
        #[cfg(test)]
        let hold = Arc::new(writer::Hold::default());
        let writer = Writer {
            database,
            queue: receiver,
            counters: counters.clone(),
            #[cfg(test)]
            hold: hold.clone(),
        };
        // The writer waits on the queue through a runtime of its own (one
        // thread, timers only): the database calls themselves block.
        let started = tokio::runtime::Builder::new_current_thread().enable_time().build().and_then(|runtime| {
            std::thread::Builder::new().name("tether-audit-writer".into()).spawn(move || writer.run(runtime))
        });
        let (queue, writer) = match started {
            Ok(handle) => (Ok(sender), Some(handle)),
            Err(error) => {
                tracing::error!(%error, "cannot start the audit writer thread");
                (Err(format!("the writer thread could not start: {error}")), None)
            }
        };
        GroupCommitStore {
            describe,
            capacity,
            queue,
            writer,
            counters,
            #[cfg(test)]
            hold,
        }
    }

    /// Where the database is (no password).
    pub(crate) fn describe(&self) -> &str {
        &self.describe
    }

    /// What the writer has committed so far.
    pub(crate) fn stats(&self) -> StoreStats {
        StoreStats {
            commits: self.counters.commits.load(Ordering::Relaxed),
            writes: self.counters.writes.load(Ordering::Relaxed),
            retries: self.counters.retries.load(Ordering::Relaxed),
        }
    }

    /// Opens the database now if it is not open yet (creating its tables),
    /// after every operation queued before.
    ///
    /// # Errors
    /// Why it cannot be opened.
    pub(crate) async fn ready(&self) -> Result<(), StoreError> {
        self.read(|_| Ok(())).await
    }

    fn sender(&self) -> Result<&mpsc::Sender<Op<D::Connection>>, StoreError> {
        self.queue.as_ref().map_err(|why| StoreError::Closed(why.clone()))
    }

    /// Runs `f` on the writer's connection after every operation queued before.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut D::Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let read: writer::Read<D::Connection> = Box::new(move |connection| {
            // The reader may have gone away (cancelled): nothing to tell.
            let _ = reply.send(connection.and_then(f));
        });
        self.sender()?.send(Op::Read(read)).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Makes the writer wait, once it took a round's first operation, while
    /// the guard lives.
    #[cfg(test)]
    pub(crate) fn hold_writer(&self) -> std::sync::MutexGuard<'_, ()> {
        self.hold.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rounds whose first operation the writer took so far.
    #[cfg(test)]
    pub(crate) fn rounds(&self) -> u64 {
        self.hold.rounds.load(Ordering::SeqCst)
    }
}

fn stopped() -> StoreError {
    StoreError::Closed("the writer thread stopped".into())
}

/// A write for the queue and the [`Commit`] its outcome reaches.
fn write_op<C>(write: StoreWrite) -> (Op<C>, Commit) {
    let (reply, outcome) = oneshot::channel();
    let commit = Commit::from_future(async move { outcome.await.unwrap_or_else(|_| Err(stopped())) });
    (Op::Write(write, reply), commit)
}

#[async_trait::async_trait]
impl<D: Database> AuditStore for GroupCommitStore<D> {
    async fn enqueue(&self, write: StoreWrite) -> Result<Commit, StoreError> {
        let (op, commit) = write_op(write);
        self.sender()?.send(op).await.map_err(|_| stopped())?;
        Ok(commit)
    }

    fn try_enqueue(&self, write: StoreWrite) -> Result<Commit, StoreError> {
        let (op, commit) = write_op(write);
        match self.sender()?.try_send(op) {
            Ok(()) => Ok(commit),
            Err(TrySendError::Full(op)) => {
                if let Op::Write(write, _) = op {
                    tracing::error!(?write, capacity = self.capacity, "the audit queue is full; this write is lost");
                }
                Err(StoreError::QueueFull { capacity: self.capacity })
            }
            Err(TrySendError::Closed(_)) => Err(stopped()),
        }
    }

    async fn audit_log(&self, turn_id: &str) -> Result<Vec<AuditRecord>, StoreError> {
        let turn_id = turn_id.to_owned();
        self.read(move |c| D::audit_rows(c, &turn_id)).await
    }

    async fn ledger(&self, turn_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let turn_id = turn_id.to_owned();
        self.read(move |c| D::ledger_rows(c, &turn_id)).await
    }

    async fn park_run(&self, run: &ParkedRun) -> Result<(), StoreError> {
        let row = parked::row(run)?;
        self.read(move |c| D::put_parked(c, &row)).await
    }

    async fn turns(&self, turn_id: Option<&str>, limit: usize) -> Result<Vec<TurnListing>, StoreError> {
        let turn_id = turn_id.map(str::to_owned);
        self.read(move |c| D::turn_rows(c, turn_id.as_deref(), limit)).await
    }

    async fn parked_runs(&self, turn_id: Option<&str>) -> Result<Vec<ParkedRun>, StoreError> {
        let turn_id = turn_id.map(str::to_owned);
        let rows = self.read(move |c| D::parked_rows(c, turn_id.as_deref())).await?;
        rows.iter().map(|row| parked::parse(&row.turn_id, &row.run_id, &row.record)).collect()
    }

    async fn claim_parked(
        &self,
        turn_id: &str,
        run_id: &str,
        claimant: &str,
        take_over: bool,
        now_ms: i64,
    ) -> Result<ParkedRun, StoreError> {
        let (turn, run, claimant) = (turn_id.to_owned(), run_id.to_owned(), claimant.to_owned());
        let record = self.read(move |c| parked::claim::<D>(c, &turn, &run, &claimant, take_over, now_ms)).await?;
        parked::parse(turn_id, run_id, &record)
    }

    async fn update_parked(&self, run: &ParkedRun, claimant: &str) -> Result<(), StoreError> {
        let (row, claimant) = (parked::row(run)?, claimant.to_owned());
        self.read(move |c| {
            parked::held::<D>(c, &row.turn_id, &row.run_id, &claimant, |c| D::replace_parked(c, &row, &claimant))
        })
        .await
    }

    async fn unpark(&self, turn_id: &str, run_id: &str, claimant: &str) -> Result<(), StoreError> {
        let (turn, run, claimant) = (turn_id.to_owned(), run_id.to_owned(), claimant.to_owned());
        self.read(move |c| {
            parked::held::<D>(c, &turn, &run, &claimant, |c| D::delete_parked(c, &turn, &run, &claimant))
        })
        .await
    }

    fn stats(&self) -> Option<StoreStats> {
        Some(GroupCommitStore::stats(self))
    }
}

impl<D: Database> fmt::Debug for GroupCommitStore<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupCommitStore")
            .field("database", &self.describe)
            .field("capacity", &self.capacity)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<D: Database> Drop for GroupCommitStore<D> {
    fn drop(&mut self) {
        // Closing the queue ends the writer once it has committed what is queued.
        self.queue = Err("the store was dropped".into());
        if let Some(writer) = self.writer.take()
            && writer.join().is_err()
        {
            tracing::error!(database = %self.describe, "the audit writer thread panicked");
        }
    }
}

/// Implements [`AuditStore`] for a public store type that wraps a
/// [`GroupCommitStore`] in its field `$field`, by handing every method on.
macro_rules! delegate_audit_store {
    ($store:ty, $field:ident) => {
        #[async_trait::async_trait]
        impl ::tether_turn::AuditStore for $store {
            async fn enqueue(
                &self,
                write: ::tether_turn::StoreWrite,
            ) -> Result<::tether_turn::Commit, ::tether_turn::StoreError> {
                self.$field.enqueue(write).await
            }

            fn try_enqueue(
                &self,
                write: ::tether_turn::StoreWrite,
            ) -> Result<::tether_turn::Commit, ::tether_turn::StoreError> {
                self.$field.try_enqueue(write)
            }

            async fn audit_log(
                &self,
                turn_id: &str,
            ) -> Result<Vec<::tether_turn::AuditRecord>, ::tether_turn::StoreError> {
                self.$field.audit_log(turn_id).await
            }

            async fn ledger(
                &self,
                turn_id: &str,
            ) -> Result<Vec<::tether_turn::LedgerEntry>, ::tether_turn::StoreError> {
                self.$field.ledger(turn_id).await
            }

            async fn turns(
                &self,
                turn_id: Option<&str>,
                limit: usize,
            ) -> Result<Vec<::tether_turn::TurnListing>, ::tether_turn::StoreError> {
                self.$field.turns(turn_id, limit).await
            }

            async fn park_run(&self, run: &::tether_turn::ParkedRun) -> Result<(), ::tether_turn::StoreError> {
                self.$field.park_run(run).await
            }

            async fn parked_runs(
                &self,
                turn_id: Option<&str>,
            ) -> Result<Vec<::tether_turn::ParkedRun>, ::tether_turn::StoreError> {
                self.$field.parked_runs(turn_id).await
            }

            async fn claim_parked(
                &self,
                turn_id: &str,
                run_id: &str,
                claimant: &str,
                take_over: bool,
                now_ms: i64,
            ) -> Result<::tether_turn::ParkedRun, ::tether_turn::StoreError> {
                self.$field.claim_parked(turn_id, run_id, claimant, take_over, now_ms).await
            }

            async fn update_parked(
                &self,
                run: &::tether_turn::ParkedRun,
                claimant: &str,
            ) -> Result<(), ::tether_turn::StoreError> {
                self.$field.update_parked(run, claimant).await
            }

            async fn unpark(
                &self,
                turn_id: &str,
                run_id: &str,
                claimant: &str,
            ) -> Result<(), ::tether_turn::StoreError> {
                self.$field.unpark(turn_id, run_id, claimant).await
            }

            fn stats(&self) -> Option<::tether_turn::StoreStats> {
                Some(self.$field.stats())
            }
        }
    };
}
pub(crate) use delegate_audit_store;
