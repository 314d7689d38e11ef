//! A tool of the turn as data: what the model sees (name, description,
//! schemas), the metadata code decides by (never the model), and what a tool
//! returns. The executor that runs it is in `executor.rs`; the compiled,
//! listed tool in `registry.rs`.

use super::call::Failure;
use super::step::Step;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tether_codes::{Code, Reason};

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

/// Whether the pre-execution check (step 6) refuses a call identical (same
/// tool, same canonical arguments) to one that passed it before in the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RepeatRule {
    /// Refuse repeats unless the tool is read-only (the default): repeats of a
    /// tool with effects must not slip past the approval cap or act twice.
    #[default]
    RefuseUnlessReadOnly,
    /// Always refuse repeats (a read-only tool may opt in).
    Refuse,
    /// Allow repeats (a tool with effects may opt out, e.g. one that polls).
    Allow,
}

/// Whether a call of a tool with effects may run again under a call id the
/// effect ledger already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolReplay {
    /// Never run twice under one call id, even after the first run settled
    /// (the default).
    #[default]
    Never,
    /// Idempotent: may run again under an id whose earlier run settled.
    Safe,
}

/// Metadata decided by code. The exclusions (step 3), the pre-execution check
/// (step 6) and the ledger read it; the model never sets it.
///
/// Every flag defaults to `false`, [`ApprovalRequirement::PolicyDecides`],
/// [`RepeatRule::RefuseUnlessReadOnly`], [`ToolReplay::Never`] and no
/// per-tool time limit (the turn's default applies).
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
    /// Whether identical repeats are refused (step 6).
    pub repeat: RepeatRule,
    /// Whether the tool may run again under a call id already in the ledger.
    pub replay: ToolReplay,
    /// The tool makes tool calls of its own (the script tool, agent tools): it
    /// is not offered, and refused, at the turn's deepest level.
    pub nests: bool,
    /// Script calls of this tool may run alongside other script calls; unsafe
    /// tools run alone among the turn's script calls.
    pub concurrency_safe: bool,
    /// Has no effects: no effect-ledger rows are written for it.
    pub read_only: bool,
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

    /// True when the pre-execution check refuses identical repeats.
    pub fn refuses_repeats(&self) -> bool {
        match self.repeat {
            RepeatRule::RefuseUnlessReadOnly => !self.read_only,
            RepeatRule::Refuse => true,
            RepeatRule::Allow => false,
        }
    }
}

/// A tool as the model sees it — name, description, input schema — and as a
/// script is started with it.
///
/// Cheap to clone: the parts are shared, and the schema's JSON text is made
/// once, with the definition. A turn hands every script run its whole tool
/// list, and an MCP server's schemas run to kilobytes each, so a run's list
/// costs a reference count per tool, not a deep copy and a serialization.
#[derive(Debug, Clone)]
pub struct ToolDef {
    parts: Arc<DefParts>,
}

#[derive(Debug)]
struct DefParts {
    spec: ToolSpec,
    input_schema_json: String,
}

impl ToolDef {
    /// The definition of the tool `name` that does `description` and takes
    /// arguments matching `input_schema`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, input_schema: Value) -> ToolDef {
        ToolDef::from_spec(ToolSpec::new(name, description, input_schema))
    }

    /// The definition of the tool `spec` describes; the registry keeps the
    /// spec here, so a tool's schema is held once.
    pub(crate) fn from_spec(spec: ToolSpec) -> ToolDef {
        let input_schema_json = spec.input_schema.to_string();
        ToolDef { parts: Arc::new(DefParts { spec, input_schema_json }) }
    }

    /// The whole spec (output schema and metadata too).
    pub(crate) fn spec(&self) -> &ToolSpec {
        &self.parts.spec
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.parts.spec.name
    }

    /// What it does.
    pub fn description(&self) -> &str {
        &self.parts.spec.description
    }

    /// The JSON Schema of its arguments.
    pub fn input_schema(&self) -> &Value {
        &self.parts.spec.input_schema
    }

    /// [`input_schema`](Self::input_schema) as JSON text, made once.
    pub fn input_schema_json(&self) -> &str {
        &self.parts.input_schema_json
    }
}

impl PartialEq for ToolDef {
    fn eq(&self, other: &ToolDef) -> bool {
        Arc::ptr_eq(&self.parts, &other.parts)
            || (self.name() == other.name()
                && self.description() == other.description()
                && self.input_schema() == other.input_schema())
    }
}

/// A tool as described to the model: name, description, schemas and metadata.
///
/// The turn's form of a tool. A script's run gets it as `pb::ToolSpec`
/// (name, description, argument schema as text), and the guest reads that
/// as `tether_guest::ToolDoc`.
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

    /// Refuses identical repeats within the turn even though the tool is
    /// read-only (tools with effects refuse them by default).
    pub fn refuse_repeats(mut self) -> Self {
        self.meta.repeat = RepeatRule::Refuse;
        self
    }

    /// Allows identical repeats within the turn (e.g. a tool that polls),
    /// although the tool has effects.
    pub fn allow_repeats(mut self) -> Self {
        self.meta.repeat = RepeatRule::Allow;
        self
    }

    /// Idempotent: may run again under a call id whose earlier run settled.
    pub fn replay_safe(mut self) -> Self {
        self.meta.replay = ToolReplay::Safe;
        self
    }

    /// Makes tool calls of its own (not offered at the deepest level).
    pub fn nests(mut self) -> Self {
        self.meta.nests = true;
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

/// A failure the tool reports itself (status `error`, not a refusal) — or,
/// made with [`ToolError::around`], a failure around the tool that the turn
/// records like one of its own (status `failed`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    /// The tool's own code, e.g. `not_found`.
    pub code: String,
    /// Its message, for the model.
    pub message: String,
    /// Host-only metadata, never shown to the model.
    pub metadata: Option<Value>,
    /// Host-only: the failure's full text for the operator (e.g. the
    /// exception a tool raised, whose text may hold a secret), recorded in
    /// the call's audit row ([`AuditRecord::detail`](super::AuditRecord::detail))
    /// and never shown to the model; `None` by default.
    pub detail: Option<String>,
    /// Set by [`ToolError::around`]: the code the turn records.
    around: Option<Code>,
}

impl ToolError {
    /// A tool error with `code` and `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError { code: code.into(), message: message.into(), metadata: None, detail: None, around: None }
    }

    /// A failure the tool reports whose code and message come from
    /// `tether_codes` (e.g. an MCP `isError` result: `tool_failed`). Status
    /// `error`, like any tool error.
    pub fn reported(reason: &Reason) -> Self {
        ToolError::new(reason.code().as_str(), reason.message())
    }

    /// A failure AROUND the tool, not of it: what runs the tool was not
    /// available, stopped mid-call, or gave output the caller cannot receive.
    /// The turn records it as a failure at the execution step (status
    /// `failed`, or `undelivered` when the code says the tool ran), exactly
    /// as if it had decided it itself, and leaves the ledger row `started`:
    /// the effect may have happened.
    pub fn around(reason: &Reason) -> Self {
        let mut error = ToolError::reported(reason);
        error.around = Some(reason.code());
        error
    }

    /// The failure this error stands for, if it was made by
    /// [`ToolError::around`].
    pub(crate) fn as_failure(&self) -> Option<Failure> {
        self.around.map(|code| Failure { code, step: Step::Execution, message: self.message.clone() })
    }

    /// Adds host-only metadata.
    pub fn with_metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Adds the failure's full text for the audit row
    /// ([`ToolError::detail`]); the model gets only [`ToolError::message`].
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn repeats_are_refused_by_default_unless_read_only() {
        let spec = |s: ToolSpec| s.meta.refuses_repeats();
        assert!(spec(ToolSpec::new("mail", "", json!({}))), "a tool with effects refuses repeats");
        assert!(!spec(ToolSpec::new("read", "", json!({})).read_only()), "a read-only tool allows them");
        assert!(spec(ToolSpec::new("read", "", json!({})).read_only().refuse_repeats()), "unless it opts in");
        assert!(!spec(ToolSpec::new("poll", "", json!({})).allow_repeats()), "a tool with effects may opt out");
    }
}
