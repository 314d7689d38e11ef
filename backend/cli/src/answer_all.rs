//! The approver that answers every call the same way, at once, and says so
//! on stderr with each call's exact arguments and a running count: `--approval
//! allow-all`, and the calls a run makes after `tether approve --all`.

use std::sync::atomic::{AtomicU32, Ordering};
use tether_backend::turn::{ApprovalDecision, ApprovalRequest, Approver};

/// Answers every request with one decision, printing each.
#[derive(Debug)]
pub struct AnswerAll {
    decision: ApprovalDecision,
    answered: AtomicU32,
}

impl AnswerAll {
    /// Every request answered with `decision`.
    pub fn new(decision: ApprovalDecision) -> Self {
        AnswerAll { decision, answered: AtomicU32::new(0) }
    }

    /// `--approval allow-all`: every request approved, as `allow-all`.
    pub fn allow_all() -> Self {
        AnswerAll::new(ApprovalDecision::approve("allow-all"))
    }
}

#[async_trait::async_trait]
impl Approver for AnswerAll {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision {
        let count = self.answered.fetch_add(1, Ordering::Relaxed) + 1;
        let verb = if self.decision.approved { "approved" } else { "denied" };
        eprintln!(
            "{verb} by {} (call {count} it answered): {} {} {}",
            self.decision.decided_by, request.call_id, request.tool, request.args
        );
        self.decision.clone()
    }

    fn asks_a_person(&self) -> bool {
        false
    }
}
