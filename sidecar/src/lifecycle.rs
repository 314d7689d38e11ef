//! The sidecar's life — loading, ready, draining, stopped — and the one owner
//! of its runs.
//!
//! Ownership: every run is tracked by [`Lifecycle`]'s [`TaskTracker`], as a
//! task of its own or as the future its response stream drives. A run ends
//! on its own (see `service.rs`) or when [`Lifecycle::stop`] fires
//! its token; [`Lifecycle::drain`] waits for the tasks first, up to its
//! deadline.
//! The phase moves only forward, so a late "loaded" never undoes a drain.

use std::future::Future;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Where a sidecar is in its life. Phases only move forward, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Compiling its guests, or loading them from the compile cache. New runs
    /// are refused with UNAVAILABLE; readiness is NOT_SERVING.
    Loading,
    /// Admitting runs; readiness is SERVING.
    Ready,
    /// A drain began: runs in flight go on, new runs are refused with
    /// UNAVAILABLE; readiness is NOT_SERVING.
    Draining,
    /// Every run has ended; the listeners are closing.
    Stopped,
}

impl Phase {
    /// True in the one phase that admits runs ([`Phase::Ready`]).
    pub fn is_ready(self) -> bool {
        self == Phase::Ready
    }
}

/// How a drain went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainReport {
    /// Runs in flight when the drain began.
    pub runs_at_start: usize,
    /// Runs still going at the deadline (or when the drain was cut short by
    /// [`Sidecar::shutdown`](crate::Sidecar::shutdown)), which were cancelled
    /// with `Finished` status CANCELLED, "sidecar shutting down".
    pub cancelled: usize,
    /// How long the drain took, cancellations included.
    pub took: Duration,
}

/// The sidecar's phase and its runs.
#[derive(Debug)]
pub(crate) struct Lifecycle {
    phase: watch::Sender<Phase>,
    runs: TaskTracker,
    cancel: CancellationToken,
}

impl Lifecycle {
    /// A lifecycle starting in `phase`.
    pub(crate) fn new(phase: Phase) -> Self {
        Lifecycle { phase: watch::Sender::new(phase), runs: TaskTracker::new(), cancel: CancellationToken::new() }
    }

    /// The phase now.
    pub(crate) fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// A receiver that sees every phase change (health watches follow it).
    pub(crate) fn subscribe(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// Moves to `phase` if it is later than the current one; returns whether
    /// it moved.
    pub(crate) fn advance_to(&self, phase: Phase) -> bool {
        let moved = self.phase.send_if_modified(|current| {
            let later = phase > *current;
            if later {
                *current = phase;
            }
            later
        });
        if moved {
            tracing::info!(?phase, "sidecar phase changed");
        }
        moved
    }

    /// `run`, counted as a run until it completes or is dropped: drains and
    /// shutdowns wait for it.
    pub(crate) fn track_run<F: Future<Output = ()>>(&self, run: F) -> impl Future<Output = ()> + use<F> {
        self.runs.track_future(run)
    }

    /// True once runs must end now (see [`Lifecycle::runs_cancelled`]).
    pub(crate) fn cancelling(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Completes when runs must end now (shutdown, or a drain past its
    /// deadline). A run `select!`s on it.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only waits.
    pub(crate) async fn runs_cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// Stops admitting runs, lets the runs in flight go on until they end or
    /// `deadline` passes (or [`Lifecycle::stop`] is called meanwhile), then
    /// cancels the rest and waits until every run has let go of its
    /// resources. `live` counts the runs in flight.
    pub(crate) async fn drain(&self, deadline: Duration, live: impl Fn() -> usize) -> DrainReport {
        let began = Instant::now();
        self.advance_to(Phase::Draining);
        let runs_at_start = live();
        tracing::info!(runs = runs_at_start, deadline_s = deadline.as_secs_f64(), "draining: new runs are refused");
        self.runs.close();
        let cancelled = tokio::select! {
            () = self.runs.wait() => 0,
            () = self.cancel.cancelled() => live(),
            () = tokio::time::sleep(deadline) => live(),
        };
        if cancelled > 0 {
            tracing::warn!(runs = cancelled, "drain cut short: cancelling the runs still going");
        }
        self.stop().await;
        let report = DrainReport { runs_at_start, cancelled, took: began.elapsed() };
        tracing::info!(?report, "drained");
        report
    }

    /// Ends every run now (each gets `Finished` CANCELLED, "sidecar shutting
    /// down"), waits until all have let go of their resources, and moves to
    /// [`Phase::Stopped`].
    pub(crate) async fn stop(&self) {
        self.cancel.cancel();
        self.runs.close();
        self.runs.wait().await;
        self.advance_to(Phase::Stopped);
    }

    /// Completes once the sidecar has stopped.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only waits.
    pub(crate) async fn stopped(&self) {
        let mut phase = self.phase.subscribe();
        // The sender lives in `self`, so `wait_for` cannot fail while we wait.
        let _ = phase.wait_for(|phase| *phase == Phase::Stopped).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_only_move_forward() {
        let lifecycle = Lifecycle::new(Phase::Loading);
        assert!(lifecycle.advance_to(Phase::Draining));
        assert!(!lifecycle.advance_to(Phase::Ready), "a guest loaded during a drain does not make it ready");
        assert_eq!(lifecycle.phase(), Phase::Draining);
        assert!(!lifecycle.phase().is_ready());
    }

    #[tokio::test]
    async fn a_drain_waits_for_runs_that_end_in_time() {
        let lifecycle = Lifecycle::new(Phase::Ready);
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(lifecycle.track_run(async move {
            let _ = released.await;
        }));
        let drain = lifecycle.drain(Duration::from_secs(600), || 1);
        let (report, ()) = tokio::join!(drain, async move {
            let _ = release.send(());
        });
        assert_eq!(
            (report.runs_at_start, report.cancelled),
            (1, 0),
            "the run ended on its own, long before the deadline"
        );
        assert_eq!(lifecycle.phase(), Phase::Stopped);
    }

    #[tokio::test]
    async fn a_drain_cancels_what_outlasts_its_deadline() {
        let lifecycle = std::sync::Arc::new(Lifecycle::new(Phase::Ready));
        let run = lifecycle.clone();
        tokio::spawn(lifecycle.track_run(async move { run.runs_cancelled().await }));
        let report = lifecycle.drain(Duration::from_millis(20), || 1).await;
        assert_eq!(report.cancelled, 1);
        assert!(lifecycle.cancel.is_cancelled());
        assert_eq!(lifecycle.phase(), Phase::Stopped);
    }
}
