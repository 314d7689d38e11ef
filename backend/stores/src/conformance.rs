//! The behaviour every [`AuditStore`] must have, as a suite anyone's store
//! can run: SQLite, PostgreSQL and the memory store run it here, and a store
//! of your own runs it from one test.
//!
//! ```no_run
//! use std::sync::Arc;
//! use tether_stores::conformance::{self, StoreFixture};
//! use tether_turn::{AuditStore, MemoryAuditStore};
//!
//! /// One fresh database per behaviour. `open` makes a new store on the
//! /// SAME database each time it is called (a backend that restarts, or a
//! /// second replica); a store in memory hands out the one store.
//! struct Fresh(Arc<MemoryAuditStore>);
//!
//! #[async_trait::async_trait]
//! impl StoreFixture for Fresh {
//!     async fn open(&self) -> Arc<dyn AuditStore> {
//!         self.0.clone()
//!     }
//! }
//!
//! # async fn example() {
//! // In a `#[tokio::test(flavor = "multi_thread")]`:
//! conformance::check(|| async { Fresh(Arc::new(MemoryAuditStore::new())) }).await;
//! # }
//! ```
//!
//! What is checked ([`BEHAVIOURS`]): ledger rows start once and settle,
//! following each tool's replay rule, and survive reopening; audit rows come
//! back with every field; reads see every write enqueued before them; a turn
//! id is claimed once, also across stores, and opened turns are listed
//! newest first with their rows counted; two stores on one database never
//! both start one call id or both claim one turn id. Parked runs are listed
//! oldest first, parked again with their claim released, claimed by one
//! claimant at a time (unless taken over), updated and unparked only by
//! their claimant, durably; two stores on one database never both claim one.
//! A failure panics with the behaviour's name and what differed.
//!
//! The group-commit stores' own behaviour (one transaction per group, a full
//! queue, a rejected write failing alone) is tested apart, in this crate.

// A failed expectation is the suite's report: it panics, as a test does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::FutureExt as _;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tether_turn::{
    ApprovalVerdict, AuditRecord, AuditStore, CallIdentity, CallStatus, LedgerEntry, LedgerState, ParkedAnswer,
    ParkedRun, Step, StoreError, StoreWrite, ToolReplay,
};

/// A database under test, fresh for each behaviour.
#[async_trait::async_trait]
pub trait StoreFixture: Send + Sync + 'static {
    /// A store on this fixture's database, opened and ready for writes.
    /// Each call opens a new store on the SAME database (as a backend that
    /// restarts, or a second replica); a store that keeps its rows in memory
    /// returns the one store.
    async fn open(&self) -> Arc<dyn AuditStore>;
}

/// A behaviour of the suite: its name, and its check over a fresh fixture.
pub type Behaviour = (&'static str, fn(&dyn StoreFixture) -> futures::future::BoxFuture<'_, ()>);

/// Every behaviour [`check`] runs, by name.
pub const BEHAVIOURS: [Behaviour; 13] = [
    ("ledger rows follow the replay rule and survive reopening", |f| {
        ledger_rows_follow_the_replay_rule_and_survive_reopening(f).boxed()
    }),
    ("audit rows come back with every field", |f| audit_rows_come_back_with_every_field(f).boxed()),
    ("reads see every write enqueued before them", |f| reads_see_every_write_enqueued_before_them(f).boxed()),
    ("a turn id is claimed once, also after reopening", |f| {
        async move { claim_rules(&*f.open().await, &*f.open().await).await }.boxed()
    }),
    ("opened turns are listed newest first with their calls, after reopening", |f| {
        opened_turns_are_listed_newest_first_with_their_calls(f).boxed()
    }),
    ("two stores on one database never both start a call id", |f| two_stores_never_both_start_a_call_id(f).boxed()),
    ("two stores on one database never both claim a turn id", |f| two_stores_never_both_claim_a_turn_id(f).boxed()),
    ("parked runs are listed by turn and all, oldest first, after reopening", |f| {
        parked_runs_are_listed_by_turn_and_all_oldest_first(f).boxed()
    }),
    ("parking a run again replaces its record and releases its claim", |f| {
        parking_again_replaces_the_record_and_releases_the_claim(f).boxed()
    }),
    ("a parked run is claimed once, unless taken over", |f| a_parked_run_is_claimed_once_unless_taken_over(f).boxed()),
    ("only a parked run's claimant updates it, durably", |f| only_the_claimant_updates_a_parked_run(f).boxed()),
    ("only a parked run's claimant unparks it, and then it is gone", |f| {
        only_the_claimant_unparks_a_parked_run(f).boxed()
    }),
    ("two stores on one database never both claim a parked run", |f| {
        two_stores_never_both_claim_a_parked_run(f).boxed()
    }),
];

/// Runs every behaviour of [`BEHAVIOURS`], each on a fixture from `fresh`.
///
/// # Panics
/// On the first behaviour the store breaks, with its name and what differed.
/// Run it on a multi-threaded tokio runtime: two behaviours drive two stores
/// at once from spawned tasks.
pub async fn check<F, Fut, X>(fresh: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = X>,
    X: StoreFixture,
{
    for (name, behaviour) in BEHAVIOURS {
        let fixture = fresh().await;
        if let Err(panic) = AssertUnwindSafe(behaviour(&fixture)).catch_unwind().await {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!("the audit store breaks the behaviour \"{name}\": {why}");
        }
    }
}

/// The identity of call `call_id` of turn `t1`: every field set, non-ASCII text.
pub fn identity(call_id: &str) -> CallIdentity {
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

/// A started ledger row of call `call_id` (approval-required, at 1 ms).
pub fn entry(call_id: &str) -> LedgerEntry {
    LedgerEntry::started(identity(call_id), true, 1)
}

/// An audit row of call `call_id` with every field set: the approver's
/// reason and a failure's detail (multi-line, a secret, non-ASCII text).
pub fn record(call_id: &str) -> AuditRecord {
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

/// `turns`: newest first, with each turn's rows counted; by id; bounded.
pub async fn opened_turns_are_listed_newest_first_with_their_calls(fixture: &dyn StoreFixture) {
    let store = fixture.open().await;
    for (turn, opened_at_ms) in [("t1", 10), ("t0", 20), ("t2", 5)] {
        store.claim_turn(turn, opened_at_ms).await.unwrap();
    }
    let ok = AuditRecord { status: CallStatus::Ok, ..record("c/1") };
    for row in [ok, record("c/2")] {
        store.enqueue(StoreWrite::Audit(row)).await.unwrap().await.unwrap();
    }
    let reopened = fixture.open().await;
    let all = reopened.turns(None, 10).await.unwrap();
    let shown: Vec<(&str, i64, u64, u64)> =
        all.iter().map(|t| (t.turn_id.as_str(), t.opened_at_ms, t.calls, t.not_ok)).collect();
    assert_eq!(shown, [("t0", 20, 0, 0), ("t1", 10, 2, 1), ("t2", 5, 0, 0)]);
    assert_eq!(reopened.turns(None, 2).await.unwrap(), all[..2]);
    assert_eq!(reopened.turns(Some("t1"), 10).await.unwrap(), all[1..2]);
    assert_eq!(reopened.turns(Some("nope"), 10).await.unwrap(), []);
}

/// The write that starts call `call_id` (never replayed).
pub fn started(call_id: &str) -> StoreWrite {
    StoreWrite::Started { entry: entry(call_id), replay: ToolReplay::Never }
}

/// What [`settled`] records the tool returned: non-ASCII text and nesting.
pub const SETTLED_RESULT: &str = r#"{"ok":{"sent":["dana@example.com","ünïcödé"],"n":1}}"#;

/// The write that settles call `call_id` of turn `t1` as `ok` at `at` ms,
/// returning [`SETTLED_RESULT`].
pub fn settled(call_id: &str, at: i64) -> StoreWrite {
    StoreWrite::Settled {
        turn_id: "t1".into(),
        call_id: call_id.into(),
        outcome: CallStatus::Ok,
        settled_at_ms: at,
        result: Some(SETTLED_RESULT.into()),
    }
}

/// Run `run_id` of turn `turn_id`, parked at `parked_at_ms`: a pending
/// call, an answered one, opaque bytes (a zero byte, a 255), non-ASCII text.
pub fn parked_run(turn_id: &str, run_id: &str, parked_at_ms: i64) -> ParkedRun {
    let json = r#"{
        "turn_id": "TURN", "run_id": "RUN",
        "call": {"call_id": "c", "tool": "run_script", "args": {"code": "ünïcödé"}, "origin": {"kind": "model"},
                 "started_at_ms": 1},
        "request": "AAEC/w==", "state": "CQkJCQ==", "awaiting": ["c/1", "c/2"],
        "pending": [{
            "request": {"turn_id": "TURN", "call_id": "c/1", "tool": "send_email", "description": "Send",
                        "args": {"to": "dana@example.com", "body": "ünïcödé"},
                        "origin": {"kind": "script", "run_id": "RUN", "parent_call_id": "c", "depth": 1},
                        "reason": "emails leave the company"},
            "max_result_bytes": 100, "since_ms": 5}],
        "answered": {"c/2": {"ok": [1, "two"]}}, "refused": 1,
        "turn": {"calls_used": 3, "approval_calls": 1, "seen": {"k": "c/2"}, "runs": 1, "remaining_ms": 9000},
        "owner": {"config": null, "db": "démo.db"}, "parked_at_ms": 0
    }"#;
    let run = ParkedRun::from_json(&json.replace("TURN", turn_id).replace("RUN", run_id)).unwrap();
    ParkedRun { parked_at_ms, ..run }
}

/// `run` with call `c/1` answered (as a resume records it).
fn answered(run: &ParkedRun) -> ParkedRun {
    let mut run = run.clone();
    let answer = ParkedAnswer::Failed { code: "approval_denied".into(), message: "no: ünïcödé".into() };
    run.answered.insert("c/1".into(), answer);
    run.refused += 1;
    run
}

/// Whether `result` is [`StoreError::ParkedClaimed`] naming `holder` since `since`.
fn claimed_by<T>(result: &Result<T, StoreError>, holder: &str, since: i64) -> bool {
    matches!(result, Err(StoreError::ParkedClaimed { claimant, since_ms, .. }) if claimant == holder && *since_ms == since)
}

/// Whether `result` is [`StoreError::NotParked`] of run `run` of turn `t1`.
fn not_parked<T>(result: &Result<T, StoreError>, run: &str) -> bool {
    matches!(result, Err(StoreError::NotParked { turn_id, run_id }) if turn_id == "t1" && run_id == run)
}

/// Starts and settles rows under both replay rules, then reads them back
/// through a new store on the same database.
pub async fn ledger_rows_follow_the_replay_rule_and_survive_reopening(fixture: &dyn StoreFixture) {
    {
        let store = fixture.open().await;
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
    // A new store (as after a crash) sees the same rows, and no more.
    let store = fixture.open().await;
    let rows = store.ledger("t1").await.unwrap();
    assert_eq!(rows.len(), 2, "the refusals wrote nothing: {rows:?}");
    assert_eq!(
        (rows[0].state, rows[0].outcome, rows[0].settled_at_ms, rows[0].result.as_deref()),
        (LedgerState::Settled, Some(CallStatus::Ok), Some(5), Some(SETTLED_RESULT)),
        "a settled row keeps what the tool returned"
    );
    assert_eq!(rows[1], LedgerEntry { started_at_ms: 7, ..entry("p/2") }, "restarted: settled fields cleared");
    assert_eq!(store.ledger("other").await.unwrap(), vec![]);
}

/// Audit rows with every field set, and with every optional field empty,
/// come back equal; the ledger keeps the same call identity.
pub async fn audit_rows_come_back_with_every_field(fixture: &dyn StoreFixture) {
    let store = fixture.open().await;
    let row = record("c1");
    store.enqueue(StoreWrite::Audit(row.clone())).await.unwrap().await.unwrap();
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

/// Writes enqueued and not awaited are seen, in order, by a later read.
pub async fn reads_see_every_write_enqueued_before_them(fixture: &dyn StoreFixture) {
    let store = fixture.open().await;
    for n in 0..20 {
        store.try_enqueue(StoreWrite::Audit(record(&format!("c{n}")))).unwrap();
    }
    store.try_enqueue(started("p/1")).unwrap();
    store.try_enqueue(settled("p/1", 9)).unwrap();
    let audit = store.audit_log("t1").await.unwrap();
    let ids: Vec<_> = audit.into_iter().map(|r| r.call.call_id).collect();
    assert_eq!(ids, (0..20).map(|n| format!("c{n}")).collect::<Vec<_>>());
    assert_eq!(store.ledger("t1").await.unwrap()[0].state, LedgerState::Settled);
}

/// The claim rules, `store` and `reopened` on one database (for a store in
/// memory: the same store): a fresh id is claimed once; a claimed id, or one
/// with rows of a turn built without a claim, is refused with
/// [`StoreError::TurnTaken`], whose message says what to do.
pub async fn claim_rules(store: &dyn AuditStore, reopened: &dyn AuditStore) {
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

/// Two stores on one database — two backends — doing `op` for the same
/// `count` items at once, in opposite orders so that they meet on the same
/// rows: what each attempt returned, with its item.
async fn race<F, Fut>(fixture: &dyn StoreFixture, count: usize, op: F) -> Vec<(usize, Result<(), StoreError>)>
where
    F: Fn(Arc<dyn AuditStore>, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), StoreError>> + Send + 'static,
{
    let stores = [fixture.open().await, fixture.open().await];
    let mut tasks = Vec::new();
    for (which, store) in stores.iter().enumerate() {
        for n in 0..count {
            let (store, op) = (store.clone(), op.clone());
            let n = if which == 0 { n } else { count - 1 - n };
            tasks.push(tokio::spawn(async move { (n, op(store, n).await) }));
        }
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    outcomes
}

/// Two stores on one database starting the same 50 call ids at once: each
/// is started exactly once; the other store gets a replay refusal, never an
/// error, and never a second row.
pub async fn two_stores_never_both_start_a_call_id(fixture: &dyn StoreFixture) {
    let calls = 50;
    let outcomes = race(fixture, calls, |store, n| async move {
        store.ledger_started(entry(&format!("p/{n}")), ToolReplay::Never).await
    })
    .await;
    let mut started = vec![0; calls];
    for outcome in outcomes {
        match outcome {
            (n, Ok(())) => started[n] += 1,
            (_, Err(StoreError::Replayed { state: LedgerState::Started, .. })) => {}
            (n, Err(other)) => panic!("call p/{n}: {other}"),
        }
    }
    assert!(started.iter().all(|&times| times == 1), "times each call id was started: {started:?}");
    assert_eq!(fixture.open().await.ledger("t1").await.unwrap().len(), calls, "one row per call id");
}

/// Two stores on one database opening the same 30 turn ids at once: each
/// id is claimed exactly once; the other store gets `TurnTaken`.
pub async fn two_stores_never_both_claim_a_turn_id(fixture: &dyn StoreFixture) {
    let turns = 30;
    let outcomes =
        race(fixture, turns, |store, n| async move { store.claim_turn(&format!("turn-{n}"), 1).await }).await;
    let mut claimed = vec![0; turns];
    for outcome in outcomes {
        match outcome {
            (n, Ok(())) => claimed[n] += 1,
            (_, Err(StoreError::TurnTaken { .. })) => {}
            (n, Err(other)) => panic!("turn-{n}: {other}"),
        }
    }
    assert!(claimed.iter().all(|&times| times == 1), "times each turn id was claimed: {claimed:?}");
}

/// Runs parked in two turns, some at the same millisecond, come back with
/// every field, oldest first (then by turn id, then run id), from a new
/// store on the same database too; a turn's are its own only.
pub async fn parked_runs_are_listed_by_turn_and_all_oldest_first(fixture: &dyn StoreFixture) {
    let runs = [parked_run("t1", "t1/run-2", 5), parked_run("t2", "t2/run-1", 3), parked_run("t1", "t1/run-1", 5)];
    {
        let store = fixture.open().await;
        for run in &runs {
            store.park_run(run).await.unwrap();
        }
        // A claimed run is listed as well.
        store.claim_parked("t1", "t1/run-2", "a", false, 10).await.unwrap();
    }
    let store = fixture.open().await;
    let all = store.parked_runs(None).await.unwrap();
    assert_eq!(all, [runs[1].clone(), runs[2].clone(), runs[0].clone()], "oldest first, then turn and run");
    assert_eq!(store.parked_runs(Some("t1")).await.unwrap(), [runs[2].clone(), runs[0].clone()]);
    assert_eq!(store.parked_runs(Some("other")).await.unwrap(), []);
}

/// A run that parks again has its record replaced, and whoever held it
/// holds it no more: another claimant claims it and gets the new record.
pub async fn parking_again_replaces_the_record_and_releases_the_claim(fixture: &dyn StoreFixture) {
    let store = fixture.open().await;
    let run = parked_run("t1", "run-1", 5);
    store.park_run(&run).await.unwrap();
    store.claim_parked("t1", "run-1", "a", false, 10).await.unwrap();
    let again = ParkedRun { parked_at_ms: 20, ..answered(&run) };
    store.park_run(&again).await.unwrap();
    let reopened = fixture.open().await;
    assert_eq!(
        reopened.parked_runs(Some("t1")).await.unwrap(),
        std::slice::from_ref(&again),
        "one run, its new record"
    );
    assert_eq!(reopened.claim_parked("t1", "run-1", "b", false, 30).await.unwrap(), again, "the claim was released");
    // The former holder's claim is gone: it may not update the run.
    assert!(store.update_parked(&run, "a").await.is_err(), "a released claim updates nothing");
    assert_eq!(reopened.parked_runs(None).await.unwrap(), [again]);
}

/// A claim returns the record; a second claimant is refused with the
/// first's name and since when; a take-over claims it from the holder;
/// claims hold across stores on one database; a run never parked is
/// `NotParked`.
pub async fn a_parked_run_is_claimed_once_unless_taken_over(fixture: &dyn StoreFixture) {
    let (store, reopened) = (fixture.open().await, fixture.open().await);
    let run = parked_run("t1", "run-1", 5);
    store.park_run(&run).await.unwrap();
    assert_eq!(store.claim_parked("t1", "run-1", "a", false, 10).await.unwrap(), run);
    for claimant in ["b", "a"] {
        let refused = reopened.claim_parked("t1", "run-1", claimant, false, 11).await;
        assert!(claimed_by(&refused, "a", 10), "claimed by `a` since 10: {refused:?}");
    }
    let text = reopened.claim_parked("t1", "run-1", "b", false, 11).await.unwrap_err().to_string();
    assert!(text.contains("`a`") && text.contains("take the run over"), "{text}");
    assert_eq!(reopened.claim_parked("t1", "run-1", "b", true, 12).await.unwrap(), run, "taken over");
    let refused = store.claim_parked("t1", "run-1", "a", false, 13).await;
    assert!(claimed_by(&refused, "b", 12), "now claimed by `b` since 12: {refused:?}");
    assert!(not_parked(&store.claim_parked("t1", "run-9", "a", false, 14).await, "run-9"));
    assert!(not_parked(&store.claim_parked("t1", "run-9", "a", true, 14).await, "run-9"), "nothing to take over");
}

/// The claimant's update is durable (a new store on the same database sees
/// it); anyone else's is refused, naming the holder, and changes nothing;
/// after a take-over the former holder is refused too.
pub async fn only_the_claimant_updates_a_parked_run(fixture: &dyn StoreFixture) {
    let store = fixture.open().await;
    let run = parked_run("t1", "run-1", 5);
    store.park_run(&run).await.unwrap();
    // Nobody holds it yet: nobody may update it.
    assert!(store.update_parked(&answered(&run), "a").await.is_err(), "an unclaimed run updates nothing");
    store.claim_parked("t1", "run-1", "a", false, 10).await.unwrap();
    let updated = answered(&run);
    store.update_parked(&updated, "a").await.unwrap();
    let reopened = fixture.open().await;
    assert_eq!(
        reopened.parked_runs(Some("t1")).await.unwrap(),
        std::slice::from_ref(&updated),
        "durable, seen by another store"
    );
    let refused = reopened.update_parked(&run, "b").await;
    assert!(claimed_by(&refused, "a", 10), "{refused:?}");
    reopened.claim_parked("t1", "run-1", "b", true, 20).await.unwrap();
    let refused = store.update_parked(&run, "a").await;
    assert!(claimed_by(&refused, "b", 20), "taken over: {refused:?}");
    assert_eq!(store.parked_runs(None).await.unwrap(), std::slice::from_ref(&updated), "the refusals changed nothing");
    // The holder's claim survives its updates.
    reopened.update_parked(&ParkedRun { refused: 7, ..updated }, "b").await.unwrap();
    assert!(claimed_by(&store.claim_parked("t1", "run-1", "c", false, 30).await, "b", 20));
    assert!(not_parked(&store.update_parked(&parked_run("t1", "run-9", 1), "a").await, "run-9"));
}

/// Only the claimant unparks a run; then it is gone: not listed, and a
/// claim, an update or another unpark is `NotParked`, also from a new store.
pub async fn only_the_claimant_unparks_a_parked_run(fixture: &dyn StoreFixture) {
    let store = fixture.open().await;
    let run = parked_run("t1", "run-1", 5);
    store.park_run(&run).await.unwrap();
    store.park_run(&parked_run("t1", "run-2", 6)).await.unwrap();
    assert!(store.unpark("t1", "run-1", "a").await.is_err(), "an unclaimed run stays");
    store.claim_parked("t1", "run-1", "a", false, 10).await.unwrap();
    let refused = store.unpark("t1", "run-1", "b").await;
    assert!(claimed_by(&refused, "a", 10), "{refused:?}");
    store.unpark("t1", "run-1", "a").await.unwrap();
    let reopened = fixture.open().await;
    assert_eq!(reopened.parked_runs(None).await.unwrap(), [parked_run("t1", "run-2", 6)], "the other run stays");
    assert!(not_parked(&reopened.claim_parked("t1", "run-1", "a", false, 11).await, "run-1"));
    assert!(not_parked(&reopened.claim_parked("t1", "run-1", "a", true, 11).await, "run-1"));
    assert!(not_parked(&reopened.update_parked(&run, "a").await, "run-1"));
    assert!(not_parked(&reopened.unpark("t1", "run-1", "a").await, "run-1"));
    let text = reopened.unpark("t1", "run-1", "a").await.unwrap_err().to_string();
    assert!(text.contains("`run-1`") && text.contains("tether pending"), "{text}");
}

/// Two stores on one database — two backends — claiming the same 20 parked
/// runs at once, in opposite orders: each run is claimed exactly once, and
/// every refusal names the claimant that got it.
pub async fn two_stores_never_both_claim_a_parked_run(fixture: &dyn StoreFixture) {
    let runs = 20;
    let stores = [fixture.open().await, fixture.open().await];
    for n in 0..runs {
        stores[0].park_run(&parked_run("t1", &format!("run-{n}"), 1)).await.unwrap();
    }
    let mut tasks = Vec::new();
    for (which, store) in stores.iter().enumerate() {
        for n in 0..runs {
            let store = store.clone();
            let n = if which == 0 { n } else { runs - 1 - n };
            tasks.push(tokio::spawn(async move {
                let claimant = format!("store-{which}");
                (n, store.claim_parked("t1", &format!("run-{n}"), &claimant, false, 2).await.map(|run| (claimant, run)))
            }));
        }
    }
    let (mut winners, mut refusals) = (vec![Vec::new(); runs], Vec::new());
    for task in tasks {
        match task.await.unwrap() {
            (n, Ok((claimant, run))) => {
                assert_eq!(run, parked_run("t1", &format!("run-{n}"), 1), "run-{n}: the record");
                winners[n].push(claimant);
            }
            (n, Err(StoreError::ParkedClaimed { claimant, .. })) => refusals.push((n, claimant)),
            (n, Err(other)) => panic!("run-{n}: {other}"),
        }
    }
    assert!(winners.iter().all(|w| w.len() == 1), "who claimed each run: {winners:?}");
    for (n, claimant) in refusals {
        assert_eq!(claimant, winners[n][0], "run-{n}: the refusal names the claimant that got it");
    }
}
