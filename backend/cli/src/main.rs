//! `tether`: the demo, running your own script against configured tools,
//! talking to your own model over them, their typed stubs, listing them, and
//! reading the audit log back.
//!
//! Scripts run as the model's `run_script` call in a turn: every call they
//! make is checked, approved and audited by that turn, on a sidecar embedded
//! in this process (or one you name with `--sidecar`). The tools come from a
//! `tether.toml` (`--config`), or are the demo world's: a SQLite database
//! this command creates and seeds, behind the tools of `examples/demo.toml`.

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use tether_backend::SidecarClient;
use tether_backend::agent::{AgentsConfig, NestedTurnSetup, NoAgentEvents, PeerAgents};
use tether_backend::tools::{Config, ToolSet, Vars};
use tether_backend::turn::{Approver, AuditStoreUrl, CallOrigin, CallRequest, PolicyApprover, Tool, Turn};
use tether_cli::audit;
use tether_cli::chat::{self, LiveView, ModelChoice, Session};
use tether_cli::demo::{self, DemoWorld};
use tether_cli::demo_db;
use tether_cli::embedded::EmbeddedSidecar;
use tether_cli::listing;
use tether_cli::terminal::TerminalApprover;
use tether_cli::turn::{PrintEvents, TurnSetup, script_tool};
use tether_sidecar::SidecarConfig;
use tether_telemetry::TelemetryArgs;

#[derive(Debug, Parser)]
#[command(version, about = "Run LLM-written scripts whose tool calls come back to the turn")]
struct Cli {
    /// Use the sidecar at this address (`http://host:port` or `unix:/path`)
    /// instead of one embedded in this process.
    #[arg(long, global = true, env = "TETHER_SIDECAR")]
    sidecar: Option<String>,
    /// Who approves calls that need approval (default: `ask` for `chat`,
    /// `policy` otherwise).
    #[arg(long, global = true, value_enum)]
    approval: Option<Approval>,
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
    /// Talk to a model over the configured tools: each message is a turn in
    /// which the model calls tools, writes scripts and asks peer agents,
    /// every call checked, approved (on this terminal) and audited.
    Chat {
        /// The tools' and agents' configuration (see examples/tether.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        model: ModelChoice,
    },
    /// Ask a model one question over the configured tools; prints the answer,
    /// the calls and any approval-required action that ran, as JSON.
    Ask {
        /// The question.
        question: String,
        /// The tools' and agents' configuration (see examples/tether.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        model: ModelChoice,
    },
    /// Print the typed Python API a script sees for the configured tools
    /// (what the `run_script` tool's description embeds).
    Stubs {
        /// The tools' configuration (default: the demo world's).
        #[arg(long)]
        config: Option<PathBuf>,
        /// As the model of an agent of the config sees them (its agent tools included).
        #[arg(long)]
        agent: Option<String>,
    },
    /// List the configured tools with their metadata, and each MCP server's state.
    Tools {
        /// The tools' configuration (default: the demo world's).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Show a turn's audit rows and ledger from the audit store, nested calls
    /// indented under their parent.
    Audit {
        /// The turn (`chat`, `ask`, `run` and `demo` print it).
        #[arg(long)]
        turn: String,
        /// Only the calls of this script run.
        #[arg(long)]
        run: Option<String>,
        /// Only the calls that ended with this code (e.g. `approval_denied`).
        #[arg(long)]
        code: Option<String>,
        /// As JSON.
        #[arg(long)]
        json: bool,
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

/// Everything a command that runs turns needs: the tools, a sidecar, the
/// approver and the audit store. Ended with [`Backend::stop`].
struct Backend {
    source: Source,
    tools: Arc<ToolSet>,
    embedded: Option<EmbeddedSidecar>,
    address: String,
    /// `run_script` on the sidecar, shared by every turn.
    script: Tool,
    setup: TurnSetup,
    audit_url: AuditStoreUrl,
    /// The terminal prompt, when approvals are asked on it (chat reads its
    /// lines through it too).
    terminal: Option<Arc<TerminalApprover>>,
}

impl Backend {
    async fn start(cli: &Cli, source: Source, default_approval: Approval) -> anyhow::Result<Backend> {
        let tools = Arc::new(ToolSet::start(&source.config.tools).await?);
        let embedded = match &cli.sidecar {
            Some(_) => None,
            None => Some(
                EmbeddedSidecar::start(SidecarConfig::default()).await.context("cannot start the embedded sidecar")?,
            ),
        };
        let address = match (&cli.sidecar, &embedded) {
            (Some(address), _) => address.clone(),
            (None, Some(embedded)) => embedded.local_url(),
            (None, None) => unreachable!("an embedded sidecar is started when none is named"),
        };
        // A sidecar named with `--sidecar` on TCP may ask for its token
        // (docs/security.md); a Unix socket checks this process's uid instead.
        let auth = tether_backend::ClientAuth {
            token: std::env::var("TETHER_TOKEN").ok().filter(|t| !t.is_empty()),
            tls: None,
        };
        let client =
            SidecarClient::connect_with(&address, &tether_backend::ConnectOptions { auth, ..Default::default() })
                .await?;
        let mut terminal = None;
        let approver: Arc<dyn Approver> = match cli.approval.unwrap_or(default_approval) {
            Approval::Policy => Arc::new(PolicyApprover::approve_all()),
            Approval::Ask => terminal.insert(Arc::new(TerminalApprover::new("terminal"))).clone(),
            Approval::Deny => Arc::new(PolicyApprover::deny_all()),
        };
        let audit_url = audit_store_url(cli)?;
        let audit = audit_url.open().await.with_context(|| format!("cannot open the audit store `{audit_url}`"))?;
        let setup = TurnSetup { approver, audit, events: Arc::new(PrintEvents), turn: source.config.turn.clone() };
        let script = script_tool(client)?;
        Ok(Backend { source, tools, embedded, address, script, setup, audit_url, terminal })
    }

    /// Ends the MCP servers and an embedded sidecar; reports the demo world's outbox.
    async fn stop(self) -> anyhow::Result<()> {
        self.tools.shutdown().await;
        if let Some(embedded) = self.embedded {
            embedded.stop().await?;
        }
        self.source.finish(true)
    }

    /// How to read a turn's records back.
    fn audit_hint(&self, turn_id: &str) -> String {
        format!("tether audit --audit-store '{}' --turn {turn_id}", self.audit_url)
    }
}

fn audit_store_url(cli: &Cli) -> anyhow::Result<AuditStoreUrl> {
    Ok(match &cli.audit_store {
        Some(url) => AuditStoreUrl::parse(url)?,
        None => AuditStoreUrl::Sqlite(std::env::temp_dir().join("tether-demo-audit.db")),
    })
}

/// A turn id no other run of this command used, on any host (the audit store
/// outlives runs, and may be shared): `<kind>-` and a UUID v7.
fn turn_id(kind: &str) -> String {
    format!("{kind}-{}", uuid::Uuid::now_v7())
}

// One thread: the CLI runs one turn at a time, and with the client, the
// embedded sidecar and the tools on one thread a message never waits for a
// hand-off between threads (~20 µs each on a small VM; `docs/benchmarks.md`,
// "Tether one thread"). A script computing yields the thread every epoch tick.
#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let outcome = async {
        let telemetry = cli.telemetry.config("tether-backend", "warn").init()?;
        let outcome = run(cli).await;
        // The turn's spans (and an embedded sidecar's) are sent before exiting.
        telemetry.shutdown().await;
        outcome
    }
    .await;
    if let Err(error) = &outcome {
        // The chain of causes on one line, never a backtrace (`{:?}` would
        // print one whenever RUST_BACKTRACE is set): a person reads this.
        eprintln!("Error: {error:#}");
    }
    // Exit here rather than by dropping the runtime: `chat` may leave a
    // blocking read of the terminal behind (Ctrl-C at the prompt), which the
    // runtime would wait for.
    std::process::exit(if outcome.is_ok() { 0 } else { 1 })
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::Tools { config } => {
            let source = Source::load(config.clone(), cli.demo_db.clone())?;
            let tools = ToolSet::start(&source.config.tools).await?;
            print!("{}", listing::render(&source.config.path, &tools, &tools.servers().await));
            print!("{}", listing::render_agents(&source.config.agents));
            tools.shutdown().await;
            source.finish(false)
        }
        Command::Stubs { config, agent } => stubs(&cli, config.clone(), agent.clone()).await,
        Command::Audit { turn, run, code, json } => {
            let url = audit_store_url(&cli)?;
            let store = url.open().await.with_context(|| format!("cannot open the audit store `{url}`"))?;
            let records = audit::read(&store, turn).await?;
            if records.audit.is_empty() && records.ledger.is_empty() {
                anyhow::bail!(
                    "no rows for turn `{turn}` in {url}; pass the audit store the turn was run with (--audit-store)"
                );
            }
            let filter = audit::Filter { run: run.clone(), code: code.clone() };
            if *json {
                println!("{}", serde_json::to_string_pretty(&audit::to_json(turn, &records, &filter))?);
            } else {
                print!("{}", audit::render(turn, &records, &filter));
            }
            Ok(())
        }
        Command::Chat { config, model } => {
            let source = Source::load(config.clone(), cli.demo_db.clone())?;
            let (agent, agents) = model.resolve(&source.config.agents)?;
            let backend = Backend::start(&cli, source, Approval::Ask).await?;
            let outcome = chat_loop(&backend, agent, agents).await;
            backend.stop().await?;
            outcome
        }
        Command::Ask { question, config, model } => {
            let source = Source::load(config.clone(), cli.demo_db.clone())?;
            let (agent, agents) = model.resolve(&source.config.agents)?;
            let backend = Backend::start(&cli, source, Approval::Policy).await?;
            let live = Arc::new(LiveView::default());
            let outcome = async {
                let mut session = session(&backend, agent, agents, live.clone(), "ask");
                let (turn, run) = session.send(question).await?;
                live.finish_line();
                eprintln!("audit: {}", backend.audit_hint(turn.id()));
                chat::ask_report(&turn, &run).await
            }
            .await;
            backend.stop().await?;
            print_outcome(&outcome?, "the model gave no answer")
        }
        Command::Demo { gather } => {
            let (script, name) = if *gather {
                (demo::SCRIPT_GATHER, "examples/contracts_gather.py")
            } else {
                (demo::SCRIPT, "examples/contracts.py")
            };
            let source = Source::load(None, cli.demo_db.clone())?;
            run_script(&cli, source, script.to_owned(), DemoWorld::input(), name.to_owned()).await
        }
        Command::Run { file, input, config } => {
            let code = std::fs::read_to_string(file).with_context(|| format!("cannot read `{}`", file.display()))?;
            let input = match input {
                Some(json) => serde_json::from_str(json).context("--input is not valid JSON")?,
                None => DemoWorld::input(),
            };
            let source = Source::load(config.clone(), cli.demo_db.clone())?;
            run_script(&cli, source, code, input, file.display().to_string()).await
        }
    }
}

fn session(backend: &Backend, agent: String, agents: AgentsConfig, live: Arc<LiveView>, kind: &str) -> Session {
    Session::new(
        agent,
        agents,
        backend.setup.clone(),
        backend.tools.clone(),
        backend.script.clone(),
        live,
        turn_id(kind),
    )
}

/// `tether chat`: reads a message per line until the end of input (or
/// `/exit`), each one a turn; prints the answer, or why there is none and
/// which approval-required actions ran.
async fn chat_loop(backend: &Backend, agent: String, agents: AgentsConfig) -> anyhow::Result<()> {
    let live = Arc::new(LiveView::default());
    let mut session = session(backend, agent, agents, live.clone(), "chat");
    // Lines are read through the approval prompt's input when it is on this
    // terminal, so a typed answer is never taken as a message.
    let terminal = backend.terminal.clone().unwrap_or_else(|| Arc::new(TerminalApprover::new("terminal")));
    eprintln!(
        "chatting with agent `{}` over {} tools and run_script, on the sidecar at {} (end with Ctrl-D or /exit)",
        session.agent(),
        backend.tools.tools().len(),
        backend.address
    );
    loop {
        // Ctrl-C at the prompt ends the chat; during a turn it cancels the turn.
        let line = tokio::select! {
            line = terminal.read_line("\nyou> ") => line?,
            _ = tokio::signal::ctrl_c() => None,
        };
        let Some(line) = line else { break };
        let message = line.trim();
        if message.is_empty() {
            continue;
        }
        if message == "/exit" {
            break;
        }
        eprint!("{}> ", session.agent());
        let (turn, run) = tokio::select! {
            sent = session.send(message) => sent?,
            _ = tokio::signal::ctrl_c() => {
                // Dropping the turn's future ends its calls in flight (a script
                // run ends with its stream); each still gets its audit row.
                live.finish_line();
                eprintln!("(cancelled; the conversation is as it was before this message)");
                continue;
            }
        };
        live.finish_line();
        match &run.result {
            Ok(_) => {}
            Err(error) => {
                eprintln!("(no answer: {error})");
                for action in &run.possibly_executed {
                    eprintln!(
                        "  ran before the turn ended (not retried): {} {} {}",
                        action.call.call_id, action.call.tool, action.call.args
                    );
                }
            }
        }
        eprintln!("(turn {}: {} calls; {})", turn.id(), turn.audit_log().await?.len(), backend.audit_hint(turn.id()));
    }
    Ok(())
}

/// `tether stubs`: the Python API of the tools a script may call.
async fn stubs(cli: &Cli, config: Option<PathBuf>, agent: Option<String>) -> anyhow::Result<()> {
    let source = Source::load(config, cli.demo_db.clone())?;
    let tools = ToolSet::start(&source.config.tools).await?;
    // Made from a turn's own list, so a script sees exactly this. No script
    // runs, so the turn needs no sidecar (`run_script` is never offered to
    // scripts anyway).
    let outcome = (|| {
        let mut builder = tools.add_to(Turn::builder("stubs").limits(source.config.turn.limits.clone()));
        if let Some(agent) = &agent {
            let (agent, agents) =
                ModelChoice { agent: Some(agent.clone()), ..ModelChoice::default() }.resolve(&source.config.agents)?;
            let nested: NestedTurnSetup = Arc::new(|_: &str, builder| builder);
            for tool in PeerAgents::new(agents, nested, Arc::new(NoAgentEvents)).tools_for(Some(&agent))? {
                builder = builder.add_tool(tool);
            }
        }
        anyhow::Ok(builder.build()?.script_stubs())
    })();
    tools.shutdown().await;
    source.finish(false)?;
    print!("{}", outcome?);
    Ok(())
}

/// `tether run` and `tether demo`: the script as the model's `run_script` call.
async fn run_script(cli: &Cli, source: Source, code: String, input: Value, label: String) -> anyhow::Result<()> {
    let backend = Backend::start(cli, source, Approval::Policy).await?;
    let turn_id = turn_id("run");
    let outcome = async {
        let turn = backend.setup.open(&turn_id, &backend.tools, &backend.script, Vec::new()).await?;
        eprintln!(
            "running {label} as the model's run_script call, on the sidecar at {}, with the {} tools of {}",
            backend.address,
            backend.tools.tools().len(),
            backend.source.config.path.display()
        );
        let request = CallRequest::new("call_1", "run_script", json!({"code": code, "input": input}));
        let result = turn.execute(request, CallOrigin::Model).await;
        let audit_rows = turn.audit_log().await?.len();
        let possibly = turn.possibly_executed_approval_actions().await?;
        eprintln!(
            "audit log: {audit_rows} rows for turn {turn_id} ({}); approval-required actions that ran: {}",
            backend.audit_hint(&turn_id),
            possibly.len()
        );
        anyhow::Ok(result.to_model_value())
    }
    .await;
    backend.stop().await?;
    print_outcome(&outcome?, "the script did not complete")
}

/// Prints a JSON outcome on stdout; fails with `failed` (a nonzero exit for
/// scripts that call `tether`) unless its `ok` is true.
fn print_outcome(outcome: &Value, failed: &str) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(outcome)?);
    match outcome.get("ok") {
        Some(Value::Bool(true)) => Ok(()),
        _ => anyhow::bail!("{failed}"),
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
