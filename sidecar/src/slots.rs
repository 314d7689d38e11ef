//! Execution slots and the counters that bound the sidecar's work.
//!
//! A run holds a [`SlotPermit`] only while its guest code executes: it gives
//! the slot back while it waits on tool results and queues again (FIFO) for
//! one when the results arrive. Every count here is an RAII guard, so a run
//! that ends in any way — finished, cancelled, dropped — frees what it held.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The sidecar's execution slots and its bounded queues.
#[derive(Debug)]
pub struct Capacity {
    slots: Arc<Semaphore>,
    slot_count: usize,
    queued: Gauge,
    waiting: Gauge,
    live: Gauge,
}

/// A permit to execute guest code; dropping it gives the slot back.
#[derive(Debug)]
pub struct SlotPermit(#[allow(dead_code)] OwnedSemaphorePermit);

/// A place in a bounded count; dropping it frees the place.
#[derive(Debug)]
pub struct GaugePlace(Gauge);

impl Drop for GaugePlace {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A count with an optional cap, shared by clones.
#[derive(Debug, Clone)]
pub struct Gauge {
    count: Arc<AtomicUsize>,
    cap: usize,
}

impl Gauge {
    fn new(cap: usize) -> Self {
        Gauge { count: Arc::new(AtomicUsize::new(0)), cap }
    }

    /// Takes a place if fewer than the cap are taken.
    pub fn try_enter(&self) -> Option<GaugePlace> {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.cap).then_some(n + 1))
            .ok()
            .map(|_| GaugePlace(self.clone()))
    }

    /// Places taken now.
    pub fn current(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
}

impl Capacity {
    /// `slots` execution slots, at most `max_queued` runs queued for one and
    /// `max_waiting` runs waiting on tool results.
    pub fn new(slots: usize, max_queued: usize, max_waiting: usize) -> Self {
        let slots = slots.max(1);
        Capacity {
            slots: Arc::new(Semaphore::new(slots)),
            slot_count: slots,
            queued: Gauge::new(max_queued),
            waiting: Gauge::new(max_waiting),
            live: Gauge::new(usize::MAX),
        }
    }

    /// Waits for an execution slot, in arrival order.
    ///
    /// # Cancel safety
    /// Cancelling the wait loses the run's place in the queue and takes nothing.
    pub async fn acquire_slot(&self) -> SlotPermit {
        match self.slots.clone().acquire_owned().await {
            Ok(permit) => SlotPermit(permit),
            // The semaphore lives as long as `self` and is never closed.
            Err(_) => unreachable!("the slot semaphore is never closed"),
        }
    }

    /// The number of execution slots.
    pub fn slot_count(&self) -> usize {
        self.slot_count
    }

    /// Slots free right now.
    pub fn free_slots(&self) -> usize {
        self.slots.available_permits()
    }

    /// Runs admitted but waiting for their first slot.
    pub fn queued(&self) -> &Gauge {
        &self.queued
    }

    /// Runs waiting on tool results.
    pub fn waiting(&self) -> &Gauge {
        &self.waiting
    }

    /// Runs admitted and not yet finished.
    pub fn live(&self) -> &Gauge {
        &self.live
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
    async fn slots_are_given_back_on_drop() {
        let capacity = Capacity::new(1, 8, 8);
        let permit = capacity.acquire_slot().await;
        assert_eq!(capacity.free_slots(), 0);
        drop(permit);
        assert_eq!(capacity.free_slots(), 1);
    }
}
