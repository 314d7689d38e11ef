//! MCP over stdio, with bad input answered: one JSON-RPC message a line on
//! stdin, answers on stdout. rmcp's own stdio transport ignores a line that
//! is not JSON and drops one over its size limit without a word; here each
//! bad line gets a JSON-RPC error and the session goes on:
//!
//! | line | error |
//! |---|---|
//! | not JSON | `-32700` parse error, id `null` |
//! | over the request size limit | `-32600` invalid request naming the limit, id `null` (the line is not read) |
//! | JSON, not a JSON-RPC 2.0 message (a batch, no `jsonrpc`) | `-32600`, with its id if it has one |
//! | a known method whose params do not fit | `-32602` invalid params, with its id |
//!
//! An unknown method reaches rmcp, which answers `-32601` method not found.
//! One task reads stdin and hands rmcp whole messages through a channel, so
//! rmcp's `receive` is cancel-safe; stdout is written under one lock, whole
//! lines at a time, by rmcp's answers and these errors alike. When stdin
//! ends (the client went away), the reader cancels the server's disconnect
//! token: the session's calls end at once.

use rmcp::model::{ClientJsonRpcMessage, ErrorCode, RequestId, ServerJsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::Value;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

/// The writer every answer goes through, whole lines under one lock.
type Out = Arc<Mutex<Box<dyn AsyncWrite + Send + Unpin>>>;

/// rmcp's transport over a reader and writer (stdin and stdout), with bad
/// lines answered by the reader task (see the module docs).
pub(crate) struct GuardedStdio {
    incoming: mpsc::Receiver<ClientJsonRpcMessage>,
    out: Out,
    reader: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for GuardedStdio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedStdio").finish_non_exhaustive()
    }
}

impl GuardedStdio {
    /// Reads messages from `input` (lines over `max_bytes` are refused) and
    /// writes to `output`; cancels `disconnect` when `input` ends.
    pub(crate) fn new(
        input: impl AsyncRead + Send + Unpin + 'static,
        output: impl AsyncWrite + Send + Unpin + 'static,
        max_bytes: usize,
        disconnect: CancellationToken,
    ) -> GuardedStdio {
        let out: Out = Arc::new(Mutex::new(Box::new(output)));
        let (sender, incoming) = mpsc::channel(16);
        let reader = tokio::spawn(read_loop(BufReader::new(input), out.clone(), sender, max_bytes, disconnect));
        GuardedStdio { incoming, out, reader }
    }
}

impl Drop for GuardedStdio {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Transport<RoleServer> for GuardedStdio {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let out = self.out.clone();
        async move { write_message(&out, &item).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.incoming.close();
        self.out.lock().await.flush().await
    }
}

/// Writes `message` as one line.
async fn write_message(out: &Out, message: &ServerJsonRpcMessage) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut out = out.lock().await;
    out.write_all(&line).await?;
    out.flush().await
}

/// What one line read gave.
enum Line {
    /// A whole line (without its newline) is in the buffer.
    Whole,
    /// The line was longer than the limit: this many bytes, skipped.
    TooLong(usize),
    /// The input ended.
    End,
}

/// Reads lines until the input ends or rmcp stops listening, handing good
/// messages on and answering bad ones.
async fn read_loop(
    mut input: BufReader<impl AsyncRead + Unpin>,
    out: Out,
    sender: mpsc::Sender<ClientJsonRpcMessage>,
    max_bytes: usize,
    disconnect: CancellationToken,
) {
    let mut buffer = Vec::new();
    loop {
        let line = match read_line(&mut input, &mut buffer, max_bytes).await {
            Ok(line) => line,
            Err(error) => {
                tracing::warn!(%error, "cannot read the client's input");
                break;
            }
        };
        let refused = match line {
            Line::End => break,
            Line::TooLong(bytes) => Some(ServerJsonRpcMessage::error(
                McpError::invalid_request(
                    format!(
                        "request too large: {bytes} bytes or more, over the limit of {max_bytes} (--max-request-bytes)"
                    ),
                    None,
                ),
                None,
            )),
            Line::Whole => match classify(&buffer) {
                Ok(None) => None,
                Ok(Some(message)) => {
                    if sender.send(message).await.is_err() {
                        break;
                    }
                    None
                }
                Err(refused) => Some(*refused),
            },
        };
        if let Some(refused) = refused
            && let Err(error) = write_message(&out, &refused).await
        {
            tracing::warn!(%error, "cannot answer the client");
            break;
        }
    }
    disconnect.cancel();
}

/// Reads one line into `buffer` (cleared first, newline and `\r` taken
/// off), never holding more than `max_bytes` of it.
async fn read_line(
    input: &mut BufReader<impl AsyncRead + Unpin>,
    buffer: &mut Vec<u8>,
    max_bytes: usize,
) -> std::io::Result<Line> {
    buffer.clear();
    let mut skipped = 0usize;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            // A last line without a newline is no whole message either.
            return Ok(if skipped > 0 { Line::TooLong(skipped) } else { Line::End });
        }
        let (take, ends) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        if skipped > 0 || buffer.len() + take > max_bytes.saturating_add(1) {
            skipped += buffer.len() + take;
            buffer.clear();
        } else {
            buffer.extend_from_slice(&available[..take]);
        }
        input.consume(take);
        if ends {
            if skipped > 0 {
                return Ok(Line::TooLong(skipped));
            }
            buffer.pop();
            if buffer.last() == Some(&b'\r') {
                buffer.pop();
            }
            return Ok(Line::Whole);
        }
    }
}

/// A message for rmcp, nothing (an empty line, a notification rmcp would
/// ignore), or the error answering a bad line.
fn classify(line: &[u8]) -> Result<Option<ClientJsonRpcMessage>, Box<ServerJsonRpcMessage>> {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value: Value = serde_json::from_slice(line).map_err(|error| {
        Box::new(ServerJsonRpcMessage::error(
            McpError::parse_error(format!("parse error: not JSON ({error})"), None),
            None,
        ))
    })?;
    let id = value.get("id").and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok());
    let refuse = |code: ErrorCode, message: String| {
        Box::new(ServerJsonRpcMessage::error(McpError::new(code, message, None), id.clone()))
    };
    let Some(object) = value.as_object() else {
        let what = if value.is_array() { "a batch (MCP takes one message at a time)" } else { "not an object" };
        return Err(refuse(ErrorCode::INVALID_REQUEST, format!("invalid request: {what}")));
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(refuse(ErrorCode::INVALID_REQUEST, "invalid request: `jsonrpc` must be \"2.0\"".to_owned()));
    }
    match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
        Ok(message) => Ok(Some(message)),
        Err(error) => match (object.get("method").and_then(Value::as_str), &id) {
            // A notification gets no answer, whatever is wrong with it.
            (Some(method), None) => {
                tracing::debug!(%method, %error, "ignoring a notification that does not parse");
                Ok(None)
            }
            (Some(method), Some(_)) => {
                Err(refuse(ErrorCode::INVALID_PARAMS, format!("invalid params for `{method}`: {error}")))
            }
            (None, _) => Err(refuse(ErrorCode::INVALID_REQUEST, format!("invalid request: {error}"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(line: &str) -> Option<i32> {
        match classify(line.as_bytes()) {
            Ok(_) => None,
            Err(refused) => Some(serde_json::to_value(&refused).unwrap()["error"]["code"].as_i64().unwrap() as i32),
        }
    }

    #[test]
    fn each_kind_of_bad_line_gets_its_json_rpc_error() {
        assert_eq!(code("{not json"), Some(-32700));
        assert_eq!(code("[1, 2]"), Some(-32600));
        assert_eq!(code(r#"{"id": 1, "method": "ping"}"#), Some(-32600), "no jsonrpc");
        assert_eq!(code(r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": 5}"#), Some(-32602));
        assert_eq!(code(r#"{"jsonrpc": "2.0", "id": 1, "method": "ping"}"#), None);
        assert_eq!(code(r#"{"jsonrpc": "2.0", "id": 2, "method": "no/such/method"}"#), None, "rmcp answers it");
        assert_eq!(code(""), None);
    }

    #[tokio::test]
    async fn a_line_over_the_limit_is_skipped_whole_and_the_next_one_is_read() {
        let text = format!("{}\nshort\n{}", "x".repeat(100), "y".repeat(5));
        let mut input = BufReader::with_capacity(8, text.as_bytes());
        let mut buffer = Vec::new();
        assert!(matches!(read_line(&mut input, &mut buffer, 10).await.unwrap(), Line::TooLong(101)));
        assert!(matches!(read_line(&mut input, &mut buffer, 10).await.unwrap(), Line::Whole));
        assert_eq!(buffer, b"short");
        assert!(matches!(read_line(&mut input, &mut buffer, 10).await.unwrap(), Line::End), "no newline: no message");
    }
}
