//! Where scripts run: a sidecar at an address (`unix:/path`, `http://host:port`)
//! or `embedded` — one sidecar per process, started in it on first use
//! (the sidecar crate's [`EmbeddedSidecar`], the one `tether demo` starts)
//! and kept for the process's lifetime.

use tether_client::{ClientAuth, ClientError, ConnectOptions, SidecarClient};
use tether_sidecar::{EmbeddedError, EmbeddedSidecar, SidecarConfig};
use tokio::sync::OnceCell;

/// The name that asks for the embedded sidecar.
pub(crate) const EMBEDDED: &str = "embedded";

static SIDECAR: OnceCell<EmbeddedSidecar> = OnceCell::const_new();

/// Why no sidecar could be reached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WhereError {
    /// The address is none of the forms a sidecar is reached by.
    #[error("`{0}` is not a sidecar address; use \"embedded\", \"unix:/path/to/socket\" or \"http://host:port\"")]
    Address(String),
    /// The embedded sidecar could not start.
    #[error("the embedded sidecar could not start: {0}")]
    Embedded(#[from] EmbeddedError),
    /// The sidecar at the address could not be reached.
    #[error(
        "cannot reach the sidecar at `{address}`: {error}; start one (`tether-sidecar --socket PATH`) or use sidecar=\"embedded\""
    )]
    Connect {
        /// The address given.
        address: String,
        /// Why.
        error: ClientError,
    },
}

/// The process's embedded sidecar, started (on the package's runtime) the
/// first time it is asked for.
///
/// # Errors
/// [`WhereError::Embedded`] when it cannot start; a later call tries again.
pub(crate) async fn embedded() -> Result<&'static EmbeddedSidecar, WhereError> {
    Ok(SIDECAR.get_or_try_init(|| EmbeddedSidecar::start(SidecarConfig::default())).await?)
}

/// The embedded sidecar, if it was started.
pub(crate) fn embedded_if_started() -> Option<&'static EmbeddedSidecar> {
    SIDECAR.get()
}

/// A client for the sidecar `address` names (or the embedded one), with the
/// bearer `token` a TCP sidecar may ask for.
///
/// # Errors
/// [`WhereError`] when the sidecar cannot be started or reached.
pub(crate) async fn connect(address: &str, token: Option<String>) -> Result<SidecarClient, WhereError> {
    let address = match address {
        EMBEDDED => embedded().await?.local_url(),
        _ if ["unix:", "unix-abstract:", "http://", "https://"].iter().any(|form| address.starts_with(form)) => {
            address.to_owned()
        }
        _ => return Err(WhereError::Address(address.to_owned())),
    };
    let options = ConnectOptions { auth: ClientAuth { token, tls: None }, ..ConnectOptions::default() };
    SidecarClient::connect_with(&address, &options).await.map_err(|error| WhereError::Connect { address, error })
}
