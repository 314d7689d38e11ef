//! The terminal approver: the CLI's way to ask a person about each
//! approval-required call, showing the exact arguments. It lives here, at the
//! edge, so the turn library has no terminal in it.
//!
//! One reader owns the terminal: a thread reads its lines into a channel,
//! and both the chat's `you>` prompt and the approval prompts take lines
//! from there. Taking a line is cancellable — a prompt that times out or is
//! cancelled (Ctrl-C) takes none and says so in one line — so no typed line
//! is lost and none answers a prompt that is gone. On a terminal, a line
//! typed before an approval prompt was shown is not its answer: it is kept
//! for the chat (piped input answers in order, as a script of answers).
//! There the chat's own line is edited, with history
//! (`line_editor`).

use crate::line_editor::{self, Asked, Desk, Typed};
use crate::paint::{Tone, paint};
use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tether_backend::turn::{ApprovalDecision, ApprovalRequest, Approver, CallOrigin};
use tokio::sync::mpsc;

type Input = Box<dyn BufRead + Send>;
type Output = Box<dyn Write + Send>;

/// A terminal prompt for a CLI: prints the tool, the origin and the exact
/// arguments, and reads `y`/`yes` (approve), `a`/`always` (approve this and
/// every later call of the same tool in this process), anything else is no,
/// from a line of input. Default input and output: stdin and stderr.
/// `decided_by` is the label given (e.g. `"terminal"`). Prompts are asked one
/// at a time, in the order the calls asked.
pub struct TerminalApprover {
    label: String,
    /// The input, until the reader thread takes it at the first read.
    input: Mutex<Option<Source>>,
    lines: tokio::sync::Mutex<Lines>,
    output: Arc<Mutex<Output>>,
    /// A person types the input (a terminal), so only a line typed after a
    /// prompt was shown answers it.
    interactive: bool,
    /// Tools answered "always" in this session.
    always: Mutex<HashSet<String>>,
}

/// Where lines come from.
enum Source {
    /// Any line input, read plainly.
    Plain(Input),
    /// The terminal on stdin, the chat's lines edited, with this history file.
    Edited(Option<std::path::PathBuf>),
}

/// The lines the reader thread read, with when each was typed.
struct Lines {
    incoming: Option<mpsc::UnboundedReceiver<Typed>>,
    /// Where the chat asks for an edited line ([`Source::Edited`]).
    desk: Option<Arc<Desk>>,
    /// Lines typed before the approval prompt that read them was shown:
    /// the chat's, taken first by [`TerminalApprover::read_line`].
    held: VecDeque<String>,
}

impl fmt::Debug for TerminalApprover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TerminalApprover").field("label", &self.label).finish_non_exhaustive()
    }
}

impl TerminalApprover {
    /// A prompt on stdin / stderr. On a terminal the chat's lines are
    /// edited, with the history in `line_editor::history_file`.
    pub fn new(label: impl Into<String>) -> Self {
        use std::io::IsTerminal as _;
        let interactive = std::io::stdin().is_terminal();
        let input = Box::new(std::io::BufReader::new(std::io::stdin()));
        let approver = TerminalApprover::with_io(label, input, Box::new(std::io::stderr()));
        if line_editor::editable() {
            *approver.input.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(Source::Edited(line_editor::history_file()));
        }
        TerminalApprover { interactive, ..approver }
    }

    /// A prompt over any line input and output, read in order (a script of
    /// answers: each line answers the next prompt, whenever it came).
    pub fn with_io(label: impl Into<String>, input: Input, output: Output) -> Self {
        TerminalApprover {
            label: label.into(),
            input: Mutex::new(Some(Source::Plain(input))),
            lines: tokio::sync::Mutex::new(Lines { incoming: None, desk: None, held: VecDeque::new() }),
            output: Arc::new(Mutex::new(output)),
            interactive: false,
            always: Mutex::default(),
        }
    }

    /// The lines, the reader thread started at the first use (so a command
    /// that never asks never reads its stdin). Waits for the prompt before.
    async fn lines(&self) -> tokio::sync::MutexGuard<'_, Lines> {
        let mut lines = self.lines.lock().await;
        match self.input.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(Source::Plain(input)) => lines.incoming = Some(read_lines(input)),
            Some(Source::Edited(history)) => {
                let (incoming, desk) = line_editor::spawn(history);
                (lines.incoming, lines.desk) = (Some(incoming), Some(desk));
            }
            None => {}
        }
        lines
    }

    fn say(&self, text: &str) {
        let mut output = self.output.lock().unwrap_or_else(|p| p.into_inner());
        // A terminal that cannot be written to has no one to tell.
        let _ = output.write_all(text.as_bytes()).and_then(|()| output.flush());
    }

    /// Prints `prompt` and takes the next line of the input approvals are
    /// read from (so a typed answer is never taken as a message, nor a
    /// message as an answer); on a terminal, a line not typed yet is edited
    /// at the prompt's last line. `None` at the end of input (or Ctrl-C or
    /// Ctrl-D in the editor). Cancel safe: dropped, it takes no line (an
    /// editor already started still sends its line, to the next read).
    ///
    /// # Errors
    /// Never today (kept for inputs that can fail).
    pub async fn read_line(&self, prompt: &str) -> std::io::Result<Option<String>> {
        let mut lines = self.lines().await;
        let Lines { incoming, desk, held } = &mut *lines;
        if let Some(line) = held.pop_front() {
            self.say(prompt);
            self.say(&line);
            if let Some(desk) = desk {
                desk.taken(line.clone());
            }
            return Ok(Some(line));
        }
        let Some(incoming) = incoming.as_mut() else { return Ok(None) };
        let Some(desk) = desk.clone() else {
            self.say(prompt);
            return Ok(incoming.recv().await.map(|(_, line)| line));
        };
        let (lead, last) = match prompt.rfind('\n') {
            Some(end) => prompt.split_at(end + 1),
            None => ("", prompt),
        };
        match desk.ask(incoming, last) {
            Err(()) => Ok(None),
            Ok(Asked::Ready(line)) => {
                self.say(prompt);
                self.say(&line);
                Ok(Some(line))
            }
            Ok(Asked::Waiting(_withdrawn_if_dropped)) => {
                self.say(lead);
                Ok(incoming.recv().await.map(|(_, line)| line))
            }
        }
    }

    /// Waits briefly until every line the chat read is in the history file
    /// (call it when the chat ends; nothing to wait for without an editor).
    pub async fn settle(&self) {
        let desk = self.lines.lock().await.desk.clone();
        if let Some(desk) = desk {
            desk.settled().await;
        }
    }

    fn always_approved(&self, tool: &str) -> ApprovalDecision {
        let reason = Some(format!("always approve `{tool}` in this session"));
        ApprovalDecision { approved: true, decided_by: self.label.clone(), reason }
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
            "\n{}: `{}` from {from}, call `{}`{reason}\n  arguments that will be sent:\n{}\n{} \
             (a: yes, and every `{}` call after it in this session) ",
            paint(Tone::Ask, "approval needed"),
            request.tool,
            request.call_id,
            indent(&args, "    "),
            paint(Tone::Ask, "approve? [y/N]"),
            request.tool
        )
    }
}

/// Reads `input` line by line on a thread of its own (a blocking read cannot
/// be cancelled, so no prompt waits in one), each line stamped with when it
/// came; the channel closes at the end of input.
fn read_lines(mut input: Input) -> mpsc::UnboundedReceiver<Typed> {
    let (sender, receiver) = mpsc::unbounded_channel();
    let reader = std::thread::Builder::new().name("tether-terminal".into()).spawn(move || {
        loop {
            let mut line = String::new();
            match input.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) if sender.send((Instant::now(), line)).is_ok() => {}
                Ok(_) => break,
                Err(error) => {
                    tracing::warn!(%error, "cannot read the terminal; it is taken as ended");
                    break;
                }
            }
        }
    });
    if let Err(error) = reader {
        // The sender is gone with the closure: reads see the end of input, and approvals deny.
        tracing::error!(%error, "cannot start the terminal's reader; approvals are denied");
    }
    receiver
}

fn indent(text: &str, by: &str) -> String {
    text.lines().map(|l| format!("{by}{l}")).collect::<Vec<_>>().join("\n")
}

/// Says, when dropped unanswered, that a shown prompt no longer waits.
struct Shown<'a> {
    approver: &'a TerminalApprover,
    request: &'a ApprovalRequest,
    answered: bool,
}

impl Drop for Shown<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.approver.say(&format!(
                "\n(no longer asking: the wait for `{}` (call `{}`) ended — timed out or cancelled; it was not \
                 approved, and no line typed is taken as its answer)\n",
                self.request.tool, self.request.call_id
            ));
        }
    }
}

#[async_trait::async_trait]
impl Approver for TerminalApprover {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision {
        // No spinner writes over what is said or asked here.
        let _quiet = crate::paint::spinner().hold();
        if self.always.lock().unwrap_or_else(|p| p.into_inner()).contains(&request.tool) {
            self.say(&format!(
                "\napproved `{}` (call `{}`): you answered always for it in this session\n",
                request.tool, request.call_id
            ));
            return self.always_approved(&request.tool);
        }
        // Waiting here for an earlier prompt shows nothing: a call that
        // settles meanwhile (its wait timed out) is never asked about.
        let mut lines = self.lines().await;
        self.say(&TerminalApprover::prompt_text(request));
        let shown_at = Instant::now();
        let mut shown = Shown { approver: self, request, answered: false };
        let answer = loop {
            let Some(incoming) = lines.incoming.as_mut() else { break None };
            match incoming.recv().await {
                None => break None,
                Some((typed_at, line)) if self.interactive && typed_at < shown_at => lines.held.push_back(line),
                Some((_, line)) => break Some(line),
            }
        };
        shown.answered = true;
        match answer.as_deref().map(|line| line.trim().to_ascii_lowercase()) {
            Some(yes) if yes == "y" || yes == "yes" => ApprovalDecision::approve(self.label.clone()),
            Some(always) if always == "a" || always == "always" => {
                self.always.lock().unwrap_or_else(|p| p.into_inner()).insert(request.tool.clone());
                self.always_approved(&request.tool)
            }
            Some(_) => ApprovalDecision::deny(self.label.clone(), Some("the user said no".into())),
            None => ApprovalDecision::deny(self.label.clone(), Some("the terminal's input ended".into())),
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

    /// Waits until `out` shows `text` `times` times.
    async fn shown(out: &Shared, text: &str, times: usize) {
        while String::from_utf8_lossy(&out.0.lock().unwrap()).matches(text).count() < times {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_prompt_that_stops_waiting_says_so_takes_no_line_and_always_is_remembered() {
        let out = Shared::default();
        let (reader, mut writer) = std::io::pipe().unwrap();
        let approver =
            TerminalApprover::with_io("terminal", Box::new(std::io::BufReader::new(reader)), Box::new(out.clone()));
        {
            // The prompt is shown, then its wait ends (a time-out, a Ctrl-C).
            let asked = request("send_email");
            let asking = approver.decide(&asked);
            tokio::select! {
                _ = asking => panic!("nothing was typed"),
                () = shown(&out, "approve? [y/N]", 1) => {}
            }
        }
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("(no longer asking: the wait for `send_email` (call `c/1`) ended"), "{text}");

        // The line typed next answers the next prompt, not the one that went.
        writeln!(writer, "y").unwrap();
        assert_eq!(approver.decide(&request("send_email")).await, ApprovalDecision::approve("terminal"));

        // `a` approves this call and every later one of the same tool, unasked.
        writeln!(writer, "a").unwrap();
        let always = approver.decide(&request("wire")).await;
        assert!(always.approved && always.reason.as_deref() == Some("always approve `wire` in this session"));
        let again = approver.decide(&request("wire")).await;
        assert!(again.approved, "not asked again");
        writeln!(writer, "n").unwrap();
        assert!(!approver.decide(&request("send_email")).await.approved, "another tool is still asked");
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.matches("approve? [y/N]").count(), 4, "{text}");
        assert!(text.contains("you answered always for it in this session"), "{text}");

        // A chat line read after the prompts is the next line typed.
        writeln!(writer, "hello").unwrap();
        assert_eq!(approver.read_line("you> ").await.unwrap().as_deref(), Some("hello\n"));
        drop(writer);
        assert_eq!(approver.read_line("you> ").await.unwrap(), None, "the end of input");
    }
}
