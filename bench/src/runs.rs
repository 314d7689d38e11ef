//! Whole runs over real gRPC on loopback against an embedded sidecar: a
//! trivial run, one call round trip, and a batch under `asyncio.gather`.

use anyhow::Context;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tether_backend::{CallHandler, RunRequest, ScriptCall, SidecarClient, ToolDef, ToolOutcome};
use tether_cli::embedded::EmbeddedSidecar;
use tether_sidecar::SidecarConfig;

/// Flags of `runs`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Samples per measurement.
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// Calls per run in the round-trip measurement.
    #[arg(long, default_value_t = 50)]
    calls: usize,
    /// The client, the sidecar and the tools on one current-thread runtime
    /// (as the `tether` CLI runs them), not on the bench's multi-threaded one.
    #[arg(long)]
    one_thread: bool,
    /// Only the trivial run, for profiling it (`perf record`).
    #[arg(long)]
    trivial_only: bool,
    /// Offer every run this many tools with MCP-sized input schemas (about
    /// 2.3 KB of JSON each, as an MCP server's tools/list gives), copied into
    /// each run's request as a turn does: what a large tool list costs.
    #[arg(long, default_value_t = 0)]
    tools: usize,
}

/// A no-op tool (`noop`) and a 1 ms tool (`slow`).
struct Tools;

#[async_trait::async_trait]
impl CallHandler for Tools {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        if call.name == "slow" {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        ToolOutcome::Ok(Value::Null)
    }
}

/// `count` tools whose input schemas look like an MCP server's: a dozen
/// described properties, some with formats and enums (about 2.3 KB each).
fn mcp_sized_tools(count: usize) -> Vec<ToolDef> {
    (0..count)
        .map(|i| {
            let properties: serde_json::Map<String, Value> = (0..12)
                .map(|p| {
                    let mut property = json!({
                        "type": if p % 3 == 0 { "integer" } else { "string" },
                        "description": format!("Parameter {p} of tool {i}: what the server says about it, in a sentence or two, as MCP servers describe their arguments, with an example or two of a good value and what the default is."),
                    });
                    if p % 4 == 1 {
                        property["enum"] = json!(["open", "closed", "all"]);
                    }
                    (format!("param_{p}"), property)
                })
                .collect();
            ToolDef::new(
                format!("mcp_tool_{i}"),
                format!("Tool {i} of an MCP server: one paragraph on what it does, when to use it and what it returns."),
                json!({"type": "object", "properties": properties, "required": ["param_0"], "additionalProperties": false}),
            )
        })
        .collect()
}

async fn median_run(
    client: &SidecarClient,
    tools: &[ToolDef],
    source: &str,
    samples: usize,
) -> anyhow::Result<Duration> {
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples {
        let request =
            RunRequest { input: json!(i), tools: tools.to_vec(), ..RunRequest::python(format!("bench-{i}"), source) };
        let started = Instant::now();
        let outcome = client.run(request, &Tools).await?;
        times.push(started.elapsed());
        anyhow::ensure!(outcome.is_ok(), "the bench script failed: {outcome:?}");
    }
    times.sort();
    Ok(times[times.len() / 2])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs the three run measurements and prints them.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    if args.one_thread { crate::on_one_thread(|| measure(args)) } else { measure(args).await }
}

async fn measure(Args { samples, calls, trivial_only, tools, .. }: Args) -> anyhow::Result<()> {
    let tools = mcp_sized_tools(tools);
    let tools = tools.as_slice();
    let sidecar = EmbeddedSidecar::start(SidecarConfig::default()).await.context("starting the sidecar")?;
    let client = SidecarClient::connect(&sidecar.local_url()).await?;
    // Warm up: the compile cache, the pool, the connection.
    median_run(&client, tools, "1 + 1", 20).await?;

    let trivial = median_run(&client, tools, "1 + 1", samples).await?;
    if trivial_only {
        println!("trivial run (1 + 1), {} tools, median of {samples}: {:.3} ms", tools.len(), ms(trivial));
        return sidecar.stop().await.map_err(Into::into);
    }
    let with_calls =
        median_run(&client, tools, &format!("for i in range({calls}):\n    call('noop')\n"), samples).await?;
    let loop_only = median_run(&client, tools, &format!("for i in range({calls}):\n    pass\n"), samples).await?;
    let round_trip = with_calls.saturating_sub(loop_only) / calls as u32;

    let gather_samples = (samples / 4).max(10);
    let sequential = median_run(&client, tools, "for i in range(20):\n    call('slow')\n", gather_samples).await?;
    let gathered = median_run(
        &client,
        tools,
        "import asyncio\nawait asyncio.gather(*[call_async('slow') for i in range(20)])\n",
        gather_samples,
    )
    .await?;

    println!("trivial run (1 + 1), median of {samples}: {:.3} ms", ms(trivial));
    println!(
        "call round trip over gRPC, median run of {calls} calls: {:.1} µs per call",
        round_trip.as_secs_f64() * 1e6
    );
    println!(
        "20 calls to a 1 ms tool: sequential {:.2} ms, asyncio.gather {:.2} ms (ratio {:.1}x)",
        ms(sequential),
        ms(gathered),
        sequential.as_secs_f64() / gathered.as_secs_f64()
    );
    sidecar.stop().await?;
    Ok(())
}
