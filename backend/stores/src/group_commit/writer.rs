//! The writer: one std thread that owns the connection, fed by the store's
//! bounded queue, committing in groups.
//!
//! Each round it waits for one operation, then takes everything else queued
//! (up to [`MAX_GROUP`]), applies every write in ONE transaction and commits
//! once — one fsync for the whole group — then answers every waiter, then
//! runs the round's reads (which therefore see every write enqueued before
//! them). While it waits on the disk, new operations queue up for the next
//! round, so the busier the store, the larger the groups.
//!
//! A round of writes nobody is known to wait on (audit rows, `settled`)
//! lingers up to [`LINGER`] for a write somebody waits on (`started`) or a
//! read, and commits with it: a caller making calls one after another then
//! pays one commit per call — its `settled` and audit row ride with its next
//! `started` — instead of two back to back.
//!
//! The connection is opened on first use and opened again in a later round
//! when the database says it broke (a server restart, a dropped socket). A
//! group whose transaction could not even begin (nothing of it reached the
//! database) is run once more at once, on a new connection. A read that
//! meets a broken connection fails; the next round opens a new one.

use super::{Committed, Database, GroupFailure};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tether_turn::AuditRecord;
use tether_turn::StoreError;
use tether_turn::StoreWrite;
use tokio::sync::{mpsc, oneshot};

/// The most operations one round takes (one transaction's writes at most).
const MAX_GROUP: usize = 1024;

/// How long a round of writes nobody is known to wait on waits for one that
/// somebody does, to share its commit: 1 ms.
const LINGER: Duration = Duration::from_millis(1);

/// Where a write's outcome goes: `Ok` once committed.
pub(super) type Reply = oneshot::Sender<Result<(), StoreError>>;

/// A read, run on the writer's connection (or given the reason there is none).
pub(super) type Read<C> = Box<dyn FnOnce(Result<&mut C, StoreError>) + Send>;

/// What the store sends the writer.
// Writes are most operations and reads are rare: boxing the larger variant
// would cost an allocation per write to save a few bytes per queue slot.
#[allow(clippy::large_enum_variant)]
pub(super) enum Op<C> {
    /// A write and who waits on it.
    Write(StoreWrite, Reply),
    /// A read.
    Read(Read<C>),
}

impl<C> Op<C> {
    /// Whether nobody is known to wait on this: an audit row or `settled`
    /// (the call goes on without waiting for their commit).
    fn can_linger(&self) -> bool {
        matches!(self, Op::Write(StoreWrite::Audit(_) | StoreWrite::Settled { .. }, _))
    }
}

/// What the writer has done, shared with the store handle.
#[derive(Debug, Default)]
pub(super) struct Counters {
    /// Transactions committed.
    pub(super) commits: AtomicU64,
    /// Writes committed.
    pub(super) writes: AtomicU64,
    /// Transactions run again (a conflict with another writer, a closed
    /// connection).
    pub(super) retries: AtomicU64,
}

/// The writer thread's state.
pub(super) struct Writer<D: Database> {
    pub(super) database: D,
    pub(super) queue: mpsc::Receiver<Op<D::Connection>>,
    pub(super) counters: Arc<Counters>,
    /// Lets tests stop the writer between rounds.
    #[cfg(test)]
    pub(super) hold: Arc<Hold>,
}

/// Makes the writer wait, after it took a round's first operation and before
/// it takes the rest, while a test holds `gate`.
#[cfg(test)]
#[derive(Debug, Default)]
pub(super) struct Hold {
    pub(super) gate: std::sync::Mutex<()>,
    /// Rounds whose first operation the writer took.
    pub(super) rounds: AtomicU64,
}

impl<D: Database> Writer<D> {
    /// Runs rounds until every sender is gone and the queue is empty, then
    /// closes the connection. `runtime` only waits on the queue (with a
    /// time limit while lingering).
    pub(super) fn run(mut self, runtime: tokio::runtime::Runtime) {
        let mut connection = None;
        while let Some(first) = runtime.block_on(self.queue.recv()) {
            #[cfg(test)]
            let hold = self.hold.clone();
            #[cfg(test)]
            let _held = {
                hold.rounds.fetch_add(1, Ordering::SeqCst);
                hold.gate.lock().unwrap_or_else(|p| p.into_inner())
            };
            let mut ops = vec![first];
            self.take_queued(&mut ops);
            let until = Instant::now() + LINGER;
            while ops.len() < MAX_GROUP && ops.iter().all(Op::can_linger) {
                let left = until.saturating_duration_since(Instant::now());
                match runtime.block_on(async { tokio::time::timeout(left, self.queue.recv()).await }) {
                    Ok(Some(op)) => {
                        ops.push(op);
                        self.take_queued(&mut ops);
                    }
                    // Closed (commit what is here and stop) or lingered enough.
                    Ok(None) | Err(_) => break,
                }
            }
            self.round(&mut connection, ops);
        }
        tracing::debug!(database = %self.database.describe(), "the audit writer stopped");
    }

    /// Adds what is queued to `ops`, up to [`MAX_GROUP`].
    fn take_queued(&mut self, ops: &mut Vec<Op<D::Connection>>) {
        while ops.len() < MAX_GROUP {
            match self.queue.try_recv() {
                Ok(op) => ops.push(op),
                Err(_) => break,
            }
        }
    }

    /// The open connection, opening one if there is none. A failed open is
    /// kept in `failed` and given to the rest of the round without trying
    /// again (it is tried again next round).
    fn connect<'c>(
        &self,
        connection: &'c mut Option<D::Connection>,
        failed: &mut Option<StoreError>,
    ) -> Result<&'c mut D::Connection, StoreError> {
        if let Some(error) = failed {
            return Err(copy(error));
        }
        if connection.is_none() {
            match self.database.open() {
                Ok(opened) => *connection = Some(opened),
                Err(error) => {
                    // Every waiter gets this error and reports it: logged
                    // here only for whoever traces the writer.
                    tracing::debug!(%error, "cannot open the audit database");
                    *failed = Some(copy(&error));
                    return Err(error);
                }
            }
        }
        connection.as_mut().ok_or_else(|| StoreError::Closed("no connection".into()))
    }

    fn round(&self, connection: &mut Option<D::Connection>, ops: Vec<Op<D::Connection>>) {
        let (mut writes, mut reads) = (Vec::new(), Vec::new());
        for op in ops {
            match op {
                Op::Write(write, reply) => writes.push((write, reply)),
                Op::Read(read) => reads.push(read),
            }
        }
        let mut failed = None;
        if !writes.is_empty() {
            let results = self.commit(connection, &mut failed, &writes);
            for ((write, reply), result) in writes.into_iter().zip(results) {
                answer(write, reply, result);
            }
        }
        for read in reads {
            read(self.connect(connection, &mut failed));
        }
        if connection.as_mut().is_some_and(|c| D::is_broken(c)) {
            tracing::warn!(database = %self.database.describe(), "the audit database connection broke; opening a new one next round");
            *connection = None;
        }
    }

    /// Commits `writes` as one group: each write's outcome, in order.
    fn commit(
        &self,
        connection: &mut Option<D::Connection>,
        failed: &mut Option<StoreError>,
        writes: &[(StoreWrite, Reply)],
    ) -> Vec<Result<(), StoreError>> {
        let group: Vec<&StoreWrite> = writes.iter().map(|(write, _)| write).collect();
        let mut attempt = 0;
        let failure = loop {
            attempt += 1;
            let open = match self.connect(connection, failed) {
                Ok(open) => open,
                Err(error) => break error,
            };
            match D::commit(open, &group) {
                Ok(Committed { results, retries }) => {
                    self.counters.commits.fetch_add(1, Ordering::Relaxed);
                    self.counters.retries.fetch_add(retries, Ordering::Relaxed);
                    let ok = results.iter().filter(|r| r.is_ok()).count();
                    self.counters.writes.fetch_add(u64::try_from(ok).unwrap_or(u64::MAX), Ordering::Relaxed);
                    return results;
                }
                // Nothing reached the database: once more, on a new connection.
                Err(GroupFailure { error, before_begin: true }) if attempt == 1 => {
                    tracing::warn!(%error, "the audit transaction could not begin; running the group again on a new connection");
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    *connection = None;
                }
                Err(GroupFailure { error, .. }) => {
                    tracing::error!(%error, writes = group.len(), "cannot commit a group of audit writes; none is durable");
                    break error;
                }
            }
        };
        writes.iter().map(|_| Err(copy(&failure))).collect()
    }
}

/// Tells the waiter; a failure nobody waits for is logged with the write
/// (an audit row lost is at least in the log).
fn answer(write: StoreWrite, reply: Reply, result: Result<(), StoreError>) {
    if let Err(Err(error)) = reply.send(result) {
        match &write {
            StoreWrite::Audit(AuditRecord { call, .. }) => {
                tracing::error!(%error, ?write, call_id = %call.call_id, "an audit row was not stored");
            }
            StoreWrite::OpenTurn { turn_id, .. } => {
                tracing::error!(%error, %turn_id, "a turn id's claim was not stored");
            }
            _ => tracing::error!(%error, ?write, "an effect-ledger write was not stored"),
        }
    }
}

/// The same failure for another waiter: an open failure stays one, anything
/// else says the group did not commit.
fn copy(error: &StoreError) -> StoreError {
    match error {
        StoreError::Open { path, reason } => StoreError::Open { path: path.clone(), reason: reason.clone() },
        StoreError::Commit(why) => StoreError::Commit(why.clone()),
        other => StoreError::Commit(other.to_string()),
    }
}
