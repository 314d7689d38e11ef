//! `--approval later`, `tether pending`, `tether approve|deny`: a run parked
//! in the audit store by one process, answered and resumed by others — also
//! after the one resuming it was killed mid-tool.

use super::{Scratch, stdout_json};
use serde_json::{Value, json};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

impl Scratch {
    /// `tether ARGS` with this scratch's audit store, demo database and park key.
    fn durable(&self, args: &[&str]) -> Output {
        let mut all = vec!["--park-key-file", self.path_str("park.key")];
        all.extend_from_slice(args);
        self.tether(&all)
    }

    fn path_str(&self, name: &str) -> &'static str {
        Box::leak(self.path(name).display().to_string().into_boxed_str())
    }

    fn pending(&self) -> Vec<Value> {
        let listed = self.durable(&["pending", "--json"]);
        assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
        match stdout_json(&listed) {
            Value::Array(runs) => runs,
            other => panic!("not a list: {other}"),
        }
    }

    fn outbox(&self) -> Vec<String> {
        let db = rusqlite::Connection::open(self.path("demo.db")).unwrap();
        let mut rows = db.prepare("SELECT to_addr FROM outbox ORDER BY id").unwrap();
        rows.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect()
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn code(outcome: &Value) -> Option<&str> {
    outcome.pointer("/error/code").and_then(Value::as_str)
}

/// The one pending call of the store's one parked run: (turn, call id, tool, args).
fn only_pending(scratch: &Scratch) -> (String, String, String, Value) {
    let runs = scratch.pending();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let calls = runs[0]["pending"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let text = |v: &Value| v.as_str().unwrap().to_owned();
    (text(&runs[0]["turn_id"]), text(&calls[0]["call_id"]), text(&calls[0]["tool"]), calls[0]["args"].clone())
}

#[test]
fn the_demo_parked_for_later_sends_its_four_emails_once_answered_from_other_processes() {
    let scratch = Scratch::new();
    let parked = scratch.durable(&["demo", "--approval", "later"]);
    assert!(parked.status.success(), "{}", stderr(&parked));
    assert_eq!(code(&stdout_json(&parked)), Some("run_parked"));
    assert!(stderr(&parked).contains("tether approve"), "says how to answer: {}", stderr(&parked));
    assert!(scratch.outbox().is_empty(), "nothing is sent before a person answers");

    // One call answered: the run goes on to its next email, and parks again.
    let (turn, first, tool, args) = only_pending(&scratch);
    assert_eq!(tool, "send_email");
    assert!(args["to"].as_str().is_some_and(|to| to.contains('@')), "the exact arguments: {args}");
    let one = scratch.durable(&["approve", "--turn", &turn, "--call", &first, "--as", "dana"]);
    assert!(one.status.success(), "{}", stderr(&one));
    assert_eq!(code(&stdout_json(&one)), Some("run_parked"));
    assert_eq!(scratch.outbox().len(), 1);
    let (same_turn, second, _, _) = only_pending(&scratch);
    assert_eq!(same_turn, turn);
    assert_ne!(second, first, "a new call waits");

    // The rest, with every call the run makes until it ends.
    let rest = scratch.durable(&["approve", "--turn", &turn, "--all", "--as", "dana"]);
    assert!(rest.status.success(), "{}", stderr(&rest));
    let outcome = stdout_json(&rest);
    assert_eq!(outcome["ok"], json!(true), "{outcome}");
    assert_eq!(outcome["value"]["result"]["emailed"].as_array().map(Vec::len), Some(4), "{outcome}");
    assert_eq!(scratch.outbox().len(), 4, "each email exactly once");
    assert!(scratch.pending().is_empty());
    let again = scratch.durable(&["approve", "--turn", &turn, "--all"]);
    assert!(!again.status.success());
    assert!(stderr(&again).contains("nothing of turn"), "{}", stderr(&again));
    assert_eq!(scratch.outbox().len(), 4);

    // One audit row per call, the script tool's included, each email approved by dana.
    let audit = scratch.durable(&["audit", "--turn", &turn, "--json"]);
    assert!(audit.status.success(), "{}", stderr(&audit));
    let rows = stdout_json(&audit)["audit"].as_array().unwrap().clone();
    let mut ids: Vec<&str> = rows.iter().map(|row| row["call_id"].as_str().unwrap()).collect();
    let count = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "one row per call: {rows:?}");
    let emails: Vec<&Value> = rows.iter().filter(|row| row["tool"] == json!("send_email")).collect();
    assert_eq!(emails.len(), 4, "{rows:?}");
    for email in emails {
        assert_eq!((&email["approval"], &email["decided_by"]), (&json!("approved"), &json!("dana")), "{email}");
    }
    let script = rows.iter().find(|row| row["tool"] == json!("run_script")).unwrap();
    assert_eq!(script["status"], json!("ok"), "the script tool's row, written when the run ended: {script}");
}

#[test]
fn a_denied_call_is_the_scripts_value_and_nothing_is_sent() {
    let scratch = Scratch::new();
    let script = scratch.path("one.py");
    std::fs::write(
        &script,
        "r = send_email(to='a@example.com', subject='s', body='b')\n[r['ok'], r['error']['code']]\n",
    )
    .unwrap();
    let parked = scratch.durable(&["run", script.to_str().unwrap(), "--approval", "later"]);
    assert_eq!(code(&stdout_json(&parked)), Some("run_parked"), "{}", stderr(&parked));
    let (turn, ..) = only_pending(&scratch);
    let denied = scratch.durable(&["deny", "--turn", &turn, "--all", "--reason", "not today"]);
    assert!(denied.status.success(), "{}", stderr(&denied));
    assert_eq!(stdout_json(&denied)["value"]["result"], json!([false, "approval_denied"]));
    assert!(scratch.outbox().is_empty());
}

#[test]
fn a_resume_killed_during_the_tool_is_taken_over_and_the_effect_is_not_repeated() {
    let scratch = Scratch::new();
    let effects = scratch.path("effects.log");
    let config = scratch.path("tether.toml");
    // The tool records its effect, then takes long enough to be killed in.
    let tool = format!(
        "[[tools]]\nname = \"wire\"\nkind = \"command\"\ndescription = \"Wires money.\"\n\
         command = [\"sh\", \"-c\", \"echo wired >> '{}'; sleep 30; echo '{{}}'\"]\n\
         timeout = \"60s\"\nrequires_approval = true\n\
         input_schema = {{ type = \"object\", properties = {{ amount = {{ type = \"integer\" }} }} }}\n",
        effects.display()
    );
    std::fs::write(&config, tool).unwrap();
    let script = scratch.path("wire.py");
    std::fs::write(&script, "r = wire(amount=1000000)\n[r['ok'], r['error']['code'] if not r['ok'] else None]\n")
        .unwrap();
    let config_arg = config.to_str().unwrap();
    let parked = scratch.durable(&["run", script.to_str().unwrap(), "--config", config_arg, "--approval", "later"]);
    assert_eq!(code(&stdout_json(&parked)), Some("run_parked"), "{}", stderr(&parked));
    let (turn, call, ..) = only_pending(&scratch);

    // kill -9 the process that approved it, while the tool runs.
    let mut approving = Command::new(super::TETHER)
        .args(["--audit-store", &scratch.store(), "--park-key-file", scratch.path_str("park.key")])
        .args(["approve", "--turn", &turn, "--all"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let give_up = Instant::now() + Duration::from_secs(120);
    while std::fs::read_to_string(&effects).unwrap_or_default().is_empty() {
        assert!(Instant::now() < give_up, "the tool never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    approving.kill().unwrap();
    approving.wait().unwrap();

    // Its claim stands until someone says it is gone.
    let refused = scratch.durable(&["approve", "--turn", &turn, "--all"]);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("--take-over"), "{}", stderr(&refused));

    let taken = scratch.durable(&["approve", "--turn", &turn, "--all", "--take-over"]);
    assert!(taken.status.success(), "{}", stderr(&taken));
    assert_eq!(stdout_json(&taken)["value"]["result"], json!([false, "possibly_executed"]));
    assert_eq!(std::fs::read_to_string(&effects).unwrap(), "wired\n", "the effect ran once");
    let rows =
        stdout_json(&scratch.durable(&["audit", "--turn", &turn, "--json"]))["audit"].as_array().unwrap().clone();
    let wires: Vec<&Value> = rows.iter().filter(|row| row["call_id"] == json!(call)).collect();
    assert_eq!(wires.len(), 1, "one row for the call: {rows:?}");
    assert_eq!(wires[0]["code"], json!("possibly_executed"));
}
