//! A tool of the turn: what the model sees (name, description, schemas), the
//! metadata code decides by (never the model), and the executor that runs it.

use super::call::CallOrigin;
use super::error::TurnError;
use super::state::Turn;
use serde_json::Value;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Whether a tool's calls need an approver's yes before they run.
///
/// The administrator's policy can add a requirement
/// ([`PolicyAction::NeedsApproval`](super::PolicyAction::NeedsApproval)) but
/// never remove the tool's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalRequirement {
    /// Only when the policy says so (the default).
    #[default]
    PolicyDecides,
    /// Every call, whatever the policy says.
    Always,
}

/// Whether a tool with effects may run again under a call id the effect
/// ledger already holds. A row still `started` is refused whatever the tool
/// says: nobody knows whether it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ToolReplay {
    /// Never runs twice under one call id, even when the first run settled
    /// (the default: a second run would repeat the effect).
    #[default]
    Never,
    /// Idempotent: may run again under a call id whose row is settled.
    Safe,
}

/// Metadata decided by code. The script exclusions (step 3), the pre-execution
/// check (step 6) and the ledger read it; the model never sets it.
///
/// Every flag defaults to `false`, [`ApprovalRequirement::PolicyDecides`] and
/// no per-tool time limit (the turn's default applies).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolMeta {
    /// Asks the user a question; excluded from scripts.
    pub asks_user: bool,
    /// Runs on the user's device; excluded from scripts.
    pub runs_on_device: bool,
    /// A meta tool (activates tools, calls a tool on the model's behalf);
    /// excluded from scripts.
    pub meta: bool,
    /// The script tool itself; excluded from scripts.
    pub is_script_tool: bool,
    /// Listed by name only until activated; refused at lookup until then.
    pub deferred: bool,
    /// Whether calls need approval.
    pub approval: ApprovalRequirement,
    /// The tool's own time limit; `None` uses the turn's default.
    pub time_limit: Option<Duration>,
    /// Refuse a call identical (same tool, same arguments) to one that passed
    /// the pre-execution check before in this turn.
    pub refuse_identical_repeat: bool,
    /// Script calls of this tool may run alongside other script calls; unsafe
    /// tools run alone among the turn's script calls.
    pub concurrency_safe: bool,
    /// Has no effects: no effect-ledger rows are written for it.
    pub read_only: bool,
    /// Whether the tool may run again under a call id the ledger holds
    /// settled. Default [`ToolReplay::Never`].
    pub replay: ToolReplay,
}

impl ToolMeta {
    /// Why a script may not call this tool, or `None` if it may.
    pub fn script_exclusion(&self) -> Option<&'static str> {
        if self.is_script_tool {
            Some("a script cannot run a script")
        } else if self.asks_user {
            Some("it asks the user a question, and only the model can read the answer")
        } else if self.runs_on_device {
            Some("it runs on the user's device")
        } else if self.meta {
            Some("it changes the turn's state (activates tools or calls tools for the model)")
        } else {
            None
        }
    }
}

/// A tool as described to the model: name, description, schemas and metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The name the model (and a script) calls it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The JSON Schema its arguments must match (step 4).
    pub input_schema: Value,
    /// The JSON Schema of its result, if declared (informational).
    pub output_schema: Option<Value>,
    /// Metadata decided by code.
    pub meta: ToolMeta,
}

impl ToolSpec {
    /// A tool with default metadata (see [`ToolMeta`]).
    pub fn new(name: impl Into<String>, description: impl Into<String>, input_schema: Value) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema,
            output_schema: None,
            meta: ToolMeta::default(),
        }
    }

    /// Sets the output schema.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Replaces the metadata.
    pub fn meta(mut self, meta: ToolMeta) -> Self {
        self.meta = meta;
        self
    }

    /// Every call needs approval.
    pub fn requires_approval(mut self) -> Self {
        self.meta.approval = ApprovalRequirement::Always;
        self
    }

    /// Listed by name only until activated.
    pub fn deferred(mut self) -> Self {
        self.meta.deferred = true;
        self
    }

    /// Asks the user a question (excluded from scripts).
    pub fn asks_user(mut self) -> Self {
        self.meta.asks_user = true;
        self
    }

    /// Runs on the user's device (excluded from scripts).
    pub fn runs_on_device(mut self) -> Self {
        self.meta.runs_on_device = true;
        self
    }

    /// A meta tool (excluded from scripts).
    pub fn meta_tool(mut self) -> Self {
        self.meta.meta = true;
        self
    }

    /// The tool's own time limit.
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.meta.time_limit = Some(limit);
        self
    }

    /// Refuses an identical repeat within the turn.
    pub fn refuse_identical_repeat(mut self) -> Self {
        self.meta.refuse_identical_repeat = true;
        self
    }

    /// Script calls may run concurrently with other script calls.
    pub fn concurrency_safe(mut self) -> Self {
        self.meta.concurrency_safe = true;
        self
    }

    /// Has no effects (no ledger rows).
    pub fn read_only(mut self) -> Self {
        self.meta.read_only = true;
        self
    }
}

/// What a tool's executor is given besides the arguments.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The turn the call belongs to: activate tools through it, or (for the
    /// script tool) send nested calls through [`Turn::execute`].
    pub turn: Turn,
    /// The call's id.
    pub call_id: String,
    /// Who issued the call.
    pub origin: CallOrigin,
}

/// A tool's value, with optional host-only metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The value the caller receives.
    pub value: Value,
    /// Host-only metadata, never shown to the model.
    pub metadata: Option<Value>,
}

impl ToolOutput {
    /// A value without metadata.
    pub fn new(value: Value) -> Self {
        ToolOutput { value, metadata: None }
    }

    /// Adds host-only metadata.
    pub fn with_metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

/// A failure the tool reports itself (status `error`, not a refusal).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    /// The tool's own code, e.g. `not_found`.
    pub code: String,
    /// Its message, for the model.
    pub message: String,
    /// Host-only metadata, never shown to the model.
    pub metadata: Option<Value>,
}

impl ToolError {
    /// A tool error with `code` and `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError { code: code.into(), message: message.into(), metadata: None }
    }

    /// Adds host-only metadata.
    pub fn with_metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

/// Runs a tool. Called only by step 8 of the one execution path, after every
/// check passed.
///
/// # Cancel safety
/// The future may be dropped at any await point (tool time limit, turn
/// deadline, cancellation); the ledger then keeps the call `started`.
#[async_trait::async_trait]
pub trait ToolExecutor: Send + Sync {
    /// Runs the tool with validated `args`.
    async fn execute(&self, context: ToolContext, args: Value) -> Result<ToolOutput, ToolError>;
}

struct FnExecutor<F>(F);

#[async_trait::async_trait]
impl<F, Fut> ToolExecutor for FnExecutor<F>
where
    F: Fn(ToolContext, Value) -> Fut + Send + Sync,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send,
{
    async fn execute(&self, context: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        (self.0)(context, args).await
    }
}

/// An executor from an async closure.
pub fn executor_fn<F, Fut>(f: F) -> Arc<dyn ToolExecutor>
where
    F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    Arc::new(FnExecutor(f))
}

/// A tool ready for the registry: its spec, its compiled input schema and its
/// executor. Cheap to clone.
#[derive(Clone)]
pub struct Tool {
    spec: Arc<ToolSpec>,
    validator: Arc<jsonschema::Validator>,
    executor: Arc<dyn ToolExecutor>,
}

impl Tool {
    /// A tool from `spec` and `executor`.
    ///
    /// # Errors
    /// [`TurnError::InvalidSchema`] if the input schema does not compile
    /// (remote `$ref`s are not resolved).
    pub fn new(spec: ToolSpec, executor: Arc<dyn ToolExecutor>) -> Result<Tool, TurnError> {
        let validator = jsonschema::validator_for(&spec.input_schema)
            .map_err(|e| TurnError::InvalidSchema { tool: spec.name.clone(), reason: e.to_string() })?;
        Ok(Tool { spec: Arc::new(spec), validator: Arc::new(validator), executor })
    }

    /// The spec.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The metadata.
    pub fn meta(&self) -> &ToolMeta {
        &self.spec.meta
    }

    pub(crate) fn executor(&self) -> Arc<dyn ToolExecutor> {
        self.executor.clone()
    }

    /// Checks `args` against the input schema; `Err` lists up to 5 errors,
    /// each with the location in the arguments.
    pub fn validate(&self, args: &Value) -> Result<(), String> {
        let errors: Vec<String> = self
            .validator
            .iter_errors(args)
            .take(5)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() { e.to_string() } else { format!("at `{at}`: {e}") }
            })
            .collect();
        if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
    }
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool").field("spec", &self.spec).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn noop() -> Arc<dyn ToolExecutor> {
        executor_fn(|_, _| async { Ok(ToolOutput::new(Value::Null)) })
    }

    #[test]
    fn validation_names_the_failing_location() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let tool = Tool::new(ToolSpec::new("t", "", schema), noop()).unwrap();
        assert!(tool.validate(&json!({"n": 1})).is_ok());
        let missing = tool.validate(&json!({})).unwrap_err();
        assert!(missing.contains("\"n\""), "{missing}");
        let wrong = tool.validate(&json!({"n": "x"})).unwrap_err();
        assert!(wrong.contains("/n"), "{wrong}");
    }

    #[test]
    fn a_schema_that_does_not_compile_is_an_error() {
        let err = Tool::new(ToolSpec::new("bad", "", json!({"type": 12})), noop()).unwrap_err();
        assert!(matches!(err, TurnError::InvalidSchema { ref tool, .. } if tool == "bad"), "{err}");
    }

    #[test]
    fn script_exclusions_come_from_metadata() {
        assert_eq!(ToolSpec::new("a", "", json!({})).meta.script_exclusion(), None);
        for spec in [
            ToolSpec::new("a", "", json!({})).asks_user(),
            ToolSpec::new("a", "", json!({})).runs_on_device(),
            ToolSpec::new("a", "", json!({})).meta_tool(),
            ToolSpec::new("a", "", json!({})).meta(ToolMeta { is_script_tool: true, ..ToolMeta::default() }),
        ] {
            assert!(spec.meta.script_exclusion().is_some(), "{spec:?}");
        }
    }
}
