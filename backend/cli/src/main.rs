//! `tether`: the demo, running your own script against configured tools, and
//! listing them.
//!
//! The script runs as the model's `run_script` call in a turn: every call it
//! makes is checked, approved and audited by that turn, on a sidecar embedded
//! in this process (or one you name with `--sidecar`). The tools come from a
//! `tether.toml` (`--config`), or are the demo world's: a SQLite database
//! this command creates and seeds, behind the tools of `examples/demo.toml`.

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use tether_backend::SidecarClient;
use tether_backend::tools::{Config, ToolSet, Vars};
use tether_backend::turn::{Approver, AuditStoreUrl, CallOrigin, CallRequest, PolicyApprover};
use tether_cli::demo::{self, DemoWorld};
use tether_cli::demo_db;
use tether_cli::embedded::EmbeddedSidecar;
use tether_cli::listing;
use tether_cli::terminal::TerminalApprover;
use tether_cli::turn::{PrintEvents, TurnSetup};
use tether_sidecar::SidecarConfig;
use tether_telemetry::TelemetryArgs;

#[derive(Debug, Parser)]
#[command(version, about = "Run LLM-written scripts whose tool calls come back to the turn")]
struct Cli {
    /// Use the sidecar at this address (`http://host:port` or `unix:/path`)
    /// instead of one embedded in this process.
    #[arg(long, global = true, env = "TETHER_SIDECAR")]
    sidecar: Option<String>,
    /// Who approves calls that need approval (the demo's `send_email`).
    #[arg(long, global = true, value_enum, default_value_t = Approval::Policy)]
    approval: Approval,
    /// Where the audit log and effect ledger go, as a URL: `sqlite:PATH` or a
    /// plain path (default: a SQLite file in the temp directory),
    /// `postgres://USER@HOST:PORT/DATABASE` (many backend replicas), or
    /// `memory:` (see docs/audit.md).
    #[arg(long, global = true, env = "TETHER_AUDIT_STORE", alias = "audit-db", value_name = "URL")]
    audit_store: Option<String>,
    /// Create the demo world's database here and keep it (default: a fresh
    /// file in the temp directory, removed afterwards). Configs read its path
    /// as `${TETHER_DEMO_DB}`.
    #[arg(long, global = true)]
    demo_db: Option<PathBuf>,
    #[command(flatten)]
    telemetry: TelemetryArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Approval {
    /// A headless policy approves every request.
    Policy,
    /// Ask on this terminal, showing the exact arguments.
    Ask,
    /// Deny every request.
    Deny,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Email the owners of last week's issues whose customer's contract has ended.
    Demo {
        /// Batch the contract look-ups with asyncio.gather.
        #[arg(long)]
        gather: bool,
    },
    /// Run a Python script file against the configured tools (default: the
    /// demo world's list_issues, get_contract, send_email).
    Run {
        /// The script.
        file: PathBuf,
        /// The script's `input`, as JSON (default: the demo's dates).
        #[arg(long)]
        input: Option<String>,
        /// The tools' configuration (see examples/tether.toml).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// List the configured tools with their metadata, and each MCP server's state.
    Tools {
        /// The tools' configuration (default: the demo world's).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// Where the tools come from: a config file, or the demo world's; either
/// way with the demo world's database as `${TETHER_DEMO_DB}` (unless the
/// environment names one).
struct Source {
    config: Config,
    /// True for the built-in demo config.
    demo: bool,
    /// The demo database this run created, and whether to remove it afterwards.
    demo_db: Option<(PathBuf, bool)>,
}

impl Source {
    fn load(config: Option<PathBuf>, demo_db: Option<PathBuf>) -> anyhow::Result<Source> {
        let (db, created) = match std::env::var_os(demo_db::DB_VAR) {
            Some(path) if demo_db.is_none() => (PathBuf::from(path), None),
            _ => {
                let (path, remove) = match demo_db {
                    Some(path) => (path, false),
                    None => (demo_db::default_path(), true),
                };
                demo_db::create(&path).context("cannot create the demo database")?;
                (path.clone(), Some((path, remove)))
            }
        };
        let (config, demo) = match config {
            Some(path) => {
                let vars = Vars::from_env().set(demo_db::DB_VAR, db.display().to_string());
                (Config::load(&path, &vars)?, false)
            }
            None => (demo_db::config(&db)?, true),
        };
        Ok(Source { config, demo, demo_db: created })
    }

    /// Prints the demo world's outbox (after the demo, or when the script
    /// wrote to it) and removes a temporary database.
    fn finish(self, report: bool) -> anyhow::Result<()> {
        let Some((path, remove)) = self.demo_db else { return Ok(()) };
        let outbox = demo_db::outbox(&path)?;
        if report && (self.demo || !outbox.is_empty()) {
            eprintln!("outbox (table `outbox` of {}): {} emails", path.display(), outbox.len());
            for email in outbox {
                eprintln!("  → {}: {}", email.to, email.subject);
            }
        }
        if remove {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let telemetry = cli.telemetry.config("tether-backend", "warn").init()?;
    let outcome = run(cli).await;
    // The turn's spans (and an embedded sidecar's) are sent before exiting.
    telemetry.shutdown().await;
    outcome
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let (source, script) = match cli.command {
        Command::Tools { config } => {
            let source = Source::load(config, cli.demo_db)?;
            let tools = ToolSet::start(&source.config).await?;
            print!("{}", listing::render(&source.config.path, &tools, &tools.servers().await));
            tools.shutdown().await;
            return source.finish(false);
        }
        Command::Demo { gather } => {
            let (script, name) =
                if gather { (demo::SCRIPT_GATHER, "examples/contracts_gather.py") } else { (demo::SCRIPT, "examples/contracts.py") };
            (Source::load(None, cli.demo_db)?, (script.to_owned(), DemoWorld::input(), name.to_owned()))
        }
        Command::Run { file, input, config } => {
            let source = std::fs::read_to_string(&file).with_context(|| format!("cannot read `{}`", file.display()))?;
            let input = match input {
                Some(json) => serde_json::from_str(&json).context("--input is not valid JSON")?,
                None => DemoWorld::input(),
            };
            (Source::load(config, cli.demo_db)?, (source, input, file.display().to_string()))
        }
    };
    let (code, input, label) = script;
    let tools = ToolSet::start(&source.config).await?;

    let embedded = match &cli.sidecar {
        Some(_) => None,
        None => Some(EmbeddedSidecar::start(SidecarConfig::default()).await.context("cannot start the embedded sidecar")?),
    };
    let address = match (&cli.sidecar, &embedded) {
        (Some(address), _) => address.clone(),
        (None, Some(embedded)) => embedded.url(),
        (None, None) => unreachable!("an embedded sidecar is started when none is named"),
    };
    // A sidecar named with `--sidecar` on TCP may ask for its token
    // (docs/security.md); a Unix socket checks this process's uid instead.
    let auth = tether_backend::ClientAuth { token: std::env::var("TETHER_TOKEN").ok().filter(|t| !t.is_empty()), tls: None };
    let client = SidecarClient::connect_with(&address, &tether_backend::ConnectOptions { auth, ..Default::default() }).await?;
    let approver: Arc<dyn Approver> = match cli.approval {
        Approval::Policy => Arc::new(PolicyApprover::approve_all()),
        Approval::Ask => Arc::new(TerminalApprover::new("tether")),
        Approval::Deny => Arc::new(PolicyApprover::deny_all()),
    };
    let audit_url = match cli.audit_store {
        Some(url) => AuditStoreUrl::parse(&url)?,
        None => AuditStoreUrl::Sqlite(std::env::temp_dir().join("tether-demo-audit.db")),
    };
    let audit = audit_url.open().await.with_context(|| format!("cannot open the audit store `{audit_url}`"))?;
    let turn_id = format!("demo-{}", std::process::id());
    let setup = TurnSetup { approver, audit, events: Arc::new(PrintEvents) };
    let turn = setup.build(&turn_id, &tools, client)?;

    eprintln!(
        "running {label} as the model's run_script call, on the sidecar at {address}, with the {} tools of {}",
        tools.tools().len(),
        source.config.path.display()
    );
    let request = CallRequest::new("call_1", "run_script", json!({"code": code, "input": input}));
    let result = turn.execute(request, CallOrigin::Model).await;
    let audit_rows = turn.audit_log().await?.len();
    let possibly = turn.possibly_executed_approval_actions().await?;
    eprintln!(
        "audit log: {audit_rows} rows for turn {turn_id} in {audit_url}; approval-required actions that ran: {}",
        possibly.len()
    );
    tools.shutdown().await;
    if let Some(embedded) = embedded {
        embedded.stop().await?;
    }
    source.finish(true)?;
    let shown = result.to_model_value();
    println!("{}", serde_json::to_string_pretty(&shown)?);
    match shown.get("ok") {
        Some(Value::Bool(true)) => Ok(()),
        _ => anyhow::bail!("the script did not complete"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_telemetry::LogFormat;

    #[test]
    fn logging_flags_go_before_or_after_the_command() {
        let before = ["tether", "--log-format", "json", "--otlp-endpoint", "http://collector:4317", "run", "s.py"];
        let after = ["tether", "run", "s.py", "--log-format", "json", "--otlp-endpoint", "http://collector:4317"];
        for argv in [before, after] {
            let cli = Cli::try_parse_from(argv).unwrap();
            assert_eq!(cli.telemetry.log_format, LogFormat::Json, "{argv:?}");
            assert_eq!(cli.telemetry.otlp_endpoint.as_deref(), Some("http://collector:4317"), "{argv:?}");
        }
        let wrong = Cli::try_parse_from(["tether", "--log-format", "xml", "demo"]).unwrap_err().to_string();
        assert!(wrong.contains("text") && wrong.contains("json"), "{wrong}");
    }
}
