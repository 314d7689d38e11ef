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
//! stops reading would therefore pause its run — and with it the run's own
//! deadline and the lifecycle's cancellation, which act only when the run is
//! polled. The sweeper closes that gap: every
//! [`SWEEP_TICK`] it moves each run past its deadline, or every run once the
//! lifecycle cancels runs, into a task of its own, which then ends the run as
//! a spawned run ends (its instance, slot and waiting place freed; `Finished`
//! sent if the backend ever reads again).
//!
//! Ownership: a [`RunStream`] owns its run until the sweeper moves it; the
//! gRPC server owns the stream, and dropping it (the backend went away) drops
//! a run not yet moved. The sweeper is one thread per sidecar holding only a
//! `Weak` to the sidecar's state; it ends within a tick of that state being
//! dropped.

use crate::service::Shared;
use futures::Stream;
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tether_proto::pb;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tonic::Status;

/// How often the sweeper looks: a stalled run outlives its deadline, or a
/// shutdown's cancellation, by at most this.
const SWEEP_TICK: Duration = Duration::from_millis(200);

type Messages = mpsc::Receiver<Result<pb::SidecarMessage, Status>>;

/// A run's messages to the backend, as the gRPC server sends them; when the
/// run is driven here, polling the stream also drives the run.
pub struct RunStream {
    messages: Messages,
    driven: Option<Registered>,
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

    /// Moves each run that is past `now`'s deadline (every run, when
    /// `cancelling`) and not being polled this instant into a task of its
    /// own. Returns how many moved.
    fn sweep(&self, now: Instant, cancelling: bool) -> usize {
        let due: Vec<Arc<DrivenRun>> = self
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .filter(|run| cancelling || run.deadline.is_some_and(|deadline| now >= deadline))
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
    /// The messages of a run that executes in a task of its own.
    pub(crate) fn forwarding(messages: Messages) -> Self {
        RunStream { messages, driven: None }
    }

    /// The messages of `run`, driven by polling this stream (on the current
    /// runtime's task that polls it); `deadline` is the run's own, after
    /// which the sweeper of `runs` moves it to a task if it has stalled.
    pub(crate) fn driving(
        messages: Messages,
        run: impl Future<Output = ()> + Send + 'static,
        deadline: Option<Instant>,
        runs: &Arc<DrivenRuns>,
    ) -> Self {
        let run = Arc::new(DrivenRun { future: Mutex::new(Some(Box::pin(run))), deadline, runtime: Handle::current() });
        let id = runs.next_id.fetch_add(1, Ordering::Relaxed);
        runs.lock().insert(id, Arc::downgrade(&run));
        RunStream { messages, driven: Some(Registered { run, id, runs: runs.clone() }) }
    }
}

impl Stream for RunStream {
    type Item = Result<pb::SidecarMessage, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Poll::Ready(message) = this.messages.poll_recv(cx) {
            return Poll::Ready(message);
        }
        let Some(driven) = &this.driven else { return Poll::Pending };
        {
            let mut future = driven.run.future();
            if let Some(run) = future.as_mut()
                && run.as_mut().poll(cx).is_ready()
            {
                *future = None;
            }
        }
        // What the run sent meanwhile; once it has ended (here or in its
        // task), its senders are gone and the channel ends after its last
        // message.
        this.messages.poll_recv(cx)
    }
}

/// Starts the sweeper of `shared`'s driven runs.
///
/// # Errors
/// If the thread cannot be started.
pub(crate) fn spawn_sweeper(shared: Weak<Shared>) -> std::io::Result<()> {
    std::thread::Builder::new().name("tether-run-sweeper".into()).spawn(move || {
        loop {
            std::thread::sleep(SWEEP_TICK);
            let Some(shared) = shared.upgrade() else { return };
            shared.driven.sweep(Instant::now(), shared.lifecycle.cancelling());
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn message() -> Result<pb::SidecarMessage, Status> {
        Ok(pb::SidecarMessage { kind: None })
    }

    #[tokio::test]
    async fn polling_the_stream_drives_the_run_and_the_stream_ends_after_its_messages() {
        let runs = Arc::new(DrivenRuns::default());
        let (sender, receiver) = mpsc::channel(4);
        let run = async move {
            let _ = sender.send(message()).await;
            tokio::task::yield_now().await;
            let _ = sender.send(message()).await;
        };
        let stream = RunStream::driving(receiver, run, Some(Instant::now() + Duration::from_secs(60)), &runs);
        assert_eq!(runs.lock().len(), 1);
        assert_eq!(stream.count().await, 2, "both messages, then the end");
        assert!(runs.lock().is_empty(), "a dropped stream leaves the registry");
    }

    #[tokio::test]
    async fn the_sweeper_moves_a_run_past_its_deadline_that_nobody_polls() {
        let runs = Arc::new(DrivenRuns::default());
        let (sender, receiver) = mpsc::channel(4);
        let (started, ran) = tokio::sync::oneshot::channel();
        let run = async move {
            let _ = started.send(());
            let _ = sender.send(message()).await;
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut stream = RunStream::driving(receiver, run, Some(deadline), &runs);
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
        let (_sender, receiver) = mpsc::channel(4);
        let _stream = RunStream::driving(receiver, std::future::pending(), None, &runs);
        assert_eq!(runs.sweep(Instant::now(), true), 1);
    }
}
