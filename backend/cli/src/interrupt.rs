//! Ctrl-C and SIGTERM in the commands that run one turn (`run`, `demo`,
//! `ask`): the turn is cancelled rather than the process killed, so every
//! call of it — the `run_script` call with its code included — reaches the
//! audit log, temporary files are removed, and the command exits
//! [`EXIT_CODE`].

/// The exit status of a command ended by Ctrl-C or SIGTERM (128 + SIGINT's 2,
/// as shells report it).
pub const EXIT_CODE: i32 = 130;

/// The command was ended by a signal; its turn was cancelled and recorded.
#[derive(Debug, thiserror::Error)]
#[error("cancelled by {signal}: the turn's calls are in the audit log ({hint})")]
pub struct Interrupted {
    /// `Ctrl-C` or `SIGTERM`.
    pub signal: &'static str,
    /// How to read the turn back.
    pub hint: String,
}

/// Resolves with the signal's name at the first Ctrl-C (SIGINT) or SIGTERM.
/// Without a SIGTERM handler (it could not be installed), Ctrl-C only.
pub async fn signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let ctrl_c = async {
        // An error here means no handler: then only SIGTERM can end the wait.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => tokio::select! {
            () = ctrl_c => "Ctrl-C",
            _ = terminate.recv() => "SIGTERM",
        },
        Err(error) => {
            tracing::warn!(%error, "cannot handle SIGTERM; only Ctrl-C cancels the turn");
            ctrl_c.await;
            "Ctrl-C"
        }
    }
}
