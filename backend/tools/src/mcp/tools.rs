//! A server's tools as the turn's tools: names under the server's prefix,
//! the server's schemas, metadata from the config (and, when the config
//! trusts them, from the server's annotations), and each result mapped to
//! JSON: `structuredContent` when present, else the text content; `isError`
//! a `tool_failed` value.

use super::ServerConfig;
use super::server::{CallError, McpServer};
use crate::error::ConfigError;
use crate::meta::{MetaEntry, Replay};
use crate::read::At;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};
use std::sync::Arc;
use tether_codes::Reason;
use tether_turn::{ToolContext, ToolError, ToolExecutor, ToolOutput, ToolSpec};

/// A tool as it joins a turn, before its schema is compiled.
pub(crate) type SpecAndExecutor = (ToolSpec, Arc<dyn ToolExecutor>);

/// How much of an `isError` result's text a failure value quotes.
const ERROR_TEXT_BYTES: usize = 2048;

/// The specs and executors of `server`'s tools: `listed` when it started,
/// else (it did not) one stand-in per tool its config names, each call of
/// which tries to start the server again.
///
/// # Errors
/// A [`ConfigError`] when the config names a tool the running server does
/// not list (a typo, or a tool the server dropped).
pub(crate) fn server_tools(
    server: &Arc<McpServer>,
    listed: Option<Vec<rmcp::model::Tool>>,
    at: &At<'_>,
) -> Result<Vec<SpecAndExecutor>, ConfigError> {
    let config = &server.config;
    let Some(listed) = listed else {
        return config
            .tools
            .iter()
            .map(|(name, over)| {
                let description = over.description.clone().unwrap_or_else(|| {
                    format!("A tool of {} (it is not running: calling this tries to start it).", config.describe())
                });
                let spec = ToolSpec::new(format!("{}{name}", config.prefix), description, json!({"type": "object"}));
                let executor = executor(server, name, &spec.name);
                Ok((spec.meta(meta(at, config, &over.meta, &MetaEntry::default())?), executor))
            })
            .collect();
    };
    for name in config.tools.keys() {
        if !listed.iter().any(|t| t.name == name.as_str()) {
            let names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
            return Err(at
                .error(&format!("tools.{name}"), format!("{} lists no tool `{name}`", config.describe()))
                .fix(format!("its tools are: {}", names.join(", "))));
        }
    }
    let names = || listed.iter().map(|t| t.name.as_ref());
    for (index, entry) in config.include.iter().flatten().enumerate() {
        let matches = names().any(|name| tether_turn::glob_match(entry, name));
        if matches {
            continue;
        }
        if entry.contains(['*', '?']) {
            tracing::warn!(server = %config.name, pattern = %entry, "an `include` pattern matches none of the server's tools");
            continue;
        }
        let closest = crate::read::did_you_mean(entry, names());
        return Err(at
            .error(&format!("include[{index}]"), format!("{} lists no tool `{entry}`", config.describe()))
            .fix(format!("{closest}its tools are: {}", names().collect::<Vec<_>>().join(", "))));
    }
    let mut tools = Vec::new();
    for tool in listed.into_iter().filter(|t| config.includes(&t.name)) {
        let over = config.tools.get(tool.name.as_ref()).cloned().unwrap_or_default();
        let hints = if config.trust_annotations { annotations(&tool) } else { MetaEntry::default() };
        let description = over
            .description
            .clone()
            .or_else(|| tool.description.as_ref().map(|d| d.to_string()))
            .or_else(|| tool.title.clone())
            .unwrap_or_default();
        let mut spec = ToolSpec::new(
            format!("{}{}", config.prefix, tool.name),
            description,
            Value::Object(tool.input_schema.as_ref().clone()),
        )
        .meta(meta(at, config, &over.meta, &hints)?);
        if let Some(output) = &tool.output_schema {
            spec = spec.output_schema(Value::Object(output.as_ref().clone()));
        }
        let executor = executor(server, &tool.name, &spec.name);
        tools.push((spec, executor));
    }
    Ok(tools)
}

/// The tool's metadata: its own entry over the server's defaults over the
/// server's hints; unset keys: not read-only.
fn meta(
    at: &At<'_>,
    config: &ServerConfig,
    own: &MetaEntry,
    hints: &MetaEntry,
) -> Result<tether_turn::ToolMeta, ConfigError> {
    own.over(&config.meta.over(hints)).to_meta(false).map_err(|(key, problem)| at.error(key, problem))
}

/// A server's annotations as metadata (hints; used only when trusted).
fn annotations(tool: &rmcp::model::Tool) -> MetaEntry {
    let Some(hints) = &tool.annotations else { return MetaEntry::default() };
    MetaEntry {
        read_only: hints.read_only_hint,
        replay: hints.idempotent_hint.map(|idempotent| if idempotent { Replay::Safe } else { Replay::Never }),
        ..MetaEntry::default()
    }
}

fn executor(server: &Arc<McpServer>, remote: &str, local: &str) -> Arc<dyn ToolExecutor> {
    Arc::new(McpTool { server: server.clone(), remote: remote.to_owned(), local: local.to_owned() })
}

/// One tool of a server.
struct McpTool {
    server: Arc<McpServer>,
    /// The server's name for it.
    remote: String,
    /// The turn's name for it (prefix included), for messages.
    local: String,
}

#[async_trait::async_trait]
impl ToolExecutor for McpTool {
    async fn execute(&self, context: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let tool = self.local.clone();
        let provider = self.server.config.describe();
        let progress: super::ProgressSink = Arc::new(move |progress| context.report_progress(progress));
        match self.server.call(&self.remote, args, progress).await {
            Ok(result) => map_result(&tool, result),
            Err(CallError::Unavailable(error)) => {
                Err(ToolError::around(&Reason::ProviderUnavailable { tool, provider, error }))
            }
            Err(CallError::Rejected(detail)) => Err(ToolError::reported(&Reason::ToolReported { tool, detail })),
            Err(CallError::Lost(detail)) => Err(ToolError::around(&Reason::ProviderLost { tool, provider, detail })),
        }
    }
}

/// `result` as the caller's value: `structuredContent` when present, else
/// the text blocks joined (other blocks, such as images, as their JSON);
/// `isError` a `tool_failed` value with the text.
pub(crate) fn map_result(tool: &str, result: CallToolResult) -> Result<ToolOutput, ToolError> {
    if result.is_error == Some(true) {
        let text = content_text(&result.content);
        let detail = if text.is_empty() {
            "an error, with no text".to_owned()
        } else {
            crate::text::head(&text, ERROR_TEXT_BYTES)
        };
        return Err(ToolError::reported(&Reason::ToolReported { tool: tool.to_owned(), detail }));
    }
    if let Some(structured) = result.structured_content {
        return Ok(ToolOutput::new(structured));
    }
    let all_text = result.content.iter().all(|c| c.as_text().is_some());
    let value = match result.content.len() {
        0 => Value::Null,
        _ if all_text => Value::String(content_text(&result.content)),
        _ => Value::Array(result.content.iter().map(|c| serde_json::to_value(c).unwrap_or(Value::Null)).collect()),
    };
    Ok(ToolOutput::new(value))
}

fn content_text(content: &[ContentBlock]) -> String {
    content.iter().filter_map(|c| c.as_text()).map(|t| t.text.as_str()).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(value: Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn structured_content_wins_then_text_then_blocks() {
        let structured =
            result(json!({"content": [{"type": "text", "text": "{\"a\":1}"}], "structuredContent": {"a": 1}}));
        assert_eq!(map_result("t", structured).unwrap().value, json!({"a": 1}));
        let text = result(json!({"content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}));
        assert_eq!(map_result("t", text).unwrap().value, json!("one\ntwo"));
        let mixed = result(
            json!({"content": [{"type": "text", "text": "see"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}]}),
        );
        let value = map_result("t", mixed).unwrap().value;
        assert_eq!(value[1]["mimeType"], "image/png", "{value}");
        assert_eq!(map_result("t", result(json!({"content": []}))).unwrap().value, Value::Null);
    }

    #[test]
    fn is_error_is_a_tool_failed_value_with_the_text() {
        let failed = result(json!({"content": [{"type": "text", "text": "no such file"}], "isError": true}));
        let error = map_result("files_read", failed).unwrap_err();
        assert_eq!(error.code, "tool_failed");
        assert_eq!(error.message, "`files_read` reported a failure: no such file");
    }
}
