//! The default [`AuditStore`]: SQLite (bundled), WAL, `synchronous=FULL`.
//!
//! Threading: one connection behind a `Mutex`, every write a short single
//! statement. The turn calls the store on tokio's blocking pool
//! (`spawn_blocking`), because `synchronous=FULL` makes each commit wait for
//! an fsync, which can take milliseconds — too long to block an async worker.
//! The one exception is a call dropped mid-way, whose audit row is written
//! from `Drop` (no await is possible there); that path is rare (cancellation).

use super::approval::ApprovalVerdict;
use super::audit::{AuditRecord, AuditStore, LedgerEntry, LedgerState};
use super::call::CallStatus;
use super::step::Step;
use super::error::StoreError;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    turn_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    parent_call_id TEXT,
    script_run_id TEXT,
    tool TEXT NOT NULL,
    origin TEXT NOT NULL,
    args TEXT NOT NULL,
    args_truncated INTEGER NOT NULL,
    step TEXT,
    code TEXT,
    approval TEXT,
    decided_by TEXT,
    status TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL,
    finished_at_ms INTEGER NOT NULL,
    duration_us INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_by_turn ON audit (turn_id);
CREATE TABLE IF NOT EXISTS ledger (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    turn_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    parent_call_id TEXT,
    script_run_id TEXT,
    tool TEXT NOT NULL,
    origin TEXT NOT NULL,
    args TEXT NOT NULL,
    approval_required INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('started', 'settled')),
    started_at_ms INTEGER NOT NULL,
    settled_at_ms INTEGER,
    outcome TEXT,
    UNIQUE (turn_id, call_id)
);
";

/// An audit log and effect ledger in one SQLite file, created (with its
/// tables) on first use. Several turns may share one store.
#[derive(Debug)]
pub struct SqliteAuditStore {
    path: PathBuf,
    connection: Mutex<Option<Connection>>,
}

impl SqliteAuditStore {
    /// A store at `path`. Nothing is opened until the first read or write.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteAuditStore { path: path.into(), connection: Mutex::new(None) }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut guard = self.connection.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = Some(self.open()?);
        }
        match guard.as_ref() {
            Some(connection) => f(connection),
            None => Err(StoreError::Other("the audit database is not open".into())),
        }
    }

    fn open(&self) -> Result<Connection, StoreError> {
        let fail = |reason: String| StoreError::Open { path: self.path.display().to_string(), reason };
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
        }
        let connection = Connection::open(&self.path)?;
        connection.busy_timeout(Duration::from_secs(5))?;
        let mode: String = connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(fail(format!("the database refused WAL mode (`{mode}`)")));
        }
        // FULL: a commit returns only once it is on disk, so `started` is
        // durable before the tool runs, even across a power loss.
        connection.pragma_update(None, "synchronous", "FULL")?;
        connection.execute_batch(SCHEMA)?;
        Ok(connection)
    }
}

fn opt_str<T>(value: Option<T>, f: impl FnOnce(T) -> &'static str) -> Option<&'static str> {
    value.map(f)
}

impl AuditStore for SqliteAuditStore {
    fn record(&self, r: &AuditRecord) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "INSERT INTO audit (turn_id, call_id, parent_call_id, script_run_id, tool, origin, args, args_truncated,
                                    step, code, approval, decided_by, status, started_at_ms, finished_at_ms, duration_us)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
                params![
                    r.turn_id,
                    r.call_id,
                    r.parent_call_id,
                    r.script_run_id,
                    r.tool,
                    r.origin,
                    r.args,
                    r.args_truncated,
                    opt_str(r.step, Step::as_str),
                    r.code,
                    opt_str(r.approval, ApprovalVerdict::as_str),
                    r.decided_by,
                    r.status.as_str(),
                    r.started_at_ms,
                    r.finished_at_ms,
                    r.duration_us,
                ],
            )?;
            Ok(())
        })
    }

    fn ledger_started(&self, e: &LedgerEntry) -> Result<(), StoreError> {
        self.with(|c| {
            let inserted = c.execute(
                "INSERT INTO ledger (turn_id, call_id, parent_call_id, script_run_id, tool, origin, args, approval_required,
                                     state, started_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'started', ?9)",
                params![e.turn_id, e.call_id, e.parent_call_id, e.script_run_id, e.tool, e.origin, e.args, e.approval_required, e.started_at_ms],
            );
            match inserted {
                Ok(_) => Ok(()),
                Err(rusqlite::Error::SqliteFailure(error, _)) if error.code == ErrorCode::ConstraintViolation => {
                    Err(StoreError::DuplicateLedgerRow(e.call_id.clone()))
                }
                Err(error) => Err(error.into()),
            }
        })
    }

    fn ledger_settled(
        &self,
        turn_id: &str,
        call_id: &str,
        outcome: CallStatus,
        settled_at_ms: i64,
    ) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "UPDATE ledger SET state = 'settled', settled_at_ms = ?3, outcome = ?4 WHERE turn_id = ?1 AND call_id = ?2",
                params![turn_id, call_id, settled_at_ms, outcome.as_str()],
            )?;
            Ok(())
        })
    }

    fn ledger(&self, turn_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        self.with(|c| {
            let mut statement = c.prepare(
                "SELECT turn_id, call_id, parent_call_id, script_run_id, tool, origin, args, approval_required, state,
                        started_at_ms, settled_at_ms, outcome
                 FROM ledger WHERE turn_id = ?1 ORDER BY seq",
            )?;
            let rows = statement.query_map([turn_id], |row| {
                let state: String = row.get(8)?;
                let outcome: Option<String> = row.get(11)?;
                Ok(LedgerEntry {
                    turn_id: row.get(0)?,
                    call_id: row.get(1)?,
                    parent_call_id: row.get(2)?,
                    script_run_id: row.get(3)?,
                    tool: row.get(4)?,
                    origin: row.get(5)?,
                    args: row.get(6)?,
                    approval_required: row.get(7)?,
                    state: if state == "settled" { LedgerState::Settled } else { LedgerState::Started },
                    started_at_ms: row.get(9)?,
                    settled_at_ms: row.get(10)?,
                    outcome: outcome.as_deref().and_then(CallStatus::parse),
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    fn audit_log(&self, turn_id: &str) -> Result<Vec<AuditRecord>, StoreError> {
        self.with(|c| {
            let mut statement = c.prepare(
                "SELECT turn_id, call_id, parent_call_id, script_run_id, tool, origin, args, args_truncated, step, code,
                        approval, decided_by, status, started_at_ms, finished_at_ms, duration_us
                 FROM audit WHERE turn_id = ?1 ORDER BY id",
            )?;
            let rows = statement.query_map([turn_id], |row| {
                let step: Option<String> = row.get(8)?;
                let approval: Option<String> = row.get(10)?;
                let status: String = row.get(12)?;
                Ok(AuditRecord {
                    turn_id: row.get(0)?,
                    call_id: row.get(1)?,
                    parent_call_id: row.get(2)?,
                    script_run_id: row.get(3)?,
                    tool: row.get(4)?,
                    origin: row.get(5)?,
                    args: row.get(6)?,
                    args_truncated: row.get(7)?,
                    step: step.as_deref().and_then(Step::parse),
                    code: row.get(9)?,
                    approval: approval.as_deref().and_then(ApprovalVerdict::parse),
                    decided_by: row.get(11)?,
                    status: CallStatus::parse(&status).unwrap_or(CallStatus::Failed),
                    started_at_ms: row.get(13)?,
                    finished_at_ms: row.get(14)?,
                    duration_us: row.get(15)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

impl SqliteAuditStore {
    /// The journal mode and synchronous level in force (opens the database).
    ///
    /// # Errors
    /// If the database cannot be opened or read.
    pub fn settings(&self) -> Result<(String, i64), StoreError> {
        self.with(|c| {
            let mode: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
            let sync: Option<i64> = c.query_row("PRAGMA synchronous", [], |r| r.get(0)).optional()?;
            Ok((mode, sync.unwrap_or(-1)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(call_id: &str) -> LedgerEntry {
        LedgerEntry {
            turn_id: "t1".into(),
            call_id: call_id.into(),
            parent_call_id: Some("p".into()),
            script_run_id: Some("r".into()),
            tool: "send_email".into(),
            origin: "script".into(),
            args: "{}".into(),
            approval_required: true,
            state: LedgerState::Started,
            started_at_ms: 1,
            settled_at_ms: None,
            outcome: None,
        }
    }

    #[test]
    fn the_database_is_created_on_first_use_in_wal_with_full_sync() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/audit.db");
        let store = SqliteAuditStore::new(&path);
        assert!(!path.exists(), "nothing is created before first use");
        assert_eq!(store.ledger("t1").unwrap(), vec![]);
        assert!(path.exists());
        let (mode, sync) = store.settings().unwrap();
        assert_eq!(mode.to_ascii_lowercase(), "wal");
        assert_eq!(sync, 2, "synchronous=FULL");
    }

    #[test]
    fn ledger_rows_start_settle_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.db");
        {
            let store = SqliteAuditStore::new(&path);
            store.ledger_started(&entry("p/1")).unwrap();
            store.ledger_started(&entry("p/2")).unwrap();
            assert!(matches!(store.ledger_started(&entry("p/1")), Err(StoreError::DuplicateLedgerRow(_))));
            store.ledger_settled("t1", "p/1", CallStatus::Ok, 5).unwrap();
        }
        // A new connection (as after a crash) sees the same rows.
        let store = SqliteAuditStore::new(&path);
        let rows = store.ledger("t1").unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].state, rows[0].outcome, rows[0].settled_at_ms),
            (LedgerState::Settled, Some(CallStatus::Ok), Some(5))
        );
        assert_eq!(rows[1], entry("p/2"));
        assert_eq!(store.ledger("other").unwrap(), vec![]);
    }

    #[test]
    fn audit_rows_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteAuditStore::new(dir.path().join("audit.db"));
        let record = AuditRecord {
            turn_id: "t1".into(),
            call_id: "c1".into(),
            parent_call_id: None,
            script_run_id: None,
            tool: "send_email".into(),
            origin: "model".into(),
            args: r#"{"to":"x"}"#.into(),
            args_truncated: false,
            step: Some(Step::Approval),
            code: Some("approval_denied".into()),
            approval: Some(ApprovalVerdict::Denied),
            decided_by: Some("policy".into()),
            status: CallStatus::Failed,
            started_at_ms: 10,
            finished_at_ms: 11,
            duration_us: 1000,
        };
        store.record(&record).unwrap();
        assert_eq!(store.audit_log("t1").unwrap(), vec![record.clone()]);
        assert_eq!(record.display_name(), Some("Approval denied"));
    }
}
