//! Who may open runs: the one gate in front of every run listener.
//!
//! - Unix socket: the peer's uid and primary gid, read by the kernel
//!   (`SO_PEERCRED`, which tonic puts in each request as [`UdsConnectInfo`]),
//!   must be in [`PeerPolicy`]. Default: the sidecar's own uid only — root is
//!   NOT implicitly allowed.
//! - TCP: a bearer token ([`BearerToken`], `authorization: Bearer …`, compared
//!   in constant time), and/or mTLS ([`MutualTls`]: the client certificate is
//!   required and checked against the CA during the TLS handshake, before any
//!   request). With neither, TCP is served only on a loopback address and only
//!   when [`TcpAccess::insecure_loopback`] says so; otherwise
//!   [`TcpAccess::check`] refuses to start.
//!
//! Every refusal is the same `UNAUTHENTICATED` status
//! ([`RejectRun::Unauthenticated`]), counted in `runs_refused_total{reason="unauthenticated"}`
//! and logged at warn with its cause and the peer's address, which only the
//! sidecar's log sees. The log lines are rate-limited per cause
//! (`log_limit`): a peer sending refused requests as fast as it can gets ten
//! lines a cause every 10 s and a counted summary, not one line each.
//! A TLS handshake without a trusted client certificate fails before gRPC, so
//! the client sees a transport error, and it is not counted.

use crate::error::RejectRun;
use crate::log_limit::{Level, LogLimit};
use crate::metrics::Metrics;
use sha2::{Digest, Sha256};
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tonic::service::Interceptor;
use tonic::transport::server::UdsConnectInfo;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// Why the sidecar cannot serve with the access it was given.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// TCP with neither a token nor mTLS, and no explicit insecure loopback.
    #[error(
        "refusing to serve runs on TCP `{0}` without authentication: give a bearer token (`--token-file PATH` or `TETHER_TOKEN`), \
         or mTLS (`--tls-cert`, `--tls-key`, `--tls-client-ca`), or serve on a Unix socket only (`--socket PATH`, without `--listen`); \
         on a loopback address `--insecure-loopback` lets every local process in"
    )]
    Unauthenticated(SocketAddr),
    /// `--insecure-loopback` on an address other machines can reach.
    #[error("`--insecure-loopback` is only for loopback addresses, and `{0}` is not one: use a token or mTLS")]
    NotLoopback(SocketAddr),
    /// The token is empty or cannot be sent as an HTTP header value.
    #[error("the bearer token {0}")]
    BadToken(&'static str),
    /// A token, certificate or key file cannot be read.
    #[error("cannot read `{path}`: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The Unix socket peers that may open runs: a peer whose uid is in `uids`
/// or whose primary gid is in `gids` (supplementary groups are not seen by
/// `SO_PEERCRED`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerPolicy {
    /// Allowed peer uids. Default: the sidecar's own uid.
    pub uids: Vec<u32>,
    /// Allowed peer primary gids. Default: none.
    pub gids: Vec<u32>,
}

impl Default for PeerPolicy {
    fn default() -> Self {
        PeerPolicy { uids: vec![nix::unistd::Uid::current().as_raw()], gids: Vec::new() }
    }
}

impl PeerPolicy {
    fn allows(&self, uid: u32, gid: u32) -> bool {
        self.uids.contains(&uid) || self.gids.contains(&gid)
    }
}

/// A shared secret a TCP client sends as `authorization: Bearer <token>`.
/// Its `Debug` never shows it.
#[derive(Clone)]
pub struct BearerToken {
    /// SHA-256 of the token: comparing digests in constant time hides the
    /// token's length as well as its bytes.
    digest: [u8; 32],
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

impl BearerToken {
    /// A token from its text (surrounding whitespace, e.g. a file's final
    /// newline, is dropped).
    ///
    /// # Errors
    /// If it is empty or has characters an HTTP header value cannot carry.
    pub fn new(token: &str) -> Result<BearerToken, AccessError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(AccessError::BadToken("is empty"));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AccessError::BadToken("must be printable ASCII without spaces"));
        }
        Ok(BearerToken { digest: Sha256::digest(token.as_bytes()).into() })
    }

    /// The token in the file at `path`.
    ///
    /// # Errors
    /// If the file cannot be read or holds no valid token.
    pub fn from_file(path: &Path) -> Result<BearerToken, AccessError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| AccessError::Read { path: path.display().to_string(), source })?;
        BearerToken::new(&text)
    }

    /// True when `presented` is the token, compared in constant time (also
    /// `tether mcp --listen`'s check of its clients).
    pub fn matches(&self, presented: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        self.digest.ct_eq(&digest).into()
    }
}

/// mTLS for a TCP listener: the sidecar's certificate and key, and the CA
/// every client certificate must chain to (a client without one is refused
/// during the handshake). All PEM.
#[derive(Clone)]
pub struct MutualTls {
    /// The sidecar's certificate chain.
    pub cert_pem: Vec<u8>,
    /// The sidecar's private key.
    pub key_pem: Vec<u8>,
    /// The CA that signs client certificates.
    pub client_ca_pem: Vec<u8>,
}

impl fmt::Debug for MutualTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MutualTls { key: <redacted>, .. }")
    }
}

impl MutualTls {
    /// Reads the three PEM files.
    ///
    /// # Errors
    /// If one cannot be read.
    pub fn from_files(cert: &Path, key: &Path, client_ca: &Path) -> Result<MutualTls, AccessError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| AccessError::Read { path: path.display().to_string(), source })
        };
        Ok(MutualTls { cert_pem: read(cert)?, key_pem: read(key)?, client_ca_pem: read(client_ca)? })
    }

    pub(crate) fn server_config(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
            .client_ca_root(Certificate::from_pem(&self.client_ca_pem))
            .client_auth_optional(false)
    }
}

/// How TCP clients prove they may open runs. The default has nothing, so a
/// TCP listener is refused until one is chosen.
#[derive(Debug, Clone, Default)]
pub struct TcpAccess {
    /// Clients must send this token. Default: none.
    pub token: Option<BearerToken>,
    /// Clients must present a certificate signed by this CA. Default: none.
    pub tls: Option<MutualTls>,
    /// With neither: serve anyway, but only on a loopback address, where
    /// every local process (any user) may open runs. Default: false.
    pub insecure_loopback: bool,
}

impl TcpAccess {
    /// Every local process may open runs on a loopback listener (tests and
    /// single-user machines).
    pub fn insecure_loopback() -> TcpAccess {
        TcpAccess { insecure_loopback: true, ..TcpAccess::default() }
    }

    /// Checks that a listener on `address` may be served with this access.
    ///
    /// # Errors
    /// [`AccessError::Unauthenticated`] with neither token, mTLS nor an
    /// insecure loopback; [`AccessError::NotLoopback`] for an insecure
    /// listener on a non-loopback address.
    pub fn check(&self, address: SocketAddr) -> Result<(), AccessError> {
        if self.token.is_some() || self.tls.is_some() {
            return Ok(());
        }
        if !self.insecure_loopback {
            return Err(AccessError::Unauthenticated(address));
        }
        if !address.ip().is_loopback() {
            return Err(AccessError::NotLoopback(address));
        }
        Ok(())
    }
}

/// Who may open runs on the sidecar's listeners.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Unix socket peers. Default: the sidecar's own uid.
    pub unix: PeerPolicy,
    /// TCP clients. Default: none (a TCP listener is refused).
    pub tcp: TcpAccess,
}

/// The log line of a refused client, rate-limited per cause.
static REFUSED: LogLimit = LogLimit::new("refused a client that may not open runs", Level::Warn);

/// Why a request may not pass: a fixed cause (the rate limit's key) and the
/// detail, both for the log only.
#[derive(Debug)]
struct Refusal {
    cause: &'static str,
    detail: String,
}

impl Refusal {
    fn new(cause: &'static str, detail: impl Into<String>) -> Refusal {
        Refusal { cause, detail: detail.into() }
    }
}

/// The check a listener's gate makes on every request.
#[derive(Debug)]
enum Rule {
    /// Unix socket: the peer's credentials.
    Peer(PeerPolicy),
    /// TCP: the bearer token.
    Token(BearerToken),
    /// TCP with mTLS only (checked in the handshake) or an insecure loopback.
    Open,
}

/// The interceptor in front of every service of one run listener.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    rule: Arc<Rule>,
    metrics: Arc<Metrics>,
}

impl Gate {
    /// The gate of a Unix socket listener.
    pub(crate) fn unix(policy: &PeerPolicy, metrics: Arc<Metrics>) -> Gate {
        Gate { rule: Arc::new(Rule::Peer(policy.clone())), metrics }
    }

    /// The gate of a TCP listener (its TLS, if any, is set on the server).
    pub(crate) fn tcp(access: &TcpAccess, metrics: Arc<Metrics>) -> Gate {
        let rule = access.token.clone().map_or(Rule::Open, Rule::Token);
        Gate { rule: Arc::new(rule), metrics }
    }

    /// `Err` when the request may not pass.
    fn judge(&self, request: &tonic::Request<()>) -> Result<(), Refusal> {
        match &*self.rule {
            Rule::Open => Ok(()),
            Rule::Peer(policy) => {
                let cred = request.extensions().get::<UdsConnectInfo>().and_then(|info| info.peer_cred);
                let Some(cred) = cred else {
                    return Err(Refusal::new("unknown_peer", "the Unix socket peer's credentials are unknown"));
                };
                if policy.allows(cred.uid(), cred.gid()) {
                    Ok(())
                } else {
                    Err(Refusal::new(
                        "peer_not_allowed",
                        format!(
                            "Unix socket peer uid `{}` gid `{}` is not allowed (--allow-uid, --allow-gid)",
                            cred.uid(),
                            cred.gid()
                        ),
                    ))
                }
            }
            Rule::Token(token) => {
                let Some(header) = request.metadata().get("authorization") else {
                    return Err(Refusal::new("no_token", "no `authorization` metadata"));
                };
                let presented = header.as_bytes();
                let Some(presented) = presented
                    .get(..7)
                    .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
                    .map(|_| &presented[7..])
                else {
                    return Err(Refusal::new("not_bearer", "`authorization` is not `Bearer <token>`"));
                };
                if token.matches(presented) { Ok(()) } else { Err(Refusal::new("wrong_token", "wrong bearer token")) }
            }
        }
    }
}

/// The peer of `request` for the log: its address on TCP, its uid and pid
/// on a Unix socket, else `unknown`.
fn peer(request: &tonic::Request<()>) -> String {
    if let Some(address) = request.remote_addr() {
        return address.to_string();
    }
    match request.extensions().get::<UdsConnectInfo>().and_then(|info| info.peer_cred) {
        Some(cred) => match cred.pid() {
            Some(pid) => format!("unix uid {} pid {pid}", cred.uid()),
            None => format!("unix uid {}", cred.uid()),
        },
        None => "unknown".to_owned(),
    }
}

impl Interceptor for Gate {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        match self.judge(&request) {
            Ok(()) => Ok(request),
            Err(Refusal { cause, detail }) => {
                let reject = RejectRun::Unauthenticated;
                self.metrics.run_refused(reject.metric_reason());
                if REFUSED.admit(cause) {
                    tracing::warn!(cause, %detail, peer = %peer(&request), "{}", REFUSED.what());
                }
                Err(reject.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_only_itself() {
        let token = BearerToken::new("s3cret\n").unwrap();
        assert!(token.matches(b"s3cret"));
        assert!(!token.matches(b"s3cre"));
        assert!(!token.matches(b"s3cret2"));
        assert!(!token.matches(b""));
        assert!(BearerToken::new(" \n").is_err());
        assert!(BearerToken::new("two words").is_err());
        assert_eq!(format!("{token:?}"), "BearerToken(<redacted>)");
    }

    #[test]
    fn tcp_needs_a_credential_or_an_explicit_loopback() {
        let loopback: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:1".parse().unwrap();
        assert!(matches!(TcpAccess::default().check(loopback), Err(AccessError::Unauthenticated(_))));
        assert!(TcpAccess::insecure_loopback().check(loopback).is_ok());
        assert!(TcpAccess::insecure_loopback().check("[::1]:1".parse().unwrap()).is_ok());
        assert!(matches!(TcpAccess::insecure_loopback().check(any), Err(AccessError::NotLoopback(_))));
        let with_token = TcpAccess { token: Some(BearerToken::new("t").unwrap()), ..TcpAccess::default() };
        assert!(with_token.check(any).is_ok());
    }

    #[test]
    fn root_is_not_implicitly_allowed() {
        let policy = PeerPolicy { uids: vec![1000], gids: vec![50] };
        assert!(policy.allows(1000, 1));
        assert!(policy.allows(7, 50));
        assert!(!policy.allows(0, 0));
    }
}
