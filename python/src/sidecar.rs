//! Where scripts run: a sidecar at an address (`unix:/path`, `http://host:port`)
//! or `embedded` — one sidecar per process, started in it on first use
//! (the sidecar crate's [`EmbeddedSidecar`], the one `tether demo` starts)
//! and kept for the process's lifetime.
//!
//! The embedded sidecar seals parked runs with a key fixed when it starts:
//! one kept in a file ([`ParkKey::load_or_make`], the `tether` CLI's too)
//! when the first turn that starts it may hand runs to the audit store
//! (`approver=tether.LATER`, `tether.answer`) or a key file is named
//! (`park_key_file=`, `$TETHER_PARK_KEY_FILE`), so another process with the
//! same file resumes what this one parked; else one made at random, and a
//! later turn that needs the file is refused rather than given runs no
//! other process could resume.

use crate::error;
use pyo3::PyErr;
use std::path::{Path, PathBuf};
use tether_client::{ClientAuth, ClientError, ConnectOptions, SidecarClient};
use tether_sidecar::{EmbeddedError, EmbeddedSidecar, ParkKey, ParkKeyFileError, SidecarConfig, default_park_key_file};
use tokio::sync::OnceCell;

/// The name that asks for the embedded sidecar.
pub(crate) const EMBEDDED: &str = "embedded";

/// The environment variable that names the embedded sidecar's key file.
pub(crate) const KEY_FILE_ENV: &str = "TETHER_PARK_KEY_FILE";

/// The process's embedded sidecar and the key file it seals with (`None`:
/// a key made at random).
struct Embedded {
    sidecar: EmbeddedSidecar,
    key_file: Option<PathBuf>,
}

static SIDECAR: OnceCell<Embedded> = OnceCell::const_new();

/// Why no sidecar could be reached, or not with the park key asked for.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WhereError {
    /// The address is none of the forms a sidecar is reached by.
    #[error("`{0}` is not a sidecar address; use \"embedded\", \"unix:/path/to/socket\" or \"http://host:port\"")]
    Address(String),
    /// The embedded sidecar could not start.
    #[error("the embedded sidecar could not start: {0}")]
    Embedded(#[from] EmbeddedError),
    /// The park key file could not be read or made.
    #[error("the embedded sidecar's park key: {0}")]
    KeyFile(#[from] ParkKeyFileError),
    /// The embedded sidecar seals with a random key, and durable runs need the file's.
    #[error(
        "the embedded sidecar of this process started with a park key made at random (a turn without \
         `approver=tether.LATER` started it first, and no key file was named), so a run it parks could \
         resume only in this process; the key is fixed when the sidecar starts: set `{KEY_FILE_ENV}` (or pass \
         `park_key_file=` to the first turn) before this process's first turn, or run scripts on a sidecar \
         process started with `--park-key-file` (`sidecar=\"unix:/path\"`)"
    )]
    RandomKey,
    /// The embedded sidecar seals with another file's key.
    #[error(
        "the embedded sidecar of this process seals parked runs with the key in `{}`, not `{}`: its key is \
         fixed when it starts (one sidecar per process); name the same file in every turn of a process, or \
         run scripts on a sidecar process of their own (`sidecar=\"unix:/path\"`)",
        started.display(), asked.display()
    )]
    OtherKey {
        /// The file the sidecar's key came from.
        started: PathBuf,
        /// The file asked for.
        asked: PathBuf,
    },
    /// A key file was named for a sidecar at an address, which has its own.
    #[error(
        "`park_key_file` is the embedded sidecar's key; the sidecar at `{0}` seals with its own \
         (`tether-sidecar --park-key-file`): drop `park_key_file`, or use sidecar=\"embedded\""
    )]
    KeyForAddress(String),
    /// The sidecar at the address could not be reached.
    /// (The client's error names the address.)
    #[error("{error}; start one (`tether-sidecar --socket PATH`) or use sidecar=\"embedded\"")]
    Connect {
        /// Why.
        error: ClientError,
    },
}

impl WhereError {
    /// The exception of its kind: a park key that cannot be had or does not
    /// fit is the caller's configuration (`ConfigError`); the rest, no
    /// sidecar (`SidecarUnavailable`).
    pub(crate) fn into_py(self) -> PyErr {
        match self {
            WhereError::KeyFile(_)
            | WhereError::RandomKey
            | WhereError::OtherKey { .. }
            | WhereError::KeyForAddress(_) => error::config(self),
            WhereError::Address(_) | WhereError::Embedded(_) | WhereError::Connect { .. } => error::sidecar(self),
        }
    }
}

/// How a turn's runs may park: what the embedded sidecar's key must be.
#[derive(Debug, Clone, Default)]
pub(crate) struct Parking {
    /// The key file named (`park_key_file=`).
    pub(crate) key_file: Option<PathBuf>,
    /// Runs may be handed to the audit store, for another process to resume.
    pub(crate) durable: bool,
}

impl Parking {
    /// The key file the embedded sidecar must seal with: the one named, else
    /// `$TETHER_PARK_KEY_FILE`, else the default file for durable runs; `None`
    /// when any key will do.
    fn wanted(&self) -> Option<PathBuf> {
        self.key_file
            .clone()
            .or_else(|| std::env::var_os(KEY_FILE_ENV).filter(|file| !file.is_empty()).map(PathBuf::from))
            .or_else(|| self.durable.then(default_park_key_file))
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b || matches!((std::fs::canonicalize(a), std::fs::canonicalize(b)), (Ok(a), Ok(b)) if a == b)
}

/// The process's embedded sidecar, started (on the package's runtime) the
/// first time it is asked for, with the key `parking` wants.
///
/// # Errors
/// [`WhereError::Embedded`] or [`WhereError::KeyFile`] when it cannot start
/// (a later call tries again); [`WhereError::RandomKey`] or
/// [`WhereError::OtherKey`] when it runs with a key other than the one
/// `parking` needs.
pub(crate) async fn embedded(parking: &Parking) -> Result<&'static EmbeddedSidecar, WhereError> {
    let wanted = parking.wanted();
    let started = SIDECAR
        .get_or_try_init(|| async {
            let mut config = SidecarConfig::default();
            if let Some(path) = &wanted {
                config.park.key = Some(ParkKey::load_or_make(path)?);
            }
            let sidecar = EmbeddedSidecar::start(config).await?;
            Ok::<_, WhereError>(Embedded { sidecar, key_file: wanted.clone() })
        })
        .await?;
    match (&started.key_file, wanted) {
        (_, None) => {}
        (None, Some(_)) => return Err(WhereError::RandomKey),
        (Some(started), Some(asked)) if !same_file(started, &asked) => {
            return Err(WhereError::OtherKey { started: started.clone(), asked });
        }
        (Some(_), Some(_)) => {}
    }
    Ok(&started.sidecar)
}

/// The embedded sidecar, if it was started.
pub(crate) fn embedded_if_started() -> Option<&'static EmbeddedSidecar> {
    SIDECAR.get().map(|started| &started.sidecar)
}

/// A client for the sidecar `address` names (or the embedded one, with the
/// key `parking` needs), with the bearer `token` a TCP sidecar may ask for.
///
/// # Errors
/// [`WhereError`] when the sidecar cannot be started or reached, or a key
/// file is named for a sidecar at an address.
pub(crate) async fn connect(
    address: &str,
    token: Option<String>,
    parking: &Parking,
) -> Result<SidecarClient, WhereError> {
    let address = match address {
        EMBEDDED => embedded(parking).await?.local_url(),
        _ if parking.key_file.is_some() => return Err(WhereError::KeyForAddress(address.to_owned())),
        _ if ["unix:", "unix-abstract:", "http://", "https://"].iter().any(|form| address.starts_with(form)) => {
            address.to_owned()
        }
        _ => return Err(WhereError::Address(address.to_owned())),
    };
    let options = ConnectOptions { auth: ClientAuth { token, tls: None }, ..ConnectOptions::default() };
    SidecarClient::connect_with(&address, &options).await.map_err(|error| WhereError::Connect { error })
}
