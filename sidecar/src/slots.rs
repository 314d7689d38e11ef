//! Execution slots and the counters that bound the sidecar's work — the ONE
//! owner of a slot's lifecycle: taken when a run is admitted and first gets a
//! slot, given back while the run waits on tool results, retaken (FIFO) when
//! the results arrive, freed when the run ends.
//!
//! Every count here is an RAII guard, so a run that ends in any way —
//! finished, cancelled, dropped — frees what it held.
//!
//! Host memory a run holds outside its guest is bounded here too: the bytes
//! of its `Start` ([`StartBytes`], `--max-start-mib`), and the streams that
//! have not sent a `Start` yet are counted ([`Capacity::awaiting_start`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The sidecar's execution slots and its bounded queues.
#[derive(Debug)]
pub(crate) struct Capacity {
    slots: Arc<Semaphore>,
    slot_count: usize,
    queued: Gauge,
    waiting: Gauge,
    live: Gauge,
    /// Run streams that have not delivered their `Start` yet.
    awaiting_start: Gauge,
    /// Bytes of `Start` messages held for runs.
    start_bytes: ByteBudget,
    /// Runs ever admitted: a change since the last look means activity, even
    /// a run that came and went in between.
    admitted: AtomicU64,
}

/// A place in a bounded count; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct GaugePlace(Gauge);

impl Drop for GaugePlace {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A count with an optional cap, shared by clones.
#[derive(Debug, Clone)]
pub(crate) struct Gauge {
    count: Arc<AtomicUsize>,
    cap: usize,
}

impl Gauge {
    fn new(cap: usize) -> Self {
        Gauge { count: Arc::new(AtomicUsize::new(0)), cap }
    }

    /// Takes a place whatever the cap (for the uncapped counts).
    fn enter(&self) -> GaugePlace {
        self.count.fetch_add(1, Ordering::AcqRel);
        GaugePlace(self.clone())
    }

    /// Takes a place if fewer than the cap are taken.
    pub(crate) fn try_enter(&self) -> Option<GaugePlace> {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.cap).then_some(n + 1))
            .ok()
            .map(|_| GaugePlace(self.clone()))
    }

    /// Places taken now.
    pub(crate) fn current(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
}

/// A count of bytes with a cap, shared by clones.
#[derive(Debug, Clone)]
struct ByteBudget {
    used: Arc<AtomicU64>,
    cap: u64,
}

/// Bytes charged to a [`ByteBudget`]; dropping them gives them back.
#[derive(Debug)]
struct BytesHeld {
    budget: ByteBudget,
    bytes: u64,
}

impl Drop for BytesHeld {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// What a run's `Start` is charged to the sidecar's budget of `Start` bytes:
/// twice its size until the run first executes (the receive buffer, and the
/// start document the guest reads), once after (the receive buffer, which
/// lives as long as the stream). Dropping it gives everything back.
#[derive(Debug)]
pub(crate) struct StartBytes {
    _buffer: BytesHeld,
    document: Option<BytesHeld>,
}

/// Why a run was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The admission queue is full: this many runs are queued.
    QueueFull(usize),
    /// Its `Start` would pass the budget of `Start` bytes.
    StartBytes {
        /// Bytes already held for other runs.
        held: u64,
        /// Bytes this run would hold.
        asked: u64,
        /// The budget.
        budget: u64,
    },
}

/// A run admitted to the sidecar: it counts as live until dropped, and as
/// queued until it first gets an execution slot.
#[derive(Debug)]
pub(crate) struct Admission {
    capacity: Arc<Capacity>,
    queued: Option<GaugePlace>,
    start: StartBytes,
    _live: GaugePlace,
}

impl Admission {
    /// Waits (FIFO) for the run's first execution slot; the run stops
    /// counting as queued once it has one.
    ///
    /// # Cancel safety
    /// Cancelling the wait loses the run's place in the slot queue.
    pub(crate) async fn first_slot(&mut self) -> ExecutionSlot {
        let permit = self.capacity.permit().await;
        self.queued = None;
        // The start document goes to the guest now.
        self.start.document = None;
        ExecutionSlot { capacity: self.capacity.clone(), permit: Some(permit) }
    }
}

/// The execution slot of a run whose guest is executing. Dropping it gives the
/// slot back.
#[derive(Debug)]
pub(crate) struct ExecutionSlot {
    capacity: Arc<Capacity>,
    permit: Option<OwnedSemaphorePermit>,
}

impl ExecutionSlot {
    /// Takes a place among the runs waiting on tool results, or `None` when
    /// that cap is full.
    pub(crate) fn try_wait(&self) -> Option<GaugePlace> {
        self.capacity.waiting.try_enter()
    }

    /// Gives the slot back while `wait` runs, then queues (FIFO) for a slot
    /// again: for a run that waits for room on its stream, which computes
    /// nothing meanwhile either.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the run without a slot; only a run that
    /// is ending drops it.
    pub(crate) async fn give_back_during<F: Future>(&mut self, wait: F) -> F::Output {
        self.permit = None;
        let output = wait.await;
        self.permit = Some(self.capacity.permit().await);
        output
    }
}

impl Capacity {
    /// `slots` execution slots, at most `max_queued` runs queued for one and
    /// `max_waiting` runs waiting on tool results, and at most
    /// `max_start_bytes` of `Start` messages held for runs.
    pub(crate) fn new(slots: usize, max_queued: usize, max_waiting: usize, max_start_bytes: u64) -> Self {
        let slots = slots.max(1);
        Capacity {
            slots: Arc::new(Semaphore::new(slots)),
            slot_count: slots,
            queued: Gauge::new(max_queued),
            waiting: Gauge::new(max_waiting),
            live: Gauge::new(usize::MAX),
            awaiting_start: Gauge::new(usize::MAX),
            start_bytes: ByteBudget { used: Arc::new(AtomicU64::new(0)), cap: max_start_bytes },
            admitted: AtomicU64::new(0),
        }
    }

    /// Charges a `Start` of `bytes` (its size on the wire) to the budget of
    /// `Start` bytes, twice (see [`StartBytes`]).
    ///
    /// # Errors
    /// [`Refused::StartBytes`] when that would pass the budget.
    pub(crate) fn hold_start(&self, bytes: u64) -> Result<StartBytes, Refused> {
        let budget = &self.start_bytes;
        let asked = bytes.saturating_mul(2);
        budget
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(asked).filter(|&after| after <= budget.cap)
            })
            .map_err(|held| Refused::StartBytes { held, asked, budget: budget.cap })?;
        let held = |bytes| BytesHeld { budget: budget.clone(), bytes };
        Ok(StartBytes { _buffer: held(bytes), document: Some(held(asked - bytes)) })
    }

    /// Admits a run whose `Start` holds `start`, queued for its first slot.
    ///
    /// # Errors
    /// [`Refused::QueueFull`] when `max_queued` runs already wait for a first slot.
    pub(crate) fn admit(self: &Arc<Self>, start: StartBytes) -> Result<Admission, Refused> {
        let queued = self.queued.try_enter().ok_or(Refused::QueueFull(self.queued.cap))?;
        let live = self.live.enter();
        self.admitted.fetch_add(1, Ordering::AcqRel);
        Ok(Admission { capacity: self.clone(), queued: Some(queued), start, _live: live })
    }

    /// Counts a run stream as waiting for its `Start` until the place is dropped.
    pub(crate) fn awaiting_start(&self) -> GaugePlace {
        self.awaiting_start.enter()
    }

    /// Run streams that have not delivered their `Start` yet.
    pub(crate) fn streams_awaiting_start(&self) -> usize {
        self.awaiting_start.current()
    }

    /// Bytes of `Start` messages held for runs now.
    pub(crate) fn start_bytes(&self) -> u64 {
        self.start_bytes.used.load(Ordering::Acquire)
    }

    async fn permit(&self) -> OwnedSemaphorePermit {
        match self.slots.clone().acquire_owned().await {
            Ok(permit) => permit,
            // The semaphore lives as long as `self` and is never closed.
            Err(_) => unreachable!("the slot semaphore is never closed"),
        }
    }

    /// The number of execution slots.
    pub(crate) fn slot_count(&self) -> usize {
        self.slot_count
    }

    /// Slots free right now.
    pub(crate) fn free_slots(&self) -> usize {
        self.slots.available_permits()
    }

    /// Runs admitted but waiting for their first slot.
    pub(crate) fn queued(&self) -> usize {
        self.queued.current()
    }

    /// Runs waiting on tool results.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.current()
    }

    /// Runs admitted and not yet finished.
    pub(crate) fn live(&self) -> usize {
        self.live.current()
    }

    /// Runs admitted since the sidecar started.
    pub(crate) fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauge_places_are_capped_and_freed_on_drop() {
        let gauge = Gauge::new(2);
        let a = gauge.try_enter();
        let b = gauge.try_enter();
        assert!(a.is_some() && b.is_some());
        assert!(gauge.try_enter().is_none(), "the cap holds");
        drop(a);
        assert_eq!(gauge.current(), 1);
        assert!(gauge.try_enter().is_some());
    }

    #[tokio::test]
    async fn a_run_gives_its_slot_back_while_it_waits_and_frees_everything_when_dropped() {
        let capacity = Arc::new(Capacity::new(1, 1, 1, 1000));
        let mut admission = capacity.admit(capacity.hold_start(100).unwrap()).unwrap();
        assert_eq!(capacity.start_bytes(), 200, "the receive buffer and the start document");
        let refused = capacity.admit(capacity.hold_start(100).unwrap()).unwrap_err();
        assert_eq!(refused, Refused::QueueFull(1), "one run may queue");
        assert_eq!(capacity.start_bytes(), 200, "a refused run holds nothing");
        assert_eq!(capacity.admitted(), 1, "a refused run was never admitted");
        let mut slot = admission.first_slot().await;
        assert_eq!((capacity.free_slots(), capacity.queued(), capacity.live()), (0, 0, 1));
        assert_eq!(capacity.start_bytes(), 100, "the start document went to the guest");

        let place = slot.try_wait().unwrap();
        assert!(slot.try_wait().is_none(), "one run may wait");
        let free_while_waiting = slot.give_back_during(async { capacity.free_slots() }).await;
        assert_eq!(free_while_waiting, 1, "the slot is given back during the wait");
        assert_eq!((capacity.free_slots(), capacity.waiting()), (0, 1), "and retaken after it, the place still held");
        drop(place);
        assert_eq!(capacity.waiting(), 0);

        drop(slot);
        drop(admission);
        assert_eq!((capacity.free_slots(), capacity.live(), capacity.start_bytes()), (1, 0, 0));
    }

    #[test]
    fn a_start_past_the_budget_is_refused_and_says_what_is_held() {
        let capacity = Capacity::new(1, 10, 1, 1000);
        let first = capacity.hold_start(400).unwrap();
        assert_eq!(capacity.hold_start(101).unwrap_err(), Refused::StartBytes { held: 800, asked: 202, budget: 1000 });
        assert!(capacity.hold_start(100).is_ok(), "exactly the budget is allowed (and given back at once)");
        drop(first);
        assert_eq!(capacity.start_bytes(), 0);
        let place = capacity.awaiting_start();
        assert_eq!(capacity.streams_awaiting_start(), 1);
        drop(place);
        assert_eq!(capacity.streams_awaiting_start(), 0);
    }
}
