//! The PostgreSQL audit store with real backend processes and a real turn:
//! two processes writing one turn's rows at once, a process killed with
//! SIGKILL between `started` and `settled`, and a script's calls through
//! `Turn::execute` read back by another replica. Each test has a schema of
//! its own on the server `./x test` starts (`TETHER_TEST_POSTGRES_URL`).

use crate::support::sidecar;
use crate::turn::world_on;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use tether_backend::turn::{
    AuditStore, CallStatus, Code, LedgerState, PolicyApprover, PostgresAuditStore, open_audit_store,
};

/// A schema of its own on the test server: its URL, and a connection to it.
struct Schema {
    url: String,
    client: tokio_postgres::Client,
}

impl Schema {
    async fn new() -> Schema {
        let base = tether_tests::postgres::server_url();
        let name = tether_tests::postgres::unique_schema("e2e");
        let (client, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot reach the test server at `{base}`: {e}"));
        tokio::spawn(connection);
        client.batch_execute(&tether_tests::postgres::fresh_schema_sql(&name)).await.unwrap();
        Schema { url: tether_tests::postgres::schema_url(&base, &name), client }
    }

    /// `(call id, state)` of every ledger row of `turn`, as committed.
    async fn ledger(&self, turn: &str) -> BTreeMap<String, String> {
        let rows =
            self.client.query("SELECT call_id, state FROM tether_ledger WHERE turn_id = $1", &[&turn]).await.unwrap();
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    }
}

/// A `tether-audit-peer` process.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Peer {
    fn spawn(orders: Value) -> Peer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tether-audit-peer"))
            .arg(orders.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (stdin, stdout) = (child.stdin.take().unwrap(), BufReader::new(child.stdout.take().unwrap()));
        Peer { child, stdin, stdout }
    }

    /// The next line the peer prints, which must be event `event`.
    fn expect(&mut self, event: &str) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the peer ended before `{event}`: {:?}", self.child.wait());
        let said: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(said["event"], event, "{said}");
        said
    }

    fn go(&mut self) {
        writeln!(self.stdin, "go").unwrap();
    }

    /// Reads the peer's output to its end: the calls its `pay` ran, and its
    /// `done` line.
    fn finish(mut self) -> (Vec<String>, Value) {
        let mut ran = Vec::new();
        loop {
            let mut line = String::new();
            self.stdout.read_line(&mut line).unwrap();
            assert!(!line.is_empty(), "the peer ended without `done`: {:?}", self.child.wait());
            let said: Value = serde_json::from_str(&line).unwrap();
            match said["event"].as_str() {
                Some("running") => ran.push(said["call"].as_str().unwrap().to_owned()),
                Some("done") => {
                    assert!(self.child.wait().unwrap().success());
                    return (ran, said);
                }
                _ => panic!("unexpected: {said}"),
            }
        }
    }
}

/// Runs `f` off the async workers: the peers are read with blocking I/O.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_backend_processes_writing_one_turn_lose_and_duplicate_nothing() {
    let schema = Schema::new().await;
    let (own, shared) = (60, 40);
    // Each peer makes its own calls and the shared ones, interleaved, in
    // opposite orders so the two meet on the same rows.
    let orders = |name: &str, reverse: bool| {
        let mut calls: Vec<String> = Vec::new();
        for n in 0..own.max(shared) {
            if n < own {
                calls.push(format!("{name}-{n}"));
            }
            if n < shared {
                calls.push(format!("shared-{}", if reverse { shared - 1 - n } else { n }));
            }
        }
        json!({"url": schema.url, "turn": "one-turn", "calls": calls, "concurrency": 8})
    };
    let (a, b) = (orders("a", false), orders("b", true));
    let ((ran_a, done_a), (ran_b, done_b)) = blocking(move || {
        let mut peers = [Peer::spawn(a), Peer::spawn(b)];
        for peer in &mut peers {
            peer.expect("ready");
        }
        for peer in &mut peers {
            peer.go();
        }
        let [a, b] = peers;
        (a.finish(), b.finish())
    })
    .await;

    // Every call of its own ran in its process; each shared call ran in
    // exactly one of the two, and the other refused it as a replay.
    let mut runs: BTreeMap<String, u32> = BTreeMap::new();
    for call in ran_a.iter().chain(&ran_b) {
        *runs.entry(call.clone()).or_default() += 1;
    }
    assert_eq!(runs.len(), 2 * own + shared, "{runs:?}");
    assert!(runs.values().all(|&n| n == 1), "a call ran twice: {runs:?}");
    for (done, name) in [(&done_a, "a"), (&done_b, "b")] {
        for result in done["results"].as_array().unwrap() {
            let (call, status, code) = (result["call"].as_str().unwrap(), &result["status"], &result["code"]);
            if call.starts_with(name) {
                assert_eq!(status, "ok", "{result}");
            } else if status != "ok" {
                assert_eq!(code, Code::ReplayedCall.as_str(), "{result}");
            }
        }
    }
    // The table: one settled row per call, none twice (the unique key), and
    // an audit row for every call each process made.
    let ledger = schema.ledger("one-turn").await;
    assert_eq!(ledger.len(), 2 * own + shared);
    assert!(ledger.values().all(|state| state == "settled"), "{ledger:?}");
    assert_eq!(ledger.keys().cloned().collect::<Vec<_>>(), runs.keys().cloned().collect::<Vec<_>>());
    let audit =
        schema.client.query("SELECT call_id, status FROM tether_audit WHERE turn_id = 'one-turn'", &[]).await.unwrap();
    assert_eq!(audit.len(), 2 * (own + shared), "one audit row per call per process");
    let ok = audit.iter().filter(|r| r.get::<_, &str>(1) == "ok").count();
    assert_eq!(ok, 2 * own + shared);
    // What each process read at its end: a row for each of its own calls
    // (settled) and of the shared ones, and only rows that are in the table;
    // the other's rows as far as they were committed by then.
    for (done, name) in [(&done_a, "a"), (&done_b, "b")] {
        let seen: BTreeMap<String, String> = done["ledger"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["call"].as_str().unwrap().to_owned(), e["state"].as_str().unwrap().to_owned()))
            .collect();
        let mine = seen.keys().filter(|c| c.starts_with(name) || c.starts_with("shared")).count();
        assert_eq!(mine, own + shared, "{name} saw {seen:?}");
        assert!(seen.keys().all(|call| ledger.contains_key(call)), "{name} saw {seen:?}");
        assert!(seen.iter().filter(|(call, _)| call.starts_with(name)).all(|(_, state)| state == "settled"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_between_started_and_settled_leaves_a_call_nobody_runs_again() {
    let schema = Schema::new().await;
    let dir = tempfile::tempdir().unwrap();
    let never = dir.path().join("never-created");
    let orders = json!({"url": schema.url, "turn": "crash-turn", "calls": ["pay-1"], "block_until": never});
    let mut first = blocking(move || {
        let mut peer = Peer::spawn(orders);
        peer.expect("ready");
        peer.go();
        assert_eq!(peer.expect("running")["call"], "pay-1");
        peer
    })
    .await;
    // The tool is running: its `started` row was committed before it began.
    assert_eq!(schema.ledger("crash-turn").await, BTreeMap::from([("pay-1".into(), "started".into())]));
    first.child.kill().unwrap(); // SIGKILL
    assert!(!first.child.wait().unwrap().success());

    // A new backend on the same turn: the call is started, not settled; it
    // is listed as possibly executed and is refused, not run again.
    let orders = json!({"url": schema.url, "turn": "crash-turn", "calls": ["pay-1", "pay-2"]});
    let (ran, done) = blocking(move || {
        let mut peer = Peer::spawn(orders);
        peer.expect("ready");
        peer.go();
        peer.finish()
    })
    .await;
    assert_eq!(ran, ["pay-2"], "pay-1 did not run again");
    let results = done["results"].as_array().unwrap();
    assert_eq!(results[0], json!({"call": "pay-1", "status": "failed", "code": Code::ReplayedCall.as_str()}));
    assert_eq!(results[1]["status"], "ok");
    assert_eq!(
        done["possibly_executed"],
        json!([{"call": "pay-1", "state": "started"}, {"call": "pay-2", "state": "settled"}])
    );
    assert_eq!(schema.ledger("crash-turn").await["pay-1"], "started", "still nobody knows whether it ran");
    // The killed process wrote no audit row; the new one audited its refusal.
    let audit = schema
        .client
        .query("SELECT call_id, code FROM tether_audit WHERE turn_id = 'crash-turn' ORDER BY id", &[])
        .await
        .unwrap();
    let audit: Vec<(String, Option<String>)> = audit.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(audit, [("pay-1".into(), Some(Code::ReplayedCall.as_str().into())), ("pay-2".into(), None)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripts_calls_through_a_turn_are_in_postgres_for_another_replica() {
    let schema = Schema::new().await;
    let (_sidecar, client) = sidecar().await;
    let store = open_audit_store(&schema.url).await.unwrap();
    let w = world_on(&client, PolicyApprover::approve_all(), store, |b| b);
    let source = "\
call('ping', {'n': 1})
unwrap(send_email(to='dana@example.com', subject='renewal', body='hi'))
call('send_email', {'to': 'dana@example.com', 'subject': 'renewal', 'body': 'hi'})
";
    let result = w.script(source, Value::Null).await;
    assert_eq!(result.status(), CallStatus::Ok, "{result:?}");

    // The turn's own read goes through its store's queue: once it returns,
    // every row the turn enqueued is committed. Another replica, with a
    // store of its own on the same tables, then reads exactly those rows.
    let written = w.turn.audit_log().await.unwrap();
    let replica = PostgresAuditStore::new(&schema.url).unwrap();
    let audit = replica.audit_log("turn-1").await.unwrap();
    assert_eq!(audit, written);
    let rows: Vec<_> = audit
        .iter()
        .map(|r| (r.call.call_id.as_str(), r.call.origin.as_str(), r.call.depth, r.code.as_deref()))
        .collect();
    assert_eq!(
        rows,
        [
            ("s1/1", "script", 1, None),
            ("s1/2", "script", 1, None),
            ("s1/3", "script", 1, Some(Code::RepeatedCall.as_str())),
            ("s1", "model", 0, None),
        ]
    );
    assert!(audit[..3].iter().all(|r| r.call.parent_call_id.as_deref() == Some("s1")));
    let ledger = replica.ledger("turn-1").await.unwrap();
    let send = ledger.iter().find(|e| e.call.call_id == "s1/2").unwrap();
    assert_eq!((send.state, send.outcome, send.approval_required), (LedgerState::Settled, Some(CallStatus::Ok), true));
    assert!(ledger.iter().all(|e| e.call.tool != "ping"), "a read-only tool has no ledger row");
    assert_eq!(w.probe.world.outbox().len(), 1, "the repeat was refused");
}
