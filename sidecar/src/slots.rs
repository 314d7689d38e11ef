//! Execution slots and the counters that bound the sidecar's work — the ONE
//! owner of a slot's lifecycle: taken when a run is admitted and first gets a
//! slot, given back while the run waits on tool results, retaken (FIFO) when
//! the results arrive, freed when the run ends.
//!
//! Every count here is an RAII guard, so a run that ends in any way —
//! finished, cancelled, dropped — frees what it held.

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

/// A run admitted to the sidecar: it counts as live until dropped, and as
/// queued until it first gets an execution slot.
#[derive(Debug)]
pub(crate) struct Admission {
    capacity: Arc<Capacity>,
    queued: Option<GaugePlace>,
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

    /// Gives the slot back while `wait` runs — the script cannot compute
    /// while it waits — then queues (FIFO) for a slot again. The run keeps
    /// its `place` among the waiting runs until it has a slot again, because
    /// until then it still holds its instance.
    ///
    /// # Cancel safety
    /// Dropping the future drops `place` and leaves the run without a slot;
    /// only a run that is ending drops it.
    pub(crate) async fn give_back_while<F: Future>(&mut self, place: GaugePlace, wait: F) -> F::Output {
        self.permit = None;
        let output = wait.await;
        self.permit = Some(self.capacity.permit().await);
        drop(place);
        output
    }
}

/// Why a run was not admitted: the admission queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueFull(pub(crate) usize);

impl Capacity {
    /// `slots` execution slots, at most `max_queued` runs queued for one and
    /// `max_waiting` runs waiting on tool results.
    pub(crate) fn new(slots: usize, max_queued: usize, max_waiting: usize) -> Self {
        let slots = slots.max(1);
        Capacity {
            slots: Arc::new(Semaphore::new(slots)),
            slot_count: slots,
            queued: Gauge::new(max_queued),
            waiting: Gauge::new(max_waiting),
            live: Gauge::new(usize::MAX),
            admitted: AtomicU64::new(0),
        }
    }

    /// Admits a run, queued for its first slot.
    ///
    /// # Errors
    /// [`QueueFull`] when `max_queued` runs already wait for a first slot.
    pub(crate) fn admit(self: &Arc<Self>) -> Result<Admission, QueueFull> {
        let queued = self.queued.try_enter().ok_or(QueueFull(self.queued.cap))?;
        // `live` is uncapped, so entering never fails; a `None` would mean
        // `usize::MAX` runs, which the admission queue rules out.
        let live = self.live.try_enter().ok_or(QueueFull(self.queued.cap))?;
        self.admitted.fetch_add(1, Ordering::AcqRel);
        Ok(Admission { capacity: self.clone(), queued: Some(queued), _live: live })
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
        let capacity = Arc::new(Capacity::new(1, 1, 1));
        let mut admission = capacity.admit().unwrap();
        assert_eq!(capacity.admit().unwrap_err(), QueueFull(1), "one run may queue");
        assert_eq!(capacity.admitted(), 1, "a refused run was never admitted");
        let mut slot = admission.first_slot().await;
        assert_eq!((capacity.free_slots(), capacity.queued(), capacity.live()), (0, 0, 1));

        let place = slot.try_wait().unwrap();
        assert!(slot.try_wait().is_none(), "one run may wait");
        let free_while_waiting = slot.give_back_while(place, async { capacity.free_slots() }).await;
        assert_eq!(free_while_waiting, 1, "the slot is given back during the wait");
        assert_eq!((capacity.free_slots(), capacity.waiting()), (0, 0), "and retaken after it");

        drop(slot);
        drop(admission);
        assert_eq!((capacity.free_slots(), capacity.live()), (1, 0));
    }
}
