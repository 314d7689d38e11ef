//! SIGTERM and SIGINT: the signals that drain a sidecar.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// SIGTERM and SIGINT, caught. Once installed, neither ends the process by
/// itself: the first should start [`Sidecar::drain`](crate::Sidecar::drain),
/// a second cut it short ([`Sidecar::shutdown`](crate::Sidecar::shutdown)).
#[derive(Debug)]
pub struct ShutdownSignals {
    terminate: Signal,
    interrupt: Signal,
}

impl ShutdownSignals {
    /// Catches SIGTERM and SIGINT from now on.
    ///
    /// # Errors
    /// If a handler cannot be installed.
    ///
    /// # Panics
    /// Outside a tokio runtime with I/O enabled.
    pub fn install() -> std::io::Result<ShutdownSignals> {
        Ok(ShutdownSignals { terminate: signal(SignalKind::terminate())?, interrupt: signal(SignalKind::interrupt())? })
    }

    /// Waits for the next SIGTERM or SIGINT and returns its name.
    ///
    /// # Cancel safety
    /// Cancel-safe: a signal that arrives while nobody waits is kept for the
    /// next call.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            Some(()) = self.terminate.recv() => "SIGTERM",
            Some(()) = self.interrupt.recv() => "SIGINT",
            // Both streams ended (the runtime is shutting down): no signal will come.
            else => std::future::pending().await,
        }
    }
}
