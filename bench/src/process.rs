//! A real `tether-sidecar` process for the load and soak commands, and what
//! `/proc` says about it: resident memory, open file descriptors, threads;
//! and its Prometheus metrics, when started with `--metrics-listen`.

use anyhow::{Context, bail};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tether_backend::{CallHandler, ScriptCall, SidecarClient, ToolOutcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Answers `echo` with its `i` argument: the tool of the load and soak scripts.
pub(crate) struct Echo;

#[async_trait::async_trait]
impl CallHandler for Echo {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        ToolOutcome::Ok(call.args["i"].clone())
    }
}

/// Where to find the sidecar binary: `--sidecar-bin`, else `tether-sidecar`
/// beside this binary (both are built into the same target directory).
pub(crate) fn sidecar_binary(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(path) = given {
        return Ok(path);
    }
    let here = std::env::current_exe().context("cannot find this binary's path")?;
    let beside = here.with_file_name("tether-sidecar");
    if !beside.exists() {
        bail!(
            "no `tether-sidecar` beside `{}`; build it (`cargo +1.96.0 build --workspace --exclude tether-example-guest`) or pass --sidecar-bin",
            here.display()
        );
    }
    Ok(beside)
}

/// A running sidecar process; killed when dropped.
pub(crate) struct SidecarProcess {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) url: String,
    /// `unix:PATH`, when started with `--socket PATH`.
    pub(crate) unix_url: Option<String>,
    /// `HOST:PORT` of its metrics endpoint, when started with `--metrics-listen`.
    metrics_address: Option<String>,
}

impl SidecarProcess {
    /// Starts `binary` on `127.0.0.1:0` with `args` (logs to stderr at
    /// `warn`), and waits until it announces its TCP listener (and its Unix
    /// socket, when `args` give `--socket`, and its metrics endpoint, when
    /// they give `--metrics-listen`).
    pub(crate) fn start(binary: &Path, args: &[String]) -> anyhow::Result<SidecarProcess> {
        let mut child = Command::new(binary)
            // Loopback only, and only for the duration of the command.
            .args(["--listen", "127.0.0.1:0", "--insecure-loopback"])
            .args(args)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start `{}`", binary.display()))?;
        let stdout = child.stdout.take().context("the sidecar's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let wants = |flag: &str| args.iter().any(|arg| arg == flag);
        let (wants_unix, wants_metrics) = (wants("--socket"), wants("--metrics-listen"));
        let (mut address, mut unix_url, mut metrics_address) = (None, None, None);
        while address.is_none() || (wants_unix && unix_url.is_none()) || (wants_metrics && metrics_address.is_none()) {
            let Some(line) = lines.next() else { bail!("the sidecar exited before listening") };
            let line = line?;
            if let Some(metrics) = line.strip_prefix("metrics listening on http://") {
                metrics_address = Some(metrics.trim_end_matches("/metrics").to_owned());
            }
            match line.strip_prefix("listening on ") {
                Some(unix) if unix.starts_with("unix:") => unix_url = Some(unix.to_owned()),
                Some(tcp) => address = Some(tcp.to_owned()),
                None => {}
            }
        }
        // Keep reading stdout so the sidecar never meets a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let address = address.unwrap_or_default();
        Ok(SidecarProcess { child, url: format!("http://{address}"), unix_url, metrics_address })
    }

    /// A client on a new connection, once the sidecar admits runs (it
    /// compiles or loads its runtimes first).
    pub(crate) async fn connect(&self) -> anyhow::Result<SidecarClient> {
        self.connect_to(&self.url).await
    }

    /// `count` clients (at least one), each on a connection of its own.
    pub(crate) async fn connections(&self, count: usize) -> anyhow::Result<Vec<SidecarClient>> {
        let mut clients = Vec::with_capacity(count.max(1));
        for _ in 0..count.max(1) {
            clients.push(self.connect().await?);
        }
        Ok(clients)
    }

    /// Like [`connect`](Self::connect), to `url` (this sidecar's TCP or Unix address).
    pub(crate) async fn connect_to(&self, url: &str) -> anyhow::Result<SidecarClient> {
        let client = SidecarClient::connect(url).await?;
        client.wait_ready(Duration::from_secs(300)).await?;
        Ok(client)
    }

    /// Its Prometheus metrics now (`GET /metrics`), as text.
    ///
    /// # Errors
    /// If it was started without `--metrics-listen`, or the endpoint does
    /// not answer 200.
    pub(crate) async fn metrics(&self) -> anyhow::Result<String> {
        let address = self.metrics_address.as_deref().context("the sidecar was started without --metrics-listen")?;
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .with_context(|| format!("cannot reach the metrics endpoint at {address}"))?;
        let request = format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.context("asking for the metrics")?;
        // The endpoint sends a whole body with its length, and closes.
        let mut response = String::new();
        stream.read_to_string(&mut response).await.context("reading the metrics")?;
        let (head, body) = response.split_once("\r\n\r\n").context("a metrics response with no header end")?;
        anyhow::ensure!(
            head.starts_with("HTTP/1.1 200"),
            "the metrics endpoint answered `{}`",
            head.lines().next().unwrap_or("")
        );
        Ok(body.to_owned())
    }

    /// What `/proc` says about the process now.
    pub(crate) fn sample(&self) -> anyhow::Result<ProcSample> {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading /proc/PID/status")?;
        let field = |name: &str| -> anyhow::Result<u64> {
            let line =
                status.lines().find_map(|line| line.strip_prefix(name)).with_context(|| format!("no `{name}`"))?;
            Ok(line.trim().trim_end_matches("kB").trim().parse()?)
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).context("reading /proc/PID/fd")?.count() as u64;
        Ok(ProcSample { rss_kib: field("VmRSS:")?, threads: field("Threads:")?, fds })
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One look at the sidecar process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcSample {
    /// Resident memory (`VmRSS`), KiB.
    pub(crate) rss_kib: u64,
    /// Open file descriptors.
    pub(crate) fds: u64,
    /// Threads (`Threads`).
    pub(crate) threads: u64,
}

impl std::fmt::Display for ProcSample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RSS {:.1} MiB, {} fds, {} threads", self.rss_kib as f64 / 1024.0, self.fds, self.threads)
    }
}

/// `after` relative to `before`, in percent.
pub(crate) fn drift(before: u64, after: u64) -> f64 {
    (after as f64 - before as f64) / before.max(1) as f64 * 100.0
}
