//! `tether-sidecar`: serves the sidecar on TCP and/or a Unix socket.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;
use tether_sidecar::{
    Access, BearerToken, ConnectionLimits, DEFAULT_DRAIN_DEADLINE, Hardening, Limits, MutualTls, ParkConfig, ParkKey,
    PeerPolicy, RunAs, ShutdownSignals, Sidecar, SidecarConfig, SocketAccess, SocketFile, TcpAccess,
    default_cache_dir_for_user,
};
use tether_telemetry::TelemetryArgs;
use tokio::task::JoinSet;

/// The one set of defaults: every flag's default comes from here.
fn defaults() -> SidecarConfig {
    SidecarConfig::default()
}

/// Runs the Tether sidecar.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// TCP address to serve runs on. TCP needs a token (--token-file,
    /// TETHER_TOKEN) or mTLS (--tls-*), or --insecure-loopback on a loopback
    /// address; without --listen only --socket is served.
    #[arg(long, env = "TETHER_LISTEN")]
    listen: Option<String>,
    /// Serve runs on this Unix socket; only peers with an allowed uid/gid get in.
    #[arg(long, env = "TETHER_SOCKET")]
    socket: Option<PathBuf>,
    /// The socket file's permission bits, in octal (connecting needs write
    /// permission; the uid/gid check still decides who gets in). Default:
    /// 0660, or 0666 when --allow-uid/--allow-gid admit peers beyond the
    /// socket's owner and group.
    #[arg(long, env = "TETHER_SOCKET_MODE", value_parser = parse_mode)]
    socket_mode: Option<u32>,
    /// The socket file's group (a gid). Default: the sidecar's gid (after --user).
    #[arg(long, env = "TETHER_SOCKET_GROUP")]
    socket_group: Option<u32>,
    /// Do not listen on TCP, even if --listen or TETHER_LISTEN is set.
    #[arg(long)]
    no_tcp: bool,
    /// A uid allowed to open runs on the Unix socket (repeatable; env:
    /// comma-separated). With neither --allow-uid nor --allow-gid: the
    /// sidecar's own uid (after --user). Root is not allowed unless listed:
    /// `--allow-uid 0`.
    #[arg(long = "allow-uid", env = "TETHER_ALLOW_UID", value_delimiter = ',')]
    allow_uids: Vec<u32>,
    /// A primary gid allowed to open runs on the Unix socket (repeatable; env:
    /// comma-separated).
    #[arg(long = "allow-gid", env = "TETHER_ALLOW_GID", value_delimiter = ',')]
    allow_gids: Vec<u32>,
    /// TCP clients must send `authorization: Bearer <token>` with the token in this file.
    #[arg(long, env = "TETHER_TOKEN_FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// TCP clients must send `authorization: Bearer <this token>` (prefer --token-file: an env var is seen by more).
    #[arg(long, env = "TETHER_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// mTLS: the sidecar's certificate chain (PEM); needs --tls-key and --tls-client-ca.
    #[arg(long, env = "TETHER_TLS_CERT", requires_all = ["tls_key", "tls_client_ca"])]
    tls_cert: Option<PathBuf>,
    /// mTLS: the sidecar's private key (PEM).
    #[arg(long, env = "TETHER_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// mTLS: the CA every client certificate must be signed by (PEM).
    #[arg(long, env = "TETHER_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Serve TCP without authentication; only on a loopback address, where
    /// every local process (any user) may then open runs.
    #[arg(long)]
    insecure_loopback: bool,
    /// When started as root, switch to this user after binding the listeners: `UID` or `UID:GID`.
    #[arg(long, env = "TETHER_USER")]
    user: Option<RunAs>,
    /// RLIMIT_NOFILE (soft and hard) set at start.
    #[arg(long, env = "TETHER_MAX_OPEN_FILES", default_value_t = DEFAULT_MAX_OPEN_FILES)]
    max_open_files: u64,
    /// After binding the listeners, enter a fresh network namespace (needs root):
    /// bound sockets keep working; nothing new can reach a network (OTLP export to a remote collector included).
    #[arg(long, env = "TETHER_UNSHARE_NET")]
    unshare_net: bool,
    /// Execution slots.
    #[arg(long, default_value_t = defaults().slots)]
    slots: usize,
    /// Threads serving run connections, each a current-thread runtime (0: the main runtime's).
    #[arg(long, env = "TETHER_WORKER_THREADS", default_value_t = defaults().worker_threads)]
    worker_threads: usize,
    /// Runs that may wait on tool results at once.
    #[arg(long, default_value_t = defaults().max_waiting_runs)]
    max_waiting_runs: usize,
    /// Runs that may queue for an execution slot.
    #[arg(long, default_value_t = defaults().max_queued_runs)]
    max_queued_runs: usize,
    /// MiB of `Start` messages held for runs, all together (a run counts
    /// twice its `Start` until it first executes); past it a run is refused
    /// with RESOURCE_EXHAUSTED.
    #[arg(long, env = "TETHER_MAX_START_MIB", default_value_t = defaults().max_start_bytes >> 20)]
    max_start_mib: u64,
    /// Seconds a new run stream may take to deliver its `Start`; past it the
    /// stream is refused with DEADLINE_EXCEEDED.
    #[arg(long, env = "TETHER_START_TIMEOUT_SECONDS", default_value_t = defaults().start_timeout.as_secs_f64())]
    start_timeout_seconds: f64,
    /// Seconds a run's stream may take none of the messages waiting for it
    /// (the backend stopped reading) before the run ends; it holds no
    /// execution slot meanwhile.
    #[arg(long, env = "TETHER_STALL_TIMEOUT_SECONDS", default_value_t = defaults().stall_timeout.as_secs_f64())]
    stall_timeout_seconds: f64,
    /// Milliseconds every call a run waits on may wait before the run parks
    /// (when its backend allows it: `Start.may_park`); a call awaiting a
    /// person parks it at once (docs/parking.md).
    #[arg(long, env = "TETHER_PARK_AFTER_MS", default_value_t = defaults().park.after.as_millis() as u64)]
    park_after_ms: u64,
    /// KiB of guest state a run may park with; a larger one waits on live.
    #[arg(long, env = "TETHER_PARK_MAX_STATE_KIB", default_value_t = defaults().park.max_state_bytes >> 10)]
    park_max_state_kib: u64,
    /// A file of at least 32 secret bytes that seals parked states. Give
    /// every sidecar of a deployment the same one, so any of them resumes a
    /// run another parked; without it a key is made at random at start and
    /// only this process resumes its runs.
    #[arg(long, env = "TETHER_PARK_KEY_FILE")]
    park_key_file: Option<PathBuf>,
    /// Tool calls per script.
    #[arg(long, default_value_t = defaults().limits.max_calls)]
    max_calls: u32,
    /// CPU seconds of a script's own computation.
    #[arg(long, default_value_t = defaults().limits.cpu_time.as_secs_f64())]
    cpu_seconds: f64,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = defaults().limits.memory_bytes >> 20)]
    memory_mib: u64,
    /// Guest memory of all runs together, in MiB.
    #[arg(long, default_value_t = defaults().total_memory_bytes >> 20)]
    total_memory_mib: u64,
    /// KiB of each pool slot's memory kept resident between runs (faster
    /// fresh instances; 0 gives it back to the kernel after every run).
    #[arg(long, default_value_t = defaults().pool_keep_resident_bytes >> 10)]
    pool_keep_resident_kib: usize,
    /// After this many seconds with no run in flight, give the instance
    /// pool's memory back to the kernel if a burst left more warm slots than
    /// --slots (the next runs take cold slots); 0: never.
    #[arg(long, env = "TETHER_IDLE_RELEASE_SECONDS", default_value_t = defaults().idle_release.as_secs_f64())]
    idle_release_seconds: f64,
    /// stdout + stderr bytes kept per run.
    #[arg(long, default_value_t = defaults().limits.output_bytes)]
    output_bytes: u64,
    /// Script source bytes.
    #[arg(long, default_value_t = defaults().limits.script_bytes)]
    script_bytes: u64,
    /// Bytes of one call's arguments.
    #[arg(long, default_value_t = defaults().limits.args_bytes)]
    args_bytes: u64,
    /// Bytes of one call's result.
    #[arg(long, default_value_t = defaults().limits.result_bytes)]
    result_bytes: u64,
    /// Bytes of the script's own result.
    #[arg(long, default_value_t = defaults().limits.script_result_bytes)]
    script_result_bytes: u64,
    /// The longest a run may take, waits included, in seconds.
    #[arg(long, default_value_t = defaults().limits.deadline.as_secs())]
    deadline_seconds: u64,
    /// Where compiled guests are cached (default: the user cache directory).
    #[arg(long, env = "TETHER_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// On SIGTERM or SIGINT, how long runs in flight may go on before they are cancelled.
    #[arg(long, env = "TETHER_DRAIN_DEADLINE_SECONDS", default_value_t = DEFAULT_DRAIN_DEADLINE.as_secs())]
    drain_deadline_seconds: u64,
    /// HTTP/2 PING interval on run connections, in seconds: a backend that
    /// vanished without closing its connection is found out after about
    /// this plus --keepalive-timeout-seconds, and its runs end.
    #[arg(long, env = "TETHER_KEEPALIVE_INTERVAL_SECONDS", default_value_t = defaults().keepalive_interval.as_secs_f64())]
    keepalive_interval_seconds: f64,
    /// How long a PING may go unanswered before the connection is closed, in seconds.
    #[arg(long, env = "TETHER_KEEPALIVE_TIMEOUT_SECONDS", default_value_t = defaults().keepalive_timeout.as_secs_f64())]
    keepalive_timeout_seconds: f64,
    /// Connections each run listener (--listen, --socket) holds at once;
    /// more wait in the listen backlog until one closes.
    #[arg(long, env = "TETHER_MAX_CONNECTIONS", default_value_t = defaults().connections.max_connections)]
    max_connections: usize,
    /// Connections the health listener, and apart the metrics listener,
    /// hold at once.
    #[arg(long, env = "TETHER_MAX_PROBE_CONNECTIONS", default_value_t = defaults().connections.max_probe_connections)]
    max_probe_connections: usize,
    /// Seconds a new connection may take to finish its handshake (HTTP/2
    /// preface and SETTINGS, TLS, an HTTP/1 request header) before it is closed.
    #[arg(long, env = "TETHER_HANDSHAKE_TIMEOUT_SECONDS", default_value_t = defaults().connections.handshake_timeout.as_secs_f64())]
    handshake_timeout_seconds: f64,
    /// HTTP/2 streams one run connection may have open at once (default:
    /// --max-queued-runs + --max-waiting-runs + --slots + 64, every run the
    /// sidecar admits at once over one connection, and room beside them).
    #[arg(long, env = "TETHER_MAX_STREAMS_PER_CONNECTION")]
    max_streams_per_connection: Option<u32>,
    /// HTTP/2 streams one health listener connection may have open at once.
    #[arg(long, default_value_t = defaults().connections.max_probe_streams_per_connection)]
    max_probe_streams_per_connection: u32,
    /// Health `Watch` streams open at once over every listener; more get RESOURCE_EXHAUSTED.
    #[arg(long, env = "TETHER_MAX_HEALTH_WATCHES", default_value_t = defaults().connections.max_health_watches)]
    max_health_watches: usize,
    /// Also serve ONLY gRPC health on this TCP address (probes, when runs go over --socket).
    #[arg(long, env = "TETHER_HEALTH_LISTEN")]
    health_listen: Option<String>,
    /// Serve Prometheus metrics at `GET /metrics` on this TCP address.
    #[arg(long, env = "TETHER_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    #[command(flatten)]
    telemetry: TelemetryArgs,
    /// Compile the guests into the cache directory and exit, so that a later
    /// start (e.g. of a container image built with this) serves at once.
    #[arg(long)]
    prepare_cache: bool,
}

/// RLIMIT_NOFILE by default: room for thousands of backend connections.
const DEFAULT_MAX_OPEN_FILES: u64 = 65_536;

/// How long the servers may take to close their connections once every run
/// has ended; a client holding a stream open does not hold up the exit longer.
const SERVER_CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The sidecar's servers; each ends when the sidecar stops.
type Servers = JoinSet<Result<(), tether_sidecar::SidecarError>>;

/// The listeners, bound before the process is hardened (the user drop and
/// the network namespace come after binding).
#[derive(Debug, Default)]
struct Bound {
    tcp: Option<std::net::TcpListener>,
    unix: Option<(SocketFile, std::os::unix::net::UnixListener)>,
    health: Option<std::net::TcpListener>,
    metrics: Option<std::net::TcpListener>,
}

/// `--socket-mode`: octal permission bits.
fn parse_mode(value: &str) -> Result<u32, String> {
    u32::from_str_radix(value.trim_start_matches("0o"), 8)
        .ok()
        .filter(|mode| *mode <= 0o777)
        .ok_or_else(|| format!("`{value}` is not a mode: give octal permission bits, e.g. `0660`"))
}

/// The uid and gid the sidecar runs as once hardened (after `--user`).
fn own_ids(args: &Args) -> (u32, u32) {
    args.user.map_or_else(
        || (nix::unistd::Uid::effective().as_raw(), nix::unistd::Gid::effective().as_raw()),
        |user| (user.uid, user.gid),
    )
}

/// Who the socket file belongs to, and its mode, from the flags.
fn socket_access(args: &Args, policy: &PeerPolicy) -> SocketAccess {
    let (uid, own_gid) = own_ids(args);
    let gid = args.socket_group.unwrap_or(own_gid);
    // The peer check is the gate; the mode must not silently contradict the
    // allow lists the operator wrote.
    let others_allowed = policy.uids.iter().any(|&allowed| allowed != uid) || policy.gids.iter().any(|&g| g != gid);
    let mode = args.socket_mode.unwrap_or(if others_allowed { 0o666 } else { 0o660 });
    SocketAccess { uid, gid, mode }
}

fn bind_tcp(address: &str, flag: &str) -> anyhow::Result<std::net::TcpListener> {
    let listener =
        std::net::TcpListener::bind(address).with_context(|| format!("cannot listen on `{address}` ({flag})"))?;
    listener.set_nonblocking(true).context("cannot make the listener non-blocking")?;
    Ok(listener)
}

/// Who may open runs, from the flags.
fn access(args: &Args) -> anyhow::Result<Access> {
    let token = match (&args.token_file, &args.token) {
        (Some(path), _) => Some(BearerToken::from_file(path)?),
        (None, Some(token)) => Some(BearerToken::new(token).context("TETHER_TOKEN / --token")?),
        (None, None) => None,
    };
    let tls = match (&args.tls_cert, &args.tls_key, &args.tls_client_ca) {
        (Some(cert), Some(key), Some(ca)) => Some(MutualTls::from_files(cert, key, ca)?),
        _ => None,
    };
    // The sidecar's own uid is the one it runs as after `--user`.
    let own_uid = own_ids(args).0;
    let uids =
        if args.allow_uids.is_empty() && args.allow_gids.is_empty() { vec![own_uid] } else { args.allow_uids.clone() };
    Ok(Access {
        unix: PeerPolicy { uids, gids: args.allow_gids.clone() },
        tcp: TcpAccess { token, tls, insecure_loopback: args.insecure_loopback },
    })
}

/// The park key read from `path`, if one is given.
fn park_key(path: Option<&std::path::Path>) -> anyhow::Result<Option<ParkKey>> {
    let Some(path) = path else { return Ok(None) };
    Ok(Some(ParkKey::from_file(path)?))
}

/// `seconds` as a duration above zero, or an error naming `flag`.
fn positive_seconds(seconds: f64, flag: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|duration| !duration.is_zero())
        .with_context(|| format!("`{flag}` must be a positive number of seconds, not `{seconds}`"))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cpu_time = Duration::try_from_secs_f64(args.cpu_seconds).context("--cpu-seconds must be a positive number")?;
    let config = SidecarConfig {
        limits: Limits {
            max_calls: args.max_calls,
            cpu_time,
            memory_bytes: args.memory_mib << 20,
            output_bytes: args.output_bytes,
            script_bytes: args.script_bytes,
            args_bytes: args.args_bytes,
            result_bytes: args.result_bytes,
            script_result_bytes: args.script_result_bytes,
            deadline: Duration::from_secs(args.deadline_seconds),
        },
        slots: args.slots,
        worker_threads: args.worker_threads,
        max_waiting_runs: args.max_waiting_runs,
        max_queued_runs: args.max_queued_runs,
        total_memory_bytes: args.total_memory_mib << 20,
        pool_keep_resident_bytes: args.pool_keep_resident_kib << 10,
        idle_release: Duration::try_from_secs_f64(args.idle_release_seconds)
            .context("--idle-release-seconds must be 0 (never) or a positive number")?,
        // Started as root with `--user`, the cache is the user's, not root's.
        cache_dir: args.cache_dir.clone().or_else(|| args.user.map(|user| default_cache_dir_for_user(user.uid))),
        access: access(&args)?,
        keepalive_interval: Duration::try_from_secs_f64(args.keepalive_interval_seconds)
            .context("--keepalive-interval-seconds must be a positive number")?,
        keepalive_timeout: Duration::try_from_secs_f64(args.keepalive_timeout_seconds)
            .context("--keepalive-timeout-seconds must be a positive number")?,
        connections: ConnectionLimits {
            max_connections: args.max_connections,
            max_probe_connections: args.max_probe_connections,
            handshake_timeout: Duration::try_from_secs_f64(args.handshake_timeout_seconds)
                .ok()
                .filter(|timeout| !timeout.is_zero())
                .context("--handshake-timeout-seconds must be a positive number")?,
            max_streams_per_connection: args.max_streams_per_connection,
            max_probe_streams_per_connection: args.max_probe_streams_per_connection,
            max_health_watches: args.max_health_watches,
        },
        max_start_bytes: args.max_start_mib << 20,
        start_timeout: positive_seconds(args.start_timeout_seconds, "--start-timeout-seconds")?,
        stall_timeout: positive_seconds(args.stall_timeout_seconds, "--stall-timeout-seconds")?,
        park: ParkConfig {
            after: Duration::from_millis(args.park_after_ms),
            max_state_bytes: args.park_max_state_kib << 10,
            key: park_key(args.park_key_file.as_deref())?,
        },
        ..defaults()
    };
    // Bind and harden while the process has one thread (see `harden`); the
    // runtime, the telemetry and the guest loader start after.
    let (bound, hardened) = if args.prepare_cache {
        (Bound::default(), None)
    } else {
        let bound = bind(&args, &config)?;
        let hardening =
            Hardening { max_open_files: Some(args.max_open_files), unshare_net: args.unshare_net, run_as: args.user };
        let report = hardening.apply().context("cannot harden the process; refusing to start")?;
        // A cache directory chosen for the user is made (as the user) and
        // must be the user's alone: compiled code is loaded from it.
        if let (None, Some(dir)) = (&args.cache_dir, &config.cache_dir) {
            tether_sidecar::claim_cache_dir(dir).context("cannot use the default compile cache for `--user`")?;
        }
        (bound, Some(report))
    };
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(serve(args, config, bound, hardened))
}

/// Binds every listener the flags ask for, checking first that TCP may be
/// served with the access configured.
fn bind(args: &Args, config: &SidecarConfig) -> anyhow::Result<Bound> {
    let mut bound = Bound::default();
    if let Some(address) = args.listen.as_deref().filter(|_| !args.no_tcp) {
        let listener = bind_tcp(address, "--listen")?;
        config.access.tcp.check(listener.local_addr().context("the TCP listener has no address")?)?;
        bound.tcp = Some(listener);
    }
    if let Some(path) = &args.socket {
        // Bound as root, given to the user the sidecar runs as (`socket_file`).
        let (listener, file) = SocketFile::bind(path, socket_access(args, &config.access.unix))?;
        listener.set_nonblocking(true).context("cannot make the listener non-blocking")?;
        bound.unix = Some((file, listener));
    }
    anyhow::ensure!(
        bound.tcp.is_some() || bound.unix.is_some(),
        "nothing to serve runs on: give `--socket PATH` (peers checked by uid), or `--listen ADDRESS` with a token, mTLS or `--insecure-loopback`"
    );
    bound.health = args.health_listen.as_deref().map(|address| bind_tcp(address, "--health-listen")).transpose()?;
    bound.metrics = args.metrics_listen.as_deref().map(|address| bind_tcp(address, "--metrics-listen")).transpose()?;
    Ok(bound)
}

async fn serve(
    args: Args,
    config: SidecarConfig,
    bound: Bound,
    hardened: Option<tether_sidecar::HardenReport>,
) -> anyhow::Result<()> {
    // Logs go to stderr; stdout carries only the `listening on …` lines.
    let telemetry = args.telemetry.config("tether-sidecar", "info").init()?;
    if args.prepare_cache {
        for path in tether_sidecar::prepare_cache(&config).context("failed to prepare the compile cache")? {
            println!("cached {}", path.display());
        }
        return Ok(());
    }
    if let Some(report) = hardened {
        if report.max_open_files < args.max_open_files {
            tracing::warn!(
                wanted = args.max_open_files,
                hard_limit = report.max_open_files,
                "--max-open-files is above the hard limit, which this process may not raise; using the hard limit"
            );
        }
        tracing::info!(
            uid = report.uid,
            gid = report.gid,
            max_open_files = report.max_open_files,
            unshared_net = report.unshared_net,
            "hardened: no new privileges, no core dumps"
        );
    }
    // Lifecycle: catch signals first, listen at once, load the guests in the
    // background (readiness says when), drain on the first signal.
    let mut signals = ShutdownSignals::install().context("cannot catch SIGTERM and SIGINT")?;
    let cache_dir = config.cache_dir.clone().unwrap_or_else(tether_sidecar::default_cache_dir);
    tracing::info!(cache_dir = %cache_dir.display(), "compile cache (`--cache-dir` sets another)");
    let sidecar = Sidecar::load_in_background(config).context("failed to start the sidecar")?;
    let mut servers = Servers::new();
    // Every server runs until the sidecar stops (after a drain).
    let until_stopped = std::future::pending::<()>;
    if let Some(listener) = bound.tcp {
        let listener = tokio::net::TcpListener::from_std(listener).context("cannot use the TCP listener")?;
        let address = listener.local_addr().context("the TCP listener has no address")?;
        tracing::info!(%address, "serving on TCP");
        // One line per listener on stdout, for whoever started the sidecar
        // (e.g. with `--listen 127.0.0.1:0`).
        println!("listening on {address}");
        let sidecar = sidecar.clone();
        servers.spawn(async move { sidecar.serve_tcp(listener, until_stopped()).await });
    }
    let mut socket_file = None;
    if let Some((file, listener)) = bound.unix {
        let listener = tokio::net::UnixListener::from_std(listener).context("cannot use the Unix listener")?;
        let path = file.path().to_owned();
        warn_of_allowed_peers_that_cannot_connect(&args, &sidecar);
        tracing::info!(socket = %path.display(), "serving on a Unix socket");
        println!("listening on unix:{}", path.display());
        // Removed when `serve` returns, however it ends.
        socket_file = Some(file);
        let sidecar = sidecar.clone();
        servers.spawn(async move { sidecar.serve_unix(listener, until_stopped()).await });
    }
    if let Some(listener) = bound.health {
        let listener = tokio::net::TcpListener::from_std(listener).context("cannot use the health listener")?;
        let address = listener.local_addr().context("the health listener has no address")?;
        tracing::info!(%address, "serving gRPC health only");
        println!("health listening on {address}");
        let sidecar = sidecar.clone();
        servers.spawn(async move { sidecar.serve_health_tcp(listener, until_stopped()).await });
    }
    if let Some(listener) = bound.metrics {
        let listener = tokio::net::TcpListener::from_std(listener).context("cannot use the metrics listener")?;
        let address = listener.local_addr().context("the metrics listener has no address")?;
        tracing::info!(%address, "serving Prometheus metrics at /metrics");
        println!("metrics listening on http://{address}/metrics");
        let sidecar = sidecar.clone();
        servers.spawn(async move {
            sidecar.serve_metrics(listener, until_stopped()).await;
            Ok(())
        });
    }
    let served =
        run_until_drained(&sidecar, servers, &mut signals, Duration::from_secs(args.drain_deadline_seconds)).await;
    drop(socket_file);
    // Every run has ended: its spans are sent before the process exits.
    telemetry.shutdown().await;
    served
}

/// Warns of each uid the allow list admits that the socket file's mode keeps
/// out (not its owner, no write permission for others): it would get
/// `Permission denied` before the peer check could let it in.
fn warn_of_allowed_peers_that_cannot_connect(args: &Args, sidecar: &Sidecar) {
    let policy = &sidecar.config().access.unix;
    let access = socket_access(args, policy);
    if access.mode & 0o002 != 0 {
        return;
    }
    for uid in policy.uids.iter().filter(|&&uid| uid != access.uid) {
        tracing::warn!(
            uid,
            socket_mode = format!("{:04o}", access.mode),
            socket_group = access.gid,
            "an allowed uid can connect to the socket only if it is in the socket's group; give `--socket-mode 0666` (the peer check still decides who gets in) or `--socket-group`"
        );
    }
}

/// Serves until SIGTERM or SIGINT — failing at once if the guests cannot load
/// or a server fails — then drains (a second signal cancels the runs at
/// once) and waits for the servers to close.
async fn run_until_drained(
    sidecar: &Sidecar,
    mut servers: Servers,
    signals: &mut ShutdownSignals,
    deadline: Duration,
) -> anyhow::Result<()> {
    let ready = sidecar.ready();
    tokio::pin!(ready);
    let mut loading = true;
    let signal = loop {
        tokio::select! {
            signal = signals.recv() => break signal,
            loaded = &mut ready, if loading => {
                loaded.context("the sidecar cannot run scripts")?;
                loading = false;
                tracing::info!("ready: admitting runs");
            }
            Some(ended) = servers.join_next() => {
                ended.context("a server task panicked")??;
                anyhow::bail!("a server stopped before the sidecar was asked to");
            }
        }
    };
    tracing::info!(signal, deadline_s = deadline.as_secs(), "draining for shutdown");
    let drain = sidecar.drain(deadline);
    tokio::pin!(drain);
    let report = tokio::select! {
        report = &mut drain => report,
        signal = signals.recv() => {
            tracing::warn!(signal, "second signal: cancelling the runs left now");
            tokio::join!(sidecar.shutdown(), drain).1
        }
    };
    tracing::info!(runs = report.runs_at_start, cancelled = report.cancelled, "drained; closing the listeners");
    let closed = tokio::time::timeout(SERVER_CLOSE_GRACE, async {
        while let Some(ended) = servers.join_next().await {
            ended.context("a server task panicked")??;
        }
        anyhow::Ok(())
    });
    match closed.await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(
                grace_s = SERVER_CLOSE_GRACE.as_secs(),
                "clients still hold connections open; exiting anyway"
            );
            Ok(())
        }
    }
}
