//! A script's tool calls, from the guest to the backend's stream and back.
//!
//! This is where the per-script call cap lives. Every call is counted here
//! BEFORE anything else looks at it, so calls that will be refused count too:
//! a script looping over a tool that does not exist is stopped like any other.
//!
//! The sidecar refuses some calls by itself — past the cap, arguments that
//! are not an object or too large, too many runs waiting on tools ("call it
//! directly in your next response") — and tells the backend of each with
//! `CallRefused`, in the order the script made its calls, so the backend
//! audits every call. Past the cap only the first refusal is reported: the
//! breach is audited once.
//!
//! While a batch waits on the backend the run gives back its execution slot
//! ([`ExecutionSlot::give_back_during`]) and keeps its place among the runs
//! waiting on tools until it has a slot again (until then it still holds
//! its instance); so it does while its stream has no room for the batch's
//! messages (a backend that stops reading must not keep a slot). A run that
//! may park is asked to once every call it waits on waits for a person or
//! has waited `park_after` (`docs/parking.md`).

use crate::error::cut;
use crate::lifecycle::Phase;
use crate::metrics::Metrics;
use crate::output::CapturedOutput;
use crate::park::{BatchCall, PortSnapshot};
use crate::slots::{ExecutionSlot, GaugePlace};
use crate::stream::{BackendGone, NotSent, Outbound, PendingCalls};
use prost::Message as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tether_codes::Reason;
use tether_guest::{CallRequest, CallResult, Failure};
use tether_proto::pb;
use tether_telemetry::TraceContext;
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

/// Bytes of a refused call's arguments reported in `CallRefused`.
const REFUSED_ARGS_BYTES: usize = 4096;

/// The longest tool name a call may carry. Longer names are refused in the
/// sidecar: no tool has one, and a name is not otherwise bounded by any limit
/// (a multi-megabyte name would break the stream's message size).
pub(crate) const MAX_TOOL_NAME_BYTES: usize = 256;

/// Counters of one run, shared with the task that reports them.
#[derive(Debug, Default)]
pub(crate) struct CallStats {
    /// Calls the script made, refused ones included.
    pub(crate) calls: AtomicU32,
    /// Calls refused because the cap was passed.
    pub(crate) refused_by_cap: AtomicU32,
    /// Microseconds spent waiting on the backend.
    pub(crate) wait_us: AtomicU64,
}

/// What a run shares between its guest and the task that drives it.
#[derive(Debug, Clone)]
pub(crate) struct RunLink {
    /// The run's messages to the backend.
    pub(crate) outbound: Outbound,
    /// The results the backend owes the run.
    pub(crate) pending: PendingCalls,
    /// The guest's stdout and stderr.
    pub(crate) output: CapturedOutput,
    /// The run's counters.
    pub(crate) stats: Arc<CallStats>,
    /// The sidecar's metrics, told how each call ended.
    pub(crate) metrics: Arc<Metrics>,
    /// Held while new output is taken AND sent, so output forwarded between
    /// epoch ticks and by a batch of calls reaches the backend in order.
    pub(crate) output_order: Arc<tokio::sync::Mutex<()>>,
    /// When output was last sent.
    last_output: Arc<std::sync::Mutex<Instant>>,
}

/// How often new output is sent while a script computes.
pub(crate) const OUTPUT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

impl RunLink {
    /// The link of a resumed run: its output (stdout, stderr, whether it
    /// was cut) and counters go on from `output` and `before`, what it had
    /// when it parked.
    pub(crate) fn resumed(
        outbound: Outbound,
        output_bytes: u64,
        metrics: Arc<Metrics>,
        output: (Vec<u8>, Vec<u8>, bool),
        before: pb::RunStats,
    ) -> Self {
        let mut link = RunLink::new(outbound, output_bytes, metrics);
        let cap = usize::try_from(output_bytes).unwrap_or(usize::MAX);
        let (stdout, stderr, truncated) = output;
        link.output = CapturedOutput::resumed(cap, stdout, stderr, truncated);
        link.stats = Arc::new(CallStats {
            calls: AtomicU32::new(before.calls),
            refused_by_cap: AtomicU32::new(before.calls_refused_by_cap),
            wait_us: AtomicU64::new(before.wait_time_us),
        });
        link
    }

    /// A link over `outbound` keeping at most `output_bytes` of output and
    /// reporting calls to `metrics`.
    pub(crate) fn new(outbound: Outbound, output_bytes: u64, metrics: Arc<Metrics>) -> Self {
        RunLink {
            outbound,
            pending: PendingCalls::default(),
            output: CapturedOutput::new(usize::try_from(output_bytes).unwrap_or(usize::MAX)),
            stats: Arc::new(CallStats::default()),
            metrics,
            output_order: Arc::new(tokio::sync::Mutex::new(())),
            last_output: Arc::new(std::sync::Mutex::new(Instant::now())),
        }
    }

    /// Called by the running guest at every epoch tick: sends the output
    /// printed since the last send once [`OUTPUT_INTERVAL`] has passed,
    /// without waiting — when the stream is busy, a later tick sends it.
    /// (A timer task cannot do this: a guest that computes keeps its worker
    /// thread busy, and tokio's timers then fire late.)
    pub(crate) fn stream_output_if_due(&self) {
        let Ok(_order) = self.output_order.try_lock() else { return };
        let mut last = self.last_output.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if last.elapsed() < OUTPUT_INTERVAL || !self.output.has_new() {
            return;
        }
        // Room for both streams' messages, or nothing is taken (a stream
        // with no room keeps it buffered, and the guest goes on computing
        // under its CPU limit).
        if !self.outbound.has_room(2) {
            return;
        }
        *last = Instant::now();
        for output in self.take_output_messages() {
            // Room was checked under the lock; a failure means the backend is gone.
            let _ = self.outbound.try_send(output);
        }
    }

    /// Sends what the script printed since the last flush, stdout first.
    ///
    /// # Errors
    /// [`BackendGone`] when the backend stopped reading.
    pub(crate) async fn flush_output(&self) -> Result<(), BackendGone> {
        let _order = self.output_order.lock().await;
        *self.last_output.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Instant::now();
        for output in self.take_output_messages() {
            self.outbound.send(output).await?;
        }
        Ok(())
    }

    /// The output printed since the last take, as `Output` messages, stdout
    /// first; nothing for a stream with nothing new.
    fn take_output_messages(&self) -> impl Iterator<Item = pb::sidecar_message::Kind> {
        let (stdout, stderr) = self.output.take_new();
        [(pb::OutputStream::Stdout, stdout), (pb::OutputStream::Stderr, stderr)]
            .into_iter()
            .filter(|(_, data)| !data.is_empty())
            .map(|(stream, data)| {
                pb::sidecar_message::Kind::Output(pb::Output { stream: stream as i32, data: data.to_vec() })
            })
    }
}

/// The call limits of one run.
#[derive(Debug, Clone)]
pub(crate) struct CallLimits {
    /// Nested ids are `<parent_call_id>/<n>`.
    pub(crate) parent_call_id: String,
    /// The per-script call cap.
    pub(crate) max_calls: u32,
    /// The size limit of one call's arguments.
    pub(crate) args_bytes: u64,
    /// The size limit of one call's result.
    pub(crate) result_bytes: u64,
}

/// A run's end of the tether: counts, refuses or forwards each call.
#[derive(Debug)]
pub(crate) struct CallPort {
    limits: CallLimits,
    link: RunLink,
    slot: ExecutionSlot,
    run_span: tracing::Span,
    made: u32,
    batches: u32,
    cap_reported: bool,
    /// The batch being waited on, between [`CallPort::call_batch`] and its
    /// results (across a park the guest was asked for and declined).
    in_flight: Option<InFlight>,
}

/// What becomes of one call of a batch.
#[derive(Debug)]
enum Verdict {
    Forward(pb::ToolCall),
    Refuse { refusal: pb::CallRefused, report: bool },
}

/// A batch whose calls were sent, waiting on their results.
#[derive(Debug)]
struct InFlight {
    verdicts: Vec<Verdict>,
    /// One per forwarded call, in order.
    spans: Vec<tracing::Span>,
    /// One per forwarded call, in order.
    answers: Vec<Answer>,
    /// The run's place among the runs waiting on tools, held until the
    /// batch is answered (or the run parks and ends).
    place: Option<GaugePlace>,
    /// When the batch was sent.
    sent: Instant,
}

impl InFlight {
    /// Takes every answer that has arrived; true when none is still waiting.
    fn take_arrived(&mut self) -> bool {
        let sent = self.sent;
        for answer in &mut self.answers {
            if let Answer::Waiting(receiver) = answer {
                match receiver.try_recv() {
                    Ok(result) => *answer = Answer::Got(Some((result, sent.elapsed()))),
                    Err(oneshot::error::TryRecvError::Closed) => *answer = Answer::Got(None),
                    Err(oneshot::error::TryRecvError::Empty) => {}
                }
            }
        }
        self.answers.iter().all(|answer| matches!(answer, Answer::Got(_)))
    }
}

/// The answer to one forwarded call.
#[derive(Debug)]
enum Answer {
    Waiting(oneshot::Receiver<pb::ToolResult>),
    /// The result (none: the run ended first) and its round trip.
    Got(Option<(pb::ToolResult, Duration)>),
}

/// What the guest gets for a batch.
#[derive(Debug)]
pub(crate) enum BatchAnswer {
    /// One result per call, in order.
    Results(Vec<CallResult>),
    /// The run may park: every call it waits on waits for a person or has
    /// waited past `park_after`. The batch goes on waiting in the port.
    Park,
}

/// When a run waiting on a batch parks; `None` for a run that may not.
#[derive(Debug, Clone)]
pub(crate) struct ParkWhen {
    /// Park once the batch has waited this long.
    pub(crate) after: Duration,
    /// The sidecar's phase, when a drain parks every run that waits (so a
    /// rolling restart loses no waiting run): only with a park key shared
    /// with other sidecars, which can resume them. `None`: a drain waits.
    pub(crate) phase: Option<watch::Receiver<Phase>>,
}

impl ParkWhen {
    fn draining(&self) -> bool {
        self.phase.as_ref().is_some_and(|phase| *phase.borrow() >= Phase::Draining)
    }
}

impl CallPort {
    /// A port for a run that holds `slot`; its calls' spans are children of `run_span`.
    pub(crate) fn new(limits: CallLimits, link: RunLink, slot: ExecutionSlot, run_span: tracing::Span) -> Self {
        CallPort { limits, link, slot, run_span, made: 0, batches: 0, cap_reported: false, in_flight: None }
    }

    /// The port of a run resumed from a park, whose script had made
    /// `calls_made` calls in `batches` batches.
    pub(crate) fn resumed(self, calls_made: u32, batches: u32, cap_reported: bool) -> Self {
        CallPort { made: calls_made, batches, cap_reported, ..self }
    }

    /// Makes a batch of calls and returns one result per call, in order —
    /// or, when `park` allows it, [`BatchAnswer::Park`] once the run should
    /// park (then [`CallPort::park_snapshot`] or [`CallPort::wait_on`]).
    ///
    /// # Errors
    /// [`BackendGone`] when the backend stopped reading (the run is ending).
    pub(crate) async fn call_batch(
        &mut self,
        requests: Vec<CallRequest>,
        park: Option<ParkWhen>,
    ) -> Result<BatchAnswer, BackendGone> {
        self.batches += 1;
        let batch = self.batches;
        let mut verdicts: Vec<Verdict> = requests.iter().map(|request| self.judge(request, batch)).collect();
        let forwarded = verdicts.iter().filter(|v| matches!(v, Verdict::Forward(_))).count();
        let place = if forwarded == 0 { None } else { self.slot.try_wait() };
        if forwarded > 0 && place.is_none() {
            for verdict in &mut verdicts {
                if let Verdict::Forward(call) = verdict {
                    let refusal = refused(&call.id, &call.name, &call.args_json, batch, &Reason::SidecarBusy);
                    *verdict = Verdict::Refuse { refusal, report: true };
                }
            }
        }

        // Output first, then every call in the order the script made them.
        // Each call sent or reported gets a span (below the run's), whose
        // trace context travels with the call so the backend's span for it
        // is its child.
        self.flush_output().await?;
        let mut spans = Vec::new();
        let mut answers = Vec::new();
        for verdict in &mut verdicts {
            match verdict {
                Verdict::Forward(call) => {
                    call.batch_size = forwarded as u32;
                    let span = self.call_span(&call.id, &call.name, batch);
                    call.trace_context = TraceContext::of(&span).into_headers();
                    answers.push(Answer::Waiting(self.link.pending.expect(&call.id)));
                    span.in_scope(|| tracing::debug!("tool call sent"));
                    spans.push(span);
                    self.send(pb::sidecar_message::Kind::ToolCall(call.clone())).await?;
                }
                Verdict::Refuse { refusal, report: true } => {
                    let span = self.call_span(&refusal.id, &refusal.name, batch);
                    let code = refusal.failure.as_ref().map_or("", |f| f.code.as_str());
                    span.record("outcome", "refused");
                    span.record("code", code);
                    span.in_scope(|| tracing::info!(code, "call refused in the sidecar"));
                    refusal.trace_context = TraceContext::of(&span).into_headers();
                    self.send(pb::sidecar_message::Kind::CallRefused(refusal.clone())).await?;
                }
                // Past the cap, only the first refusal is reported: the rest
                // get no span either (a loop could make millions); the run's
                // span counts them.
                Verdict::Refuse { report: false, .. } => {}
            }
        }
        self.in_flight = Some(InFlight { verdicts, spans, answers, place, sent: Instant::now() });
        self.wait_on(park).await
    }

    /// Waits on the batch in flight: its results, or (when `park` allows it)
    /// [`BatchAnswer::Park`] once the run should park. Results of a batch
    /// with nothing in flight are empty.
    ///
    /// # Errors
    /// [`BackendGone`] is never returned today; it is kept for symmetry with
    /// [`CallPort::call_batch`].
    pub(crate) async fn wait_on(&mut self, park: Option<ParkWhen>) -> Result<BatchAnswer, BackendGone> {
        let Some(in_flight) = self.in_flight.as_mut() else { return Ok(BatchAnswer::Results(Vec::new())) };
        if in_flight.answers.iter().any(|answer| matches!(answer, Answer::Waiting(_))) {
            let waited_from = Instant::now();
            let pending = self.link.pending.clone();
            let parks = self.slot.give_back_during(wait_answers(in_flight, &pending, park)).await;
            self.link.stats.wait_us.fetch_add(waited_from.elapsed().as_micros() as u64, Ordering::Relaxed);
            // Answers that came while the run queued for its slot again
            // make a park needless.
            if parks && !in_flight.take_arrived() {
                return Ok(BatchAnswer::Park);
            }
        }
        Ok(BatchAnswer::Results(self.finish_batch()))
    }

    /// The batch's results, in order, once every answer is in.
    fn finish_batch(&mut self) -> Vec<CallResult> {
        let Some(InFlight { verdicts, spans, answers, place, .. }) = self.in_flight.take() else {
            return Vec::new();
        };
        drop(place);
        let mut answers = answers.into_iter();
        let mut spans = spans.into_iter();
        verdicts
            .into_iter()
            .map(|verdict| match verdict {
                Verdict::Forward(call) => {
                    let answer = match answers.next() {
                        Some(Answer::Got(answer)) => answer,
                        _ => None,
                    };
                    self.settle(&call.name, answer, spans.next())
                }
                Verdict::Refuse { refusal, .. } => self.settle_refused(refusal),
            })
            .collect()
    }

    /// What the guest gets for forwarded call `tool` given its `answer`
    /// (none: the run ended first), recorded on its span and in the metrics.
    fn settle(
        &self,
        tool: &str,
        answer: Option<(pb::ToolResult, Duration)>,
        span: Option<tracing::Span>,
    ) -> CallResult {
        let round_trip = answer.as_ref().map(|(_, round_trip)| *round_trip);
        let result = to_call_result(tool, answer.map(|(result, _)| result), self.limits.result_bytes);
        if let Some(span) = span {
            record_outcome(&span, &result);
        }
        self.link.metrics.call_ended(&result, round_trip);
        result
    }

    /// What the guest gets for a call the sidecar refused, counted in the metrics.
    fn settle_refused(&self, refusal: pb::CallRefused) -> CallResult {
        let result = refusal_result(refusal);
        self.link.metrics.call_ended(&result, None);
        result
    }

    /// About how many bytes a `Parked` message of this run would have with
    /// `guest_bytes` of guest state: the state, the output kept, and the
    /// answers already in for the batch in flight.
    pub(crate) fn parked_bytes(&self, guest_bytes: u64) -> u64 {
        let (stdout, stderr, _) = self.link.output.contents();
        let answers: usize = self
            .in_flight
            .iter()
            .flat_map(|in_flight| &in_flight.answers)
            .map(|answer| match answer {
                // Sealed as the guest's JSON, where escaping can make a
                // failure's message up to six times its size on the wire.
                Answer::Got(Some((result, _))) => 64 + result.encoded_len() * 6,
                _ => 0,
            })
            .sum();
        guest_bytes + (stdout.len() + stderr.len() + answers) as u64
    }

    /// The most bytes the `Start` resuming this run could need beyond the
    /// original `Start`: the sealed state (about [`Self::parked_bytes`]) and
    /// a result of up to `max_result_bytes` for every call still waiting.
    pub(crate) fn resume_bytes(&self, guest_bytes: u64) -> u64 {
        let waiting = self
            .in_flight
            .iter()
            .flat_map(|in_flight| &in_flight.answers)
            .filter(|answer| matches!(answer, Answer::Waiting(_)))
            .count() as u64;
        self.parked_bytes(guest_bytes) + waiting * (self.limits.result_bytes + 64)
    }

    /// What the port carries across a park: its counters and the batch in
    /// flight, each call with its answer where it is known.
    pub(crate) fn park_snapshot(&mut self) -> PortSnapshot {
        let mut batch = Vec::new();
        if let Some(in_flight) = self.in_flight.as_mut() {
            in_flight.take_arrived();
        }
        if let Some(InFlight { verdicts, answers, spans, .. }) = self.in_flight.take() {
            let mut answers = answers.into_iter();
            let mut spans = spans.into_iter();
            for verdict in verdicts {
                let (id, name, result) = match verdict {
                    Verdict::Forward(call) => {
                        let span = spans.next();
                        match answers.next() {
                            Some(Answer::Got(answer)) => {
                                let result = self.settle(&call.name, answer, span);
                                (call.id, call.name, Some(result))
                            }
                            _ => (call.id, call.name, None),
                        }
                    }
                    Verdict::Refuse { refusal, .. } => {
                        let name = refusal.name.clone();
                        (String::new(), name, Some(self.settle_refused(refusal)))
                    }
                };
                let answer_json = result.map(|result| serde_json::to_string(&result).unwrap_or_default());
                batch.push(BatchCall { id, name, answer_json });
            }
        }
        PortSnapshot { calls_made: self.made, batches: self.batches, cap_reported: self.cap_reported, batch }
    }

    /// Sends one message; while the stream has no room, the run gives its
    /// execution slot back (it computes nothing meanwhile).
    ///
    /// # Errors
    /// [`BackendGone`] when the backend stopped reading.
    async fn send(&mut self, kind: pb::sidecar_message::Kind) -> Result<(), BackendGone> {
        match self.link.outbound.try_send(kind) {
            Ok(()) => Ok(()),
            Err(NotSent::Gone) => Err(BackendGone),
            Err(NotSent::Full(kind)) => {
                let outbound = self.link.outbound.clone();
                self.slot.give_back_during(outbound.send(*kind)).await
            }
        }
    }

    /// Sends what the script printed since the last flush, stdout first, as
    /// [`RunLink::flush_output`] does but through [`CallPort::send`].
    async fn flush_output(&mut self) -> Result<(), BackendGone> {
        let link = self.link.clone();
        let _order = link.output_order.lock().await;
        *link.last_output.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Instant::now();
        for output in link.take_output_messages() {
            self.send(output).await?;
        }
        Ok(())
    }

    /// The span of call `id` to `tool`, below the run's span. Its `outcome`
    /// is recorded when known: `ok`, `failed` or `refused` (by the sidecar),
    /// with the failure's `code`.
    fn call_span(&self, id: &str, tool: &str, batch: u32) -> tracing::Span {
        tracing::info_span!(
            parent: &self.run_span,
            "call",
            call_id = %id,
            tool = %tool,
            // Signed: OpenTelemetry keeps unsigned numbers as text.
            batch = i64::from(batch),
            outcome = tracing::field::Empty,
            code = tracing::field::Empty,
        )
    }

    /// Counts the call, then refuses what the sidecar itself refuses.
    fn judge(&mut self, request: &CallRequest, batch: u32) -> Verdict {
        // Counted first, before any judgement: see the module docs.
        self.made += 1;
        self.link.stats.calls.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}/{}", self.limits.parent_call_id, self.made);
        let args_json = request.args.to_string();
        let refuse = |reason: &Reason| refused(&id, &request.name, &args_json, batch, reason);
        if self.made > self.limits.max_calls {
            self.link.stats.refused_by_cap.fetch_add(1, Ordering::Relaxed);
            let report = !self.cap_reported;
            if report {
                tracing::warn!(call_id = %id, tool = %request.name, max_calls = self.limits.max_calls, "script passed its call cap");
            }
            self.cap_reported = true;
            return Verdict::Refuse { refusal: refuse(&Reason::ScriptCallCap { max: self.limits.max_calls }), report };
        }
        if request.name.len() > MAX_TOOL_NAME_BYTES {
            let reason = Reason::ToolNameTooLong { length: request.name.len(), max: MAX_TOOL_NAME_BYTES };
            return Verdict::Refuse { refusal: refuse(&reason), report: true };
        }
        if !request.args.is_object() {
            return Verdict::Refuse { refusal: refuse(&Reason::ArgumentsNotObject), report: true };
        }
        if args_json.len() as u64 > self.limits.args_bytes {
            let reason = Reason::ArgumentsTooLarge { size: args_json.len() as u64, limit: self.limits.args_bytes };
            return Verdict::Refuse { refusal: refuse(&reason), report: true };
        }
        Verdict::Forward(pb::ToolCall {
            id,
            name: request.name.clone(),
            args_json,
            batch,
            batch_size: 0,
            max_result_bytes: self.limits.result_bytes,
            trace_context: Default::default(),
        })
    }
}

/// Waits on `in_flight`'s answers until all are in (false), or until the
/// run should park (true): `park` allows it, and every call still waiting
/// waits for a person or the batch has waited `park.after`.
async fn wait_answers(in_flight: &mut InFlight, pending: &PendingCalls, mut park: Option<ParkWhen>) -> bool {
    let park_at = park.as_ref().map(|park| tokio::time::Instant::from_std(in_flight.sent) + park.after);
    loop {
        // Registered before the check, so a mark made meanwhile is not missed.
        let marked = pending.person_marked();
        tokio::pin!(marked);
        marked.as_mut().enable();
        let mut open = in_flight.answers.iter_mut().enumerate().filter_map(|(index, answer)| match answer {
            Answer::Waiting(receiver) => Some((index, receiver)),
            Answer::Got(_) => None,
        });
        let Some(first) = open.next() else { return false };
        let open: Vec<_> = std::iter::once(first).chain(open).collect();
        if let Some(park) = &park {
            if park.draining() {
                return true;
            }
            let for_person = open.iter().all(|(index, _)| {
                forwarded_id(&in_flight.verdicts, *index).is_some_and(|id| pending.is_for_person(id))
            });
            if for_person || park_at.is_some_and(|at| tokio::time::Instant::now() >= at) {
                return true;
            }
        }
        let sent = in_flight.sent;
        // Each wait runs in its call's span, so the span lasts until the answer.
        let spans = &in_flight.spans;
        let next = futures::future::select_all(open.into_iter().map(|(index, receiver)| {
            let span = spans.get(index).cloned().unwrap_or_else(tracing::Span::none);
            Box::pin(async move { (index, receiver.await.ok()) }.instrument(span))
        }));
        let park_timer = async {
            match park_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let draining = async {
            match park.as_mut().and_then(|park| park.phase.as_mut()) {
                // A closed channel (the sidecar gone) never drains.
                Some(phase) => {
                    if phase.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        let answered = tokio::select! {
            ((index, result), _, _) = next => Some((index, result)),
            () = park_timer => None,
            () = &mut marked => None,
            () = draining => None,
        };
        if let Some((index, result)) = answered {
            in_flight.answers[index] = Answer::Got(result.map(|result| (result, sent.elapsed())));
        }
    }
}

/// The id of the `index`th forwarded call among `verdicts`.
fn forwarded_id(verdicts: &[Verdict], index: usize) -> Option<&str> {
    verdicts
        .iter()
        .filter_map(|verdict| match verdict {
            Verdict::Forward(call) => Some(call.id.as_str()),
            Verdict::Refuse { .. } => None,
        })
        .nth(index)
}

/// Records how call `span`'s call ended: `ok` or `failed` with its code.
fn record_outcome(span: &tracing::Span, result: &CallResult) {
    match result {
        CallResult::Ok(_) => span.record("outcome", "ok"),
        CallResult::Err(failure) => span.record("outcome", "failed").record("code", failure.code.as_str()),
    };
}

/// What the script gets for a call the sidecar refused.
fn refusal_result(refusal: pb::CallRefused) -> CallResult {
    let failure = refusal.failure.map(|f| Failure { code: f.code, message: f.message });
    CallResult::Err(failure.unwrap_or_else(|| Failure::from(&Reason::MissingResult)))
}

/// What the guest gets for a forwarded call. The size and depth checks
/// guard the guest against a backend that does not enforce them itself;
/// the tool ran either way, and the message says so.
pub(crate) fn to_call_result(tool: &str, result: Option<pb::ToolResult>, result_bytes: u64) -> CallResult {
    use pb::tool_result::Outcome;
    let ran_but =
        |problem: String| CallResult::Err(Failure::from(&Reason::InvalidResult { tool: tool.to_owned(), problem }));
    let Some(result) = result else {
        return CallResult::Err(Failure::from(&Reason::RunEnded));
    };
    match result.outcome {
        Some(Outcome::ValueJson(json)) if json.len() as u64 > result_bytes => {
            let reason = Reason::ResultTooLarge { tool: tool.to_owned(), size: json.len() as u64, limit: result_bytes };
            CallResult::Err(Failure::from(&reason))
        }
        Some(Outcome::ValueJson(json)) => match serde_json::from_str::<serde_json::Value>(&json) {
            Ok(value) if tether_guest::wire::depth(&value) > tether_guest::wire::MAX_DEPTH => {
                ran_but(format!("it nests deeper than `{}` levels", tether_guest::wire::MAX_DEPTH))
            }
            Ok(value) => CallResult::Ok(value),
            Err(error) => ran_but(format!("it is not valid JSON: {error}")),
        },
        Some(Outcome::Failure(f)) => CallResult::Err(Failure { code: f.code, message: f.message }),
        // The inbound reader rejects results with no outcome.
        None => ran_but("the backend sent a result with no outcome".to_owned()),
    }
}

/// The `CallRefused` report of call `id`, with its name cut to
/// [`MAX_TOOL_NAME_BYTES`] and its arguments to [`REFUSED_ARGS_BYTES`].
fn refused(id: &str, name: &str, args_json: &str, batch: u32, reason: &Reason) -> pb::CallRefused {
    let args = cut(args_json, REFUSED_ARGS_BYTES);
    pb::CallRefused {
        id: id.to_owned(),
        name: cut(name, MAX_TOOL_NAME_BYTES).to_owned(),
        args_json: args.to_owned(),
        args_truncated: args.len() < args_json.len(),
        failure: Some(pb::Failure { code: reason.code().as_str().to_owned(), message: reason.message() }),
        batch,
        trace_context: Default::default(),
    }
}
