//! The Rust side of `python/bench/call_overhead.py`: the same no-op call
//! through [`Turn::execute`], driven from Rust, to set against the call
//! driven from Python. Not part of the package's API.

use crate::awaitable::awaitable;
use pyo3::prelude::*;
use serde_json::json;
use std::time::Instant;
use tether_turn::{CallOrigin, CallRequest, ToolOutput, ToolSpec, Turn, executor_fn};

/// Seconds that `calls` sequential calls of a Rust no-op tool (read-only,
/// repeats allowed, in-memory audit) take through `Turn::execute`.
#[pyfunction]
pub(crate) fn measure_rust_calls(py: Python<'_>, calls: u32) -> PyResult<Bound<'_, PyAny>> {
    awaitable(py, async move {
        let spec = ToolSpec::new("noop", "Does nothing.", json!({"type": "object"})).read_only().allow_repeats();
        let noop = executor_fn(|_context, _args| async { Ok(ToolOutput::new(json!(null))) });
        let turn = Turn::builder("bench-rust")
            .tool(spec, noop)
            .max_tool_calls(u32::MAX)
            .build()
            .map_err(crate::error::config)?;
        let started = Instant::now();
        for n in 0..calls {
            let result = turn.execute(CallRequest::new(format!("c{n}"), "noop", json!({})), CallOrigin::Model).await;
            if result.failure().is_some() {
                return Err(crate::error::config(format!("the no-op call failed: {:?}", result.outcome)));
            }
        }
        Ok(started.elapsed().as_secs_f64())
    })
}
