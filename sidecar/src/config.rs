//! Sidecar configuration, and the limits of one run.
//!
//! Every limit has one home: [`Limits`]. The sidecar's own values are the most
//! a run may use; a run's `Start.limits` may only tighten them
//! ([`Limits::tightened_by`]).

use crate::auth::Access;
use crate::connections::ConnectionLimits;
use std::path::PathBuf;
use std::time::Duration;
use tether_proto::pb;

/// The limits of one run. The defaults are the sidecar's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Tool calls one script may make, refused ones included. Default 50.
    pub max_calls: u32,
    /// CPU time of the script's own computation; waiting on tools does not
    /// count. Default 10 s.
    pub cpu_time: Duration,
    /// Guest linear memory. Default 256 MiB.
    pub memory_bytes: u64,
    /// stdout + stderr kept; more is dropped and marked. Default 1 MiB.
    pub output_bytes: u64,
    /// Script source size. Default 256 KiB.
    pub script_bytes: u64,
    /// One call's arguments as JSON. Default 1 MiB.
    pub args_bytes: u64,
    /// One call's result as JSON. Default 4 MiB.
    pub result_bytes: u64,
    /// The script's own result as JSON (`Finished.result_json`). Default
    /// 2 MiB, so that `Finished` (this plus the output) fits the 4 MiB a gRPC
    /// client accepts by default.
    pub script_result_bytes: u64,
    /// Wall time from `Start` until the run is stopped, waits included.
    /// Default 15 minutes; a backend passes its turn's deadline.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_calls: 50,
            cpu_time: Duration::from_secs(10),
            memory_bytes: 256 << 20,
            output_bytes: 1 << 20,
            script_bytes: 256 << 10,
            args_bytes: 1 << 20,
            result_bytes: 4 << 20,
            script_result_bytes: 2 << 20,
            deadline: Duration::from_secs(15 * 60),
        }
    }
}

impl Limits {
    /// These limits, each lowered to the requested value where the request
    /// sets one (non-zero) that is lower. A request can never raise a limit.
    pub fn tightened_by(&self, requested: Option<&pb::Limits>) -> Limits {
        let Some(req) = requested else { return *self };
        fn min_u64(own: u64, requested: u64) -> u64 {
            if requested == 0 { own } else { own.min(requested) }
        }
        fn min_ms(own: Duration, requested_ms: u64) -> Duration {
            if requested_ms == 0 { own } else { own.min(Duration::from_millis(requested_ms)) }
        }
        Limits {
            max_calls: if req.max_calls == 0 { self.max_calls } else { self.max_calls.min(req.max_calls) },
            cpu_time: min_ms(self.cpu_time, req.cpu_time_ms),
            memory_bytes: min_u64(self.memory_bytes, req.memory_bytes),
            output_bytes: min_u64(self.output_bytes, req.output_bytes),
            script_bytes: min_u64(self.script_bytes, req.max_script_bytes),
            args_bytes: min_u64(self.args_bytes, req.max_args_bytes),
            result_bytes: min_u64(self.result_bytes, req.max_result_bytes),
            script_result_bytes: min_u64(self.script_result_bytes, req.max_script_result_bytes),
            deadline: min_ms(self.deadline, req.deadline_ms),
        }
    }

    /// These limits in their wire form, as `Describe` reports them.
    pub fn to_proto(&self) -> pb::Limits {
        pb::Limits {
            max_calls: self.max_calls,
            cpu_time_ms: self.cpu_time.as_millis() as u64,
            memory_bytes: self.memory_bytes,
            output_bytes: self.output_bytes,
            max_args_bytes: self.args_bytes,
            max_result_bytes: self.result_bytes,
            deadline_ms: self.deadline.as_millis() as u64,
            max_script_bytes: self.script_bytes,
            max_script_result_bytes: self.script_result_bytes,
        }
    }
}

/// How a sidecar is set up.
#[derive(Debug, Clone)]
pub struct SidecarConfig {
    /// The most any run may use.
    pub limits: Limits,
    /// Runs that may execute guest code at once. Default: the number of cores.
    pub slots: usize,
    /// Threads that serve each run listener's connections and runs, each a
    /// current-thread runtime, so that a run's stream, task and guest share
    /// one thread and a call crosses no thread hand-off inside the sidecar
    /// (`--worker-threads`): about a quarter less sidecar CPU per call, but
    /// a third fewer calls per second at saturation (a worker running a
    /// guest cannot serve its connections meanwhile; docs/benchmarks.md).
    /// 0 (the default): everything is served on the runtime that calls
    /// `serve_*` — also right for a sidecar embedded beside its client,
    /// which then shares that runtime's threads.
    pub worker_threads: usize,
    /// Runs that may wait on tool results at once; past it a new call is
    /// refused with "call it directly in your next response". Default 256.
    pub max_waiting_runs: usize,
    /// Runs that may wait for an execution slot; past it a new run is refused
    /// with RESOURCE_EXHAUSTED. Default 1,024.
    pub max_queued_runs: usize,
    /// Guest memory all runs may hold together; a run that would pass it ends
    /// with a memory-limit error. Default 8 GiB.
    pub total_memory_bytes: u64,
    /// Bytes of each pool slot's linear memory kept mapped between runs and
    /// reset in place: a fresh instance then does not page-fault on the
    /// memory it touches first. The cost is resident memory that stays
    /// after a burst: up to this much (in practice what a run touched,
    /// under 1 MiB for a small Python run) for every slot that was in use
    /// at once at the peak. 0 returns every slot's memory to the kernel.
    /// Default 8 MiB.
    pub pool_keep_resident_bytes: usize,
    /// After this long with no run in flight, a sidecar whose instance pool
    /// holds more warm slots than it has execution slots (what a burst
    /// leaves) gives the pool back: it builds its engine again from the
    /// compile cache and drops the old one, whose memory, tables and fiber
    /// stacks are unmapped, and returns malloc's free memory to the kernel.
    /// The next runs then take cold slots (a page fault per page first
    /// touched). Runs that keep coming never see it. `Duration::ZERO`:
    /// never. Default 30 s.
    pub idle_release: Duration,
    /// Where compiled guests are cached across restarts. `None`: the user
    /// cache directory (`$XDG_CACHE_HOME/tether`, else `~/.cache/tether`).
    pub cache_dir: Option<PathBuf>,
    /// Extra runtimes: a name for `Start.language` and a `wasm32-wasip1`
    /// module built on the `tether_v1` ABI.
    pub extra_runtimes: Vec<(String, Vec<u8>)>,
    /// Who may open runs. Default: on a Unix socket the sidecar's own uid;
    /// on TCP nobody — [`Sidecar::serve_tcp`](crate::Sidecar::serve_tcp)
    /// refuses to serve until a token, mTLS or an insecure loopback is set.
    pub access: Access,
    /// How many connections each listener holds, how long a handshake may
    /// take, and how many streams one connection may open
    /// ([`ConnectionLimits`]).
    pub connections: ConnectionLimits,
    /// HTTP/2 PING interval on every run connection. A backend that vanished
    /// without closing its connection (host gone, network stalled) is found
    /// out after at most about `keepalive_interval + keepalive_timeout`; its
    /// runs then end as if it had left (`backend_gone`), freeing their slots
    /// and waiting places. Default 30 s.
    pub keepalive_interval: Duration,
    /// How long a PING may go unanswered before the connection is closed.
    /// Default 20 s.
    pub keepalive_timeout: Duration,
    /// Bytes of `Start` messages (script, input, tool list) the sidecar holds
    /// for its runs, all together (`--max-start-mib`): a run is charged twice
    /// its `Start`'s size (the receive buffer and the start document built
    /// from it) until it first executes, once after that (the receive buffer
    /// lives as long as the stream), nothing once it ends. A `Start` that
    /// would pass it is refused with RESOURCE_EXHAUSTED. Default 256 MiB.
    pub max_start_bytes: u64,
    /// How long a new run stream may take to deliver its `Start`
    /// (`--start-timeout-seconds`); a stream that has not sent it by then is
    /// refused with DEADLINE_EXCEEDED. Default 10 s: an 8 MiB `Start` over a
    /// 7 Mbit/s link, while a silent stream is held for seconds, not forever.
    pub start_timeout: Duration,
    /// How long a run's stream may take none of the messages waiting for it
    /// (the backend stopped reading, its HTTP/2 window is full) before the run
    /// ends (`--stall-timeout-seconds`); meanwhile the run holds no execution
    /// slot and its limits keep running. Default 30 s.
    pub stall_timeout: Duration,
    /// When and how runs park (`docs/parking.md`).
    pub park: ParkConfig,
}

/// When a run parks, and what seals its state. Only runs whose backend
/// allows it (`Start.may_park`) and whose guest can park (the Python
/// runtime) park; every other run waits on as before.
#[derive(Debug, Clone)]
pub struct ParkConfig {
    /// A run parks once every call it waits on has waited this long, or at
    /// once when each waits for a person (`AwaitingPerson`)
    /// (`--park-after-ms`). Default 50 ms.
    pub after: Duration,
    /// The most bytes of guest state a run may park with; a guest whose
    /// state is larger waits on, holding its instance. Default 1 MiB.
    pub max_state_bytes: u64,
    /// What seals parked states (`--park-key-file`). Every sidecar that may
    /// resume another's runs needs the same key. With one, a drain parks
    /// every run that may park and waits on calls, instead of waiting for
    /// it (another sidecar resumes it). `None` (the default): a
    /// key made at random when the sidecar starts, so a run resumes only on
    /// the sidecar process that parked it.
    pub key: Option<crate::park::ParkKey>,
}

impl Default for ParkConfig {
    fn default() -> Self {
        ParkConfig { after: Duration::from_millis(50), max_state_bytes: 1 << 20, key: None }
    }
}

impl Default for SidecarConfig {
    fn default() -> Self {
        SidecarConfig {
            limits: Limits::default(),
            slots: std::thread::available_parallelism().map_or(2, |n| n.get()),
            worker_threads: 0,
            max_waiting_runs: 256,
            max_queued_runs: 1024,
            total_memory_bytes: 8 << 30,
            pool_keep_resident_bytes: 8 << 20,
            idle_release: Duration::from_secs(30),
            cache_dir: None,
            extra_runtimes: Vec::new(),
            access: Access::default(),
            connections: ConnectionLimits::default(),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(20),
            max_start_bytes: 256 << 20,
            start_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(30),
            park: ParkConfig::default(),
        }
    }
}

/// How long a drain lets runs in flight go on before it cancels them
/// (`--drain-deadline-seconds`); see [`Sidecar::drain`](crate::Sidecar::drain).
/// Give the orchestrator a grace period above it (Kubernetes'
/// `terminationGracePeriodSeconds`, 30 s by default, e.g. 45 s), or the
/// process is killed before it cancels the runs left.
pub const DEFAULT_DRAIN_DEADLINE: Duration = Duration::from_secs(30);

/// The most bytes any message the sidecar sends may have: the receive limit
/// gRPC clients apply by default.
pub const MAX_SENT_MESSAGE_BYTES: u64 = 4 << 20;

/// Room in a sent message for everything but its payloads (ids, names,
/// stats, protobuf framing).
const MESSAGE_OVERHEAD_BYTES: u64 = 64 << 10;

impl SidecarConfig {
    /// The largest gRPC message the sidecar accepts: a `Start` with the
    /// largest script and a generous tool list, or the largest tool result.
    pub fn max_message_bytes(&self) -> usize {
        let largest = self.limits.result_bytes.max(self.limits.script_bytes) as usize;
        largest + (4 << 20)
    }

    /// Checks that every message the sidecar may send fits
    /// [`MAX_SENT_MESSAGE_BYTES`]: `Finished` (the script's result plus its
    /// output) and `ToolCall` (one call's arguments).
    ///
    /// # Errors
    /// A message saying which limits to lower.
    pub fn check(&self) -> Result<(), String> {
        let limits = &self.limits;
        let finished = limits.script_result_bytes + limits.output_bytes + MESSAGE_OVERHEAD_BYTES;
        if finished > MAX_SENT_MESSAGE_BYTES {
            return Err(format!(
                "`script_result_bytes` + `output_bytes` (`{}` + `{}`) must leave room in a `{MAX_SENT_MESSAGE_BYTES}`-byte `Finished`; lower one of them",
                limits.script_result_bytes, limits.output_bytes
            ));
        }
        if self.start_timeout.is_zero() || self.stall_timeout.is_zero() {
            return Err("`start_timeout` and `stall_timeout` must be above zero".to_owned());
        }
        if limits.args_bytes + MESSAGE_OVERHEAD_BYTES > MAX_SENT_MESSAGE_BYTES {
            return Err(format!(
                "`args_bytes` (`{}`) must leave room in a `{MAX_SENT_MESSAGE_BYTES}`-byte `ToolCall`; lower it",
                limits.args_bytes
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_only_tightens() {
        let own = Limits::default();
        let requested = pb::Limits { max_calls: 500, cpu_time_ms: 1000, memory_bytes: 0, ..Default::default() };
        let limits = own.tightened_by(Some(&requested));
        assert_eq!(limits.max_calls, 50, "a request cannot raise the call cap");
        assert_eq!(limits.cpu_time, Duration::from_secs(1));
        assert_eq!(limits.memory_bytes, own.memory_bytes, "0 means unset");
        assert_eq!(own.tightened_by(None), own);
    }

    #[test]
    fn every_message_the_sidecar_sends_fits_the_default_grpc_limit() {
        assert_eq!(SidecarConfig::default().check(), Ok(()));
        let big = SidecarConfig {
            limits: Limits { script_result_bytes: 4 << 20, ..Limits::default() },
            ..SidecarConfig::default()
        };
        assert!(big.check().unwrap_err().contains("script_result_bytes"));
    }
}
