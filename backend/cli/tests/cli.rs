//! The `tether` binary as a user runs it: `ask`, `audit`, `stubs` and `chat`
//! (in tmux, an approval answered at the prompt) against a fake
//! OpenAI-compatible server on loopback, an embedded sidecar and a SQLite
//! audit store.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use tether_tests::fake_model::{FakeModel, Reply, call};

const TETHER: &str = env!("CARGO_BIN_EXE_tether");

#[path = "cli/parked.rs"]
mod parked;

struct Scratch {
    dir: tempfile::TempDir,
    /// The audit store, when it is not the scratch's SQLite file.
    store: Option<String>,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch { dir: tempfile::tempdir().unwrap(), store: None }
    }

    /// A scratch whose audit store is the one at `url`.
    fn with_store(url: String) -> Scratch {
        Scratch { store: Some(url), ..Scratch::new() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn store(&self) -> String {
        self.store.clone().unwrap_or_else(|| format!("sqlite:{}", self.path("audit.db").display()))
    }

    /// `tether ARGS` with this scratch's audit store and demo database.
    fn tether(&self, args: &[&str]) -> Output {
        Command::new(TETHER)
            .args(["--audit-store", &self.store(), "--demo-db"])
            .arg(self.path("demo.db"))
            .args(args)
            .env_remove("TETHER_DEMO_DB")
            .env_remove("TETHER_MODEL_BASE_URL")
            .env_remove("TETHER_MODEL")
            .output()
            .unwrap()
    }
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// A config over the demo world's database plus two peer agents.
fn config_with_agents(scratch: &Scratch, main: &FakeModel, helper: &FakeModel) -> PathBuf {
    let demo = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo.toml")).unwrap();
    let text = format!(
        "{demo}\n[turn]\nmax_depth = 3\ndeadline = \"60s\"\n\n\
         [agents.main]\nbase_url = \"{}\"\nmodel = \"fake-main\"\n\n\
         [agents.helper]\nbase_url = \"{}\"\nmodel = \"fake-helper\"\nsystem_prompt = \"You summarise.\"\n\n\
         [[agent_tools]]\nagent = \"helper\"\ndescription = \"Summarises a text.\"\n",
        main.base_url, helper.base_url
    );
    let path = scratch.path("tether.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_runs_the_model_s_script_and_agent_calls_through_the_turn_and_audit_shows_the_tree() {
    let scratch = Scratch::new();
    let helper = FakeModel::start(vec![Reply::Echo("summary: ".into())]).await;
    let script = "issues = unwrap(list_issues(opened_after='2026-01-01'))\n\
                  s = agent_helper(request=f'{len(issues)} issues')\n\
                  m = send_email(to='a@example.com', subject='s', body='b')\n\
                  [s['value'] if s['ok'] else s['error'], m['ok'], m['error']['code'] if not m['ok'] else None]";
    let main = FakeModel::start(vec![
        call("c1", "run_script", json!({"code": script})),
        call("c2", "get_contract", json!({"customer_id": "nope"})),
        Reply::Text("Done: one summary, the email was refused.".into()),
    ])
    .await;
    let config = config_with_agents(&scratch, &main, &helper);

    // Blocking in place: the fake models answer on the other worker.
    let output = tokio::task::block_in_place(|| {
        scratch.tether(&["--approval", "deny", "ask", "What happened?", "--config", config.to_str().unwrap()])
    });
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report = stdout_json(&output);
    assert_eq!(report["answer"], "Done: one summary, the email was refused.", "{report}");
    assert_eq!(report["model_requests"], 3);
    let ran = main.tool_result(1, "c1");
    let [summary, sent, code] =
        ran["value"]["result"].as_array().unwrap_or_else(|| panic!("{ran}")).clone().try_into().unwrap();
    assert!(
        summary.as_str().is_some_and(|s| s.starts_with("summary: ")),
        "the helper's text reached the script: {ran}"
    );
    assert_eq!((sent, code), (json!(false), json!("approval_denied")));
    assert_eq!(main.tools_offered(0), ["list_issues", "get_contract", "send_email", "run_script", "agent_helper"]);
    assert_eq!(helper.requests()[0]["model"], "fake-helper");

    // The calls of the turn, as `ask` reports them and as `audit` reads them back.
    let turn = report["turn_id"].as_str().unwrap().to_owned();
    let c1 = report["calls"].as_array().unwrap().iter().find(|c| c["call_id"] == "c1").unwrap();
    assert_eq!(c1["script"], json!(script), "ask's JSON holds the script: {c1}");
    let tools: Vec<(&str, u64)> = report["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["tool"].as_str().unwrap(), c["depth"].as_u64().unwrap()))
        .collect();
    for expected in [("run_script", 0), ("list_issues", 1), ("agent_helper", 1), ("send_email", 1), ("get_contract", 0)]
    {
        assert!(tools.contains(&expected), "{expected:?} in {tools:?}");
    }

    let text = scratch.tether(&["audit", "--turn", &turn]);
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    let text = String::from_utf8(text.stdout).unwrap();
    let line_of =
        |needle: &str| text.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle} in\n{text}"));
    let indent = |line: &str| line.len() - line.trim_start().len();
    assert!(indent(line_of(" list_issues (script)")) > indent(line_of("c1 run_script (model)")), "{text}");
    assert!(line_of(" send_email (script)").contains("`approval_denied`"), "{text}");
    assert!(line_of(" send_email (script)").contains("approval denied by"), "{text}");

    let denied = stdout_json(&scratch.tether(&["audit", "--turn", &turn, "--code", "approval_denied", "--json"]));
    let rows = denied["audit"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{denied}");
    assert_eq!((rows[0]["tool"].as_str(), rows[0]["origin"].as_str()), (Some("send_email"), Some("script")));
    let run_id = rows[0]["script_run_id"].as_str().unwrap().to_owned();
    let of_run = stdout_json(&scratch.tether(&["audit", "--turn", &turn, "--run", &run_id, "--json"]));
    let of_run: Vec<&str> = of_run["audit"].as_array().unwrap().iter().map(|r| r["tool"].as_str().unwrap()).collect();
    assert_eq!(of_run.len(), 3, "the script's three calls: {of_run:?}");
    let short = run_id.rsplit('/').next().unwrap();
    let by_short = stdout_json(&scratch.tether(&["audit", "--turn", &turn, "--run", short, "--json"]));
    assert_eq!(by_short["audit"].as_array().map(Vec::len), Some(3), "the run's short id `{short}` works too");
    assert!(!of_run.contains(&"run_script") && !of_run.contains(&"get_contract"), "{of_run:?}");

    let missing = scratch.tether(&["audit", "--turn", "no-such-turn"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no turn `no-such-turn`"));
}

#[test]
fn ask_without_a_model_says_how_to_name_one_and_an_unreachable_model_is_no_answer() {
    let scratch = Scratch::new();
    let none = scratch.tether(&["ask", "hi"]);
    assert!(!none.status.success());
    let said = String::from_utf8_lossy(&none.stderr);
    assert!(said.contains("--base-url") && said.contains("[agents.main]"), "{said}");

    // Port 1: nothing listens. The turn ends without an answer, as JSON.
    let gone = scratch.tether(&["ask", "hi", "--base-url", "http://127.0.0.1:1/v1", "--model", "m"]);
    assert!(!gone.status.success());
    let report = stdout_json(&gone);
    assert_eq!(report["ok"], false);
    assert!(report["error"].as_str().unwrap().contains("127.0.0.1:1"), "{report}");
}

#[test]
fn stubs_print_the_python_api_of_the_configured_tools_and_agent_tools() {
    let scratch = Scratch::new();
    let demo = scratch.tether(&["stubs"]);
    assert!(demo.status.success(), "{}", String::from_utf8_lossy(&demo.stderr));
    let stubs = String::from_utf8(demo.stdout).unwrap();
    for def in ["def list_issues(", "def get_contract(", "def send_email("] {
        assert!(stubs.contains(def), "{def} in\n{stubs}");
    }
    assert!(!stubs.contains("def run_script("), "a script cannot start scripts:\n{stubs}");
    assert!(!stubs.contains("def agent_"), "no agent tools unless an agent is named:\n{stubs}");

    let path = scratch.path("agents.toml");
    std::fs::write(
        &path,
        "[agents.main]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n\
         [agents.Billing-Desk]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n\
         [[agent_tools]]\nagent = \"Billing-Desk\"\ndescription = \"Answers billing questions.\"\n",
    )
    .unwrap();
    let as_main = scratch.tether(&["stubs", "--config", path.to_str().unwrap(), "--agent", "main"]);
    assert!(as_main.status.success(), "{}", String::from_utf8_lossy(&as_main.stderr));
    let stubs = String::from_utf8(as_main.stdout).unwrap();
    assert!(stubs.contains("def agent_billing_desk(") && stubs.contains("request: str"), "{stubs}");
    assert!(stubs.contains("Answers billing questions."), "{stubs}");
    let as_itself = scratch.tether(&["stubs", "--config", path.to_str().unwrap(), "--agent", "Billing-Desk"]);
    assert!(!String::from_utf8(as_itself.stdout).unwrap().contains("def agent_billing_desk("), "never itself");
}

#[test]
fn a_mistake_in_the_agents_section_is_reported_with_its_key() {
    let scratch = Scratch::new();
    let path = scratch.path("bad.toml");
    std::fs::write(&path, "[agents.main]\nbase_url = \"http://x/v1\"\nmodle = \"m\"\n").unwrap();
    let output = scratch.tether(&["ask", "hi", "--config", path.to_str().unwrap()]);
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("`agents.main.modle`: unknown key; did you mean `model`?"), "{said}");
}

/// A tmux session running `tether chat`, read through `capture-pane`.
struct Tmux {
    name: String,
}

impl Tmux {
    fn start(name: &str, command: &str) -> Tmux {
        let status = Command::new("tmux")
            .args(["new-session", "-d", "-s", name, "-x", "220", "-y", "60", command])
            .status()
            .expect("tmux is installed by ./x test's setup");
        assert!(status.success());
        Tmux { name: name.to_owned() }
    }

    fn screen(&self) -> String {
        let output =
            Command::new("tmux").args(["capture-pane", "-p", "-J", "-S", "-200", "-t", &self.name]).output().unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn type_line(&self, text: &str) {
        assert!(Command::new("tmux").args(["send-keys", "-t", &self.name, "-l", text]).status().unwrap().success());
        assert!(Command::new("tmux").args(["send-keys", "-t", &self.name, "Enter"]).status().unwrap().success());
    }

    /// Waits until the screen shows `text` (at most 60 s: the first run
    /// compiles the guest into the cache).
    async fn wait_for(&self, text: &str) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "`{text}` never appeared; the screen:\n{screen}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the screen shows `text` `times` times (at most 60 s).
    async fn wait_for_count(&self, text: &str, times: usize) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.matches(text).count() >= times {
                return screen;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "`{text}` never appeared {times}×; the screen:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn press(&self, key: &str) {
        assert!(Command::new("tmux").args(["send-keys", "-t", &self.name, key]).status().unwrap().success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.name]).status();
    }
}

/// The shell command that runs `tether chat ARGS` in a tmux session over
/// the scratch's stores and history file, then says how it exited.
fn chat_command(scratch: &Scratch, args: &str) -> String {
    format!(
        "env TETHER_HISTORY={} {TETHER} --audit-store {} --demo-db {} chat {args}; echo tether-exited-$?; sleep 30",
        scratch.path("history").display(),
        scratch.store(),
        scratch.path("demo.db").display(),
    )
}

/// Issue 27: the chat's line is edited (cursor keys) and its messages are
/// remembered (↑), in this session and the next one, through the history
/// file; Ctrl-D ends the chat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_lines_are_edited_and_remembered_across_sessions() {
    let scratch = Scratch::new();
    let model = FakeModel::start_repeating(vec![], Some(Reply::Echo("you said: ".into()))).await;
    let command = chat_command(&scratch, &format!("--base-url {} --model fake", model.base_url));
    {
        let tmux = Tmux::start(&format!("tether-chat-edit-{}", std::process::id()), &command);
        tmux.wait_for("you> ").await;
        // A typo mended in place: the cursor goes back into the word.
        assert!(
            Command::new("tmux").args(["send-keys", "-t", &tmux.name, "-l", "hello wrld"]).status().unwrap().success()
        );
        for _ in 0..3 {
            tmux.press("Left");
        }
        tmux.type_line("o");
        tmux.wait_for("you said: hello world").await;
        tmux.wait_for_count("you> ", 2).await;
        tmux.type_line("second");
        tmux.wait_for("you said: second").await;
        // ↑ ↑ brings back the first message; Enter sends it again.
        tmux.wait_for_count("you> ", 3).await;
        tmux.press("Up");
        tmux.press("Up");
        tmux.press("Enter");
        tmux.wait_for_count("you said: hello world", 2).await;
        tmux.type_line("/exit");
        tmux.wait_for("tether-exited-0").await;
    }
    let kept = std::fs::read_to_string(scratch.path("history")).unwrap();
    let kept: Vec<&str> = kept.lines().filter(|line| !line.starts_with('#')).collect();
    assert_eq!(kept, ["hello world", "second", "hello world", "/exit"], "the history file");

    // The next session starts with that history (`/exit` is its last
    // line); Ctrl-D ends it.
    let tmux = Tmux::start(&format!("tether-chat-edit2-{}", std::process::id()), &command);
    tmux.wait_for("you> ").await;
    for _ in 0..3 {
        tmux.press("Up");
    }
    tmux.press("Enter");
    tmux.wait_for("you said: second").await;
    tmux.wait_for_count("you> ", 2).await;
    tmux.press("C-d");
    let screen = tmux.wait_for("tether-exited-").await;
    assert!(screen.contains("tether-exited-0"), "{screen}");
    let said: Vec<String> = model
        .requests()
        .iter()
        .map(|request| {
            let messages = request["messages"].as_array().unwrap();
            messages.iter().rev().find(|m| m["role"] == "user").unwrap()["content"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(said, ["hello world", "second", "hello world", "second"], "what reached the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_in_a_terminal_asks_for_approval_and_the_answer_decides() {
    let scratch = Scratch::new();
    let script = "r = send_email(to='dana@example.com', subject='Contract ended', body='Hello')\nr['ok']";
    let model = FakeModel::start(vec![
        call("c1", "run_script", json!({"code": script})),
        Reply::Text("The email to dana went out.".into()),
        Reply::Echo("you said: ".into()),
        Reply::Hang,
    ])
    .await;
    let command = chat_command(&scratch, &format!("--base-url {} --model fake", model.base_url));
    let tmux = Tmux::start(&format!("tether-chat-{}", std::process::id()), &command);
    tmux.wait_for("you> ").await;
    tmux.type_line("Email dana that her contract ended.");
    let screen = tmux.wait_for("approve? [y/N]").await;
    assert!(
        screen.contains("approval needed: `send_email`") && screen.contains("\"to\": \"dana@example.com\""),
        "{screen}"
    );
    let coloured = Command::new("tmux").args(["capture-pane", "-p", "-e", "-t", &tmux.name]).output().unwrap();
    let coloured = String::from_utf8_lossy(&coloured.stdout);
    let prompt_line = coloured.lines().find(|line| line.contains("approve? [y/N]")).unwrap_or_default();
    assert!(prompt_line.contains('\u{1b}'), "the prompt in colour on a terminal: {coloured:?}");
    tmux.type_line("y");
    let screen = tmux.wait_for("The email to dana went out.").await;
    assert!(screen.contains("⇢ model calls run_script (c1)"), "the live view shows the model's call:\n{screen}");
    assert!(screen.contains("send_email"), "and the script's nested call:\n{screen}");
    // The conversation carries over: the second message is the next turn.
    tmux.wait_for("you> ").await;
    tmux.type_line("thanks");
    tmux.wait_for("main> you said: thanks").await;
    // A turn that hangs is cancelled with Ctrl-C, and the chat goes on.
    tmux.type_line("wait forever");
    let asked = Instant::now();
    while model.requests().len() < 4 {
        assert!(asked.elapsed() < Duration::from_secs(60), "the fourth message never reached the model");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // While the model thinks, a spinner says so; Ctrl-C clears it.
    tmux.wait_for("thinking").await;
    assert!(Command::new("tmux").args(["send-keys", "-t", &tmux.name, "C-c"]).status().unwrap().success());
    let screen = tmux.wait_for("(cancelled by you; the conversation is as it was").await;
    assert!(!screen.contains("thinking"), "the spinner's line is cleared:\n{screen}");
    tmux.type_line("/exit");
    let screen = tmux.wait_for("tether-exited-").await;
    assert!(screen.contains("tether-exited-0"), "{screen}");

    let requests = model.requests();
    assert_eq!(requests.len(), 4);
    let history = requests[2]["messages"].as_array().unwrap();
    assert!(
        history.iter().any(|m| m["content"] == "Email dana that her contract ended."),
        "the first turn is remembered"
    );
    assert_eq!(model.tool_result(1, "c1")["value"]["result"], true, "the approved email was sent");

    // The approval and the email are on record: the audit log and the outbox.
    let turn = screen
        .split_whitespace()
        .find_map(|w| {
            w.strip_prefix("chat-")
                .and_then(|rest| rest.strip_suffix(':'))
                .filter(|rest| rest.ends_with("-1"))
                .map(|rest| format!("chat-{rest}"))
        })
        .unwrap_or_else(|| panic!("the first turn's id on screen:\n{screen}"));
    let rows = stdout_json(&tokio::task::block_in_place(|| scratch.tether(&["audit", "--turn", &turn, "--json"])));
    let sent = rows["audit"].as_array().unwrap().iter().find(|r| r["tool"] == "send_email").unwrap().clone();
    assert_eq!(
        (sent["approval"].as_str(), sent["decided_by"].as_str()),
        (Some("approved"), Some("terminal")),
        "{sent}"
    );
    assert_eq!(rows["ledger"][0]["state"], "settled", "{rows}");
}

/// Issue 27: a prompt that timed out or was cancelled says so, takes no
/// line, and the chat goes on — the next prompt gets the next answer, and
/// the next message reaches the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_or_cancelled_approval_prompt_says_so_and_swallows_no_line() {
    let scratch = Scratch::new();
    let demo = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/demo.toml")).unwrap();
    let config = scratch.path("tether.toml");
    std::fs::write(&config, format!("{demo}\n[turn]\napproval_timeout = \"3s\"\n")).unwrap();
    let mail = |to: &str| format!("send_email(to='{to}', subject='Contract ended', body='Hello')");
    let both = format!("a = {}\nb = {}\n[a['ok'], b['ok']]", mail("dana@example.com"), mail("erin@example.com"));
    let model = FakeModel::start(vec![
        call("c1", "run_script", json!({"code": both})),
        Reply::Text("Two emails tried.".into()),
        Reply::Echo("you said: ".into()),
        call("c2", "run_script", json!({"code": mail("frank@example.com")})),
        Reply::Echo("you said: ".into()),
    ])
    .await;
    let command =
        chat_command(&scratch, &format!("--config {} --base-url {} --model fake", config.display(), model.base_url));
    let tmux = Tmux::start(&format!("tether-chat-stale-{}", std::process::id()), &command);
    tmux.wait_for("you> ").await;
    tmux.type_line("Email dana and erin.");
    // dana's prompt is left to time out: it says so, and takes no line.
    tmux.wait_for_count("approve? [y/N]", 1).await;
    let screen = tmux.wait_for("(no longer asking: the wait for `send_email`").await;
    assert!(screen.contains("it was not approved"), "{screen}");
    // erin's prompt is the next one, and `y` answers it.
    tmux.wait_for_count("approve? [y/N]", 2).await;
    tmux.type_line("y");
    tmux.wait_for("Two emails tried.").await;
    tmux.wait_for_count("you> ", 2).await;
    tmux.type_line("thanks");
    tmux.wait_for("you said: thanks").await;

    // Ctrl-C at a prompt cancels the turn, and the next line is a message.
    tmux.wait_for_count("you> ", 3).await;
    tmux.type_line("Email frank.");
    tmux.wait_for_count("approve? [y/N]", 3).await;
    tmux.press("C-c");
    let screen = tmux.wait_for("(cancelled by you;").await;
    assert_eq!(screen.matches("(no longer asking").count(), 2, "{screen}");
    let frank = screen.lines().find(|line| line.contains("✗ c2/1")).unwrap_or_default();
    assert!(frank.to_lowercase().contains("cancel"), "the call is cancelled with the turn:\n{screen}");
    tmux.wait_for_count("you> ", 4).await;
    tmux.type_line("hello again");
    tmux.wait_for("you said: hello again").await;
    tmux.type_line("/exit");
    let screen = tmux.wait_for("tether-exited-").await;
    assert!(screen.contains("tether-exited-0"), "{screen}");

    assert_eq!(model.tool_result(1, "c1")["value"]["result"], json!([false, true]), "dana timed out, erin approved");
    let outbox = rusqlite::Connection::open(scratch.path("demo.db")).unwrap();
    let sent: Vec<String> = outbox
        .prepare("SELECT to_addr FROM outbox ORDER BY id")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(sent, ["erin@example.com"], "only the approved email went out");
}

/// Issue 27: the chat's commands — /help, /tools, /audit, /reset, and an
/// unknown one named — over piped input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_commands_list_tools_show_the_last_turn_and_reset_the_conversation() {
    let scratch = Scratch::new();
    let model = FakeModel::start_repeating(vec![], Some(Reply::Echo("you said: ".into()))).await;
    let mut chat = Command::new(TETHER)
        .args(["--audit-store", &scratch.store(), "--demo-db"])
        .arg(scratch.path("demo.db"))
        .args(["chat", "--base-url", &model.base_url, "--model", "fake"])
        .env_remove("TETHER_DEMO_DB")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = "/audit\n/help\n/tools\nfirst message\n/audit\n/reset\nsecond message\n/nope\n/exit\n";
    chat.stdin.take().unwrap().write_all(lines.as_bytes()).unwrap();
    let output = tokio::task::block_in_place(|| chat.wait_with_output()).unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert!(err.contains("no turn yet"), "/audit before any turn: {err}");
    assert!(err.contains("/reset   forget the conversation"), "/help: {err}");
    assert!(err.contains("send_email") && err.contains("get_contract"), "/tools: {err}");
    assert!(err.contains("you said: first message") && err.contains("you said: second message"), "{err}");
    assert!(err.contains(": 0 calls"), "/audit shows the last turn: {err}");
    assert!(err.contains("`/nope` is not a command; /help lists them"), "{err}");
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "commands never reach the model");
    let said: Vec<&str> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(said, ["second message"], "/reset forgot the first message");
}

/// Issue 26: the audit keeps what ran. A 7 KB script (over the 4 KiB
/// `audit_args_bytes`) is in `tether audit --json` whole, as valid JSON; the
/// approver's reason is in the row of the call it decided; and two runs get
/// different turn ids.
#[test]
fn a_7_kb_script_is_kept_whole_in_the_audit_with_the_approvers_reason() {
    let scratch = Scratch::new();
    let comments: String =
        (0..130).map(|n| format!("# line {n:04} of a long script, kept whole by the audit\n")).collect();
    let code = format!("{comments}m = send_email(to='a@example.com', subject='s', body='b')\nm['ok']");
    assert!(code.len() > 7000);
    let file = scratch.path("long.py");
    std::fs::write(&file, &code).unwrap();
    let run = || {
        let output = scratch.tether(&["--approval", "deny", "run", file.to_str().unwrap(), "--input", "{}"]);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        let turn = stderr.split("rows for turn ").nth(1).and_then(|rest| rest.split_whitespace().next());
        turn.unwrap_or_else(|| panic!("no turn id in: {stderr}")).to_owned()
    };
    let (first, second) = (run(), run());
    assert_ne!(first, second, "each run is a turn of its own");

    let shown = stdout_json(&scratch.tether(&["audit", "--turn", &first, "--json"]));
    let rows = shown["audit"].as_array().unwrap();
    let script = rows.iter().find(|r| r["tool"] == "run_script").unwrap_or_else(|| panic!("{shown}"));
    let args = script["args"].clone();
    assert_eq!(args, json!({"code": code, "input": {}}), "the whole script");
    assert_eq!(script["args_truncated"], json!(false));
    let email = rows.iter().find(|r| r["tool"] == "send_email").unwrap_or_else(|| panic!("{shown}"));
    assert_eq!(
        (&email["approval"], &email["decided_by"], &email["approval_reason"]),
        (&json!("denied"), &json!("policy"), &json!("denied by the approval policy"))
    );
    let text = String::from_utf8_lossy(&scratch.tether(&["audit", "--turn", &first]).stdout).into_owned();
    assert!(text.contains("approval denied by policy (\"denied by the approval policy\")"), "{text}");

    // Issue 27: the script is always visible — raw from the audit, whole in the live view.
    let raw = scratch.tether(&["audit", "--turn", &first, "--script", "call_1"]);
    assert_eq!(String::from_utf8_lossy(&raw.stdout), format!("{code}\n"), "{}", String::from_utf8_lossy(&raw.stderr));
    let wrong = scratch.tether(&["audit", "--turn", &first, "--script", "call_9"]);
    let said = String::from_utf8_lossy(&wrong.stderr).into_owned();
    assert!(!wrong.status.success() && said.contains("its script calls: `call_1`"), "{said}");
    let live = scratch.tether(&["--approval", "deny", "run", file.to_str().unwrap(), "--input", "{}"]);
    let shown = String::from_utf8_lossy(&live.stderr).into_owned();
    for line in code.lines() {
        assert!(shown.contains(&format!("│ {line}\n")), "`{line}` shown before it runs:\n{shown}");
    }
}

#[test]
fn a_failed_command_says_why_in_one_line_even_with_rust_backtrace_set() {
    let scratch = Scratch::new();
    let script = scratch.path("fails.py");
    std::fs::write(&script, "raise ValueError('no')\n").unwrap();
    let output = Command::new(TETHER)
        .args(["--audit-store", &scratch.store(), "--demo-db"])
        .arg(scratch.path("demo.db"))
        .args(["run", script.to_str().unwrap()])
        .env("RUST_BACKTRACE", "1")
        .env_remove("TETHER_DEMO_DB")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|line| line.starts_with("Error: ")).collect();
    assert_eq!(errors, ["Error: the script did not complete"], "{stderr}");
    assert!(!stderr.contains("backtrace") && !stderr.contains("  0: "), "no backtrace: {stderr}");
    // The outcome itself still reaches stdout, as JSON.
    assert_eq!(stdout_json(&output)["error"]["code"], "runtime_error", "{}", String::from_utf8_lossy(&output.stdout));
}

/// Issue 27: headless commands never approve silently. With a config of the
/// user's own and no terminal, calls needing approval are denied, saying so;
/// on a terminal, the person is asked; the demo world's tools are approved by
/// `allow-all`, each call printed and counted (`policy` is its old name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_denies_without_a_terminal_asks_on_one_and_allow_all_says_what_it_approves() {
    let scratch = Scratch::new();
    let config = scratch.path("own.toml");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo.toml"), &config).unwrap();
    let script = scratch.path("email.py");
    std::fs::write(&script, "r = send_email(to='a@example.com', subject='s', body='b')\n[r['ok'], r['error']]\n")
        .unwrap();
    let (script_arg, config_arg) = (script.to_str().unwrap(), config.to_str().unwrap());
    let run = |args: &[&str]| tokio::task::block_in_place(|| scratch.tether(args));
    let result = |output: &Output| stdout_json(output)["value"]["result"].clone();

    let headless = run(&["run", script_arg, "--config", config_arg, "--input", "{}"]);
    let said = String::from_utf8_lossy(&headless.stderr).into_owned();
    assert!(said.contains("no terminal to ask on, so calls that need approval are denied"), "{said}");
    assert!(said.contains("✗ ") && !said.contains('\u{1b}'), "no colour in a pipe: {said:?}");
    assert_eq!(result(&headless)[0], json!(false), "{said}");
    assert_eq!(result(&headless)[1]["code"], json!("approval_denied"));

    for approval in [None, Some("allow-all"), Some("policy")] {
        let mut args = vec!["run", script_arg, "--input", "{}"];
        args.extend(approval.iter().flat_map(|name| ["--approval", *name]));
        let demo = run(&args);
        let said = String::from_utf8_lossy(&demo.stderr).into_owned();
        assert_eq!(result(&demo), json!([true, null]), "{approval:?}: {said}");
        assert!(said.contains("approved by allow-all (call 1 it answered): "), "{approval:?}: {said}");
        assert!(said.contains("send_email {\"body\":\"b\""), "the exact arguments: {said}");
        assert_eq!(said.contains("approval: allow-all approves the demo world's calls"), approval.is_none(), "{said}");
    }

    // On a terminal, the person is asked, and the answer decides.
    let command = format!(
        "{TETHER} --audit-store {} --demo-db {} run {script_arg} --config {config_arg} --input '{{}}'; \
         echo tether-exited-$?; sleep 30",
        scratch.store(),
        scratch.path("demo.db").display(),
    );
    let tmux = Tmux::start(&format!("tether-run-{}", std::process::id()), &command);
    let screen = tmux.wait_for("approve? [y/N]").await;
    assert!(screen.contains("approval needed: `send_email`"), "{screen}");
    tmux.type_line("n");
    let screen = tmux.wait_for("tether-exited-").await;
    assert!(screen.contains("approval_denied") && screen.contains("tether-exited-0"), "{screen}");
}

/// Issue 27: Ctrl-C or SIGTERM in `run` and `ask` cancels the turn instead of
/// killing the process: every call — the `run_script` call with its code —
/// has its row, and the command exits 130.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_in_run_or_ask_cancels_the_turn_records_every_call_and_exits_130() {
    let scratch = Scratch::new();
    let started = scratch.path("started.log");
    let script = "r = slow()\nr['ok']";
    let model = FakeModel::start(vec![call("c1", "run_script", json!({"code": script}))]).await;
    let config = scratch.path("slow.toml");
    std::fs::write(
        &config,
        format!(
            "[[tools]]\nname = \"slow\"\nkind = \"command\"\ndescription = \"Takes a while.\"\n\
             command = [\"sh\", \"-c\", \"echo started >> '{}'; sleep 60; echo '{{}}'\"]\ntimeout = \"120s\"\n\
             input_schema = {{ type = \"object\" }}\n\n\
             [agents.main]\nbase_url = \"{}\"\nmodel = \"fake\"\n",
            started.display(),
            model.base_url
        ),
    )
    .unwrap();
    let file = scratch.path("slow.py");
    std::fs::write(&file, script).unwrap();
    let (file, config) = (file.to_str().unwrap(), config.to_str().unwrap());
    let runs: [(&[&str], &str, &str); 2] = [
        (&["run", file, "--config", config, "--input", "{}"], "-TERM", "SIGTERM"),
        (&["ask", "Be slow", "--config", config, "--approval", "deny"], "-INT", "Ctrl-C"),
    ];
    for (n, (args, signal, name)) in runs.into_iter().enumerate() {
        let child = Command::new(TETHER)
            .args(["--audit-store", &scratch.store(), "--demo-db"])
            .arg(scratch.path("demo.db"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let give_up = Instant::now() + Duration::from_secs(120);
        while std::fs::read_to_string(&started).unwrap_or_default().lines().count() <= n {
            assert!(Instant::now() < give_up, "{name}: the tool never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let sent = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
        assert!(sent.success());
        let output = tokio::task::block_in_place(|| child.wait_with_output()).unwrap();
        let said = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(130), "{name}: {said}");
        assert!(said.contains(&format!("cancelled by {name}")), "{said}");
        let turn = said.split("rows for turn ").nth(1).and_then(|rest| rest.split_whitespace().next()).unwrap();
        let rows = stdout_json(&scratch.tether(&["audit", "--turn", turn, "--json"]))["audit"].clone();
        let code_of = |tool: &str| {
            let row = rows.as_array().unwrap().iter().find(|row| row["tool"] == tool);
            row.unwrap_or_else(|| panic!("{name}: no `{tool}` row in {rows}"))["code"].clone()
        };
        assert_eq!(code_of("slow"), json!("cancelled"), "{name}: {rows}");
        assert_eq!(code_of("run_script"), json!("cancelled"), "{name}: {rows}");
        let script_row = rows.as_array().unwrap().iter().find(|row| row["tool"] == "run_script").unwrap();
        assert_eq!(script_row["args"]["code"], json!(script), "the code: {script_row}");
    }
}

/// Issue 27: nothing is left behind by a command that fails, and a store URL
/// missing its colon is not taken for a file name.
#[test]
fn a_failed_command_leaves_no_files_and_a_bare_memory_is_refused() {
    let scratch = Scratch::new();
    let tmp = scratch.path("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::write(scratch.path("bad.toml"), "[[tools]]\nname = \"x\"\nkind = \"bogus\"\n").unwrap();
    let tether = |args: &[&str]| {
        Command::new(TETHER)
            .args(args)
            .current_dir(scratch.path(""))
            .env("TMPDIR", &tmp)
            .env_remove("TETHER_DEMO_DB")
            .env_remove("TETHER_AUDIT_STORE")
            .output()
            .unwrap()
    };
    let bad = tether(&["--audit-store", "memory:", "run", "/dev/null", "--config", "bad.toml"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("`bogus` is not a kind of tool"));
    let left = || std::fs::read_dir(&tmp).unwrap().map(|entry| entry.unwrap().file_name()).collect::<Vec<_>>();
    assert!(left().is_empty(), "left behind in the temp dir: {:?}", left());
    // A config that never reads `${TETHER_DEMO_DB}` gets no demo database.
    std::fs::write(
        scratch.path("own.toml"),
        "[[tools]]\nname = \"hi\"\nkind = \"static\"\ndescription = \"Hi.\"\nvalue = 1\n",
    )
    .unwrap();
    std::fs::write(scratch.path("one.py"), "[unwrap(hi()), input]").unwrap();
    let own = tether(&["--audit-store", "memory:", "run", "one.py", "--config", "own.toml"]);
    assert!(own.status.success(), "{}", String::from_utf8_lossy(&own.stderr));
    assert_eq!(stdout_json(&own)["value"]["result"], json!([1, null]), "a script of your own gets no demo input");
    assert!(left().is_empty(), "made in the temp dir: {:?}", left());

    // A sidecar that cannot be reached: its address, each cause once.
    let away = tether(&["--audit-store", "memory:", "--sidecar", "http://127.0.0.1:1", "run", "one.py"]);
    let said = String::from_utf8_lossy(&away.stderr).into_owned();
    assert!(!away.status.success() && said.contains("cannot reach the sidecar at `http://127.0.0.1:1`: "), "{said}");
    assert_eq!(said.matches("tcp connect error").count(), 1, "{said}");

    let bare = tether(&["--audit-store", "memory", "audit", "--turn", "t"]);
    let said = String::from_utf8_lossy(&bare.stderr).into_owned();
    assert!(!bare.status.success() && said.contains("did you mean `memory:`?"), "{said}");
    assert!(!scratch.path("memory").exists(), "no file named `memory` is made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_lists_turns_shows_the_last_and_a_turn_with_no_calls_has_its_row() {
    let scratch = Scratch::new();
    let script = scratch.path("one.py");
    std::fs::write(&script, "1 + 1\n").unwrap();
    let ran = scratch.tether(&["run", script.to_str().unwrap()]);
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    // A turn whose model answers at once makes no call.
    let model = FakeModel::start(vec![Reply::Text("Nothing to do.".into())]).await;
    let asked =
        tokio::task::block_in_place(|| scratch.tether(&["ask", "hi", "--base-url", &model.base_url, "--model", "m"]));
    assert!(asked.status.success(), "{}", String::from_utf8_lossy(&asked.stderr));
    let quiet = stdout_json(&asked)["turn_id"].as_str().unwrap().to_owned();

    let listed = scratch.tether(&["audit", "--list", "--json"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let turns = stdout_json(&listed);
    let turns = turns.as_array().unwrap();
    assert_eq!(turns.len(), 2, "{turns:?}");
    assert_eq!((&turns[0]["turn_id"], &turns[0]["calls"]), (&json!(quiet), &json!(0)), "newest first: {turns:?}");
    assert_eq!(turns[1]["calls"], json!(1), "the run's one run_script call: {turns:?}");
    let text = String::from_utf8(scratch.tether(&["audit", "--list", "--limit", "1"]).stdout).unwrap();
    assert!(text.starts_with(&format!("{quiet}  opened ")) && text.contains("0 calls"), "{text}");
    assert!(!text.contains(turns[1]["turn_id"].as_str().unwrap()), "--limit 1: {text}");

    // The hint `ask` printed leads to the turn, though it made no call.
    let last = scratch.tether(&["audit", "--last"]);
    assert!(last.status.success(), "{}", String::from_utf8_lossy(&last.stderr));
    assert_eq!(String::from_utf8(last.stdout).unwrap(), format!("turn {quiet}: 0 calls\n"));
    let by_id = scratch.tether(&["audit", "--turn", &quiet, "--json"]);
    assert!(by_id.status.success(), "{}", String::from_utf8_lossy(&by_id.stderr));
    assert_eq!(stdout_json(&by_id)["audit"], json!([]));

    let unknown = scratch.tether(&["audit", "--turn", "nope"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("tether audit --list"), "{unknown:?}");
    let neither = scratch.tether(&["audit"]);
    assert!(!neither.status.success(), "one of --turn, --last, --list is needed");
}

/// `tether ARGS` run in `dir`, with the scratch's audit store and demo
/// database, `env` set.
fn tether_in(scratch: &Scratch, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(TETHER)
        .current_dir(dir)
        .args(["--audit-store", &scratch.store(), "--demo-db"])
        .arg(scratch.path("demo.db"))
        .args(args)
        .env_remove("TETHER_DEMO_DB")
        .env_remove("TETHER_CONFIG")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn init_writes_a_starter_that_commands_find_and_the_demo_world_is_said_when_there_is_none() {
    let scratch = Scratch::new();
    let project = scratch.path("project");
    std::fs::create_dir(&project).unwrap();
    let elsewhere = scratch.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let stderr = |output: &Output| String::from_utf8_lossy(&output.stderr).into_owned();

    let demo = tether_in(&scratch, &project, &[], &["tools"]);
    assert!(demo.status.success(), "{}", stderr(&demo));
    assert!(stderr(&demo).contains("the demo world's tools"), "{}", stderr(&demo));

    let init = tether_in(&scratch, &project, &[], &["init"]);
    assert!(init.status.success(), "{}", stderr(&init));
    assert!(project.join("tether.toml").is_file());
    let again = tether_in(&scratch, &project, &[], &["init"]);
    assert!(!again.status.success() && stderr(&again).contains("--force"), "{}", stderr(&again));

    // Found in the folder, no --config: its tool runs, and no demo is said.
    let script = scratch.path("echo.py");
    std::fs::write(&script, "unwrap(echo(text='hi'))\n").unwrap();
    let ran = tether_in(&scratch, &project, &[], &["run", script.to_str().unwrap()]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    assert_eq!(stdout_json(&ran)["value"]["result"], json!({"text": "hi"}), "{}", stderr(&ran));
    assert!(!stderr(&ran).contains("demo world"), "{}", stderr(&ran));

    // TETHER_CONFIG names it from anywhere.
    let named = project.join("tether.toml");
    let listed = tether_in(&scratch, &elsewhere, &[("TETHER_CONFIG", named.to_str().unwrap())], &["tools"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(String::from_utf8_lossy(&listed.stdout).contains("echo"), "{listed:?}");
    assert!(!String::from_utf8_lossy(&listed.stdout).contains("send_email"), "not the demo's: {listed:?}");
}

#[test]
fn init_from_an_mcp_clients_config_gives_its_servers_and_tools_check_fails_on_one_not_running() {
    let scratch = Scratch::new();
    let server = Path::new(TETHER).with_file_name("tether-mcp-test-server");
    assert!(server.exists(), "no `{}`: build the workspace", server.display());
    let mcp_json = scratch.path(".mcp.json");
    let clients = json!({"mcpServers": {
        "test": {"command": server.to_str().unwrap(), "args": []},
        "gone": {"command": "/nonexistent/mcp-server"}
    }});
    std::fs::write(&mcp_json, clients.to_string()).unwrap();
    let config = scratch.path("converted.toml");
    let init = scratch.tether(&["init", "--from", mcp_json.to_str().unwrap(), "--path", config.to_str().unwrap()]);
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));

    let listed = scratch.tether(&["tools", "--config", config.to_str().unwrap()]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    assert!(String::from_utf8_lossy(&listed.stdout).contains("test_echo"), "{listed:?}");
    let checked = scratch.tether(&["tools", "--config", config.to_str().unwrap(), "--check"]);
    assert!(!checked.status.success(), "a server is not running");
    let said = String::from_utf8_lossy(&checked.stderr);
    assert!(said.contains("1 of 2 MCP servers not running: `gone`"), "{said}");

    let bash = scratch.tether(&["completions", "bash"]);
    assert!(bash.status.success());
    let script = String::from_utf8_lossy(&bash.stdout);
    assert!(script.contains("_tether") && script.contains("approve") && script.contains("--audit-store"), "{script}");
}

#[test]
fn prompt_shows_what_the_model_gets_and_script_only_offers_run_script_alone_with_every_stub() {
    let scratch = Scratch::new();
    let both = scratch.tether(&["prompt", "--json"]);
    assert!(both.status.success(), "{}", String::from_utf8_lossy(&both.stderr));
    let both = stdout_json(&both);
    let names = |prompt: &Value| -> Vec<String> {
        prompt["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(names(&both), ["list_issues", "get_contract", "send_email", "run_script"], "{both}");
    let bytes = |prompt: &Value| prompt["bytes"]["total"].as_u64().unwrap();
    let measured = serde_json::to_string(&both["tools"]).unwrap().len()
        + serde_json::to_string(&both["system_prompt"]).unwrap().len();
    assert_eq!(bytes(&both), measured as u64, "the size is the request's own");

    let demo = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo.toml")).unwrap();
    let config = scratch.path("script-only.toml");
    std::fs::write(&config, format!("[turn]\noffer = \"script\"\n\n{demo}")).unwrap();
    let alone = scratch.tether(&["prompt", "--json", "--config", config.to_str().unwrap()]);
    assert!(alone.status.success(), "{}", String::from_utf8_lossy(&alone.stderr));
    let alone = stdout_json(&alone);
    assert_eq!(names(&alone), ["run_script"]);
    let description = alone["tools"][0]["function"]["description"].as_str().unwrap();
    for stub in ["def list_issues(", "def get_contract(", "def send_email("] {
        assert!(description.contains(stub), "every tool is in the stubs: {description}");
    }
    assert!(!description.contains("get_contract(customer_id=\\\"c1\\\")"), "no demo example in the description");
    assert!(bytes(&alone) < bytes(&both), "{} vs {}", bytes(&alone), bytes(&both));

    let text = String::from_utf8(scratch.tether(&["prompt"]).stdout).unwrap();
    assert!(text.starts_with("system prompt:\n") && text.contains("\ntool `send_email`:\n"), "{text}");
    assert!(text.trim_end().ends_with(&format!("{} bytes in all (as JSON)", bytes(&both))), "{text}");
}

/// Issue 27: a slow tool's progress shows while it works. On a terminal a
/// spinner names the call and what the MCP server last reported (`2/3
/// (67%) step 2`), and is gone when the call ends; in a pipe nothing spins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_mcp_tools_progress_spins_on_a_terminal_and_not_in_a_pipe() {
    let scratch = Scratch::new();
    let server = Path::new(TETHER).with_file_name("tether-mcp-test-server");
    assert!(server.exists(), "no `{}`: build the workspace", server.display());
    let config = scratch.path("slow.toml");
    std::fs::write(
        &config,
        format!("[mcp.test]\ncommand = [{server:?}]\n\n[mcp.test.tools.count]\nread_only = true\n"),
    )
    .unwrap();
    let script = |name: &str, ms: u32| {
        let path = scratch.path(name);
        std::fs::write(&path, format!("unwrap(count(steps=3, ms={ms}))\n")).unwrap();
        path
    };
    let (quick, slow, config) = (script("quick.py", 10), script("slow.py", 1500), config.to_str().unwrap());

    let piped = tokio::task::block_in_place(|| scratch.tether(&["run", quick.to_str().unwrap(), "--config", config]));
    let said = String::from_utf8_lossy(&piped.stderr).into_owned();
    assert_eq!(stdout_json(&piped)["value"]["result"], json!("counted to 3, progress reported"), "{said}");
    assert!(!said.contains("working") && !said.contains('\r'), "no spinner in a pipe: {said:?}");

    let command = format!(
        "{TETHER} --audit-store {} --demo-db {} run {} --config {config}; echo tether-exited-$?; sleep 30",
        scratch.store(),
        scratch.path("demo.db").display(),
        slow.display(),
    );
    let tmux = Tmux::start(&format!("tether-progress-{}", std::process::id()), &command);
    let screen = tmux.wait_for(" count working: 2/3 (67%) step 2").await;
    assert!(!screen.contains("tether-exited-"), "shown while the call works: {screen}");
    let screen = tmux.wait_for("tether-exited-").await;
    assert!(screen.contains("counted to 3, progress reported") && screen.contains("tether-exited-0"), "{screen}");
    assert!(!screen.contains("working"), "the spinner's line is cleared when the call ends: {screen}");
}
