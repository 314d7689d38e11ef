//! Where `print()` output goes: a small buffer in front of the guest's
//! stdout, so a printing loop costs a few host writes rather than one per
//! line, while the runner can still flush before every tool call.

use std::{
    borrow::Cow,
    io::Write,
    time::{Duration, Instant},
};

use monty_types::{MontyException, PrintWriterCallback};

/// Flush once this much output is waiting.
const FLUSH_BYTES: usize = 8 * 1024;

/// Flush output this old at the VM's next checkpoint, so a script that
/// prints and then computes for a while is not silent meanwhile.
const FLUSH_AGE: Duration = Duration::from_millis(20);

/// The script's `print()` target. `print(..., file=sys.stderr)` lands here
/// too, in order: the host forwards one output stream.
///
/// Write errors are ignored: the host caps output, and a refused write must
/// not end the script.
#[derive(Debug)]
pub struct Printer<W: Write> {
    out: W,
    buffer: String,
    /// When the oldest buffered byte was printed; `None` while empty.
    since: Option<Instant>,
}

impl<W: Write> Printer<W> {
    /// A printer writing to `out`.
    pub fn new(out: W) -> Self {
        Self { out, buffer: String::new(), since: None }
    }

    /// Writes out everything buffered. The runner calls it before each call
    /// batch and at the end of the run, so output reaches the host in order.
    pub fn flush(&mut self) {
        if !self.buffer.is_empty() {
            let _ = self.out.write_all(self.buffer.as_bytes());
            self.buffer.clear();
        }
        self.since = None;
        let _ = self.out.flush();
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    fn buffered(&mut self) {
        if self.buffer.len() >= FLUSH_BYTES {
            self.flush();
        } else if self.since.is_none() {
            self.since = Some(Instant::now());
        }
    }
}

impl<W: Write> PrintWriterCallback for Printer<W> {
    fn stdout_write(&mut self, output: Cow<'_, str>) -> Result<(), MontyException> {
        self.buffer.push_str(&output);
        self.buffered();
        Ok(())
    }

    fn stdout_push(&mut self, end: char) -> Result<(), MontyException> {
        self.buffer.push(end);
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

    #[test]
    fn output_is_buffered_until_flushed() {
        let mut printer = Printer::new(Vec::new());
        let _ = printer.stdout_write("hello".into());
        let _ = printer.stdout_push('\n');
        assert!(printer.get_ref().is_empty());
        printer.flush();
        assert_eq!(printer.get_ref(), b"hello\n");
    }

    #[test]
    fn large_output_flushes_itself() {
        let mut printer = Printer::new(Vec::new());
        let _ = printer.stdout_write("x".repeat(FLUSH_BYTES).into());
        assert_eq!(printer.get_ref().len(), FLUSH_BYTES);
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
        let mut printer = Printer::new(Broken);
        assert!(printer.stdout_write("x".repeat(FLUSH_BYTES).into()).is_ok());
        printer.flush();
    }
}
