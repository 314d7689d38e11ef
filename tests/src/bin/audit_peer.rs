//! `tether-audit-peer`: a small backend process for the audit store's
//! multi-process tests (`tests/e2e/audit_postgres.rs`). It opens the audit
//! store a URL names, builds a turn with one tool with effects (`pay`,
//! approval required, approved by policy), and makes the calls it is told to
//! through `Turn::execute`, so that two of it can write one turn's rows at
//! once, or one can be killed while a call runs.
//!
//! Its one argument is JSON: `{"url", "turn", "calls": [call ids],
//! "concurrency", "block_until": path or null}`. It prints JSON lines:
//! `{"event": "ready"}` once the store is open (then it waits for a line on
//! stdin before calling), `{"event": "running", "call"}` each time `pay`
//! runs (after its `started` row is committed; with `block_until`, `pay` then
//! waits until that file exists), and `{"event": "done", "results", "ledger",
//! "possibly_executed"}` at the end.

use anyhow::Context;
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tether_backend::turn::{
    CallOrigin, CallRequest, PolicyApprover, ToolOutput, ToolSpec, Turn, executor_fn, open_audit_store,
};

#[derive(serde::Deserialize)]
struct Orders {
    url: String,
    turn: String,
    calls: Vec<String>,
    #[serde(default = "one")]
    concurrency: usize,
    block_until: Option<PathBuf>,
}

fn one() -> usize {
    1
}

/// Prints one JSON line and flushes it: the test reads it at once.
fn say(line: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let orders = std::env::args().nth(1).context("usage: tether-audit-peer '<orders as JSON>'")?;
    let orders: Orders = serde_json::from_str(&orders).context("the orders are not valid JSON")?;
    let store = open_audit_store(&orders.url).await?;
    let block_until = orders.block_until.clone();
    let pay = executor_fn(move |context, _args| {
        let block_until = block_until.clone();
        async move {
            say(json!({"event": "running", "call": context.call_id}));
            if let Some(path) = block_until {
                while !path.exists() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            Ok(ToolOutput::new(json!("paid")))
        }
    });
    let calls = u32::try_from(orders.calls.len()).unwrap_or(u32::MAX);
    let turn = Turn::builder(&orders.turn)
        .audit_store(store)
        .approver(Arc::new(PolicyApprover::approve_all()))
        .max_tool_calls(calls)
        .max_approval_calls(calls)
        .tool(ToolSpec::new("pay", "Pays; has effects.", json!({"type": "object"})).requires_approval(), pay)
        .build()?;

    say(json!({"event": "ready"}));
    std::io::stdin().lock().lines().next().context("stdin closed before `go`")??;

    let mut results = Vec::new();
    for chunk in orders.calls.chunks(orders.concurrency.max(1)) {
        let batch = chunk.iter().map(|id| {
            let request = CallRequest::new(id.clone(), "pay", json!({"call": id}));
            turn.execute(request, CallOrigin::Model)
        });
        for (id, result) in chunk.iter().zip(futures::future::join_all(batch).await) {
            let code = result.failure().map(|f| f.code.as_str());
            results.push(json!({"call": id, "status": result.status().as_str(), "code": code}));
        }
    }
    let ledger: Vec<Value> =
        turn.ledger().await?.into_iter().map(|e| json!({"call": e.call.call_id, "state": e.state.as_str()})).collect();
    let possibly: Vec<Value> = turn
        .possibly_executed_approval_actions()
        .await?
        .into_iter()
        .map(|e| json!({"call": e.call.call_id, "state": e.state.as_str()}))
        .collect();
    say(json!({"event": "done", "results": results, "ledger": ledger, "possibly_executed": possibly}));
    Ok(())
}
