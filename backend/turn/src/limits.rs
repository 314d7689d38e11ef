//! The turn's limits and their defaults, in one place.

use super::audit::DEFAULT_AUDIT_ARGS_BYTES;
use std::time::Duration;

/// The turn's limits. Each has a default, listed per field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnLimits {
    /// Tool calls per turn, model and script calls together, calls in flight
    /// included. Default 200.
    pub max_tool_calls: u32,
    /// Approval-required calls per turn (counted by the pre-execution check,
    /// whatever the approver decides). Default 25.
    pub max_approval_calls: u32,
    /// How long a call waits for the approver, the same for both origins.
    /// Default 5 minutes.
    pub approval_timeout: Duration,
    /// The time limit of a tool that sets none. Default 2 minutes.
    pub default_tool_time_limit: Duration,
    /// Bytes of arguments kept whole in an audit or ledger row; larger ones
    /// are recorded as a marked cut ([`record_args`](super::record_args)),
    /// except the script tool's `code`, which is always kept whole. Default
    /// 4 KiB.
    pub audit_args_bytes: usize,
    /// Put (redacted) arguments in `ToolStarted` events and arguments and
    /// errors in the nested-call summary. Default off.
    pub capture_payloads: bool,
    /// The deepest a call may be nested: the model's calls are depth 0, a
    /// script's calls depth 1, calls made by tools that call tools deeper.
    /// At this depth no tool that nests is offered or callable. Default 3.
    pub max_depth: u32,
    /// Calls one script run may have refused; every later call of the run is
    /// refused without being evaluated. Counts alongside the sidecar's
    /// per-script call cap. Default 8.
    pub max_refused_script_calls: u32,
    /// The most bytes a tool's result may have as JSON for any caller, the
    /// model's direct calls included. Default [`DEFAULT_MAX_RESULT_BYTES`]
    /// (4 MiB, the sidecar's own limit for a script's call); `None`: only a
    /// script run's own limit applies, and a direct call's result is
    /// unbounded.
    pub max_result_bytes: Option<u64>,
    /// What the model is offered as functions. Default
    /// [`ModelOffer::Every`].
    pub model_offer: ModelOffer,
}

/// What a turn offers its model as functions; a script sees every callable
/// tool either way (its stubs are in the script tool's description), and
/// every call meets the same checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModelOffer {
    /// Every tool, and the script tool beside them.
    #[default]
    Every,
    /// The script tool alone (and `activate_tools`, and deferred tools by
    /// name): the tools' definitions reach the model once, as the stubs in
    /// the script tool's description, not a second time as functions. A turn
    /// without a script tool offers every tool.
    ScriptOnly,
    /// The script tool with the tools' names only, and `search_tools` and
    /// `describe_tools` to find tools by words and read the stubs of those
    /// it needs (and `activate_tools`, and deferred tools by name): for tool
    /// sets too large to describe in full. A turn without a script tool
    /// offers every tool.
    Search,
}

impl ModelOffer {
    /// Its name in a config (`[turn] offer`): `every`, `script` or `search`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelOffer::Every => "every",
            ModelOffer::ScriptOnly => "script",
            ModelOffer::Search => "search",
        }
    }

    /// The offer named `name` ([`as_str`](Self::as_str)).
    pub fn parse(name: &str) -> Option<ModelOffer> {
        [ModelOffer::Every, ModelOffer::ScriptOnly, ModelOffer::Search].into_iter().find(|offer| offer.as_str() == name)
    }
}

/// The default [`TurnLimits::max_result_bytes`]: 4 MiB, as the sidecar's
/// default limit for one call's result, so a direct call and a script's
/// call are held to the same size.
pub const DEFAULT_MAX_RESULT_BYTES: u64 = 4 << 20;

impl Default for TurnLimits {
    fn default() -> Self {
        TurnLimits {
            max_tool_calls: 200,
            max_approval_calls: 25,
            approval_timeout: Duration::from_secs(300),
            default_tool_time_limit: Duration::from_secs(120),
            audit_args_bytes: DEFAULT_AUDIT_ARGS_BYTES,
            capture_payloads: false,
            max_depth: 3,
            max_refused_script_calls: 8,
            max_result_bytes: Some(DEFAULT_MAX_RESULT_BYTES),
            model_offer: ModelOffer::Every,
        }
    }
}
