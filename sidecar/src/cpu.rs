//! CPU time of a script's own computation.
//!
//! The guest runs as a future. [`Metered`] reads the thread's CPU clock around
//! every poll and adds the difference to a [`CpuMeter`], so time the run spends
//! parked — waiting on a tool result, queued for a slot, preempted by another
//! run — never counts. The engine's epoch callback asks the meter mid-poll
//! ([`CpuMeter::used`]) and interrupts a guest over its budget.
//!
//! Why not fuel: fuel counts instructions, not time, so a "10 s" budget would
//! be a guess, and it costs 10–35% of guest speed. An epoch tick costs almost
//! nothing and this clock is exact.

use nix::time::{ClockId, clock_gettime};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

/// The CPU time one run's guest code has used.
#[derive(Debug, Default)]
pub(crate) struct CpuMeter {
    /// Nanoseconds used in polls that have ended.
    finished_ns: AtomicU64,
    /// The thread CPU clock when the current poll began; 0 between polls.
    poll_started_ns: AtomicU64,
}

fn thread_cpu_ns() -> u64 {
    // The thread CPU clock exists on every Linux; if it ever failed, counting
    // nothing errs toward the wall deadline, which still stops the run.
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

impl CpuMeter {
    /// CPU time used so far, including the poll running now (when called from
    /// the thread that runs it, as the epoch callback is).
    pub(crate) fn used(&self) -> Duration {
        let started = self.poll_started_ns.load(Ordering::Relaxed);
        let current = if started == 0 { 0 } else { thread_cpu_ns().saturating_sub(started) };
        Duration::from_nanos(self.finished_ns.load(Ordering::Relaxed) + current)
    }
}

/// A future whose polls are charged to a [`CpuMeter`].
#[derive(Debug)]
pub(crate) struct Metered<F> {
    inner: Pin<Box<F>>,
    meter: Arc<CpuMeter>,
}

impl<F> Metered<F> {
    /// Charges every poll of `inner` to `meter`.
    pub(crate) fn new(inner: F, meter: Arc<CpuMeter>) -> Self {
        Metered { inner: Box::pin(inner), meter }
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let started = thread_cpu_ns().max(1);
        self.meter.poll_started_ns.store(started, Ordering::Relaxed);
        let result = self.inner.as_mut().poll(cx);
        let spent = thread_cpu_ns().saturating_sub(started);
        self.meter.poll_started_ns.store(0, Ordering::Relaxed);
        self.meter.finished_ns.fetch_add(spent, Ordering::Relaxed);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiting_is_not_charged_but_computing_is() {
        let meter = Arc::new(CpuMeter::default());
        Metered::new(tokio::time::sleep(Duration::from_millis(200)), meter.clone()).await;
        assert!(meter.used() < Duration::from_millis(50), "sleeping used {:?}", meter.used());

        // Spin until this thread has used 100 ms of CPU, however busy the machine is.
        let spin = async {
            let start = thread_cpu_ns();
            while thread_cpu_ns() - start < 100_000_000 {
                std::hint::black_box(0);
            }
        };
        Metered::new(spin, meter.clone()).await;
        assert!(meter.used() >= Duration::from_millis(100), "spinning used {:?}", meter.used());
    }
}
