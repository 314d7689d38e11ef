//! A sidecar served inside this process on a loopback port.

use std::net::SocketAddr;
use tether_sidecar::{Sidecar, SidecarConfig, SidecarError, TcpAccess};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

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
    /// Builds a sidecar from `config` and serves it on a fresh loopback port.
    /// The listener is bound before this returns, so clients may connect at once.
    ///
    /// Unless `config.access.tcp` sets a token or mTLS, the port is an
    /// insecure loopback: any local process may open runs on it while it
    /// lives (it serves this process's own turns; docs/security.md).
    ///
    /// # Errors
    /// If the sidecar cannot be built or the port cannot be bound.
    pub async fn start(mut config: SidecarConfig) -> anyhow::Result<EmbeddedSidecar> {
        let tcp = &mut config.access.tcp;
        if tcp.token.is_none() && tcp.tls.is_none() {
            *tcp = TcpAccess::insecure_loopback();
        }
        let sidecar = Sidecar::new(config)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let stop = CancellationToken::new();
        let server = {
            let (sidecar, stop) = (sidecar.clone(), stop.clone());
            tokio::spawn(async move { sidecar.serve_tcp(listener, stop.cancelled_owned()).await })
        };
        Ok(EmbeddedSidecar { sidecar, address, stop, server: Some(server) })
    }

    /// The address for [`tether_backend::SidecarClient::connect`].
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Stops serving, ends every run, and waits for the server to finish.
    ///
    /// # Errors
    /// If the server failed.
    pub async fn stop(mut self) -> anyhow::Result<()> {
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
