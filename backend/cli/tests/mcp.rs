//! `tether mcp` against real MCP clients: rmcp's client (over the spawned
//! binary's stdio, and over streamable HTTP) and the Python `mcp` SDK's
//! (`tests/mcp/python_client.py`), with two upstream MCP servers behind it —
//! the npm filesystem server (`./x test` installs it into target/npm) and
//! the suite's own `tether-mcp-test-server`. Every call is read back from
//! the audit store with `tether audit --json`.
//!
//! One binary of its own rather than a module of `cli`: it needs rmcp's
//! client and spawns Python, and the `cli` binary's modules change often.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ErrorData as McpError, RoleClient, ServiceExt as _};
use serde_json::{Value, json};
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TETHER: &str = env!("CARGO_BIN_EXE_tether");

/// How long any one wait of these tests may take (a loaded machine starts
/// the npm server in seconds; a cold sidecar compiles its guest first).
const WAIT: Duration = Duration::from_secs(120);

/// The folder with the npm filesystem server's command.
fn npm_bin() -> PathBuf {
    let dir = std::env::var_os("TETHER_NPM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/npm/node_modules/.bin"));
    assert!(
        dir.join("mcp-server-filesystem").exists(),
        "the npm MCP server is not in `{}`: run the tests with `./x test`, which installs tests/npm/package-lock.json",
        dir.display()
    );
    dir
}

/// A scratch world: a folder the filesystem server serves (`notes.txt`
/// says 20), a config over both upstream servers, an audit store.
struct World {
    dir: tempfile::TempDir,
    root: PathBuf,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        // The filesystem server resolves symlinks (/tmp may be one).
        let root = dir.path().canonicalize().unwrap().join("files");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("notes.txt"), "20\n").unwrap();
        let server = Path::new(TETHER).with_file_name("tether-mcp-test-server");
        assert!(server.exists(), "no `{}`: build the workspace", server.display());
        let config = format!(
            r#"
[mcp.files]
command = ["{npm}/mcp-server-filesystem", "{root}"]
prefix = "fs_"
include = ["read_text_file", "write_file"]
startup_timeout = "60s"

[mcp.files.tools.read_text_file]
read_only = true

[mcp.files.tools.write_file]
requires_approval = true

[mcp.test]
command = ["{server}"]
include = ["add", "slow"]

[mcp.test.tools.add]
read_only = true

[mcp.test.tools.slow]
read_only = true
"#,
            npm = npm_bin().display(),
            root = root.display(),
            server = server.display()
        );
        std::fs::write(dir.path().join("tether.toml"), config).unwrap();
        World { dir, root }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `tether mcp`'s arguments for this world, then `extra`.
    fn mcp_args(&self, extra: &[&str]) -> Vec<String> {
        let mut args = vec![
            "mcp".to_owned(),
            "--config".to_owned(),
            self.path("tether.toml").display().to_string(),
            "--audit-store".to_owned(),
            format!("sqlite:{}", self.path("audit.db").display()),
            "--demo-db".to_owned(),
            self.path("demo.db").display().to_string(),
        ];
        args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        args
    }

    fn command(&self, extra: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(TETHER);
        command.args(self.mcp_args(extra)).env_remove("TETHER_DEMO_DB").env("RUST_LOG", "warn");
        command
    }

    /// The turn's audit rows, as `tether audit --turn ID --json` gives them,
    /// once each of `keys` (a tool or a call id) has its row (rows are
    /// written in groups, a moment after the call's answer may have gone out).
    fn audit(&self, turn: &str, keys: &[&str]) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let output = std::process::Command::new(TETHER)
                .args(["audit", "--audit-store", &format!("sqlite:{}", self.path("audit.db").display())])
                .args(["--turn", turn, "--json"])
                .output()
                .unwrap();
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
            let report: Value = serde_json::from_slice(&output.stdout).unwrap();
            let rows = report["audit"].as_array().unwrap().clone();
            if keys.iter().all(|key| rows.iter().any(|row| row["tool"] == *key || row["call_id"] == *key)) {
                return rows;
            }
            assert!(Instant::now() < deadline, "no rows of each of {keys:?} in {rows:#?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The row of `tool` in `rows`.
fn row<'a>(rows: &'a [Value], tool: &str) -> &'a Value {
    rows.iter().find(|row| row["tool"] == tool).unwrap_or_else(|| panic!("no row of `{tool}` in {rows:#?}"))
}

/// An rmcp client that answers elicitations with `answer` (`None`: it
/// declares no elicitation) and keeps what it was asked and told.
#[derive(Clone, Default)]
struct Client {
    answer: Option<ElicitationAction>,
    /// Never answer an elicitation; wait for the server to withdraw it.
    hang: bool,
    withdrawn: Arc<Mutex<u32>>,
    asked: Arc<Mutex<Vec<String>>>,
    progress: Arc<Mutex<Vec<String>>>,
}

impl Client {
    fn answering(answer: Option<ElicitationAction>) -> Client {
        Client { answer, ..Client::default() }
    }

    fn progress(&self) -> Vec<String> {
        self.progress.lock().unwrap().clone()
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }

    /// Waits (bounded) until a progress message contains `text`.
    async fn wait_progress(&self, text: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.progress().iter().any(|message| message.contains(text)) {
            assert!(Instant::now() < deadline, "no progress `{text}` in {:?}", self.progress());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let capabilities = match self.answer {
            Some(_) => ClientCapabilities::builder().enable_elicitation().build(),
            None => ClientCapabilities::default(),
        };
        ClientConfig::new(capabilities, Implementation::new("rmcp-test-client", "1.0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.asked.lock().unwrap().push(message.clone());
        }
        if self.hang {
            _context.ct.cancelled().await;
            *self.withdrawn.lock().unwrap() += 1;
            return Err(McpError::internal_error("withdrawn", None));
        }
        let answer = self.answer.clone().unwrap_or(ElicitationAction::Decline);
        let mut result = ElicitResult::new(answer.clone());
        if answer == ElicitationAction::Accept {
            result = result.with_content(json!({"reason": "looks right"}));
        }
        Ok(result)
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.progress.lock().unwrap().push(params.message.unwrap_or_default());
    }
}

/// `tether mcp` spawned for `world` with `extra` flags, and rmcp's client on it.
async fn connect(world: &World, client: &Client, extra: &[&str]) -> RunningService<RoleClient, Client> {
    let mut command = world.command(extra);
    command.stderr(Stdio::inherit());
    let transport = TokioChildProcess::new(command).unwrap();
    tokio::time::timeout(WAIT, client.clone().serve(transport)).await.expect("initialize in time").unwrap()
}

/// Calls `run_script` with `code`; the result's text as JSON, and whether it is an error.
async fn run_script(service: &RunningService<RoleClient, Client>, code: &str) -> (Value, bool) {
    let params =
        CallToolRequestParams::new("run_script").with_arguments(json!({"code": code}).as_object().unwrap().clone());
    let result = tokio::time::timeout(WAIT, service.call_tool(params)).await.expect("answered in time").unwrap();
    let text = result.content[0].as_text().unwrap().text.clone();
    (serde_json::from_str(&text).unwrap(), result.is_error == Some(true))
}

/// Reads `notes.txt` (20) from the filesystem server, adds 22 with the test
/// server, and writes the sum back through the filesystem server — a call
/// that needs approval.
fn chain_script(world: &World) -> String {
    let out = world.root.join("sum.txt");
    format!(
        "n = int(unwrap(fs_read_text_file(path={notes:?}))['content'].strip())\n\
         total = unwrap(add(a=n, b=22))\n\
         written = fs_write_file(path={out:?}, content=str(total['sum']))\n\
         {{'sum': total['sum'], 'written': written['ok'], 'error': None if written['ok'] else written['error']['code']}}",
        notes = world.root.join("notes.txt").display().to_string(),
        out = out.display().to_string()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_lists_code_mode_and_a_script_chains_two_servers_with_its_write_approved_through_elicitation() {
    let world = World::new();
    let client = Client::answering(Some(ElicitationAction::Accept));
    let service = connect(&world, &client, &[]).await;

    let tools = service.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(names, ["run_script", "search_tools", "describe_tools"], "code mode, not every schema");
    let description = tools[0].description.as_deref().unwrap();
    for stub in ["def fs_read_text_file(", "def fs_write_file(", "def add("] {
        assert!(description.contains(stub), "run_script's description has `{stub}`: {description}");
    }

    let (answer, is_error) = run_script(&service, &chain_script(&world)).await;
    assert!(!is_error, "{answer}");
    assert_eq!(answer["value"]["result"], json!({"sum": 42, "written": true, "error": null}), "{answer}");
    assert_eq!(std::fs::read_to_string(world.root.join("sum.txt")).unwrap(), "42");
    // The person saw the tool and the exact arguments.
    let asked = client.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].contains("`fs_write_file`") && asked[0].contains("\"content\": \"42\""), "{}", asked[0]);
    // Each nested call as it started and ended.
    let progress = client.progress();
    for said in [
        "call_1/1 fs_read_text_file started",
        "call_1/1 fs_read_text_file ok",
        "call_1/2 add ok",
        "call_1/3 fs_write_file ok",
    ] {
        assert!(progress.iter().any(|message| message.starts_with(said)), "`{said}` in {progress:?}");
    }

    // A direct call of a tool not served is a JSON-RPC error, and the session goes on.
    let direct = service.call_tool(CallToolRequestParams::new("add")).await.unwrap_err().to_string();
    assert!(direct.contains("no tool `add` is served"), "{direct}");
    let found = service
        .call_tool(
            CallToolRequestParams::new("search_tools")
                .with_arguments(json!({"query": "add"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert!(found.content[0].as_text().unwrap().text.contains("\"add\""), "{found:?}");

    let turn = answer["turn_id"].as_str().unwrap().to_owned();
    service.cancel().await.unwrap();
    let rows = world.audit(&turn, &["fs_write_file", "add", "run_script", "search_tools"]);
    let write = row(&rows, "fs_write_file");
    assert_eq!((write["status"].as_str(), write["approval"].as_str()), (Some("ok"), Some("approved")), "{write}");
    assert_eq!(write["decided_by"], "mcp client `rmcp-test-client 1.0` (elicitation)");
    assert_eq!(write["approval_reason"], "looks right");
    assert_eq!(row(&rows, "add")["origin"], "script");
    assert_eq!(row(&rows, "run_script")["call_id"], "call_1");
    assert_eq!(row(&rows, "search_tools")["origin"], "model", "the same turn audits a direct call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_elicitation_denies_the_write_and_the_script_goes_on() {
    let world = World::new();
    let client = Client::answering(Some(ElicitationAction::Decline));
    let service = connect(&world, &client, &[]).await;
    let (answer, is_error) = run_script(&service, &chain_script(&world)).await;
    assert!(!is_error, "{answer}");
    assert_eq!(answer["value"]["result"], json!({"sum": 42, "written": false, "error": "approval_denied"}));
    assert!(!world.root.join("sum.txt").exists(), "nothing was written");
    assert_eq!(client.asked().len(), 1);
    let turn = answer["turn_id"].as_str().unwrap().to_owned();
    service.cancel().await.unwrap();
    let write = world.audit(&turn, &["fs_write_file"]).into_iter().find(|row| row["tool"] == "fs_write_file").unwrap();
    assert_eq!((write["approval"].as_str(), write["code"].as_str()), (Some("denied"), Some("approval_denied")));
    assert_eq!(write["decided_by"], "mcp client `rmcp-test-client 1.0` (elicitation)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_elicitation_gets_the_fallback_deny_by_default_or_allow_all() {
    let world = World::new();
    let client = Client::answering(None);
    let service = connect(&world, &client, &[]).await;
    let (answer, _) = run_script(&service, &chain_script(&world)).await;
    assert_eq!(answer["value"]["result"]["error"], "approval_denied", "{answer}");
    let turn = answer["turn_id"].as_str().unwrap().to_owned();
    service.cancel().await.unwrap();
    let write = world.audit(&turn, &["fs_write_file"]).into_iter().find(|row| row["tool"] == "fs_write_file").unwrap();
    assert_eq!(write["decided_by"], "approval_fallback deny", "{write}");
    assert!(write["approval_reason"].as_str().unwrap().contains("declared no elicitation"), "{write}");

    let service = connect(&world, &client, &["--approval-fallback", "allow-all"]).await;
    let (answer, _) = run_script(&service, &chain_script(&world)).await;
    assert_eq!(answer["value"]["result"]["written"], true, "{answer}");
    assert_eq!(std::fs::read_to_string(world.root.join("sum.txt")).unwrap(), "42");
    assert!(client.asked().is_empty(), "the client was never asked");
    service.cancel().await.unwrap();
}

/// A script that waits on the test server's `slow` for 60 s.
const SLOW: &str = "unwrap(slow(ms=60000))\n'never'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_request_ends_its_script_at_once_and_the_session_goes_on() {
    let world = World::new();
    let client = Client::answering(Some(ElicitationAction::Accept));
    let service = connect(&world, &client, &[]).await;
    let params =
        CallToolRequestParams::new("run_script").with_arguments(json!({"code": SLOW}).as_object().unwrap().clone());
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = service.send_cancellable_request(request, PeerRequestOptions::no_options()).await.unwrap();
    client.wait_progress("call_1/1 slow started").await;
    let cancelled_at = Instant::now();
    handle.cancel(Some("the person pressed stop".into())).await.unwrap();

    // The session goes on: its next call runs in the same turn.
    let (answer, is_error) = run_script(&service, "1 + 1").await;
    assert!(!is_error && answer["value"]["result"] == 2, "{answer}");
    assert_eq!(answer["call_id"], "call_2");
    let turn = answer["turn_id"].as_str().unwrap().to_owned();
    service.cancel().await.unwrap();

    let rows = world.audit(&turn, &["call_1", "slow"]);
    let script = rows.iter().find(|row| row["call_id"] == "call_1").unwrap();
    // Cancelled by its caller, not with its turn (the session goes on); the
    // script's call in flight stopped with it.
    assert_eq!(
        (script["status"].as_str(), script["code"].as_str()),
        (Some("abandoned"), Some("cancelled")),
        "{script}"
    );
    let slow = row(&rows, "slow");
    assert_eq!((slow["status"].as_str(), slow["code"].as_str()), (Some("abandoned"), Some("parent_settled")), "{slow}");
    let ran = Duration::from_micros(script["duration_us"].as_u64().unwrap());
    assert!(ran < Duration::from_secs(30), "the script ended at the cancellation, not after `slow`: {ran:?}");
    assert!(cancelled_at.elapsed() < WAIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_ends_its_script_and_the_server_records_it_and_exits() {
    let world = World::new();
    let mut child = world
        .command(&[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = Lines::start(stdout.into_owned_fd().unwrap());
    use tokio::io::AsyncWriteExt as _;
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_script", "arguments": {"code": SLOW}, "_meta": {"progressToken": "p"}}}),
    ] {
        stdin.write_all(format!("{message}\n").as_bytes()).await.unwrap();
    }
    lines.wait_for("call_1/1 slow started");
    let gone_at = Instant::now();
    drop(stdin);
    let status = tokio::time::timeout(WAIT, child.wait()).await.expect("the server exits").unwrap();
    assert!(status.success(), "{status}");
    assert!(gone_at.elapsed() < Duration::from_secs(30), "it did not wait for `slow`: {:?}", gone_at.elapsed());
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).await.unwrap();
    let turn = stderr.split("session is turn ").nth(1).and_then(|rest| rest.split_whitespace().next()).unwrap();
    let rows = world.audit(turn, &["run_script", "slow"]);
    let script = row(&rows, "run_script");
    assert_eq!((script["status"].as_str(), script["code"].as_str()), (Some("failed"), Some("cancelled")), "{script}");
    assert_eq!(row(&rows, "slow")["code"], "cancelled");
}

/// The lines a child writes, read on a thread as they come.
struct Lines {
    seen: Arc<Mutex<Vec<String>>>,
}

impl Lines {
    fn start(fd: std::os::fd::OwnedFd) -> Lines {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(std::fs::File::from(fd)).lines() {
                let Ok(line) = line else { break };
                into.lock().unwrap().push(line);
            }
        });
        Lines { seen }
    }

    /// Waits (bounded) for a line containing `text`; returns it.
    fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(line) = self.seen.lock().unwrap().iter().find(|line| line.contains(text)) {
                return line.clone();
            }
            assert!(Instant::now() < deadline, "no line with `{text}` in {:#?}", self.seen.lock().unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (bounded) for the answer to request `id`, as JSON.
    fn answer(&self, id: i64) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let found = self.seen.lock().unwrap().iter().find_map(|line| {
                let value: Value = serde_json::from_str(line).ok()?;
                (value["id"] == id).then_some(value)
            });
            if let Some(value) = found {
                return value;
            }
            assert!(Instant::now() < deadline, "no answer to {id} in {:#?}", self.seen.lock().unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The answers with id `null` (errors that could name no request), in order.
    fn null_id_errors(&self) -> Vec<Value> {
        let lines = self.seen.lock().unwrap();
        lines
            .iter()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|value| value.get("error").is_some() && value.get("id").is_none_or(Value::is_null))
            .collect()
    }
}

#[test]
fn malformed_requests_get_clear_json_rpc_errors_and_the_session_goes_on() {
    let world = World::new();
    let mut child = std::process::Command::new(TETHER)
        .args(world.mcp_args(&["--max-request-bytes", "400000"]))
        .env_remove("TETHER_DEMO_DB")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = Lines::start(stdout.into());
    let mut send = |line: String| {
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}).to_string());
    assert_eq!(lines.answer(1)["result"]["protocolVersion"], "2025-06-18");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    send("{this is not json".to_owned());
    send("[{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": \"ping\"}]".to_owned());
    send("x".repeat(500_000));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "no/such/method"}).to_string());
    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": 5}).to_string());
    send(json!({"id": 4, "method": "ping"}).to_string());
    // A script over the sidecar's 256 KiB source limit, in a request under the server's limit.
    let big = format!("x = 1\n# {}\n", "y".repeat(300_000));
    send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "run_script", "arguments": {"code": big}}}).to_string());
    send(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}).to_string());

    assert_eq!(lines.answer(6)["result"]["tools"][0]["name"], "run_script", "the session went on");
    let unknown = lines.answer(2);
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    assert!(unknown["error"]["message"].as_str().unwrap().contains("`no/such/method`"), "{unknown}");
    let params = lines.answer(3);
    assert_eq!(params["error"]["code"], -32602, "{params}");
    assert!(params["error"]["message"].as_str().unwrap().contains("`tools/call`"), "{params}");
    let no_version = lines.answer(4);
    assert_eq!(no_version["error"]["code"], -32600, "{no_version}");
    let script = lines.answer(5);
    assert_eq!(script["result"]["isError"], true, "{script}");
    let text: Value = serde_json::from_str(script["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text["ok"], false, "{text}");
    assert_eq!(text["error"]["code"], "size_limit", "{text}");
    assert!(text["error"]["message"].as_str().unwrap().contains("`262144`-byte limit"), "the limit is named: {text}");

    let errors = lines.null_id_errors();
    let codes: Vec<i64> = errors.iter().map(|error| error["error"]["code"].as_i64().unwrap()).collect();
    assert_eq!(codes, [-32700, -32600, -32600], "{errors:#?}");
    assert!(errors[1]["error"]["message"].as_str().unwrap().contains("batch"), "{errors:#?}");
    assert!(errors[2]["error"]["message"].as_str().unwrap().contains("request too large"), "{errors:#?}");
    drop(stdin);
    let deadline = Instant::now() + WAIT;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the server exits when its input ends");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdks_client_runs_a_script_and_answers_the_elicitation() {
    let world = World::new();
    let python = std::env::var("TETHER_PYTHON").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/py/bin/python").display().to_string()
    });
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/python_client.py");
    let output = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(&python)
            .arg(&client)
            .arg("accept")
            .arg(TETHER)
            .args(world.mcp_args(&[]))
            .env("TETHER_TEST_SCRIPT", chain_script(&world))
            .env_remove("TETHER_DEMO_DB")
            .output(),
    )
    .await
    .expect("the Python client ends in time")
    .unwrap_or_else(|e| panic!("`{python}` runs (./x test installs it into target/py): {e}"));
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["tools"], json!(["run_script", "search_tools", "describe_tools"]));
    assert_eq!(report["result"]["value"]["result"], json!({"sum": 42, "written": true, "error": null}), "{report}");
    assert!(report["asked"][0].as_str().unwrap().contains("`fs_write_file`"), "{report}");
    let progress = report["progress"].as_array().unwrap();
    assert!(progress.iter().any(|m| m.as_str().unwrap().starts_with("call_1/2 add ok")), "{report}");
    let turn = report["result"]["turn_id"].as_str().unwrap();
    let write = world.audit(turn, &["fs_write_file"]).into_iter().find(|row| row["tool"] == "fs_write_file").unwrap();
    assert_eq!(write["approval_reason"], "checked by the python test");
    assert!(write["decided_by"].as_str().unwrap().starts_with("mcp client `"), "{write}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_bearer_token_is_required_and_each_session_is_a_turn() {
    let world = World::new();
    std::fs::write(world.path("token"), "s3cret-token\n").unwrap();
    // Without a token, only loopback.
    let refused = world.command(&["--listen", "0.0.0.0:0"]).output().await.unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("without authentication"));

    let token_file = world.path("token").display().to_string();
    let mut child = world
        .command(&["--listen", "127.0.0.1:0", "--token-file", &token_file])
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let fd = stderr.into_owned_fd().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(std::fs::File::from(fd)).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("tether mcp: listening on ") {
                let _ = url_tx.send(url.to_owned());
            }
        }
    });
    let url = tokio::task::spawn_blocking(move || url_rx.recv_timeout(WAIT).unwrap()).await.unwrap();

    let http = tether_backend::tools::http_client().unwrap();
    let anonymous = http.post(&url).json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let garbage = http.post(&url).bearer_auth("s3cret-token").header("content-type", "application/json");
    let garbage =
        garbage.header("accept", "application/json, text/event-stream").body("{not json").send().await.unwrap();
    assert_eq!(garbage.status(), 400);
    let error: Value = garbage.json().await.unwrap();
    assert_eq!(error["error"]["code"], -32700, "{error}");

    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header("s3cret-token");
    let client = Client::answering(Some(ElicitationAction::Accept));
    let service = client.clone().serve(StreamableHttpClientTransport::with_client(http, config)).await.unwrap();
    let (answer, is_error) = run_script(&service, &chain_script(&world)).await;
    assert!(!is_error, "{answer}");
    assert_eq!(answer["value"]["result"]["written"], true, "{answer}");
    assert_eq!(client.asked().len(), 1, "asked through the HTTP session");
    let progress = client.progress();
    assert!(progress.iter().any(|message| message.starts_with("call_1/2 add ok")), "{progress:?}");
    let turn = answer["turn_id"].as_str().unwrap().to_owned();
    service.cancel().await.unwrap();
    assert_eq!(row(&world.audit(&turn, &["fs_write_file"]), "fs_write_file")["approval"], "approved");
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_park_fallback_parks_the_run_and_tether_approve_finishes_it() {
    let world = World::new();
    let key = world.path("park.key").display().to_string();
    let client = Client::answering(None);
    let service = connect(&world, &client, &["--approval-fallback", "park", "--park-key-file", &key]).await;
    let (answer, is_error) = run_script(&service, &chain_script(&world)).await;
    assert!(is_error, "{answer}");
    assert_eq!(answer["error"]["code"], "run_parked", "{answer}");
    assert!(!world.root.join("sum.txt").exists(), "nothing written before the approval");
    let turn = answer["turn_id"].as_str().unwrap().to_owned();
    service.cancel().await.unwrap();

    let store = format!("sqlite:{}", world.path("audit.db").display());
    let approved = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(TETHER)
            .args(["approve", "--turn", &turn, "--all", "--as", "dana", "--audit-store", &store])
            .args(["--park-key-file", &key, "--demo-db"])
            .arg(world.path("demo.db"))
            .env_remove("TETHER_DEMO_DB")
            .output(),
    )
    .await
    .expect("approve ends in time")
    .unwrap();
    assert!(approved.status.success(), "{}", String::from_utf8_lossy(&approved.stderr));
    assert_eq!(std::fs::read_to_string(world.root.join("sum.txt")).unwrap(), "42");
    let write = row(&world.audit(&turn, &["fs_write_file"]), "fs_write_file").clone();
    assert_eq!((write["approval"].as_str(), write["decided_by"].as_str()), (Some("approved"), Some("dana")), "{write}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_inspectors_cli_lists_the_tools_and_runs_a_script_over_both_servers() {
    let world = World::new();
    let inspector = npm_bin().join("mcp-inspector");
    assert!(inspector.exists(), "no `{}`: `./x test` installs tests/npm/package-lock.json", inspector.display());
    let inspect = |method: &[&str]| {
        let mut command = tokio::process::Command::new(&inspector);
        command.arg("--cli").arg("--method").args(method).arg("--").arg(TETHER).args(world.mcp_args(&[]));
        command.env_remove("TETHER_DEMO_DB").stdin(Stdio::null());
        command
    };
    let run = |mut command: tokio::process::Command| async move {
        let output = tokio::time::timeout(WAIT, command.output()).await.expect("the inspector ends in time").unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice::<Value>(&output.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&output.stdout)))
    };
    let listed = run(inspect(&["tools/list"])).await;
    let names: Vec<&str> = listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["run_script", "search_tools", "describe_tools"], "{listed}");

    let code = format!(
        "code=n = int(unwrap(fs_read_text_file(path={:?}))['content'].strip())\nunwrap(add(a=n, b=22))['sum']",
        world.root.join("notes.txt").display().to_string()
    );
    let called = run(inspect(&["tools/call", "--tool-name", "run_script", "--tool-arg", &code])).await;
    assert_eq!(called["isError"], false, "{called}");
    let answer: Value = serde_json::from_str(called["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(answer["value"]["result"], 42, "{answer}");
    let rows = world.audit(answer["turn_id"].as_str().unwrap(), &["fs_read_text_file", "add", "run_script"]);
    assert_eq!(row(&rows, "add")["origin"], "script");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tools_are_served_on_request_and_a_direct_call_meets_the_same_turn() {
    let world = World::new();
    let client = Client::answering(Some(ElicitationAction::Accept));
    let service = connect(&world, &client, &["--direct-tools"]).await;
    let tools = service.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    for name in ["fs_read_text_file", "fs_write_file", "add", "slow", "run_script", "search_tools", "describe_tools"] {
        assert!(names.contains(&name), "`{name}` served: {names:?}");
    }
    let path = world.root.join("direct.txt").display().to_string();
    let write = || {
        CallToolRequestParams::new("fs_write_file")
            .with_arguments(json!({"path": path, "content": "direct"}).as_object().unwrap().clone())
    };
    let first = service.call_tool(write()).await.unwrap();
    assert_eq!(first.is_error, Some(false), "{first:?}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "direct");
    let asked = client.asked();
    assert!(asked.len() == 1 && asked[0].contains("a direct call (call_1)"), "{asked:?}");
    // The same turn's repeat refusal: an identical call with effects is refused.
    let again = service.call_tool(write()).await.unwrap();
    let text: Value = serde_json::from_str(&again.content[0].as_text().unwrap().text).unwrap();
    assert_eq!((again.is_error, text["error"]["code"].as_str()), (Some(true), Some("repeated_call")), "{text}");
    let turn = text["turn_id"].as_str().unwrap().to_owned();
    service.cancel().await.unwrap();
    let rows = world.audit(&turn, &["call_1", "call_2"]);
    let direct = rows.iter().find(|row| row["call_id"] == "call_1").unwrap();
    assert_eq!((direct["origin"].as_str(), direct["approval"].as_str()), (Some("model"), Some("approved")), "{direct}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_left_unanswered_times_out_and_is_withdrawn_from_the_client() {
    let world = World::new();
    let config = world.path("tether.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}\n[turn]\napproval_timeout = \"1s\"\n")).unwrap();
    let client = Client { hang: true, ..Client::answering(Some(ElicitationAction::Accept)) };
    let service = connect(&world, &client, &[]).await;
    let (answer, _) = run_script(&service, &chain_script(&world)).await;
    assert_eq!(answer["value"]["result"]["error"], "approval_timeout", "{answer}");
    assert!(!world.root.join("sum.txt").exists());
    let deadline = Instant::now() + WAIT;
    while *client.withdrawn.lock().unwrap() == 0 {
        assert!(Instant::now() < deadline, "the client was told the question is withdrawn");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    service.cancel().await.unwrap();
}
