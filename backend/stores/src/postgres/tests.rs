// The writer's hold is a std mutex that the writer THREAD waits on; the awaits
// made while a test holds it only enqueue, which never needs the writer.
#![allow(clippy::await_holding_lock)]

use super::*;
use crate::suite::{Harness, Reject, Table, entry, parked_run, record, started, store_suite};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;
use tether_turn::ToolReplay;
use tether_turn::{AuditStore, LedgerState};

/// The test server's URL: `./x test` starts PostgreSQL and sets it.
fn server_url() -> String {
    std::env::var("TETHER_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "TETHER_TEST_POSTGRES_URL is not set: run the tests via `./x test`, which starts PostgreSQL \
             (or run `eval \"$(tools/services/postgres.sh start)\"` first)"
        )
    })
}

/// A schema of its own for one test, so that tests run in parallel: the
/// harness's connection uses it, and so does every store it opens.
struct PostgresHarness {
    base: String,
    url: String,
    /// Also the `application_name` of the harness's stores.
    schema: String,
    client: tokio_postgres::Client,
}

impl PostgresHarness {
    /// The URL of the harness's schema, with more server `options`
    /// (percent-encoded, each `-cNAME%3DVALUE`).
    fn url_with_options(&self, options: &str) -> String {
        let separator = if self.base.contains('?') { '&' } else { '?' };
        let schema = &self.schema;
        format!("{}{separator}options=-csearch_path%3D{schema}{options}&application_name={schema}", self.base)
    }

    fn store(&self, url: &str) -> GroupCommitStore<Postgres> {
        PostgresAuditStore::new(url).unwrap().store
    }

    /// A connection of its own to the harness's schema.
    async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.base, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot reach the test server at `{}`: {e}", self.base));
        tokio::spawn(connection);
        client.batch_execute(&format!("SET search_path TO {}", self.schema)).await.unwrap();
        client
    }

    /// Waits until a connection of the harness's stores waits on a lock.
    async fn until_a_store_waits_on_a_lock(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let row = self
                .client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
                    &[&self.schema],
                )
                .await
                .unwrap();
            if row.get::<_, i64>(0) > 0 {
                return;
            }
            assert!(Instant::now() < deadline, "no store of `{}` waited on a lock", self.schema);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[async_trait::async_trait]
impl Harness for PostgresHarness {
    type Db = Postgres;

    async fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let base = server_url();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let schema = format!("t_{}_{}_{nanos}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let (client, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot reach the test server at `{base}`: {e}"));
        tokio::spawn(connection);
        client.batch_execute(&format!("CREATE SCHEMA {schema}; SET search_path TO {schema}")).await.unwrap();
        let mut harness = PostgresHarness { base, url: String::new(), schema, client };
        harness.url = harness.url_with_options("");
        harness
    }

    fn open(&self, capacity: usize) -> GroupCommitStore<Postgres> {
        PostgresAuditStore::with_queue_capacity(&self.url, capacity).unwrap().store
    }

    fn unopenable(&self) -> GroupCommitStore<Postgres> {
        // Nothing listens on port 1.
        self.store("postgres://postgres@127.0.0.1:1/postgres")
    }

    async fn committed(&self, table: Table) -> i64 {
        let table = match table {
            Table::Audit => "tether_audit",
            Table::Ledger => "tether_ledger",
            Table::Parked => "tether_parked_runs",
        };
        self.client.query_one(&format!("SELECT count(*) FROM {table}"), &[]).await.unwrap().get(0)
    }

    async fn reject_ledger_inserts(&self, how: Option<Reject>) {
        self.client.batch_execute("DROP TRIGGER IF EXISTS refuse ON tether_ledger").await.unwrap();
        // A trigger's exception fails its statement; disk_full (53100) is
        // the server's trouble, which ends the group.
        let raise = match how {
            None => return,
            Some(Reject::Alone(message)) => format!("RAISE EXCEPTION '{message}'"),
            Some(Reject::Group(message)) => format!("RAISE EXCEPTION '{message}' USING ERRCODE = 'disk_full'"),
        };
        self.client
            .batch_execute(&format!(
                "CREATE OR REPLACE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {raise}; END $$;
                 CREATE TRIGGER refuse BEFORE INSERT ON tether_ledger FOR EACH ROW EXECUTE FUNCTION refuse();"
            ))
            .await
            .unwrap();
    }

    async fn overwrite_parked_record(&self, turn_id: &str, run_id: &str, record: &str) {
        let changed = self
            .client
            .execute(
                "UPDATE tether_parked_runs SET record = $3 WHERE turn_id = $1 AND run_id = $2",
                &[&turn_id, &run_id, &record],
            )
            .await
            .unwrap();
        assert_eq!(changed, 1);
    }
}

store_suite!(PostgresHarness);

#[tokio::test]
async fn the_tables_are_created_on_first_use_with_their_schema_version() {
    let h = PostgresHarness::new().await;
    let exists = "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'tether_%'";
    let store = PostgresAuditStore::new(&h.url).unwrap();
    assert_eq!(h.client.query_one(exists, &[&h.schema]).await.unwrap().get::<_, i64>(0), 0, "nothing before first use");
    store.ready().await.unwrap();
    assert_eq!(h.client.query_one(exists, &[&h.schema]).await.unwrap().get::<_, i64>(0), 5);
    assert_eq!(store.schema_version().await.unwrap(), schema::SCHEMA_VERSION);
    assert_eq!(store.target(), h.url);
}

#[tokio::test]
async fn tables_of_a_newer_schema_version_are_refused_with_what_to_do() {
    let h = PostgresHarness::new().await;
    PostgresAuditStore::new(&h.url).unwrap().ready().await.unwrap();
    h.client.execute("UPDATE tether_schema SET version = version + 1", &[]).await.unwrap();
    let store = PostgresAuditStore::new(&h.url).unwrap();
    let refused = store.ready().await.unwrap_err();
    let text = refused.to_string();
    assert!(matches!(refused, StoreError::Open { .. }), "{refused:?}");
    let newer = format!("schema version `{}`", schema::SCHEMA_VERSION + 1);
    assert!(text.contains(&newer) && text.contains("upgrade this backend"), "{text}");
    assert!(matches!(store.ledger_started(entry("p/1"), ToolReplay::Never).await, Err(StoreError::Open { .. })));
}

#[tokio::test]
async fn tables_of_version_1_are_brought_up_to_date() {
    let h = PostgresHarness::new().await;
    PostgresAuditStore::new(&h.url).unwrap().ready().await.unwrap();
    // Version 1: no `tether_turns`, no `approval_reason`, no `detail`, no
    // `tether_parked_runs`; a turn with rows.
    h.client
        .batch_execute(
            "DROP TABLE tether_turns, tether_parked_runs;
             ALTER TABLE tether_audit DROP COLUMN approval_reason, DROP COLUMN detail;
             UPDATE tether_schema SET version = 1",
        )
        .await
        .unwrap();
    old_row(&h).await;
    let store = PostgresAuditStore::new(&h.url).unwrap();
    store.ready().await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), schema::SCHEMA_VERSION);
    let old = &store.audit_log("t-old").await.unwrap()[0];
    assert_eq!((&old.approval_reason, &old.detail), (&None, &None));
    store.enqueue(StoreWrite::Audit(record("c1"))).await.unwrap().await.unwrap();
    assert_eq!(store.audit_log("t1").await.unwrap(), vec![record("c1")], "the reason and detail are stored");
    assert!(matches!(store.claim_turn("t-old", 1).await, Err(StoreError::TurnTaken { .. })));
    store.claim_turn("t-new", 1).await.unwrap();
    store.park_run(&parked_run("t-new", "run-1", 5)).await.unwrap();
    assert_eq!(store.parked_runs(None).await.unwrap(), [parked_run("t-new", "run-1", 5)]);
}

#[tokio::test]
async fn tables_of_version_2_get_the_detail_column() {
    let h = PostgresHarness::new().await;
    PostgresAuditStore::new(&h.url).unwrap().ready().await.unwrap();
    h.client
        .batch_execute(
            "ALTER TABLE tether_audit DROP COLUMN detail; DROP TABLE tether_parked_runs;
             UPDATE tether_schema SET version = 2",
        )
        .await
        .unwrap();
    old_row(&h).await;
    let store = PostgresAuditStore::new(&h.url).unwrap();
    store.ready().await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), schema::SCHEMA_VERSION);
    assert_eq!(store.audit_log("t-old").await.unwrap()[0].detail, None);
    store.enqueue(StoreWrite::Audit(record("c1"))).await.unwrap().await.unwrap();
    assert_eq!(store.audit_log("t1").await.unwrap(), vec![record("c1")], "the detail is stored");
    store.park_run(&parked_run("t1", "run-1", 5)).await.unwrap();
}

#[tokio::test]
async fn tables_of_version_3_get_the_parked_runs_table() {
    let h = PostgresHarness::new().await;
    PostgresAuditStore::new(&h.url).unwrap().ready().await.unwrap();
    h.client.batch_execute("DROP TABLE tether_parked_runs; UPDATE tether_schema SET version = 3").await.unwrap();
    old_row(&h).await;
    let store = PostgresAuditStore::new(&h.url).unwrap();
    store.ready().await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), schema::SCHEMA_VERSION);
    assert_eq!(store.audit_log("t-old").await.unwrap().len(), 1, "the old rows stay");
    let run = parked_run("t-old", "run-1", 5);
    store.park_run(&run).await.unwrap();
    assert_eq!(store.claim_parked("t-old", "run-1", "a", false, 6).await.unwrap(), run);
}

/// A row of turn `t-old` written with only the columns of version 1.
async fn old_row(h: &PostgresHarness) {
    h.client
        .execute(
            concat!(
                "INSERT INTO tether_audit (",
                tether_turn::identity_columns!(),
                ", status, started_at_ms, finished_at_ms, duration_us)
                 VALUES ('t-old', 'c', NULL, NULL, 'pay', 'model', 0, '{}', false, 'ok', 1, 2, 3)"
            ),
            &[],
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_backends_starting_at_once_create_the_tables_once() {
    let h = PostgresHarness::new().await;
    let stores: Vec<_> = (0..8).map(|_| Arc::new(PostgresAuditStore::new(&h.url).unwrap())).collect();
    let opening: Vec<_> = stores.iter().cloned().map(|s| tokio::spawn(async move { s.ready().await })).collect();
    for opened in opening {
        opened.await.unwrap().unwrap();
    }
    let versions = h.client.query_one("SELECT count(*) FROM tether_schema", &[]).await.unwrap().get::<_, i64>(0);
    assert_eq!(versions, 1);
}

/// Takes the ledger row of call `call_id` (turn `t1`) in `other`'s open
/// transaction, as another backend's writer would.
async fn start_as_another_writer(other: &tokio_postgres::Transaction<'_>, call_id: &str) {
    let insert = concat!(
        "INSERT INTO tether_ledger (",
        tether_turn::identity_columns!(),
        ", approval_required, state, started_at_ms)
         VALUES ('t1', $1, NULL, NULL, 'send_email', 'model', 0, '{}', false, true, 'started', 1)"
    );
    other.execute(insert, &[&call_id]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_with_another_writer_runs_the_group_again() {
    let h = PostgresHarness::new().await;
    // Which side of a deadlock the server aborts depends on who checks
    // first: the store, 5 s after it began to wait (by then the other writer
    // waits too); the other writer would check only after a minute.
    let store = h.store(&h.url_with_options("%20-cdeadlock_timeout%3D5s"));
    store.ready().await.unwrap();
    // Another writer holds `x` in an open transaction.
    let mut other = h.connect().await;
    other.batch_execute("SET deadlock_timeout = '60s'").await.unwrap();
    let other = other.transaction().await.unwrap();
    start_as_another_writer(&other, "x").await;
    // The store's group takes `y`, then waits for `x`.
    let held = store.hold_writer();
    let y = store.enqueue(started("y")).await.unwrap();
    let x = store.enqueue(started("x")).await.unwrap();
    drop(held);
    h.until_a_store_waits_on_a_lock().await;
    // Now the other writer wants `y`: a deadlock. The server aborts the
    // store's transaction, and the other goes on.
    start_as_another_writer(&other, "y").await;
    other.commit().await.unwrap();
    // The store ran its group again and found both rows taken.
    for (name, outcome) in [("y", y.await), ("x", x.await)] {
        assert!(
            matches!(outcome, Err(StoreError::Replayed { state: LedgerState::Started, .. })),
            "{name}: {outcome:?}"
        );
    }
    assert!(store.stats().retries >= 1, "{:?}", store.stats());
    assert_eq!(h.committed(Table::Ledger).await, 2);
}

#[tokio::test]
async fn a_connection_the_server_ends_is_replaced_without_losing_a_write() {
    let h = PostgresHarness::new().await;
    let store = h.open(DEFAULT_QUEUE_CAPACITY);
    store.ledger_started(entry("p/1"), ToolReplay::Never).await.unwrap();
    // Waits (up to 5 s) until the server process has ended.
    let ended = "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity WHERE application_name = $1";
    assert_eq!(h.client.query_one(ended, &[&h.schema]).await.unwrap().get::<_, i64>(0), 1);
    // The next group finds the connection closed and runs again on a new one.
    store.ledger_started(entry("p/2"), ToolReplay::Never).await.unwrap();
    assert_eq!(store.stats().retries, 1);
    assert_eq!(h.committed(Table::Ledger).await, 2);
    assert_eq!(store.ledger("t1").await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_session_with_synchronous_commit_off_is_set_back_on() {
    let h = PostgresHarness::new().await;
    let store = h.store(&h.url_with_options("%20-csynchronous_commit%3Doff"));
    let level = store
        .read(|c| Ok(c.client.query_one("SHOW synchronous_commit", &[]).map_err(crate::db)?.get::<_, String>(0)))
        .await;
    assert_eq!(level.unwrap(), "on");
}

#[test]
fn a_url_this_store_cannot_use_is_refused_at_once() {
    for (url, says) in [
        ("postgres://u@h:notaport/db", "invalid connection string"),
        ("postgres:///db", "names no host"),
        ("postgres://u:secret@h/db?sslmode=require", "does not speak"),
    ] {
        let refused = PostgresAuditStore::new(url).unwrap_err();
        let text = refused.to_string();
        assert!(matches!(refused, StoreError::Url { .. }), "{url}: {refused:?}");
        assert!(text.contains(says) && !text.contains("secret"), "{url}: {text}");
    }
}
