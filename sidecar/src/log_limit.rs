//! Log lines a peer can cause at will, rate-limited per cause.
//!
//! A refused request, a failed `accept` or a peer closed for stalling is
//! worth a line in the operator's log, but a peer can cause a hundred
//! thousand of them a second: one connection wrote 200,000 WARN lines
//! (44.6 MB) in about 2 s before these limits. So each such line goes
//! through a [`LogLimit`]: per cause, the first [`BURST`] lines of each
//! [`WINDOW`] are written in full, the rest are only counted, and when the
//! window ends one summary line says how many were left out ("… and 199,990
//! more in the last 10 s"), with the cause, so nothing goes unseen.
//!
//! The summary is written by a timer task on the runtime that counted the
//! first line left out, at the end of the window; if that runtime is gone by
//! then, the next line of the same cause writes it first.
//!
//! Considered: `tracing`'s own sampling (there is none in
//! `tracing-subscriber`), a token bucket per cause (needs the same summary,
//! and a fixed window says "in the last 10 s" truthfully).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one window of a cause lasts.
pub(crate) const WINDOW: Duration = Duration::from_secs(10);

/// Lines of one cause written in full per [`WINDOW`].
pub(crate) const BURST: u32 = 10;

/// The level a rate-limited line is written at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// Something an operator should look at (refused clients).
    Warn,
    /// Worth knowing, not acting on (peers closed for stalling).
    Info,
}

/// One cause's current window.
#[derive(Debug)]
struct Window {
    cause: &'static str,
    started: Instant,
    written: u32,
    left_out: u64,
    /// A timer task will write this window's summary.
    flush_scheduled: bool,
}

/// A rate limit for one kind of log line, per cause; see the module doc.
/// Meant to be a `static`, so that every listener and runtime of the
/// process shares it.
#[derive(Debug)]
pub(crate) struct LogLimit {
    /// What the line says, e.g. "refused a client that may not open runs".
    what: &'static str,
    level: Level,
    /// A handful of causes at most, so a vector beats a map.
    windows: Mutex<Vec<Window>>,
}

/// A summary to write: cause and how many lines were left out.
type Summary = (&'static str, u64);

impl LogLimit {
    /// A limit for lines that say `what`, written at `level`.
    pub(crate) const fn new(what: &'static str, level: Level) -> LogLimit {
        LogLimit { what, level, windows: Mutex::new(Vec::new()) }
    }

    /// What the line says.
    pub(crate) fn what(&self) -> &'static str {
        self.what
    }

    /// Whether a line of `cause` may be written now: true for the first
    /// [`BURST`] of each window; otherwise it is counted for the window's
    /// summary, and false.
    pub(crate) fn admit(&'static self, cause: &'static str) -> bool {
        self.admit_at(cause, Instant::now())
    }

    fn admit_at(&'static self, cause: &'static str, now: Instant) -> bool {
        let (admitted, overdue, schedule) = {
            let mut windows = self.windows.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let index = match windows.iter().position(|window| window.cause == cause) {
                Some(index) => index,
                None => {
                    windows.push(Window { cause, started: now, written: 0, left_out: 0, flush_scheduled: false });
                    windows.len() - 1
                }
            };
            let window = &mut windows[index];
            let mut overdue = None;
            if now.duration_since(window.started) >= WINDOW {
                if window.left_out > 0 {
                    overdue = Some((cause, window.left_out));
                }
                *window = Window { cause, started: now, written: 0, left_out: 0, flush_scheduled: false };
            }
            if window.written < BURST {
                window.written += 1;
                (true, overdue, None)
            } else {
                window.left_out += 1;
                let schedule = (!window.flush_scheduled).then(|| {
                    window.flush_scheduled = true;
                    window.started + WINDOW
                });
                (false, overdue, schedule)
            }
        };
        if let Some(summary) = overdue {
            self.write_summary(summary);
        }
        if let Some(due) = schedule {
            self.schedule_flush(cause, due);
        }
        admitted
    }

    /// Writes the summary of `cause`'s window at `due`, on the current
    /// runtime if there is one (else the next line of the cause does).
    fn schedule_flush(&'static self, cause: &'static str, due: Instant) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            tokio::time::sleep_until(due.into()).await;
            if let Some(summary) = self.take_ended(cause, Instant::now()) {
                self.write_summary(summary);
            }
        });
    }

    /// The summary of `cause`'s window if it has ended with lines left out;
    /// the window is then closed.
    fn take_ended(&self, cause: &'static str, now: Instant) -> Option<Summary> {
        let mut windows = self.windows.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let index = windows.iter().position(|window| window.cause == cause)?;
        let window = &windows[index];
        if now.duration_since(window.started) < WINDOW || window.left_out == 0 {
            return None;
        }
        let summary = (cause, window.left_out);
        windows.swap_remove(index);
        Some(summary)
    }

    fn write_summary(&self, (cause, left_out): Summary) {
        let (what, more, window_s) = (self.what, thousands(left_out), WINDOW.as_secs());
        match self.level {
            Level::Warn => {
                tracing::warn!(cause, left_out, "{what}: … and {more} more in the last {window_s} s");
            }
            Level::Info => {
                tracing::info!(cause, left_out, "{what}: … and {more} more in the last {window_s} s");
            }
        }
    }
}

/// `n` with a comma every three digits: `199,990`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_burst_of_each_window_is_written_and_the_rest_counted_per_cause() {
        static LIMIT: LogLimit = LogLimit::new("refused", Level::Warn);
        let start = Instant::now();
        let admitted = (0..1000).filter(|_| LIMIT.admit_at("a", start)).count();
        assert_eq!(admitted, BURST as usize);
        assert!(LIMIT.admit_at("b", start), "another cause has its own window");
        assert_eq!(LIMIT.take_ended("a", start), None, "the window has not ended");
        let later = start + WINDOW;
        assert_eq!(LIMIT.take_ended("a", later), Some(("a", 1000 - u64::from(BURST))));
        assert_eq!(LIMIT.take_ended("b", later), None, "nothing left out of `b`");
        assert!(LIMIT.admit_at("a", later), "a new window writes again");
    }

    #[test]
    fn counts_read_with_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(199_990), "199,990");
        assert_eq!(thousands(12_345_678), "12,345,678");
    }
}
