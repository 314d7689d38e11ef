//! What a person reads on stderr, made for a terminal: colour (ok in green,
//! a tool's error in yellow, a failure in red, an approval prompt in bold
//! yellow) when `NO_COLOR` is not set, and a spinner while something is
//! waited for. A file or a pipe gets plain text and no spinner.

use anstyle::{AnsiColor, Style};
use std::io::Write as _;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What a piece of text says, and so its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// It worked.
    Ok,
    /// The tool answered with an error (it ran).
    Warn,
    /// Refused, denied, failed or ended.
    Failed,
    /// A person is asked.
    Ask,
}

impl Tone {
    fn style(self) -> Style {
        match self {
            Tone::Ok => AnsiColor::Green.on_default(),
            Tone::Warn => AnsiColor::Yellow.on_default(),
            Tone::Failed => AnsiColor::Red.on_default(),
            Tone::Ask => AnsiColor::Yellow.on_default().bold(),
        }
    }
}

/// Whether stderr is a terminal.
pub fn terminal() -> bool {
    static TERMINAL: OnceLock<bool> = OnceLock::new();
    *TERMINAL.get_or_init(|| std::io::IsTerminal::is_terminal(&std::io::stderr()))
}

/// Whether stderr gets colour: a terminal, and no `NO_COLOR` (no-color.org).
pub fn colour_on() -> bool {
    terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The one spinner of the process: the model's "thinking" and a slow
/// tool's work share the line, so whoever prints stops it first.
pub fn spinner() -> &'static Spinner {
    static SPINNER: Spinner = Spinner::new();
    &SPINNER
}

/// A spinner on stderr's current line (`main> ⠋ thinking 3s`), on a
/// terminal only. Whoever prints next stops it first ([`stop`](Self::stop)
/// puts the line back as it was before the spinner). Its task is owned here:
/// stopped, or dropped with it.
#[derive(Debug, Default)]
pub struct Spinner {
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// What the line held before the spinner (e.g. `main> `).
    line_start: Mutex<String>,
    /// Holds in force ([`hold`](Self::hold)): while any is, nothing spins.
    holds: std::sync::atomic::AtomicUsize,
}

/// Keeps the spinner off until dropped ([`Spinner::hold`]).
#[derive(Debug)]
pub struct Held(&'static Spinner);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.holds.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The spinner's frames.
const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

impl Spinner {
    const fn new() -> Spinner {
        Spinner {
            task: Mutex::new(None),
            line_start: Mutex::new(String::new()),
            holds: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Stops the spinner and keeps it off until the guard drops: a question
    /// on the line (an approval prompt) is not written over.
    pub fn hold(&'static self) -> Held {
        self.holds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.stop();
        Held(self)
    }

    /// Prints `text`, which the line starts with (and which the spinner,
    /// if it spins on this line, leaves in place).
    pub fn line_starts_with(&self, text: &str) {
        self.stop();
        write_now(text.as_bytes());
        *self.line_start.lock().unwrap_or_else(|p| p.into_inner()) = text.to_owned();
    }

    /// Spins `label` until [`stop`](Self::stop) (a running one is replaced).
    /// Nothing on a file or pipe, outside a Tokio runtime, or while held.
    pub fn start(&self, label: &str) {
        self.start_since(label, Instant::now());
    }

    /// [`start`](Self::start), counting the seconds shown from `since`.
    pub fn start_since(&self, label: &str, since: Instant) {
        // One lock from the check to the store, so a hold that comes meanwhile stops this one.
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(spinning) = task.take() {
            spinning.abort();
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        if !terminal() || self.holds.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            return;
        }
        let start = self.line_start.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let label = format!("{start}{label}");
        *task = Some(runtime.spawn(async move {
            for frame in FRAMES.iter().cycle() {
                let line = format!("\r\x1b[K{label} {frame} {}s", since.elapsed().as_secs());
                write_now(line.as_bytes());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }

    /// Stops the spinner and clears its line, if it spins.
    pub fn stop(&self) {
        // Once something else prints, the line moves on: nothing is left to keep.
        let start = std::mem::take(&mut *self.line_start.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(task) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
            write_now(format!("\r\x1b[K{start}").as_bytes());
        }
    }
}

/// Writes `bytes` to stderr at once (a terminal that cannot be written to has no one to tell).
fn write_now(bytes: &[u8]) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(bytes).and_then(|()| err.flush());
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `text` in `tone`'s colour when `on`, else as it is.
pub fn paint_if(on: bool, tone: Tone, text: &str) -> String {
    if on {
        let style = tone.style();
        format!("{}{text}{}", style.render(), style.render_reset())
    } else {
        text.to_owned()
    }
}

/// `text` in `tone`'s colour when stderr gets colour ([`colour_on`]).
pub fn paint(tone: Tone, text: &str) -> String {
    paint_if(colour_on(), tone, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_wraps_the_text_only_when_on() {
        assert_eq!(paint_if(false, Tone::Failed, "✗ c1"), "✗ c1");
        let red = paint_if(true, Tone::Failed, "✗ c1");
        assert!(red.starts_with("\u{1b}[31m") && red.ends_with("\u{1b}[0m") && red.contains("✗ c1"), "{red:?}");
        assert_ne!(paint_if(true, Tone::Ok, "ok"), paint_if(true, Tone::Warn, "ok"));
    }
}
