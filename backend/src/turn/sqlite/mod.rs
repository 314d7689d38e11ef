//! The default [`AuditStore`]: SQLite (bundled), WAL, `synchronous=FULL`.
//!
//! Threading: ONE writer thread owns the connection (`writer.rs`); the
//! store handle only puts operations on a bounded queue, so no async worker
//! ever waits on SQLite or the disk. The writer commits in groups: it takes
//! everything queued, runs it in one transaction and commits once — one
//! fsync for the group — then answers every waiter. A group of writes
//! nobody waits on (audit rows, `settled`) lingers up to 1 ms for a
//! `started` or a read to commit with.
//!
//! - `started` ([`AuditStore::ledger_started`]) resolves only once its row
//!   is committed: a tool with effects runs after `started` is on disk.
//! - Audit rows and `settled` are enqueued in order at call time and
//!   committed by the next group; the call does not wait for their fsync (a
//!   read-only tool's call pays none).
//! - Reads go through the queue too, so they see every write enqueued
//!   before them.
//! - A failed commit is reported to every waiter of its group; a failure
//!   nobody waits for is logged with the write.
//! - Backpressure: the queue holds [`DEFAULT_QUEUE_CAPACITY`] operations.
//!   [`AuditStore::enqueue`] (async paths) waits for room;
//!   [`AuditStore::try_enqueue`] (a call's `Drop`, which cannot await) fails
//!   at once with [`StoreError::QueueFull`] and the write is logged at error
//!   level instead of stored.
//! - Shutdown: dropping the store closes the queue, lets the writer commit
//!   everything already queued, and waits for the thread to end.
//!
//! Layout: `schema.rs` (tables, the identity ↔ columns mapping, opening),
//! `writer.rs` (the thread and group commit), this file (the handle).

mod schema;
mod writer;

use super::audit::{AuditRecord, LedgerEntry};
use super::error::StoreError;
use super::store::{AuditStore, Commit, StoreWrite};
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use writer::{Counters, Op, Writer};

/// Operations the store's queue holds by default before writers wait: 1,024.
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;

/// What a [`SqliteAuditStore`]'s writer has committed since the store was
/// created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Transactions committed: one fsync each.
    pub commits: u64,
    /// Writes committed (audit rows, `started`, `settled`).
    pub writes: u64,
}

/// An audit log and effect ledger in one SQLite file, created (with its
/// tables, or with the columns an older file lacks) on first use. Several
/// turns may share one store. See the module documentation for threading,
/// durability and backpressure.
///
/// # Shutdown
/// Dropping the store closes its queue; the writer commits everything
/// already queued and stops, and `drop` returns once it has (at most one
/// group commit's wait, on the dropping thread).
#[derive(Debug)]
pub struct SqliteAuditStore {
    path: PathBuf,
    capacity: usize,
    /// `Err`: why the writer could not start.
    queue: Result<mpsc::Sender<Op>, String>,
    writer: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
    #[cfg(test)]
    hold: Arc<writer::Hold>,
}

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
        let (path, capacity) = (path.into(), capacity.max(1));
        let (sender, receiver) = mpsc::channel(capacity);
        let counters = Arc::new(Counters::default());
        #[cfg(test)]
        let hold = Arc::new(writer::Hold::default());
        let writer = Writer {
            path: path.clone(),
            queue: receiver,
            counters: counters.clone(),
            #[cfg(test)]
            hold: hold.clone(),
        };
        // The writer waits on the queue through a runtime of its own (one
        // thread, timers only): SQLite itself is blocking.
        let started = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .and_then(|runtime| {
                std::thread::Builder::new().name("tether-audit-writer".into()).spawn(move || writer.run(runtime))
            });
        let (queue, writer) = match started {
            Ok(handle) => (Ok(sender), Some(handle)),
            Err(error) => {
                tracing::error!(%error, "cannot start the audit writer thread");
                (Err(format!("the writer thread could not start: {error}")), None)
            }
        };
        SqliteAuditStore {
            path,
            capacity,
            queue,
            writer,
            counters,
            #[cfg(test)]
            hold,
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the writer has committed so far.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            commits: self.counters.commits.load(Ordering::Relaxed),
            writes: self.counters.writes.load(Ordering::Relaxed),
        }
    }

    /// The journal mode and synchronous level in force (opens the database).
    ///
    /// # Errors
    /// If the database cannot be opened or read.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn settings(&self) -> Result<(String, i64), StoreError> {
        self.read(|c| {
            let mode: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
            let sync: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
            Ok((mode, sync))
        })
        .await
    }

    fn sender(&self) -> Result<&mpsc::Sender<Op>, StoreError> {
        self.queue.as_ref().map_err(|why| StoreError::Closed(why.clone()))
    }

    /// Runs `f` on the writer's connection after every operation queued before.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let read: writer::Read = Box::new(move |connection| {
            // The reader may have gone away (cancelled): nothing to tell.
            let _ = reply.send(connection.and_then(f));
        });
        self.sender()?.send(Op::Read(read)).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Makes the writer wait, once it took a round's first operation, while
    /// the guard lives.
    #[cfg(test)]
    fn hold_writer(&self) -> std::sync::MutexGuard<'_, ()> {
        self.hold.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rounds whose first operation the writer took so far.
    #[cfg(test)]
    fn rounds(&self) -> u64 {
        self.hold.rounds.load(Ordering::SeqCst)
    }
}

fn stopped() -> StoreError {
    StoreError::Closed("the writer thread stopped".into())
}

/// A write for the queue and the [`Commit`] its outcome reaches.
fn write_op(write: StoreWrite) -> (Op, Commit) {
    let (reply, outcome) = oneshot::channel();
    let commit = Commit::from_future(async move { outcome.await.unwrap_or_else(|_| Err(stopped())) });
    (Op::Write(write, reply), commit)
}

#[async_trait::async_trait]
impl AuditStore for SqliteAuditStore {
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
        self.read(move |c| Ok(schema::audit_rows(c, &turn_id)?)).await
    }

    async fn ledger(&self, turn_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let turn_id = turn_id.to_owned();
        self.read(move |c| Ok(schema::ledger_rows(c, &turn_id)?)).await
    }
}

impl Drop for SqliteAuditStore {
    fn drop(&mut self) {
        // Closing the queue ends the writer once it has committed what is queued.
        self.queue = Err("the store was dropped".into());
        if let Some(writer) = self.writer.take()
            && writer.join().is_err()
        {
            tracing::error!(path = %self.path.display(), "the audit writer thread panicked");
        }
    }
}

#[cfg(test)]
mod tests;
