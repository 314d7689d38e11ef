//! How every listener accepts connections: a bounded number at a time, a
//! deadline for the handshake, and a back-off when the process is out of
//! file descriptors.
//!
//! What one peer could do before these bounds (issue 28): hold 1,100 silent
//! connections (no HTTP/2 preface, never closed) so that `accept` failed
//! with EMFILE, every legitimate request timed out, and the accept loop
//! spun at a core logging nothing. Now, on each listener:
//!
//! - **At most [`ConnectionLimits::max_connections`] (run listeners) or
//!   [`ConnectionLimits::max_probe_connections`] (health, metrics)
//!   connections are open at once.** At the limit the listener stops
//!   accepting: new connections wait in the kernel's backlog (first come,
//!   first served) until one closes, rather than being accepted and
//!   closed. Each accepted connection holds an [`OwnedSemaphorePermit`]
//!   that its [`Guarded`] IO gives back when it is dropped, however the
//!   connection ends.
//! - **A peer that has not finished its handshake within
//!   [`ConnectionLimits::handshake_timeout`] is closed.** For HTTP/2 the
//!   handshake is the client's connection preface and its first SETTINGS
//!   frame, read through [`Guarded`] as they go by (nothing is buffered);
//!   over TLS it is the TLS handshake (client certificate checked), which
//!   tonic completes before it asks the connection who the peer is
//!   ([`Connected::connect_info`]); for the metrics endpoint's HTTP/1 it is
//!   each request's header, hyper's `header_read_timeout`. A peer that
//!   completes the handshake and then stalls is found out by the HTTP/2
//!   keepalive (`SidecarConfig::keepalive_interval`), on every HTTP/2
//!   listener. When the listener stops ([`Admission::close`]), a
//!   connection still in its handshake is closed at once: hyper would let
//!   it finish its handshake before its graceful shutdown, holding up the
//!   exit.
//! - **A failed `accept` does not spin.** Errors that belong to one
//!   connection (aborted, reset, interrupted) are skipped; any other (EMFILE,
//!   ENFILE, ENOBUFS, ENOMEM) backs off from [`BACKOFF_MIN`] doubling to
//!   [`BACKOFF_MAX`] and is logged at WARN, rate-limited (`log_limit`).
//!
//! Concurrent streams per HTTP/2 connection are bounded where each server is
//! built (`server.rs`), from [`ConnectionLimits::max_streams_per_connection`]
//! and [`ConnectionLimits::max_probe_streams_per_connection`], and health
//! `Watch` streams in total in `health.rs`.
//!
//! Considered: tonic's `TcpIncoming` (no limit, no handshake deadline, skips
//! EMFILE at once: the spin), `tower::limit::ConcurrencyLimit` (limits
//! requests, not connections), hyper-util's auto builder (no handshake
//! deadline for HTTP/2).

use crate::log_limit::{Level, LogLimit};
use futures::Stream;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::Connected;

/// The first back-off after an `accept` that failed for want of resources.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(50);

/// The longest back-off between failed `accept`s.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How many connections each listener holds, how long a handshake may take,
/// and how many streams one connection may have open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once on each run listener (TCP, Unix socket);
    /// more wait in the listen backlog until one closes
    /// (`--max-connections`). A backend needs one per client; each held
    /// connection costs tens of KiB. Default 1,024.
    pub max_connections: usize,
    /// Connections open at once on the health listener and, apart, on the
    /// metrics listener (`--max-probe-connections`). Default 64.
    pub max_probe_connections: usize,
    /// How long a new connection may take to finish its handshake (HTTP/2
    /// preface and SETTINGS, TLS, or an HTTP/1 request's header) before it
    /// is closed (`--handshake-timeout-seconds`). Default 5 s.
    pub handshake_timeout: Duration,
    /// HTTP/2 streams one connection may have open at once on a run
    /// listener (SETTINGS_MAX_CONCURRENT_STREAMS;
    /// `--max-streams-per-connection`); a client past it gets
    /// REFUSED_STREAM. `None` (the default): room for every run the sidecar
    /// admits at once plus [`STREAMS_BESIDE_RUNS`]
    /// ([`ConnectionLimits::streams_per_run_connection`]), since a backend
    /// runs all its runs over one connection: 1,346 with the default limits.
    pub max_streams_per_connection: Option<u32>,
    /// HTTP/2 streams one connection may have open at once on the health
    /// listener. Default 16.
    pub max_probe_streams_per_connection: u32,
    /// Health `Watch` streams open at once over every listener together
    /// (`--max-health-watches`); past it a `Watch` gets RESOURCE_EXHAUSTED
    /// (a `Check` always works). Default 256.
    pub max_health_watches: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            max_probe_connections: 64,
            handshake_timeout: Duration::from_secs(5),
            max_streams_per_connection: None,
            max_probe_streams_per_connection: 16,
            max_health_watches: 256,
        }
    }
}

/// Streams a run connection may open beside one per run the sidecar admits
/// at once: health checks, `Describe`, reflection.
pub const STREAMS_BESIDE_RUNS: u32 = 64;

impl ConnectionLimits {
    /// The streams one run connection may have open at once, for a sidecar
    /// that admits `runs` runs at once (`max_queued_runs + max_waiting_runs
    /// + slots`): [`ConnectionLimits::max_streams_per_connection`] if set,
    /// else `runs` + [`STREAMS_BESIDE_RUNS`].
    pub fn streams_per_run_connection(&self, runs: usize) -> u32 {
        self.max_streams_per_connection
            .unwrap_or_else(|| u32::try_from(runs).unwrap_or(u32::MAX).saturating_add(STREAMS_BESIDE_RUNS))
            .max(1)
    }
}

/// The log line of a listener that backs off from failing `accept`s.
static ACCEPT_FAILED: LogLimit =
    LogLimit::new("a listener cannot accept connections; backing off (raise `--max-open-files`?)", Level::Warn);

/// The log line of a listener at its connection limit.
static AT_LIMIT: LogLimit = LogLimit::new(
    "a listener holds as many connections as it may; new ones wait until one closes (`--max-connections`, `--max-probe-connections`)",
    Level::Warn,
);

/// The log line of a connection closed for not finishing its handshake.
static HANDSHAKE_LATE: LogLimit =
    LogLimit::new("closed a connection that did not finish its handshake in time", Level::Info);

/// A listener's admission: its connection limit and handshake deadline.
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    /// The listener, for the logs: `run`, `health`, `metrics`.
    listener: &'static str,
    permits: Arc<Semaphore>,
    handshake_timeout: Duration,
    /// Cancelled when the listener stops.
    closing: CancellationToken,
}

impl Admission {
    /// At most `max_connections` open at once (at least one), each given
    /// `handshake_timeout`.
    pub(crate) fn new(listener: &'static str, max_connections: usize, handshake_timeout: Duration) -> Admission {
        let permits = Arc::new(Semaphore::new(max_connections.clamp(1, Semaphore::MAX_PERMITS)));
        Admission { listener, permits, handshake_timeout, closing: CancellationToken::new() }
    }

    /// The listener stops: every connection of it still in its handshake
    /// is closed now (the rest close as their server shuts them down).
    pub(crate) fn close(&self) {
        self.closing.cancel();
    }

    /// The next connection's place: at once if one is free, else when a
    /// connection closes.
    async fn place(&self) -> OwnedSemaphorePermit {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return permit;
        }
        if AT_LIMIT.admit(self.listener) {
            tracing::warn!(listener = self.listener, "{}", AT_LIMIT.what());
        }
        // The semaphore is never closed.
        match self.permits.clone().acquire_owned().await {
            Ok(permit) => permit,
            Err(_) => unreachable!("a listener's semaphore is never closed"),
        }
    }
}

/// A listener the accept loop can take connections from.
pub(crate) trait Listen: Send + 'static {
    /// An accepted connection.
    type Conn: Send + 'static;
    /// The next connection.
    fn accept(&self) -> impl std::future::Future<Output = io::Result<Self::Conn>> + Send;
}

impl Listen for tokio::net::TcpListener {
    type Conn = tokio::net::TcpStream;
    async fn accept(&self) -> io::Result<tokio::net::TcpStream> {
        let (stream, _) = tokio::net::TcpListener::accept(self).await?;
        // Without TCP_NODELAY, Nagle's algorithm and delayed ACKs add ~40 ms
        // to every small message of a run's stream. A failure changes
        // nothing but latency.
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

impl Listen for tokio::net::UnixListener {
    type Conn = tokio::net::UnixStream;
    async fn accept(&self) -> io::Result<tokio::net::UnixStream> {
        Ok(tokio::net::UnixListener::accept(self).await?.0)
    }
}

/// An accepted connection and its place on the listener.
#[derive(Debug)]
pub(crate) struct Admitted<C> {
    conn: C,
    ticket: Ticket,
}

/// A connection's place on its listener and its handshake deadline.
#[derive(Debug)]
struct Ticket {
    _permit: OwnedSemaphorePermit,
    listener: &'static str,
    deadline: Instant,
    timeout: Duration,
    closing: CancellationToken,
}

/// What a [`Guarded`] connection must do by its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handshake {
    /// Send the HTTP/2 preface and a SETTINGS frame (read as they pass).
    Http2,
    /// Finish the TLS handshake (tonic asks the connection who the peer is
    /// once it has).
    Tls,
    /// Nothing: the server applies its own deadline (hyper's HTTP/1
    /// `header_read_timeout`).
    None,
}

impl<C> Admitted<C> {
    /// The same place, for the connection `f` makes of this one.
    ///
    /// # Errors
    /// `f`'s error; the place is then given back.
    pub(crate) fn try_map<D>(self, f: impl FnOnce(C) -> io::Result<D>) -> io::Result<Admitted<D>> {
        Ok(Admitted { conn: f(self.conn)?, ticket: self.ticket })
    }

    /// The connection, held to `handshake`'s deadline, giving its place
    /// back when dropped.
    pub(crate) fn guard(self, handshake: Handshake) -> Guarded<C> {
        let progress = match handshake {
            Handshake::Http2 => Progress::Preface { seen: 0, head: [0; FRAME_HEAD] },
            Handshake::Tls => Progress::Tls,
            Handshake::None => Progress::Done,
        };
        Guarded {
            conn: self.conn,
            ticket: self.ticket,
            progress,
            tls_done: AtomicBool::new(false),
            timer: None,
            closing: None,
        }
    }
}

/// Connections accepted from `listener`, each with its place under
/// `admission`; the stream never ends (the server stops polling it to stop).
pub(crate) fn admitted<L: Listen>(listener: L, admission: Admission) -> impl Stream<Item = Admitted<L::Conn>> + Send {
    futures::stream::unfold((listener, admission, BACKOFF_MIN), |(listener, admission, mut backoff)| async move {
        loop {
            let permit = admission.place().await;
            match listener.accept().await {
                Ok(conn) => {
                    let timeout = admission.handshake_timeout;
                    let ticket = Ticket {
                        _permit: permit,
                        listener: admission.listener,
                        deadline: Instant::now() + timeout,
                        timeout,
                        closing: admission.closing.clone(),
                    };
                    return Some((Admitted { conn, ticket }, (listener, admission, BACKOFF_MIN)));
                }
                Err(error) if belongs_to_one_connection(&error) => {
                    tracing::debug!(listener = admission.listener, %error, "a connection was gone before it was accepted");
                }
                Err(error) => {
                    drop(permit);
                    if ACCEPT_FAILED.admit(admission.listener) {
                        tracing::warn!(
                            listener = admission.listener,
                            %error,
                            backoff_ms = backoff.as_millis() as u64,
                            "{}",
                            ACCEPT_FAILED.what()
                        );
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    })
}

/// Whether a failed `accept` concerns only the connection it would have
/// returned (the next `accept` may succeed at once).
fn belongs_to_one_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || error.raw_os_error() == Some(libc::EPROTO)
}

/// The HTTP/2 client connection preface.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEAD: usize = 9;
const SETTINGS: u8 = 0x4;

/// How far a connection is through its handshake.
#[derive(Debug)]
enum Progress {
    /// `seen` bytes of the preface and the first frame's head so far.
    Preface { seen: usize, head: [u8; FRAME_HEAD] },
    /// The first SETTINGS frame's payload, `left` bytes of it still to come.
    Settings { left: usize },
    /// Waiting for tonic to finish the TLS handshake.
    Tls,
    /// The client sent something else than an HTTP/2 preface: the server
    /// refuses it; the deadline still holds.
    NotHttp2,
    /// Handshake finished: the connection is the server's alone.
    Done,
}

impl Progress {
    /// Follows the handshake through `bytes`, just read from the client.
    fn advance(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match self {
                Progress::Preface { seen, head } => {
                    let byte = bytes[0];
                    bytes = &bytes[1..];
                    if *seen < PREFACE.len() {
                        if byte != PREFACE[*seen] {
                            *self = Progress::NotHttp2;
                            return;
                        }
                    } else {
                        head[*seen - PREFACE.len()] = byte;
                    }
                    *seen += 1;
                    if *seen == PREFACE.len() + FRAME_HEAD {
                        let length = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
                        *self = if head[3] != SETTINGS {
                            Progress::NotHttp2
                        } else if length == 0 {
                            Progress::Done
                        } else {
                            Progress::Settings { left: length }
                        };
                    }
                }
                Progress::Settings { left } => {
                    let taken = (*left).min(bytes.len());
                    bytes = &bytes[taken..];
                    *left -= taken;
                    if *left == 0 {
                        *self = Progress::Done;
                    }
                }
                Progress::Tls | Progress::NotHttp2 | Progress::Done => return,
            }
        }
    }
}

/// An accepted connection held to its handshake deadline; dropping it gives
/// its place on the listener back. Reads fail with `TimedOut` once the
/// deadline passes before the handshake finished, and the server then
/// closes the connection.
#[derive(Debug)]
pub(crate) struct Guarded<C> {
    conn: C,
    ticket: Ticket,
    progress: Progress,
    /// Set by [`Connected::connect_info`] for [`Handshake::Tls`].
    tls_done: AtomicBool,
    /// The deadline as a timer, made on the first read on the runtime that
    /// serves the connection.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The listener's stop, watched while the handshake is not done.
    closing: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
}

impl<C> Guarded<C> {
    fn handshake_done(&mut self) -> bool {
        if matches!(self.progress, Progress::Tls) && self.tls_done.load(Ordering::Relaxed) {
            self.progress = Progress::Done;
            self.timer = None;
            self.closing = None;
        }
        matches!(self.progress, Progress::Done)
    }

    /// `Err(TimedOut)` once the deadline has passed, `Err(ConnectionAborted)`
    /// once the listener stops; else registers both wake-ups with `cx`.
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let token = &self.ticket.closing;
        let closing = self.closing.get_or_insert_with(|| Box::pin(token.clone().cancelled_owned()));
        if closing.as_mut().poll(cx).is_ready() {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the listener stopped before the peer finished its handshake",
            ));
        }
        let deadline = self.ticket.deadline;
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline.into())));
        if timer.as_mut().poll(cx).is_pending() {
            return Ok(());
        }
        let listener = self.ticket.listener;
        if HANDSHAKE_LATE.admit(listener) {
            tracing::info!(listener, timeout_s = self.ticket.timeout.as_secs_f64(), "{}", HANDSHAKE_LATE.what());
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the peer did not finish its handshake within `{:?}`", self.ticket.timeout),
        ))
    }
}

impl<C: AsyncRead + Unpin> AsyncRead for Guarded<C> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.handshake_done() {
            this.check_deadline(cx)?;
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.conn).poll_read(cx, buf))?;
        if !matches!(this.progress, Progress::Done) {
            this.progress.advance(&buf.filled()[before..]);
            if matches!(this.progress, Progress::Done) {
                this.timer = None;
                this.closing = None;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<C: AsyncWrite + Unpin> AsyncWrite for Guarded<C> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.conn).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.conn).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.conn).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.conn).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.conn.is_write_vectored()
    }
}

impl<C: Connected> Connected for Guarded<C> {
    type ConnectInfo = C::ConnectInfo;

    /// The connection's own info. Over TLS, tonic asks for it once the TLS
    /// handshake is done, which ends the handshake deadline.
    fn connect_info(&self) -> C::ConnectInfo {
        self.tls_done.store(true, Ordering::Relaxed);
        self.conn.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(bytes: &[u8]) -> Progress {
        let mut progress = Progress::Preface { seen: 0, head: [0; FRAME_HEAD] };
        // One byte at a time and all at once must agree.
        let mut bytewise = Progress::Preface { seen: 0, head: [0; FRAME_HEAD] };
        progress.advance(bytes);
        for byte in bytes {
            bytewise.advance(std::slice::from_ref(byte));
        }
        assert_eq!(format!("{progress:?}"), format!("{bytewise:?}"));
        progress
    }

    fn settings(payload: usize) -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        bytes.extend_from_slice(&[0, 0, payload as u8, SETTINGS, 0, 0, 0, 0, 0]);
        bytes.extend(std::iter::repeat_n(0, payload));
        bytes
    }

    #[test]
    fn the_handshake_ends_with_the_first_settings_frame() {
        assert!(matches!(after(&settings(0)), Progress::Done));
        assert!(matches!(after(&settings(12)), Progress::Done));
        let partial = settings(12);
        assert!(matches!(after(&partial[..partial.len() - 1]), Progress::Settings { left: 1 }));
        assert!(matches!(after(&PREFACE[..10]), Progress::Preface { seen: 10, .. }));
        assert!(matches!(after(b""), Progress::Preface { seen: 0, .. }));
    }

    #[test]
    fn anything_but_a_preface_and_settings_keeps_the_deadline() {
        assert!(matches!(after(b"GET / HTTP/1.1\r\n"), Progress::NotHttp2));
        let mut ping_first = PREFACE.to_vec();
        ping_first.extend_from_slice(&[0, 0, 8, 0x6, 0, 0, 0, 0, 0]);
        assert!(matches!(after(&ping_first), Progress::NotHttp2));
    }
}
