//! Why a tool configuration could not be loaded or its tools not started.
//! A tool that fails when CALLED is not an error here: it is a failure value
//! (see `tether_codes::Reason`).

use std::path::PathBuf;

/// A mistake in a configuration file: where it is, what is wrong, and what
/// to write instead. Shown to the person who wrote the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}{}", place(.file, .key), .problem, suffix(.fix))]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// The key the mistake is at, as a path (`mcp.files.command`,
    /// `tools[2].query`), or the line and column of a syntax error.
    pub key: String,
    /// What is wrong.
    pub problem: String,
    /// What to write instead, when there is one thing to say.
    pub fix: Option<String>,
}

fn place(file: &std::path::Path, key: &str) -> String {
    if key.is_empty() { format!("`{}`", file.display()) } else { format!("`{}`, `{key}`", file.display()) }
}

fn suffix(fix: &Option<String>) -> String {
    fix.as_deref().map(|f| format!("; {f}")).unwrap_or_default()
}

impl ConfigError {
    /// A mistake at `key` of `file`.
    pub fn new(file: impl Into<PathBuf>, key: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError { file: file.into(), key: key.into(), problem: problem.into(), fix: None }
    }

    /// Adds what to write instead.
    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// Why a [`ToolSet`](super::ToolSet) could not be built. A server that does
/// not start is NOT an error: its tools answer with failure values, and
/// [`ToolSet::servers`](super::ToolSet::servers) says why.
#[derive(Debug, thiserror::Error)]
pub enum ToolsError {
    /// The configuration is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The HTTP client (for `http` tools and streamable HTTP servers) could
    /// not be set up: the platform's TLS roots could not be read.
    #[error("{0}")]
    Client(String),
    /// A tool could not be made ready for a turn (its schema does not compile).
    #[error(transparent)]
    Turn(#[from] tether_turn::TurnError),
}
