//! One call on its way through the turn: what was asked, who asked, and what
//! came of it.

use super::approval::ApprovalRecord;
use super::step::Step;
use serde_json::{Value, json};
use std::fmt;
use std::sync::Arc;
use tether_codes::{Code, Reason, string_enum};
use tether_telemetry::TraceContext;

/// A tool call as issued: by the model, or by a script through the sidecar.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRequest {
    /// The call's id: the model's id, or `<parent call id>/<n>` for a script's call.
    pub id: String,
    /// The tool named (it may not exist; the lookup step judges that).
    pub name: String,
    /// The arguments as sent.
    pub args: Value,
    /// The most bytes the result may have as JSON for the caller to receive
    /// it (a script's run sets it); `None`: no limit beyond the turn's own.
    pub max_result_bytes: Option<u64>,
    /// The trace context of the caller's span in another process (a
    /// script's call carries the sidecar's span for it); the call's span is
    /// its child. Empty: the call's span is a child of the current span.
    pub trace_context: TraceContext,
    /// Told when the call reaches its approval step and waits for a person,
    /// so a script's run can park meanwhile (`docs/parking.md`).
    pub on_awaiting_person: Option<OnAwaitingPerson>,
    /// The caller's own cancellation of this one call ([`CallRequest::cancelled_by`]).
    pub caller_cancel: Option<CallerCancel>,
}

/// A caller's cancellation of one call, as opposed to its turn's: when the
/// token is cancelled and the call's future is then dropped, the call is
/// recorded `cancelled` by its caller, not as stopped with its parent. Two
/// are equal when they are clones of one another.
#[derive(Clone, Debug)]
pub struct CallerCancel(Arc<tokio_util::sync::CancellationToken>);

impl CallerCancel {
    /// Whether the caller has cancelled the call.
    pub fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }
}

impl PartialEq for CallerCancel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Tells whoever issued a call that it now waits for a person: the turn
/// calls it once, as the call's approval step begins. Cheap to clone; two
/// are equal when they are clones of one another.
#[derive(Clone)]
pub struct OnAwaitingPerson(Arc<dyn Fn() + Send + Sync>);

impl OnAwaitingPerson {
    /// A hook that calls `notify`.
    pub fn new(notify: impl Fn() + Send + Sync + 'static) -> Self {
        OnAwaitingPerson(Arc::new(notify))
    }

    /// Says the call waits for a person.
    pub fn notify(&self) {
        (self.0)();
    }
}

impl fmt::Debug for OnAwaitingPerson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnAwaitingPerson")
    }
}

impl PartialEq for OnAwaitingPerson {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl CallRequest {
    /// A call `id` to `name` with `args`, with no result limit of its own.
    pub fn new(id: impl Into<String>, name: impl Into<String>, args: Value) -> Self {
        CallRequest {
            id: id.into(),
            name: name.into(),
            args,
            max_result_bytes: None,
            trace_context: TraceContext::default(),
            on_awaiting_person: None,
            caller_cancel: None,
        }
    }

    /// The caller cancels this call alone with `token` (the turn goes on):
    /// cancel it, then drop the call's future, and the call is recorded as
    /// `cancelled` (its script's run ends with it) instead of `parent_settled`.
    pub fn cancelled_by(mut self, token: tokio_util::sync::CancellationToken) -> Self {
        self.caller_cancel = Some(CallerCancel(Arc::new(token)));
        self
    }

    /// Tells `hook` when the call waits for a person (its approval step).
    pub fn on_awaiting_person(mut self, hook: OnAwaitingPerson) -> Self {
        self.on_awaiting_person = Some(hook);
        self
    }

    /// Sets the most bytes the result may have as JSON.
    pub fn max_result_bytes(mut self, limit: u64) -> Self {
        self.max_result_bytes = Some(limit);
        self
    }

    /// Makes the call's span a child of `context`, a span in another process.
    pub fn trace_context(mut self, context: TraceContext) -> Self {
        self.trace_context = context;
        self
    }
}

/// Why a call produced no value, with the step that decided it.
///
/// The turn's form of a failure. On the wire it is `pb::Failure` (code and
/// message), and a guest reads it as `tether_guest::Failure` (the same two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The stable code; its display name is [`Code::display_name`].
    pub code: Code,
    /// The step that refused or ended the call.
    pub step: Step,
    /// The reason, written for the model (or script) that reads it.
    pub message: String,
}

impl Failure {
    /// The failure `reason` gives, decided at `step`.
    pub fn new(reason: &Reason, step: Step) -> Self {
        Failure { code: reason.code(), step, message: reason.message() }
    }

    /// A failure decided elsewhere (the sidecar), as it was reported: a code
    /// this turn does not know is kept in the message as `internal`.
    pub fn reported(code: &str, step: Step, message: impl Into<String>) -> Self {
        match Code::parse(code) {
            Some(code) => Failure { code, step, message: message.into() },
            None => Failure { code: Code::Internal, step, message: format!("`{code}`: {}", message.into()) },
        }
    }

    /// The failure as the model reads it (the shape of
    /// [`CallResult::to_model_value`]): `{"ok": false, "value": null,
    /// "error": {"code": …, "message": …}}`.
    pub fn to_model_value(&self) -> Value {
        json!({"ok": false, "value": null, "error": {"code": self.code.as_str(), "message": self.message}})
    }

    /// The display name of [`Failure::code`].
    pub fn display_name(&self) -> &'static str {
        self.code.display_name()
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.code.display_name(), self.code, self.message)
    }
}

/// What a call came to.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// The tool ran and returned a value.
    Ok(Value),
    /// The tool ran and reported its own failure, with the tool's own code.
    ToolError {
        /// The tool's code, e.g. `not_found`.
        code: String,
        /// The tool's message.
        message: String,
    },
    /// The call was refused, denied, timed out or cancelled.
    Failed(Failure),
}

string_enum! {
    /// The status of a finished call, as stored in the audit log and the
    /// nested-call summary by its name ([`CallStatus::as_str`]): `"ok"`,
    /// `"error"`, `"failed"`, `"abandoned"` or `"undelivered"`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum CallStatus {
        /// The tool returned a value.
        Ok => "ok",
        /// The tool reported its own failure.
        Error => "error",
        /// Refused, denied, timed out or cancelled while the turn waited on it.
        Failed => "failed",
        /// Dropped before it settled (its parent settled, or the turn ended and
        /// dropped it mid-way).
        Abandoned => "abandoned",
        /// The tool ran (its effect happened), but its result could not be handed
        /// back (too large, or unreadable).
        Undelivered => "undelivered",
    }
}

impl CallStatus {
    /// The status a store read as `name`; an unknown name counts as `Failed`.
    pub fn from_stored(name: &str) -> CallStatus {
        CallStatus::parse(name).unwrap_or(CallStatus::Failed)
    }
}

/// The result of [`Turn::execute`](super::Turn::execute): the same shape for
/// both origins.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// The call's id.
    pub call_id: String,
    /// The tool named.
    pub tool: String,
    /// What came of it.
    pub outcome: CallOutcome,
    /// Host-only metadata from the tool (e.g. `run_script`'s `nested_calls`);
    /// never shown to the model.
    pub metadata: Option<Value>,
    /// The approval decision, when the call needed one and got that far.
    pub approval: Option<ApprovalRecord>,
    /// The arguments as the turn's records show them: redacted by the turn's
    /// hook, cut at its audit cap. Host-only.
    pub recorded_args: String,
}

impl CallResult {
    /// The status: ok, error, failed, or undelivered when the tool ran but
    /// its result could not be handed back (a returned result is never
    /// abandoned).
    pub fn status(&self) -> CallStatus {
        match &self.outcome {
            CallOutcome::Ok(_) => CallStatus::Ok,
            CallOutcome::ToolError { .. } => CallStatus::Error,
            CallOutcome::Failed(failure) if failure.code.tool_ran() => CallStatus::Undelivered,
            CallOutcome::Failed(_) => CallStatus::Failed,
        }
    }

    /// The failure, when the call was refused, denied or ended.
    pub fn failure(&self) -> Option<&Failure> {
        match &self.outcome {
            CallOutcome::Failed(failure) => Some(failure),
            _ => None,
        }
    }

    /// The error code the caller sees: a [`Code`] or the tool's own code.
    pub fn error_code(&self) -> Option<&str> {
        match &self.outcome {
            CallOutcome::Ok(_) => None,
            CallOutcome::ToolError { code, .. } => Some(code),
            CallOutcome::Failed(failure) => Some(failure.code.as_str()),
        }
    }

    /// The value the model reads, the same shape a script's call returns:
    /// `{"ok": true, "value": …, "error": null}` or
    /// `{"ok": false, "value": null, "error": {"code": …, "message": …}}`.
    pub fn to_model_value(&self) -> Value {
        match &self.outcome {
            CallOutcome::Ok(value) => json!({"ok": true, "value": value, "error": null}),
            CallOutcome::ToolError { code, message } => {
                json!({"ok": false, "value": null, "error": {"code": code, "message": message}})
            }
            CallOutcome::Failed(failure) => failure.to_model_value(),
        }
    }
}
