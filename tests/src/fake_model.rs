//! A fake OpenAI-compatible chat-completions server: real HTTP on loopback
//! (axum), answering each request with the next scripted reply, streamed as
//! server-sent events the way the real API streams them (text in pieces,
//! tool-call arguments split across chunks, `data: [DONE]`).
//!
//! Test support: a fake that cannot bind or whose state is poisoned fails
//! the test using it, hence the unwraps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Text, no tool calls.
    Text(String),
    /// Tool calls: (id, name, arguments).
    Calls(Vec<(String, String, Value)>),
    /// Text: the prefix and the last user message.
    Echo(String),
    /// An error status with a JSON error body.
    Status(u16),
    /// Never answers.
    Hang,
    /// This JSON body, not streamed (`application/json`), as an endpoint
    /// that ignores `stream: true` answers.
    Plain(Value),
}

/// A reply with one tool call.
pub fn call(id: &str, name: &str, args: Value) -> Reply {
    Reply::Calls(vec![(id.into(), name.into(), args)])
}

#[derive(Debug, Default)]
struct Script {
    replies: Mutex<VecDeque<Reply>>,
    /// Repeated once the list is used up (tests that loop).
    last: Mutex<Option<Reply>>,
    requests: Mutex<Vec<Value>>,
}

/// The running server; it stops when dropped.
#[derive(Debug)]
pub struct FakeModel {
    /// The base URL to configure an agent with (`http://127.0.0.1:PORT/v1`).
    pub base_url: String,
    script: Arc<Script>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeModel {
    /// Answers with `replies` in order, then with a 500 saying the script is used up.
    pub async fn start(replies: Vec<Reply>) -> FakeModel {
        Self::start_repeating(replies, None).await
    }

    /// Answers with `replies` in order, then with `last` forever.
    pub async fn start_repeating(replies: Vec<Reply>, last: Option<Reply>) -> FakeModel {
        let script = Arc::new(Script {
            replies: Mutex::new(replies.into()),
            last: Mutex::new(last),
            requests: Mutex::default(),
        });
        let app = Router::new().route("/v1/chat/completions", post(complete)).with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeModel { base_url: format!("http://{addr}/v1"), script, task }
    }

    /// The request bodies received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.script.requests.lock().unwrap().clone()
    }

    /// The tool names offered in request `n`.
    pub fn tools_offered(&self, n: usize) -> Vec<String> {
        self.requests()[n]["tools"]
            .as_array()
            .map(|tools| tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    }

    /// The parsed content of the tool message answering `call_id` in request `n`.
    pub fn tool_result(&self, n: usize, call_id: &str) -> Value {
        let request = &self.requests()[n];
        let message = request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
            .unwrap_or_else(|| panic!("no tool message for {call_id} in request {n}: {request}"));
        serde_json::from_str(message["content"].as_str().unwrap()).unwrap()
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> Result<Event, Infallible> {
    Ok(Event::default().data(
        json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            .to_string(),
    ))
}

async fn complete(State(script): State<Arc<Script>>, Json(body): Json<Value>) -> Response {
    let last_user = body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    script.requests.lock().unwrap().push(body);
    let next = script.replies.lock().unwrap().pop_front().or_else(|| script.last.lock().unwrap().clone());
    let mut events = vec![chunk(json!({"role": "assistant"}), None)];
    match next {
        None => {
            return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "the fake model's script is used up")
                .into_response();
        }
        Some(Reply::Status(code)) => {
            let status = axum::http::StatusCode::from_u16(code).unwrap();
            return (status, Json(json!({"error": {"message": "scripted failure", "type": "server_error"}})))
                .into_response();
        }
        Some(Reply::Hang) => std::future::pending::<()>().await,
        Some(Reply::Plain(body)) => return Json(body).into_response(),
        Some(Reply::Echo(prefix)) => push_text(&mut events, &format!("{prefix}{last_user}")),
        Some(Reply::Text(text)) => push_text(&mut events, &text),
        Some(Reply::Calls(calls)) => {
            for (index, (id, name, args)) in calls.iter().enumerate() {
                let args = args.to_string();
                let (first, second) = args.split_at(args.len() / 2);
                events.push(chunk(json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": first}}]}), None));
                events.push(chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": second}}]}), None));
            }
            events.push(chunk(json!({}), Some("tool_calls")));
        }
    }
    events.push(Ok(Event::default().data("[DONE]")));
    Sse::new(futures::stream::iter(events)).into_response()
}

fn push_text(events: &mut Vec<Result<Event, Infallible>>, text: &str) {
    for piece in text.split_inclusive(' ') {
        events.push(chunk(json!({"content": piece}), None));
    }
    events.push(chunk(json!({}), Some("stop")));
}
