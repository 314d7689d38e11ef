//! A sidecar served inside the backend's own process, on a loopback port and
//! on an abstract Unix socket: what `tether demo` and the Python package's
//! `embedded` default start. Their own clients take the socket
//! ([`EmbeddedSidecar::local_url`]): a message costs the kernel less there
//! than through loopback TCP (`docs/benchmarks.md`). An abstract socket has
//! no file: nothing is left behind however the process ends.

use crate::auth::TcpAccess;
use crate::config::SidecarConfig;
use crate::server::{Sidecar, SidecarError};
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::os::linux::net::SocketAddrExt;
use tokio::net::{TcpListener, UnixListener};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Why an embedded sidecar could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// The sidecar could not be built or its server failed.
    #[error(transparent)]
    Sidecar(#[from] SidecarError),
    /// No loopback port could be bound (or read back once bound).
    #[error("cannot bind a loopback port for the embedded sidecar: {0}")]
    Bind(std::io::Error),
    /// No abstract Unix socket could be bound.
    #[error("cannot bind an abstract Unix socket for the embedded sidecar: {0}")]
    Socket(std::io::Error),
    /// The task serving the sidecar panicked or was aborted.
    #[error("the embedded sidecar's server task ended abnormally: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// A sidecar serving on `127.0.0.1:<ephemeral>` and on an abstract Unix
/// socket; dropping it stops it.
#[derive(Debug)]
pub struct EmbeddedSidecar {
    /// The sidecar (for its counters).
    pub sidecar: Sidecar,
    /// The address it serves on.
    pub address: SocketAddr,
    /// The name of the abstract Unix socket it serves on.
    pub socket: String,
    stop: CancellationToken,
    servers: Vec<JoinHandle<Result<(), SidecarError>>>,
}

impl EmbeddedSidecar {
    /// Builds a sidecar from `config` and serves it on a fresh loopback port
    /// on the current Tokio runtime (on threads of its own when
    /// `config.worker_threads` is set). The listener is bound before this
    /// returns, so clients may connect at once.
    ///
    /// Unless `config.access.tcp` sets a token or mTLS, the port is an
    /// insecure loopback: any local process may open runs on it while it
    /// lives (it serves this process's own turns; docs/security.md).
    ///
    /// The Unix socket admits this process's own uid only (unless
    /// `config.access.unix` says otherwise).
    ///
    /// # Errors
    /// [`EmbeddedError::Sidecar`] if the sidecar cannot be built,
    /// [`EmbeddedError::Bind`] if the port cannot be bound,
    /// [`EmbeddedError::Socket`] if the Unix socket cannot be made.
    pub async fn start(mut config: SidecarConfig) -> Result<EmbeddedSidecar, EmbeddedError> {
        let tcp = &mut config.access.tcp;
        if tcp.token.is_none() && tcp.tls.is_none() {
            *tcp = TcpAccess::insecure_loopback();
        }
        let sidecar = Sidecar::new(config)?;
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(EmbeddedError::Bind)?;
        let address = listener.local_addr().map_err(EmbeddedError::Bind)?;
        let (socket, unix_listener) = bind_abstract().map_err(EmbeddedError::Socket)?;
        let stop = CancellationToken::new();
        let tcp_server = {
            let (sidecar, stop) = (sidecar.clone(), stop.clone());
            tokio::spawn(async move { sidecar.serve_tcp(listener, stop.cancelled_owned()).await })
        };
        let unix_server = {
            let (sidecar, stop) = (sidecar.clone(), stop.clone());
            tokio::spawn(async move { sidecar.serve_unix(unix_listener, stop.cancelled_owned()).await })
        };
        Ok(EmbeddedSidecar { sidecar, address, socket, stop, servers: vec![tcp_server, unix_server] })
    }

    /// The address a client connects to (`SidecarClient::connect` in
    /// `tether-backend`): `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The address for clients in this process, `unix-abstract:<name>`
    /// (which `SidecarClient::connect` and grpc-python take), cheaper per
    /// message than [`url`](Self::url)'s loopback TCP.
    pub fn local_url(&self) -> String {
        format!("unix-abstract:{}", self.socket)
    }

    /// Stops serving, ends every run, and waits for the server to finish.
    ///
    /// # Errors
    /// If the server failed or its task ended abnormally.
    pub async fn stop(mut self) -> Result<(), EmbeddedError> {
        self.stop.cancel();
        for server in std::mem::take(&mut self.servers) {
            server.await??;
        }
        Ok(())
    }
}

/// Binds an abstract Unix socket under a fresh name: this process's id and
/// a random part, so another local user cannot take the name first and make
/// the start fail. (A name already taken fails the bind; a client of ours
/// connects only to a name this sidecar holds.)
fn bind_abstract() -> std::io::Result<(String, UnixListener)> {
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    let name = format!("tether-embedded-{}-{random:016x}", std::process::id());
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&address)?;
    listener.set_nonblocking(true)?;
    Ok((name, UnixListener::from_std(listener)?))
}

impl Drop for EmbeddedSidecar {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
