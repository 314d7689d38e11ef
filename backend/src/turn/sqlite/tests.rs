// The writer's hold is a std mutex that the writer THREAD waits on; the awaits
// made while a test holds it only enqueue, which never needs the writer.
#![allow(clippy::await_holding_lock)]

use super::*;
use crate::turn::approval::ApprovalVerdict;
use crate::turn::audit::{CallIdentity, LedgerState};
use crate::turn::call::CallStatus;
use crate::turn::step::Step;
use crate::turn::tool::ToolReplay;
use futures::FutureExt;

fn identity(call_id: &str) -> CallIdentity {
    CallIdentity {
        turn_id: "t1".into(),
        call_id: call_id.into(),
        parent_call_id: Some("p".into()),
        script_run_id: Some("r".into()),
        tool: "send_email".into(),
        origin: "script".into(),
        depth: 1,
        args: "{}".into(),
        args_truncated: true,
    }
}

fn entry(call_id: &str) -> LedgerEntry {
    LedgerEntry::started(identity(call_id), true, 1)
}

fn record(call_id: &str) -> AuditRecord {
    AuditRecord {
        call: CallIdentity { origin: "model".into(), depth: 0, parent_call_id: None, ..identity(call_id) },
        step: Some(Step::Approval),
        code: Some("approval_denied".into()),
        approval: Some(ApprovalVerdict::Denied),
        decided_by: Some("policy".into()),
        status: CallStatus::Failed,
        started_at_ms: 10,
        finished_at_ms: 11,
        duration_us: 1000,
    }
}

fn settled(call_id: &str, at: i64) -> StoreWrite {
    StoreWrite::Settled { turn_id: "t1".into(), call_id: call_id.into(), outcome: CallStatus::Ok, settled_at_ms: at }
}

/// Counts rows through a connection of its own: it sees committed data only.
fn committed(path: &Path, table: &str) -> i64 {
    let c = Connection::open(path).unwrap();
    c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn the_database_is_created_on_first_use_in_wal_with_full_sync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/audit.db");
    let store = SqliteAuditStore::new(&path);
    assert!(!path.exists(), "nothing is created before first use");
    assert_eq!(store.ledger("t1").await.unwrap(), vec![]);
    assert!(path.exists());
    let (mode, sync) = store.settings().await.unwrap();
    assert_eq!(mode.to_ascii_lowercase(), "wal");
    assert_eq!(sync, 2, "synchronous=FULL");
}

#[tokio::test]
async fn ledger_rows_start_settle_follow_the_replay_rule_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    {
        let store = SqliteAuditStore::new(&path);
        store.ledger_started(entry("p/1"), ToolReplay::Never).await.unwrap();
        store.ledger_started(entry("p/2"), ToolReplay::Safe).await.unwrap();
        let started = store.ledger_started(entry("p/1"), ToolReplay::Safe).await;
        assert!(matches!(started, Err(StoreError::Replayed { state: LedgerState::Started, .. })), "{started:?}");
        store.enqueue(settled("p/1", 5)).await.unwrap().await.unwrap();
        store.enqueue(settled("p/2", 6)).await.unwrap().await.unwrap();
        let ran = store.ledger_started(entry("p/1"), ToolReplay::Never).await;
        assert!(matches!(ran, Err(StoreError::Replayed { state: LedgerState::Settled, .. })), "{ran:?}");
        // A replay-safe tool restarts its settled row.
        store.ledger_started(LedgerEntry { started_at_ms: 7, ..entry("p/2") }, ToolReplay::Safe).await.unwrap();
    }
    // A new store (as after a crash) sees the same rows.
    let store = SqliteAuditStore::new(&path);
    let rows = store.ledger("t1").await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0].state, rows[0].outcome, rows[0].settled_at_ms),
        (LedgerState::Settled, Some(CallStatus::Ok), Some(5))
    );
    assert_eq!(rows[1], LedgerEntry { started_at_ms: 7, ..entry("p/2") }, "restarted: settled fields cleared");
    assert_eq!(store.ledger("other").await.unwrap(), vec![]);
}

#[tokio::test]
async fn audit_rows_round_trip_with_the_same_identity_columns_as_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteAuditStore::new(dir.path().join("audit.db"));
    let row = record("c1");
    store.enqueue(StoreWrite::Audit(row.clone())).await.unwrap().await.unwrap();
    assert_eq!(store.audit_log("t1").await.unwrap(), vec![row.clone()]);
    assert_eq!(row.display_name(), Some("Approval denied"));
    store.ledger_started(LedgerEntry::started(row.call.clone(), false, 3), ToolReplay::Never).await.unwrap();
    assert_eq!(store.ledger("t1").await.unwrap()[0].call, row.call);
}

#[tokio::test]
async fn started_is_on_disk_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let store = SqliteAuditStore::new(&path);
    store.ledger_started(entry("p/1"), ToolReplay::Never).await.unwrap();
    assert_eq!(committed(&path, "ledger"), 1, "another connection sees the row: it is committed");
}

#[tokio::test]
async fn reads_see_every_write_enqueued_before_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteAuditStore::new(dir.path().join("audit.db"));
    for n in 0..20 {
        // Not awaited: enqueued in order, committed by a later group.
        store.try_enqueue(StoreWrite::Audit(record(&format!("c{n}")))).unwrap();
    }
    store.try_enqueue(StoreWrite::Started { entry: entry("p/1"), replay: ToolReplay::Never }).unwrap();
    store.try_enqueue(settled("p/1", 9)).unwrap();
    let audit = store.audit_log("t1").await.unwrap();
    assert_eq!(audit.iter().map(|r| r.call.call_id.clone()).collect::<Vec<_>>(), (0..20).map(|n| format!("c{n}")).collect::<Vec<_>>());
    assert_eq!(store.ledger("t1").await.unwrap()[0].state, LedgerState::Settled);
}

#[tokio::test]
async fn queued_writes_are_committed_together_in_one_group() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteAuditStore::new(dir.path().join("audit.db"));
    store.settings().await.unwrap(); // opened: the group below is all writes
    let held = store.hold_writer();
    let mut commits = Vec::new();
    for n in 0..100 {
        let write = StoreWrite::Started { entry: entry(&format!("p/{n}")), replay: ToolReplay::Never };
        commits.push(store.enqueue(write).await.unwrap());
    }
    drop(held);
    for commit in commits {
        commit.await.unwrap();
    }
    assert_eq!(store.stats(), StoreStats { commits: 1, writes: 100 }, "100 rows, one transaction, one fsync");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_started_rows_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteAuditStore::new(dir.path().join("audit.db")));
    store.settings().await.unwrap();
    let rows = 64;
    let tasks: Vec<_> = (0..rows)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move { store.ledger_started(entry(&format!("p/{n}")), ToolReplay::Never).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let stats = store.stats();
    assert_eq!(stats.writes, rows);
    assert!(stats.commits < rows, "{rows} rows took {} commits: no grouping", stats.commits);
}

#[tokio::test]
async fn a_failed_group_is_reported_to_every_waiter_and_a_failed_write_to_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let store = SqliteAuditStore::new(&path);
    store.settings().await.unwrap();
    let other = Connection::open(&path).unwrap();

    // A statement that fails alone: only its write fails.
    other
        .execute_batch("CREATE TRIGGER refuse BEFORE INSERT ON ledger BEGIN SELECT RAISE(ABORT, 'no ledger today'); END;")
        .unwrap();
    let held = store.hold_writer();
    let before = store.enqueue(StoreWrite::Audit(record("a1"))).await.unwrap();
    let started = store.enqueue(StoreWrite::Started { entry: entry("p/1"), replay: ToolReplay::Never }).await.unwrap();
    let after = store.enqueue(StoreWrite::Audit(record("a2"))).await.unwrap();
    drop(held);
    assert!(before.await.is_ok() && after.await.is_ok());
    let refused = started.await.unwrap_err();
    assert!(refused.to_string().contains("no ledger today"), "{refused}");
    assert_eq!(committed(&path, "audit"), 2);

    // A statement that rolls the whole transaction back: every write of the group fails.
    other
        .execute_batch(
            "DROP TRIGGER refuse;
             CREATE TRIGGER refuse BEFORE INSERT ON ledger BEGIN SELECT RAISE(ROLLBACK, 'the disk is gone'); END;",
        )
        .unwrap();
    let held = store.hold_writer();
    let group = [
        store.enqueue(StoreWrite::Audit(record("b1"))).await.unwrap(),
        store.enqueue(StoreWrite::Started { entry: entry("p/2"), replay: ToolReplay::Never }).await.unwrap(),
        store.enqueue(StoreWrite::Audit(record("b2"))).await.unwrap(),
    ];
    drop(held);
    for commit in group {
        let failed = commit.await.unwrap_err();
        assert!(matches!(failed, StoreError::Commit(ref why) if why.contains("the disk is gone")), "{failed}");
    }
    assert_eq!(committed(&path, "audit"), 2, "nothing of the failed group is on disk");

    // The store goes on once the cause is gone.
    other.execute_batch("DROP TRIGGER refuse;").unwrap();
    store.ledger_started(entry("p/3"), ToolReplay::Never).await.unwrap();
    assert_eq!(committed(&path, "ledger"), 1);
}

#[tokio::test]
async fn a_store_that_cannot_open_fails_every_waiter() {
    let dir = tempfile::tempdir().unwrap();
    // The database path is a directory.
    let store = SqliteAuditStore::new(dir.path());
    let failed = store.ledger_started(entry("p/1"), ToolReplay::Never).await.unwrap_err();
    assert!(matches!(failed, StoreError::Open { .. }), "{failed}");
    assert!(store.audit_log("t1").await.is_err());
}

#[tokio::test]
async fn a_full_queue_makes_enqueue_wait_and_try_enqueue_fail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let store = SqliteAuditStore::with_queue_capacity(&path, 2);
    store.settings().await.unwrap();
    let held = store.hold_writer();
    let rounds = store.rounds();
    store.try_enqueue(StoreWrite::Audit(record("first"))).unwrap();
    while store.rounds() == rounds {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // The writer holds `first` and waits: the queue is empty, with room for two.
    store.try_enqueue(StoreWrite::Audit(record("second"))).unwrap();
    store.try_enqueue(StoreWrite::Audit(record("third"))).unwrap();
    let full = store.try_enqueue(StoreWrite::Audit(record("lost"))).unwrap_err();
    assert!(matches!(full, StoreError::QueueFull { capacity: 2 }), "{full}");
    let mut waiting = Box::pin(store.enqueue(StoreWrite::Audit(record("waited"))));
    assert!((&mut waiting).now_or_never().is_none(), "enqueue waits for room");
    drop(held);
    waiting.await.unwrap().await.unwrap();
    let stored: Vec<_> = store.audit_log("t1").await.unwrap().into_iter().map(|r| r.call.call_id).collect();
    assert_eq!(stored, ["first", "second", "third", "waited"], "the refused write was not stored");
}

#[tokio::test]
async fn dropping_the_store_commits_what_is_queued() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let store = SqliteAuditStore::new(&path);
    for n in 0..50 {
        store.try_enqueue(StoreWrite::Audit(record(&format!("c{n}")))).unwrap();
    }
    drop(store);
    assert_eq!(committed(&path, "audit"), 50);
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
    assert_eq!((old[0].call.depth, old[0].call.args_truncated), (0, false));
    store.ledger_started(entry("p/1"), ToolReplay::Never).await.unwrap();
    assert_eq!(store.ledger("t1").await.unwrap()[1], entry("p/1"));
}
