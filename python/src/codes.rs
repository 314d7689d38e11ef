//! Every failure code, taken from `tether_codes` at build time: Python sees
//! the very list the sidecar, the turn and the guests use.

use pyo3::prelude::*;
use tether_codes::Code;

/// `(code, display_name, tool_ran, is_cap)` for every code, in the docs' order.
#[pyfunction]
pub(crate) fn codes() -> Vec<(&'static str, &'static str, bool, bool)> {
    Code::ALL.iter().map(|c| (c.as_str(), c.display_name(), c.tool_ran(), c.is_cap())).collect()
}
