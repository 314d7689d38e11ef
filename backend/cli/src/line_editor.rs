//! The terminal's reader when a person types at it: every line typed goes
//! into the one channel [`crate::terminal`] takes lines from, and the chat's
//! `you>` line is read with a line editor (cursor keys, Ctrl-A/E/W/U, and
//! the history of earlier messages on ↑/↓, kept in a file across sessions).
//!
//! The editor holds the terminal in raw mode and its read cannot be
//! cancelled, so it runs only when the chat asks for a line and nothing else
//! prints (between turns). Lines typed during a turn — answers to approval
//! prompts, a message typed ahead — are read plainly (the terminal's own
//! line mode), never by a read that outlives its prompt. One lock orders the
//! two: a line typed before the chat asked answers the chat, and the editor
//! never starts once a line has answered it. Every line the chat takes is
//! kept in the history, edited or typed ahead.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::mpsc;

/// How often the reader looks whether the chat asked for an edited line
/// while it waits for input.
const ASK_POLL_MS: u16 = 50;

/// How long a chat that ends waits for its last lines to reach the history
/// file (the reader keeps them within [`ASK_POLL_MS`]).
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// At most this many lines are kept in the history file.
const HISTORY_LINES: usize = 1000;

/// A line the reader read, stamped with when it was typed.
pub(crate) type Typed = (Instant, String);

/// The chat's request for an edited line, shared between the chat and the
/// reader thread.
#[derive(Debug, Default)]
pub(crate) struct Desk {
    /// The prompt of the line the chat waits for, until the editor takes it
    /// or a plain line answers it.
    wanted: Mutex<Option<String>>,
    /// Lines the chat took that the editor did not read (typed ahead),
    /// for the history.
    taken: Mutex<Vec<String>>,
}

impl Desk {
    fn wanted(&self) -> MutexGuard<'_, Option<String>> {
        self.wanted.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `line`, which the chat took without the editor, for the history.
    pub(crate) fn taken(&self, line: String) {
        self.taken.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }

    /// Waits (at most [`SETTLE_WAIT`]) until the reader has kept the lines
    /// the chat took in the history file, so the last one before the chat
    /// ends is not lost.
    pub(crate) async fn settled(&self) {
        let start = Instant::now();
        while !self.taken.lock().unwrap_or_else(|p| p.into_inner()).is_empty() && start.elapsed() < SETTLE_WAIT {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// The next line for the chat: one already read, else the editor is asked
    /// for one with `prompt` (the reader starts it within [`ASK_POLL_MS`]).
    /// `Err(())`: the input ended. The request is withdrawn when the returned
    /// guard drops unanswered, so a cancelled wait starts no editor.
    pub(crate) fn ask<'a>(
        &'a self,
        incoming: &mut mpsc::UnboundedReceiver<Typed>,
        prompt: &str,
    ) -> Result<Asked<'a>, ()> {
        let mut wanted = self.wanted();
        match incoming.try_recv() {
            Ok((_, line)) => {
                self.taken(line.clone());
                Ok(Asked::Ready(line))
            }
            Err(mpsc::error::TryRecvError::Empty) => {
                *wanted = Some(prompt.to_owned());
                Ok(Asked::Waiting(Withdraw(self)))
            }
            Err(mpsc::error::TryRecvError::Disconnected) => Err(()),
        }
    }
}

/// What [`Desk::ask`] found.
pub(crate) enum Asked<'a> {
    /// A line typed before the chat asked.
    Ready(String),
    /// The editor was asked; the line comes on the channel.
    Waiting(Withdraw<'a>),
}

/// Withdraws a chat's request the editor has not taken yet, on drop.
pub(crate) struct Withdraw<'a>(&'a Desk);

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.0.wanted().take();
    }
}

/// The history file: `TETHER_HISTORY` (empty: none), else
/// `$XDG_STATE_HOME/tether/history`, else `~/.local/state/tether/history`.
pub(crate) fn history_file() -> Option<PathBuf> {
    history_file_in(|name| std::env::var_os(name))
}

fn history_file_in(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    if let Some(path) = var("TETHER_HISTORY") {
        return (!path.is_empty()).then(|| PathBuf::from(path));
    }
    let state = match var("XDG_STATE_HOME").filter(|dir| !dir.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(var("HOME")?).join(".local/state"),
    };
    Some(state.join("tether/history"))
}

/// Whether the terminal on stdin can be edited on (a terminal rustyline
/// supports, not `TERM=dumb`).
pub(crate) fn editable() -> bool {
    use std::io::IsTerminal as _;
    let term = std::env::var("TERM").unwrap_or_default();
    std::io::stdin().is_terminal() && !matches!(term.as_str(), "" | "dumb" | "cons25" | "emacs")
}

/// Starts the reader of the terminal on stdin: plain lines while no one
/// asks, the editor when the chat asks through the returned [`Desk`]. The
/// channel closes at the end of input, and at Ctrl-C or Ctrl-D in the
/// editor (both end the chat there).
pub(crate) fn spawn(history: Option<PathBuf>) -> (mpsc::UnboundedReceiver<Typed>, Arc<Desk>) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let desk = Arc::new(Desk::default());
    let reader = Reader { sender, desk: desk.clone(), history, pending: Vec::new() };
    if let Err(error) = std::thread::Builder::new().name("tether-terminal".into()).spawn(move || reader.run()) {
        // The sender is gone with the closure: reads see the end of input, and approvals deny.
        tracing::error!(%error, "cannot start the terminal's reader; approvals are denied");
    }
    (receiver, desk)
}

struct Reader {
    sender: mpsc::UnboundedSender<Typed>,
    desk: Arc<Desk>,
    history: Option<PathBuf>,
    /// Bytes read and not yet a whole line.
    pending: Vec<u8>,
}

type Editor = rustyline::Editor<(), rustyline::history::FileHistory>;

impl Reader {
    fn run(mut self) {
        let mut editor = self.editor();
        loop {
            if let Some(editor) = editor.as_mut() {
                self.remember_taken(editor);
            }
            if let Some(end) = self.pending.iter().position(|&byte| byte == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                if !self.deliver(String::from_utf8_lossy(&line).into_owned()) {
                    return;
                }
                continue;
            }
            let wanted = self.desk.wanted().take();
            if let (Some(prompt), Some(editor)) = (wanted, editor.as_mut()) {
                if !self.edit(editor, &prompt) {
                    return;
                }
                continue;
            }
            match self.read_some() {
                Ok(true) => {}
                Ok(false) => {
                    // The end of input; a last line without its newline still counts.
                    if !self.pending.is_empty() {
                        let last = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
                        self.deliver(last);
                    }
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot read the terminal; it is taken as ended");
                    return;
                }
            }
        }
    }

    /// The editor with the history loaded; `None` (plain lines only) if the
    /// terminal cannot be edited on.
    fn editor(&self) -> Option<Editor> {
        let config = rustyline::Config::builder()
            .behavior(rustyline::Behavior::PreferTerm)
            .auto_add_history(false)
            .history_ignore_space(true)
            .max_history_size(HISTORY_LINES)
            .ok()?
            .build();
        let mut editor = match Editor::with_config(config) {
            Ok(editor) => editor,
            Err(error) => {
                tracing::warn!(%error, "no line editing on this terminal; lines are read plainly");
                return None;
            }
        };
        if let Some(path) = self.history.as_deref().filter(|path| path.exists())
            && let Err(error) = editor.load_history(path)
        {
            tracing::warn!(%error, path = %path.display(), "the chat history file does not read; starting without it");
        }
        Some(editor)
    }

    /// Sends `line`, answering the chat's request if one is open (so the
    /// editor does not start for it). `false`: no one reads any more.
    fn deliver(&self, line: String) -> bool {
        let mut wanted = self.desk.wanted();
        if wanted.take().is_some() {
            // A line read plainly that answers the chat is the chat's too.
            self.desk.taken(line.clone());
        }
        self.sender.send((Instant::now(), line)).is_ok()
    }

    /// One line edited at `prompt`, sent and kept in the history. `false`:
    /// the chat is over (Ctrl-C, Ctrl-D, or the terminal failed).
    /// Keeps the lines the chat took without the editor in the history.
    fn remember_taken(&self, editor: &mut Editor) {
        let mut taken = self.desk.taken.lock().unwrap_or_else(|p| p.into_inner());
        for line in taken.drain(..) {
            self.remember(editor, line.trim_end_matches(['\n', '\r']));
        }
    }

    fn edit(&mut self, editor: &mut Editor, prompt: &str) -> bool {
        // Bytes of a line begun before the editor started are its start.
        let begun = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
        let edited =
            if begun.is_empty() { editor.readline(prompt) } else { editor.readline_with_initial(prompt, (&begun, "")) };
        match edited {
            Ok(line) => {
                self.remember(editor, &line);
                self.deliver(line + "\n")
            }
            Err(rustyline::error::ReadlineError::Interrupted | rustyline::error::ReadlineError::Eof) => false,
            Err(error) => {
                tracing::warn!(%error, "the line editor failed; the terminal is taken as ended");
                false
            }
        }
    }

    fn remember(&self, editor: &mut Editor, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        if let Err(error) = editor.add_history_entry(line) {
            tracing::debug!(%error, "line not added to the history");
        }
        let Some(path) = self.history.as_deref() else { return };
        if let Err(error) = append_history(editor, path) {
            tracing::warn!(%error, path = %path.display(), "cannot save the chat history");
        }
    }

    /// Waits up to [`ASK_POLL_MS`] for input and reads what came. `Ok(false)`:
    /// the end of input.
    fn read_some(&mut self) -> std::io::Result<bool> {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let stdin = std::io::stdin();
        let fd = stdin.as_fd();
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ASK_POLL_MS)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => return Ok(true),
            Ok(_) => {}
            Err(errno) => return Err(errno.into()),
        }
        let mut buffer = [0u8; 4096];
        match nix::unistd::read(fd, &mut buffer) {
            Ok(0) => Ok(false),
            Ok(read) => {
                self.pending.extend_from_slice(&buffer[..read]);
                Ok(true)
            }
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => Ok(true),
            Err(errno) => Err(errno.into()),
        }
    }
}

fn append_history(editor: &mut Editor, path: &Path) -> Result<(), rustyline::error::ReadlineError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    editor.append_history(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_file_follows_tether_history_then_the_xdg_state_dir_then_home() {
        fn env<'a>(vars: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<std::ffi::OsString> + 'a {
            move |name| vars.iter().find(|(key, _)| *key == name).map(|(_, value)| value.into())
        }
        let both = [("TETHER_HISTORY", "/tmp/h"), ("XDG_STATE_HOME", "/tmp/state"), ("HOME", "/home/ana")];
        assert_eq!(history_file_in(env(&both)), Some(PathBuf::from("/tmp/h")));
        assert_eq!(history_file_in(env(&[("TETHER_HISTORY", ""), ("HOME", "/home/ana")])), None, "empty: none");
        let xdg = [("XDG_STATE_HOME", "/tmp/state"), ("HOME", "/home/ana")];
        assert_eq!(history_file_in(env(&xdg)), Some(PathBuf::from("/tmp/state/tether/history")));
        let home = [("XDG_STATE_HOME", ""), ("HOME", "/home/ana")];
        assert_eq!(history_file_in(env(&home)), Some(PathBuf::from("/home/ana/.local/state/tether/history")));
        assert_eq!(history_file_in(env(&[])), None, "no home: no history");
    }

    #[tokio::test]
    async fn a_line_read_before_the_chat_asks_answers_it_and_a_withdrawn_ask_leaves_no_request() {
        let desk = Desk::default();
        let (sender, mut incoming) = mpsc::unbounded_channel();
        sender.send((Instant::now(), "typed ahead\n".to_owned())).unwrap();
        assert!(matches!(desk.ask(&mut incoming, "you> "), Ok(Asked::Ready(line)) if line == "typed ahead\n"));
        assert!(desk.wanted().is_none(), "a line was ready: the editor is not asked");
        match desk.ask(&mut incoming, "you> ") {
            Ok(Asked::Waiting(withdraw)) => {
                assert_eq!(desk.wanted().as_deref(), Some("you> "));
                drop(withdraw);
            }
            _ => panic!("nothing was typed: the editor is asked"),
        }
        assert!(desk.wanted().is_none(), "the cancelled wait withdrew its request");
        drop(sender);
        assert!(desk.ask(&mut incoming, "you> ").is_err(), "the end of input");
    }
}
