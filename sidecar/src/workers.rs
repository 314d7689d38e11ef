//! Where a listener's connections and runs execute: a few threads, each a
//! current-thread Tokio runtime.
//!
//! Each accepted connection is served on one worker (round robin), its
//! socket registered with that worker's reactor, and each run it opens goes
//! to its connection's worker unless that one is [`SLACK`] runs ahead of the
//! least busy. Such a run has its stream, its task and its guest on ONE
//! thread: a `ToolCall` leaves and its `ToolResult` comes back without a
//! hand-off between threads (each costs ~20 µs on a 2-core VM, several per
//! call on a multi-threaded runtime). Under load, runs spread over the
//! workers, so one connection still uses every core — but a worker running
//! a guest serves none of its connections meanwhile, which costs calls per
//! second at saturation (`docs/benchmarks.md`); hence opt-in.
//!
//! Ownership: one [`Workers`] per `Sidecar::serve` call. It owns its threads;
//! [`Workers::stop_serving`] ends each worker's server (gracefully, as a
//! server's shutdown signal does), [`Workers::release`] ends the threads.
//! Dropping it does both at once without waiting: each thread then drops
//! what still runs on it (its runs end as if the backend had left).

use std::cell::Cell;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Runs a connection's worker may hold above the least busy worker before
/// a new run of that connection goes elsewhere: staying home saves a thread
/// hand-off per message; going elsewhere uses an idle core.
const SLACK: usize = 2;

/// Tells pools apart in [`CURRENT`].
static NEXT_POOL: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The pool and the index of the worker this thread is, if it is one.
    static CURRENT: Cell<Option<(u64, usize)>> = const { Cell::new(None) };
}

/// One worker as runs see it: where to spawn, and how many runs it has.
#[derive(Debug)]
struct Seat {
    handle: Handle,
    runs: Arc<AtomicUsize>,
}

/// Chooses the worker a new run goes to. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Placement {
    pool: u64,
    seats: Arc<[Seat]>,
}

/// A run's place on a worker; dropping it (when the run's task ends) frees it.
#[derive(Debug)]
pub(crate) struct Seated {
    runs: Arc<AtomicUsize>,
}

impl Drop for Seated {
    fn drop(&mut self) {
        self.runs.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Placement {
    /// The calling thread's own worker (the connection's, when called from
    /// its handler) unless it has more than [`SLACK`] runs above the least
    /// busy one; then the least busy. Returns the worker and the run's place
    /// on it: move the [`Seated`] into the run's task.
    pub(crate) fn choose(&self) -> (Handle, Seated) {
        let here = CURRENT.get().filter(|(pool, _)| *pool == self.pool).map(|(_, index)| &self.seats[index]);
        let least = self
            .seats
            .iter()
            .min_by_key(|seat| seat.runs.load(Ordering::Relaxed))
            .unwrap_or_else(|| unreachable!("a pool has at least one worker"));
        let seat = match here {
            Some(here) if here.runs.load(Ordering::Relaxed) <= least.runs.load(Ordering::Relaxed) + SLACK => here,
            _ => least,
        };
        seat.runs.fetch_add(1, Ordering::Relaxed);
        (seat.handle.clone(), Seated { runs: seat.runs.clone() })
    }
}

/// The runtimes of a pool not yet started, and where runs will go on them.
#[derive(Debug)]
pub(crate) struct Runtimes {
    pool: u64,
    runtimes: Vec<Runtime>,
    placement: Placement,
}

impl Runtimes {
    /// `count` current-thread runtimes (at least one).
    ///
    /// # Errors
    /// If the operating system refuses what a runtime needs (an epoll
    /// instance, a timer).
    pub(crate) fn build(count: usize) -> std::io::Result<Runtimes> {
        let pool = NEXT_POOL.fetch_add(1, Ordering::Relaxed);
        let runtimes = (0..count.max(1))
            .map(|_| tokio::runtime::Builder::new_current_thread().enable_all().build())
            .collect::<std::io::Result<Vec<_>>>()?;
        let seats = runtimes.iter().map(|rt| Seat { handle: rt.handle().clone(), runs: Arc::default() }).collect();
        Ok(Runtimes { pool, runtimes, placement: Placement { pool, seats } })
    }

    /// Where runs go on these workers.
    pub(crate) fn placement(&self) -> Placement {
        self.placement.clone()
    }

    /// Starts one thread per runtime, each serving the connections it is
    /// given with the server `serve` makes: `serve(connections, stop)` must
    /// end (gracefully) when `stop` completes.
    ///
    /// # Errors
    /// If a thread cannot be started; those already started end.
    pub(crate) fn start<IO, S, Fut>(self, serve: S) -> std::io::Result<Workers<IO>>
    where
        IO: Send + 'static,
        S: Fn(UnboundedReceiverStream<IO>, WaitForCancellationFutureOwned) -> Fut,
        Fut: Future<Output = Result<(), tonic::transport::Error>> + Send + 'static,
    {
        let stop_serving = CancellationToken::new();
        let release = CancellationToken::new();
        let mut workers = Workers {
            inboxes: Vec::new(),
            next: 0,
            served: Vec::new(),
            ended: Vec::new(),
            stop_serving: stop_serving.clone(),
            release: release.clone(),
        };
        for (index, runtime) in self.runtimes.into_iter().enumerate() {
            // Unbounded: a connection handed over is one small value, and the
            // worker takes it at its next turn; the listener's backlog and the
            // run admission bound the rest.
            let (inbox, connections) = mpsc::unbounded_channel();
            let server = serve(UnboundedReceiverStream::new(connections), stop_serving.clone().cancelled_owned());
            let (served, served_rx) = oneshot::channel();
            let (ended, ended_rx) = oneshot::channel::<()>();
            let release = release.clone();
            let pool = self.pool;
            std::thread::Builder::new().name(format!("tether-worker-{index}")).spawn(move || {
                CURRENT.set(Some((pool, index)));
                runtime.block_on(async move {
                    let _ = served.send(server.await);
                    // Runs placed here end before the sidecar releases its workers.
                    release.cancelled().await;
                });
                // Dropping the runtime drops whatever still runs on it.
                drop(runtime);
                drop(ended);
            })?;
            workers.inboxes.push(inbox);
            workers.served.push(served_rx);
            workers.ended.push(ended_rx);
        }
        Ok(workers)
    }
}

/// A started pool: hands it connections, then stops it.
#[derive(Debug)]
pub(crate) struct Workers<IO> {
    inboxes: Vec<mpsc::UnboundedSender<IO>>,
    next: usize,
    served: Vec<oneshot::Receiver<Result<(), tonic::transport::Error>>>,
    ended: Vec<oneshot::Receiver<()>>,
    stop_serving: CancellationToken,
    release: CancellationToken,
}

impl<IO> Workers<IO> {
    /// Hands an accepted connection to the next worker, round robin.
    pub(crate) fn dispatch(&mut self, connection: IO) {
        let mut connection = connection;
        for _ in 0..self.inboxes.len() {
            let index = self.next % self.inboxes.len();
            self.next = self.next.wrapping_add(1);
            match self.inboxes[index].send(connection) {
                Ok(()) => return,
                // That worker's server has ended (it failed): try another.
                Err(returned) => connection = returned.0,
            }
        }
        tracing::warn!("no worker serves connections any more; the connection is closed");
    }

    /// Ends every worker's server as its shutdown signal would (connections
    /// close once their streams end) and waits for them.
    ///
    /// # Errors
    /// The first server's error.
    pub(crate) async fn stop_serving(&mut self) -> Result<(), tonic::transport::Error> {
        self.stop_serving.cancel();
        self.inboxes.clear();
        let mut result = Ok(());
        for served in self.served.drain(..) {
            if let Ok(Err(error)) = served.await
                && result.is_ok()
            {
                result = Err(error);
            }
        }
        result
    }

    /// Ends the threads and waits until each has dropped its runtime.
    pub(crate) async fn release(mut self) {
        self.release.cancel();
        for ended in self.ended.drain(..) {
            let _ = ended.await;
        }
    }
}

impl<IO> Drop for Workers<IO> {
    fn drop(&mut self) {
        self.stop_serving.cancel();
        self.release.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many runs each worker holds, in worker order.
    fn runs_per_worker(placement: &Placement) -> Vec<usize> {
        placement.seats.iter().map(|seat| seat.runs.load(Ordering::Relaxed)).collect()
    }

    #[test]
    fn runs_go_to_the_least_busy_worker_and_free_their_place() {
        let runtimes = Runtimes::build(2).expect("runtimes");
        let placement = runtimes.placement();
        let (_, first) = placement.choose();
        let (_, second) = placement.choose();
        // One each: the two workers hold one run each.
        assert_eq!(runs_per_worker(&placement), vec![1, 1]);
        drop(first);
        let (_, third) = placement.choose();
        drop((second, third));
        assert_eq!(runs_per_worker(&placement), vec![0, 0]);
    }

    /// Places `runs` runs from a thread that is worker `home` of `runtimes`
    /// (as a connection's handler is); returns their places.
    fn choose_from_worker(runtimes: &Runtimes, home: usize, runs: usize) -> Vec<Seated> {
        let (pool, placement) = (runtimes.pool, runtimes.placement());
        std::thread::spawn(move || {
            CURRENT.set(Some((pool, home)));
            (0..runs).map(|_| placement.choose().1).collect()
        })
        .join()
        .expect("thread")
    }

    #[test]
    fn a_tie_keeps_the_run_on_the_calling_worker() {
        let runtimes = Runtimes::build(3).expect("runtimes");
        let seated = choose_from_worker(&runtimes, 2, 1);
        assert_eq!(runs_per_worker(&runtimes.placement()), vec![0, 0, 1]);
        drop(seated);
    }

    #[test]
    fn a_worker_more_than_slack_runs_ahead_sends_new_runs_elsewhere() {
        let runtimes = Runtimes::build(2).expect("runtimes");
        let seated = choose_from_worker(&runtimes, 0, SLACK + 3);
        // Home takes runs while at most `SLACK` ahead, then they alternate.
        assert_eq!(runs_per_worker(&runtimes.placement()), vec![SLACK + 2, 1]);
        drop(seated);
    }
}
