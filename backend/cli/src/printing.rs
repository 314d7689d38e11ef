//! A call handler for the CLI: runs the demo tools and prints every call as
//! it happens.

use crate::demo::DemoWorld;
use std::io::Write;
use std::sync::Arc;
use tether_backend::{CallHandler, ScriptCall, ToolOutcome, pb};

/// Runs calls against a [`DemoWorld`], printing each to stderr.
#[derive(Debug, Clone)]
pub struct PrintingHandler {
    /// The world the tools act on.
    pub world: Arc<DemoWorld>,
}

#[async_trait::async_trait]
impl CallHandler for PrintingHandler {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        let batch = if call.batch_size > 1 { format!(" [batch {} of {}]", call.batch, call.batch_size) } else { String::new() };
        eprintln!("  → {} {}({}){batch}", call.id, call.name, call.args);
        let outcome = self.world.execute(&call.name, &call.args);
        match &outcome {
            ToolOutcome::Ok(value) => eprintln!("  ← {} ok {}", call.id, shorten(&value.to_string())),
            ToolOutcome::Failed { code, message } => eprintln!("  ← {} failed {code}: {message}", call.id),
        }
        outcome
    }

    fn output(&self, _stream: pb::OutputStream, data: &[u8]) {
        for line in String::from_utf8_lossy(data).lines() {
            eprintln!("  | {line}");
        }
        let _ = std::io::stderr().flush();
    }

    fn call_cap_exceeded(&self, breach: &pb::CallCapExceeded) {
        eprintln!("  ! the script passed its {}-call cap at {}", breach.max_calls, breach.call_id);
    }
}

fn shorten(text: &str) -> String {
    const MAX: usize = 120;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
