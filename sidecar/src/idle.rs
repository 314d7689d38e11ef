//! Gives memory back once the sidecar has been idle for
//! [`SidecarConfig::idle_release`](crate::SidecarConfig::idle_release).
//!
//! After a burst, wasmtime's instance pool keeps every slot that was in use
//! at the peak resident — its linear memory up to `pool_keep_resident_bytes`,
//! its table and its fiber stack — and glibc's malloc keeps the arenas the
//! burst grew: 1,000 runs at once leave about 600 MiB. wasmtime 48 has no
//! call that decommits free slots (`max_unused_warm_slots` only steers which
//! slot a new instance takes), so the releaser builds a fresh engine from the
//! compile cache and drops the old one, whose pool is then unmapped, and
//! trims malloc.
//!
//! Ownership: one thread per sidecar ([`spawn`]), holding only a `Weak` to
//! the sidecar's state; it ends within a tick of that state being dropped.
//! Runs never wait on it: a run admitted while it rebuilds takes the engine
//! in place, the fresh engine is dropped unused, and the warm pool stays.

use crate::engine::SandboxEngine;
use crate::loader::EngineState;
use crate::service::Shared;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Starts the releaser of `shared`, unless `after` is zero (never release).
///
/// # Errors
/// If the thread cannot be started.
pub(crate) fn spawn(shared: Weak<Shared>, after: Duration) -> std::io::Result<()> {
    if after.is_zero() {
        return Ok(());
    }
    // Late by at most a quarter of `after` (a second at the default).
    let tick = (after / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    std::thread::Builder::new().name("tether-idle-release".into()).spawn(move || {
        let mut clock: Option<IdleClock> = None;
        loop {
            std::thread::sleep(tick);
            let Some(shared) = shared.upgrade() else { return };
            let (live, admitted) = (shared.capacity.live(), shared.capacity.admitted());
            let clock = clock.get_or_insert_with(|| IdleClock::new(after, Instant::now(), admitted));
            if clock.due(Instant::now(), live, admitted) {
                release(&shared);
            }
        }
    })?;
    Ok(())
}

/// When an idle stretch has lasted long enough: the pure half of the
/// releaser, fed what it sees at every tick.
#[derive(Debug)]
pub(crate) struct IdleClock {
    after: Duration,
    /// Runs ever admitted, at the last look.
    admitted: u64,
    /// When the current idle stretch began: the first look that found no
    /// run; `None` while runs come.
    idle_since: Option<Instant>,
    /// Whether this stretch has had its release already.
    released: bool,
}

impl IdleClock {
    /// A clock that sees the sidecar idle from `now`, with `admitted` runs
    /// admitted so far.
    pub(crate) fn new(after: Duration, now: Instant, admitted: u64) -> Self {
        IdleClock { after, admitted, idle_since: Some(now), released: false }
    }

    /// True once per idle stretch, at the first look `after` into it. A look
    /// that finds a run in flight (`live`) or admitted since the last look
    /// (`admitted` moved, even if it has ended) ends the stretch; the next
    /// one begins at the next look that finds neither.
    pub(crate) fn due(&mut self, now: Instant, live: usize, admitted: u64) -> bool {
        if live > 0 || admitted != self.admitted {
            self.admitted = admitted;
            self.idle_since = None;
            self.released = false;
            return false;
        }
        let since = *self.idle_since.get_or_insert(now);
        if self.released || now.saturating_duration_since(since) < self.after {
            return false;
        }
        self.released = true;
        true
    }
}

/// Gives back what the idle sidecar holds: the instance pool (if a burst
/// left more warm slots than execution slots), then malloc's free memory.
fn release(shared: &Shared) {
    if shared.lifecycle.phase().is_ready()
        && let EngineState::Ready(engine) = shared.engine.state()
    {
        let warm = engine.warm_pool_slots();
        if warm as usize > shared.capacity.slot_count() {
            rebuild(shared, engine, warm);
        }
    }
    trim_malloc();
}

/// Puts a fresh engine in place of `old`, unless a run arrives meanwhile.
fn rebuild(shared: &Shared, old: Arc<SandboxEngine>, warm: u32) {
    if !old.cached() {
        tracing::info!(
            warm_slots = warm,
            "idle: keeping the instance pool, since building the engine again would compile the guests; give the sidecar a writable --cache-dir or run --prepare-cache"
        );
        return;
    }
    let admitted = shared.capacity.admitted();
    let started = Instant::now();
    let fresh = match SandboxEngine::new(&shared.config) {
        Ok(fresh) => fresh,
        Err(error) => {
            tracing::warn!(%error, "idle: cannot build a fresh engine; keeping the instance pool");
            return;
        }
    };
    if shared.capacity.live() > 0 || shared.capacity.admitted() != admitted {
        tracing::debug!("idle: runs arrived while the fresh engine was built; keeping the warm pool");
        return;
    }
    let replaced = shared.engine.replace(fresh);
    // The last reference to the old engine unless a run took it just before
    // the swap; then that run drops it when it ends.
    drop((old, replaced));
    shared.metrics.pool_released();
    tracing::info!(
        warm_slots = warm,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "idle: gave the instance pool back"
    );
}

/// Returns the free memory of every malloc arena to the kernel (glibc
/// keeps what a burst freed mapped, in the middle of its arenas too).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_malloc() {
    // SAFETY: `malloc_trim` takes each arena's lock and only releases pages
    // no allocation uses; it may be called from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators decide for themselves when to give memory back.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_malloc() {}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(30);

    #[test]
    fn due_once_per_idle_stretch_and_only_after_it_lasted() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut clock = IdleClock::new(AFTER, start, 5);
        assert!(!clock.due(at(29), 0, 5), "not yet");
        assert!(clock.due(at(30), 0, 5), "idle for `after`");
        assert!(!clock.due(at(31), 0, 5), "once per stretch");
        assert!(!clock.due(at(300), 0, 5), "still once");
        // A new run ends the stretch; the next begins when none is live.
        assert!(!clock.due(at(301), 1, 6));
        assert!(!clock.due(at(330), 0, 6), "the stretch began at 301 with the run live, idle only since 330");
        assert!(!clock.due(at(359), 0, 6));
        assert!(clock.due(at(360), 0, 6));
    }

    #[test]
    fn a_run_that_came_and_went_between_looks_ends_the_stretch() {
        let start = Instant::now();
        let mut clock = IdleClock::new(AFTER, start, 0);
        let at = |s: u64| start + Duration::from_secs(s);
        assert!(!clock.due(at(20), 0, 1), "admitted and ended between looks");
        assert!(!clock.due(at(40), 0, 1), "the stretch begins here");
        assert!(!clock.due(at(69), 0, 1));
        assert!(clock.due(at(70), 0, 1));
    }

    #[test]
    fn a_long_run_is_not_idle() {
        let start = Instant::now();
        let mut clock = IdleClock::new(AFTER, start, 1);
        for s in [10, 60, 600] {
            assert!(!clock.due(start + Duration::from_secs(s), 1, 1));
        }
        assert!(!clock.due(start + Duration::from_secs(630), 0, 1), "the run has ended: the stretch begins");
        assert!(clock.due(start + Duration::from_secs(660), 0, 1));
    }
}
