//! The behaviour every group-commit store shares, written once and run
//! against each: `store_suite!(Harness)` in a store's tests makes one test
//! per function here. Those every `AuditStore` must have are the public
//! suite's (`conformance`), run here through a harness, with the row counts
//! only the harness can see; the rest are group commit's own. A [`Harness`] gives the suite a fresh database and the few
//! things only that database can do (count committed rows through a
//! connection of its own, make the database reject writes).

// The writer's hold is a std mutex that the writer THREAD waits on; the awaits
// made while a test holds it only enqueue, which never needs the writer.
#![allow(clippy::await_holding_lock)]

use super::group_commit::{Database, GroupCommitStore};
use crate::conformance::{self, StoreFixture};
pub(super) use crate::conformance::{entry, parked_run, record, started};
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tether_turn::{AuditStore, StoreError, StoreStats, StoreWrite, ToolReplay};

/// A table, by what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Table {
    Audit,
    Ledger,
    Parked,
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

    /// Overwrites the record of parked run `(turn_id, run_id)` with `record`,
    /// through a connection of the harness's own.
    async fn overwrite_parked_record(&self, turn_id: &str, run_id: &str, record: &str);
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
            two_stores_on_one_database_never_both_claim_a_turn_id,
            opened_turns_are_listed_newest_first_with_their_calls_after_reopening,
            parked_runs_are_listed_by_turn_and_all_oldest_first_after_reopening,
            parking_a_run_again_replaces_its_record_and_releases_its_claim,
            a_parked_run_is_claimed_once_unless_taken_over,
            only_the_claimant_updates_a_parked_run_durably,
            only_the_claimant_unparks_a_parked_run,
            two_stores_on_one_database_never_both_claim_a_parked_run,
            parked_runs_are_committed_when_they_return_even_behind_a_held_group,
            a_corrupt_parked_record_is_a_database_error_naming_the_run
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

/// A harness as the public suite's fixture: each `open` a new store on the
/// harness's database.
struct OnHarness<H>(Arc<H>);

#[async_trait::async_trait]
impl<H: Harness> StoreFixture for OnHarness<H> {
    async fn open(&self) -> Arc<dyn AuditStore> {
        let store = self.0.open(DEFAULT);
        // Opened before it is handed out: two stores creating one SQLite
        // file's tables at once would find it locked.
        store.ready().await.unwrap();
        Arc::new(store)
    }
}

/// `h` as the public suite's fixture, and `h` itself for what only it can see.
fn fixture<H: Harness>(h: H) -> (OnHarness<H>, Arc<H>) {
    let h = Arc::new(h);
    (OnHarness(h.clone()), h)
}

pub(super) async fn started_is_committed_when_it_returns<H: Harness>(h: H) {
    let store = h.open(DEFAULT);
    store.ledger_started(entry("p/1"), ToolReplay::Never).await.unwrap();
    assert_eq!(h.committed(Table::Ledger).await, 1, "another connection sees the row: it is committed");
}

pub(super) async fn ledger_rows_start_settle_follow_the_replay_rule_and_survive_reopening<H: Harness>(h: H) {
    let (fixture, h) = fixture(h);
    conformance::ledger_rows_follow_the_replay_rule_and_survive_reopening(&fixture).await;
    // Counted through the harness's own connection: the refusals wrote nothing.
    assert_eq!(h.committed(Table::Ledger).await, 2);
}

pub(super) async fn audit_rows_round_trip_with_the_same_identity_columns_as_the_ledger<H: Harness>(h: H) {
    conformance::audit_rows_come_back_with_every_field(&fixture(h).0).await;
}

pub(super) async fn reads_see_every_write_enqueued_before_them<H: Harness>(h: H) {
    conformance::reads_see_every_write_enqueued_before_them(&fixture(h).0).await;
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
    let (fixture, h) = fixture(h);
    conformance::two_stores_never_both_start_a_call_id(&fixture).await;
    assert_eq!(h.committed(Table::Ledger).await, 50);
}

pub(super) async fn a_turn_id_is_claimed_once_and_a_held_id_is_refused_after_reopening<H: Harness>(h: H) {
    let store = h.open(DEFAULT);
    let reopened = h.open(DEFAULT);
    conformance::claim_rules(&store, &reopened).await;
}

/// Two stores on one database — two backends — opening the same turn ids
/// at once: each id is claimed exactly once; the other gets `TurnTaken`.
pub(super) async fn two_stores_on_one_database_never_both_claim_a_turn_id<H: Harness>(h: H) {
    conformance::two_stores_never_both_claim_a_turn_id(&fixture(h).0).await;
}

pub(super) async fn opened_turns_are_listed_newest_first_with_their_calls_after_reopening<H: Harness>(h: H) {
    let (fixture, h) = fixture(h);
    conformance::opened_turns_are_listed_newest_first_with_their_calls(&fixture).await;
    assert_eq!(h.committed(Table::Audit).await, 2);
}

pub(super) async fn parked_runs_are_listed_by_turn_and_all_oldest_first_after_reopening<H: Harness>(h: H) {
    let (fixture, h) = fixture(h);
    conformance::parked_runs_are_listed_by_turn_and_all_oldest_first(&fixture).await;
    assert_eq!(h.committed(Table::Parked).await, 3);
}

pub(super) async fn parking_a_run_again_replaces_its_record_and_releases_its_claim<H: Harness>(h: H) {
    let (fixture, h) = fixture(h);
    conformance::parking_again_replaces_the_record_and_releases_the_claim(&fixture).await;
    assert_eq!(h.committed(Table::Parked).await, 1, "parked again: one row");
}

pub(super) async fn a_parked_run_is_claimed_once_unless_taken_over<H: Harness>(h: H) {
    conformance::a_parked_run_is_claimed_once_unless_taken_over(&fixture(h).0).await;
}

pub(super) async fn only_the_claimant_updates_a_parked_run_durably<H: Harness>(h: H) {
    conformance::only_the_claimant_updates_a_parked_run(&fixture(h).0).await;
}

pub(super) async fn only_the_claimant_unparks_a_parked_run<H: Harness>(h: H) {
    let (fixture, h) = fixture(h);
    conformance::only_the_claimant_unparks_a_parked_run(&fixture).await;
    assert_eq!(h.committed(Table::Parked).await, 1, "the row is deleted");
}

/// Two stores on one database — two backends — claiming the same parked
/// runs at once: each is claimed exactly once.
pub(super) async fn two_stores_on_one_database_never_both_claim_a_parked_run<H: Harness>(h: H) {
    conformance::two_stores_never_both_claim_a_parked_run(&fixture(h).0).await;
}

/// Each parked-run operation is committed when it returns, also when it was
/// queued behind a group the writer holds: it runs after that group's
/// transaction, never inside it (another connection sees it at once).
pub(super) async fn parked_runs_are_committed_when_they_return_even_behind_a_held_group<H: Harness>(h: H) {
    let store = Arc::new(h.open(DEFAULT));
    store.ready().await.unwrap();
    let held = store.hold_writer();
    let audit = store.enqueue(StoreWrite::Audit(record("a1"))).await.unwrap();
    let started = store.enqueue(started("p/1")).await.unwrap();
    let parking = {
        let store = store.clone();
        tokio::spawn(async move { store.park_run(&parked_run("t1", "run-1", 5)).await })
    };
    let later = store.enqueue(StoreWrite::Audit(record("a2"))).await.unwrap();
    drop(held);
    parking.await.unwrap().unwrap();
    assert_eq!(h.committed(Table::Parked).await, 1, "another connection sees the parked run: it is committed");
    for commit in [audit, started, later] {
        commit.await.unwrap();
    }
    store.claim_parked("t1", "run-1", "a", false, 10).await.unwrap();
    store.update_parked(&parked_run("t1", "run-1", 6), "a").await.unwrap();
    let fresh = h.open(DEFAULT);
    assert!(matches!(
        fresh.claim_parked("t1", "run-1", "b", false, 11).await,
        Err(StoreError::ParkedClaimed { claimant, .. }) if claimant == "a"
    ));
    assert_eq!(fresh.parked_runs(None).await.unwrap()[0].parked_at_ms, 6);
    store.unpark("t1", "run-1", "a").await.unwrap();
    assert_eq!(h.committed(Table::Parked).await, 0);
    assert_eq!(h.committed(Table::Audit).await, 2);
}

/// A record that is not a parked run's JSON (or names another run) fails
/// listing and claiming with a database error that says it is corrupt and
/// names the run; the other runs are untouched.
pub(super) async fn a_corrupt_parked_record_is_a_database_error_naming_the_run<H: Harness>(h: H) {
    let store = h.open(DEFAULT);
    store.park_run(&parked_run("t1", "run-1", 5)).await.unwrap();
    store.park_run(&parked_run("t2", "run-2", 6)).await.unwrap();
    let other_run = parked_run("t1", "run-9", 5).to_json().unwrap();
    for record in ["{\"turn_id\": 1", other_run.as_str()] {
        h.overwrite_parked_record("t1", "run-1", record).await;
        for failed in [
            store.parked_runs(None).await.map(|_| ()),
            store.parked_runs(Some("t1")).await.map(|_| ()),
            store.claim_parked("t1", "run-1", "a", true, 10).await.map(|_| ()),
        ] {
            let failed = failed.unwrap_err();
            let text = failed.to_string();
            assert!(matches!(failed, StoreError::Database { .. }), "{failed:?}");
            assert!(text.contains("record of parked run `run-1` of turn `t1` is corrupt"), "{text}");
        }
    }
    assert_eq!(store.parked_runs(Some("t2")).await.unwrap(), [parked_run("t2", "run-2", 6)]);
}

/// The memory store (`tether-turn`'s) passes the public suite whole.
mod memory_store {
    use super::*;
    use tether_turn::MemoryAuditStore;

    struct InMemory(Arc<MemoryAuditStore>);

    #[async_trait::async_trait]
    impl StoreFixture for InMemory {
        async fn open(&self) -> Arc<dyn AuditStore> {
            self.0.clone()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_memory_store_passes_the_conformance_suite() {
        conformance::check(|| async { InMemory(Arc::new(MemoryAuditStore::new())) }).await;
    }

    /// The suite can fail: a store that forgets what it was told breaks it,
    /// named by the behaviour it breaks.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_that_forgets_fails_the_suite_with_the_behaviours_name() {
        struct Forgetful;
        #[async_trait::async_trait]
        impl StoreFixture for Forgetful {
            async fn open(&self) -> Arc<dyn AuditStore> {
                Arc::new(MemoryAuditStore::new())
            }
        }
        let failed = AssertUnwindSafe(conformance::check(|| async { Forgetful })).catch_unwind().await.unwrap_err();
        let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("ledger rows follow the replay rule and survive reopening"), "{message}");
    }
}
