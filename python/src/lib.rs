//! `tether._native`: the Rust half of the `tether` Python package — the
//! backend's turn, its sidecar client and an embedded sidecar, bound with
//! PyO3. The Python half (`python/tether/`) adds tools from type hints, the
//! approver and event wrappers, and the adapters.
//!
//! Where things are:
//! - `turn`: `Turn` — open, execute through the one path, cancel, records
//! - `kit`: what every turn is equipped with (tools, approver, store,
//!   limits, `run_script`), for a new turn and a resumed one alike
//! - `parked`: `pending` and `answer` — parked runs' calls, answered from
//!   any process
//! - `tool`: Python tools — their spec and metadata, and their executor
//! - `approver`: a Python approver
//! - `events`: call events delivered to Python in order
//! - `awaitable` / `invoke` / `caller`: Rust futures as asyncio awaitables,
//!   and Python coroutines run on the caller's loop, each cancelled with
//!   the other side
//! - `gil`: entering Python from Rust threads, and a clean interpreter exit
//! - `sidecar`: where scripts run (an address, or the embedded sidecar)
//! - `convert`: the turn's records as JSON for Python
//! - `codes`: every failure code, from `tether_codes`
//! - `bench`: the Rust half of `python/bench/call_overhead.py`
//! - `error`: the exceptions

mod approver;
mod awaitable;
mod bench;
mod caller;
mod codes;
mod convert;
mod error;
mod events;
mod gil;
mod invoke;
mod kit;
mod parked;
mod sidecar;
mod tool;
mod turn;

use pyo3::prelude::*;

/// The address of the process's embedded sidecar, starting it if needed.
#[pyfunction]
fn embedded_sidecar(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    awaitable::awaitable(py, async {
        let parking = sidecar::Parking::default();
        Ok(sidecar::embedded(&parking).await.map_err(sidecar::WhereError::into_py)?.url())
    })
}

/// Runs the embedded sidecar has in progress, or `None` if it was not started.
#[pyfunction]
fn embedded_live_runs() -> Option<usize> {
    sidecar::embedded_if_started().map(|s| s.sidecar.live_runs())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("EMBEDDED", sidecar::EMBEDDED)?;
    m.add("TetherError", py.get_type::<error::TetherError>())?;
    m.add("ConfigError", py.get_type::<error::ConfigError>())?;
    m.add("SidecarUnavailable", py.get_type::<error::SidecarUnavailable>())?;
    m.add("AuditStoreError", py.get_type::<error::AuditStoreError>())?;
    m.add("NotWaiting", py.get_type::<error::NotWaiting>())?;
    m.add("RunClaimed", py.get_type::<error::RunClaimed>())?;
    m.add("ResumeInterrupted", py.get_type::<error::ResumeInterrupted>())?;
    m.add_class::<turn::NativeTurn>()?;
    m.add_function(wrap_pyfunction!(codes::codes, m)?)?;
    m.add_function(wrap_pyfunction!(turn::read_audit_log, m)?)?;
    m.add_function(wrap_pyfunction!(parked::pending, m)?)?;
    m.add_function(wrap_pyfunction!(parked::answer, m)?)?;
    m.add_function(wrap_pyfunction!(embedded_sidecar, m)?)?;
    m.add_function(wrap_pyfunction!(embedded_live_runs, m)?)?;
    m.add_function(wrap_pyfunction!(gil::quiesce, m)?)?;
    m.add_function(wrap_pyfunction!(bench::measure_rust_calls, m)?)?;
    Ok(())
}
