//! The PostgreSQL schema: the tables (created if missing, under an advisory
//! lock so that many backends may start at once), the schema version, the
//! columns a [`CallIdentity`] maps to (ONE mapping, used by both tables),
//! the prepared statements, and opening a session.

use postgres::types::ToSql;
use postgres::{Client, GenericClient, Row, Statement};
use tether_turn::ApprovalVerdict;
use tether_turn::CallStatus;
use tether_turn::Step;
use tether_turn::StoreError;
use tether_turn::TurnListing;
use tether_turn::{AuditRecord, CallIdentity, IDENTITY_COLUMNS, LedgerEntry, LedgerState, identity_columns};

use crate::group_commit::parked::{Holder, ParkedRow};

/// The version of the tables this build writes. A database whose tables
/// carry a newer version is refused (an older build must not write tables it
/// does not know).
/// Version 2 added `tether_turns` (turn ids claimed at open) and the audit
/// column `approval_reason`; version 3 the audit column `detail` (a
/// failure's full text for the operator); version 4 `tether_parked_runs`
/// (runs parked waiting for people, resumed by any backend); version 5 the
/// ledger column `result` (what a settled call returned, so a run resumed
/// after a crash is answered from it).
/// [`MIGRATIONS`] brings older tables up.
pub(super) const SCHEMA_VERSION: i32 = 5;

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
    depth BIGINT NOT NULL CHECK (depth BETWEEN 0 AND 4294967295),
    args TEXT NOT NULL,
    args_truncated BOOLEAN NOT NULL"
    };
}

/// The parked runs' table: one row per `(turn_id, run_id)`, the record the
/// run's JSON, the claim who resumes it.
macro_rules! parked_ddl {
    () => {
        "
CREATE TABLE IF NOT EXISTS tether_parked_runs (
    turn_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    parked_at_ms BIGINT NOT NULL,
    claimant TEXT,
    claimed_at_ms BIGINT,
    record TEXT NOT NULL,
    PRIMARY KEY (turn_id, run_id)
);
"
    };
}

const CREATE: &str = concat!(
    "
CREATE TABLE IF NOT EXISTS tether_schema (
    only_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row),
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tether_turns (
    turn_id TEXT PRIMARY KEY,
    opened_at_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS tether_audit (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
    started_at_ms BIGINT NOT NULL,
    finished_at_ms BIGINT NOT NULL,
    duration_us BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS tether_audit_by_turn ON tether_audit (turn_id, id);
CREATE TABLE IF NOT EXISTS tether_ledger (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ",
    identity_ddl!(),
    ",
    approval_required BOOLEAN NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('started', 'settled')),
    started_at_ms BIGINT NOT NULL,
    settled_at_ms BIGINT,
    outcome TEXT,
    result TEXT,
    UNIQUE (turn_id, call_id)
);
",
    parked_ddl!()
);

/// What brings tables of version `N` to `N + 1`: `MIGRATIONS[N - 1]`, run
/// under the schema lock in the transaction that records the new version.
const MIGRATIONS: [&str; 4] = [
    "
CREATE TABLE IF NOT EXISTS tether_turns (
    turn_id TEXT PRIMARY KEY,
    opened_at_ms BIGINT NOT NULL
);
ALTER TABLE tether_audit ADD COLUMN IF NOT EXISTS approval_reason TEXT;
",
    "
ALTER TABLE tether_audit ADD COLUMN IF NOT EXISTS detail TEXT;
",
    parked_ddl!(),
    "
ALTER TABLE tether_ledger ADD COLUMN IF NOT EXISTS result TEXT;
",
];

/// One lock per schema (the tables' namespace), held while the tables are
/// checked and created: two backends starting at once do not race on
/// `CREATE TABLE`.
const LOCK_SCHEMA: &str =
    "SELECT pg_advisory_xact_lock(hashtext('tether audit tables in ' || coalesce(current_schema(), '')))";

/// Takes a transaction-scoped advisory lock per turn in `$1` (keyed by the
/// schema and the turn id), in ascending key order: the transactions of two
/// writers that write one turn's ledger run one after the other, and never
/// deadlock on each other's rows. The aggregate calls the lock function on
/// the sorted rows in order.
const LOCK_TURNS: &str = "SELECT count(pg_advisory_xact_lock(key)) FROM (
         SELECT DISTINCT hashtext(coalesce(current_schema(), '') || ' tether turn ' || turn) AS key
         FROM unnest($1::text[]) AS turn ORDER BY key
     ) AS keys";

/// How long a statement waits for a row another writer holds before the
/// group fails: 10 seconds. Groups hold rows for milliseconds; a longer wait
/// means a writer is stuck, and a `started` then fails (its tool does not
/// run) rather than waiting without end.
/// The opened turns, newest first, with their audit rows and those not `ok`.
const SELECT_TURNS: &str = "SELECT t.turn_id, t.opened_at_ms,
            (SELECT count(*) FROM tether_audit a WHERE a.turn_id = t.turn_id),
            (SELECT count(*) FROM tether_audit a WHERE a.turn_id = t.turn_id AND a.status <> 'ok')
     FROM tether_turns t WHERE $1::text IS NULL OR t.turn_id = $1 ORDER BY t.opened_at_ms DESC, t.turn_id LIMIT $2";

const SESSION: &str = "SET lock_timeout = '10s'";

const INSERT_AUDIT: &str = concat!(
    "INSERT INTO tether_audit (",
    identity_columns!(),
    ", step, code, approval, decided_by, approval_reason, detail, status, started_at_ms, finished_at_ms, duration_us)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)"
);
/// Whether rows of turn `$1` are there (a turn built without a claim).
const TURN_HAS_ROWS: &str = "SELECT EXISTS (SELECT 1 FROM tether_audit WHERE turn_id = $1)
     OR EXISTS (SELECT 1 FROM tether_ledger WHERE turn_id = $1)";
/// Inserts nothing if the id is claimed; of two writers claiming one id at
/// once, the second waits for the first's transaction and inserts nothing.
const CLAIM_TURN: &str =
    "INSERT INTO tether_turns (turn_id, opened_at_ms) VALUES ($1, $2) ON CONFLICT (turn_id) DO NOTHING";
/// Locks the row, so that its state cannot change before the transaction
/// ends.
const LEDGER_STATE: &str = "SELECT state FROM tether_ledger WHERE turn_id = $1 AND call_id = $2 FOR UPDATE";
/// Inserts nothing if another writer inserted the call id first (it waits
/// for that writer's transaction to end): the caller then reads the row.
const INSERT_STARTED: &str = concat!(
    "INSERT INTO tether_ledger (",
    identity_columns!(),
    ", approval_required, state, started_at_ms)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'started', $11)
     ON CONFLICT (turn_id, call_id) DO NOTHING"
);
const RESTART: &str =
    "UPDATE tether_ledger SET state = 'started', started_at_ms = $3, settled_at_ms = NULL, outcome = NULL,
     result = NULL WHERE turn_id = $1 AND call_id = $2";
const SETTLE: &str = "UPDATE tether_ledger SET state = 'settled', settled_at_ms = $3, outcome = $4, result = $5
     WHERE turn_id = $1 AND call_id = $2";
const SELECT_AUDIT: &str = concat!(
    "SELECT ",
    identity_columns!(),
    ", step, code, approval, decided_by, approval_reason, detail, status, started_at_ms, finished_at_ms, duration_us
     FROM tether_audit WHERE turn_id = $1 ORDER BY id"
);
const SELECT_LEDGER: &str = concat!(
    "SELECT ",
    identity_columns!(),
    ", approval_required, state, started_at_ms, settled_at_ms, outcome, result
     FROM tether_ledger WHERE turn_id = $1 ORDER BY seq"
);

/// Parks a run, or parks it again: the record replaced, the claim released.
/// Of two writers parking one run at once, the second waits for the first
/// and then replaces its row.
const PUT_PARKED: &str =
    "INSERT INTO tether_parked_runs (turn_id, run_id, parked_at_ms, claimant, claimed_at_ms, record)
     VALUES ($1, $2, $3, NULL, NULL, $4)
     ON CONFLICT (turn_id, run_id) DO UPDATE
     SET parked_at_ms = EXCLUDED.parked_at_ms, claimant = NULL, claimed_at_ms = NULL, record = EXCLUDED.record";
/// Byte order for the ids (`COLLATE "C"`), as SQLite and the memory store.
const SELECT_PARKED: &str = r#"SELECT turn_id, run_id, parked_at_ms, record FROM tether_parked_runs
     ORDER BY parked_at_ms, turn_id COLLATE "C", run_id COLLATE "C""#;
const SELECT_PARKED_OF_TURN: &str = r#"SELECT turn_id, run_id, parked_at_ms, record FROM tether_parked_runs
     WHERE turn_id = $1 ORDER BY parked_at_ms, turn_id COLLATE "C", run_id COLLATE "C""#;
/// The claim: one statement. Of two writers claiming one run at once, the
/// second waits on the row for the first's commit, then finds the claim
/// taken (the condition is checked again on the row as committed) and
/// changes nothing.
const CLAIM_PARKED: &str = "UPDATE tether_parked_runs SET claimant = $3, claimed_at_ms = $4
     WHERE turn_id = $1 AND run_id = $2 AND (claimant IS NULL OR $5)
     RETURNING record";
const PARKED_HOLDER: &str = "SELECT claimant, claimed_at_ms FROM tether_parked_runs WHERE turn_id = $1 AND run_id = $2";
const REPLACE_PARKED: &str = "UPDATE tether_parked_runs SET parked_at_ms = $3, record = $4
     WHERE turn_id = $1 AND run_id = $2 AND claimant = $5";
const DELETE_PARKED: &str = "DELETE FROM tether_parked_runs WHERE turn_id = $1 AND run_id = $2 AND claimant = $3";

/// The statements, prepared once per connection.
pub(super) struct Statements {
    lock_turns: Statement,
    turn_has_rows: Statement,
    claim_turn: Statement,
    insert_audit: Statement,
    ledger_state: Statement,
    insert_started: Statement,
    restart: Statement,
    settle: Statement,
    select_audit: Statement,
    select_ledger: Statement,
    select_turns: Statement,
    put_parked: Statement,
    select_parked: Statement,
    select_parked_of_turn: Statement,
    claim_parked: Statement,
    parked_holder: Statement,
    replace_parked: Statement,
    delete_parked: Statement,
}

/// Readies a new session: the lock wait limit, a durable commit, the tables
/// (created if missing, their version checked), the statements.
///
/// # Errors
/// The database's own error; [`StoreError::Open`] if the tables are of a
/// newer version.
pub(super) fn prepare(client: &mut Client, describe: &str) -> Result<Statements, StoreError> {
    client.batch_execute(SESSION).map_err(crate::db)?;
    // `started` must be durable when its commit returns: a server (or role)
    // configured with `synchronous_commit = off` is overridden for this
    // session. `local`, `on` and the remote levels all flush locally first.
    let synchronous: String =
        client.query_one("SHOW synchronous_commit", &[]).map_err(crate::db)?.try_get(0).map_err(crate::db)?;
    if synchronous == "off" {
        tracing::info!(database = describe, "synchronous_commit is off; this session sets it on");
        client.batch_execute("SET synchronous_commit = on").map_err(crate::db)?;
    }
    create_tables(client, describe)?;
    Ok(Statements {
        lock_turns: client.prepare(LOCK_TURNS).map_err(crate::db)?,
        turn_has_rows: client.prepare(TURN_HAS_ROWS).map_err(crate::db)?,
        claim_turn: client.prepare(CLAIM_TURN).map_err(crate::db)?,
        insert_audit: client.prepare(INSERT_AUDIT).map_err(crate::db)?,
        ledger_state: client.prepare(LEDGER_STATE).map_err(crate::db)?,
        insert_started: client.prepare(INSERT_STARTED).map_err(crate::db)?,
        restart: client.prepare(RESTART).map_err(crate::db)?,
        settle: client.prepare(SETTLE).map_err(crate::db)?,
        select_audit: client.prepare(SELECT_AUDIT).map_err(crate::db)?,
        select_ledger: client.prepare(SELECT_LEDGER).map_err(crate::db)?,
        select_turns: client.prepare(SELECT_TURNS).map_err(crate::db)?,
        put_parked: client.prepare(PUT_PARKED).map_err(crate::db)?,
        select_parked: client.prepare(SELECT_PARKED).map_err(crate::db)?,
        select_parked_of_turn: client.prepare(SELECT_PARKED_OF_TURN).map_err(crate::db)?,
        claim_parked: client.prepare(CLAIM_PARKED).map_err(crate::db)?,
        parked_holder: client.prepare(PARKED_HOLDER).map_err(crate::db)?,
        replace_parked: client.prepare(REPLACE_PARKED).map_err(crate::db)?,
        delete_parked: client.prepare(DELETE_PARKED).map_err(crate::db)?,
    })
}

fn create_tables(client: &mut Client, describe: &str) -> Result<(), StoreError> {
    let mut transaction = client.transaction().map_err(crate::db)?;
    transaction.execute(LOCK_SCHEMA, &[]).map_err(crate::db)?;
    let exists: bool = transaction
        .query_one("SELECT to_regclass('tether_schema') IS NOT NULL", &[])
        .map_err(crate::db)?
        .try_get(0)
        .map_err(crate::db)?;
    let version = if exists {
        transaction
            .query_opt("SELECT version FROM tether_schema", &[])
            .map_err(crate::db)?
            .map(|row| row.try_get::<_, i32>(0))
            .transpose()
            .map_err(crate::db)?
    } else {
        None
    };
    match version {
        None => {
            transaction.batch_execute(CREATE).map_err(crate::db)?;
            transaction
                .execute("INSERT INTO tether_schema (version) VALUES ($1)", &[&SCHEMA_VERSION])
                .map_err(crate::db)?;
            tracing::info!(database = describe, version = SCHEMA_VERSION, "created the audit tables");
        }
        Some(version) if version > SCHEMA_VERSION => {
            return Err(StoreError::Open {
                path: describe.to_owned(),
                reason: format!(
                    "its audit tables have schema version `{version}`, newer than this build's `{SCHEMA_VERSION}`: \
                     upgrade this backend, or give it another database or schema"
                ),
            });
        }
        Some(version) if version < SCHEMA_VERSION => {
            let from = usize::try_from(version.max(1) - 1).unwrap_or(0);
            for migration in MIGRATIONS.iter().skip(from) {
                transaction.batch_execute(migration).map_err(crate::db)?;
            }
            transaction.execute("UPDATE tether_schema SET version = $1", &[&SCHEMA_VERSION]).map_err(crate::db)?;
            tracing::info!(
                database = describe,
                from = version,
                to = SCHEMA_VERSION,
                "brought the audit tables up to date"
            );
        }
        Some(_) => {}
    }
    transaction.commit().map_err(crate::db)?;
    Ok(())
}

/// The version recorded in `tether_schema`.
pub(super) fn version(client: &mut impl GenericClient) -> Result<i32, StoreError> {
    client.query_one("SELECT version FROM tether_schema", &[]).map_err(crate::db)?.try_get(0).map_err(crate::db)
}

/// The identity's values, in the order of `identity_columns!`; `depth` is
/// the call's depth as stored.
fn identity_params<'a>(call: &'a CallIdentity, depth: &'a i64) -> [&'a (dyn ToSql + Sync); IDENTITY_COLUMNS] {
    [
        &call.turn_id,
        &call.call_id,
        &call.parent_call_id,
        &call.script_run_id,
        &call.tool,
        &call.origin,
        depth,
        &call.args,
        &call.args_truncated,
    ]
}

/// The identity in a row's first [`IDENTITY_COLUMNS`] columns.
fn identity_from(row: &Row) -> Result<CallIdentity, StoreError> {
    let depth: i64 = row.try_get(6).map_err(crate::db)?;
    Ok(CallIdentity {
        turn_id: row.try_get(0).map_err(crate::db)?,
        call_id: row.try_get(1).map_err(crate::db)?,
        parent_call_id: row.try_get(2).map_err(crate::db)?,
        script_run_id: row.try_get(3).map_err(crate::db)?,
        tool: row.try_get(4).map_err(crate::db)?,
        origin: row.try_get(5).map_err(crate::db)?,
        depth: u32::try_from(depth)
            .map_err(|_| StoreError::Other(format!("a stored call depth `{depth}` is out of range")))?,
        args: row.try_get(7).map_err(crate::db)?,
        args_truncated: row.try_get(8).map_err(crate::db)?,
    })
}

impl Statements {
    /// Locks `turns` until the transaction ends (see [`LOCK_TURNS`]).
    pub(super) fn lock_turns(&self, c: &mut impl GenericClient, turns: &[&str]) -> Result<(), postgres::Error> {
        c.execute(&self.lock_turns, &[&turns])?;
        Ok(())
    }

    /// Claims `turn_id`; `false` if it is claimed or has rows.
    pub(super) fn claim_turn(
        &self,
        c: &mut impl GenericClient,
        turn_id: &str,
        opened_at_ms: i64,
    ) -> Result<bool, postgres::Error> {
        let has_rows: bool = c.query_one(&self.turn_has_rows, &[&turn_id])?.try_get(0)?;
        Ok(!has_rows && c.execute(&self.claim_turn, &[&turn_id, &opened_at_ms])? == 1)
    }

    /// Appends an audit row.
    pub(super) fn insert_audit(&self, c: &mut impl GenericClient, r: &AuditRecord) -> Result<(), postgres::Error> {
        let depth = i64::from(r.call.depth);
        let (step, approval, status) =
            (r.step.map(Step::as_str), r.approval.map(ApprovalVerdict::as_str), r.status.as_str());
        let rest: [&(dyn ToSql + Sync); 10] = [
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
        let params: Vec<_> = identity_params(&r.call, &depth).into_iter().chain(rest).collect();
        c.execute(&self.insert_audit, &params)?;
        Ok(())
    }

    /// The state of the ledger row of `(turn_id, call_id)`, if there is one,
    /// locked until the transaction ends.
    pub(super) fn ledger_state(
        &self,
        c: &mut impl GenericClient,
        turn_id: &str,
        call_id: &str,
    ) -> Result<Option<LedgerState>, postgres::Error> {
        let row = c.query_opt(&self.ledger_state, &[&turn_id, &call_id])?;
        row.map(|row| row.try_get::<_, &str>(0).map(LedgerState::from_stored)).transpose()
    }

    /// Inserts `entry` as a `started` row; `false` if the call id is taken.
    pub(super) fn insert_started(&self, c: &mut impl GenericClient, e: &LedgerEntry) -> Result<bool, postgres::Error> {
        let depth = i64::from(e.call.depth);
        let rest: [&(dyn ToSql + Sync); 2] = [&e.approval_required, &e.started_at_ms];
        let params: Vec<_> = identity_params(&e.call, &depth).into_iter().chain(rest).collect();
        Ok(c.execute(&self.insert_started, &params)? == 1)
    }

    /// Puts the settled row of `entry`'s call back to `started` at `entry.started_at_ms`.
    pub(super) fn restart(&self, c: &mut impl GenericClient, e: &LedgerEntry) -> Result<(), postgres::Error> {
        c.execute(&self.restart, &[&e.call.turn_id, &e.call.call_id, &e.started_at_ms])?;
        Ok(())
    }

    /// Marks the row of `(turn_id, call_id)` settled, with what the tool returned.
    pub(super) fn settle(
        &self,
        c: &mut impl GenericClient,
        turn_id: &str,
        call_id: &str,
        outcome: CallStatus,
        at_ms: i64,
        result: Option<&str>,
    ) -> Result<(), postgres::Error> {
        c.execute(&self.settle, &[&turn_id, &call_id, &at_ms, &outcome.as_str(), &result])?;
        Ok(())
    }

    /// The turn's audit rows, in the order written.
    pub(super) fn audit_rows(&self, c: &mut impl GenericClient, turn_id: &str) -> Result<Vec<AuditRecord>, StoreError> {
        let n = IDENTITY_COLUMNS;
        c.query(&self.select_audit, &[&turn_id])
            .map_err(crate::db)?
            .iter()
            .map(|row| {
                let step: Option<&str> = row.try_get(n).map_err(crate::db)?;
                let approval: Option<&str> = row.try_get(n + 2).map_err(crate::db)?;
                Ok(AuditRecord {
                    call: identity_from(row)?,
                    step: step.and_then(Step::parse),
                    code: row.try_get(n + 1).map_err(crate::db)?,
                    approval: approval.and_then(ApprovalVerdict::parse),
                    decided_by: row.try_get(n + 3).map_err(crate::db)?,
                    approval_reason: row.try_get(n + 4).map_err(crate::db)?,
                    detail: row.try_get(n + 5).map_err(crate::db)?,
                    status: CallStatus::from_stored(row.try_get(n + 6).map_err(crate::db)?),
                    started_at_ms: row.try_get(n + 7).map_err(crate::db)?,
                    finished_at_ms: row.try_get(n + 8).map_err(crate::db)?,
                    duration_us: row.try_get(n + 9).map_err(crate::db)?,
                })
            })
            .collect()
    }

    /// The turn's ledger rows, in the order they first started.
    pub(super) fn ledger_rows(
        &self,
        c: &mut impl GenericClient,
        turn_id: &str,
    ) -> Result<Vec<LedgerEntry>, StoreError> {
        let n = IDENTITY_COLUMNS;
        c.query(&self.select_ledger, &[&turn_id])
            .map_err(crate::db)?
            .iter()
            .map(|row| {
                let outcome: Option<&str> = row.try_get(n + 4).map_err(crate::db)?;
                Ok(LedgerEntry {
                    call: identity_from(row)?,
                    approval_required: row.try_get(n).map_err(crate::db)?,
                    state: LedgerState::from_stored(row.try_get(n + 1).map_err(crate::db)?),
                    started_at_ms: row.try_get(n + 2).map_err(crate::db)?,
                    settled_at_ms: row.try_get(n + 3).map_err(crate::db)?,
                    outcome: outcome.and_then(CallStatus::parse),
                    result: row.try_get(n + 5).map_err(crate::db)?,
                })
            })
            .collect()
    }

    // Parked runs: each a statement of its own, in autocommit (the session
    // is never inside a group's transaction here), so each is committed
    // (flushed, with `synchronous_commit` on) when it returns.

    /// Inserts `row`, or replaces the row of its run, releasing its claim.
    pub(super) fn put_parked(&self, c: &mut impl GenericClient, row: &ParkedRow) -> Result<(), StoreError> {
        c.execute(&self.put_parked, &[&row.turn_id, &row.run_id, &row.parked_at_ms, &row.record]).map_err(crate::db)?;
        Ok(())
    }

    /// The parked runs of `turn_id` (all with `None`), oldest first.
    /// The opened turns (only `turn_id` with `Some`), newest first, at most `limit`.
    pub(super) fn turn_rows(
        &self,
        c: &mut impl GenericClient,
        turn_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TurnListing>, postgres::Error> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = c.query(&self.select_turns, &[&turn_id, &limit])?;
        let count = |row: &Row, i| row.try_get::<_, i64>(i).map(|n| u64::try_from(n).unwrap_or(0));
        rows.iter()
            .map(|row| {
                Ok(TurnListing {
                    turn_id: row.try_get(0)?,
                    opened_at_ms: row.try_get(1)?,
                    calls: count(row, 2)?,
                    not_ok: count(row, 3)?,
                })
            })
            .collect()
    }

    pub(super) fn parked_rows(
        &self,
        c: &mut impl GenericClient,
        turn_id: Option<&str>,
    ) -> Result<Vec<ParkedRow>, StoreError> {
        let rows = match turn_id {
            Some(turn_id) => c.query(&self.select_parked_of_turn, &[&turn_id]),
            None => c.query(&self.select_parked, &[]),
        }
        .map_err(crate::db)?;
        rows.iter()
            .map(|row| {
                Ok(ParkedRow {
                    turn_id: row.try_get(0).map_err(crate::db)?,
                    run_id: row.try_get(1).map_err(crate::db)?,
                    parked_at_ms: row.try_get(2).map_err(crate::db)?,
                    record: row.try_get(3).map_err(crate::db)?,
                })
            })
            .collect()
    }

    /// Claims the run for `claimant` if nobody holds it or `take_over`: its record.
    pub(super) fn claim_parked(
        &self,
        c: &mut impl GenericClient,
        turn_id: &str,
        run_id: &str,
        claimant: &str,
        take_over: bool,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError> {
        let row =
            c.query_opt(&self.claim_parked, &[&turn_id, &run_id, &claimant, &now_ms, &take_over]).map_err(crate::db)?;
        row.map(|row| row.try_get(0)).transpose().map_err(crate::db)
    }

    /// Who holds the run's claim.
    pub(super) fn parked_holder(
        &self,
        c: &mut impl GenericClient,
        turn_id: &str,
        run_id: &str,
    ) -> Result<Holder, StoreError> {
        let Some(row) = c.query_opt(&self.parked_holder, &[&turn_id, &run_id]).map_err(crate::db)? else {
            return Ok(Holder::NotParked);
        };
        let claimant: Option<String> = row.try_get(0).map_err(crate::db)?;
        let since_ms: Option<i64> = row.try_get(1).map_err(crate::db)?;
        Ok(match claimant {
            None => Holder::Free,
            Some(claimant) => Holder::Claimed { claimant, since_ms: since_ms.unwrap_or_default() },
        })
    }

    /// Replaces the record of `row`'s run if `claimant` holds it: whether it did.
    pub(super) fn replace_parked(
        &self,
        c: &mut impl GenericClient,
        row: &ParkedRow,
        claimant: &str,
    ) -> Result<bool, StoreError> {
        let params: [&(dyn ToSql + Sync); 5] = [&row.turn_id, &row.run_id, &row.parked_at_ms, &row.record, &claimant];
        Ok(c.execute(&self.replace_parked, &params).map_err(crate::db)? == 1)
    }

    /// Deletes the run's row if `claimant` holds it: whether it did.
    pub(super) fn delete_parked(
        &self,
        c: &mut impl GenericClient,
        turn_id: &str,
        run_id: &str,
        claimant: &str,
    ) -> Result<bool, StoreError> {
        Ok(c.execute(&self.delete_parked, &[&turn_id, &run_id, &claimant]).map_err(crate::db)? == 1)
    }
}
