//! Step 1's counter: the turn-wide tool-call cap, ONE pool for model calls,
//! script calls and calls still in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The turn-wide cap on tool calls.
///
/// A call takes a slot when it arrives (so calls in flight count), keeps it
/// once it reaches execution, and gives it back if a later check refuses it
/// (a refused call did not use a tool). Concurrent callers can never take more
/// slots than the cap: the slot is taken with one compare-and-swap.
#[derive(Debug, Clone)]
pub struct CallBudget {
    max: u32,
    used: Arc<AtomicU32>,
}

/// A slot of the [`CallBudget`]. Dropping it gives the slot back unless
/// [`Reservation::keep`] was called.
#[derive(Debug)]
pub struct Reservation {
    used: Arc<AtomicU32>,
    kept: bool,
}

impl CallBudget {
    /// A cap of `max` calls.
    pub fn new(max: u32) -> Self {
        CallBudget { max, used: Arc::new(AtomicU32::new(0)) }
    }

    /// A cap of `max` calls of which `used` are already taken: a turn resumed
    /// from a parked run's [`TurnSnapshot`](super::TurnSnapshot).
    pub fn with_used(max: u32, used: u32) -> Self {
        CallBudget { max, used: Arc::new(AtomicU32::new(used)) }
    }

    /// The cap.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// Slots taken: calls that ran plus calls in flight.
    pub fn used(&self) -> u32 {
        self.used.load(Ordering::Acquire)
    }

    /// Takes a slot, or `None` when the cap is spent.
    pub fn try_reserve(&self) -> Option<Reservation> {
        let max = self.max;
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| Reservation { used: self.used.clone(), kept: false })
    }
}

impl Reservation {
    /// Keeps the slot for good: the call reached execution.
    pub fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.kept {
            self.used.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_in_flight_count_and_refused_ones_come_back() {
        let budget = CallBudget::new(2);
        let first = budget.try_reserve().unwrap();
        let second = budget.try_reserve().unwrap();
        assert!(budget.try_reserve().is_none(), "two in flight fill a cap of two");
        drop(second);
        assert_eq!(budget.used(), 1, "a refused call gives its slot back");
        first.keep();
        let third = budget.try_reserve().unwrap();
        third.keep();
        assert_eq!(budget.used(), 2);
        assert!(budget.try_reserve().is_none(), "kept slots stay taken");
    }

    #[test]
    fn concurrent_reservations_never_overspend() {
        let budget = CallBudget::new(50);
        let kept = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..20 {
                        if let Some(r) = budget.try_reserve() {
                            r.keep();
                            kept.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(kept.load(Ordering::Relaxed), 50);
        assert_eq!(budget.used(), 50);
    }
}
