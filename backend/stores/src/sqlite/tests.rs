use super::*;
use crate::suite::{Harness, Reject, Table, entry, parked_run, record, store_suite};
use tether_turn::ToolReplay;
use tether_turn::{AuditStore, LedgerState};

/// A SQLite file in a fresh directory.
struct SqliteHarness {
    dir: tempfile::TempDir,
}

impl SqliteHarness {
    fn path(&self) -> PathBuf {
        self.dir.path().join("audit.db")
    }
}

#[async_trait::async_trait]
impl Harness for SqliteHarness {
    type Db = Sqlite;

    async fn new() -> Self {
        SqliteHarness { dir: tempfile::tempdir().unwrap() }
    }

    fn open(&self, capacity: usize) -> GroupCommitStore<Sqlite> {
        SqliteAuditStore::with_queue_capacity(self.path(), capacity).store
    }

    fn unopenable(&self) -> GroupCommitStore<Sqlite> {
        // The database path is a directory.
        SqliteAuditStore::new(self.dir.path()).store
    }

    async fn committed(&self, table: Table) -> i64 {
        let table = match table {
            Table::Audit => "audit",
            Table::Ledger => "ledger",
            Table::Parked => "parked_runs",
        };
        let c = Connection::open(self.path()).unwrap();
        c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0)).unwrap()
    }

    async fn reject_ledger_inserts(&self, how: Option<Reject>) {
        let c = Connection::open(self.path()).unwrap();
        c.execute_batch("DROP TRIGGER IF EXISTS refuse").unwrap();
        // ABORT undoes the statement alone; ROLLBACK ends the transaction.
        let (action, message) = match how {
            None => return,
            Some(Reject::Alone(message)) => ("ABORT", message),
            Some(Reject::Group(message)) => ("ROLLBACK", message),
        };
        c.execute_batch(&format!(
            "CREATE TRIGGER refuse BEFORE INSERT ON ledger BEGIN SELECT RAISE({action}, '{message}'); END;"
        ))
        .unwrap();
    }

    async fn overwrite_parked_record(&self, turn_id: &str, run_id: &str, record: &str) {
        let c = Connection::open(self.path()).unwrap();
        let changed = c
            .execute("UPDATE parked_runs SET record = ?3 WHERE turn_id = ?1 AND run_id = ?2", [turn_id, run_id, record])
            .unwrap();
        assert_eq!(changed, 1);
    }
}

store_suite!(SqliteHarness);

#[tokio::test]
async fn the_database_is_created_on_first_use_in_wal_with_full_sync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let store = SqliteAuditStore::new(&path);
    assert!(!path.exists(), "nothing is created before first use");
    assert_eq!(store.ledger("t1").await.unwrap(), vec![]);
    assert!(path.exists());
    let (mode, sync) = store.settings().await.unwrap();
    assert_eq!(mode.to_ascii_lowercase(), "wal");
    assert_eq!(sync, 2, "synchronous=FULL");
}

#[tokio::test]
async fn a_path_in_a_folder_that_does_not_exist_fails_at_start_up_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo/audit.db");
    let error = SqliteAuditStore::new(&path).ready().await.unwrap_err().to_string();
    assert!(error.contains("does not exist; create it, or correct the path"), "{error}");
    assert!(!dir.path().join("typo").exists(), "no folder is made for a mistyped path");
}

#[tokio::test]
async fn an_older_database_gets_the_new_columns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, turn_id TEXT NOT NULL, call_id TEXT NOT NULL,
                parent_call_id TEXT, script_run_id TEXT, tool TEXT NOT NULL, origin TEXT NOT NULL, args TEXT NOT NULL,
                args_truncated INTEGER NOT NULL, step TEXT, code TEXT, approval TEXT, decided_by TEXT, status TEXT NOT NULL,
                started_at_ms INTEGER NOT NULL, finished_at_ms INTEGER NOT NULL, duration_us INTEGER NOT NULL);
             CREATE TABLE ledger (seq INTEGER PRIMARY KEY AUTOINCREMENT, turn_id TEXT NOT NULL, call_id TEXT NOT NULL,
                parent_call_id TEXT, script_run_id TEXT, tool TEXT NOT NULL, origin TEXT NOT NULL, args TEXT NOT NULL,
                approval_required INTEGER NOT NULL, state TEXT NOT NULL CHECK (state IN ('started', 'settled')),
                started_at_ms INTEGER NOT NULL, settled_at_ms INTEGER, outcome TEXT, UNIQUE (turn_id, call_id));
             INSERT INTO ledger (turn_id, call_id, tool, origin, args, approval_required, state, started_at_ms)
                VALUES ('t1', 'old', 'send_email', 'model', '{}', 1, 'started', 1);",
        )
        .unwrap();
    }
    let store = SqliteAuditStore::new(&path);
    let old = store.ledger("t1").await.unwrap();
    assert_eq!((old[0].call.depth, old[0].call.args_truncated, old[0].state), (0, false, LedgerState::Started));
    store.ledger_started(entry("p/1"), ToolReplay::Never).await.unwrap();
    assert_eq!(store.ledger("t1").await.unwrap()[1], entry("p/1"));
    // The approval's reason and the failure's detail have columns, and turn
    // ids can be claimed; the turn the older file holds rows of is taken.
    store.enqueue(StoreWrite::Audit(record("c1"))).await.unwrap().await.unwrap();
    assert_eq!(store.audit_log("t1").await.unwrap(), vec![record("c1")]);
    assert!(matches!(store.claim_turn("t1", 1).await, Err(StoreError::TurnTaken { .. })));
    store.claim_turn("t-new", 1).await.unwrap();
    // And runs can be parked.
    let run = parked_run("t-new", "run-1", 5);
    store.park_run(&run).await.unwrap();
    assert_eq!(store.claim_parked("t-new", "run-1", "a", false, 6).await.unwrap(), run);
}

#[test]
fn the_bundled_sqlite_supports_returning() {
    // The parked runs' claim is one `UPDATE … RETURNING` (SQLite 3.35).
    assert!(rusqlite::version_number() >= 3_035_000, "SQLite {} lacks RETURNING", rusqlite::version());
}
