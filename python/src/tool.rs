//! Tools defined in Python: their spec (name, description, schemas, the
//! metadata the turn decides by) read from the JSON `tether/_tools.py`
//! writes, and an executor that runs the Python callable on the caller's
//! event loop. What the callable returned, raised or was refused for is
//! turned into the turn's outcome here, in one place.

use crate::invoke::{Invoked, invoke};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tether_codes::Reason;
use tether_turn::{
    ApprovalRequirement, RepeatRule, ToolContext, ToolError, ToolExecutor, ToolMeta, ToolOutput, ToolReplay, ToolSpec,
};

/// What runs a Python tool, for messages.
const PROVIDER: &str = "the Python event loop that awaits the turn";

/// A tool as `tether/_tools.py` describes it (`Tool.spec_json()`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecJson {
    name: String,
    description: String,
    input_schema: Value,
    #[serde(default)]
    output_schema: Option<Value>,
    #[serde(default)]
    meta: MetaJson,
}

/// The metadata keys a Python tool may set; each maps to one [`ToolMeta`] field.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct MetaJson {
    requires_approval: bool,
    read_only: bool,
    deferred: bool,
    asks_user: bool,
    runs_on_device: bool,
    meta_tool: bool,
    replay_safe: bool,
    concurrency_safe: bool,
    /// `"default"`, `"refuse"` or `"allow"`.
    repeats: Option<String>,
    /// Seconds.
    time_limit: Option<f64>,
}

/// Why a Python tool's description cannot become a tool.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpecError {
    /// The JSON does not have the expected shape.
    #[error("tool description is not valid: {0}")]
    Shape(#[from] serde_json::Error),
    /// A value is out of range.
    #[error("tool `{tool}`: {problem}")]
    Value {
        /// The tool.
        tool: String,
        /// What is wrong and what to write instead.
        problem: String,
    },
}

/// Reads a tool's spec from the JSON `tether/_tools.py` writes.
///
/// # Errors
/// [`SpecError`] naming the field that is wrong.
pub(crate) fn spec_from_json(json: &str) -> Result<ToolSpec, SpecError> {
    let spec: SpecJson = serde_json::from_str(json)?;
    let refuse = |problem: String| SpecError::Value { tool: spec.name.clone(), problem };
    let m = &spec.meta;
    let repeat = match m.repeats.as_deref() {
        None | Some("default") => RepeatRule::RefuseUnlessReadOnly,
        Some("refuse") => RepeatRule::Refuse,
        Some("allow") => RepeatRule::Allow,
        Some(other) => return Err(refuse(format!("`repeats` is `{other}`; use \"default\", \"refuse\" or \"allow\""))),
    };
    let time_limit = match m.time_limit {
        None => None,
        Some(secs) if secs.is_finite() && secs > 0.0 => Some(Duration::from_secs_f64(secs)),
        Some(secs) => return Err(refuse(format!("`time_limit` is `{secs}`; give a positive number of seconds"))),
    };
    let meta = ToolMeta {
        asks_user: m.asks_user,
        runs_on_device: m.runs_on_device,
        meta: m.meta_tool,
        deferred: m.deferred,
        approval: if m.requires_approval { ApprovalRequirement::Always } else { ApprovalRequirement::PolicyDecides },
        time_limit,
        repeat,
        replay: if m.replay_safe { ToolReplay::Safe } else { ToolReplay::Never },
        concurrency_safe: m.concurrency_safe,
        read_only: m.read_only,
        ..ToolMeta::default()
    };
    let mut out = ToolSpec::new(spec.name, spec.description, spec.input_schema).meta(meta);
    out.output_schema = spec.output_schema;
    Ok(out)
}

/// `_invoke`'s tagged tuple, read on the loop thread.
type Tagged = (String, String, Option<String>);

fn read_tagged(returned: &Bound<'_, PyAny>) -> Option<Tagged> {
    let read = || -> PyResult<Tagged> {
        let tuple = returned.cast::<PyTuple>()?;
        let third = if tuple.len() > 2 { tuple.get_item(2)?.extract()? } else { None };
        Ok((tuple.get_item(0)?.extract()?, tuple.get_item(1)?.extract()?, third))
    };
    read().ok()
}

/// What the model reads instead of an unexpected exception's text, which
/// may hold a secret (a password in a connection error); the text itself is
/// in the call's audit row and the logs.
pub(crate) const WITHHELD: &str = "the message is withheld and kept in the host's audit log";

/// Runs a Python tool: `invoke` is `Tool._invoke`, an `async def` that takes
/// the arguments as JSON text and returns a tagged tuple (see `_tools.py`).
pub(crate) struct PyToolExecutor {
    name: String,
    invoke: Py<PyAny>,
    /// `Turn.open(verbatim_tool_errors=True)`: an unexpected exception's
    /// text goes to the model too (default off: the type only).
    verbatim: bool,
}

impl PyToolExecutor {
    /// The executor of tool `name`; with `verbatim`, the model reads an
    /// unexpected exception's text, not only its type.
    pub(crate) fn new(name: String, invoke: Py<PyAny>, verbatim: bool) -> Arc<PyToolExecutor> {
        Arc::new(PyToolExecutor { name, invoke, verbatim })
    }

    fn reported(&self, detail: String) -> ToolError {
        ToolError::reported(&Reason::ToolReported { tool: self.name.clone(), detail })
    }

    /// The tool raised `kind` with `message` (not a `tether.ToolError`): the
    /// model reads the type and, only when verbatim, the message; the audit
    /// row's detail has both, whatever the setting.
    fn raised(&self, kind: &str, message: &str) -> ToolError {
        let shown = if self.verbatim {
            format!("it raised `{kind}`: {message}")
        } else {
            format!("it raised `{kind}`; {WITHHELD}")
        };
        self.reported(shown).with_detail(format!("`{kind}`: {message}"))
    }

    /// The tool's outcome from the tagged tuple `_invoke` returned:
    /// `("ok", json)`, `("tool_error", code, message)`,
    /// `("raised", type, message)` or `("invalid_result", problem)`.
    fn outcome(&self, tagged: Option<Tagged>) -> Result<ToolOutput, ToolError> {
        let Some((tag, first, second)) = tagged else {
            return Err(self.invalid("the tool wrapper returned something unexpected".into()));
        };
        match tag.as_str() {
            "ok" => serde_json::from_str(&first)
                .map(ToolOutput::new)
                .map_err(|error| self.invalid(format!("not JSON: {error}"))),
            "tool_error" => Err(ToolError::new(first, second.unwrap_or_default())),
            "raised" => Err(self.raised(&first, second.as_deref().unwrap_or_default())),
            _ => Err(self.invalid(first)),
        }
    }

    fn invalid(&self, problem: String) -> ToolError {
        ToolError::around(&Reason::InvalidResult { tool: self.name.clone(), problem })
    }
}

#[async_trait::async_trait]
impl ToolExecutor for PyToolExecutor {
    async fn execute(&self, _context: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        match invoke(&self.invoke, args.to_string(), read_tagged).await {
            Ok(Invoked::Returned(tagged)) => self.outcome(tagged),
            // `_invoke` itself raised (an exception it does not catch).
            Ok(Invoked::Raised { kind, message }) => {
                tracing::warn!(tool = %self.name, "the tool raised `{kind}`: {message}");
                Err(self.raised(&kind, &message))
            }
            Ok(Invoked::Cancelled) => Err(ToolError::around(&Reason::ProviderLost {
                tool: self.name.clone(),
                provider: PROVIDER.into(),
                detail: "the tool's task was cancelled on its loop".into(),
            })),
            Err(error) => Err(ToolError::around(&Reason::ProviderUnavailable {
                tool: self.name.clone(),
                provider: PROVIDER.into(),
                error: error.to_string(),
            })),
        }
    }
}
