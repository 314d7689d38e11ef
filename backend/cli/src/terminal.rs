//! The terminal approver: the CLI's way to ask a person about each
//! approval-required call, showing the exact arguments. It lives here, at the
//! edge, so the turn library has no terminal in it.

use std::fmt;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use tether_backend::turn::{ApprovalDecision, ApprovalRequest, Approver, CallOrigin};

type Io = (Box<dyn BufRead + Send>, Box<dyn Write + Send>);

/// A terminal prompt for a CLI: prints the tool, the origin and the exact
/// arguments, and reads `y`/`yes` (anything else is no) from a line of input.
/// Default input and output: stdin and stderr. `decided_by` is the label
/// given (e.g. `"terminal"`).
///
/// Prompts are asked one at a time. Reading blocks, so it runs on the blocking
/// pool; a blocking read cannot be interrupted, so after a time-out the next
/// line typed answers the stale prompt and is discarded (a fresh prompt
/// follows).
pub struct TerminalApprover {
    label: String,
    io: Arc<Mutex<Io>>,
}

impl fmt::Debug for TerminalApprover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TerminalApprover").field("label", &self.label).finish_non_exhaustive()
    }
}

impl TerminalApprover {
    /// A prompt on stdin / stderr.
    pub fn new(label: impl Into<String>) -> Self {
        let input = Box::new(std::io::BufReader::new(std::io::stdin()));
        TerminalApprover::with_io(label, input, Box::new(std::io::stderr()))
    }

    /// A prompt over any line input and output (for tests, or a pty).
    pub fn with_io(label: impl Into<String>, input: Box<dyn BufRead + Send>, output: Box<dyn Write + Send>) -> Self {
        TerminalApprover { label: label.into(), io: Arc::new(Mutex::new((input, output))) }
    }

    /// Prints `prompt` and reads one line from the same input approvals are
    /// read from (so piped input is never split between two readers).
    /// `None` at the end of input.
    ///
    /// # Errors
    /// If the input or output fails.
    pub async fn read_line(&self, prompt: &str) -> std::io::Result<Option<String>> {
        let io = self.io.clone();
        let prompt = prompt.to_owned();
        tokio::task::spawn_blocking(move || {
            let mut io = io.lock().unwrap_or_else(|p| p.into_inner());
            let (input, output) = &mut *io;
            output.write_all(prompt.as_bytes())?;
            output.flush()?;
            let mut line = String::new();
            Ok((input.read_line(&mut line)? > 0).then_some(line))
        })
        .await
        .map_err(std::io::Error::other)?
    }

    fn prompt_text(request: &ApprovalRequest) -> String {
        let args = serde_json::to_string_pretty(&request.args).unwrap_or_else(|_| request.args.to_string());
        let from = match &request.origin {
            CallOrigin::Model => "the model".to_owned(),
            CallOrigin::Script { run_id, parent_call_id, .. } => {
                format!("script run `{run_id}` (started by `{parent_call_id}`)")
            }
            CallOrigin::Tool { parent_call_id, .. } => format!("the tool call `{parent_call_id}`"),
        };
        let reason = request.reason.as_deref().map(|r| format!("\n  why approval: {r}")).unwrap_or_default();
        format!(
            "\napproval needed: `{}` from {from}, call `{}`{reason}\n  arguments that will be sent:\n{}\napprove? [y/N] ",
            request.tool,
            request.call_id,
            indent(&args, "    ")
        )
    }
}

fn indent(text: &str, by: &str) -> String {
    text.lines().map(|l| format!("{by}{l}")).collect::<Vec<_>>().join("\n")
}

#[async_trait::async_trait]
impl Approver for TerminalApprover {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision {
        let text = TerminalApprover::prompt_text(request);
        let io = self.io.clone();
        let answer = tokio::task::spawn_blocking(move || {
            let mut io = io.lock().unwrap_or_else(|p| p.into_inner());
            let (input, output) = &mut *io;
            output.write_all(text.as_bytes())?;
            output.flush()?;
            let mut line = String::new();
            input.read_line(&mut line)?;
            Ok::<_, std::io::Error>(line)
        })
        .await;
        match answer {
            Ok(Ok(line)) if matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes") => {
                ApprovalDecision::approve(self.label.clone())
            }
            Ok(Ok(_)) => ApprovalDecision::deny(self.label.clone(), Some("the user said no".into())),
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot read the approval answer; denying");
                ApprovalDecision::deny(self.label.clone(), Some("the approval prompt could not be read".into()))
            }
            Err(error) => {
                tracing::error!(%error, "the approval prompt task failed; denying");
                ApprovalDecision::deny(self.label.clone(), Some("the approval prompt failed".into()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Cursor;

    fn request(tool: &str) -> ApprovalRequest {
        ApprovalRequest {
            turn_id: "t".into(),
            call_id: "c/1".into(),
            tool: tool.into(),
            description: String::new(),
            args: json!({"to": "dana@example.com"}),
            origin: CallOrigin::Script { run_id: "r1".into(), parent_call_id: "c".into(), depth: 1 },
            reason: None,
        }
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_terminal_approver_shows_the_exact_arguments_and_reads_yes_or_no() {
        let out = Shared::default();
        let approver =
            TerminalApprover::with_io("terminal", Box::new(Cursor::new(b"y\nnope\n".to_vec())), Box::new(out.clone()));
        let yes = approver.decide(&request("send_email")).await;
        assert_eq!(yes, ApprovalDecision::approve("terminal"));
        let no = approver.decide(&request("send_email")).await;
        assert!(!no.approved);
        let eof = approver.decide(&request("send_email")).await;
        assert!(!eof.approved, "end of input is a no");
        let shown = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert!(shown.contains("\"to\": \"dana@example.com\""), "{shown}");
        assert!(shown.contains("script run `r1`"), "{shown}");
        assert!(shown.contains("`c/1`"), "{shown}");
    }
}
