//! Where `print()` output goes: a small buffer in front of each of the
//! guest's stdout and stderr, so a printing loop costs a few host writes
//! rather than one per line, while the runner can still flush before every
//! tool call.
//!
//! `print(..., file=sys.stderr)` and `sys.stderr.write()` reach stderr;
//! monty hands both to [`PrintWriterCallback::stderr_write`].

use std::{
    borrow::Cow,
    io::Write,
    time::{Duration, Instant},
};

use monty_types::{MontyException, PrintWriterCallback};

/// Flush once this much output is waiting on one stream.
const FLUSH_BYTES: usize = 8 * 1024;

/// Flush output this old at the VM's next checkpoint, so a script that
/// prints and then computes for a while is not silent meanwhile.
const FLUSH_AGE: Duration = Duration::from_millis(20);

/// The script's `print()` target: stdout, and stderr for
/// `print(..., file=sys.stderr)`. The host captures the two separately.
///
/// Write errors are ignored: the host caps output, and a refused write must
/// not end the script.
#[derive(Debug)]
pub struct Printer<O: Write, E: Write> {
    stdout: Buffered<O>,
    stderr: Buffered<E>,
    /// When the oldest buffered byte was printed; `None` while both are empty.
    since: Option<Instant>,
}

/// One output stream and what is waiting for it.
#[derive(Debug)]
struct Buffered<W: Write> {
    out: W,
    buffer: String,
}

impl<W: Write> Buffered<W> {
    fn flush(&mut self) {
        if !self.buffer.is_empty() {
            let _ = self.out.write_all(self.buffer.as_bytes());
            self.buffer.clear();
        }
        let _ = self.out.flush();
    }
}

impl<O: Write, E: Write> Printer<O, E> {
    /// A printer writing stdout to `stdout` and stderr to `stderr`.
    pub fn new(stdout: O, stderr: E) -> Self {
        Self {
            stdout: Buffered { out: stdout, buffer: String::new() },
            stderr: Buffered { out: stderr, buffer: String::new() },
            since: None,
        }
    }

    /// Writes out everything buffered on both streams. The runner calls it
    /// before each call batch, before a sleep and at the end of the run, so
    /// output reaches the host in order with the calls.
    pub fn flush(&mut self) {
        self.stdout.flush();
        self.stderr.flush();
        self.since = None;
    }

    /// The stdout writer.
    pub fn stdout(&self) -> &O {
        &self.stdout.out
    }

    /// The stderr writer.
    pub fn stderr(&self) -> &E {
        &self.stderr.out
    }

    fn buffered(&mut self) {
        let full = self.stdout.buffer.len() >= FLUSH_BYTES || self.stderr.buffer.len() >= FLUSH_BYTES;
        // A print is a checkpoint too: monty may not offer `poll_flush` often
        // in a busy loop, and the host streams what reaches it.
        let stale = self.since.is_some_and(|since| since.elapsed() >= FLUSH_AGE);
        if full || stale {
            self.flush();
        } else if self.since.is_none() {
            self.since = Some(Instant::now());
        }
    }
}

impl<O: Write, E: Write> PrintWriterCallback for Printer<O, E> {
    fn stdout_write(&mut self, output: Cow<'_, str>) -> Result<(), MontyException> {
        self.stdout.buffer.push_str(&output);
        self.buffered();
        Ok(())
    }

    fn stdout_push(&mut self, end: char) -> Result<(), MontyException> {
        self.stdout.buffer.push(end);
        self.buffered();
        Ok(())
    }

    fn stderr_write(&mut self, output: Cow<'_, str>) -> Result<(), MontyException> {
        self.stderr.buffer.push_str(&output);
        self.buffered();
        Ok(())
    }

    fn stderr_push(&mut self, end: char) -> Result<(), MontyException> {
        self.stderr.buffer.push(end);
        self.buffered();
        Ok(())
    }

    fn poll_flush(&mut self) -> Result<(), MontyException> {
        // The clock is read only while something waits, so a silent script pays nothing.
        if self.since.is_some_and(|since| since.elapsed() >= FLUSH_AGE) {
            self.flush();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printer() -> Printer<Vec<u8>, Vec<u8>> {
        Printer::new(Vec::new(), Vec::new())
    }

    #[test]
    fn output_is_buffered_until_flushed() {
        let mut printer = printer();
        let _ = printer.stdout_write("hello".into());
        let _ = printer.stdout_push('\n');
        assert!(printer.stdout().is_empty());
        printer.flush();
        assert_eq!(printer.stdout(), b"hello\n");
    }

    #[test]
    fn stderr_is_its_own_stream() {
        let mut printer = printer();
        let _ = printer.stdout_write("out".into());
        let _ = printer.stderr_write("err".into());
        let _ = printer.stderr_push('\n');
        printer.flush();
        assert_eq!((printer.stdout().as_slice(), printer.stderr().as_slice()), (&b"out"[..], &b"err\n"[..]));
    }

    #[test]
    fn large_output_flushes_itself() {
        let mut printer = printer();
        let _ = printer.stdout_write("x".repeat(FLUSH_BYTES).into());
        assert_eq!(printer.stdout().len(), FLUSH_BYTES);
        let _ = printer.stderr_write("y".repeat(FLUSH_BYTES).into());
        assert_eq!(printer.stderr().len(), FLUSH_BYTES);
    }

    #[test]
    fn write_errors_are_ignored() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
        }
        let mut printer = Printer::new(Broken, Broken);
        assert!(printer.stdout_write("x".repeat(FLUSH_BYTES).into()).is_ok());
        assert!(printer.stderr_write("x".repeat(FLUSH_BYTES).into()).is_ok());
        printer.flush();
    }
}
