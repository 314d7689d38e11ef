//! Runs driven by their own response stream, and the sweeper that gives a
//! stalled one a task of its own.
//!
//! A run admitted on the serving runtime is not spawned: the gRPC server's
//! task that writes the run's stream polls the run itself ([`RunStream`]), so
//! the run starts without waiting for a new task to be scheduled, and each
//! message it sends goes out from the task that writes it. On a VM where a
//! hand-off between threads costs ~20 µs, that is most of a trivial run's
//! admission (`docs/benchmarks.md`).
//!
//! Once the server holds a message the backend's flow-control window has no
//! room for, it stops polling the stream until there is room. A backend that
//! stops reading would therefore pause its run — holding its execution slot
//! mid-computation, with its CPU limit, its deadline, its stall timeout and
//! the lifecycle's cancellation all silent, since they act only when the run
//! is polled. The sweeper closes that gap: every [`SWEEP_TICK`] it moves into
//! a task of its own each run that was woken and has not been polled for a
//! tick (its stream is stalled), each run past its deadline, and every run
//! once the lifecycle cancels runs. In its task the run goes on as a spawned
//! run does: it computes under its CPU limit, gives its slot back while its
//! stream has no room, and ends at its stall timeout (`stream`'s `Flow`).
//! A run whose timers all sleep is woken by the next of them (the stall
//! watcher wakes it every quarter of `stall_timeout`), so it is moved too.
//!
//! Ownership: a [`RunStream`] owns its run until the sweeper moves it; the
//! gRPC server owns the stream, and dropping it (the backend went away) drops
//! a run not yet moved. The sweeper is one thread per sidecar
//! (`server::spawn_sweeper`, which calls [`DrivenRuns::sweep`]) holding only
//! a `Weak` to the sidecar's state; it ends within a tick of that state being
//! dropped.

use crate::stream::{Flow, Messages};
use futures::Stream;
use futures::future::BoxFuture;
use futures::task::{ArcWake, AtomicWaker, waker_ref};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tether_proto::pb;
use tokio::runtime::Handle;
use tonic::Status;

/// How often the sweeper looks, and how long a run may be woken and not
/// polled before it is moved: a run on a stalled stream is moved within two
/// ticks of being woken; a stalled run outlives its deadline, or a
/// shutdown's cancellation, by at most a tick.
pub(crate) const SWEEP_TICK: Duration = Duration::from_millis(200);

/// A run's messages to the backend, as the gRPC server sends them; when the
/// run is driven here, polling the stream also drives the run.
pub struct RunStream {
    messages: Arc<Mutex<Messages>>,
    flow: Arc<Flow>,
    /// The abandoned run's status has been said: the stream ends.
    ended: bool,
    driven: Option<Registered>,
}

/// The waker a driven run is polled with: it notes when the run was woken,
/// then wakes the stream's task.
#[derive(Debug)]
struct WakeWatch {
    stream: AtomicWaker,
    /// When the run was woken and not polled since (nanoseconds since
    /// `base`, at least 1); 0 when it has been polled since its last wake.
    woken_ns: AtomicU64,
    base: Instant,
}

impl WakeWatch {
    fn new() -> Self {
        WakeWatch { stream: AtomicWaker::new(), woken_ns: AtomicU64::new(0), base: Instant::now() }
    }

    fn now_ns(&self) -> u64 {
        (self.base.elapsed().as_nanos() as u64).max(1)
    }

    /// How long the run has been woken and not polled, at `now`.
    fn unpolled_for(&self, now: Instant) -> Option<Duration> {
        let woken = self.woken_ns.load(Ordering::Acquire);
        (woken != 0).then(|| now.saturating_duration_since(self.base + Duration::from_nanos(woken)))
    }
}

impl ArcWake for WakeWatch {
    fn wake_by_ref(watch: &Arc<Self>) {
        let _ = watch.woken_ns.compare_exchange(0, watch.now_ns(), Ordering::AcqRel, Ordering::Acquire);
        watch.stream.wake();
    }
}

/// A driven run's place in [`DrivenRuns`]; leaving it when the stream drops.
struct Registered {
    run: Arc<DrivenRun>,
    id: u64,
    runs: Arc<DrivenRuns>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.runs.lock().remove(&self.id);
    }
}

/// A run the stream drives, until the sweeper moves it to a task.
struct DrivenRun {
    future: Mutex<Option<BoxFuture<'static, ()>>>,
    /// When the run's own deadline passes (it cannot end before this);
    /// `None`: never.
    deadline: Option<Instant>,
    /// The runtime the run was admitted on, where a moved run goes.
    runtime: Handle,
    /// When it was woken last and not polled since.
    wake: Arc<WakeWatch>,
}

impl DrivenRun {
    fn future(&self) -> MutexGuard<'_, Option<BoxFuture<'static, ()>>> {
        self.future.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The runs their streams drive, for the sweeper to find.
#[derive(Debug, Default)]
pub(crate) struct DrivenRuns {
    next_id: AtomicU64,
    runs: Mutex<HashMap<u64, Weak<DrivenRun>>>,
}

impl DrivenRuns {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Weak<DrivenRun>>> {
        self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Moves each run that is past `now`'s deadline, or was woken at least
    /// [`SWEEP_TICK`] before `now` and not polled since (every run, when
    /// `cancelling`), and is not being polled this instant, into a task of
    /// its own. Returns how many moved.
    pub(crate) fn sweep(&self, now: Instant, cancelling: bool) -> usize {
        let stalled = |run: &DrivenRun| run.wake.unpolled_for(now).is_some_and(|unpolled| unpolled >= SWEEP_TICK);
        let due: Vec<Arc<DrivenRun>> = self
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .filter(|run| cancelling || run.deadline.is_some_and(|deadline| now >= deadline) || stalled(run))
            .collect();
        let mut moved = 0;
        for run in due {
            // Being polled right now: it is not stalled, and sees its own
            // deadline or cancellation in this poll.
            let Ok(mut future) = run.future.try_lock() else { continue };
            if let Some(future) = future.take() {
                tracing::info!("a run's stream is not being read: the run continues in a task of its own");
                run.runtime.spawn(future);
                moved += 1;
            }
        }
        moved
    }
}

impl std::fmt::Debug for DrivenRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrivenRun").field("deadline", &self.deadline).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for RunStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunStream").field("driven", &self.driven.is_some()).finish_non_exhaustive()
    }
}

impl RunStream {
    /// The messages of a run that executes in a task of its own, whose
    /// progress `flow` follows.
    pub(crate) fn forwarding(messages: Arc<Mutex<Messages>>, flow: Arc<Flow>) -> Self {
        RunStream { messages, flow, ended: false, driven: None }
    }

    /// The messages of `run`, driven by polling this stream (on the current
    /// runtime's task that polls it); `deadline` is the run's own, after
    /// which the sweeper of `runs` moves it to a task if it has stalled.
    pub(crate) fn driving(
        messages: Arc<Mutex<Messages>>,
        flow: Arc<Flow>,
        run: impl Future<Output = ()> + Send + 'static,
        deadline: Option<Instant>,
        runs: &Arc<DrivenRuns>,
    ) -> Self {
        let run = Arc::new(DrivenRun {
            future: Mutex::new(Some(Box::pin(run))),
            deadline,
            runtime: Handle::current(),
            wake: Arc::new(WakeWatch::new()),
        });
        let id = runs.next_id.fetch_add(1, Ordering::Relaxed);
        runs.lock().insert(id, Arc::downgrade(&run));
        RunStream { messages, flow, ended: false, driven: Some(Registered { run, id, runs: runs.clone() }) }
    }

    /// The next message, if one is there.
    fn receive(&mut self, cx: &mut Context<'_>) -> Poll<Option<<Self as Stream>::Item>> {
        self.messages.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).poll_recv(cx)
    }
}

impl Stream for RunStream {
    type Item = Result<pb::SidecarMessage, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        // The server polls: its window has room (see `Flow`).
        this.flow.polled(cx.waker());
        // A run ended because this stream stalled: its status, then the end.
        if let Some(status) = this.flow.take_abandoned() {
            this.ended = true;
            return Poll::Ready(Some(Err(status)));
        }
        if let Poll::Ready(message) = this.receive(cx) {
            return Poll::Ready(message);
        }
        let Some(driven) = &this.driven else { return Poll::Pending };
        {
            // Polled with a waker that notes the wake, so the sweeper finds
            // a run woken and not polled (this stream stalled).
            let wake = &driven.run.wake;
            wake.stream.register(cx.waker());
            let mut future = driven.run.future();
            if let Some(run) = future.as_mut() {
                wake.woken_ns.store(0, Ordering::Release);
                let waker = waker_ref(wake);
                if run.as_mut().poll(&mut Context::from_waker(&waker)).is_ready() {
                    *future = None;
                }
            }
        }
        if let Some(status) = this.flow.take_abandoned() {
            this.ended = true;
            return Poll::Ready(Some(Err(status)));
        }
        // What the run sent meanwhile; once it has ended (here or in its
        // task), its senders are gone and the channel ends after its last
        // message.
        this.receive(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use tokio::sync::mpsc;

    fn message() -> Result<pb::SidecarMessage, Status> {
        Ok(pb::SidecarMessage { kind: None })
    }

    type Sender = mpsc::Sender<Result<pb::SidecarMessage, Status>>;

    /// A channel of `size` messages, its receiver shared as a stream's is.
    fn channel(size: usize) -> (Sender, Arc<Mutex<Messages>>, Arc<Flow>) {
        let (sender, receiver) = mpsc::channel(size);
        let receiver = Arc::new(Mutex::new(receiver));
        let flow = Flow::new(&receiver);
        (sender, receiver, flow)
    }

    #[tokio::test]
    async fn polling_the_stream_drives_the_run_and_the_stream_ends_after_its_messages() {
        let runs = Arc::new(DrivenRuns::default());
        let (sender, receiver, flow) = channel(4);
        let run = async move {
            let _ = sender.send(message()).await;
            tokio::task::yield_now().await;
            let _ = sender.send(message()).await;
        };
        let stream = RunStream::driving(receiver, flow, run, Some(Instant::now() + Duration::from_secs(60)), &runs);
        assert_eq!(runs.lock().len(), 1);
        assert_eq!(stream.count().await, 2, "both messages, then the end");
        assert!(runs.lock().is_empty(), "a dropped stream leaves the registry");
    }

    #[tokio::test]
    async fn the_sweeper_moves_a_run_past_its_deadline_that_nobody_polls() {
        let runs = Arc::new(DrivenRuns::default());
        let (sender, receiver, flow) = channel(4);
        let (started, ran) = tokio::sync::oneshot::channel();
        let run = async move {
            let _ = started.send(());
            let _ = sender.send(message()).await;
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut stream = RunStream::driving(receiver, flow, run, Some(deadline), &runs);
        assert_eq!(runs.sweep(Instant::now(), false), 0, "not before its deadline");
        assert_eq!(runs.sweep(deadline, false), 1, "never polled, past its deadline: moved");
        assert_eq!(runs.sweep(deadline, true), 0, "moved once");
        ran.await.expect("the moved run ran in its own task");
        assert!(stream.next().await.is_some(), "its message still reaches the stream");
        assert!(stream.next().await.is_none());
    }

    #[tokio::test]
    async fn cancelling_moves_every_driven_run() {
        let runs = Arc::new(DrivenRuns::default());
        let (_sender, receiver, flow) = channel(4);
        let _stream = RunStream::driving(receiver, flow, std::future::pending(), None, &runs);
        assert_eq!(runs.sweep(Instant::now(), true), 1);
    }

    #[tokio::test]
    async fn a_run_woken_and_not_polled_for_a_tick_is_moved_and_goes_on_in_its_task() {
        let runs = Arc::new(DrivenRuns::default());
        let (sender, receiver, flow) = channel(4);
        let (go, went) = tokio::sync::oneshot::channel::<()>();
        let run = async move {
            // Woken by `go`, then sends: a run that has work to do.
            let _ = went.await;
            let _ = sender.send(message()).await;
        };
        let mut stream = RunStream::driving(receiver, flow, run, None, &runs);
        // Polled once (pending on `go`), as the server polls a new stream.
        assert!(futures::poll!(stream.next()).is_pending());
        let _ = go.send(());
        // Woken now; nobody polls the stream (a stalled window).
        let now = Instant::now();
        assert_eq!(runs.sweep(now, false), 0, "woken a moment ago: not yet");
        assert_eq!(runs.sweep(now + SWEEP_TICK, false), 1, "woken a tick ago and not polled: moved");
        assert!(stream.next().await.is_some(), "the moved run sent its message");
        assert!(stream.next().await.is_none());
    }

    #[tokio::test]
    async fn an_abandoned_run_drops_its_waiting_messages_and_its_stream_ends_with_the_status() {
        let (sender, receiver, flow) = channel(4);
        let outbound = crate::stream::Outbound::new(sender, flow.clone());
        let output = || pb::sidecar_message::Kind::Output(pb::Output { stream: 0, data: vec![0; 1000] });
        outbound.send(output()).await.unwrap();
        outbound.send(output()).await.unwrap();
        flow.abandon(Status::deadline_exceeded("stalled"));
        drop(outbound);
        let mut stream = RunStream::forwarding(receiver, flow);
        let said = stream.next().await.expect("the status").expect_err("an error status");
        assert_eq!(said.code(), tonic::Code::DeadlineExceeded);
        assert!(stream.next().await.is_none(), "nothing after it: the waiting messages were dropped");
    }
}
