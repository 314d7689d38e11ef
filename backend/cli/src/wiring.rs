//! What a command's flags and config make: the tools (a config file's, or
//! the demo world's over a database this command creates), a sidecar
//! (embedded in this process, or the one `--sidecar` names), the approver
//! `--approval` picks, the audit store `--audit-store` names, and the turns
//! over them.
//!
//! Every turn a command runs is opened from one [`Backend`], so the model's
//! calls, its scripts' calls and nested agent turns all get the same tools,
//! `run_script`, approver and audit store; [`Backend::stop`] ends what
//! [`Backend::start`] started (the MCP servers, an embedded sidecar, a
//! temporary demo database).

use crate::answer_all::AnswerAll;
use crate::demo_db;
use crate::embedded::EmbeddedSidecar;
use crate::terminal::TerminalApprover;
use crate::turn::{PrintEvents, TurnSetup};
use anyhow::Context;
use clap::ValueEnum;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use tether_backend::SidecarClient;
use tether_backend::tools::{Config, ToolSet, Vars};
use tether_backend::turn::{
    Approver, AuditStoreUrl, CallOrigin, CallRequest, Code, DeferredApprover, PolicyApprover, ScriptTool, Tool,
};
use tether_sidecar::{ParkKey, SidecarConfig};

/// How long a command waits for a sidecar named with `--sidecar` to be ready
/// (a cold start compiles the Python runtime: seconds to a minute).
const SIDECAR_READY_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The flags that choose a command's backend, each command taking those it
/// uses (so its `--help` lists only those). They are also accepted before
/// the command (`tether --audit-store URL audit …`), for the commands that
/// use them: [`or`](Self::or) merges the two places, the command's first.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BackendArgs {
    /// Which sidecar.
    #[command(flatten)]
    pub sidecar: SidecarArgs,
    /// Who approves calls that need approval. Default: `ask` for `chat`; for
    /// `run` and `ask` with a config of your own, `ask` on a terminal and
    /// `deny` without one; `allow-all` for the demo world's tools (it says so).
    #[arg(long, value_enum)]
    pub approval: Option<Approval>,
    /// Which audit store.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Which demo database.
    #[command(flatten)]
    pub world: DemoDbArgs,
}

/// Which sidecar runs the scripts (`--sidecar`, `--park-key-file`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SidecarArgs {
    /// Use the sidecar at this address (`http://host:port` or `unix:/path`)
    /// instead of one embedded in this process.
    #[arg(long = "sidecar", env = "TETHER_SIDECAR", value_name = "ADDRESS")]
    pub address: Option<String>,
    /// The key an embedded sidecar seals parked runs with, so that a run
    /// parked by `--approval later` resumes in another process (`tether
    /// approve`): at least 32 secret bytes, made on first use (default:
    /// `$XDG_STATE_HOME/tether/park.key`, or `~/.local/state/tether/park.key`).
    #[arg(long, env = "TETHER_PARK_KEY_FILE", value_name = "PATH")]
    pub park_key_file: Option<PathBuf>,
}

/// Where the audit log and effect ledger are (`--audit-store`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StoreArgs {
    /// Where the audit log and effect ledger go, as a URL: `sqlite:PATH` or a
    /// plain path (default: a SQLite file in the temp directory),
    /// `postgres://USER@HOST:PORT/DATABASE` (many backend replicas), or
    /// `memory:` (see docs/audit.md).
    #[arg(long, env = "TETHER_AUDIT_STORE", alias = "audit-db", value_name = "URL")]
    pub audit_store: Option<String>,
}

/// Where the demo world's database is (`--demo-db`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DemoDbArgs {
    /// Create the demo world's database here and keep it (default: a fresh
    /// file in the temp directory, removed afterwards). Configs read its path
    /// as `${TETHER_DEMO_DB}`.
    #[arg(long, value_name = "PATH")]
    pub demo_db: Option<PathBuf>,
}

impl BackendArgs {
    /// These flags, each one not given taken from `before` (the same flags
    /// given before the command).
    pub fn or(&self, before: &BackendArgs) -> BackendArgs {
        BackendArgs {
            sidecar: self.sidecar.or(&before.sidecar),
            approval: self.approval.or(before.approval),
            store: self.store.or(&before.store),
            world: self.world.or(&before.world),
        }
    }
}

impl SidecarArgs {
    /// As [`BackendArgs::or`].
    pub fn or(&self, before: &SidecarArgs) -> SidecarArgs {
        SidecarArgs {
            address: self.address.clone().or_else(|| before.address.clone()),
            park_key_file: self.park_key_file.clone().or_else(|| before.park_key_file.clone()),
        }
    }
}

impl StoreArgs {
    /// As [`BackendArgs::or`].
    pub fn or(&self, before: &StoreArgs) -> StoreArgs {
        StoreArgs { audit_store: self.audit_store.clone().or_else(|| before.audit_store.clone()) }
    }
}

impl DemoDbArgs {
    /// As [`BackendArgs::or`].
    pub fn or(&self, before: &DemoDbArgs) -> DemoDbArgs {
        DemoDbArgs { demo_db: self.demo_db.clone().or_else(|| before.demo_db.clone()) }
    }
}

/// Who approves the calls that need approval (`--approval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Approval {
    /// Approve every request at once, each printed with its arguments and
    /// counted on stderr (`policy`, its old name, still works).
    #[value(name = "allow-all", alias = "policy")]
    AllowAll,
    /// Ask on this terminal, showing the exact arguments.
    Ask,
    /// Deny every request.
    Deny,
    /// Park the run in the audit store with each call that needs approval,
    /// and end: a person answers later, from any process, with `tether
    /// approve` or `tether deny` (`tether pending` lists what waits).
    Later,
}

/// Where the tools come from: a config file, or the demo world's; either
/// way with the demo world's database as `${TETHER_DEMO_DB}` (unless the
/// environment names one). Ended with [`Source::finish`].
pub struct Source {
    /// The tools', agents' and turns' configuration.
    pub config: Config,
    /// True for the built-in demo config.
    demo: bool,
    /// The demo database this run created, and whether to remove it afterwards.
    demo_db: Option<(PathBuf, bool)>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("config", &self.config.path)
            .field("demo", &self.demo)
            .field("demo_db", &self.demo_db)
            .finish()
    }
}

impl Source {
    /// The tools of the config file at `config` (the demo world's without
    /// one), with the demo database created at `demo_db` (a temporary file
    /// without one) unless `TETHER_DEMO_DB` names one and `demo_db` is unset.
    ///
    /// # Errors
    /// If the demo database cannot be created or the config cannot be read.
    pub fn load(config: Option<PathBuf>, demo_db: Option<PathBuf>) -> anyhow::Result<Source> {
        // A config of the user's own that never reads `${TETHER_DEMO_DB}` (or
        // `${TETHER_DEMO_DB:-…}`)
        // gets no demo database (unless `--demo-db` asks for one).
        let reads_demo_db = |path: &PathBuf| {
            std::fs::read_to_string(path).map_or(true, |text| text.contains(&format!("${{{}", demo_db::DB_VAR)))
        };
        let needed = demo_db.is_some() || config.as_ref().is_none_or(reads_demo_db);
        let (db, created) = match std::env::var_os(demo_db::DB_VAR) {
            Some(path) if demo_db.is_none() => (PathBuf::from(path), None),
            _ if !needed => (demo_db::default_path(), None),
            _ => {
                let (path, remove) = match demo_db {
                    Some(path) => (path, false),
                    None => (demo_db::default_path(), true),
                };
                demo_db::create(&path).context("cannot create the demo database")?;
                (path.clone(), Some((path, remove)))
            }
        };
        let loaded = match config {
            Some(path) => {
                let vars = Vars::from_env().set(demo_db::DB_VAR, db.display().to_string());
                Config::load(&path, &vars).map(|config| (config, false)).map_err(anyhow::Error::from)
            }
            None => demo_db::config(&db).map(|config| (config, true)),
        };
        match loaded {
            Ok((config, demo)) => Ok(Source { config, demo, demo_db: created }),
            Err(error) => {
                if let Some((path, true)) = &created {
                    remove_database(path);
                }
                Err(error)
            }
        }
    }

    /// The tools of the config file at `config` (the demo world's without
    /// one) over the demo database at `demo_db` as it is — not created
    /// again: a parked run resumes in the world it parked in.
    ///
    /// # Errors
    /// If the demo database is missing or the config cannot be read.
    pub fn reopen(config: Option<PathBuf>, demo_db: Option<PathBuf>) -> anyhow::Result<Source> {
        let db = match demo_db.or_else(|| std::env::var_os(demo_db::DB_VAR).map(PathBuf::from)) {
            Some(db) => db,
            None if config.is_none() => anyhow::bail!("the demo world's database is not known: pass --demo-db"),
            None => demo_db::default_path(),
        };
        if config.is_none() && !db.exists() {
            anyhow::bail!("the demo database `{}` the run parked with is gone; nothing to resume it in", db.display());
        }
        let (config, demo) = match config {
            Some(path) => {
                let vars = Vars::from_env().set(demo_db::DB_VAR, db.display().to_string());
                (Config::load(&path, &vars)?, false)
            }
            None => (demo_db::config(&db)?, true),
        };
        Ok(Source { config, demo, demo_db: Some((db, false)) })
    }

    /// Keeps the demo database this run created (a parked run resumes in it).
    pub fn keep_demo_db(&mut self) {
        if let Some((_, remove)) = &mut self.demo_db {
            *remove = false;
        }
    }

    /// What a run parked from this source needs to resume elsewhere: the
    /// config file and the demo database, as absolute paths.
    pub fn owner(&self) -> Value {
        let absolute = |path: &std::path::Path| std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        json!({
            "config": (!self.demo).then(|| absolute(&self.config.path).display().to_string()),
            "demo_db": self.demo_db.as_ref().map(|(path, _)| absolute(path).display().to_string()),
        })
    }

    /// With `report`, prints the demo world's outbox (after the demo, or
    /// when the script wrote to it); removes a temporary database.
    ///
    /// # Errors
    /// If the demo database's outbox cannot be read.
    pub fn finish(mut self, report: bool) -> anyhow::Result<()> {
        let Some((path, _)) = &self.demo_db else { return Ok(()) };
        let outbox = demo_db::outbox(path)?;
        if report && (self.demo || !outbox.is_empty()) {
            eprintln!("outbox (table `outbox` of {}): {} emails", path.display(), outbox.len());
            for email in outbox {
                eprintln!("  → {}: {}", email.to, email.subject);
            }
        }
        self.remove_temporary();
        Ok(())
    }

    fn remove_temporary(&mut self) {
        if let Some((path, true)) = self.demo_db.take() {
            remove_database(&path);
        }
    }
}

/// Removes a SQLite database file and its journal files, if they are there.
fn remove_database(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// A command that fails before it finishes (a config error, a sidecar that
/// cannot start) leaves no temporary demo database behind.
impl Drop for Source {
    fn drop(&mut self) {
        self.remove_temporary();
    }
}

/// Everything a command that runs turns needs: the tools, a sidecar, the
/// approver and the audit store. Ended with [`Backend::stop`].
pub struct Backend {
    source: Source,
    /// The configured tools, started (MCP servers connected).
    pub tools: Arc<ToolSet>,
    embedded: Option<EmbeddedSidecar>,
    /// The sidecar's address (the embedded one's loopback URL, or `--sidecar`).
    pub address: String,
    /// `run_script` on the sidecar, shared by every turn.
    pub script: Tool,
    /// The same tool, for resuming its parked runs.
    pub script_tool: ScriptTool,
    /// The approver, audit store, events and `[turn]` every turn is built with.
    pub setup: TurnSetup,
    audit_url: AuditStoreUrl,
    /// Runs (and agent turns) that wait for a person park in the audit store.
    durable: bool,
    /// The terminal prompt, when approvals are asked on it (chat reads its
    /// lines through it too).
    pub terminal: Option<Arc<TerminalApprover>>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("source", &self.source)
            .field("address", &self.address)
            .field("audit_url", &self.audit_url)
            .finish_non_exhaustive()
    }
}

impl Approval {
    /// The default of a command that runs a turn with no chat prompt (`run`,
    /// `ask`, `demo`): with the demo world's tools, `allow-all` (it is a
    /// demo, and says so); with a config of the user's own, `ask` when this
    /// process has a terminal to ask on, `deny` when it has none — never a
    /// silent approval of real effects.
    pub fn headless_default(source: &Source) -> Approval {
        use std::io::IsTerminal;
        if source.demo {
            Approval::AllowAll
        } else if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
            Approval::Ask
        } else {
            Approval::Deny
        }
    }

    /// What a command says on stderr when it chose this approval by itself.
    fn announce_default(self) {
        match self {
            Approval::AllowAll => eprintln!(
                "approval: allow-all approves the demo world's calls, each printed below \
                 (choose with --approval ask|deny|later)"
            ),
            Approval::Deny => eprintln!(
                "approval: no terminal to ask on, so calls that need approval are denied \
                 (choose with --approval allow-all|later)"
            ),
            Approval::Ask | Approval::Later => {}
        }
    }
}

impl Backend {
    /// Starts `source`'s tools and the sidecar `args` names (one embedded in
    /// this process without `--sidecar`), connects to it, and opens the audit
    /// store; calls are approved as `--approval` says, or as
    /// `default_approval` without it (announced on stderr).
    ///
    /// # Errors
    /// If a tool source, the sidecar or the audit store cannot be started or reached.
    pub async fn start(args: &BackendArgs, mut source: Source, default_approval: Approval) -> anyhow::Result<Backend> {
        let mut terminal = None;
        let approval = args.approval.unwrap_or_else(|| {
            default_approval.announce_default();
            default_approval
        });
        let approver: Arc<dyn Approver> = match approval {
            Approval::AllowAll => Arc::new(AnswerAll::allow_all()),
            Approval::Ask => terminal.insert(Arc::new(TerminalApprover::new("terminal"))).clone(),
            Approval::Deny => Arc::new(PolicyApprover::deny_all()),
            Approval::Later => Arc::new(DeferredApprover),
        };
        let durable = approval == Approval::Later;
        if durable && audit_store_url(&args.store)? == AuditStoreUrl::Memory {
            source.finish(false)?;
            anyhow::bail!(
                "`--approval later` leaves waiting runs in the audit store for another process to answer, and \
                 `memory:` keeps them only in this one, which ends now: use a SQLite file (`--audit-store \
                 sqlite:PATH`, the default) or PostgreSQL (`--audit-store postgres://…`)"
            );
        }
        if durable {
            source.keep_demo_db();
        }
        let mut backend = Backend::launch(args, source, approver, durable).await?;
        backend.terminal = terminal;
        Ok(backend)
    }

    /// Starts a backend to resume parked runs: like [`start`](Self::start),
    /// with `approver` deciding the calls the resumed runs make, and runs
    /// that may park in the audit store again.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn resuming(args: &BackendArgs, source: Source, approver: Arc<dyn Approver>) -> anyhow::Result<Backend> {
        Backend::launch(args, source, approver, true).await
    }

    /// What `start` and `resuming` share: `durable` runs may park in the
    /// audit store, sealed under the persistent park key.
    async fn launch(
        args: &BackendArgs,
        source: Source,
        approver: Arc<dyn Approver>,
        durable: bool,
    ) -> anyhow::Result<Backend> {
        let tools = Arc::new(ToolSet::start(&source.config.tools).await?);
        let embedded = match &args.sidecar.address {
            Some(_) => None,
            None => {
                let mut config = SidecarConfig::default();
                if durable {
                    let path = args.sidecar.park_key_file.clone().unwrap_or_else(tether_sidecar::default_park_key_file);
                    config.park.key = Some(ParkKey::load_or_make(&path)?);
                }
                Some(EmbeddedSidecar::start(config).await.context("cannot start the embedded sidecar")?)
            }
        };
        let address = match (&args.sidecar.address, &embedded) {
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
        if args.sidecar.address.is_some() {
            // A sidecar just started loads its runtimes first, and refuses runs meanwhile.
            client
                .wait_ready(SIDECAR_READY_WAIT)
                .await
                .with_context(|| format!("the sidecar at `{address}` is not ready for runs"))?;
        }
        let audit_url = audit_store_url(&args.store)?;
        let audit = audit_url.open().await.with_context(|| format!("cannot open the audit store `{audit_url}`"))?;
        let setup =
            TurnSetup { approver, audit, events: Arc::new(PrintEvents::default()), turn: source.config.turn.clone() };
        let script_tool = ScriptTool::new(client).parking(durable).owner(source.owner());
        let script = script_tool.clone().into_tool()?;
        Ok(Backend { source, tools, embedded, address, script, script_tool, setup, audit_url, durable, terminal: None })
    }

    /// The audit store's URL.
    pub fn audit_url(&self) -> &AuditStoreUrl {
        &self.audit_url
    }

    /// The config file the tools came from (the demo world's for the demo).
    pub fn config_path(&self) -> &std::path::Path {
        &self.source.config.path
    }

    /// True when what waits for a person parks in the audit store (`--approval
    /// later`, and every resume).
    pub fn parks(&self) -> bool {
        self.durable
    }

    /// What a run or agent turn parked from this backend needs to resume in
    /// another process ([`Source::owner`]).
    pub fn owner(&self) -> Value {
        self.source.owner()
    }

    /// Ends the MCP servers and an embedded sidecar; reports the demo world's outbox.
    ///
    /// # Errors
    /// If the embedded sidecar does not stop cleanly or the outbox cannot be read.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.stop_reporting(true).await
    }

    /// [`stop`](Self::stop), reporting the outbox only if `report` (a
    /// command that ran nothing has nothing to report).
    ///
    /// # Errors
    /// As [`stop`](Self::stop).
    pub async fn stop_reporting(self, report: bool) -> anyhow::Result<()> {
        self.tools.shutdown().await;
        if let Some(embedded) = self.embedded {
            embedded.stop().await?;
        }
        self.source.finish(report)
    }

    /// How to read a turn's records back.
    pub fn audit_hint(&self, turn_id: &str) -> String {
        format!("tether audit --audit-store '{}' --turn {turn_id}", self.audit_url)
    }

    /// `tether run` and `tether demo`: `code` with `input` as the model's
    /// `run_script` call in a turn of its own (`label` names the script in
    /// what is printed); the call's result as the model sees it.
    ///
    /// # Errors
    /// If the turn cannot be opened or its audit log read.
    pub async fn run_script(&self, code: String, input: Value, label: &str) -> anyhow::Result<Value> {
        let turn_id = turn_id("run");
        let turn = self.setup.open(&turn_id, &self.tools, &self.script, Vec::new()).await?;
        eprintln!(
            "running {label} as the model's run_script call, on the sidecar at {}, with the {} tools of {}",
            self.address,
            self.tools.tools().len(),
            self.source.config.path.display()
        );
        let request = CallRequest::new("call_1", "run_script", json!({"code": code, "input": input}));
        let execute = turn.execute(request, CallOrigin::Model);
        tokio::pin!(execute);
        let mut interrupted = None;
        let result = tokio::select! {
            result = &mut execute => result,
            signal = crate::interrupt::signal() => {
                // The turn ends its calls as `cancelled`, each with its row.
                eprintln!("{signal}: cancelling the turn");
                turn.cancel();
                interrupted = Some(signal);
                execute.await
            }
        };
        if let Some(signal) = interrupted {
            println!("{}", serde_json::to_string_pretty(&result.to_model_value())?);
            let rows = turn.audit_log().await?.len();
            eprintln!("audit log: {rows} rows for turn {turn_id}");
            return Err(crate::interrupt::Interrupted { signal, hint: self.audit_hint(&turn_id) }.into());
        }
        if result.failure().is_some_and(|failure| failure.code == Code::RunParked) {
            crate::waiting::print_waiting(&*self.setup.audit, &turn_id, &self.audit_url).await?;
        }
        let audit_rows = turn.audit_log().await?.len();
        let possibly = turn.possibly_executed_approval_actions().await?;
        eprintln!(
            "audit log: {audit_rows} rows for turn {turn_id} ({}); approval-required actions that ran: {}",
            self.audit_hint(&turn_id),
            possibly.len()
        );
        Ok(result.to_model_value())
    }
}

/// The audit store `--audit-store` names (default: a SQLite file in the temp directory).
///
/// # Errors
/// If the URL is not one of the forms `--audit-store` takes.
pub fn audit_store_url(args: &StoreArgs) -> anyhow::Result<AuditStoreUrl> {
    Ok(match &args.audit_store {
        Some(url) => AuditStoreUrl::parse(url)?,
        None => AuditStoreUrl::Sqlite(std::env::temp_dir().join("tether-demo-audit.db")),
    })
}

/// A turn id no other run of this command used, on any host (the audit store
/// outlives runs, and may be shared): `<kind>-` and a UUID v7.
pub fn turn_id(kind: &str) -> String {
    format!("{kind}-{}", uuid::Uuid::now_v7())
}

/// The environment variable naming the config file a command reads when
/// `--config` is not given.
pub const CONFIG_VAR: &str = "TETHER_CONFIG";

/// The config file a command reads: `flag` (`--config`), else the file
/// `TETHER_CONFIG` names, else `./tether.toml` if there is one; `None`: the
/// demo world's tools.
pub fn find_config(flag: Option<PathBuf>) -> Option<PathBuf> {
    flag.or_else(|| std::env::var_os(CONFIG_VAR).filter(|v| !v.is_empty()).map(PathBuf::from))
        .or_else(|| Some(PathBuf::from("tether.toml")).filter(|here| here.is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn approval_later_over_the_memory_store_is_refused_before_anything_starts() {
        let dir = tempfile::tempdir().unwrap();
        let source = Source::load(None, Some(dir.path().join("demo.db"))).unwrap();
        let args = BackendArgs {
            approval: Some(Approval::Later),
            store: StoreArgs { audit_store: Some("memory:".into()) },
            ..BackendArgs::default()
        };
        let refused = Backend::start(&args, source, Approval::AllowAll).await.unwrap_err().to_string();
        assert!(
            refused.contains("`memory:` keeps them only in this one") && refused.contains("sqlite:PATH"),
            "{refused}"
        );
    }
}
