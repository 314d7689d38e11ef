//! Guest memory: each run's cap, and the sidecar's budget for all runs together.

use crate::error::LimitExceeded;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use wasmtime::ResourceLimiter;

/// The guest memory all runs may hold together. Without it, the runs waiting
/// on tools (each under its own cap, each keeping its memory while it waits)
/// could add up past what the host has, and one process crash ends them all.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    used: AtomicU64,
    total: u64,
}

impl MemoryBudget {
    /// A budget of `total` bytes.
    pub(crate) fn new(total: u64) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget { used: AtomicU64::new(0), total })
    }

    /// Bytes held by live runs now.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    fn try_take(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&after| after <= self.total)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// Caps a guest's linear memory and tables, charges its memory to the
/// sidecar's [`MemoryBudget`] (given back on drop), and records its peak.
///
/// Growing past either ends the guest with a [`LimitExceeded`] rather than
/// failing the allocation: a guest that cannot allocate can only abort, and
/// the error then names the limit instead of a bare trap.
#[derive(Debug)]
pub(crate) struct MemoryLimiter {
    max_bytes: usize,
    /// Bytes taken from the budget: the memory's size after its last growth.
    /// (A growth that fails after approval stays charged until the run ends.)
    charged: usize,
    budget: Arc<MemoryBudget>,
}

/// The most table elements a guest may have; the Python runtime uses a few
/// thousand.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl MemoryLimiter {
    /// A limiter allowing `max_bytes` of linear memory out of `budget`.
    pub(crate) fn new(max_bytes: u64, budget: Arc<MemoryBudget>) -> Self {
        MemoryLimiter { max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX), charged: 0, budget }
    }

    /// The largest linear memory the guest has had (memories never shrink).
    pub(crate) fn peak_bytes(&self) -> usize {
        self.charged
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            return Err(LimitExceeded::Memory { limit_bytes: self.max_bytes as u64 }.into());
        }
        let more = desired.saturating_sub(self.charged) as u64;
        if !self.budget.try_take(more) {
            return Err(LimitExceeded::SidecarMemory { total_bytes: self.budget.total }.into());
        }
        self.charged = self.charged.max(desired);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

impl Drop for MemoryLimiter {
    fn drop(&mut self) {
        self.budget.give_back(self.charged as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_share_the_budget_and_give_it_back_when_dropped() {
        let budget = MemoryBudget::new(100);
        let mut a = MemoryLimiter::new(80, budget.clone());
        let mut b = MemoryLimiter::new(80, budget.clone());
        assert!(a.memory_growing(0, 60, None).is_ok());
        let refused = b.memory_growing(0, 60, None).unwrap_err();
        assert!(matches!(refused.downcast_ref(), Some(LimitExceeded::SidecarMemory { total_bytes: 100 })));
        assert!(a.memory_growing(60, 90, None).is_err(), "a run's own cap holds first");
        drop(a);
        assert_eq!(budget.used(), 0);
        assert!(b.memory_growing(0, 60, None).is_ok());
        assert_eq!(budget.used(), 60);
    }
}
