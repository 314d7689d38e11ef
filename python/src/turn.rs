//! `tether._native.Turn`: the backend's [`Turn`] — the same one execution
//! path, checks, approval and audit as in Rust — built from Python tools,
//! an optional Python approver, an audit store URL and where scripts run.
//! Every awaitable it returns runs on the package's Tokio runtime with the
//! GIL released, inside the awaiting task's loop ([`caller::scope`]), and is
//! cancelled with it: cancelling the Python task drops the call (and the
//! script's stream, so the script ends).

use crate::awaitable::awaitable;
use crate::error;
use crate::events::{self, Forwarder};
use crate::kit::{Decider, Plan};
use pyo3::prelude::*;
use serde_json::{Value, json};
use std::sync::Arc;
use tether_stores::AuditStoreUrl;
use tether_turn::{CallOrigin, CallRequest, StoreError, Turn, TurnError, new_turn_id};

/// Builds and opens a new turn from `plan`: id `id` (`None`: a new unique
/// one, [`new_turn_id`]), its events delivered to `deliver`.
async fn open(plan: Plan, id: Option<String>, deliver: Option<Py<PyAny>>) -> PyResult<NativeTurn> {
    let store = plan.audit.open().await.map_err(error::store)?;
    let durable = matches!(plan.decider, Decider::Later);
    let kit = plan.kit(store, durable).await?;
    let mut builder = kit.equip(Turn::builder(id.unwrap_or_else(new_turn_id)));
    if let Some(after) = kit.limits.deadline {
        builder = builder.deadline_in(after);
    }
    let forwarder = match deliver {
        Some(deliver) => {
            let (sink, task) = events::forward(deliver);
            builder = builder.events(Arc::new(sink));
            Some(task)
        }
        None => None,
    };
    // Opened: the id is claimed in the store, and one it holds is refused.
    let turn = builder.open().await.map_err(|e| match e {
        TurnError::Store(StoreError::TurnTaken { .. }) => error::config(e),
        TurnError::Store(other) => error::store(other),
        other => error::config(other),
    })?;
    Ok(NativeTurn { turn, forwarder })
}

/// A turn; Python code uses it through `tether.Turn`.
#[pyclass(module = "tether._native", name = "Turn", frozen)]
pub(crate) struct NativeTurn {
    turn: Turn,
    /// Delivers the turn's events to Python; dropped (and stopped) with it.
    forwarder: Option<Forwarder>,
}

/// The model's call `call_id` of `name`, its arguments given as JSON text.
fn model_call(call_id: String, name: String, args: &str) -> PyResult<CallRequest> {
    let args: Value = serde_json::from_str(args)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("the arguments are not JSON: {e}")))?;
    Ok(CallRequest::new(call_id, name, args))
}

pub(crate) fn json_text(value: &Value) -> String {
    value.to_string()
}

#[pymethods]
impl NativeTurn {
    /// Builds and opens a turn: `turn_id` (`None`: a new unique one; one the
    /// audit store already holds raises `ConfigError`), `tools` are `(spec JSON, invoke)` pairs, `approver`
    /// an `async def decide(request_json)` (`None`: `tether.LATER`, a person
    /// answers later from any process), `audit` a store URL, `sidecar`
    /// an address, `"embedded"` or `None` (no `run_script`), `park_key_file`
    /// the embedded sidecar's key file, `limits` JSON,
    /// `deliver` the event hub's callable, `verbatim_tool_errors` whether
    /// the model reads an unexpected exception's text (else its type only).
    #[staticmethod]
    #[pyo3(signature = (turn_id, tools, approver, audit, sidecar, token, park_key_file, limits, deliver, verbatim_tool_errors))]
    #[allow(clippy::too_many_arguments)]
    fn open<'py>(
        py: Python<'py>,
        turn_id: Option<String>,
        tools: Vec<(String, Py<PyAny>)>,
        approver: Option<Py<PyAny>>,
        audit: String,
        sidecar: Option<String>,
        token: Option<String>,
        park_key_file: Option<String>,
        limits: String,
        deliver: Option<Py<PyAny>>,
        verbatim_tool_errors: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let plan = Plan::read(tools, approver, &audit, sidecar, token, park_key_file, &limits, verbatim_tool_errors)?;
        awaitable(py, open(plan, turn_id, deliver))
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
        let request = model_call(call_id, name, &args)?;
        let turn = self.turn.clone();
        awaitable(py, async move {
            let result = turn.execute(request, CallOrigin::Model).await;
            Ok(json_text(&crate::convert::result(&result)))
        })
    }

    /// Runs one call of the model's like [`execute`](Self::execute) — or,
    /// when it comes to wait for a person (`tether.LATER`), stores it in the
    /// audit store as a direct call's record ([`Turn::park_direct`]) for
    /// `tether.answer` to answer, from any process. Resolves to JSON text:
    /// `{"result": ...}`, or `{"parked": the call as tether.pending lists it}`.
    fn execute_or_park<'py>(
        &self,
        py: Python<'py>,
        call_id: String,
        name: String,
        args: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let request = model_call(call_id, name, &args)?;
        let turn = self.turn.clone();
        awaitable(py, async move {
            match turn.execute_or_hand_off(request, CallOrigin::Model).await {
                Ok(result) => Ok(json_text(&json!({"result": crate::convert::result(&result)}))),
                Err(pending) => {
                    let listing = pending.listing();
                    let owner = json!({"parked_by": "tether-python"});
                    turn.park_direct(pending, owner).await.map_err(|e| {
                        error::store(format!(
                            "the call waits for a person's answer, but the audit store could not keep it ({e}): \
                             the call was not made; make it again once the store is back"
                        ))
                    })?;
                    Ok(json_text(&json!({"parked": listing})))
                }
            }
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
