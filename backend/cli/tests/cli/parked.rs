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
    let rows = one_row_per_call(&scratch, &turn);
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

#[test]
fn a_process_killed_just_after_the_approval_leaves_the_call_waiting_and_its_effect_runs_once() {
    use tether_tests::postgres::{fresh_schema_sql, schema_url, server_url, unique_schema};
    let base = server_url();
    let schema = unique_schema("cli");
    let mut db = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    db.batch_execute(&fresh_schema_sql(&schema)).unwrap();
    let scratch = Scratch::with_store(schema_url(&base, &schema));
    let effects = scratch.path("effects.log");
    let config = scratch.path("tether.toml");
    std::fs::write(&config, effect_tool(&effects, "wire", "echo '{\\\"id\\\": 7}'", true)).unwrap();
    let script = scratch.path("wire.py");
    std::fs::write(&script, "w = wire(amount=1)\n[w['ok'], w.get('value')]\n").unwrap();
    let config = config.display().to_string();
    let parked = scratch.durable(&["run", script.to_str().unwrap(), "--config", &config, "--approval", "later"]);
    assert_eq!(code(&stdout_json(&parked)), Some("run_parked"), "{}", stderr(&parked));
    let (turn, call, ..) = only_pending(&scratch);

    // The call's ledger row inserted by a transaction held open: the
    // approving process decides, then waits on that row to record that the
    // call starts — the point just after the approval.
    let mut holder = postgres::Client::connect(&scratch.store(), postgres::NoTls).unwrap();
    let mut held = holder.transaction().unwrap();
    held.execute(
        "INSERT INTO tether_ledger (turn_id, call_id, tool, origin, depth, args, args_truncated, \
         approval_required, state, started_at_ms) VALUES ($1, $2, 'wire', 'script', 1, '{}', false, true, 'started', 0)",
        &[&turn, &call],
    )
    .unwrap();
    let mut approving = spawn_durable(&scratch, &["approve", "--turn", &turn, "--all", "--as", "dana"]);
    let give_up = Instant::now() + Duration::from_secs(60);
    let waiting_to_start = "SELECT count(*) FROM pg_stat_activity \
        WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO tether_ledger%'";
    while db.query_one(waiting_to_start, &[]).unwrap().get::<_, i64>(0) == 0 {
        assert!(Instant::now() < give_up, "the approving process never reached the ledger");
        if approving.try_wait().unwrap().is_some() {
            panic!("the approving process ended: {}", stderr(&approving.wait_with_output().unwrap()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    approving.kill().unwrap();
    approving.wait().unwrap();
    held.rollback().unwrap();
    assert!(std::fs::read_to_string(&effects).unwrap_or_default().is_empty(), "the tool never started");

    // The answer died with its process: the call still waits, claimed.
    let (same_turn, same_call, ..) = only_pending(&scratch);
    assert_eq!((&same_turn, &same_call), (&turn, &call));
    let refused = scratch.durable(&["approve", "--turn", &turn, "--all"]);
    assert!(stderr(&refused).contains("--take-over"), "{}", stderr(&refused));

    let taken = scratch.durable(&["approve", "--turn", &turn, "--all", "--take-over", "--as", "erin"]);
    assert!(taken.status.success(), "{}", stderr(&taken));
    assert_eq!(stdout_json(&taken)["value"]["result"], json!([true, {"id": 7}]));
    assert_eq!(std::fs::read_to_string(&effects).unwrap(), "wire\n", "the approved effect ran, once");
    assert!(scratch.pending().is_empty());
    let rows = one_row_per_call(&scratch, &turn);
    let wire = rows.iter().find(|row| row["call_id"] == json!(call)).unwrap();
    assert_eq!((&wire["approval"], &wire["decided_by"]), (&json!("approved"), &json!("erin")), "{wire}");
}

/// A config of three tools that record their effect in `effects`: `wire`
/// (needs approval), `note`, and `slow` (takes long enough to be killed in).
fn three_effects(scratch: &Scratch, effects: &std::path::Path) -> std::path::PathBuf {
    let tool = |name: &str, body: &str, approval: bool| effect_tool(effects, name, body, approval);
    let config = scratch.path("tether.toml");
    let text = [
        tool("wire", "echo '{\\\"id\\\": 7}'", true),
        tool("note", "echo '{\\\"noted\\\": true}'", false),
        tool("slow", "sleep 30; echo '{}'", false),
    ]
    .concat();
    std::fs::write(&config, text).unwrap();
    config
}

/// A command tool `name` that appends its name to `effects`, then runs `body`.
fn effect_tool(effects: &std::path::Path, name: &str, body: &str, approval: bool) -> String {
    format!(
        "[[tools]]\nname = \"{name}\"\nkind = \"command\"\ndescription = \"Records `{name}`.\"\n\
         command = [\"sh\", \"-c\", \"echo {name} >> '{}'; {body}\"]\n\
         timeout = \"60s\"\nrequires_approval = {approval}\ninput_schema = {{ type = \"object\" }}\n",
        effects.display()
    )
}

/// The script over [`three_effects`]: what each call gave it.
const THREE_CALLS: &str = "w = wire(amount=1)\nn = note()\ns = slow()\n\
    [w['ok'], w.get('value'), n['ok'], n.get('value'), s['ok'], None if s['ok'] else s['error']['code']]\n";

/// Parks the [`THREE_CALLS`] script at its `wire` call: (turn, config path).
fn park_three(scratch: &Scratch, effects: &std::path::Path, sidecar: &[&str]) -> (String, String) {
    let config = three_effects(scratch, effects);
    let script = scratch.path("three.py");
    std::fs::write(&script, THREE_CALLS).unwrap();
    let config = config.display().to_string();
    let mut args = vec!["run", script.to_str().unwrap(), "--config", &config, "--approval", "later"];
    args.extend_from_slice(sidecar);
    let parked = scratch.durable(&args);
    assert_eq!(code(&stdout_json(&parked)), Some("run_parked"), "{}", stderr(&parked));
    let (turn, _, tool, _) = only_pending(scratch);
    assert_eq!(tool, "wire");
    (turn, config)
}

/// `tether ARGS` with the scratch's store and park key, spawned.
fn spawn_durable(scratch: &Scratch, args: &[&str]) -> std::process::Child {
    Command::new(super::TETHER)
        .args(["--audit-store", &scratch.store(), "--park-key-file", scratch.path_str("park.key")])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until `effects` holds `line`.
fn wait_for_effect(effects: &std::path::Path, line: &str) {
    let give_up = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(effects).unwrap_or_default().lines().any(|l| l == line) {
        assert!(Instant::now() < give_up, "`{line}` never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The turn's audit rows, each call id at most once.
fn one_row_per_call(scratch: &Scratch, turn: &str) -> Vec<Value> {
    let audit = scratch.durable(&["audit", "--turn", turn, "--json"]);
    assert!(audit.status.success(), "{}", stderr(&audit));
    let rows = stdout_json(&audit)["audit"].as_array().unwrap().clone();
    let mut ids: Vec<&str> = rows.iter().map(|row| row["call_id"].as_str().unwrap()).collect();
    let count = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "one row per call: {rows:#?}");
    rows
}

#[test]
fn a_resume_killed_after_a_tool_settled_answers_it_from_the_ledger_and_runs_nothing_twice() {
    let scratch = Scratch::new();
    let effects = scratch.path("effects.log");
    let (turn, _) = park_three(&scratch, &effects, &[]);

    // kill -9 the process that approved `wire`, after `wire` and `note`
    // settled, while `slow` runs.
    let mut approving = spawn_durable(&scratch, &["approve", "--turn", &turn, "--all"]);
    wait_for_effect(&effects, "slow");
    approving.kill().unwrap();
    approving.wait().unwrap();

    let taken = scratch.durable(&["approve", "--turn", &turn, "--all", "--take-over"]);
    assert!(taken.status.success(), "{}", stderr(&taken));
    assert_eq!(
        stdout_json(&taken)["value"]["result"],
        json!([true, {"id": 7}, true, {"noted": true}, false, "possibly_executed"]),
        "wire from the stored answer, note from the ledger's record, slow may have run"
    );
    assert_eq!(std::fs::read_to_string(&effects).unwrap(), "wire\nnote\nslow\n", "each effect once");
    assert!(scratch.pending().is_empty());
    let rows = one_row_per_call(&scratch, &turn);
    let tools: Vec<&str> = rows.iter().map(|row| row["tool"].as_str().unwrap()).collect();
    for tool in ["wire", "note", "slow", "run_script"] {
        assert_eq!(tools.iter().filter(|t| **t == tool).count(), 1, "{tool}: {rows:#?}");
    }
}

/// A `tether-sidecar` process on a Unix socket in the scratch folder, with
/// the scratch's park key and compile cache.
struct Sidecar {
    child: std::process::Child,
    address: String,
}

impl Sidecar {
    fn start(scratch: &Scratch, name: &str) -> Sidecar {
        use std::io::BufRead as _;
        use std::os::unix::fs::MetadataExt as _;
        // Built by the workspace's test build beside this package's `tether`.
        let binary = std::path::Path::new(super::TETHER).with_file_name("tether-sidecar");
        assert!(binary.exists(), "no `{}`: build it (`cargo build -p tether-sidecar`)", binary.display());
        let socket = scratch.path(&format!("{name}.sock"));
        let uid = std::fs::metadata(scratch.path("")).unwrap().uid().to_string();
        let mut child = Command::new(binary)
            .args(["--socket", socket.to_str().unwrap(), "--no-tcp", "--allow-uid", &uid])
            .args(["--park-key-file", scratch.path_str("park.key"), "--cache-dir", scratch.path_str("cache")])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(stdout).lines();
        let address = loop {
            match lines.next() {
                Some(line) => {
                    if let Some(found) = line.unwrap().strip_prefix("listening on ") {
                        break found.to_owned();
                    }
                }
                None => panic!("the sidecar exited before it listened"),
            }
        };
        // Its later lines are not read; a closed pipe does not stop it.
        drop(lines);
        Sidecar { child, address }
    }

    fn kill(self) {
        drop(self);
    }
}

impl Drop for Sidecar {
    /// SIGKILL, also when a test fails: no sidecar outlives its test.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn runs_parked_on_a_sidecar_killed_twice_resume_on_a_third_and_run_nothing_twice() {
    let scratch = Scratch::new();
    std::fs::create_dir_all(scratch.path("cache")).unwrap();
    // The key the sidecars share, as a deployment's Secret.
    std::fs::write(scratch.path("park.key"), [7u8; 32]).unwrap();
    let effects = scratch.path("effects.log");
    let first = Sidecar::start(&scratch, "a");
    let (turn, _) = park_three(&scratch, &effects, &["--sidecar", &first.address.clone()]);
    // kill -9 the sidecar while the run waits on approval: it held nothing.
    first.kill();

    // kill -9 the second while the resumed run is in `slow`, `wire` and `note` settled.
    let second = Sidecar::start(&scratch, "b");
    let approving = spawn_durable(&scratch, &["approve", "--turn", &turn, "--all", "--sidecar", &second.address]);
    wait_for_effect(&effects, "slow");
    second.kill();
    let interrupted = approving.wait_with_output().unwrap();
    assert!(!interrupted.status.success());
    assert!(stderr(&interrupted).contains("Nothing is lost"), "{}", stderr(&interrupted));
    let runs = scratch.pending();
    assert_eq!(runs.len(), 1, "still parked: {runs:?}");

    // Resumed on a third, without `--take-over`: the claim was released.
    let third = Sidecar::start(&scratch, "c");
    let resumed = scratch.durable(&["approve", "--turn", &turn, "--all", "--sidecar", &third.address]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let result = stdout_json(&resumed)["value"]["result"].clone();
    let first_four = result.as_array().map(|all| all[..4].to_vec());
    assert_eq!(first_four, Some(vec![json!(true), json!({"id": 7}), json!(true), json!({"noted": true})]), "{result}");
    assert_eq!(std::fs::read_to_string(&effects).unwrap(), "wire\nnote\nslow\n", "each effect once: {result}");
    assert!(scratch.pending().is_empty());
    let rows = one_row_per_call(&scratch, &turn);
    assert_eq!(rows.iter().filter(|row| row["tool"] == json!("run_script")).count(), 1, "{rows:#?}");
    third.kill();
}

#[test]
fn expire_times_out_calls_that_waited_past_the_limit_and_the_script_goes_on() {
    let scratch = Scratch::new();
    let effects = scratch.path("effects.log");
    let config = three_effects(&scratch, &effects);
    // The wait limit: one second.
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.insert_str(0, "[turn]\napproval_timeout = \"1s\"\n\n");
    std::fs::write(&config, text).unwrap();
    let script = scratch.path("wire.py");
    std::fs::write(&script, "w = wire(amount=1)\n[w['ok'], w['error']['code']]\n").unwrap();
    let parked = scratch.durable(&[
        "run",
        script.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--approval",
        "later",
    ]);
    assert_eq!(code(&stdout_json(&parked)), Some("run_parked"), "{}", stderr(&parked));
    let (turn, call, ..) = only_pending(&scratch);

    std::thread::sleep(Duration::from_millis(1500));
    let expired = scratch.durable(&["expire"]);
    assert!(expired.status.success(), "{}", stderr(&expired));
    assert_eq!(stdout_json(&expired)[&turn]["value"]["result"], json!([false, "approval_timeout"]));
    assert!(std::fs::read_to_string(&effects).unwrap_or_default().is_empty(), "nothing ran");
    assert!(scratch.pending().is_empty());
    let rows = one_row_per_call(&scratch, &turn);
    let wire = rows.iter().find(|row| row["call_id"] == json!(call)).unwrap();
    assert_eq!((&wire["code"], &wire["approval"]), (&json!("approval_timeout"), &json!("timed_out")), "{wire}");
}

/// A config over the demo world with one agent, the fake model at `model`.
fn config_with_one_agent(scratch: &Scratch, model: &tether_tests::fake_model::FakeModel) -> String {
    let demo =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo.toml"))
            .unwrap();
    let text = format!("{demo}\n[agents.main]\nbase_url = \"{}\"\nmodel = \"fake-main\"\n", model.base_url);
    let path = scratch.path("tether.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_turn_parked_for_later_goes_on_with_the_model_after_each_answer_from_other_processes() {
    use tether_tests::fake_model::{FakeModel, Reply};
    let scratch = Scratch::new();
    let email = |to: &str| json!({"to": to, "subject": "Contract", "body": "It ended."});
    let script = "r = send_email(to='b@example.com', subject='Contract', body='It ended.')\n[r['ok']]";
    // One answer with two calls: a direct email (approval), then a script that emails.
    let model = FakeModel::start(vec![
        Reply::Calls(vec![
            ("c1".into(), "send_email".into(), email("a@example.com")),
            ("c2".into(), "run_script".into(), json!({"code": script})),
        ]),
        Reply::Text("Both owners were emailed.".into()),
    ])
    .await;
    let config = config_with_one_agent(&scratch, &model);
    // Blocking in place: the fake model answers on the other worker.
    let run = |args: &[&str]| tokio::task::block_in_place(|| scratch.durable(args));

    // The model's own call waits: the turn parks, and nothing is sent.
    let asked = run(&["ask", "Email the owners", "--config", &config, "--approval", "later"]);
    assert!(asked.status.success(), "{}", stderr(&asked));
    let report = stdout_json(&asked);
    assert_eq!((&report["parked"], &report["answer"]), (&json!(true), &Value::Null), "{report}");
    assert!(stderr(&asked).contains("tether approve"), "says how to answer: {}", stderr(&asked));
    let (turn, first, tool, args) = only_pending(&scratch);
    assert_eq!((first.as_str(), tool.as_str(), &args), ("c1", "send_email", &email("a@example.com")));
    assert!(scratch.outbox().is_empty());
    assert_eq!(model.requests().len(), 1);

    // Approved from another process: the email goes, then the model's next
    // call starts its script, whose email parks it again.
    let one = run(&["approve", "--turn", &turn, "--call", "c1", "--as", "dana", "--config", &config]);
    assert!(one.status.success(), "{}", stderr(&one));
    assert_eq!(stdout_json(&one)["parked"], json!(true), "{}", stderr(&one));
    assert_eq!(scratch.outbox(), ["a@example.com"]);
    let (same, second, tool, _) = only_pending(&scratch);
    assert_eq!((same.as_str(), tool.as_str()), (turn.as_str(), "send_email"));
    assert!(second.starts_with("c2/"), "the script's call waits: {second}");
    assert_eq!(model.requests().len(), 1, "the model is not asked before every call of its answer is done");

    // The rest: the run ends, and the model gets both results and answers.
    let rest = run(&["approve", "--turn", &turn, "--all", "--as", "dana"]);
    assert!(rest.status.success(), "{}", stderr(&rest));
    let answered = stdout_json(&rest);
    assert_eq!(answered["answer"], json!("Both owners were emailed."), "{answered}");
    assert_eq!((&answered["parked"], &answered["model_requests"]), (&json!(false), &json!(2)), "{answered}");
    assert_eq!(scratch.outbox(), ["a@example.com", "b@example.com"], "each email exactly once");
    assert!(scratch.pending().is_empty());
    assert_eq!(model.tool_result(1, "c1")["ok"], json!(true));
    assert_eq!(model.tool_result(1, "c2")["value"]["result"], json!([true]), "the run's result reached the model");
    let again = run(&["approve", "--turn", &turn, "--all"]);
    assert!(!again.status.success() && stderr(&again).contains("nothing of turn"), "{}", stderr(&again));

    // One audit row per call; both emails approved by dana.
    let rows = one_row_per_call(&scratch, &turn);
    let by = |id: &str| rows.iter().find(|row| row["call_id"] == json!(id)).unwrap_or_else(|| panic!("{id}: {rows:?}"));
    assert_eq!((&by("c1")["approval"], &by("c1")["decided_by"]), (&json!("approved"), &json!("dana")));
    assert_eq!((&by(&second)["approval"], &by(&second)["decided_by"]), (&json!("approved"), &json!("dana")));
    assert_eq!(by("c2")["status"], json!("ok"));

    // `chat` cannot park: it says what to use instead.
    let chat = run(&["chat", "--config", &config, "--approval", "later"]);
    assert!(!chat.status.success() && stderr(&chat).contains("tether ask --approval later"), "{}", stderr(&chat));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_direct_call_of_a_parked_agent_turn_is_the_models_failure_value_and_nothing_is_sent() {
    use tether_tests::fake_model::{FakeModel, Reply, call};
    let scratch = Scratch::new();
    let model = FakeModel::start(vec![
        call("c1", "send_email", json!({"to": "a@example.com", "subject": "s", "body": "b"})),
        Reply::Text("The email was not sent.".into()),
    ])
    .await;
    let config = config_with_one_agent(&scratch, &model);
    let run = |args: &[&str]| tokio::task::block_in_place(|| scratch.durable(args));
    let asked = run(&["ask", "Email a", "--config", &config, "--approval", "later"]);
    assert_eq!(stdout_json(&asked)["parked"], json!(true), "{}", stderr(&asked));
    let (turn, ..) = only_pending(&scratch);
    let denied = run(&["deny", "--turn", &turn, "--all", "--reason", "not today", "--as", "sam"]);
    assert!(denied.status.success(), "{}", stderr(&denied));
    assert_eq!(stdout_json(&denied)["answer"], json!("The email was not sent."));
    let seen = model.tool_result(1, "c1");
    assert_eq!(seen["error"]["code"], json!("approval_denied"), "{seen}");
    assert!(seen["error"]["message"].as_str().is_some_and(|m| m.contains("not today")), "{seen}");
    assert!(scratch.outbox().is_empty() && scratch.pending().is_empty());
    let rows = one_row_per_call(&scratch, &turn);
    assert_eq!((&rows[0]["approval"], &rows[0]["decided_by"]), (&json!("denied"), &json!("sam")), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_agent_turn_parks_with_the_turn_around_it_and_both_go_on_after_answers_from_other_processes() {
    use tether_tests::fake_model::{FakeModel, Reply, call};
    let scratch = Scratch::new();
    let email = |to: &str| json!({"to": to, "subject": "Contract", "body": "It ended."});
    let script = "r = send_email(to='b@example.com', subject='Contract', body='It ended.')\n[r['ok']]";
    // Requests in order: main asks its helper agent; the helper emails one
    // owner directly (approval) and one from a script; then each answers.
    let model = FakeModel::start(vec![
        call("m1", "agent_helper", json!({"request": "Email the owners of ended contracts"})),
        Reply::Calls(vec![
            ("h1".into(), "send_email".into(), email("a@example.com")),
            ("h2".into(), "run_script".into(), json!({"code": script})),
        ]),
        Reply::Text("Both owners were emailed.".into()),
        Reply::Text("My helper emailed both owners.".into()),
    ])
    .await;
    let demo =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo.toml"))
            .unwrap();
    let url = &model.base_url;
    let text = format!(
        "{demo}\n[agents.main]\nbase_url = \"{url}\"\nmodel = \"fake-main\"\n\n[[agents.main.tools]]\nagent = \
         \"helper\"\ndescription = \"Emails people.\"\n\n[agents.helper]\nbase_url = \"{url}\"\nmodel = \"fake-helper\"\n"
    );
    let config = scratch.path("tether.toml");
    std::fs::write(&config, text).unwrap();
    let config = config.display().to_string();
    let run = |args: &[&str]| tokio::task::block_in_place(|| scratch.durable(args));

    // The helper's direct call waits: its turn parks, and so does main's around it.
    let asked = run(&["ask", "Email the owners", "--config", &config, "--approval", "later"]);
    assert!(asked.status.success(), "{}", stderr(&asked));
    assert_eq!(stdout_json(&asked)["parked"], json!(true), "{}", stderr(&asked));
    let (nested, first, tool, args) = only_pending(&scratch);
    assert_eq!((first.as_str(), tool.as_str(), &args), ("h1", "send_email", &email("a@example.com")));
    let turn = nested.strip_suffix("/m1").unwrap_or_else(|| panic!("the helper's turn is under m1: {nested}"));
    assert!(stderr(&asked).contains(&format!("--turn {turn} --all")), "says how to answer: {}", stderr(&asked));
    let listed = run(&["pending", "--turn", turn, "--json"]);
    let listed = stdout_json(&listed);
    assert_eq!(listed[0]["pending"][0]["call_id"], json!("h1"), "the top turn lists its nested turn's calls: {listed}");
    assert!(scratch.outbox().is_empty());
    assert_eq!(model.requests().len(), 2);

    // Approved from another process, named by the nested turn: the email goes,
    // the helper's script then parks at its own email, and both turns stay parked.
    let one = run(&["approve", "--turn", &nested, "--call", "h1", "--as", "dana", "--config", &config]);
    assert!(one.status.success(), "{}", stderr(&one));
    assert_eq!(stdout_json(&one)["parked"], json!(true), "{}", stderr(&one));
    assert_eq!(scratch.outbox(), ["a@example.com"]);
    let (same, second, tool, _) = only_pending(&scratch);
    assert_eq!((same.as_str(), tool.as_str()), (nested.as_str(), "send_email"));
    assert!(second.starts_with("h2/"), "the helper's script's call waits: {second}");
    assert_eq!(model.requests().len(), 2, "no model is asked before every call of its answer is done");

    // The rest, from the top turn: the script ends, the helper answers, and
    // its answer is main's agent tool result.
    let rest = run(&["approve", "--turn", turn, "--all", "--as", "dana"]);
    assert!(rest.status.success(), "{}", stderr(&rest));
    let answered = stdout_json(&rest);
    assert_eq!(answered["answer"], json!("My helper emailed both owners."), "{answered} {}", stderr(&rest));
    assert_eq!(scratch.outbox(), ["a@example.com", "b@example.com"], "each email exactly once");
    assert!(scratch.pending().is_empty());
    assert_eq!(model.requests().len(), 4);
    assert_eq!(model.tool_result(2, "h1")["ok"], json!(true));
    assert_eq!(model.tool_result(2, "h2")["value"]["result"], json!([true]), "the run's result reached the helper");
    assert_eq!(
        model.tool_result(3, "m1")["value"],
        json!("Both owners were emailed."),
        "the helper's answer reached main"
    );
    let again = run(&["approve", "--turn", turn, "--all"]);
    assert!(!again.status.success() && stderr(&again).contains("nothing of turn"), "{}", stderr(&again));

    // One audit row per call, the nested turn's under main's agent tool call.
    let rows = one_row_per_call(&scratch, turn);
    let by = |id: &str| rows.iter().find(|row| row["call_id"] == json!(id)).unwrap_or_else(|| panic!("{id}: {rows:?}"));
    assert_eq!((&by("m1")["tool"], &by("m1")["status"]), (&json!("agent_helper"), &json!("ok")));
    assert_eq!((&by("h1")["approval"], &by("h1")["decided_by"]), (&json!("approved"), &json!("dana")));
    assert_eq!((&by(&second)["approval"], &by(&second)["decided_by"]), (&json!("approved"), &json!("dana")));
    assert_eq!((&by("h2")["status"], &by("h2")["depth"]), (&json!("ok"), &json!(1)));
}
