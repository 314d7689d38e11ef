//! `tether`: the demo, and running your own script against the demo tools, on
//! a sidecar embedded in this process (or one you name with `--sidecar`).

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use tether_backend::{RunRequest, SidecarClient, pb};
use tether_cli::demo::{self, DemoWorld};
use tether_cli::embedded::EmbeddedSidecar;
use tether_cli::printing::PrintingHandler;
use tether_sidecar::SidecarConfig;

#[derive(Debug, Parser)]
#[command(version, about = "Run LLM-written scripts whose tool calls come back to the turn")]
struct Cli {
    /// Use the sidecar at this address (`http://host:port` or `unix:/path`)
    /// instead of one embedded in this process.
    #[arg(long, global = true, env = "TETHER_SIDECAR")]
    sidecar: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Email the owners of last week's issues whose customer's contract has ended.
    Demo {
        /// Batch the contract look-ups with asyncio.gather.
        #[arg(long)]
        gather: bool,
    },
    /// Run a Python script file against the demo tools
    /// (list_issues, get_contract, send_email).
    Run {
        /// The script.
        file: PathBuf,
        /// The script's `input`, as JSON (default: the demo's dates).
        #[arg(long)]
        input: Option<String>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let (source, input, label) = match cli.command {
        Command::Demo { gather } => {
            let (script, name) = if gather { (demo::SCRIPT_GATHER, "examples/contracts_gather.py") } else { (demo::SCRIPT, "examples/contracts.py") };
            (script.to_owned(), DemoWorld::input(), name.to_owned())
        }
        Command::Run { file, input } => {
            let source = std::fs::read_to_string(&file).with_context(|| format!("cannot read `{}`", file.display()))?;
            let input = match input {
                Some(json) => serde_json::from_str(&json).context("--input is not valid JSON")?,
                None => DemoWorld::input(),
            };
            (source, input, file.display().to_string())
        }
    };

    let embedded = match &cli.sidecar {
        Some(_) => None,
        None => Some(EmbeddedSidecar::start(SidecarConfig::default()).await.context("cannot start the embedded sidecar")?),
    };
    let address = match (&cli.sidecar, &embedded) {
        (Some(address), _) => address.clone(),
        (None, Some(embedded)) => embedded.url(),
        (None, None) => unreachable!("an embedded sidecar is started when none is named"),
    };
    let client = SidecarClient::connect(&address).await?;
    let handler = PrintingHandler { world: Arc::new(DemoWorld::default()) };

    eprintln!("running {label} on the sidecar at {address}");
    let request = RunRequest {
        turn_id: "demo-turn".into(),
        parent_call_id: "call_1".into(),
        input,
        tools: DemoWorld::tools(),
        ..RunRequest::python("demo-run", source)
    };
    let outcome = client.run(request, &handler).await?;
    let stats = &outcome.stats;
    eprintln!(
        "finished: {:?} — {} calls, guest CPU {:.1} ms, waiting {:.1} ms, wall {:.1} ms",
        outcome.status,
        stats.calls,
        stats.cpu_time_us as f64 / 1000.0,
        stats.wait_time_us as f64 / 1000.0,
        stats.wall_time_us as f64 / 1000.0
    );
    if let Some(embedded) = embedded {
        embedded.stop().await?;
    }
    match (outcome.status, outcome.result, outcome.error) {
        (pb::RunStatus::Ok, result, _) => {
            println!("{}", serde_json::to_string_pretty(&result.unwrap_or(Value::Null))?);
            Ok(())
        }
        (status, _, Some(error)) => {
            if !error.traceback.is_empty() {
                eprintln!("{}", error.traceback);
            }
            anyhow::bail!("the script ended with {status:?}: {} ({})", error.message, error.kind)
        }
        (status, _, None) => anyhow::bail!("the script ended with {status:?}"),
    }
}
