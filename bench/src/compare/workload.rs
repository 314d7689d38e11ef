//! The four workloads every system runs: the same script files, the same
//! input, the same tools (the demo's three plus `noop`).

use anyhow::Context;
use serde_json::{Value, json};
use std::path::PathBuf;
use tether_backend::ToolDef;
use tether_cli::demo::DemoWorld;

/// One workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Workload {
    /// `1 + 1`.
    Trivial,
    /// 50 sequential calls to a no-op tool.
    Calls,
    /// The demo scenario, one call at a time (`examples/contracts.py`).
    DemoSequential,
    /// The demo scenario, its look-ups under `asyncio.gather` (`examples/contracts_gather.py`).
    DemoGathered,
    /// A pure-Python CPU loop.
    Cpu,
}

impl Workload {
    /// Every workload, in table order.
    pub(crate) const ALL: [Workload; 5] =
        [Workload::Trivial, Workload::Calls, Workload::DemoSequential, Workload::DemoGathered, Workload::Cpu];

    /// The workloads whose throughput is measured at several concurrencies.
    pub(crate) const THROUGHPUT: [Workload; 2] = [Workload::Trivial, Workload::DemoSequential];

    /// Its name in the table.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Workload::Trivial => "W1 `1 + 1`",
            Workload::Calls => "W2 50 calls to a no-op tool",
            Workload::DemoSequential => "W3 demo, sequential",
            Workload::DemoGathered => "W3 demo, gathered",
            Workload::Cpu => "W4 CPU loop (200k)",
        }
    }

    /// The script file, which every system runs as it is.
    pub(crate) fn script(self) -> PathBuf {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        match self {
            Workload::Trivial => root.join("workloads/w1_trivial.py"),
            Workload::Calls => root.join("workloads/w2_calls.py"),
            Workload::DemoSequential => root.join("../examples/contracts.py"),
            Workload::DemoGathered => root.join("../examples/contracts_gather.py"),
            Workload::Cpu => root.join("workloads/w4_cpu.py"),
        }
    }

    /// The script's source.
    pub(crate) fn source(self) -> anyhow::Result<String> {
        let path = self.script();
        std::fs::read_to_string(&path).with_context(|| format!("cannot read the workload `{}`", path.display()))
    }

    /// The value the script reads as `input`.
    pub(crate) fn input(self) -> Value {
        match self {
            Workload::DemoSequential | Workload::DemoGathered => DemoWorld::input(),
            _ => Value::Null,
        }
    }

    /// The CPU loop is slow everywhere: fewer samples of it.
    pub(crate) fn samples(self, samples: usize) -> usize {
        if self == Workload::Cpu { samples.div_ceil(5).max(2) } else { samples }
    }
}

/// The tools every run is offered: the demo's three and `noop`.
pub(crate) fn tools() -> Vec<ToolDef> {
    let mut tools = DemoWorld::tools();
    tools.push(ToolDef::new("noop", "Does nothing.", json!({"type": "object", "additionalProperties": false})));
    tools
}

/// The demo's data as the peers read it (`--world`): issues and contracts,
/// from the same [`DemoWorld`] Tether's tools answer from.
pub(crate) fn world_json() -> Value {
    let world = DemoWorld::default();
    let issues: Vec<Value> = world
        .issues()
        .iter()
        .map(|i| json!({"id": i.id, "title": i.title, "customer_id": i.customer_id, "opened": i.opened}))
        .collect();
    let contracts: Vec<Value> = world
        .contracts()
        .iter()
        .map(|c| json!({"customer_id": c.customer_id, "customer": c.customer, "end_date": c.end_date, "owner_email": c.owner_email}))
        .collect();
    json!({"issues": issues, "contracts": contracts})
}
