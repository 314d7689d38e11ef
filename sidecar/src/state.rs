//! What a run's `Store` holds.

use crate::abi::{AbiView, HostLink};
use crate::memory::MemoryLimiter;
use wasmtime_wasi::p1::WasiP1Ctx;

/// The host state of one run, owned by its `Store` and dropped with it.
pub(crate) struct RunState {
    /// WASI: captured stdout/stderr; no files, environment, arguments or network.
    pub(crate) wasi: WasiP1Ctx,
    /// The memory cap.
    pub(crate) limiter: MemoryLimiter,
    /// The `tether_v1` side: the start document, calls, the outcome.
    pub(crate) host: HostLink,
}

impl AbiView for RunState {
    fn abi(&mut self) -> &mut HostLink {
        &mut self.host
    }
}

impl std::fmt::Debug for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunState").field("limiter", &self.limiter).finish_non_exhaustive()
    }
}
