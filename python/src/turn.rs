//! `tether._native.Turn`: the backend's [`Turn`] — the same one execution
//! path, checks, approval and audit as in Rust — built from Python tools,
//! an optional Python approver, an audit store URL and where scripts run.
//! Every awaitable it returns runs on the package's Tokio runtime with the
//! GIL released, inside the awaiting task's loop ([`caller::scope`]), and is
//! cancelled with it: cancelling the Python task drops the call (and the
//! script's stream, so the script ends).

use crate::approver::PyApprover;
use crate::awaitable::awaitable;
use crate::error;
use crate::events::{self, Forwarder};
use crate::sidecar;
use crate::tool::{PyToolExecutor, spec_from_json};
use pyo3::prelude::*;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tether_client::ScriptTool;
use tether_stores::AuditStoreUrl;
use tether_turn::{
    CallOrigin, CallRequest, PolicyApprover, StoreError, ToolSpec, Turn, TurnError, TurnLimits, new_turn_id,
};

/// The limits a Python turn may set (`Turn.open(limits=…)`); each maps to
/// one [`TurnLimits`] field and has its default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct LimitsJson {
    max_tool_calls: Option<u32>,
    max_approval_calls: Option<u32>,
    /// Seconds.
    approval_timeout: Option<f64>,
    /// Seconds.
    default_tool_time_limit: Option<f64>,
    audit_args_bytes: Option<usize>,
    capture_payloads: Option<bool>,
    max_depth: Option<u32>,
    max_refused_script_calls: Option<u32>,
    max_result_bytes: Option<u64>,
    /// Seconds from now: the turn's deadline.
    deadline: Option<f64>,
    /// Seconds: the time limit of `run_script`.
    script_time_limit: Option<f64>,
}

fn seconds(name: &str, secs: f64) -> PyResult<Duration> {
    if secs.is_finite() && secs > 0.0 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(error::config(format!("limit `{name}` is `{secs}`; give a positive number of seconds")))
    }
}

impl LimitsJson {
    fn parse(json: &str) -> PyResult<LimitsJson> {
        serde_json::from_str(json).map_err(|e| error::config(format!("the turn's limits are not valid: {e}")))
    }

    fn turn_limits(&self) -> PyResult<TurnLimits> {
        let mut limits = TurnLimits::default();
        let d = &mut limits;
        if let Some(v) = self.max_tool_calls {
            d.max_tool_calls = v
        }
        if let Some(v) = self.max_approval_calls {
            d.max_approval_calls = v
        }
        if let Some(v) = self.approval_timeout {
            d.approval_timeout = seconds("approval_timeout", v)?
        }
        if let Some(v) = self.default_tool_time_limit {
            d.default_tool_time_limit = seconds("default_tool_time_limit", v)?
        }
        if let Some(v) = self.audit_args_bytes {
            d.audit_args_bytes = v
        }
        if let Some(v) = self.capture_payloads {
            d.capture_payloads = v
        }
        if let Some(v) = self.max_depth {
            d.max_depth = v
        }
        if let Some(v) = self.max_refused_script_calls {
            d.max_refused_script_calls = v
        }
        if self.max_result_bytes.is_some() {
            d.max_result_bytes = self.max_result_bytes
        }
        Ok(limits)
    }
}

/// Everything `Turn.open` was given, checked before anything starts.
struct Plan {
    /// `None`: a new unique id ([`new_turn_id`]).
    id: Option<String>,
    tools: Vec<(ToolSpec, Py<PyAny>)>,
    approver: Option<Py<PyAny>>,
    audit: AuditStoreUrl,
    sidecar: Option<String>,
    token: Option<String>,
    limits: TurnLimits,
    deadline: Option<Duration>,
    script_time_limit: Option<Duration>,
    deliver: Option<Py<PyAny>>,
    /// The model reads an unexpected exception's text, not only its type.
    verbatim_tool_errors: bool,
}

impl Plan {
    async fn build(self) -> PyResult<NativeTurn> {
        let store = self.audit.open().await.map_err(error::store)?;
        let id = self.id.unwrap_or_else(new_turn_id);
        let mut builder = Turn::builder(id).limits(self.limits).audit_store(store);
        builder = match self.approver {
            Some(decide) => builder.approver(Arc::new(PyApprover::new(decide))),
            // Without an approver, approval-required calls are denied.
            None => builder.approver(Arc::new(PolicyApprover::deny_all())),
        };
        if let Some(after) = self.deadline {
            builder = builder.deadline_in(after);
        }
        let forwarder = match self.deliver {
            Some(deliver) => {
                let (sink, task) = events::forward(deliver);
                builder = builder.events(Arc::new(sink));
                Some(task)
            }
            None => None,
        };
        for (spec, invoke) in self.tools {
            let executor = PyToolExecutor::new(spec.name.clone(), invoke, self.verbatim_tool_errors);
            builder = builder.tool(spec, executor);
        }
        if let Some(address) = &self.sidecar {
            let client = sidecar::connect(address, self.token).await.map_err(error::sidecar)?;
            let mut script = ScriptTool::new(client);
            if let Some(limit) = self.script_time_limit {
                script = script.time_limit(limit);
            }
            builder = builder.add_tool(script.into_tool().map_err(error::config)?);
        }
        // Opened: the id is claimed in the store, and one it holds is refused.
        let turn = builder.open().await.map_err(|e| match e {
            TurnError::Store(StoreError::TurnTaken { .. }) => error::config(e),
            TurnError::Store(other) => error::store(other),
            other => error::config(other),
        })?;
        Ok(NativeTurn { turn, forwarder })
    }
}

/// A turn; Python code uses it through `tether.Turn`.
#[pyclass(module = "tether._native", name = "Turn", frozen)]
pub(crate) struct NativeTurn {
    turn: Turn,
    /// Delivers the turn's events to Python; dropped (and stopped) with it.
    forwarder: Option<Forwarder>,
}

fn json_text(value: &Value) -> String {
    value.to_string()
}

#[pymethods]
impl NativeTurn {
    /// Builds and opens a turn: `turn_id` (`None`: a new unique one; one the
    /// audit store already holds raises `ConfigError`), `tools` are `(spec JSON, invoke)` pairs, `approver`
    /// an `async def decide(request_json)`, `audit` a store URL, `sidecar`
    /// an address, `"embedded"` or `None` (no `run_script`), `limits` JSON,
    /// `deliver` the event hub's callable, `verbatim_tool_errors` whether
    /// the model reads an unexpected exception's text (else its type only).
    #[staticmethod]
    #[pyo3(signature = (turn_id, tools, approver, audit, sidecar, token, limits, deliver, verbatim_tool_errors))]
    #[allow(clippy::too_many_arguments)]
    fn open<'py>(
        py: Python<'py>,
        turn_id: Option<String>,
        tools: Vec<(String, Py<PyAny>)>,
        approver: Option<Py<PyAny>>,
        audit: String,
        sidecar: Option<String>,
        token: Option<String>,
        limits: String,
        deliver: Option<Py<PyAny>>,
        verbatim_tool_errors: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let limits = LimitsJson::parse(&limits)?;
        let tools = tools
            .into_iter()
            .map(|(spec, invoke)| Ok((spec_from_json(&spec).map_err(error::config)?, invoke)))
            .collect::<PyResult<Vec<_>>>()?;
        let plan = Plan {
            id: turn_id,
            tools,
            approver,
            audit: AuditStoreUrl::parse(&audit).map_err(error::store)?,
            sidecar,
            token,
            limits: limits.turn_limits()?,
            deadline: limits.deadline.map(|d| seconds("deadline", d)).transpose()?,
            script_time_limit: limits.script_time_limit.map(|d| seconds("script_time_limit", d)).transpose()?,
            deliver,
            verbatim_tool_errors,
        };
        awaitable(py, plan.build())
    }

    /// The turn's id.
    #[getter]
    fn id(&self) -> &str {
        self.turn.id()
    }

    /// Slots of the turn-wide cap taken.
    #[getter]
    fn calls_used(&self) -> u32 {
        self.turn.calls_used()
    }

    /// `cancelled`, `turn_deadline_exceeded`, or `None` while the turn runs.
    fn end_reason(&self) -> Option<&'static str> {
        self.turn.end_reason().map(|code| code.as_str())
    }

    /// Runs one call of the model's through the one execution path; resolves
    /// to the result as JSON text.
    fn execute<'py>(
        &self,
        py: Python<'py>,
        call_id: String,
        name: String,
        args: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args: Value = serde_json::from_str(&args)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("the arguments are not JSON: {e}")))?;
        let turn = self.turn.clone();
        awaitable(py, async move {
            let result = turn.execute(CallRequest::new(call_id, name, args), CallOrigin::Model).await;
            Ok(json_text(&crate::convert::result(&result)))
        })
    }

    /// Cancels the turn: running calls end `cancelled`, scripts end.
    fn cancel(&self) {
        self.turn.cancel();
    }

    /// Activates a deferred tool; `True` if it was not active before.
    fn activate(&self, name: &str) -> PyResult<bool> {
        self.turn.activate(name).map_err(error::config)
    }

    /// The typed Python stubs of the tools a script may call.
    fn script_stubs(&self) -> String {
        self.turn.script_stubs()
    }

    /// The tool list as the model sees it, as JSON text.
    fn tools_for_model(&self) -> String {
        json_text(&self.turn.tools_for_model().iter().map(crate::convert::listed).collect::<Value>())
    }

    /// Resolves once every call event emitted so far is on its loop, ahead
    /// of what the awaiting task does next: `Turn.close` awaits it, so no
    /// event is lost at close.
    fn events_drained<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let drained = self.forwarder.as_ref().map(Forwarder::drained);
        awaitable(py, async move {
            if let Some(drained) = drained {
                drained.await;
            }
            Ok(())
        })
    }

    /// The turn's audit rows as JSON text, every row written so far
    /// committed first.
    fn audit_log<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let turn = self.turn.clone();
        awaitable(py, async move {
            let rows = turn.audit_log().await.map_err(error::store)?;
            Ok(json_text(&rows.iter().map(crate::convert::audit).collect::<Value>()))
        })
    }

    /// The turn's effect-ledger rows as JSON text; with `approval_only`,
    /// only approval-required calls that may have run.
    fn ledger<'py>(&self, py: Python<'py>, approval_only: bool) -> PyResult<Bound<'py, PyAny>> {
        let turn = self.turn.clone();
        awaitable(py, async move {
            let rows =
                if approval_only { turn.possibly_executed_approval_actions().await } else { turn.ledger().await };
            let rows = rows.map_err(error::store)?;
            Ok(json_text(&rows.iter().map(crate::convert::ledger).collect::<Value>()))
        })
    }
}

/// Reads turn `turn_id`'s audit rows from the store `url` names, through
/// the Rust library's own reader (a fresh connection): JSON text.
#[pyfunction]
pub(crate) fn read_audit_log<'py>(py: Python<'py>, url: String, turn_id: String) -> PyResult<Bound<'py, PyAny>> {
    let url = AuditStoreUrl::parse(&url).map_err(error::store)?;
    awaitable(py, async move {
        let store = url.open().await.map_err(error::store)?;
        let rows = store.audit_log(&turn_id).await.map_err(error::store)?;
        Ok(json_text(&rows.iter().map(crate::convert::audit).collect::<Value>()))
    })
}
