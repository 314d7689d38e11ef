//! A sidecar served inside the backend's own process, on a loopback port:
//! what `tether demo` and the Python package's `embedded` default start.

use crate::auth::TcpAccess;
use crate::config::SidecarConfig;
use crate::server::{Sidecar, SidecarError};
use std::net::SocketAddr;
use tokio::net::TcpListener;
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
    /// The task serving the sidecar panicked or was aborted.
    #[error("the embedded sidecar's server task ended abnormally: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// A sidecar serving on `127.0.0.1:<ephemeral>`; dropping it stops it.
#[derive(Debug)]
pub struct EmbeddedSidecar {
    /// The sidecar (for its counters).
    pub sidecar: Sidecar,
    /// The address it serves on.
    pub address: SocketAddr,
    stop: CancellationToken,
    server: Option<JoinHandle<Result<(), SidecarError>>>,
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
    /// # Errors
    /// [`EmbeddedError::Sidecar`] if the sidecar cannot be built,
    /// [`EmbeddedError::Bind`] if the port cannot be bound.
    pub async fn start(mut config: SidecarConfig) -> Result<EmbeddedSidecar, EmbeddedError> {
        let tcp = &mut config.access.tcp;
        if tcp.token.is_none() && tcp.tls.is_none() {
            *tcp = TcpAccess::insecure_loopback();
        }
        let sidecar = Sidecar::new(config)?;
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(EmbeddedError::Bind)?;
        let address = listener.local_addr().map_err(EmbeddedError::Bind)?;
        let stop = CancellationToken::new();
        let server = {
            let (sidecar, stop) = (sidecar.clone(), stop.clone());
            tokio::spawn(async move { sidecar.serve_tcp(listener, stop.cancelled_owned()).await })
        };
        Ok(EmbeddedSidecar { sidecar, address, stop, server: Some(server) })
    }

    /// The address a client connects to (`SidecarClient::connect` in
    /// `tether-backend`): `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Stops serving, ends every run, and waits for the server to finish.
    ///
    /// # Errors
    /// If the server failed or its task ended abnormally.
    pub async fn stop(mut self) -> Result<(), EmbeddedError> {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            server.await??;
        }
        Ok(())
    }
}

impl Drop for EmbeddedSidecar {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
