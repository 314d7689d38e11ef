//! The gRPC `Sidecar` service: admits runs and drives each run's stream.
//!
//! Ownership: every run is tracked by the sidecar's [`Lifecycle`], and
//! driven by its response stream (`driven`) or, on a worker, by a task of its
//! own. The run owns the guest, the inbound stream and the outbound sender. It ends when the
//! script ends, when the backend cancels, breaks the protocol or goes away
//! (inbound stream ends, or nobody reads the outbound stream), at the run's
//! deadline, or when the lifecycle cancels runs (shutdown, or a drain past its
//! deadline) — and dropping the guest's future frees its instance, slot and
//! waiting place at once.

use crate::abi::ParkPlan;
use crate::calls::{CallLimits, CallPort, ParkWhen, RunLink};
use crate::config::SidecarConfig;
use crate::cpu::{CpuMeter, Metered};
use crate::driven::{DrivenRuns, RunStream};
use crate::engine::SandboxEngine;
use crate::error::{CancelledBy, LimitExceeded, RejectRun, RunEnd};
use crate::lifecycle::{Lifecycle, Phase};
use crate::loader::{EngineCell, EngineState};
use crate::memory::MemoryBudget;
use crate::metrics::Metrics;
use crate::park::{self, Carried, ParkedGuest};
use crate::run::{self, RunPlan};
use crate::slots::{Admission, Capacity};
use crate::stream::{Flow, Outbound, PendingCalls};
use crate::workers::Placement;
use futures::{Stream, StreamExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tether_proto::pb::{self, backend_message, sidecar_server};
use tether_telemetry::TraceContext;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

/// Messages a run may have in flight to a slow reader before it waits.
const OUTBOUND_BUFFER: usize = 64;

/// State shared by the service and every run.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) engine: EngineCell,
    pub(crate) config: SidecarConfig,
    pub(crate) capacity: Arc<Capacity>,
    pub(crate) memory: Arc<MemoryBudget>,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) metrics: Arc<Metrics>,
    /// Runs driven by their response streams (`driven`).
    pub(crate) driven: Arc<DrivenRuns>,
    /// What seals parked states: `config.park.key`, or one made at start.
    pub(crate) park_key: crate::park::ParkKey,
}

/// The `tether.v1.Sidecar` gRPC service.
#[derive(Debug, Clone)]
pub struct SidecarService {
    shared: Arc<Shared>,
    /// Where runs go; `None`: on the runtime that serves the request.
    placement: Option<Placement>,
}

impl SidecarService {
    /// The service over `shared`, its runs placed by `placement` (see
    /// `workers`), or on the serving runtime when `None`.
    pub(crate) fn new(shared: Arc<Shared>, placement: Option<Placement>) -> Self {
        SidecarService { shared, placement }
    }
}

#[tonic::async_trait]
impl sidecar_server::Sidecar for SidecarService {
    type RunStream = RunStream;

    async fn run(&self, request: Request<Streaming<pb::BackendMessage>>) -> Result<Response<Self::RunStream>, Status> {
        // The backend's span for the run, if it sent one: the run's span is its child.
        let parent = TraceContext::from_metadata(request.metadata());
        match self.open(request.into_inner(), parent).await {
            Ok(outbound) => Ok(Response::new(outbound)),
            Err(reject) => {
                self.shared.metrics.run_refused(reject.metric_reason());
                Err(reject.into())
            }
        }
    }

    async fn describe(&self, _: Request<pb::DescribeRequest>) -> Result<Response<pb::DescribeResponse>, Status> {
        let shared = &self.shared;
        let runtimes = match shared.engine.state() {
            EngineState::Ready(engine) => engine.runtime_names(),
            // None yet: the health check says when there are.
            EngineState::Loading | EngineState::Failed(_) => Vec::new(),
        };
        Ok(Response::new(pb::DescribeResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            protocol: tether_proto::PROTOCOL.to_owned(),
            runtimes,
            limits: Some(shared.config.limits.to_proto()),
            slots: shared.capacity.slot_count() as u32,
            live_runs: shared.capacity.live() as u32,
        }))
    }
}

impl SidecarService {
    /// Reads `Start` and admits the run, or says why not.
    async fn open(
        &self,
        mut inbound: Streaming<pb::BackendMessage>,
        parent: TraceContext,
    ) -> Result<<Self as sidecar_server::Sidecar>::RunStream, RejectRun> {
        // Counted until `Start` is in, and held for `start_timeout` at most.
        let awaiting = self.shared.capacity.awaiting_start();
        let timeout = self.shared.config.start_timeout;
        let first = tokio::time::timeout(timeout, inbound.message())
            .await
            .map_err(|_| RejectRun::NoStart(timeout))?
            .map_err(RejectRun::Unreadable)?;
        drop(awaiting);
        let start = match first {
            Some(pb::BackendMessage { kind: Some(backend_message::Kind::Start(start)) }) => start,
            Some(_) => return Err(RejectRun::Protocol("the first message of a run must be `Start`".into())),
            None => return Err(RejectRun::Protocol("the stream ended before `Start`".into())),
        };
        let engine = match (self.shared.lifecycle.phase(), self.shared.engine.state()) {
            (Phase::Draining | Phase::Stopped, _) => return Err(RejectRun::Draining),
            (_, EngineState::Loading) => return Err(RejectRun::Loading),
            (_, EngineState::Failed(_)) => return Err(RejectRun::LoadFailed),
            (_, EngineState::Ready(engine)) => engine,
        };
        let Some(runtime) = engine.runtime(&start.language) else {
            return Err(RejectRun::UnknownLanguage(start.language));
        };
        // Charged before the `Start` is parsed, so one past the budget costs
        // no more than its receipt.
        let capacity = &self.shared.capacity;
        let held = capacity.hold_start(run::start_bytes(&start)).map_err(RejectRun::from)?;
        let admitting = run::Admitting {
            limits: &self.shared.config.limits,
            tool_fields: runtime.tool_fields,
            build: &runtime.build,
            park_key: &self.shared.park_key,
        };
        let plan = RunPlan::new(start, admitting)?;
        let admission = capacity.admit(held).map_err(RejectRun::from)?;

        let (sender, receiver) = mpsc::channel(OUTBOUND_BUFFER);
        let receiver = Arc::new(Mutex::new(receiver));
        let flow = Flow::new(&receiver);
        let span = tracing::info_span!(
            "run",
            run_id = %plan.run_id,
            turn_id = %plan.turn_id,
            language = %plan.language,
            outcome = tracing::field::Empty,
            calls = tracing::field::Empty,
        );
        parent.set_parent_of(&span);
        // A deadline beyond what `Instant` holds never passes.
        let deadline = Instant::now().checked_add(plan.limits.deadline);
        let outbound = Outbound::new(sender, flow.clone());
        let task = RunTask { shared: self.shared.clone(), engine, plan, outbound, admission };
        let run = self.shared.lifecycle.track_run(task.drive(inbound).instrument(span));
        match &self.placement {
            // On a worker (`workers`): a task there, with its place on it.
            Some(placement) => {
                let (worker, seated) = placement.choose();
                worker.spawn(async move {
                    let _seated = seated;
                    run.await;
                });
                Ok(RunStream::forwarding(receiver, flow))
            }
            None => Ok(RunStream::driving(receiver, flow, run, deadline, &self.shared.driven)),
        }
    }
}

/// One admitted run and everything it holds.
struct RunTask {
    shared: Arc<Shared>,
    engine: Arc<SandboxEngine>,
    plan: RunPlan,
    outbound: Outbound,
    admission: Admission,
}

/// Why the inbound side ended a run.
#[derive(Debug)]
pub(crate) enum InboundEnd {
    /// The backend sent `Cancel`, or half-closed its stream.
    Cancelled(CancelledBy),
    /// The backend broke the stream rules; what it did.
    Broke(String),
    /// The backend's stream is gone (reset, connection lost): nobody is left
    /// to tell.
    Gone,
}

impl RunTask {
    async fn drive(self, inbound: Streaming<pb::BackendMessage>) {
        let RunTask { shared, engine, mut plan, outbound, mut admission } = self;
        // The guest's copy: the plan keeps none, so the bytes go once the
        // guest has read them.
        let start_doc = std::mem::take(&mut plan.start_doc);
        let stall_timeout = shared.config.stall_timeout;
        let flow = outbound.flow().clone();
        // `drive` runs in the run's span (`run`): its calls' spans hang below it.
        let run_span = tracing::Span::current();
        let started = Instant::now();
        // Until the run has an end to report, dropping it (its stream gone
        // with the backend) is the backend's leaving.
        let left = BackendLeft { metrics: &shared.metrics, started, span: run_span.clone(), armed: true };
        // A resumed run goes on from what it carried; its time parked counts
        // toward nothing (the approval wait has its own limit, in the backend).
        // Its output so far goes to the run's link, and the plan keeps none.
        let output_before = plan.resumed.as_mut().and_then(|resumed| resumed.as_mut().ok()).map(|carried| {
            (std::mem::take(&mut carried.stdout), std::mem::take(&mut carried.stderr), carried.output_truncated)
        });
        let carried = plan.resumed.as_ref().and_then(|resumed| resumed.as_ref().ok());
        let before = carried.and_then(|carried| carried.stats).unwrap_or_default();
        if carried.is_some() {
            shared.metrics.run_resumed();
            tracing::info!(calls = before.calls, "run resumed from its parked state");
        }
        let link = match output_before {
            Some(output) => {
                RunLink::resumed(outbound.clone(), plan.limits.output_bytes, shared.metrics.clone(), output, before)
            }
            None => RunLink::new(outbound.clone(), plan.limits.output_bytes, shared.metrics.clone()),
        };
        for result in &plan.resumed_results {
            shared.metrics.call_ended(result, None);
        }
        let cpu = Arc::new(CpuMeter::starting_at(Duration::from_micros(before.cpu_time_us)));
        let lived_before = Duration::from_micros(before.wall_time_us);
        let peak_memory = AtomicU64::new(0);
        let runtime = engine.runtime(&plan.language);
        let build = runtime.map(|runtime| runtime.build).unwrap_or_default();
        let park = (plan.may_park && runtime.is_some_and(|runtime| runtime.parks)).then_some(ParkPlan {
            when: ParkWhen {
                after: shared.config.park.after,
                // With a random key only this process could resume them.
                phase: shared.config.park.key.is_some().then(|| shared.lifecycle.subscribe()),
            },
            max_state_bytes: shared.config.park.max_state_bytes,
            max_resume_bytes: (shared.config.max_message_bytes() as u64).saturating_sub(plan.start_bytes),
        });

        let guest = async {
            let slot = admission.first_slot().await;
            let limits = CallLimits {
                parent_call_id: plan.parent_call_id.clone(),
                max_calls: plan.limits.max_calls,
                args_bytes: plan.limits.args_bytes,
                result_bytes: plan.limits.result_bytes,
            };
            let mut port = CallPort::new(limits, link.clone(), slot, run_span.clone());
            if let Some(carried) = carried {
                port = port.resumed(carried.calls_made, carried.batches, carried.cap_reported);
            }
            let Some(runtime) = runtime else {
                return (RunEnd::Internal(format!("runtime `{}` vanished", plan.language)), None);
            };
            let meters = run::Meters {
                cpu: cpu.clone(),
                memory: shared.memory.clone(),
                peak_memory: &peak_memory,
                link: link.clone(),
            };
            run::execute(&runtime.pre, &plan, start_doc, port, park, &link.output, meters).await
        };
        let guest = Metered::new(guest, cpu.clone());
        let deadline = tokio::time::sleep(plan.limits.deadline.saturating_sub(lived_before));

        let (end, spent) = tokio::select! {
            ended = guest => ended,
            end = read_inbound(inbound, &link.pending) => (match end {
                InboundEnd::Cancelled(by) => RunEnd::Cancelled(by),
                InboundEnd::Broke(what) => RunEnd::ProtocolError(what),
                InboundEnd::Gone => RunEnd::BackendGone,
            }, None),
            () = outbound.closed() => (RunEnd::BackendGone, None),
            () = flow.stalled(stall_timeout) => (RunEnd::Stalled, None),
            () = deadline => (RunEnd::Limit(LimitExceeded::Deadline { limit: plan.limits.deadline }), None),
            () = shared.lifecycle.runs_cancelled() => (RunEnd::Cancelled(CancelledBy::Shutdown), None),
        };
        // The guest future is dropped here: unless the guest ended by itself
        // (`spent`), the instance, slot and waiting place are free.
        // Signed: OpenTelemetry keeps unsigned numbers as text.
        run_span.record("calls", i64::from(link.stats.calls.load(Ordering::Relaxed)));
        let run_end = match end {
            RunEnd::BackendGone => return,
            RunEnd::Stalled => {
                left.disarm();
                stalled(&shared.metrics, &flow, stall_timeout, started, &run_span);
                return;
            }
            end => end,
        };
        left.disarm();
        run_span.record("outcome", run_end.kind());
        match &run_end {
            RunEnd::Internal(cause) => tracing::error!(%cause, "run failed in the sidecar"),
            RunEnd::GuestFault(cause) => tracing::warn!(%cause, "the guest crashed"),
            RunEnd::Parked(_) => {}
            other => tracing::info!(end = other.kind(), "run ended"),
        }
        let stats = &link.stats;
        let stats = pb::RunStats {
            calls: stats.calls.load(Ordering::Relaxed),
            calls_refused_by_cap: stats.refused_by_cap.load(Ordering::Relaxed),
            cpu_time_us: cpu.used().as_micros() as u64,
            wait_time_us: stats.wait_us.load(Ordering::Relaxed),
            wall_time_us: (lived_before + started.elapsed()).as_micros() as u64,
            peak_memory_bytes: peak_memory.load(Ordering::Relaxed).max(before.peak_memory_bytes),
        };
        let (last_message, spent) = match run_end {
            RunEnd::Parked(parked) => {
                // The instance and its memory go before anything is sent:
                // a parked run holds nothing in the sidecar.
                drop(spent);
                let identity = RunIdentity { build: &build, plan: &plan };
                let parked = seal_parked(*parked, identity, stats, &link, &shared);
                shared.metrics.run_parked(started.elapsed(), parked.0.state.len(), parked.1);
                run_span.in_scope(|| {
                    tracing::info!(state_bytes = parked.0.state.len(), awaiting = ?parked.0.awaiting, "run parked");
                });
                (pb::sidecar_message::Kind::Parked(parked.0), None)
            }
            run_end => {
                // The last output first; `Finished` then repeats all of it.
                let finished = run_end.into_finished(link.output.contents(), stats, plan.limits.to_proto());
                shared.metrics.run_ended(Some(finished.status()), started.elapsed());
                // With room on the stream for the last output (stdout and
                // stderr) and `Finished`, the backend gets its answer before
                // the instance is torn down (the pool resets its memory
                // then). Without room, teardown comes first, so a backend
                // that reads slowly never holds a pool slot.
                let spent = if outbound.has_room(3) {
                    spent
                } else {
                    drop(spent);
                    None
                };
                (pb::sidecar_message::Kind::Finished(finished), spent)
            }
        };
        let last = async {
            // A failed send means the backend is gone; there is no one left to tell.
            if link.flush_output().await.is_ok() {
                let _ = outbound.send(last_message).await;
            }
        };
        // A backend that reads nothing more loses the `Finished` too, in time.
        tokio::select! {
            () = last => {}
            () = flow.stalled(stall_timeout) => {
                run_span.in_scope(|| tracing::info!("the backend read no more of the run's stream; `Finished` is dropped"));
                flow.abandon(RejectRun::Stalled(stall_timeout).into());
            }
        }
        drop(spent);
    }
}

/// Who a parked run is: its guest build and its plan.
struct RunIdentity<'a> {
    build: &'a [u8; 32],
    plan: &'a RunPlan,
}

/// The `Parked` message of a run that parked, and how long parking took.
fn seal_parked(
    parked: ParkedGuest,
    identity: RunIdentity<'_>,
    stats: pb::RunStats,
    link: &RunLink,
    shared: &Shared,
) -> (pb::Parked, Duration) {
    let ParkedGuest { guest_state, port, asked } = parked;
    let (stdout, stderr, output_truncated) = link.output.contents();
    let plan = identity.plan;
    let carried = Carried {
        guest_build: identity.build.to_vec(),
        language: plan.language.clone(),
        turn_id: plan.turn_id.clone(),
        run_id: plan.run_id.clone(),
        parent_call_id: plan.parent_call_id.clone(),
        limits: Some(plan.limits.to_proto()),
        calls_made: port.calls_made,
        batches: port.batches,
        cap_reported: port.cap_reported,
        stats: Some(stats),
        stdout,
        stderr,
        output_truncated,
        batch: port.batch,
        guest_state,
    };
    let awaiting = carried.awaiting();
    let state = park::seal(&shared.park_key, &carried);
    (pb::Parked { state, awaiting, stats: Some(stats) }, asked.elapsed())
}

/// Ends a run whose stream took nothing for `timeout`: counted, logged, and
/// its stream told why once the backend reads again.
fn stalled(metrics: &Metrics, flow: &Flow, timeout: std::time::Duration, started: Instant, span: &tracing::Span) {
    span.record("outcome", RunEnd::Stalled.kind());
    span.in_scope(|| {
        tracing::warn!(
            stall_timeout_ms = timeout.as_millis() as u64,
            "run ended: the backend read none of its stream for the stall timeout"
        );
    });
    metrics.run_stalled(started.elapsed());
    flow.abandon(RejectRun::Stalled(timeout).into());
}

/// Reports a run that ends without `Finished` because the backend went away:
/// noticed by the run, or the run dropped with its stream.
struct BackendLeft<'a> {
    metrics: &'a Metrics,
    started: Instant,
    span: tracing::Span,
    armed: bool,
}

impl BackendLeft<'_> {
    /// The run has another end to report.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for BackendLeft<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.span.record("outcome", RunEnd::BackendGone.kind());
            self.span.in_scope(|| tracing::info!("run ended: the backend went away"));
            self.metrics.run_ended(None, self.started.elapsed());
        }
    }
}

/// Reads the backend's messages after `Start` (a run's `Streaming`) until one
/// ends the run, handing each `ToolResult` to the call waiting for it.
pub(crate) async fn read_inbound<S>(mut inbound: S, pending: &PendingCalls) -> InboundEnd
where
    S: Stream<Item = Result<pb::BackendMessage, Status>> + Unpin,
{
    loop {
        let message = match inbound.next().await {
            Some(Ok(message)) => message,
            None => return InboundEnd::Cancelled(CancelledBy::HalfClose),
            Some(Err(status)) => {
                tracing::info!(status = %status, "the backend's stream failed");
                return match status.code() {
                    // The peer reset the stream or lost the connection.
                    tonic::Code::Cancelled | tonic::Code::Unknown | tonic::Code::Unavailable => InboundEnd::Gone,
                    // A message that could not be read (undecodable, over the size limit).
                    _ => InboundEnd::Broke(RejectRun::Unreadable(status).to_string()),
                };
            }
        };
        match message.kind {
            Some(backend_message::Kind::ToolResult(result)) => {
                if result.outcome.is_none() {
                    return InboundEnd::Broke(format!(
                        "`ToolResult` `{}` has neither `value_json` nor `failure`",
                        result.id
                    ));
                }
                if let Err(result) = pending.deliver(result) {
                    return InboundEnd::Broke(format!(
                        "`ToolResult` for call id `{}`, which is not waiting for a result (never issued, or already answered)",
                        result.id
                    ));
                }
            }
            Some(backend_message::Kind::Cancel(cancel)) => {
                return InboundEnd::Cancelled(CancelledBy::Backend(cancel.reason));
            }
            Some(backend_message::Kind::AwaitingPerson(awaiting)) => {
                if pending.mark_for_person(&awaiting.id).is_err() {
                    return InboundEnd::Broke(format!(
                        "`AwaitingPerson` for call id `{}`, which is not waiting for a result",
                        awaiting.id
                    ));
                }
            }
            Some(backend_message::Kind::Start(_)) => {
                return InboundEnd::Broke("`Start` may be sent only once per run".into());
            }
            None => return InboundEnd::Broke("a backend message with no content".into()),
        }
    }
}
