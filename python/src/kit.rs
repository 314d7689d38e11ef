//! What a Python turn is equipped with — its Python tools, its approver, its
//! audit store, its limits, and `run_script` on a sidecar — made in ONE
//! place, whether the turn is opened new (`Turn.open`, `turn.rs`) or built
//! again from a parked run's snapshot to answer its calls (`tether.answer`,
//! `parked.rs`): the same tools, approver and script tool either way.

use crate::approver::PyApprover;
use crate::error;
use crate::sidecar::{self, Parking};
use crate::tool::{PyToolExecutor, spec_from_json};
use pyo3::prelude::*;
use serde::Deserialize;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tether_client::ScriptTool;
use tether_stores::AuditStoreUrl;
use tether_turn::{Approver, AuditStore, DeferredApprover, ModelOffer, Tool, ToolSpec, TurnBuilder, TurnLimits};

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
    /// What the model is offered: `every`, `script` or `search`.
    offer: Option<String>,
}

fn seconds(name: &str, secs: f64) -> PyResult<Duration> {
    if secs.is_finite() && secs > 0.0 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(error::config(format!("limit `{name}` is `{secs}`; give a positive number of seconds")))
    }
}

/// A turn's limits, checked.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// The turn's own.
    pub(crate) turn: TurnLimits,
    /// The turn's deadline, from when it opens.
    pub(crate) deadline: Option<Duration>,
    /// `run_script`'s time limit.
    pub(crate) script_time_limit: Option<Duration>,
}

impl Limits {
    /// The limits in `json` (what `Turn.open` passes).
    ///
    /// # Errors
    /// `ConfigError` naming a limit that is not valid.
    pub(crate) fn parse(json: &str) -> PyResult<Limits> {
        let given: LimitsJson =
            serde_json::from_str(json).map_err(|e| error::config(format!("the turn's limits are not valid: {e}")))?;
        let mut turn = TurnLimits::default();
        let d = &mut turn;
        if let Some(v) = given.max_tool_calls {
            d.max_tool_calls = v
        }
        if let Some(v) = given.max_approval_calls {
            d.max_approval_calls = v
        }
        if let Some(v) = given.approval_timeout {
            d.approval_timeout = seconds("approval_timeout", v)?
        }
        if let Some(v) = given.default_tool_time_limit {
            d.default_tool_time_limit = seconds("default_tool_time_limit", v)?
        }
        if let Some(v) = given.audit_args_bytes {
            d.audit_args_bytes = v
        }
        if let Some(v) = given.capture_payloads {
            d.capture_payloads = v
        }
        if let Some(v) = given.max_depth {
            d.max_depth = v
        }
        if let Some(v) = given.max_refused_script_calls {
            d.max_refused_script_calls = v
        }
        if given.max_result_bytes.is_some() {
            d.max_result_bytes = given.max_result_bytes
        }
        if let Some(name) = &given.offer {
            d.model_offer = ModelOffer::parse(name).ok_or_else(|| {
                error::config(format!(
                    "`offer` is `{name}`; give `every` (each tool as a function, and `run_script`), `script` \
                     (`run_script` alone, the tools as its stubs) or `search` (`run_script`, `search_tools` \
                     and `describe_tools`)"
                ))
            })?
        }
        Ok(Limits {
            turn,
            deadline: given.deadline.map(|d| seconds("deadline", d)).transpose()?,
            script_time_limit: given.script_time_limit.map(|d| seconds("script_time_limit", d)).transpose()?,
        })
    }
}

/// Who decides a turn's approval-required calls.
pub(crate) enum Decider {
    /// `Approver._decide` of `tether/_turn.py` (the tools' predicates, then
    /// the user's approver).
    Python(Py<PyAny>),
    /// `tether.LATER`: a person answers from anywhere, later
    /// ([`DeferredApprover`]); a script's run waiting on such calls is handed
    /// to the audit store.
    Later,
}

/// What Python passed for a turn's equipment, checked before anything starts.
pub(crate) struct Plan {
    /// The Python tools: spec and `Tool._invoke`.
    pub(crate) tools: Vec<(ToolSpec, Py<PyAny>)>,
    /// Who approves.
    pub(crate) decider: Decider,
    /// The audit store.
    pub(crate) audit: AuditStoreUrl,
    /// Where `run_script` runs scripts; `None`: no `run_script`.
    pub(crate) sidecar: Option<String>,
    /// The bearer token a TCP sidecar asks for.
    pub(crate) token: Option<String>,
    /// The embedded sidecar's park key file, if one is named.
    pub(crate) park_key_file: Option<PathBuf>,
    /// The turn's limits.
    pub(crate) limits: Limits,
    /// The model reads an unexpected exception's text, not only its type.
    pub(crate) verbatim_tool_errors: bool,
}

impl Plan {
    /// Reads what Python passed: `tools` as `(spec JSON, invoke)` pairs,
    /// `approver` the approval bridge's `decide` (`None`: `tether.LATER`),
    /// `audit` a store URL, `sidecar` an address, `"embedded"` or `None`,
    /// `limits` JSON.
    ///
    /// # Errors
    /// `ConfigError` for a tool or a limit that is not valid, or
    /// `tether.LATER` over the memory store; `AuditStoreError` for a store
    /// URL of no known form.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read(
        tools: Vec<(String, Py<PyAny>)>,
        approver: Option<Py<PyAny>>,
        audit: &str,
        sidecar: Option<String>,
        token: Option<String>,
        park_key_file: Option<String>,
        limits: &str,
        verbatim_tool_errors: bool,
    ) -> PyResult<Plan> {
        let tools = tools
            .into_iter()
            .map(|(spec, invoke)| Ok((spec_from_json(&spec).map_err(error::config)?, invoke)))
            .collect::<PyResult<Vec<_>>>()?;
        let audit = AuditStoreUrl::parse(audit).map_err(error::store)?;
        let decider = approver.map_or(Decider::Later, Decider::Python);
        if matches!(decider, Decider::Later) && audit == AuditStoreUrl::Memory {
            return Err(error::config(
                "`approver=tether.LATER` leaves a waiting script run in the audit store for a person to answer \
                 from another process (`tether.answer`), and `memory:` keeps it only in this one: open the turn \
                 with a durable store, `audit=\"sqlite:PATH\"` or a PostgreSQL URL",
            ));
        }
        Ok(Plan {
            tools,
            decider,
            audit,
            sidecar,
            token,
            park_key_file: park_key_file.filter(|file| !file.is_empty()).map(PathBuf::from),
            limits: Limits::parse(limits)?,
            verbatim_tool_errors,
        })
    }

    /// The equipment, over `store` (opened from [`Plan::audit`]): the tools
    /// made, the approver, and `run_script` connected to its sidecar; with
    /// `durable`, its runs may be handed to the audit store, sealed with
    /// the embedded sidecar's key file (`sidecar.rs`).
    ///
    /// # Errors
    /// `ConfigError` for a tool whose schema is not valid or a park key that
    /// does not fit; `SidecarUnavailable` when the sidecar cannot be reached.
    pub(crate) async fn kit(self, store: Arc<dyn AuditStore>, durable: bool) -> PyResult<Kit> {
        let approver: Arc<dyn Approver> = match self.decider {
            Decider::Python(decide) => Arc::new(PyApprover::new(decide)),
            Decider::Later => Arc::new(DeferredApprover),
        };
        let names: Vec<String> = self.tools.iter().map(|(spec, _)| spec.name.clone()).collect();
        let tools = self
            .tools
            .into_iter()
            .map(|(spec, invoke)| {
                let executor = PyToolExecutor::new(spec.name.clone(), invoke, self.verbatim_tool_errors);
                Tool::new(spec, executor).map_err(error::config)
            })
            .collect::<PyResult<Vec<_>>>()?;
        let script = match &self.sidecar {
            Some(address) => {
                let parking = Parking { key_file: self.park_key_file, durable };
                let client = sidecar::connect(address, self.token, &parking).await.map_err(|e| e.into_py())?;
                let mut script = ScriptTool::new(client);
                if durable {
                    script = script.parking(true).owner(json!({"opened_by": "tether-python", "tools": names}));
                }
                if let Some(limit) = self.limits.script_time_limit {
                    script = script.time_limit(limit);
                }
                // A script's call is held to the turn's result limit in the
                // sandbox too (by default both are 4 MiB); with a lower one,
                // calls a script awaits together can park (the resume must
                // fit one message with a result of that size for each).
                if let Some(max) = self.limits.turn.max_result_bytes {
                    script = script.limits(tether_proto::pb::Limits { max_result_bytes: max, ..Default::default() });
                }
                let tool = script.clone().into_tool().map_err(error::config)?;
                Some((script, tool))
            }
            None => None,
        };
        Ok(Kit { store, approver, tools, script, limits: self.limits })
    }
}

/// A turn's equipment, ready for any number of turns.
pub(crate) struct Kit {
    /// The audit store.
    pub(crate) store: Arc<dyn AuditStore>,
    approver: Arc<dyn Approver>,
    tools: Vec<Tool>,
    /// `run_script`: the script tool (to resume its parked runs) and the tool.
    script: Option<(ScriptTool, Tool)>,
    /// The turn's limits.
    pub(crate) limits: Limits,
}

impl Kit {
    /// `builder` with the limits, audit store, approver, every tool and `run_script`.
    pub(crate) fn equip(&self, builder: TurnBuilder) -> TurnBuilder {
        let builder =
            builder.limits(self.limits.turn.clone()).audit_store(self.store.clone()).approver(self.approver.clone());
        let builder = self.tools.iter().cloned().fold(builder, TurnBuilder::add_tool);
        match &self.script {
            Some((_, tool)) => builder.add_tool(tool.clone()),
            None => builder,
        }
    }

    /// The script tool, when the turn has `run_script`.
    pub(crate) fn script(&self) -> Option<&ScriptTool> {
        self.script.as_ref().map(|(script, _)| script)
    }
}
