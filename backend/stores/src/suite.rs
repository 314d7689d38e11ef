//! The behaviour every durable store shares, written once and run against
//! each: `store_suite!(Harness)` in a store's tests makes one test per
//! function here. A [`Harness`] gives the suite a fresh database and the few
//! things only that database can do (count committed rows through a
//! connection of its own, make the database reject writes).

// The writer's hold is a std mutex that the writer THREAD waits on; the awaits
// made while a test holds it only enqueue, which never needs the writer.
#![allow(clippy::await_holding_lock)]

use super::group_commit::{Database, GroupCommitStore};
use futures::FutureExt;
use std::sync::Arc;
use tether_turn::ApprovalVerdict;
use tether_turn::CallStatus;
use tether_turn::Step;
use tether_turn::StoreError;
use tether_turn::ToolReplay;
use tether_turn::{AuditRecord, CallIdentity, LedgerEntry, LedgerState};
use tether_turn::{AuditStore, StoreStats, StoreWrite};

/// A table, by what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Table {
    Audit,
    Ledger,
}

/// How the database rejects ledger inserts until told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reject {
    /// The statement fails with this message; the rest of its group commits.
    Alone(&'static str),
    /// The whole transaction fails with this message.
    Group(&'static str),
}

/// A fresh database for one test, and what only it can do.
#[async_trait::async_trait]
pub(super) trait Harness: Sized + Send + Sync + 'static {
    type Db: Database;

    /// A fresh, empty database (nothing created in it yet).
    async fn new() -> Self;

    /// A new store on this database (as a backend starting, or starting
    /// again) whose queue holds `capacity` operations.
    fn open(&self, capacity: usize) -> GroupCommitStore<Self::Db>;

    /// A store whose database cannot be opened.
    fn unopenable(&self) -> GroupCommitStore<Self::Db>;

    /// The rows of `table` that are committed, counted through a connection
    /// of the harness's own.
    async fn committed(&self, table: Table) -> i64;

    /// Makes the database reject ledger inserts as `how` says (`None`: stop).
    async fn reject_ledger_inserts(&self, how: Option<Reject>);
}

/// One test per shared behaviour, for the harness type `$harness`.
macro_rules! store_suite {
    ($harness:ty) => {
        $crate::suite::store_suite!(@tests $harness;
            ledger_rows_start_settle_follow_the_replay_rule_and_survive_reopening,
            audit_rows_round_trip_with_the_same_identity_columns_as_the_ledger,
            started_is_committed_when_it_returns,
            reads_see_every_write_enqueued_before_them,
            queued_writes_are_committed_together_in_one_group,
            concurrent_started_rows_share_commits,
            a_rejected_write_fails_alone_and_a_failed_group_fails_every_waiter,
            a_store_that_cannot_open_fails_every_waiter,
            a_full_queue_makes_enqueue_wait_and_try_enqueue_fail,
            dropping_the_store_commits_what_is_queued,
            two_stores_on_one_database_never_both_start_a_call_id,
            a_turn_id_is_claimed_once_and_a_held_id_is_refused_after_reopening,
            two_stores_on_one_database_never_both_claim_a_turn_id
        );
    };
    (@tests $harness:ty; $($test:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let harness = <$harness as $crate::suite::Harness>::new().await;
                $crate::suite::$test(harness).await;
            }
        )*
    };
}
pub(super) use store_suite;

pub(super) const DEFAULT: usize = super::group_commit::DEFAULT_QUEUE_CAPACITY;

pub(super) fn identity(call_id: &str) -> CallIdentity {
    CallIdentity {
        turn_id: "t1".into(),
        call_id: call_id.into(),
        parent_call_id: Some("p".into()),
        script_run_id: Some("r".into()),
        tool: "send_email".into(),
        origin: "script".into(),
        depth: 1,
        args: r#"{"to":"dana@example.com","body":"ünïcödé"}"#.into(),
        args_truncated: true,
    }
}

pub(super) fn entry(call_id: &str) -> LedgerEntry {
    LedgerEntry::started(identity(call_id), true, 1)
}

pub(super) fn record(call_id: &str) -> AuditRecord {
    AuditRecord {
        call: CallIdentity { origin: "model".into(), depth: 0, parent_call_id: None, ..identity(call_id) },
        step: Some(Step::Approval),
        code: Some("approval_denied".into()),
        approval: Some(ApprovalVerdict::Denied),
        decided_by: Some("policy".into()),
        approval_reason: Some("denied by the approval policy: ünïcödé".into()),
        detail: Some("`RuntimeError`: db password=hunter2 ünïcödé\nline two".into()),
        status: CallStatus::Failed,
        started_at_ms: 10,
        finished_at_ms: 11,
        duration_us: 1000,
    }
}

pub(super) fn started(call_id: &str) -> StoreWrite {
    StoreWrite::Started { entry: entry(call_id), replay: ToolReplay::Never }
}

pub(super) fn settled(call_id: &str, at: i64) -> StoreWrite {
    StoreWrite::Settled { turn_id: "t1".into(), call_id: call_id.into(), outcome: CallStatus::Ok, settled_at_ms: at }
}

pub(super) async fn ledger_rows_start_settle_follow_the_replay_rule_and_survive_reopening<H: Harness>(h: H) {
    {
        let store = h.open(DEFAULT);
        store.ledger_started(entry("p/1"), ToolReplay::Never).await.unwrap();
        store.ledger_started(entry("p/2"), ToolReplay::Safe).await.unwrap();
        let again = store.ledger_started(entry("p/1"), ToolReplay::Safe).await;
        assert!(matches!(again, Err(StoreError::Replayed { state: LedgerState::Started, .. })), "{again:?}");
        store.enqueue(settled("p/1", 5)).await.unwrap().await.unwrap();
        store.enqueue(settled("p/2", 6)).await.unwrap().await.unwrap();
        let ran = store.ledger_started(entry("p/1"), ToolReplay::Never).await;
        assert!(matches!(ran, Err(StoreError::Replayed { state: LedgerState::Settled, .. })), "{ran:?}");
        // A replay-safe tool restarts its settled row.
        store.ledger_started(LedgerEntry { started_at_ms: 7, ..entry("p/2") }, ToolReplay::Safe).await.unwrap();
    }
    // A new store (as after a crash) sees the same rows.
    let store = h.open(DEFAULT);
    let rows = store.ledger("t1").await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0].state, rows[0].outcome, rows[0].settled_at_ms),
        (LedgerState::Settled, Some(CallStatus::Ok), Some(5))
    );
    assert_eq!(rows[1], LedgerEntry { started_at_ms: 7, ..entry("p/2") }, "restarted: settled fields cleared");
    assert_eq!(store.ledger("other").await.unwrap(), vec![]);
    // The refusals wrote nothing.
    assert_eq!(h.committed(Table::Ledger).await, 2);
}

pub(super) async fn audit_rows_round_trip_with_the_same_identity_columns_as_the_ledger<H: Harness>(h: H) {
    let store = h.open(DEFAULT);
    // Every field set: the approver's reason, and the failure's detail
    // (host-only; multi-line, with a secret and non-ASCII text) come back whole.
    let row = record("c1");
    store.enqueue(StoreWrite::Audit(row.clone())).await.unwrap().await.unwrap();
    // Every optional field empty, and a status of each kind.
    let bare = AuditRecord {
        call: CallIdentity {
            parent_call_id: None,
            script_run_id: None,
            args_truncated: false,
            depth: 3,
            ..row.call.clone()
        },
        step: None,
        code: None,
        approval: None,
        decided_by: None,
        approval_reason: None,
        detail: None,
        status: CallStatus::Abandoned,
        ..row.clone()
    };
    store.enqueue(StoreWrite::Audit(bare.clone())).await.unwrap().await.unwrap();
    assert_eq!(store.audit_log("t1").await.unwrap(), vec![row.clone(), bare]);
    assert_eq!(row.display_name(), Some("Approval denied"));
    store.ledger_started(LedgerEntry::started(row.call.clone(), false, 3), ToolReplay::Never).await.unwrap();
    let ledger = store.ledger("t1").await.unwrap();
    assert_eq!(ledger[0].call, row.call);
    assert_eq!((ledger[0].approval_required, ledger[0].started_at_ms), (false, 3));
}

pub(super) async fn started_is_committed_when_it_returns<H: Harness>(h: H) {
    let store = h.open(DEFAULT);
    store.ledger_started(entry("p/1"), ToolReplay::Never).await.unwrap();
    assert_eq!(h.committed(Table::Ledger).await, 1, "another connection sees the row: it is committed");
}

pub(super) async fn reads_see_every_write_enqueued_before_them<H: Harness>(h: H) {
    let store = h.open(DEFAULT);
    for n in 0..20 {
        // Not awaited: enqueued in order, committed by a later group.
        store.try_enqueue(StoreWrite::Audit(record(&format!("c{n}")))).unwrap();
    }
    store.try_enqueue(started("p/1")).unwrap();
    store.try_enqueue(settled("p/1", 9)).unwrap();
    let audit = store.audit_log("t1").await.unwrap();
    let ids: Vec<_> = audit.into_iter().map(|r| r.call.call_id).collect();
    assert_eq!(ids, (0..20).map(|n| format!("c{n}")).collect::<Vec<_>>());
    assert_eq!(store.ledger("t1").await.unwrap()[0].state, LedgerState::Settled);
}

pub(super) async fn queued_writes_are_committed_together_in_one_group<H: Harness>(h: H) {
    let store = h.open(DEFAULT);
    store.ready().await.unwrap(); // opened: the group below is all writes
    let held = store.hold_writer();
    let mut commits = Vec::new();
    for n in 0..100 {
        commits.push(store.enqueue(started(&format!("p/{n}"))).await.unwrap());
    }
    drop(held);
    for commit in commits {
        commit.await.unwrap();
    }
    assert_eq!(store.stats(), StoreStats { commits: 1, writes: 100, retries: 0 }, "100 rows, one transaction");
}

pub(super) async fn concurrent_started_rows_share_commits<H: Harness>(h: H) {
    let store = Arc::new(h.open(DEFAULT));
    store.ready().await.unwrap();
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

pub(super) async fn a_rejected_write_fails_alone_and_a_failed_group_fails_every_waiter<H: Harness>(h: H) {
    let store = h.open(DEFAULT);
    store.ready().await.unwrap();

    // A statement the database rejects: only its write fails.
    h.reject_ledger_inserts(Some(Reject::Alone("no ledger today"))).await;
    let held = store.hold_writer();
    let before = store.enqueue(StoreWrite::Audit(record("a1"))).await.unwrap();
    let refused = store.enqueue(started("p/1")).await.unwrap();
    let after = store.enqueue(StoreWrite::Audit(record("a2"))).await.unwrap();
    drop(held);
    before.await.unwrap();
    after.await.unwrap();
    let refused = refused.await.unwrap_err();
    assert!(refused.to_string().contains("no ledger today"), "{refused}");
    assert_eq!(h.committed(Table::Audit).await, 2);

    // A failure that ends the transaction: every write of the group fails.
    h.reject_ledger_inserts(Some(Reject::Group("the disk is gone"))).await;
    let held = store.hold_writer();
    let group = [
        store.enqueue(StoreWrite::Audit(record("b1"))).await.unwrap(),
        store.enqueue(started("p/2")).await.unwrap(),
        store.enqueue(StoreWrite::Audit(record("b2"))).await.unwrap(),
    ];
    drop(held);
    for commit in group {
        let failed = commit.await.unwrap_err();
        assert!(matches!(failed, StoreError::Commit(ref why) if why.contains("the disk is gone")), "{failed}");
    }
    assert_eq!(h.committed(Table::Audit).await, 2, "nothing of the failed group is committed");

    // The store goes on once the cause is gone.
    h.reject_ledger_inserts(None).await;
    store.ledger_started(entry("p/3"), ToolReplay::Never).await.unwrap();
    assert_eq!(h.committed(Table::Ledger).await, 1);
}

pub(super) async fn a_store_that_cannot_open_fails_every_waiter<H: Harness>(h: H) {
    let store = h.unopenable();
    let failed = store.ledger_started(entry("p/1"), ToolReplay::Never).await.unwrap_err();
    assert!(matches!(failed, StoreError::Open { .. }), "{failed}");
    assert!(matches!(store.audit_log("t1").await, Err(StoreError::Open { .. })));
    assert!(matches!(store.ready().await, Err(StoreError::Open { .. })));
}

pub(super) async fn a_full_queue_makes_enqueue_wait_and_try_enqueue_fail<H: Harness>(h: H) {
    let store = h.open(2);
    store.ready().await.unwrap();
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

pub(super) async fn dropping_the_store_commits_what_is_queued<H: Harness>(h: H) {
    let store = h.open(DEFAULT);
    for n in 0..50 {
        store.try_enqueue(StoreWrite::Audit(record(&format!("c{n}")))).unwrap();
    }
    // Dropped on a blocking thread: the drop waits for the writer.
    tokio::task::spawn_blocking(move || drop(store)).await.unwrap();
    assert_eq!(h.committed(Table::Audit).await, 50);
}

/// Two stores on one database — two backends — starting the same call ids
/// at once: each call id is started exactly once; the other gets a replay
/// refusal, never an error, and never a second row.
pub(super) async fn two_stores_on_one_database_never_both_start_a_call_id<H: Harness>(h: H) {
    let calls = 50;
    let stores = [Arc::new(h.open(DEFAULT)), Arc::new(h.open(DEFAULT))];
    for store in &stores {
        store.ready().await.unwrap();
    }
    let mut tasks = Vec::new();
    for (which, store) in stores.iter().enumerate() {
        for n in 0..calls {
            let store = store.clone();
            // Opposite orders, so that the two meet on the same rows.
            let n = if which == 0 { n } else { calls - 1 - n };
            tasks.push(tokio::spawn(async move {
                let outcome = store.ledger_started(entry(&format!("p/{n}")), ToolReplay::Never).await;
                (n, outcome)
            }));
        }
    }
    let mut started = vec![0; calls];
    for task in tasks {
        match task.await.unwrap() {
            (n, Ok(())) => started[n] += 1,
            (_, Err(StoreError::Replayed { state: LedgerState::Started, .. })) => {}
            (n, Err(other)) => panic!("call p/{n}: {other}"),
        }
    }
    assert!(started.iter().all(|&times| times == 1), "times each call id was started: {started:?}");
    assert_eq!(h.committed(Table::Ledger).await, i64::try_from(calls).unwrap());
}

/// The claim rules every store applies, `store` and `reopened` on one
/// database (for a store in memory: the same store): a fresh id is claimed
/// once; a claimed id, or one with rows of a turn built without a claim, is
/// refused with [`StoreError::TurnTaken`], whose message says what to do.
pub(super) async fn claim_rules(store: &dyn AuditStore, reopened: &dyn AuditStore) {
    store.claim_turn("fresh", 1).await.unwrap();
    for again in [store, reopened] {
        let taken = again.claim_turn("fresh", 2).await.unwrap_err();
        assert!(matches!(&taken, StoreError::TurnTaken { turn_id } if turn_id == "fresh"), "{taken:?}");
        let text = taken.to_string();
        assert!(text.contains("`fresh` is taken") && text.contains("pass a fresh turn id, or omit it"), "{text}");
    }
    // Turn `t1` has rows, written by a turn built without a claim.
    store.enqueue(StoreWrite::Audit(record("c1"))).await.unwrap().await.unwrap();
    assert!(matches!(reopened.claim_turn("t1", 3).await, Err(StoreError::TurnTaken { .. })));
    let ledger_only = LedgerEntry { call: CallIdentity { turn_id: "t2".into(), ..identity("p/1") }, ..entry("p/1") };
    store.ledger_started(ledger_only, ToolReplay::Never).await.unwrap();
    assert!(matches!(reopened.claim_turn("t2", 3).await, Err(StoreError::TurnTaken { .. })));
    // A refused claim wrote nothing: the turn's rows are as they were.
    assert_eq!(reopened.audit_log("t1").await.unwrap().len(), 1);
    reopened.claim_turn("another", 4).await.unwrap();
}

pub(super) async fn a_turn_id_is_claimed_once_and_a_held_id_is_refused_after_reopening<H: Harness>(h: H) {
    let store = h.open(DEFAULT);
    let reopened = h.open(DEFAULT);
    claim_rules(&store, &reopened).await;
}

/// Two stores on one database — two backends — opening the same turn ids
/// at once: each id is claimed exactly once; the other gets `TurnTaken`.
pub(super) async fn two_stores_on_one_database_never_both_claim_a_turn_id<H: Harness>(h: H) {
    let turns = 30;
    let stores = [Arc::new(h.open(DEFAULT)), Arc::new(h.open(DEFAULT))];
    for store in &stores {
        store.ready().await.unwrap();
    }
    let mut tasks = Vec::new();
    for (which, store) in stores.iter().enumerate() {
        for n in 0..turns {
            let store = store.clone();
            let n = if which == 0 { n } else { turns - 1 - n };
            tasks.push(tokio::spawn(async move { (n, store.claim_turn(&format!("turn-{n}"), 1).await) }));
        }
    }
    let mut claimed = vec![0; turns];
    for task in tasks {
        match task.await.unwrap() {
            (n, Ok(())) => claimed[n] += 1,
            (_, Err(StoreError::TurnTaken { .. })) => {}
            (n, Err(other)) => panic!("turn-{n}: {other}"),
        }
    }
    assert!(claimed.iter().all(|&times| times == 1), "times each turn id was claimed: {claimed:?}");
}

/// The memory store (`tether-turn`'s) passes the parts of the suite that
/// are not about a database.
mod memory_store {
    use super::*;
    use tether_turn::MemoryAuditStore;

    #[tokio::test]
    async fn a_turn_id_is_claimed_once_and_a_held_id_is_refused() {
        let store = MemoryAuditStore::new();
        claim_rules(&store, &store).await;
    }

    #[tokio::test]
    async fn an_audit_row_comes_back_whole_with_its_reason_and_detail() {
        let store = MemoryAuditStore::new();
        let row = record("c1");
        assert!(row.approval_reason.is_some() && row.detail.is_some());
        store.enqueue(StoreWrite::Audit(row.clone())).await.unwrap().await.unwrap();
        assert_eq!(store.audit_log("t1").await.unwrap(), vec![row]);
    }
}
