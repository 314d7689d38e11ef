//! Step 7: approval. The approver is shown the tool and the exact arguments
//! that will be sent, and the origin; the turn applies the SAME wait limit to
//! a script's call as to the model's.

use super::call::CallOrigin;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

/// What the approver is shown.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// The turn.
    pub turn_id: String,
    /// The call's id (`<parent>/<n>` for a script's call).
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The tool's description.
    pub description: String,
    /// The exact arguments that will be sent if approved.
    pub args: Value,
    /// Who issued the call.
    pub origin: CallOrigin,
    /// Why approval is needed (the policy rule's reason, if any).
    pub reason: Option<String>,
}

/// The approver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalDecision {
    /// Yes or no.
    pub approved: bool,
    /// Who or what decided, for the audit log (e.g. `"terminal"`, a user id).
    pub decided_by: String,
    /// An optional reason, passed on to the caller on denial.
    pub reason: Option<String>,
}

impl ApprovalDecision {
    /// A yes from `decided_by`.
    pub fn approve(decided_by: impl Into<String>) -> Self {
        ApprovalDecision { approved: true, decided_by: decided_by.into(), reason: None }
    }

    /// A no from `decided_by`.
    pub fn deny(decided_by: impl Into<String>, reason: Option<String>) -> Self {
        ApprovalDecision { approved: false, decided_by: decided_by.into(), reason }
    }
}

/// How an approval step ended, as stored in the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApprovalVerdict {
    /// The approver said yes.
    Approved,
    /// The approver said no.
    Denied,
    /// The approver did not answer within the wait limit.
    TimedOut,
    /// The turn ended while the approver was deciding.
    Abandoned,
}

impl ApprovalVerdict {
    /// `"approved"`, `"denied"`, `"timed_out"` or `"abandoned"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalVerdict::Approved => "approved",
            ApprovalVerdict::Denied => "denied",
            ApprovalVerdict::TimedOut => "timed_out",
            ApprovalVerdict::Abandoned => "abandoned",
        }
    }

    /// The verdict named `name` by [`ApprovalVerdict::as_str`], if any.
    pub fn parse(name: &str) -> Option<Self> {
        [ApprovalVerdict::Approved, ApprovalVerdict::Denied, ApprovalVerdict::TimedOut, ApprovalVerdict::Abandoned]
            .into_iter()
            .find(|v| v.as_str() == name)
    }
}

/// The approval step's record: the verdict and who decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRecord {
    /// The verdict.
    pub verdict: ApprovalVerdict,
    /// Who decided (`"timeout"` for a time-out, `"turn"` when the turn ended).
    pub decided_by: String,
}

/// Decides approval-required calls.
///
/// # Cancel safety
/// The turn drops the future when the wait limit passes or the turn ends;
/// an implementation must treat that as "no answer".
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// Decides `request`.
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision;
}

/// A fixed answer of the [`PolicyApprover`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Approve.
    Approve,
    /// Deny.
    Deny,
    /// Never answer: the turn's approval wait limit decides (time-out).
    NeverAnswer,
}

/// A headless approver: fixed answers per tool, a default for the rest, and
/// a record of every request it was shown. `decided_by` is `"policy"`.
#[derive(Debug)]
pub struct PolicyApprover {
    default: Answer,
    per_tool: HashMap<String, Answer>,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl PolicyApprover {
    /// Answers every request with `default`.
    pub fn new(default: Answer) -> Self {
        PolicyApprover { default, per_tool: HashMap::new(), asked: Mutex::new(Vec::new()) }
    }

    /// Approves everything.
    pub fn approve_all() -> Self {
        PolicyApprover::new(Answer::Approve)
    }

    /// Denies everything.
    pub fn deny_all() -> Self {
        PolicyApprover::new(Answer::Deny)
    }

    /// Never answers.
    pub fn never_answer() -> Self {
        PolicyApprover::new(Answer::NeverAnswer)
    }

    /// Answers calls of `tool` with `answer`.
    pub fn with_tool(mut self, tool: impl Into<String>, answer: Answer) -> Self {
        self.per_tool.insert(tool.into(), answer);
        self
    }

    /// Every request shown so far, in order.
    pub fn asked(&self) -> Vec<ApprovalRequest> {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[async_trait::async_trait]
impl Approver for PolicyApprover {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).push(request.clone());
        match self.per_tool.get(&request.tool).copied().unwrap_or(self.default) {
            Answer::Approve => ApprovalDecision::approve("policy"),
            Answer::Deny => ApprovalDecision::deny("policy", Some("denied by the approval policy".into())),
            Answer::NeverAnswer => std::future::pending().await,
        }
    }
}

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

    fn prompt_text(request: &ApprovalRequest) -> String {
        let args = serde_json::to_string_pretty(&request.args).unwrap_or_else(|_| request.args.to_string());
        let from = match &request.origin {
            CallOrigin::Model => "the model".to_owned(),
            CallOrigin::Script { run_id, parent_call_id, .. } => {
                format!("script run `{run_id}` (started by `{parent_call_id}`)")
            }
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
            origin: CallOrigin::Script { run_id: "r1".into(), parent_call_id: "c".into(), index: 1 },
            reason: None,
        }
    }

    #[tokio::test]
    async fn the_policy_approver_answers_per_tool_and_remembers_requests() {
        let approver = PolicyApprover::deny_all().with_tool("send_email", Answer::Approve);
        assert!(approver.decide(&request("send_email")).await.approved);
        let no = approver.decide(&request("delete")).await;
        assert!(!no.approved);
        assert_eq!(no.decided_by, "policy");
        assert_eq!(approver.asked().len(), 2);
        let never = PolicyApprover::never_answer();
        let r = request("x");
        let waited = tokio::time::timeout(std::time::Duration::from_millis(20), never.decide(&r)).await;
        assert!(waited.is_err(), "never answers");
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
