//! The guest's stdout and stderr: kept in memory under one shared byte cap.
//!
//! Writes never fail: past the cap bytes are dropped and the run is marked
//! truncated, so a script that floods its output keeps running (and is
//! stopped, if at all, by its CPU limit). The run forwards what is new
//! periodically, before each batch of calls and before `Finished`
//! ([`CapturedOutput::take_new`], through `RunLink::flush_output`), so a
//! backend sees output as it happens.

use bytes::Bytes;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Which guest stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    /// stdout
    Stdout,
    /// stderr
    Stderr,
}

#[derive(Debug, Default)]
struct Buffers {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// How much of each buffer `take_new` has handed out.
    stdout_sent: usize,
    stderr_sent: usize,
    remaining: usize,
    truncated: bool,
}

/// The output of one run; clones share the buffers.
#[derive(Debug, Clone)]
pub(crate) struct CapturedOutput {
    buffers: Arc<Mutex<Buffers>>,
}

/// One stream of a [`CapturedOutput`], handed to WASI.
#[derive(Debug, Clone)]
pub(crate) struct OutputPipe {
    output: CapturedOutput,
    stream: Stream,
}

impl CapturedOutput {
    /// Keeps at most `cap` bytes of stdout and stderr together.
    pub(crate) fn new(cap: usize) -> Self {
        let buffers = Buffers { remaining: cap, ..Default::default() };
        CapturedOutput { buffers: Arc::new(Mutex::new(buffers)) }
    }

    /// Keeps at most `cap` bytes, `stdout` and `stderr` (what a parked run
    /// had, already sent to the backend) among them.
    pub(crate) fn resumed(cap: usize, stdout: Vec<u8>, stderr: Vec<u8>, truncated: bool) -> Self {
        let buffers = Buffers {
            remaining: cap.saturating_sub(stdout.len() + stderr.len()),
            stdout_sent: stdout.len(),
            stderr_sent: stderr.len(),
            stdout,
            stderr,
            truncated,
        };
        CapturedOutput { buffers: Arc::new(Mutex::new(buffers)) }
    }

    fn lock(&self) -> MutexGuard<'_, Buffers> {
        // A panic while holding this lock cannot leave the buffers invalid.
        self.buffers.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The pipe for one stream.
    pub(crate) fn pipe(&self, stream: Stream) -> OutputPipe {
        OutputPipe { output: self.clone(), stream }
    }

    fn write(&self, stream: Stream, bytes: &[u8]) {
        let mut buffers = self.lock();
        let kept = bytes.len().min(buffers.remaining);
        if kept < bytes.len() {
            buffers.truncated = true;
        }
        buffers.remaining -= kept;
        match stream {
            Stream::Stdout => buffers.stdout.extend_from_slice(&bytes[..kept]),
            Stream::Stderr => buffers.stderr.extend_from_slice(&bytes[..kept]),
        }
    }

    /// The bytes written since the previous call, per stream.
    pub(crate) fn take_new(&self) -> (Bytes, Bytes) {
        let mut buffers = self.lock();
        let stdout = Bytes::copy_from_slice(&buffers.stdout[buffers.stdout_sent..]);
        let stderr = Bytes::copy_from_slice(&buffers.stderr[buffers.stderr_sent..]);
        buffers.stdout_sent = buffers.stdout.len();
        buffers.stderr_sent = buffers.stderr.len();
        (stdout, stderr)
    }

    /// True when something was written since the last [`Self::take_new`].
    pub(crate) fn has_new(&self) -> bool {
        let buffers = self.lock();
        buffers.stdout.len() > buffers.stdout_sent || buffers.stderr.len() > buffers.stderr_sent
    }

    /// Everything kept, as written: stdout, stderr, and whether anything was
    /// dropped.
    pub(crate) fn contents(&self) -> (Vec<u8>, Vec<u8>, bool) {
        let buffers = self.lock();
        (buffers.stdout.clone(), buffers.stderr.clone(), buffers.truncated)
    }
}

impl IsTerminal for OutputPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for OutputPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for OutputPipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.output.write(self.stream, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always accept a full chunk: what passes the cap is dropped, not refused.
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for OutputPipe {
    async fn ready(&mut self) {}
}

impl AsyncWrite for OutputPipe {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.output.write(self.stream, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_past_the_cap_is_dropped_and_marked() {
        let output = CapturedOutput::new(10);
        output.write(Stream::Stdout, b"hello ");
        output.write(Stream::Stderr, b"world!!");
        let (stdout, stderr, truncated) = output.contents();
        assert_eq!((stdout.as_slice(), stderr.as_slice(), truncated), (&b"hello "[..], &b"worl"[..], true));
    }

    #[test]
    fn take_new_hands_out_each_byte_once() {
        let output = CapturedOutput::new(100);
        output.write(Stream::Stdout, b"a");
        assert_eq!(output.take_new().0, Bytes::from_static(b"a"));
        output.write(Stream::Stdout, b"b");
        assert_eq!(output.take_new().0, Bytes::from_static(b"b"));
        assert!(output.take_new().0.is_empty());
    }
}
