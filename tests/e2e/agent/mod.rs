//! The agent loop against a fake OpenAI-compatible server (real HTTP on
//! loopback, streaming SSE), peer agents as tools, depth, and the one
//! deadline of a call tree.

use crate::support::sidecar;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tether_backend::agent::{
    AgentConfig, AgentError, AgentEvent, AgentEventLog, AgentLoop, AgentToolEntry, AgentsConfig, ChatEndpoint,
    NestedTurnSetup, PeerAgents,
};
use tether_backend::turn::{
    Code, LedgerState, PolicyApprover, ScriptTool, ToolOutput, ToolSpec, Turn, TurnBuilder, executor_fn,
};
use tether_tests::fake_model::{FakeModel, Reply, call};

fn agent(fake: &FakeModel) -> AgentConfig {
    AgentConfig {
        base_url: fake.base_url.clone(),
        model: "fake".into(),
        api_key_env: None,
        system_prompt: None,
        tools: vec![],
    }
}

fn unreachable_agent() -> AgentConfig {
    // Port 1 on loopback: nothing listens, the connection is refused.
    AgentConfig {
        base_url: "http://127.0.0.1:1/v1".into(),
        model: "gone".into(),
        api_key_env: None,
        system_prompt: None,
        tools: vec![],
    }
}

fn plain_setup() -> NestedTurnSetup {
    Arc::new(|_agent: &str, builder: TurnBuilder| builder)
}

/// A read-only `lookup` tool and an approval-required `send_email` tool.
fn with_tools(builder: TurnBuilder) -> TurnBuilder {
    let object = json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]});
    builder
        .tool(
            ToolSpec::new("lookup", "Looks a record up by id.", object).read_only(),
            executor_fn(
                |_, args: Value| async move { Ok(ToolOutput::new(json!({"id": args["id"], "name": "thing"}))) },
            ),
        )
        .tool(
            ToolSpec::new(
                "send_email",
                "Sends an email.",
                json!({"type": "object", "properties": {"to": {"type": "string"}}}),
            )
            .requires_approval(),
            executor_fn(|_, _| async { Ok(ToolOutput::new(json!("sent"))) }),
        )
}

#[tokio::test]
async fn the_model_calls_a_tool_a_script_and_an_agent_gets_refusals_as_values_and_finishes() {
    let (_sidecar, client) = sidecar().await;
    let helper = FakeModel::start(vec![Reply::Echo("helper says: ".into())]).await;
    let script = "r = call('lookup', {'id': 'b'})\ns = call('agent_helper', {'request': 'summarise b'})\nm = call('send_email', {'to': 'x'})\n[r, s, m]";
    let main = FakeModel::start(vec![
        call("c1", "lookup", json!({"id": "a"})),
        call("c2", "run_script", json!({"code": script})),
        call("c3", "send_email", json!({"to": "y"})),
        Reply::Text("all done".into()),
    ])
    .await;
    let config = AgentsConfig {
        agents: [("main".to_owned(), agent(&main)), ("helper".to_owned(), agent(&helper))].into(),
        agent_tools: vec![AgentToolEntry::new("helper", "Summarises."), AgentToolEntry::new("main", "The main agent.")],
    };
    let events = Arc::new(AgentEventLog::new());
    let peers = PeerAgents::new(config, plain_setup(), events.clone());
    let mut builder = with_tools(Turn::builder("t-agent")).add_tool(ScriptTool::new(client).into_tool().unwrap());
    for tool in peers.tools_for(Some("main")).unwrap() {
        builder = builder.add_tool(tool);
    }
    let turn = builder.approver(Arc::new(PolicyApprover::deny_all())).build().unwrap();

    let run = peers.agent_loop("main").unwrap().run(&turn, vec![json!({"role": "user", "content": "go"})]).await;
    assert_eq!(run.result.unwrap(), "all done");
    assert_eq!(run.model_requests, 4);

    let offered = main.tools_offered(0);
    assert_eq!(offered, ["lookup", "send_email", "run_script", "agent_helper"], "never agent_main: the caller itself");
    let script_tool = &main.requests()[0]["tools"][2]["function"]["description"];
    assert!(
        script_tool.as_str().unwrap().contains("def agent_helper("),
        "the stubs list the agent tool: {script_tool}"
    );

    assert_eq!(main.tool_result(1, "c1"), json!({"ok": true, "value": {"id": "a", "name": "thing"}, "error": null}));
    let ran = main.tool_result(2, "c2");
    assert_eq!(ran["ok"], true, "{ran}");
    let [looked, helped, mailed] = ran["value"]["result"].as_array().unwrap().clone().try_into().unwrap();
    assert_eq!(looked["value"], json!({"id": "b", "name": "thing"}));
    assert_eq!(helped, json!({"ok": true, "value": "helper says: summarise b", "error": null}));
    assert_eq!(mailed["error"]["code"], "approval_denied", "a refusal inside the script is a value: {mailed}");
    let direct = main.tool_result(3, "c3");
    assert_eq!((direct["ok"].clone(), direct["error"]["code"].clone()), (json!(false), json!("approval_denied")));

    // The helper ran one stateless turn: just the request, and no tool of its own.
    let asked = helper.requests();
    assert_eq!(asked.len(), 1);
    let messages = asked[0]["messages"].as_array().unwrap();
    assert_eq!(
        (messages.len(), messages[1]["content"].as_str()),
        (2, Some("summarise b")),
        "system + the request only"
    );
    assert_eq!(helper.tools_offered(0), Vec::<String>::new(), "no agent tools: main encloses it, helper is itself");

    // The agent call went through the one path at depth 1, as a script call.
    let rows = turn.audit_log().await.unwrap();
    let row = rows.iter().find(|r| r.call.tool == "agent_helper").unwrap();
    assert_eq!((row.call.origin.as_str(), row.call.depth), ("script", 1));
    let nested = events.events().into_iter().find_map(|e| match e {
        AgentEvent::NestedTurnStarted { agent, depth, deadline, .. } => Some((agent, depth, deadline)),
        _ => None,
    });
    assert_eq!(nested, Some(("helper".to_owned(), 2, None)));
    assert!(events.events().iter().any(|e| matches!(e, AgentEvent::Token { text, .. } if text == "done")));
    assert_eq!(peers.cached_runners(), ["helper", "main"]);
}

#[tokio::test]
async fn a_cycle_is_refused_and_an_unreachable_agent_is_a_failure_value_and_the_turn_goes_on() {
    let b = FakeModel::start(vec![
        call("b1", "agent_main", json!({"request": "back to you"})),
        Reply::Text("b done".into()),
    ])
    .await;
    let main = FakeModel::start(vec![
        call("c1", "agent_main", json!({"request": "myself"})),
        call("c2", "agent_gone", json!({"request": "anyone?"})),
        call("c3", "agent_b", json!({"request": "help"})),
        Reply::Text("finished anyway".into()),
    ])
    .await;
    let global = vec![
        AgentToolEntry::new("main", "Main."),
        AgentToolEntry::new("gone", "Unreachable."),
        AgentToolEntry::new("b", "B."),
    ];
    let config = AgentsConfig {
        agents: [
            ("main".to_owned(), agent(&main)),
            ("gone".to_owned(), unreachable_agent()),
            ("b".to_owned(), agent(&b)),
        ]
        .into(),
        agent_tools: global,
    };
    let peers = PeerAgents::new(config, plain_setup(), Arc::new(AgentEventLog::new()));
    let mut builder = Turn::builder("t-cycle");
    for tool in peers.tools_for(Some("main")).unwrap() {
        builder = builder.add_tool(tool);
    }
    let turn = builder.build().unwrap();
    let run = peers.agent_loop("main").unwrap().run(&turn, vec![json!({"role": "user", "content": "go"})]).await;
    assert_eq!(run.result.unwrap(), "finished anyway");

    let myself = main.tool_result(1, "c1");
    assert_eq!(myself["error"]["code"], "tool_not_found", "the caller is never offered itself: {myself}");
    let gone = main.tool_result(2, "c2");
    assert_eq!(gone["error"]["code"], "tool_failed", "{gone}");
    let message = gone["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("agent `gone`") && message.contains("cannot reach"),
        "says which agent and why: {message}"
    );
    assert_eq!(main.tool_result(3, "c3"), json!({"ok": true, "value": "b done", "error": null}));

    // Inside b's turn, neither b nor main (which encloses it) is offered: A → B → A is refused.
    assert_eq!(b.tools_offered(0), ["agent_gone"]);
    assert_eq!(b.tool_result(1, "b1")["error"]["code"], "tool_not_found");
}

#[tokio::test]
async fn one_deadline_cuts_a_deep_chain_at_one_instant_and_the_tool_set_shrinks_with_depth() {
    let c = FakeModel::start(vec![Reply::Hang]).await;
    let b = FakeModel::start(vec![call("b1", "agent_c", json!({"request": "deeper"}))]).await;
    let a = FakeModel::start(vec![call("a1", "agent_b", json!({"request": "start"}))]).await;
    let d = FakeModel::start(vec![]).await;
    let config = AgentsConfig {
        agents: [
            ("a".to_owned(), agent(&a)),
            ("b".to_owned(), agent(&b)),
            ("c".to_owned(), agent(&c)),
            ("d".to_owned(), agent(&d)),
        ]
        .into(),
        agent_tools: ["b", "c", "d"].iter().map(|n| AgentToolEntry::new(*n, "peer")).collect(),
    };
    let events = Arc::new(AgentEventLog::new());
    let peers = PeerAgents::new(config, plain_setup(), events.clone());
    // Model calls: a at depth 0, b at depth 1, c at depth 2 = the deepest level.
    let mut builder = Turn::builder("t-deadline").max_depth(2).deadline_in(Duration::from_millis(1500));
    for tool in peers.tools_for(Some("a")).unwrap() {
        builder = builder.add_tool(tool);
    }
    let turn = builder.build().unwrap();
    let deadline = turn.deadline().unwrap();

    let run = peers.agent_loop("a").unwrap().run(&turn, vec![json!({"role": "user", "content": "go"})]).await;
    let ended = tokio::time::Instant::now();
    assert!(matches!(run.result, Err(AgentError::TurnEnded { code: Code::TurnDeadlineExceeded })), "{:?}", run.result);
    assert!(ended >= deadline, "the chain ends at the deadline, not before");

    let nested: Vec<_> = events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::NestedTurnStarted { agent, depth, deadline, .. } => Some((agent, depth, deadline)),
            _ => None,
        })
        .collect();
    assert_eq!(
        nested,
        [("b".to_owned(), 1, Some(deadline)), ("c".to_owned(), 2, Some(deadline))],
        "ONE deadline, never a sum"
    );
    assert_eq!(a.requests().len(), 1, "a is not asked again once the turn ended");
    assert_eq!(c.requests().len(), 1);
    assert_eq!(a.tools_offered(0), ["agent_b", "agent_c", "agent_d"]);
    assert_eq!(b.tools_offered(0), ["agent_c", "agent_d"], "depth 1: agent tools still offered");
    assert_eq!(c.tools_offered(0), Vec::<String>::new(), "depth 2 = max_depth: no tool that nests");
    assert!(d.requests().is_empty());
    let row = turn.audit_log().await.unwrap().into_iter().find(|r| r.call.tool == "agent_b").unwrap();
    assert_eq!(row.code.as_deref(), Some("turn_deadline_exceeded"));
}

#[tokio::test]
async fn a_failed_model_call_is_retried_only_while_no_approval_required_action_ran() {
    // No action ran: the failure is retried and the turn answers.
    let flaky = FakeModel::start(vec![Reply::Status(500), Reply::Text("fine".into())]).await;
    let endpoint = ChatEndpoint::new(&flaky.base_url, "fake", None).unwrap();
    let turn = with_tools(Turn::builder("t-retry")).build().unwrap();
    let run = AgentLoop::new(endpoint).run(&turn, vec![json!({"role": "user", "content": "hi"})]).await;
    assert_eq!((run.result.unwrap(), run.model_requests), ("fine".to_owned(), 2));

    // An approved email went out, then the model failed: no second call to recover (seed 004).
    let failing = FakeModel::start(vec![
        call("m1", "send_email", json!({"to": "boss"})),
        Reply::Status(500),
        Reply::Text("never".into()),
    ])
    .await;
    let endpoint = ChatEndpoint::new(&failing.base_url, "fake", None).unwrap();
    let turn = with_tools(Turn::builder("t-004")).approver(Arc::new(PolicyApprover::approve_all())).build().unwrap();
    let run = AgentLoop::new(endpoint).run(&turn, vec![json!({"role": "user", "content": "mail the boss"})]).await;
    let error = run.result.unwrap_err();
    assert!(matches!(&error, AgentError::Model { message, .. } if message.contains("500")), "{error}");
    assert_eq!(run.model_requests, 2, "the failed call is not retried");
    assert_eq!(failing.requests().len(), 2);
    let actions: Vec<_> = run.possibly_executed.iter().map(|e| (e.call.tool.as_str(), e.state)).collect();
    assert_eq!(actions, [("send_email", LedgerState::Settled)]);
}

#[tokio::test]
async fn an_endpoint_that_answers_one_json_completion_is_read_and_one_that_answers_something_else_is_named() {
    let whole_call = json!({"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "w1", "type": "function", "function": {"name": "lookup", "arguments": "{\"id\": \"c-7\"}"}}]}}]});
    let whole_text = json!({"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": "c-7 is a thing"}}]});
    let unstreamed = FakeModel::start(vec![Reply::Plain(whole_call), Reply::Plain(whole_text)]).await;
    let endpoint = ChatEndpoint::new(&unstreamed.base_url, "fake", None).unwrap();
    let turn = with_tools(Turn::builder("t-whole")).build().unwrap();
    let run = AgentLoop::new(endpoint).run(&turn, vec![json!({"role": "user", "content": "what is c-7?"})]).await;
    assert_eq!(run.result.unwrap(), "c-7 is a thing");
    assert_eq!(unstreamed.tool_result(1, "w1")["value"], json!({"id": "c-7", "name": "thing"}), "the call was made");

    let wrong = FakeModel::start(vec![Reply::Plain(json!({"detail": "Not Found"}))]).await;
    let endpoint = ChatEndpoint::new(&wrong.base_url, "fake", None).unwrap();
    let turn = with_tools(Turn::builder("t-wrong")).build().unwrap();
    let error = AgentLoop::new(endpoint)
        .model_retries(0)
        .run(&turn, vec![json!({"role": "user", "content": "hi"})])
        .await
        .result
        .unwrap_err()
        .to_string();
    assert!(error.contains("it answered `application/json`, not a stream of completion chunks"), "{error}");
    assert!(error.contains("no `choices`") && error.contains("Not Found"), "the body is quoted: {error}");
    assert!(!error.contains("the stream ended"), "{error}");
}

#[tokio::test]
async fn a_config_change_evicts_the_changed_agents_runner() {
    let one = FakeModel::start(vec![Reply::Text("one".into())]).await;
    let two = FakeModel::start(vec![Reply::Text("two".into())]).await;
    let config = AgentsConfig {
        agents: [("x".to_owned(), agent(&one)), ("y".to_owned(), agent(&one))].into(),
        agent_tools: vec![],
    };
    let peers = PeerAgents::new(config.clone(), plain_setup(), Arc::new(AgentEventLog::new()));
    peers.agent_loop("x").unwrap();
    peers.agent_loop("y").unwrap();
    assert_eq!(peers.cached_runners(), ["x", "y"]);
    let mut changed = config;
    changed.agents.insert("y".into(), agent(&two));
    peers.set_config(changed);
    assert_eq!(peers.cached_runners(), ["x"], "only y's config changed");
    let turn = Turn::builder("t-evict").build().unwrap();
    let run = peers.agent_loop("y").unwrap().run(&turn, vec![json!({"role": "user", "content": "?"})]).await;
    assert_eq!(run.result.unwrap(), "two", "the new runner uses the new endpoint");
    assert!(matches!(peers.agent_loop("ghost"), Err(AgentError::Setup { .. })));
}
