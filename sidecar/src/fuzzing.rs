//! The sidecar's call path without wasmtime, for the fuzz targets in `fuzz/`.
//! Not an API: hidden from the docs, and it changes with the code it exposes.
//!
//! A [`CallPath`] is one run's side of the tether exactly as
//! `tether_v1.call` and the run's inbound reader use it — the same
//! functions, minus the guest: request documents go in as the bytes a guest
//! would have written, response documents come out as the bytes the guest
//! would read, and the backend's messages go in as a stream.

use crate::abi::answer_call;
use crate::calls::{CallLimits, CallPort, RunLink};
use crate::error::CancelledBy;
use crate::metrics::Metrics;
use crate::service;
use crate::slots::{Admission, Capacity};
use crate::stream::{Flow, Outbound, PendingCalls};
use futures::Stream;
use std::sync::Arc;
use tether_proto::pb;
use tokio::sync::mpsc;
use tonic::Status;

/// The call limits of a fuzzed run; see [`Limits`](crate::Limits) for what each means.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Call ids are `<parent_call_id>/<n>`, `n` counting from 1.
    pub parent_call_id: String,
    /// The per-script call cap.
    pub max_calls: u32,
    /// The size limit of one call's arguments, in bytes of JSON.
    pub args_bytes: u64,
    /// The size limit of one call's result, in bytes of JSON.
    pub result_bytes: u64,
}

/// How a run's inbound reader ended the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboundEnd {
    /// The backend sent `Cancel` (with its reason), or half-closed the stream (`None`).
    Cancelled(Option<String>),
    /// The backend broke the stream rules: the protocol error the run ends with.
    Broke(String),
    /// The stream failed as a reset or lost connection does.
    Gone,
}

/// One run's side of the tether, with one execution slot.
#[derive(Debug)]
pub struct CallPath {
    port: CallPort,
    pending: PendingCalls,
    _admission: Admission,
}

impl CallPath {
    /// A run whose messages to the backend go to `outbound`.
    pub async fn new(limits: Limits, outbound: mpsc::Sender<Result<pb::SidecarMessage, Status>>) -> CallPath {
        let capacity = Arc::new(Capacity::new(1, 1, 1, 0));
        // One place to queue, nobody else queued, an empty `Start`: admission cannot fail.
        let Ok(mut admission) = capacity.hold_start(0).and_then(|start| capacity.admit(start)) else {
            unreachable!("a fresh capacity admits one run")
        };
        let slot = admission.first_slot().await;
        let link = RunLink::new(Outbound::new(outbound, Flow::unfollowed()), 0, Arc::new(Metrics::new()));
        let limits = CallLimits {
            parent_call_id: limits.parent_call_id,
            max_calls: limits.max_calls,
            args_bytes: limits.args_bytes,
            result_bytes: limits.result_bytes,
        };
        let pending = link.pending.clone();
        let port = CallPort::new(limits, link, slot, tracing::Span::none());
        CallPath { port, pending, _admission: admission }
    }

    /// What `tether_v1.call` does with `request`: the response document
    /// staged for the guest.
    ///
    /// # Errors
    /// The error that ends the run: an unreadable batch, or the backend gone.
    pub async fn call(&mut self, request: &[u8]) -> Result<Vec<u8>, String> {
        match answer_call(&mut self.port, request, None).await {
            Ok(Some(document)) => Ok(document),
            Ok(None) => Err("the run asked to park, which this path never allows".to_owned()),
            Err(error) => Err(format!("{error:#}")),
        }
    }

    /// The run's inbound reader over the backend's messages after `Start`:
    /// completes when one of them (or the stream's end) ends the run.
    pub fn read_inbound<S>(&self, inbound: S) -> impl Future<Output = InboundEnd> + use<S>
    where
        S: Stream<Item = Result<pb::BackendMessage, Status>> + Unpin,
    {
        let pending = self.pending.clone();
        async move {
            match service::read_inbound(inbound, &pending).await {
                service::InboundEnd::Cancelled(CancelledBy::Backend(reason)) => InboundEnd::Cancelled(Some(reason)),
                service::InboundEnd::Cancelled(_) => InboundEnd::Cancelled(None),
                service::InboundEnd::Broke(what) => InboundEnd::Broke(what),
                service::InboundEnd::Gone => InboundEnd::Gone,
            }
        }
    }
}

/// What `Start.resume.state` goes through before anything of it is used:
/// the seal, the format, the guest build and the owner. `Ok` with the
/// guest's state when `state` resumes `turn_id`'s run `run_id` of the guest
/// whose module hashes to `build`, sealed under `key`.
///
/// # Errors
/// Why the state is refused, in the words the backend gets.
pub fn unseal(
    key: &crate::ParkKey,
    state: &[u8],
    build: &[u8; 32],
    turn_id: &str,
    run_id: &str,
) -> Result<Vec<u8>, String> {
    crate::park::unseal(key, state, build, turn_id, run_id)
        .map(|carried| carried.guest_state)
        .map_err(|refused| format!("{}: {refused}", refused.kind()))
}

/// A state as a sidecar with `key` seals it for `turn_id`'s run `run_id` of
/// the guest `build`, carrying `guest_state`.
pub fn seal(key: &crate::ParkKey, guest_state: &[u8], build: &[u8; 32], turn_id: &str, run_id: &str) -> Vec<u8> {
    let carried = crate::park::Carried {
        guest_build: build.to_vec(),
        turn_id: turn_id.to_owned(),
        run_id: run_id.to_owned(),
        guest_state: guest_state.to_vec(),
        ..crate::park::Carried::default()
    };
    crate::park::seal(key, &carried)
}
