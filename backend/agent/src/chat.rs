//! One streamed chat completion against an OpenAI-compatible endpoint:
//! `POST {base_url}/chat/completions` with `"stream": true`, read as
//! server-sent events (`eventsource-stream`), the deltas put back together
//! into one assistant message. An endpoint that ignores `stream` and answers
//! one JSON completion is read as that completion.

use super::error::AgentError;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The most bytes of an error response's body kept in the error.
const ERROR_BODY_BYTES: usize = 2048;

/// An OpenAI-compatible chat-completions endpoint and the model to ask.
/// Cheap to clone (the HTTP client is shared).
#[derive(Clone)]
pub struct ChatEndpoint {
    url: String,
    model: String,
    api_key: Option<String>,
    client: reqwest::Client,
}

impl std::fmt::Debug for ChatEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is never printed.
        f.debug_struct("ChatEndpoint").field("url", &self.url).field("model", &self.model).finish_non_exhaustive()
    }
}

/// A tool call in the model's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelToolCall {
    /// The model's id for the call.
    pub id: String,
    /// The tool named.
    pub name: String,
    /// The arguments as the model wrote them (JSON text, maybe invalid).
    pub arguments: String,
}

/// The model's answer: its text and the tool calls it made.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssistantMessage {
    /// The text (empty when it only called tools).
    pub content: String,
    /// The tool calls, in the order of their index.
    pub tool_calls: Vec<ModelToolCall>,
}

impl AssistantMessage {
    /// The message as sent back in the conversation.
    pub fn to_message(&self) -> Value {
        let mut message = json!({"role": "assistant", "content": self.content});
        if !self.tool_calls.is_empty() {
            message["tool_calls"] = self
                .tool_calls
                .iter()
                .map(
                    |c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}),
                )
                .collect();
        }
        message
    }
}

/// A whole (not streamed) completion, as an endpoint that ignores `stream`
/// answers.
#[derive(Deserialize)]
struct Completion {
    #[serde(default)]
    choices: Vec<WholeChoice>,
}

#[derive(Deserialize)]
struct WholeChoice {
    message: WholeMessage,
}

#[derive(Deserialize)]
struct WholeMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WholeToolCall>,
}

#[derive(Deserialize)]
struct WholeToolCall {
    #[serde(default)]
    id: String,
    function: WholeFunction,
}

#[derive(Deserialize)]
struct WholeFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Delta,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCallDelta>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

impl ChatEndpoint {
    /// `model` at `base_url` (e.g. `http://localhost:8080/v1`), with an
    /// optional bearer key.
    ///
    /// # Errors
    /// [`AgentError::Setup`] if the HTTP client cannot be built.
    pub fn new(base_url: &str, model: impl Into<String>, api_key: Option<String>) -> Result<Self, AgentError> {
        let client =
            tether_tools::http_client().map_err(|reason| AgentError::Setup { agent: base_url.to_owned(), reason })?;
        Ok(ChatEndpoint {
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            model: model.into(),
            api_key,
            client,
        })
    }

    /// The chat-completions URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The model name.
    pub fn model(&self) -> &str {
        &self.model
    }

    fn failed(&self, message: impl Into<String>) -> AgentError {
        AgentError::Model { endpoint: self.url.clone(), message: message.into() }
    }

    /// Asks for one completion of `messages` with `tools` (OpenAI function
    /// tools), streaming; `on_token` gets each piece of text as it arrives.
    ///
    /// # Errors
    /// [`AgentError::Model`]: unreachable, an error status (with the body's
    /// start), an `error` in the stream, a chunk that is not JSON, a stream
    /// that ends before `[DONE]` or a finish reason, or an answer that is
    /// neither a stream nor one JSON completion.
    ///
    /// # Cancel safety
    /// Dropping the future drops the request (the connection closes).
    pub async fn complete(
        &self,
        messages: &[Value],
        tools: &[Value],
        mut on_token: impl FnMut(&str) + Send,
    ) -> Result<AssistantMessage, AgentError> {
        let mut body = json!({"model": self.model, "messages": messages, "stream": true});
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools.to_vec());
        }
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| self.failed(format!("cannot reach it: {e}")))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            let cut: String = text.chars().take(ERROR_BODY_BYTES).collect();
            return Err(self.failed(format!("HTTP {status}: {cut}")));
        }
        let kind = response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|value| value.to_str().ok());
        if let Some(kind) = kind.filter(|kind| !kind.starts_with("text/event-stream")) {
            let kind = kind.to_owned();
            return self.whole(response, &kind, on_token).await;
        }
        let mut events = response.bytes_stream().eventsource();
        let mut message = AssistantMessage::default();
        let mut calls: BTreeMap<u32, ModelToolCall> = BTreeMap::new();
        let mut finished = false;
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| self.failed(format!("the stream broke: {e}")))?;
            let data = event.data.trim();
            if data == "[DONE]" {
                finished = true;
                break;
            }
            if data.is_empty() {
                continue;
            }
            let chunk: Chunk = serde_json::from_str(data)
                .map_err(|e| self.failed(format!("a stream chunk is not a completion chunk: {e}")))?;
            if let Some(error) = chunk.error {
                return Err(self.failed(format!("it reported an error: {error}")));
            }
            for choice in chunk.choices {
                if let Some(text) = choice.delta.content.filter(|t| !t.is_empty()) {
                    on_token(&text);
                    message.content.push_str(&text);
                }
                for delta in choice.delta.tool_calls {
                    let call = calls.entry(delta.index).or_insert_with(|| ModelToolCall {
                        id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                    });
                    if let Some(id) = delta.id {
                        call.id = id;
                    }
                    if let Some(function) = delta.function {
                        call.name.push_str(function.name.as_deref().unwrap_or_default());
                        call.arguments.push_str(function.arguments.as_deref().unwrap_or_default());
                    }
                }
                finished |= choice.finish_reason.is_some();
            }
        }
        if !finished {
            return Err(self.failed("the stream ended before the answer was complete"));
        }
        message.tool_calls = with_ids(calls.into_values());
        Ok(message)
    }

    /// The answer of an endpoint that sent one JSON completion (content
    /// type `kind`) instead of a stream: that completion, its text given to
    /// `on_token` at once.
    async fn whole(
        &self,
        response: reqwest::Response,
        kind: &str,
        mut on_token: impl FnMut(&str) + Send,
    ) -> Result<AssistantMessage, AgentError> {
        let text = response.text().await.map_err(|e| self.failed(format!("its answer broke off: {e}")))?;
        let not_a_completion = |why: &str| {
            let cut: String = text.chars().take(ERROR_BODY_BYTES).collect();
            self.failed(format!(
                "it answered `{kind}`, not a stream of completion chunks (`text/event-stream`) or one completion \
                 ({why}); check that base_url is an OpenAI-compatible `/v1`. It answered: {cut}"
            ))
        };
        let completion: Completion = serde_json::from_str(&text).map_err(|e| not_a_completion(&e.to_string()))?;
        let Some(choice) = completion.choices.into_iter().next() else {
            return Err(not_a_completion("no `choices`"));
        };
        let content = choice.message.content.unwrap_or_default();
        if !content.is_empty() {
            on_token(&content);
        }
        let calls = choice.message.tool_calls.into_iter().map(|call| ModelToolCall {
            id: call.id,
            name: call.function.name,
            arguments: call.function.arguments,
        });
        Ok(AssistantMessage { content, tool_calls: with_ids(calls) })
    }
}

/// The calls in order, each without an id given `call_<index>`.
fn with_ids(calls: impl IntoIterator<Item = ModelToolCall>) -> Vec<ModelToolCall> {
    calls
        .into_iter()
        .enumerate()
        .map(|(index, mut call)| {
            if call.id.is_empty() {
                call.id = format!("call_{index}");
            }
            call
        })
        .collect()
}
