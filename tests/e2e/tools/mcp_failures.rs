//! This suite's own MCP server (`tether-mcp-test-server`, rmcp's server
//! side) for what goes wrong, over stdio AND streamable HTTP: an `isError`
//! result, a slow tool past its time limit, a result over the limit, a
//! server that dies mid-call, one that never starts, and shutdown; and the
//! progress a slow tool reports while it works.

use super::*;
use std::time::Duration;
use tether_backend::turn::{CallStatus, EventLog, PolicyApprover, Step, ToolEvent, ToolProgress, TurnLimits};
use tokio::io::AsyncBufReadExt;

/// The server as a separate process serving streamable HTTP; killed on drop.
struct HttpServer {
    child: tokio::process::Child,
    url: String,
}

async fn http_server() -> HttpServer {
    let mut child = tokio::process::Command::new(TEST_SERVER)
        .args(["--http", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().expect("the server prints its address");
    let url = line.strip_prefix("listening on ").expect("`listening on <url>`").to_owned();
    HttpServer { child, url }
}

/// `[mcp.test]` reached by `way`, with per-tool metadata for the cases.
fn server_config(way: &str) -> String {
    format!(
        r#"
[mcp.test]
{way}
prefix = "t_"

[mcp.test.tools.slow]
timeout = "300ms"
read_only = true

[mcp.test.tools.die]
requires_approval = true

[mcp.test.tools.pid]
repeat = "allow"
"#
    )
}

async fn world(way: &str) -> (tempfile::TempDir, World) {
    let (dir, config) = config(&server_config(way), &Vars::from_env());
    let tools = ToolSet::start(&config.tools).await.unwrap();
    let limits = TurnLimits { max_result_bytes: Some(64 * 1024), ..TurnLimits::default() };
    let world = World::with(tools, Arc::new(PolicyApprover::approve_all()), |b| b.limits(limits)).await;
    (dir, world)
}

/// Every case but the death, which ends the server: the same for both transports.
async fn failures_are_values(world: &World) {
    let add = world.tools.tools().iter().find(|t| t.name() == "t_add").unwrap();
    assert!(add.spec().output_schema.is_some(), "rmcp's output schema joins the spec");
    assert_eq!(ok(&world.model("a", "t_add", json!({"a": 2, "b": 3})).await), json!({"sum": 5}), "structuredContent");
    assert_eq!(ok(&world.model("e", "t_echo", json!({"text": "hi"})).await), json!("hi"), "text content");

    let failed = world.model("f", "t_fail", json!({"text": "the disk is full"})).await;
    assert_eq!(error(&failed), ("tool_failed".into(), "`t_fail` reported a failure: the disk is full".into()));
    assert_eq!(failed.status(), CallStatus::Error, "isError: the tool ran and reported its failure");

    let slow = world.model("s", "t_slow", json!({"ms": 5_000})).await;
    let (code, message) = error(&slow);
    assert_eq!(code, "tool_timeout", "{message}");
    assert!(message.contains("300ms"), "the limit is named: {message}");

    let huge = world.model("h", "t_huge", json!({"bytes": 200_000})).await;
    let (code, message) = error(&huge);
    assert_eq!(code, "result_too_large", "{message}");
    assert_eq!(huge.status(), CallStatus::Undelivered);

    let wrong = world.model("w", "t_add", json!({"a": "two", "b": 3})).await;
    assert_eq!(error(&wrong).0, "invalid_arguments", "the server's schema is checked by the turn first");
    assert_eq!(
        ok(&world.model("e2", "t_echo", json!({"text": "still here"})).await),
        json!("still here"),
        "the server is unharmed"
    );
}

#[tokio::test]
async fn over_stdio_failures_are_values_and_a_dead_server_starts_again() {
    let (_dir, world) = world(&format!("command = [{TEST_SERVER:?}]")).await;
    failures_are_values(&world).await;

    let first_pid: u32 = ok(&world.model("p1", "t_pid", json!({})).await).as_str().unwrap().parse().unwrap();
    let died = world.model("d", "t_die", json!({})).await;
    let (code, message) = error(&died);
    assert_eq!(code, "tool_failed", "{message}");
    assert!(message.contains("the MCP server `test` stopped while `t_die` was running"), "{message}");
    assert!(message.contains("the call may have run"), "{message}");
    assert!(message.contains("dying on purpose"), "the server's last stderr is quoted: {message}");
    assert!(message.contains("it exited with status 3"), "the server's exit status is said: {message}");
    let row = world.audit_row("d").await;
    assert_eq!(
        (row.status, row.step, row.code.as_deref()),
        (CallStatus::Failed, Some(Step::Execution), Some("tool_failed"))
    );
    let possibly = world.turn.possibly_executed_approval_actions().await.unwrap();
    assert!(possibly.iter().any(|e| e.call.call_id == "d"), "an approved call whose server died may have run");

    // The next call starts the server again.
    let second_pid: u32 = ok(&world.model("p2", "t_pid", json!({})).await).as_str().unwrap().parse().unwrap();
    assert_ne!(first_pid, second_pid, "a fresh process");
    assert!(alive(second_pid));

    // Shutting the set down ends the process; later calls are refused as not made.
    world.tools.shutdown().await;
    crate::support::eventually(Duration::from_secs(10), "the server process ended", || !alive(second_pid)).await;
    let after = world.model("p3", "t_pid", json!({})).await;
    let (code, message) = error(&after);
    assert_eq!(code, "tool_failed");
    assert!(message.contains("was not run") && message.contains("the call was not made"), "{message}");
}

#[tokio::test]
async fn over_streamable_http_failures_are_values_and_a_dead_server_is_not_called() {
    let mut server = http_server().await;
    let (_dir, world) = world(&format!("url = {:?}", server.url)).await;
    failures_are_values(&world).await;

    let died = world.model("d", "t_die", json!({})).await;
    let (code, message) = error(&died);
    assert_eq!(code, "tool_failed", "{message}");
    assert!(message.contains("stopped while `t_die` was running") && message.contains("may have run"), "{message}");
    let status = server.child.wait().await.unwrap();
    assert_eq!(status.code(), Some(3), "the server process really died");

    // Nothing listens any more: the call is refused as not made.
    let after = world.model("p", "t_pid", json!({})).await;
    let (code, message) = error(&after);
    assert_eq!(code, "tool_failed");
    assert!(message.contains("`t_pid` was not run: the MCP server `test` is not available"), "{message}");
    assert!(message.contains("the call was not made"), "{message}");
    assert!(world.tools.servers().await[0].error.is_some(), "the listing says it is down");
    world.tools.shutdown().await;
}

#[tokio::test]
async fn a_server_that_does_not_start_gives_failure_values_for_its_named_tools() {
    let text = "[mcp.gone]\ncommand = [\"/nonexistent/mcp-server\"]\nstartup_timeout = \"5s\"\n[mcp.gone.tools.lookup]\ndescription = \"Looks things up.\"\nread_only = true\n";
    let (_dir, config) = config(text, &Vars::from_env());
    let tools = ToolSet::start(&config.tools).await.expect("a server that does not start is not an error");
    assert_eq!(tools.tools().iter().map(|t| t.name()).collect::<Vec<_>>(), ["lookup"], "its named tools stand in");
    let status = &tools.servers().await[0];
    assert!(
        status.error.as_deref().is_some_and(|e| e.contains("cannot start `/nonexistent/mcp-server`")),
        "{status:?}"
    );

    let world = World::new(tools, Arc::new(PolicyApprover::deny_all())).await;
    let result = world.script("lookup(q='x')", json!({})).await;
    assert_eq!(result["ok"], false);
    assert_eq!(result["error"]["code"], "tool_failed");
    let message = result["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`lookup` was not run: the MCP server `gone` is not available")
            && message.contains("not made"),
        "{message}"
    );
}

#[tokio::test]
async fn a_server_that_exits_before_it_initializes_is_shown_with_its_exit_status_and_stderr() {
    let text = "[mcp.quits]\ncommand = [\"sh\", \"-c\", \"echo 'set QUITS_API_KEY first' >&2; exit 2\"]\nstartup_timeout = \"20s\"\n";
    let (_dir, config) = config(text, &Vars::from_env());
    let tools = ToolSet::start(&config.tools).await.expect("a server that does not start is not an error");
    let status = &tools.servers().await[0];
    let error = status.error.as_deref().unwrap_or_default();
    assert!(error.contains("it did not initialize"), "{status:?}");
    assert!(error.contains("it exited with status 2"), "the exit status is said: {status:?}");
    assert!(error.contains("set QUITS_API_KEY first"), "its stderr is quoted: {status:?}");
}

#[tokio::test]
async fn a_tool_override_for_a_tool_the_server_does_not_list_is_a_config_error() {
    let text = format!("[mcp.test]\ncommand = [{TEST_SERVER:?}]\n[mcp.test.tools.ech]\nread_only = true\n");
    let (_dir, config) = config(&text, &Vars::from_env());
    let error = ToolSet::start(&config.tools).await.unwrap_err().to_string();
    assert!(
        error.contains("`mcp.test.tools.ech`: the MCP server `test` lists no tool `ech`; its tools are:"),
        "{error}"
    );
    assert!(error.contains("echo"), "{error}");
}

#[tokio::test]
async fn an_include_entry_that_names_no_tool_is_a_config_error_and_a_pattern_matching_none_is_not() {
    let text = format!("[mcp.test]\ncommand = [{TEST_SERVER:?}]\ninclude = [\"echo\", \"ech\"]\n");
    let (_dir, typo) = config(&text, &Vars::from_env());
    let error = ToolSet::start(&typo.tools).await.unwrap_err().to_string();
    assert!(
        error.contains("`mcp.test.include[1]`: the MCP server `test` lists no tool `ech`; did you mean `echo`?"),
        "{error}"
    );
    assert!(error.contains("its tools are: ") && error.contains("echo"), "{error}");

    let text = format!("[mcp.test]\ncommand = [{TEST_SERVER:?}]\ninclude = [\"echo\", \"nothing_*\"]\n");
    let (_dir, pattern) = config(&text, &Vars::from_env());
    let tools = ToolSet::start(&pattern.tools).await.unwrap();
    assert_eq!(tools.tools().iter().map(|t| t.name()).collect::<Vec<_>>(), ["echo"]);
}

/// The progress reports of `call_id` in `log`, in order, each with its
/// parent; panics unless they come between its start and its end.
fn progress_of(log: &EventLog, call_id: &str) -> Vec<(ToolProgress, Option<String>)> {
    let events: Vec<ToolEvent> = log.events().into_iter().filter(|e| e.call_id() == call_id).collect();
    assert!(matches!(events.first(), Some(ToolEvent::ToolStarted { .. })), "{events:?}");
    assert!(matches!(events.last(), Some(ToolEvent::ToolCompleted { error_code: None, .. })), "{events:?}");
    let inner = &events[1..events.len() - 1];
    inner
        .iter()
        .map(|event| match event {
            ToolEvent::ToolProgress { progress, parent_call_id, .. } => (progress.clone(), parent_call_id.clone()),
            other => panic!("only progress between start and end: {other:?}"),
        })
        .collect()
}

/// An MCP server's `notifications/progress` for a call reach the turn's
/// events as that call's progress, from a model's call and a script's.
async fn progress_reaches_the_events(way: &str) {
    let (dir, config) = config(&server_config(way), &Vars::from_env());
    let tools = ToolSet::start(&config.tools).await.unwrap();
    let log = Arc::new(EventLog::new());
    let events = log.clone();
    let world = World::with(tools, Arc::new(PolicyApprover::approve_all()), |b| b.events(events)).await;

    let counted = world.model("c", "t_count", json!({"steps": 3, "ms": 100})).await;
    assert_eq!(ok(&counted), json!("counted to 3, progress reported"), "the call asked for progress");
    let reports = progress_of(&log, "c");
    let expected: Vec<(ToolProgress, Option<String>)> = (1..=3)
        .map(|step| {
            let progress =
                ToolProgress { progress: step.into(), total: Some(3.0), message: Some(format!("step {step}")) };
            (progress, None)
        })
        .collect();
    assert_eq!(reports, expected, "each step, in order, with its total and message");

    let result = world.script("unwrap(t_count(steps=2, ms=100))", json!({})).await;
    assert_eq!(result, json!("counted to 2, progress reported"));
    let reports = progress_of(&log, "s1/1");
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert!(
        reports.iter().all(|(_, parent)| parent.as_deref() == Some("s1")),
        "a script's call names its run: {reports:?}"
    );
    assert!(log.unpaired().is_empty(), "{:?}", log.unpaired());
    world.tools.shutdown().await;
    drop(dir);
}

#[tokio::test]
async fn over_stdio_a_slow_tools_progress_is_reported_as_it_works() {
    progress_reaches_the_events(&format!("command = [{TEST_SERVER:?}]")).await;
}

#[tokio::test]
async fn over_streamable_http_a_slow_tools_progress_is_reported_as_it_works() {
    let server = http_server().await;
    progress_reaches_the_events(&format!("url = {:?}", server.url)).await;
}
