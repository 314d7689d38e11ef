//! Errors of the sidecar client.

/// Why a run could not be carried out. A script that fails is NOT an error
/// here: it is a [`RunOutcome`](crate::RunOutcome) with a script-error status.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The sidecar address is not valid.
    #[error("invalid sidecar address `{address}`: {reason}")]
    Address {
        /// The address given.
        address: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The credentials for the sidecar cannot be used (a token that is not a
    /// valid header value, TLS over a plain `http://` address).
    #[error("cannot use the sidecar credentials: {0}")]
    Credentials(String),
    /// The connection to the sidecar failed. The message is the whole
    /// cause on one line (tonic's errors nest their causes; each is said once).
    #[error("cannot reach the sidecar at `{address}`: {}", causes(cause))]
    Connect {
        /// The address dialled.
        address: String,
        /// Why: said in the message, so not also a `source` (a chain
        /// printer would say it twice).
        cause: tonic::transport::Error,
    },
    /// The sidecar refused the run or the stream failed.
    #[error("the sidecar failed the run: {} ({:?})", .0.message(), .0.code())]
    Status(#[from] tonic::Status),
    /// The sidecar broke the protocol (e.g. a message with no content).
    #[error("the sidecar broke the protocol: {0}")]
    Protocol(String),
    /// The sidecar did not report SERVING in time
    /// ([`SidecarClient::wait_ready`](crate::SidecarClient::wait_ready)).
    #[error(
        "the sidecar was not ready after {waited:?} (last: {last}); check its logs, or wait longer on a cold compile"
    )]
    NotReady {
        /// How long the client waited.
        waited: std::time::Duration,
        /// What the health check said last.
        last: String,
    },
    /// The run's stream broke after the sidecar accepted the run: the sidecar
    /// crashed, the connection dropped, or HTTP/2 keepalive found it stalled.
    /// The script stopped without `Finished`, and calls it had started may
    /// have run (their records are the caller's, e.g. the turn's ledger).
    #[error("the sidecar went away mid-run: {reason}")]
    Lost {
        /// What the transport said, e.g. the stream's status.
        reason: String,
    },
}

/// `error` and its causes, each said once, joined with `: `.
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut said: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(cause) = next {
        let text = cause.to_string();
        if said.last() != Some(&text) {
            said.push(text);
        }
        next = cause.source();
    }
    said.join(": ")
}
