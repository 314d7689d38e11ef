//! Kind `command`: an argv the BACKEND runs for each call, in its own process
//! group, with the call's arguments as JSON on stdin and its result as JSON
//! on stdout.
//!
//! ```toml
//! [[tools]]
//! name = "word_count"
//! kind = "command"
//! description = "Counts the words of a text: {\"words\": n}."
//! command = ["python3", "tools/word_count.py"]   # relative to this file's folder when run
//! cwd = "."                                       # default: this file's folder
//! env = { LANG = "C.UTF-8" }                      # added to the backend's environment
//! timeout = "10s"                                 # the process group is killed past it
//! max_output_bytes = 1048576                      # default 4 MiB of stdout
//! ```
//!
//! Exit 0 with JSON on stdout gives that JSON (empty stdout: `null`); a
//! nonzero exit a `tool_failed` value with the exit status and the end of
//! stderr. When the call ends early (time limit, turn cancelled) the whole
//! process group is killed.

use super::error::ConfigError;
use super::http::DEFAULT_MAX_OUTPUT_BYTES;
use super::read::At;
use super::text::Tail;
use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop, ProcessGroup};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use tether_codes::Reason;
use tether_turn::{ToolContext, ToolError, ToolExecutor, ToolOutput};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The kind's own keys.
pub(crate) const KEYS: [&str; 4] = ["command", "cwd", "env", "max_output_bytes"];

/// How much of stderr a failure value quotes (its end).
pub(crate) const STDERR_TAIL_BYTES: usize = 2048;

#[derive(Debug, Deserialize)]
struct Raw {
    command: Option<Vec<String>>,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    max_output_bytes: Option<u64>,
}

/// A process to start: argv, folder, environment added. Shared with MCP
/// servers over stdio.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Argv {
    pub(crate) argv: Vec<String>,
    pub(crate) cwd: PathBuf,
    pub(crate) env: BTreeMap<String, String>,
}

impl Argv {
    /// Reads `command`, `cwd` and `env` of `at`'s entry.
    pub(crate) fn read(
        at: &At<'_>,
        command: Option<Vec<String>>,
        cwd: Option<String>,
        env: BTreeMap<String, String>,
    ) -> Result<Argv, ConfigError> {
        let argv = match command {
            Some(argv) if !argv.is_empty() && !argv[0].is_empty() => {
                argv.iter().map(|a| at.expand("command", a)).collect::<Result<Vec<_>, _>>()?
            }
            _ => {
                return Err(at.error("command", "is missing or empty").fix(
                    "write the program and its arguments as a list, e.g. `command = [\"python3\", \"tool.py\"]`",
                ));
            }
        };
        let cwd = match cwd {
            Some(dir) => at.path("cwd", &dir)?,
            None => at.path("cwd", ".")?,
        };
        let env = env
            .into_iter()
            .map(|(k, v)| Ok((k.clone(), at.expand(&format!("env.{k}"), &v)?)))
            .collect::<Result<_, ConfigError>>()?;
        Ok(Argv { argv, cwd, env })
    }

    /// The program, for messages: ``the command `python3` ``.
    pub(crate) fn describe(&self) -> String {
        format!("the command `{}`", self.argv[0])
    }

    /// The command, ready to spawn in a process group of its own (so ending
    /// it ends every process it started), stdin and stdout piped, stderr
    /// piped for its tail.
    pub(crate) fn command(&self) -> CommandWrap {
        let mut command = tokio::process::Command::new(&self.argv[0]);
        command
            .args(&self.argv[1..])
            .current_dir(&self.cwd)
            .envs(&self.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut wrapped = CommandWrap::from(command);
        // The group, for ending everything it started; kill-on-drop, so the
        // leader ends even if the runtime shuts down before a clean close.
        wrapped.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
        wrapped
    }
}

/// A `command` tool's keys, checked.
#[derive(Debug, Clone)]
pub(crate) struct CommandConfig {
    argv: Argv,
    max_output_bytes: u64,
}

impl CommandConfig {
    pub(crate) fn read(at: &At<'_>, table: &toml::Table) -> Result<CommandConfig, ConfigError> {
        let raw: Raw = at.read(table, &KEYS)?;
        let argv = Argv::read(at, raw.command, raw.cwd, raw.env)?;
        Ok(CommandConfig { argv, max_output_bytes: raw.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES) })
    }

    /// Any JSON object (the command checks its own input).
    pub(crate) fn default_input_schema(&self) -> Value {
        serde_json::json!({"type": "object"})
    }

    /// A command may have effects.
    pub(crate) fn read_only_default(&self) -> bool {
        false
    }

    pub(crate) fn executor(&self, tool: &str) -> Arc<dyn ToolExecutor> {
        Arc::new(CommandTool { tool: tool.to_owned(), config: self.clone() })
    }
}

struct CommandTool {
    tool: String,
    config: CommandConfig,
}

/// Kills the process group when dropped before the process was reaped: a
/// call ended early (time limit, cancellation) leaves nothing running.
/// Hand-written: process-wrap's `KillOnDrop` kills the leader only.
struct GroupGuard(Option<Box<dyn ChildWrapper>>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take()
            && let Err(error) = child.start_kill()
        {
            tracing::debug!(%error, "cannot kill the command's process group (it may have ended)");
        }
    }
}

/// Reads `stream` to its end, failing past `limit` bytes.
async fn read_capped(stream: Option<impl AsyncRead + Unpin>, limit: u64) -> Result<Vec<u8>, std::io::Error> {
    let mut out = Vec::new();
    if let Some(stream) = stream {
        stream.take(limit + 1).read_to_end(&mut out).await?;
    }
    Ok(out)
}

/// Reads `stream` to its end, keeping its tail.
pub(crate) async fn read_tail(stream: Option<impl AsyncRead + Unpin>, keep: usize) -> Tail {
    let mut tail = Tail::new(keep);
    if let Some(mut stream) = stream {
        let mut buffer = [0u8; 4096];
        while let Ok(n) = stream.read(&mut buffer).await
            && n > 0
        {
            tail.push(&buffer[..n]);
        }
    }
    tail
}

#[async_trait::async_trait]
impl ToolExecutor for CommandTool {
    async fn execute(&self, _context: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let argv = &self.config.argv;
        let child = argv.command().spawn().map_err(|e| {
            ToolError::around(&Reason::ProviderUnavailable {
                tool: self.tool.clone(),
                provider: argv.describe(),
                error: e.to_string(),
            })
        })?;
        let mut guard = GroupGuard(Some(child));
        let Some(child) = guard.0.as_mut() else { unreachable!("the guard holds the child until it is reaped") };
        let (stdin, stdout, stderr) = (child.stdin().take(), child.stdout().take(), child.stderr().take());
        let input = args.to_string();
        let write = async move {
            if let Some(mut stdin) = stdin {
                // A command that does not read its input may exit first: not an error.
                let _ = stdin.write_all(input.as_bytes()).await;
            }
        };
        let limit = self.config.max_output_bytes;
        let ((), stdout, stderr) =
            tokio::join!(write, read_capped(stdout, limit), read_tail(stderr, STDERR_TAIL_BYTES));
        let stdout = match stdout {
            Ok(out) if out.len() as u64 > limit => {
                return Err(ToolError::around(&Reason::OutputTooLarge { tool: self.tool.clone(), limit }));
            }
            Ok(out) => out,
            Err(e) => {
                return Err(ToolError::around(&Reason::ProviderLost {
                    tool: self.tool.clone(),
                    provider: argv.describe(),
                    detail: format!("its output could not be read: {e}"),
                }));
            }
        };
        let status = match child.wait().await {
            Ok(status) => status,
            Err(e) => {
                return Err(ToolError::around(&Reason::ProviderLost {
                    tool: self.tool.clone(),
                    provider: argv.describe(),
                    detail: format!("it could not be waited for: {e}"),
                }));
            }
        };
        guard.0 = None;
        if !status.success() {
            let how = describe_exit(status);
            let stderr = stderr.text();
            let detail = if stderr.is_empty() { how } else { format!("{how}; stderr ends: {stderr}") };
            return Err(ToolError::reported(&Reason::ToolReported { tool: self.tool.clone(), detail }));
        }
        if stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(ToolOutput::new(Value::Null));
        }
        serde_json::from_slice(&stdout).map(ToolOutput::new).map_err(|e| {
            let shown = super::text::head(String::from_utf8_lossy(&stdout).trim(), 200);
            ToolError::around(&Reason::InvalidResult {
                tool: self.tool.clone(),
                problem: format!("its output is not JSON ({e}): {shown}"),
            })
        })
    }
}

/// How a process ended, as a failure message says it.
pub(crate) fn describe_exit(status: std::process::ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => format!("was ended by a signal ({status})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vars::Vars;
    use std::path::Path;

    #[test]
    fn the_command_is_required_and_runs_from_the_files_folder() {
        let vars = Vars::from_env();
        let at = At { file: Path::new("/srv/conf/tether.toml"), key: "tools[0]".into(), vars: &vars };
        let config = CommandConfig::read(&at, &"command = [\"./wc\", \"-w\"]".parse().unwrap()).unwrap();
        assert_eq!(config.argv.cwd, Path::new("/srv/conf/."));
        let error = CommandConfig::read(&at, &"command = []".parse().unwrap()).unwrap_err().to_string();
        assert!(error.contains("`tools[0].command`: is missing or empty; write the program"), "{error}");
    }
}
