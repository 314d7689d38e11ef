//! Step 7: approval. The approver is shown the tool and the exact arguments
//! that will be sent, and the origin; the turn applies the SAME wait limit to
//! a script's call as to the model's.

use super::origin::CallOrigin;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use tether_codes::string_enum;

/// What the approver is shown.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// The turn.
    pub turn_id: String,
    /// The call's id (`<parent>/<n>` for a script's call).
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The tool's description.
    pub description: String,
    /// The exact arguments that will be sent if approved.
    pub args: Value,
    /// Who issued the call.
    pub origin: CallOrigin,
    /// Why approval is needed (the policy rule's reason, if any).
    pub reason: Option<String>,
}

/// The approver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalDecision {
    /// Yes or no.
    pub approved: bool,
    /// Who or what decided, for the audit log (e.g. `"terminal"`, a user id).
    pub decided_by: String,
    /// An optional reason, passed on to the caller on denial.
    pub reason: Option<String>,
}

impl ApprovalDecision {
    /// A yes from `decided_by`.
    pub fn approve(decided_by: impl Into<String>) -> Self {
        ApprovalDecision { approved: true, decided_by: decided_by.into(), reason: None }
    }

    /// A no from `decided_by`.
    pub fn deny(decided_by: impl Into<String>, reason: Option<String>) -> Self {
        ApprovalDecision { approved: false, decided_by: decided_by.into(), reason }
    }
}

string_enum! {
    /// How an approval step ended, as stored in the audit log by its name
    /// ([`ApprovalVerdict::as_str`]): `"approved"`, `"denied"`, `"timed_out"`
    /// or `"abandoned"`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ApprovalVerdict {
        /// The approver said yes.
        Approved => "approved",
        /// The approver said no.
        Denied => "denied",
        /// The approver did not answer within the wait limit.
        TimedOut => "timed_out",
        /// The turn ended while the approver was deciding.
        Abandoned => "abandoned",
    }
}

/// The approval step's record: the verdict, who decided it, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRecord {
    /// The verdict.
    pub verdict: ApprovalVerdict,
    /// Who decided (`"timeout"` for a time-out, `"turn"` when the turn ended).
    pub decided_by: String,
    /// The approver's reason ([`ApprovalDecision::reason`]), for a yes or a
    /// no; `None` when it gave none, or did not answer.
    pub reason: Option<String>,
}

impl ApprovalRecord {
    /// A record of the turn's own making (`decided_by` is `"timeout"` or
    /// `"turn"`): no approver's reason.
    pub(crate) fn without_answer(verdict: ApprovalVerdict, decided_by: &str) -> Self {
        ApprovalRecord { verdict, decided_by: decided_by.to_owned(), reason: None }
    }
}

/// Decides approval-required calls.
///
/// # Cancel safety
/// The turn drops the future when the wait limit passes or the turn ends;
/// an implementation must treat that as "no answer".
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// Decides `request`.
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision;

    /// True when a decision may wait for a person (the default). The turn
    /// then tells the call's issuer, so a script's run parks while it
    /// waits (`docs/parking.md`); an approver that answers by rule at once
    /// says false.
    fn asks_a_person(&self) -> bool {
        true
    }

    /// True when the person answers from outside this process, later (the
    /// CLI's `--approval later`, an approval queue a web app serves): a
    /// script's run waiting only on such calls is handed to the audit store
    /// with them, parked, and this process forgets it (`docs/parking.md`,
    /// "Durable turns"). Default false: the turn waits here, up to the
    /// approval wait limit.
    fn defers(&self) -> bool {
        false
    }
}

/// The approver of `--approval later`: it never answers in this process.
/// Each call that needs approval waits in the audit store for a person to
/// answer it from anywhere (`Turn::answer_pending`, `tether approve`); a
/// script's run parks there with it. A call whose run cannot park (a guest
/// that cannot, a direct call) waits here until the approval wait limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeferredApprover;

#[async_trait::async_trait]
impl Approver for DeferredApprover {
    async fn decide(&self, _: &ApprovalRequest) -> ApprovalDecision {
        std::future::pending().await
    }

    fn defers(&self) -> bool {
        true
    }
}

/// A fixed answer of the [`PolicyApprover`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Approve.
    Approve,
    /// Deny.
    Deny,
    /// Never answer: the turn's approval wait limit decides (time-out).
    NeverAnswer,
}

/// A headless approver: fixed answers per tool, a default for the rest, and
/// a record of every request it was shown. `decided_by` is `"policy"`.
#[derive(Debug)]
pub struct PolicyApprover {
    default: Answer,
    per_tool: HashMap<String, Answer>,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl PolicyApprover {
    /// Answers every request with `default`.
    pub fn new(default: Answer) -> Self {
        PolicyApprover { default, per_tool: HashMap::new(), asked: Mutex::new(Vec::new()) }
    }

    /// Approves everything.
    pub fn approve_all() -> Self {
        PolicyApprover::new(Answer::Approve)
    }

    /// Denies everything.
    pub fn deny_all() -> Self {
        PolicyApprover::new(Answer::Deny)
    }

    /// Never answers.
    pub fn never_answer() -> Self {
        PolicyApprover::new(Answer::NeverAnswer)
    }

    /// Answers calls of `tool` with `answer`.
    pub fn with_tool(mut self, tool: impl Into<String>, answer: Answer) -> Self {
        self.per_tool.insert(tool.into(), answer);
        self
    }

    /// Every request shown so far, in order.
    pub fn asked(&self) -> Vec<ApprovalRequest> {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[async_trait::async_trait]
impl Approver for PolicyApprover {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).push(request.clone());
        match self.per_tool.get(&request.tool).copied().unwrap_or(self.default) {
            Answer::Approve => ApprovalDecision::approve("policy"),
            Answer::Deny => ApprovalDecision::deny("policy", Some("denied by the approval policy".into())),
            Answer::NeverAnswer => std::future::pending().await,
        }
    }

    /// A rule answers at once; [`Answer::NeverAnswer`] stands for a person
    /// who never does.
    fn asks_a_person(&self) -> bool {
        self.default == Answer::NeverAnswer || self.per_tool.values().any(|answer| *answer == Answer::NeverAnswer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(tool: &str) -> ApprovalRequest {
        ApprovalRequest {
            turn_id: "t".into(),
            call_id: "c/1".into(),
            tool: tool.into(),
            description: String::new(),
            args: json!({"to": "dana@example.com"}),
            origin: CallOrigin::Script { run_id: "r1".into(), parent_call_id: "c".into(), depth: 1 },
            reason: None,
        }
    }

    #[tokio::test]
    async fn the_policy_approver_answers_per_tool_and_remembers_requests() {
        let approver = PolicyApprover::deny_all().with_tool("send_email", Answer::Approve);
        assert!(approver.decide(&request("send_email")).await.approved);
        let no = approver.decide(&request("delete")).await;
        assert!(!no.approved);
        assert_eq!(no.decided_by, "policy");
        assert_eq!(approver.asked().len(), 2);
        let never = PolicyApprover::never_answer();
        let r = request("x");
        let waited = tokio::time::timeout(std::time::Duration::from_millis(20), never.decide(&r)).await;
        assert!(waited.is_err(), "never answers");
    }
}
