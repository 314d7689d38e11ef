//! CPU time of a script's own computation.
//!
//! The guest runs as a future. [`Metered`] reads the thread's CPU clock when
//! a poll begins and adds what the poll used to a [`CpuMeter`], so time the
//! run spends parked — waiting on a tool result, queued for a slot, preempted
//! by another run — never counts. The engine's epoch callback asks the meter
//! mid-poll ([`CpuMeter::used`]) and interrupts a guest over its budget.
//!
//! The thread CPU clock is a system call (no vDSO), and a tool call makes two
//! polls (the guest resumed with a result and suspended on its next call,
//! then the wake its own result delivery caused). A poll shorter than
//! [`SHORT_POLL`] on the monotonic clock (vDSO, no system call) is charged
//! that wall time instead of a second read: never less than the CPU it used
//! (a thread uses at most one CPU-second per second), more only by a
//! preemption inside those few microseconds. A longer poll — a guest that
//! computes — is charged exactly.
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
use std::time::{Duration, Instant};

/// Polls shorter than this (wall time) are charged their wall time instead
/// of a second read of the thread CPU clock: 50 µs.
pub(crate) const SHORT_POLL: Duration = Duration::from_micros(50);

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
    /// A meter that has counted `used` already: a resumed run's CPU time
    /// before it parked.
    pub(crate) fn starting_at(used: Duration) -> Self {
        CpuMeter { finished_ns: AtomicU64::new(used.as_nanos() as u64), poll_started_ns: AtomicU64::new(0) }
    }

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
        let wall = Instant::now();
        self.meter.poll_started_ns.store(started, Ordering::Relaxed);
        let result = self.inner.as_mut().poll(cx);
        let wall = wall.elapsed();
        let spent = if wall < SHORT_POLL { wall.as_nanos() as u64 } else { thread_cpu_ns().saturating_sub(started) };
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

    /// A future that spins for `each` of thread CPU time per poll, `polls` times.
    struct ShortPolls {
        each: u64,
        polls: u32,
    }

    impl Future for ShortPolls {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let start = thread_cpu_ns();
            while thread_cpu_ns() - start < self.each {
                std::hint::black_box(0);
            }
            self.polls -= 1;
            if self.polls == 0 {
                return Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[test]
    fn short_polls_are_never_charged_less_than_they_used() {
        let meter = Arc::new(CpuMeter::default());
        // 2,000 polls of 10 µs each: every one below `SHORT_POLL` unless preempted.
        let polls = ShortPolls { each: 10_000, polls: 2000 };
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let before = thread_cpu_ns();
        let wall = Instant::now();
        runtime.block_on(Metered::new(polls, meter.clone()));
        let (used, wall) = (Duration::from_nanos(thread_cpu_ns() - before), wall.elapsed());
        let charged = meter.used();
        assert!(charged >= Duration::from_millis(20), "2,000 polls of 10 µs were charged {charged:?}");
        // Never more than the wall time they took, never much less than the
        // CPU the whole loop used (the runtime's own work between polls is
        // the difference).
        assert!(charged <= wall, "charged {charged:?} in {wall:?}");
        assert!(charged >= used.mul_f64(0.5), "charged {charged:?} of {used:?} used");
    }
}
