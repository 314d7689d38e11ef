//! `tether`: the demo, running your own script against configured tools,
//! talking to your own model over them, their typed stubs, listing them, and
//! reading the audit log back.
//!
//! Scripts run as the model's `run_script` call in a turn: every call they
//! make is checked, approved and audited by that turn, on a sidecar embedded
//! in this process (or one you name with `--sidecar`). The tools come from a
//! `tether.toml` (`--config`), or are the demo world's: a SQLite database
//! this command creates and seeds, behind the tools of `examples/demo.toml`.
//!
//! This file is the command line and its dispatch; the library's modules do
//! the work (`tether_cli::wiring` makes the backend from the flags and config).

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde_json::Value;
use std::path::PathBuf;
use tether_backend::tools::{ApprovalFallback, ToolSet};
use tether_cli::audit;
use tether_cli::chat;
use tether_cli::demo::{self, DemoWorld};
use tether_cli::listing;
use tether_cli::mcp_server;
use tether_cli::model::ModelChoice;
use tether_cli::parked;
use tether_cli::waiting;
use tether_cli::wiring::{Approval, Backend, BackendArgs, DemoDbArgs, SidecarArgs, Source, StoreArgs, audit_store_url};
use tether_telemetry::TelemetryArgs;

#[derive(Debug, Parser)]
#[command(version, about = "Run LLM-written scripts whose tool calls come back to the turn")]
struct Cli {
    /// The backend flags given before the command (each command also takes
    /// those it uses after its name, and lists them in its `--help`).
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    telemetry: TelemetryArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Email the owners of last week's issues whose customer's contract has ended.
    #[command(after_help = "Examples:\n  tether demo\n  tether demo --gather\n  tether demo --approval later    \
                            # park at the first email; then `tether pending`, `tether approve --turn ID --all`")]
    Demo {
        /// Batch the contract look-ups with asyncio.gather.
        #[arg(long)]
        gather: bool,
        #[command(flatten)]
        backend: BackendArgs,
    },
    /// Run a Python script file against the configured tools (default: the
    /// demo world's list_issues, get_contract, send_email).
    Run {
        /// The script.
        file: PathBuf,
        /// The script's `input`, as JSON (default: the demo's dates for the
        /// demo world's tools, `null` with `--config`).
        #[arg(long)]
        input: Option<String>,
        /// The tools' configuration (see examples/tether.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        backend: BackendArgs,
    },
    /// Talk to a model over the configured tools: each message is a turn in
    /// which the model calls tools, writes scripts and asks peer agents,
    /// every call checked, approved (on this terminal) and audited.
    #[command(after_help = "Examples:\n  tether chat --config tether.toml\n  \
                            tether chat --base-url http://localhost:11434/v1 --model qwen3    # Ollama\n\
                            At an approval prompt: y approves, a approves the tool for the session, anything else denies.")]
    Chat {
        /// The tools' and agents' configuration (see examples/tether.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        model: ModelChoice,
        #[command(flatten)]
        backend: BackendArgs,
    },
    /// Ask a model one question over the configured tools; prints the answer,
    /// the calls and any approval-required action that ran, as JSON.
    #[command(after_help = "Examples:\n  tether ask \"Which contracts end this month?\" --config tether.toml\n  \
                            tether ask \"Email the owners\" --approval later    # park; answer with `tether approve`")]
    Ask {
        /// The question.
        question: String,
        /// The tools' and agents' configuration (see examples/tether.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        model: ModelChoice,
        #[command(flatten)]
        backend: BackendArgs,
    },
    /// Serve the configured tools to an MCP client (Claude Desktop, Claude
    /// Code, Cursor, VS Code…) as code mode: run_script with the tools' typed
    /// stubs, search_tools and describe_tools; one turn per session, every
    /// call checked, approved through the client and audited (docs/mcp-server.md).
    #[command(
        after_help = "Examples:\n  tether mcp --config tether.toml                      # stdio, as a client launches it\n  \
                            tether mcp --config tether.toml --listen 127.0.0.1:8765   # streamable HTTP at /mcp\n  \
                            tether mcp --listen 0.0.0.0:8765 --token-file token    # clients send the bearer token"
    )]
    Mcp {
        /// The tools' configuration (see examples/tether.toml; `[serve]` sets what is served).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Serve streamable HTTP on this address (at `/mcp`) instead of stdio.
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// With --listen: the bearer token every client must send (required
        /// unless ADDR is loopback).
        #[arg(long, env = "TETHER_MCP_TOKEN_FILE", value_name = "PATH", requires = "listen")]
        token_file: Option<PathBuf>,
        /// Serve the configured tools too, for direct calls (`[serve] direct_tools`).
        #[arg(long)]
        direct_tools: bool,
        /// Who decides an approval when the client cannot ask its person (no
        /// elicitation): deny, allow-all, or park for `tether approve`
        /// (`[serve] approval_fallback`; default deny).
        #[arg(long, value_name = "FALLBACK", value_parser = parse_fallback)]
        approval_fallback: Option<ApprovalFallback>,
        /// The largest request a client may send, in bytes (default 4 MiB).
        #[arg(long, value_name = "BYTES")]
        max_request_bytes: Option<usize>,
        #[command(flatten)]
        resume: ResumeArgs,
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
        #[command(flatten)]
        world: DemoDbArgs,
    },
    /// Print exactly what the model is sent each round besides the
    /// conversation — the system prompt and the tools, run_script's stubs
    /// included — and its size. `[turn] offer = "script"` offers run_script alone.
    Prompt {
        /// The tools' and agents' configuration (see examples/tether.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// As this agent of the config's model gets it (default: `main` if
        /// the config has it, else a turn no agent runs).
        #[arg(long)]
        agent: Option<String>,
        /// As JSON: `{"system_prompt", "tools", "bytes"}`.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        world: DemoDbArgs,
    },
    /// List the configured tools with their metadata, and each MCP server's state.
    Tools {
        /// The tools' configuration (default: the demo world's).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Exit with status 1 when an MCP server is not running (for CI).
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        world: DemoDbArgs,
    },
    /// Write a commented starter tether.toml — or, with --from, one with the
    /// MCP servers of an MCP client's config.
    ///
    /// Examples: `tether init`; `tether init --from .mcp.json` (Claude Code),
    /// `--from .cursor/mcp.json` (Cursor), `--from .vscode/mcp.json` (VS Code),
    /// `--from ~/.config/Claude/claude_desktop_config.json` (Claude Desktop).
    Init {
        /// An MCP client's config whose `mcpServers` (or `servers`) to convert.
        #[arg(long, value_name = "FILE")]
        from: Option<PathBuf>,
        /// Where to write it.
        #[arg(long, default_value = "tether.toml")]
        path: PathBuf,
        /// Replace a file already there.
        #[arg(long)]
        force: bool,
    },
    /// Print a shell completion script: `tether completions bash > /etc/bash_completion.d/tether`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Show a turn's audit rows and ledger from the audit store, nested calls
    /// indented under their parent.
    #[command(group(clap::ArgGroup::new("which_turn").required(true).args(["turn", "last", "list"])))]
    #[command(after_help = "Examples:\n  tether audit --last\n  tether audit --list --limit 5\n  \
                            tether audit --turn ID --code approval_denied\n  tether audit --turn ID --script c1 > script.py")]
    Audit {
        /// The turn (`chat`, `ask`, `run` and `demo` print it).
        #[arg(long)]
        turn: Option<String>,
        /// The turn opened last in the audit store.
        #[arg(long)]
        last: bool,
        /// List the turns of the audit store, newest first, with their calls.
        #[arg(long, conflicts_with_all = ["run", "code", "script"])]
        list: bool,
        /// How many turns `--list` shows.
        #[arg(long, default_value_t = 20, requires = "list")]
        limit: usize,
        /// Only the calls of this script run (its whole id, or the short `run-1`).
        #[arg(long)]
        run: Option<String>,
        /// Only the calls that ended with this code (e.g. `approval_denied`).
        #[arg(long)]
        code: Option<String>,
        /// As JSON.
        #[arg(long)]
        json: bool,
        /// Print the script of this `run_script` call, as the model wrote it.
        #[arg(long, value_name = "CALL", conflicts_with_all = ["run", "code", "json"])]
        script: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List the calls that parked runs wait on (`--approval later`): turn,
    /// call id, tool, exact arguments, since when.
    Pending {
        /// Only this turn's.
        #[arg(long)]
        turn: Option<String>,
        /// As JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Approve calls a parked run waits on, and resume the run to its end
    /// (on `--sidecar`, or an embedded one); prints its outcome as `run` does.
    #[command(after_help = "Examples:\n  tether approve --turn ID --all\n  \
                            tether approve --turn ID --call c1/2 --as dana --reason \"checked the contract\"\n  \
                            tether approve --turn ID --all --take-over    # the process that resumed it was killed")]
    Approve(AnswerArgs),
    /// Deny calls a parked run waits on, and resume the run to its end: the
    /// script gets `approval_denied` for each.
    Deny(AnswerArgs),
    /// Answer the calls parked runs have waited on past the approval wait
    /// limit (`approval_timeout`): each is audited as timed out, and its
    /// script gets that failure value and goes on to its end.
    Expire {
        /// Only this turn's (default: every turn in the store).
        #[arg(long)]
        turn: Option<String>,
        /// Resume runs another process claimed and never finished.
        #[arg(long)]
        take_over: bool,
        /// The tools' configuration (default: the one each run parked with).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        resume: ResumeArgs,
    },
}

/// The backend flags of the commands that resume parked runs (no
/// `--approval`: the command's verdict answers).
#[derive(Debug, Clone, clap::Args)]
struct ResumeArgs {
    #[command(flatten)]
    sidecar: SidecarArgs,
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    world: DemoDbArgs,
}

impl ResumeArgs {
    /// The backend they choose, each flag not given taken from `before`.
    fn backend(&self, before: &BackendArgs) -> BackendArgs {
        BackendArgs {
            sidecar: self.sidecar.or(&before.sidecar),
            approval: None,
            store: self.store.or(&before.store),
            world: self.world.or(&before.world),
        }
    }
}

/// Which waiting calls `approve` and `deny` answer.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["call", "all"])))]
struct AnswerArgs {
    /// The turn (`tether pending` lists it).
    #[arg(long)]
    turn: String,
    /// This call only; calls the run makes afterwards park again.
    #[arg(long)]
    call: Option<String>,
    /// Every call of the turn that waits, and every call its runs make
    /// while they go on, until they end.
    #[arg(long)]
    all: bool,
    /// Why, for the audit row (and the script, on a denial).
    #[arg(long)]
    reason: Option<String>,
    /// Who decides, for the audit row (default: `$USER`).
    #[arg(long = "as", value_name = "NAME")]
    by: Option<String>,
    /// Resume a run another process claimed and never finished (it was killed).
    #[arg(long)]
    take_over: bool,
    /// The tools' configuration (default: the one the run parked with).
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(flatten)]
    resume: ResumeArgs,
}

impl AnswerArgs {
    fn answer(&self, verdict: parked::Verdict) -> parked::Answer {
        parked::Answer {
            verdict,
            turn: self.turn.clone(),
            call: self.call.clone(),
            all: self.all,
            reason: self.reason.clone(),
            by: self.by.clone().or_else(|| std::env::var("USER").ok()).unwrap_or_else(|| "cli".to_owned()),
            take_over: self.take_over,
            config: self.config.clone(),
        }
    }
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
    std::process::exit(match &outcome {
        Ok(()) => 0,
        Err(error) if error.is::<tether_cli::interrupt::Interrupted>() => tether_cli::interrupt::EXIT_CODE,
        Err(_) => 1,
    })
}

/// The config a command reads: `--config`, else `TETHER_CONFIG`, else
/// `./tether.toml`; without any, the demo world's, which is said on stderr.
fn config_file(flag: &Option<PathBuf>) -> Option<PathBuf> {
    let found = tether_cli::wiring::find_config(flag.clone());
    if found.is_none() {
        eprintln!(
            "no --config, TETHER_CONFIG or ./tether.toml: the demo world's tools (`tether init` writes a tether.toml)"
        );
    }
    found
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let before = &cli.backend;
    let demo_db = |world: &DemoDbArgs| world.or(&before.world).demo_db;
    let store = |store: &StoreArgs| audit_store_url(&store.or(&before.store));
    match &cli.command {
        Command::Tools { config, check, world } => {
            let source = Source::load(config_file(config), demo_db(world))?;
            let tools = ToolSet::start(&source.config.tools).await?;
            let servers = tools.servers().await;
            print!("{}", listing::render(&source.config.path, &tools, &servers));
            print!("{}", listing::render_agents(&source.config.agents));
            tools.shutdown().await;
            source.finish(false)?;
            let down: Vec<String> = servers
                .iter()
                .filter_map(|server| server.error.as_ref().map(|error| format!("`{}`: {error}", server.name)))
                .collect();
            if *check && !down.is_empty() {
                anyhow::bail!("{} of {} MCP servers not running: {}", down.len(), servers.len(), down.join("; "));
            }
            Ok(())
        }
        Command::Prompt { config, agent, json, world } => {
            let source = Source::load(config_file(config), demo_db(world))?;
            let agents = source.config.agents.clone();
            let agent = agent.clone().or_else(|| agents.agents.contains_key("main").then(|| "main".to_owned()));
            // Nothing runs, so nothing is approved: said by no one.
            let quiet = BackendArgs { approval: Some(Approval::Deny), ..BackendArgs::default() };
            let backend = Backend::start(&quiet, source, Approval::Deny).await?;
            let prompt = chat::prompt(&backend, agent.as_deref(), agents);
            backend.stop_reporting(false).await?;
            print!("{}", listing::prompt(&prompt?, *json)?);
            Ok(())
        }
        Command::Init { from, path, force } => {
            let text = match from {
                None => tether_cli::init::STARTER.to_owned(),
                Some(source) => {
                    let json = std::fs::read_to_string(source)
                        .with_context(|| format!("cannot read `{}`", source.display()))?;
                    let converted = tether_cli::init::from_mcp_json(&json, source)?;
                    for note in &converted.notes {
                        eprintln!("note: {note}");
                    }
                    converted.text
                }
            };
            tether_cli::init::write(path, &text, *force)?;
            eprintln!("wrote {}; `tether tools --config {}` lists what it gives", path.display(), path.display());
            Ok(())
        }
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(*shell, &mut Cli::command(), "tether", &mut std::io::stdout());
            Ok(())
        }
        Command::Stubs { config, agent, world } => {
            let source = Source::load(config_file(config), demo_db(world))?;
            print!("{}", listing::stubs(source, agent.clone()).await?);
            Ok(())
        }
        Command::Audit { list: true, limit, json, store: flags, .. } => {
            print!("{}", audit::list(&store(flags)?, *limit, *json).await?);
            Ok(())
        }
        Command::Audit { turn, script: Some(call), store: flags, .. } => {
            let which = audit::Which::from_args(turn.clone());
            print!("{}", audit::script(&store(flags)?, &which, call).await?);
            Ok(())
        }
        Command::Audit { turn, run, code, json, script: None, store: flags, .. } => {
            let filter = audit::Filter { run: run.clone(), code: code.clone() };
            let which = audit::Which::from_args(turn.clone());
            print!("{}", audit::show(&store(flags)?, &which, &filter, *json).await?);
            Ok(())
        }
        Command::Pending { turn, json, store: flags } => {
            print!("{}", waiting::pending(&store(flags)?, turn.as_deref(), *json).await?);
            Ok(())
        }
        Command::Approve(which) => {
            let outcome = parked::answer(&which.resume.backend(before), which.answer(parked::Verdict::Approve)).await?;
            print_outcome(&outcome, "the script did not complete")
        }
        Command::Deny(which) => {
            let outcome = parked::answer(&which.resume.backend(before), which.answer(parked::Verdict::Deny)).await?;
            print_outcome(&outcome, "the script did not complete")
        }
        Command::Expire { turn, take_over, config, resume } => {
            let outcomes = parked::expire(&resume.backend(before), turn.as_deref(), *take_over, config.clone()).await?;
            println!("{}", serde_json::to_string_pretty(&outcomes)?);
            Ok(())
        }
        Command::Mcp { config, listen, token_file, direct_tools, approval_fallback, max_request_bytes, resume } => {
            let flags = resume.backend(before);
            let source = Source::load(config_file(config), flags.world.demo_db.clone())?;
            let options = mcp_server::ServeOptions {
                listen: *listen,
                token_file: token_file.clone(),
                direct_tools: *direct_tools,
                fallback: *approval_fallback,
                max_request_bytes: *max_request_bytes,
            };
            mcp_server::serve(&flags, source, options).await
        }
        Command::Chat { backend, .. } if backend.or(before).approval == Some(Approval::Later) => {
            anyhow::bail!(
                "`--approval later` parks a turn in the audit store and ends; a chat goes on from turn to turn \
                 on this terminal: use `--approval ask` here, or `tether ask --approval later` for one question"
            )
        }
        Command::Chat { config, model, backend } => {
            let flags = backend.or(before);
            let source = Source::load(config_file(config), flags.world.demo_db.clone())?;
            let (agent, agents) = model.resolve(&source.config.agents)?;
            let backend = Backend::start(&flags, source, Approval::Ask).await?;
            let outcome = chat::chat_loop(&backend, agent, agents).await;
            backend.stop().await?;
            outcome
        }
        Command::Ask { question, config, model, backend } => {
            let flags = backend.or(before);
            let source = Source::load(config_file(config), flags.world.demo_db.clone())?;
            let (agent, agents) = model.resolve(&source.config.agents)?;
            let default = Approval::headless_default(&source);
            let backend = Backend::start(&flags, source, default).await?;
            let outcome = chat::ask(&backend, agent, agents, question).await;
            backend.stop().await?;
            print_outcome(&outcome?, "the model gave no answer")
        }
        Command::Demo { gather, backend } => {
            let flags = backend.or(before);
            let (script, name) = if *gather {
                (demo::SCRIPT_GATHER, "examples/contracts_gather.py")
            } else {
                (demo::SCRIPT, "examples/contracts.py")
            };
            let source = Source::load(None, flags.world.demo_db.clone())?;
            run_script(&flags, source, script.to_owned(), DemoWorld::input(), name).await
        }
        Command::Run { file, input, config, backend } => {
            let flags = backend.or(before);
            let code = std::fs::read_to_string(file).with_context(|| format!("cannot read `{}`", file.display()))?;
            let input = match input {
                Some(json) => serde_json::from_str(json).context("--input is not valid JSON")?,
                None if config.is_none() => DemoWorld::input(),
                None => Value::Null,
            };
            let source = Source::load(config_file(config), flags.world.demo_db.clone())?;
            run_script(&flags, source, code, input, &file.display().to_string()).await
        }
    }
}

/// `tether run` and `tether demo`: the script as the model's `run_script`
/// call, on a backend started for it and stopped after.
async fn run_script(args: &BackendArgs, source: Source, code: String, input: Value, label: &str) -> anyhow::Result<()> {
    let default = Approval::headless_default(&source);
    let backend = Backend::start(args, source, default).await?;
    let outcome = backend.run_script(code, input, label).await;
    backend.stop().await?;
    print_outcome(&outcome?, "the script did not complete")
}

/// `--approval-fallback`'s value: `deny`, `allow-all` or `park`.
fn parse_fallback(name: &str) -> Result<ApprovalFallback, String> {
    ApprovalFallback::parse(name).ok_or_else(|| format!("`{name}` is not one of deny, allow-all, park"))
}

/// Prints a JSON outcome on stdout; fails with `failed` (a nonzero exit for
/// scripts that call `tether`) unless its `ok` is true or the run parked
/// (`--approval later`: it is not over, and stderr says how to answer it).
fn print_outcome(outcome: &Value, failed: &str) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(outcome)?);
    let parked = outcome.pointer("/error/code").and_then(Value::as_str) == Some("run_parked")
        || outcome.get("parked") == Some(&Value::Bool(true));
    match outcome.get("ok") {
        Some(Value::Bool(true)) => Ok(()),
        _ if parked => Ok(()),
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

    #[test]
    fn backend_flags_go_before_or_after_the_command() {
        let flags = ["--sidecar", "unix:/s", "--approval", "deny", "--audit-db", "memory:", "--demo-db", "d.db"];
        let before = [&["tether"][..], &flags, &["run", "s.py"]].concat();
        let after = [&["tether", "run", "s.py"][..], &flags].concat();
        for argv in [before, after] {
            let cli = Cli::try_parse_from(&argv).unwrap();
            let Command::Run { backend, .. } = &cli.command else { panic!("{argv:?}") };
            let merged = backend.or(&cli.backend);
            assert_eq!(merged.sidecar.address.as_deref(), Some("unix:/s"), "{argv:?}");
            assert_eq!(merged.approval, Some(Approval::Deny), "{argv:?}");
            assert_eq!(merged.store.audit_store.as_deref(), Some("memory:"), "{argv:?}");
            assert_eq!(merged.world.demo_db, Some(PathBuf::from("d.db")), "{argv:?}");
        }
        // After the command, the flag given there wins.
        let both = Cli::try_parse_from(["tether", "--audit-store", "a.db", "audit", "--last", "--audit-store", "b.db"]);
        let Command::Audit { store, .. } = &both.unwrap().command else { panic!() };
        assert_eq!(store.audit_store.as_deref(), Some("b.db"));
    }

    #[test]
    fn each_commands_help_lists_only_the_flags_it_uses() {
        use clap::CommandFactory as _;
        let help = |name: &str| {
            let mut command = Cli::command();
            command.build();
            command.find_subcommand_mut(name).unwrap().render_long_help().to_string()
        };
        let init = help("init");
        for flag in ["--sidecar", "--approval", "--audit-store", "--demo-db", "--park-key-file"] {
            assert!(!init.contains(flag), "`init` uses no {flag}:\n{init}");
        }
        let audit = help("audit");
        assert!(audit.contains("--audit-store") && !audit.contains("--demo-db") && !audit.contains("--sidecar"));
        assert!(audit.contains("Examples:") && audit.contains("tether audit --last"), "{audit}");
        let approve = help("approve");
        assert!(approve.contains("--sidecar <") && approve.contains("--park-key-file <"), "{approve}");
        assert!(!approve.contains("--approval <"), "the verdict answers: {approve}");
        let run = help("run");
        for flag in ["--sidecar", "--approval", "--audit-store", "--demo-db", "--park-key-file"] {
            assert!(run.contains(flag), "`run` uses {flag}:\n{run}");
        }
        // A flag a command does not use is refused after it, and named.
        let refused = Cli::try_parse_from(["tether", "audit", "--last", "--demo-db", "d.db"]).unwrap_err().to_string();
        assert!(refused.contains("--demo-db"), "{refused}");
    }
}
