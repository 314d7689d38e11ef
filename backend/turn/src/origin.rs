//! Who issued a call, and how deep it is nested.

/// Who issued a call. Decides the exclusions (step 3) and the depth, and what
/// the audit row and events say; nothing else.
///
/// Depth: a call the model makes is depth 0, a script's call is one deeper
/// than the call that started the script, and a call a tool makes from inside
/// its own execution one deeper than that tool's call.
///
/// Stored (with a parked run) as JSON tagged by `kind`: `{"kind": "script",
/// "run_id", "parent_call_id", "depth"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CallOrigin {
    /// The model called the tool directly (depth 0).
    Model,
    /// A script called the tool from inside a `run_script` run.
    Script {
        /// The backend's id for the script run.
        run_id: String,
        /// The id of the call that started the script (the immediate parent).
        parent_call_id: String,
        /// The call's depth.
        depth: u32,
    },
    /// A tool called another tool from inside its own execution (e.g. an
    /// agent tool's turn, or a host tool that composes others).
    Tool {
        /// The id of the calling tool's call (the immediate parent).
        parent_call_id: String,
        /// The call's depth.
        depth: u32,
    },
}

impl CallOrigin {
    /// `"model"`, `"script"` or `"tool"`, as stored in the audit log.
    pub fn kind(&self) -> &'static str {
        match self {
            CallOrigin::Model => "model",
            CallOrigin::Script { .. } => "script",
            CallOrigin::Tool { .. } => "tool",
        }
    }

    /// True for a call a script made.
    pub fn is_script(&self) -> bool {
        matches!(self, CallOrigin::Script { .. })
    }

    /// How deeply the call is nested: 0 for the model's own calls.
    pub fn depth(&self) -> u32 {
        match self {
            CallOrigin::Model => 0,
            CallOrigin::Script { depth, .. } | CallOrigin::Tool { depth, .. } => *depth,
        }
    }

    /// The immediate parent's call id, for a nested call.
    pub fn parent_call_id(&self) -> Option<&str> {
        match self {
            CallOrigin::Model => None,
            CallOrigin::Script { parent_call_id, .. } | CallOrigin::Tool { parent_call_id, .. } => Some(parent_call_id),
        }
    }

    /// The script run's id, for a script's call.
    pub fn run_id(&self) -> Option<&str> {
        match self {
            CallOrigin::Script { run_id, .. } => Some(run_id),
            CallOrigin::Model | CallOrigin::Tool { .. } => None,
        }
    }
}
