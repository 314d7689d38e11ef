//! Approval through the MCP client: an approval-required call — a script's
//! or a direct one — is shown to the person at the client as an
//! `elicitation/create` request naming the tool and its exact arguments;
//! accept approves, decline or cancel denies, and the audit row says which
//! client answered. A client that declared no elicitation cannot ask its
//! person, so `[serve] approval_fallback` decides instead: deny (the
//! default), allow-all, or park the run for `tether approve`.
//!
//! The choice is made per request, from what the client declared at
//! `initialize`: the approver is the session's, built before the client is
//! known.

use crate::answer_all::AnswerAll;
use rmcp::model::{
    CancelledNotificationParam, ClientResult, ElicitRequestParams, ElicitationAction, Request, RequestId, ServerRequest,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use std::sync::Arc;
use tether_backend::tools::ApprovalFallback;
use tether_backend::turn::{ApprovalDecision, ApprovalRequest, Approver, DeferredApprover};

/// How much of the arguments the elicitation message shows whole; longer
/// arguments are cut there, marked, with their full size.
const SHOWN_ARGS_BYTES: usize = 16 * 1024;

/// The session's approver: the client's person through elicitation, or the
/// configured fallback when the client cannot elicit.
pub(crate) struct ClientApprover {
    peer: Peer<RoleServer>,
    fallback: Arc<dyn Approver>,
}

impl std::fmt::Debug for ClientApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientApprover").field("elicits", &self.elicits()).finish_non_exhaustive()
    }
}

impl ClientApprover {
    /// Asks through `peer` when it can elicit; else `fallback` decides.
    pub(crate) fn new(peer: Peer<RoleServer>, fallback: ApprovalFallback) -> ClientApprover {
        ClientApprover { peer, fallback: fallback_approver(fallback) }
    }

    /// True when the client declared elicitation at `initialize`.
    pub(crate) fn elicits(&self) -> bool {
        self.peer.peer_info().is_some_and(|info| info.capabilities.elicitation.is_some())
    }

    /// Who answered, for the audit row: the client as it named itself.
    fn client_name(&self) -> String {
        match self.peer.peer_info() {
            Some(info) => format!("{} {}", info.client_info.name, info.client_info.version),
            None => "an unnamed client".to_owned(),
        }
    }

    async fn elicit(&self, request: &ApprovalRequest) -> ApprovalDecision {
        let who = format!("mcp client `{}` (elicitation)", self.client_name());
        let params: ElicitRequestParams = match serde_json::from_value(json!({
            "mode": "form",
            "message": message(request),
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "reason": {"type": "string", "title": "Reason", "description": "Why (optional; kept in the audit log)"}
                }
            }
        })) {
            Ok(params) => params,
            Err(error) => {
                tracing::error!(%error, "cannot build the elicitation request");
                return ApprovalDecision::deny(who, Some("the approval request could not be built".to_owned()));
            }
        };
        let request = ServerRequest::ElicitRequest(Request::new(params));
        let handle = match self.peer.send_request_with_option(request, PeerRequestOptions::no_options()).await {
            Ok(handle) => handle,
            Err(error) => {
                tracing::warn!(%error, "the elicitation could not be sent");
                return ApprovalDecision::deny(who, Some(format!("the client could not ask: {error}")));
            }
        };
        // Until it is answered: if the turn stops waiting (the approval wait
        // limit, the turn or the request cancelled), the client is told so.
        let mut unanswered = Unanswered { peer: self.peer.clone(), id: Some(handle.id.clone()) };
        let asked = handle.await_response().await;
        unanswered.id = None;
        match asked {
            Ok(ClientResult::ElicitResult(result)) => {
                let reason = result
                    .content
                    .as_ref()
                    .and_then(|content| content.get("reason"))
                    .and_then(Value::as_str)
                    .filter(|reason| !reason.is_empty())
                    .map(str::to_owned);
                match result.action {
                    ElicitationAction::Accept => ApprovalDecision { approved: true, decided_by: who, reason },
                    ElicitationAction::Decline => ApprovalDecision::deny(who, reason.or(Some("declined".to_owned()))),
                    _ => ApprovalDecision::deny(who, reason.or(Some("cancelled".to_owned()))),
                }
            }
            Ok(other) => {
                tracing::warn!(?other, "the client answered the elicitation with something else");
                ApprovalDecision::deny(who, Some("the client's answer was not an elicitation result".to_owned()))
            }
            Err(error) => {
                tracing::warn!(%error, "the elicitation failed");
                ApprovalDecision::deny(who, Some(format!("the client could not ask: {error}")))
            }
        }
    }
}

#[async_trait::async_trait]
impl Approver for ClientApprover {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision {
        if self.elicits() { self.elicit(request).await } else { self.fallback.decide(request).await }
    }

    fn asks_a_person(&self) -> bool {
        self.elicits() || self.fallback.asks_a_person()
    }

    fn defers(&self) -> bool {
        !self.elicits() && self.fallback.defers()
    }
}

/// An elicitation sent and not answered yet; dropped unanswered (the turn
/// stopped waiting), it tells the client to close its question.
struct Unanswered {
    peer: Peer<RoleServer>,
    id: Option<RequestId>,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        // A notification cannot be sent from `drop`, which cannot wait: it
        // goes on a task of its own, one message, ended with the session.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let peer = self.peer.clone();
        let reason = "the approval is no longer awaited (its wait limit passed, or the call ended)".to_owned();
        runtime.spawn(async move {
            if let Err(error) = peer.notify_cancelled(CancelledNotificationParam::new(Some(id), Some(reason))).await {
                tracing::debug!(%error, "the client was not told the elicitation is withdrawn");
            }
        });
    }
}

/// The approver `fallback` names.
pub(crate) fn fallback_approver(fallback: ApprovalFallback) -> Arc<dyn Approver> {
    match fallback {
        ApprovalFallback::Deny => Arc::new(DenyNoElicitation),
        ApprovalFallback::AllowAll => Arc::new(AnswerAll::allow_all()),
        ApprovalFallback::Park => Arc::new(DeferredApprover),
    }
}

/// `approval_fallback = "deny"`: the client cannot ask its person, so no.
#[derive(Debug)]
struct DenyNoElicitation;

#[async_trait::async_trait]
impl Approver for DenyNoElicitation {
    async fn decide(&self, _: &ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::deny(
            "approval_fallback deny",
            Some(
                "the MCP client cannot ask its person (it declared no elicitation), and [serve] \
                 approval_fallback is `deny`"
                    .to_owned(),
            ),
        )
    }

    fn asks_a_person(&self) -> bool {
        false
    }
}

/// What the person is shown: the tool, who called it, why it needs
/// approval, and the exact arguments that will be sent.
fn message(request: &ApprovalRequest) -> String {
    let args = serde_json::to_string_pretty(&request.args).unwrap_or_else(|_| request.args.to_string());
    let args = match args.char_indices().nth(SHOWN_ARGS_BYTES) {
        Some((cut, _)) => format!("{}\n… (cut; {} bytes in all)", &args[..cut], args.len()),
        None => args,
    };
    let from = match request.origin.kind() {
        "script" => format!("a script (call {})", request.call_id),
        _ => format!("a direct call ({})", request.call_id),
    };
    let why = request.reason.as_deref().map(|reason| format!("\nWhy approval: {reason}")).unwrap_or_default();
    format!(
        "Approve `{}`, called by {from} in turn {}?{why}\n\nIts exact arguments:\n{args}\n\nAccept approves this one call; \
         decline denies it.",
        request.tool, request.turn_id
    )
}
