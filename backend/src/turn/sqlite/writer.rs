//! The writer: one std thread that owns the connection, fed by the store's
//! bounded queue, committing in groups.
//!
//! Each round it waits for one operation, then takes everything else queued
//! (up to [`MAX_GROUP`]), applies every write in ONE transaction and commits
//! once — one fsync for the whole group under `synchronous=FULL` — then
//! answers every waiter, then runs the round's reads (which therefore see
//! every write enqueued before them). While it waits on the disk, new
//! operations queue up for the next round, so the busier the store, the
//! larger the groups.
//!
//! A round of writes nobody is known to wait on (audit rows, `settled`)
//! lingers up to [`LINGER`] for a write somebody waits on (`started`) or a
//! read, and commits with it: a caller making calls one after another then
//! pays one fsync per call — its `settled` and audit row ride with its next
//! `started` — instead of two back to back.

use super::super::audit::AuditRecord;
use super::super::error::StoreError;
use super::super::store::{StartVerdict, StoreWrite, start_verdict};
use super::schema;
use rusqlite::{Connection, TransactionBehavior};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// The most operations one round takes (one transaction's writes at most).
const MAX_GROUP: usize = 1024;

/// How long a round of writes nobody is known to wait on waits for one that
/// somebody does, to share its commit: 1 ms.
const LINGER: Duration = Duration::from_millis(1);

/// Where a write's outcome goes: `Ok` once committed.
pub(super) type Reply = oneshot::Sender<Result<(), StoreError>>;

/// A read, run on the writer's connection (or given the reason there is none).
pub(super) type Read = Box<dyn FnOnce(Result<&Connection, StoreError>) + Send>;

/// What the store sends the writer.
// Writes are most operations and reads are rare: boxing the larger variant
// would cost an allocation per write to save a few bytes per queue slot.
#[allow(clippy::large_enum_variant)]
pub(super) enum Op {
    /// A write and who waits on it.
    Write(StoreWrite, Reply),
    /// A read.
    Read(Read),
}

impl Op {
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
}

/// The writer thread's state.
pub(super) struct Writer {
    pub(super) path: PathBuf,
    pub(super) queue: mpsc::Receiver<Op>,
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

impl Writer {
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
        tracing::debug!(path = %self.path.display(), "the audit writer stopped");
    }

    /// Adds what is queued to `ops`, up to [`MAX_GROUP`].
    fn take_queued(&mut self, ops: &mut Vec<Op>) {
        while ops.len() < MAX_GROUP {
            match self.queue.try_recv() {
                Ok(op) => ops.push(op),
                Err(_) => break,
            }
        }
    }

    fn round(&self, connection: &mut Option<Connection>, ops: Vec<Op>) {
        let (mut writes, mut reads) = (Vec::new(), Vec::new());
        for op in ops {
            match op {
                Op::Write(write, reply) => writes.push((write, reply)),
                Op::Read(read) => reads.push(read),
            }
        }
        // Opened on first use; a failed open is retried next round.
        if connection.is_none() {
            match schema::open(&self.path) {
                Ok(opened) => *connection = Some(opened),
                Err(error) => {
                    tracing::error!(%error, "cannot open the audit database");
                    for (write, reply) in writes {
                        answer(write, reply, Err(copy(&error)));
                    }
                    for read in reads {
                        read(Err(copy(&error)));
                    }
                    return;
                }
            }
        }
        let Some(connection) = connection.as_mut() else { return };
        if !writes.is_empty() {
            match commit(connection, &writes) {
                Ok(results) => {
                    self.counters.commits.fetch_add(1, Ordering::Relaxed);
                    let ok = results.iter().filter(|r| r.is_ok()).count();
                    self.counters.writes.fetch_add(u64::try_from(ok).unwrap_or(u64::MAX), Ordering::Relaxed);
                    for ((write, reply), result) in writes.into_iter().zip(results) {
                        answer(write, reply, result);
                    }
                }
                Err(error) => {
                    tracing::error!(%error, writes = writes.len(), "cannot commit a group of audit writes; none is durable");
                    for (write, reply) in writes {
                        answer(write, reply, Err(StoreError::Commit(error.to_string())));
                    }
                }
            }
        }
        for read in reads {
            read(Ok(connection));
        }
    }
}

/// Applies `writes` in one transaction and commits it: each write's own
/// outcome (a refused replay, a failed statement) if the commit succeeds.
///
/// # Errors
/// If the transaction could not begin or commit, or a failed statement rolled
/// the whole transaction back: then no write of the group is durable.
fn commit(connection: &mut Connection, writes: &[(StoreWrite, Reply)]) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut results = Vec::with_capacity(writes.len());
    for (write, _) in writes {
        let result = apply(&transaction, write);
        if let Err(error) = &result
            && transaction.is_autocommit()
        {
            return Err(StoreError::Commit(format!("a failed write rolled the group back: {error}")));
        }
        results.push(result);
    }
    transaction.commit()?;
    Ok(results)
}

fn apply(c: &Connection, write: &StoreWrite) -> Result<(), StoreError> {
    match write {
        StoreWrite::Audit(record) => schema::insert_audit(c, record)?,
        StoreWrite::Started { entry, replay } => {
            let existing = schema::ledger_state(c, &entry.call.turn_id, &entry.call.call_id)?;
            match start_verdict(&entry.call.call_id, existing, *replay)? {
                StartVerdict::Insert => schema::insert_started(c, entry)?,
                StartVerdict::Restart => schema::restart(c, entry)?,
            }
        }
        StoreWrite::Settled { turn_id, call_id, outcome, settled_at_ms } => {
            schema::settle(c, turn_id, call_id, *outcome, *settled_at_ms)?;
        }
    }
    Ok(())
}

/// Tells the waiter; a failure nobody waits for is logged with the write
/// (an audit row lost is at least in the log).
fn answer(write: StoreWrite, reply: Reply, result: Result<(), StoreError>) {
    if let Err(Err(error)) = reply.send(result) {
        match &write {
            StoreWrite::Audit(AuditRecord { call, .. }) => {
                tracing::error!(%error, ?write, call_id = %call.call_id, "an audit row was not stored");
            }
            _ => tracing::error!(%error, ?write, "an effect-ledger write was not stored"),
        }
    }
}

/// The same failure for another waiter.
fn copy(error: &StoreError) -> StoreError {
    match error {
        StoreError::Open { path, reason } => StoreError::Open { path: path.clone(), reason: reason.clone() },
        other => StoreError::Commit(other.to_string()),
    }
}
