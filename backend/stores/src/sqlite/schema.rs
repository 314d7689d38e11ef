//! The SQLite schema: the four tables (turns, audit, ledger, parked runs), the columns a [`CallIdentity`] maps to
//! (ONE mapping, used by both tables), the statements, opening a connection
//! (WAL, `synchronous=FULL`) and bringing an older file up to date.

use rusqlite::types::ToSql;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use std::path::Path;
use std::time::Duration;
use tether_turn::ApprovalVerdict;
use tether_turn::CallStatus;
use tether_turn::Step;
use tether_turn::StoreError;
use tether_turn::TurnListing;
use tether_turn::{AuditRecord, CallIdentity, IDENTITY_COLUMNS, LedgerEntry, LedgerState, identity_columns};

use crate::group_commit::parked::{Holder, ParkedRow};

/// The identity columns' declarations, the same in both tables, in the order
/// of `identity_columns!`.
macro_rules! identity_ddl {
    () => {
        "turn_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    parent_call_id TEXT,
    script_run_id TEXT,
    tool TEXT NOT NULL,
    origin TEXT NOT NULL,
    depth INTEGER NOT NULL DEFAULT 0,
    args TEXT NOT NULL,
    args_truncated INTEGER NOT NULL DEFAULT 0"
    };
}

const SCHEMA: &str = concat!(
    "
CREATE TABLE IF NOT EXISTS turns (
    turn_id TEXT PRIMARY KEY NOT NULL,
    opened_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ",
    identity_ddl!(),
    ",
    step TEXT,
    code TEXT,
    approval TEXT,
    decided_by TEXT,
    approval_reason TEXT,
    detail TEXT,
    status TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL,
    finished_at_ms INTEGER NOT NULL,
    duration_us INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_by_turn ON audit (turn_id);
CREATE TABLE IF NOT EXISTS ledger (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ",
    identity_ddl!(),
    ",
    approval_required INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('started', 'settled')),
    started_at_ms INTEGER NOT NULL,
    settled_at_ms INTEGER,
    outcome TEXT,
    result TEXT,
    UNIQUE (turn_id, call_id)
);
CREATE TABLE IF NOT EXISTS parked_runs (
    turn_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    parked_at_ms INTEGER NOT NULL,
    claimant TEXT,
    claimed_at_ms INTEGER,
    record TEXT NOT NULL,
    PRIMARY KEY (turn_id, run_id)
);
"
);

/// Columns added since the first schema, added to an older file when it is
/// opened: `(table, column, declaration)`.
const ADDED_COLUMNS: [(&str, &str, &str); 6] = [
    ("audit", "depth", "INTEGER NOT NULL DEFAULT 0"),
    ("audit", "approval_reason", "TEXT"),
    ("audit", "detail", "TEXT"),
    ("ledger", "depth", "INTEGER NOT NULL DEFAULT 0"),
    ("ledger", "args_truncated", "INTEGER NOT NULL DEFAULT 0"),
    ("ledger", "result", "TEXT"),
];

const INSERT_AUDIT: &str = concat!(
    "INSERT INTO audit (",
    identity_columns!(),
    ", step, code, approval, decided_by, approval_reason, detail, status, started_at_ms, finished_at_ms, duration_us)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
);
const INSERT_STARTED: &str = concat!(
    "INSERT INTO ledger (",
    identity_columns!(),
    ", approval_required, state, started_at_ms)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'started', ?)"
);
/// Whether the store holds turn `?1`: a claim, or rows of a turn that was
/// built without one (or written before claims existed).
const TURN_HELD: &str = "SELECT EXISTS (SELECT 1 FROM turns WHERE turn_id = ?1)
     OR EXISTS (SELECT 1 FROM audit WHERE turn_id = ?1)
     OR EXISTS (SELECT 1 FROM ledger WHERE turn_id = ?1)";
const CLAIM_TURN: &str = "INSERT INTO turns (turn_id, opened_at_ms) VALUES (?1, ?2)";
const LEDGER_STATE: &str = "SELECT state FROM ledger WHERE turn_id = ?1 AND call_id = ?2";
const RESTART: &str = "UPDATE ledger SET state = 'started', started_at_ms = ?3, settled_at_ms = NULL, outcome = NULL,
     result = NULL WHERE turn_id = ?1 AND call_id = ?2";
const SETTLE: &str = "UPDATE ledger SET state = 'settled', settled_at_ms = ?3, outcome = ?4, result = ?5 WHERE turn_id = ?1 AND call_id = ?2";
const SELECT_AUDIT: &str = concat!(
    "SELECT ",
    identity_columns!(),
    ", step, code, approval, decided_by, approval_reason, detail, status, started_at_ms, finished_at_ms, duration_us
     FROM audit WHERE turn_id = ?1 ORDER BY id"
);
const SELECT_LEDGER: &str = concat!(
    "SELECT ",
    identity_columns!(),
    ", approval_required, state, started_at_ms, settled_at_ms, outcome, result
     FROM ledger WHERE turn_id = ?1 ORDER BY seq"
);

/// Parks a run, or parks it again: the record replaced, the claim released.
const PUT_PARKED: &str = "INSERT INTO parked_runs (turn_id, run_id, parked_at_ms, claimant, claimed_at_ms, record)
     VALUES (?1, ?2, ?3, NULL, NULL, ?4)
     ON CONFLICT (turn_id, run_id) DO UPDATE
     SET parked_at_ms = excluded.parked_at_ms, claimant = NULL, claimed_at_ms = NULL, record = excluded.record";
/// The opened turns, newest first, with their audit rows and those not `ok`.
const SELECT_TURNS: &str = "SELECT t.turn_id, t.opened_at_ms,
            (SELECT count(*) FROM audit a WHERE a.turn_id = t.turn_id),
            (SELECT count(*) FROM audit a WHERE a.turn_id = t.turn_id AND a.status <> 'ok')
     FROM turns t WHERE ?1 IS NULL OR t.turn_id = ?1 ORDER BY t.opened_at_ms DESC, t.turn_id LIMIT ?2";
const SELECT_PARKED: &str =
    "SELECT turn_id, run_id, parked_at_ms, record FROM parked_runs ORDER BY parked_at_ms, turn_id, run_id";
const SELECT_PARKED_OF_TURN: &str = "SELECT turn_id, run_id, parked_at_ms, record FROM parked_runs
     WHERE turn_id = ?1 ORDER BY parked_at_ms, turn_id, run_id";
/// The claim: one statement, so that of two connections claiming one run
/// at once (SQLite lets one write at a time) the second finds it claimed.
const CLAIM_PARKED: &str = "UPDATE parked_runs SET claimant = ?3, claimed_at_ms = ?4
     WHERE turn_id = ?1 AND run_id = ?2 AND (claimant IS NULL OR ?5)
     RETURNING record";
const PARKED_HOLDER: &str = "SELECT claimant, claimed_at_ms FROM parked_runs WHERE turn_id = ?1 AND run_id = ?2";
const REPLACE_PARKED: &str = "UPDATE parked_runs SET parked_at_ms = ?3, record = ?4
     WHERE turn_id = ?1 AND run_id = ?2 AND claimant = ?5";
const DELETE_PARKED: &str = "DELETE FROM parked_runs WHERE turn_id = ?1 AND run_id = ?2 AND claimant = ?3";

/// Opens (creating it if needed) the database at `path` in WAL mode with
/// `synchronous=FULL`, with the current tables. Its folder must exist: a
/// mistyped path fails here, at start-up, rather than starting an empty
/// audit log somewhere no one looks.
///
/// # Errors
/// [`StoreError::Open`], whatever failed.
pub(super) fn open(path: &Path) -> Result<Connection, StoreError> {
    let fail = |reason: String| StoreError::Open { path: path.display().to_string(), reason };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(fail(format!("the folder `{}` does not exist; create it, or correct the path", dir.display())));
    }
    let prepare = || -> rusqlite::Result<(Connection, String)> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(Duration::from_secs(5))?;
        let mode: String = connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
        // FULL: a commit returns only once it is on disk, so `started` is
        // durable before the tool runs, even across a power loss.
        connection.pragma_update(None, "synchronous", "FULL")?;
        connection.execute_batch(SCHEMA)?;
        add_missing_columns(&connection)?;
        Ok((connection, mode))
    };
    let (connection, mode) = prepare().map_err(|e| fail(e.to_string()))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(fail(format!("the database refused WAL mode (`{mode}`)")));
    }
    Ok(connection)
}

fn add_missing_columns(connection: &Connection) -> rusqlite::Result<()> {
    for (table, column, declaration) in ADDED_COLUMNS {
        let present: i64 = connection.query_row(
            "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
            [table, column],
            |row| row.get(0),
        )?;
        if present == 0 {
            connection.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {declaration}"))?;
            tracing::info!(table, column, "added a column to an older audit database");
        }
    }
    Ok(())
}

/// The identity's values, in the order of `identity_columns!`.
fn identity_params(call: &CallIdentity) -> [&dyn ToSql; IDENTITY_COLUMNS] {
    [
        &call.turn_id,
        &call.call_id,
        &call.parent_call_id,
        &call.script_run_id,
        &call.tool,
        &call.origin,
        &call.depth,
        &call.args,
        &call.args_truncated,
    ]
}

/// The identity in a row's first [`IDENTITY_COLUMNS`] columns.
fn identity_from(row: &Row<'_>) -> rusqlite::Result<CallIdentity> {
    Ok(CallIdentity {
        turn_id: row.get(0)?,
        call_id: row.get(1)?,
        parent_call_id: row.get(2)?,
        script_run_id: row.get(3)?,
        tool: row.get(4)?,
        origin: row.get(5)?,
        depth: row.get(6)?,
        args: row.get(7)?,
        args_truncated: row.get(8)?,
    })
}

/// Appends an audit row.
pub(super) fn insert_audit(c: &Connection, r: &AuditRecord) -> rusqlite::Result<()> {
    let (step, approval, status) =
        (r.step.map(Step::as_str), r.approval.map(ApprovalVerdict::as_str), r.status.as_str());
    let rest: [&dyn ToSql; 10] = [
        &step,
        &r.code,
        &approval,
        &r.decided_by,
        &r.approval_reason,
        &r.detail,
        &status,
        &r.started_at_ms,
        &r.finished_at_ms,
        &r.duration_us,
    ];
    c.prepare_cached(INSERT_AUDIT)?.execute(params_from_iter(identity_params(&r.call).into_iter().chain(rest)))?;
    Ok(())
}

/// Claims `turn_id`; `false` if the store already holds it. Atomic across
/// processes: the group's transaction is `IMMEDIATE`, so it holds the
/// file's write lock from the check to the commit.
pub(super) fn claim_turn(c: &Connection, turn_id: &str, opened_at_ms: i64) -> rusqlite::Result<bool> {
    let held: bool = c.prepare_cached(TURN_HELD)?.query_row([turn_id], |row| row.get(0))?;
    if held {
        return Ok(false);
    }
    c.prepare_cached(CLAIM_TURN)?.execute(params![turn_id, opened_at_ms])?;
    Ok(true)
}

/// The state of the ledger row of `(turn_id, call_id)`, if there is one.
pub(super) fn ledger_state(c: &Connection, turn_id: &str, call_id: &str) -> rusqlite::Result<Option<LedgerState>> {
    let state: Option<String> =
        c.prepare_cached(LEDGER_STATE)?.query_row([turn_id, call_id], |row| row.get(0)).optional()?;
    Ok(state.as_deref().map(LedgerState::from_stored))
}

/// Inserts `entry` as a `started` row.
pub(super) fn insert_started(c: &Connection, e: &LedgerEntry) -> rusqlite::Result<()> {
    let rest: [&dyn ToSql; 2] = [&e.approval_required, &e.started_at_ms];
    c.prepare_cached(INSERT_STARTED)?.execute(params_from_iter(identity_params(&e.call).into_iter().chain(rest)))?;
    Ok(())
}

/// Puts the settled row of `entry`'s call back to `started` at `entry.started_at_ms`.
pub(super) fn restart(c: &Connection, e: &LedgerEntry) -> rusqlite::Result<()> {
    c.prepare_cached(RESTART)?.execute(params![e.call.turn_id, e.call.call_id, e.started_at_ms])?;
    Ok(())
}

/// Marks the row of `(turn_id, call_id)` settled, with what the tool returned.
pub(super) fn settle(
    c: &Connection,
    turn_id: &str,
    call_id: &str,
    outcome: CallStatus,
    at_ms: i64,
    result: Option<&str>,
) -> rusqlite::Result<()> {
    c.prepare_cached(SETTLE)?.execute(params![turn_id, call_id, at_ms, outcome.as_str(), result])?;
    Ok(())
}

/// The turn's audit rows, in the order written.
pub(super) fn audit_rows(c: &Connection, turn_id: &str) -> rusqlite::Result<Vec<AuditRecord>> {
    let mut statement = c.prepare_cached(SELECT_AUDIT)?;
    let rows = statement.query_map([turn_id], |row| {
        let n = IDENTITY_COLUMNS;
        let step: Option<String> = row.get(n)?;
        let approval: Option<String> = row.get(n + 2)?;
        let status: String = row.get(n + 6)?;
        Ok(AuditRecord {
            call: identity_from(row)?,
            step: step.as_deref().and_then(Step::parse),
            code: row.get(n + 1)?,
            approval: approval.as_deref().and_then(ApprovalVerdict::parse),
            decided_by: row.get(n + 3)?,
            approval_reason: row.get(n + 4)?,
            detail: row.get(n + 5)?,
            status: CallStatus::from_stored(&status),
            started_at_ms: row.get(n + 7)?,
            finished_at_ms: row.get(n + 8)?,
            duration_us: row.get(n + 9)?,
        })
    })?;
    rows.collect()
}

/// The turn's ledger rows, in the order they first started.
pub(super) fn ledger_rows(c: &Connection, turn_id: &str) -> rusqlite::Result<Vec<LedgerEntry>> {
    let mut statement = c.prepare_cached(SELECT_LEDGER)?;
    let rows = statement.query_map([turn_id], |row| {
        let n = IDENTITY_COLUMNS;
        let state: String = row.get(n + 1)?;
        let outcome: Option<String> = row.get(n + 4)?;
        Ok(LedgerEntry {
            call: identity_from(row)?,
            approval_required: row.get(n)?,
            state: LedgerState::from_stored(&state),
            started_at_ms: row.get(n + 2)?,
            settled_at_ms: row.get(n + 3)?,
            outcome: outcome.as_deref().and_then(CallStatus::parse),
            result: row.get(n + 5)?,
        })
    })?;
    rows.collect()
}

// Parked runs: each a statement of its own, in autocommit (the caller's
// connection is never inside a group's transaction here), so each is
// committed, and on disk under `synchronous=FULL`, when it returns.

/// Inserts `row`, or replaces the row of its run, releasing its claim.
pub(super) fn put_parked(c: &Connection, row: &ParkedRow) -> rusqlite::Result<()> {
    c.prepare_cached(PUT_PARKED)?.execute(params![row.turn_id, row.run_id, row.parked_at_ms, row.record])?;
    Ok(())
}

/// The opened turns (only `turn_id` with `Some`), newest first, at most `limit`.
pub(super) fn turn_rows(c: &Connection, turn_id: Option<&str>, limit: usize) -> rusqlite::Result<Vec<TurnListing>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let listing = |row: &Row<'_>| {
        let count = |i| row.get::<_, i64>(i).map(|n| u64::try_from(n).unwrap_or(0));
        Ok(TurnListing { turn_id: row.get(0)?, opened_at_ms: row.get(1)?, calls: count(2)?, not_ok: count(3)? })
    };
    c.prepare_cached(SELECT_TURNS)?.query_map(params![turn_id, limit], listing)?.collect()
}

/// The parked runs of `turn_id` (all with `None`), oldest first.
pub(super) fn parked_rows(c: &Connection, turn_id: Option<&str>) -> rusqlite::Result<Vec<ParkedRow>> {
    let parked_row = |row: &Row<'_>| {
        Ok(ParkedRow { turn_id: row.get(0)?, run_id: row.get(1)?, parked_at_ms: row.get(2)?, record: row.get(3)? })
    };
    match turn_id {
        Some(turn_id) => c.prepare_cached(SELECT_PARKED_OF_TURN)?.query_map([turn_id], parked_row)?.collect(),
        None => c.prepare_cached(SELECT_PARKED)?.query_map([], parked_row)?.collect(),
    }
}

/// Claims the run for `claimant` if nobody holds it or `take_over`: its record.
pub(super) fn claim_parked(
    c: &Connection,
    turn_id: &str,
    run_id: &str,
    claimant: &str,
    take_over: bool,
    now_ms: i64,
) -> rusqlite::Result<Option<String>> {
    c.prepare_cached(CLAIM_PARKED)?
        .query_row(params![turn_id, run_id, claimant, now_ms, take_over], |row| row.get(0))
        .optional()
}

/// Who holds the run's claim.
pub(super) fn parked_holder(c: &Connection, turn_id: &str, run_id: &str) -> rusqlite::Result<Holder> {
    let claim: Option<(Option<String>, Option<i64>)> = c
        .prepare_cached(PARKED_HOLDER)?
        .query_row([turn_id, run_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    Ok(match claim {
        None => Holder::NotParked,
        Some((None, _)) => Holder::Free,
        Some((Some(claimant), since_ms)) => Holder::Claimed { claimant, since_ms: since_ms.unwrap_or_default() },
    })
}

/// Replaces the record of `row`'s run if `claimant` holds it: whether it did.
pub(super) fn replace_parked(c: &Connection, row: &ParkedRow, claimant: &str) -> rusqlite::Result<bool> {
    let changed = c.prepare_cached(REPLACE_PARKED)?.execute(params![
        row.turn_id,
        row.run_id,
        row.parked_at_ms,
        row.record,
        claimant
    ])?;
    Ok(changed == 1)
}

/// Deletes the run's row if `claimant` holds it: whether it did.
pub(super) fn delete_parked(c: &Connection, turn_id: &str, run_id: &str, claimant: &str) -> rusqlite::Result<bool> {
    Ok(c.prepare_cached(DELETE_PARKED)?.execute([turn_id, run_id, claimant])? == 1)
}
