//! The guest memory limit.

use crate::error::LimitExceeded;
use wasmtime::ResourceLimiter;

/// Caps a guest's linear memory and tables, and records its peak memory.
///
/// Growing past the cap ends the guest with [`LimitExceeded::Memory`] rather
/// than failing the allocation: a guest that cannot allocate can only abort,
/// and the error then names the limit instead of a bare trap.
#[derive(Debug)]
pub struct MemoryLimiter {
    max_bytes: usize,
    peak_bytes: usize,
}

/// The most table elements a guest may have; the Python runtime uses a few
/// thousand.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl MemoryLimiter {
    /// A limiter allowing `max_bytes` of linear memory.
    pub fn new(max_bytes: u64) -> Self {
        MemoryLimiter { max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX), peak_bytes: 0 }
    }

    /// The largest linear memory the guest has had.
    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            return Err(LimitExceeded::Memory { limit_bytes: self.max_bytes as u64 }.into());
        }
        self.peak_bytes = self.peak_bytes.max(desired);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}
