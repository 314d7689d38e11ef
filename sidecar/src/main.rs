//! `tether-sidecar`: serves the sidecar on TCP and/or a Unix socket.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;
use tether_sidecar::{Limits, Sidecar, SidecarConfig};

/// The one set of defaults: every flag's default comes from here.
fn defaults() -> SidecarConfig {
    SidecarConfig::default()
}

/// Runs the Tether sidecar.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// TCP address to listen on.
    #[arg(long, env = "TETHER_LISTEN", default_value = "127.0.0.1:50051")]
    listen: String,
    /// Also (or instead, with --no-tcp) listen on this Unix socket.
    #[arg(long, env = "TETHER_SOCKET")]
    socket: Option<PathBuf>,
    /// Do not listen on TCP.
    #[arg(long)]
    no_tcp: bool,
    /// Execution slots.
    #[arg(long, default_value_t = defaults().slots)]
    slots: usize,
    /// Runs that may wait on tool results at once.
    #[arg(long, default_value_t = defaults().max_waiting_runs)]
    max_waiting_runs: usize,
    /// Runs that may queue for an execution slot.
    #[arg(long, default_value_t = defaults().max_queued_runs)]
    max_queued_runs: usize,
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
    /// Compile the guests into the cache directory and exit, so that a later
    /// start (e.g. of a container image built with this) serves at once.
    #[arg(long)]
    prepare_cache: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs go to stderr; stdout carries only the `listening on …` lines.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
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
        max_waiting_runs: args.max_waiting_runs,
        max_queued_runs: args.max_queued_runs,
        total_memory_bytes: args.total_memory_mib << 20,
        cache_dir: args.cache_dir,
        ..defaults()
    };
    if args.prepare_cache {
        for path in tether_sidecar::prepare_cache(&config).context("failed to prepare the compile cache")? {
            println!("cached {}", path.display());
        }
        return Ok(());
    }
    let sidecar = Sidecar::new(config).context("failed to start the sidecar")?;
    let signal = async {
        // If the signal handler cannot be installed, serve until killed.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let signal = futures::future::FutureExt::shared(Box::pin(signal));
    let mut servers = tokio::task::JoinSet::new();
    if !args.no_tcp {
        let listener = tokio::net::TcpListener::bind(&args.listen).await.with_context(|| format!("cannot listen on `{}`", args.listen))?;
        let address = listener.local_addr().context("the TCP listener has no address")?;
        tracing::info!(%address, "serving on TCP");
        // One line per listener on stdout, for whoever started the sidecar
        // (e.g. with `--listen 127.0.0.1:0`).
        println!("listening on {address}");
        let (sidecar, signal) = (sidecar.clone(), signal.clone());
        servers.spawn(async move { sidecar.serve_tcp(listener, signal).await });
    }
    if let Some(path) = args.socket {
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path).with_context(|| format!("cannot listen on `{}`", path.display()))?;
        tracing::info!(socket = %path.display(), "serving on a Unix socket");
        println!("listening on unix:{}", path.display());
        let (sidecar, signal) = (sidecar.clone(), signal.clone());
        servers.spawn(async move { sidecar.serve_unix(listener, signal).await });
    }
    anyhow::ensure!(!servers.is_empty(), "nothing to serve on: give --socket or drop --no-tcp");
    while let Some(result) = servers.join_next().await {
        result.context("a server task failed")??;
    }
    Ok(())
}
