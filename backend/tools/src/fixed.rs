//! Kind `static`: a tool that returns fixed JSON (for tests and stand-ins).
//!
//! ```toml
//! [[tools]]
//! name = "office_hours"
//! kind = "static"
//! description = "The support desk's opening hours."
//! value = { weekdays = "9-17", weekend = "closed" }
//! ```

use super::error::ConfigError;
use super::read::{At, toml_to_json};
use serde_json::Value;
use tether_turn::{ToolContext, ToolError, ToolExecutor, ToolOutput};

/// The kind's own keys.
pub(crate) const KEYS: [&str; 1] = ["value"];

/// A `static` tool's keys, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StaticConfig {
    value: Value,
}

impl StaticConfig {
    pub(crate) fn read(at: &At<'_>, table: &toml::Table) -> Result<StaticConfig, ConfigError> {
        match table.get("value") {
            Some(value) => Ok(StaticConfig { value: toml_to_json(value.clone()) }),
            None => Err(at.error("value", "is missing").fix("write the JSON it returns, e.g. `value = { ok = true }`")),
        }
    }

    /// A `static` tool's arguments: none.
    pub(crate) fn default_input_schema(&self) -> Value {
        serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false})
    }

    /// Static tools have no effects.
    pub(crate) fn read_only_default(&self) -> bool {
        true
    }

    pub(crate) fn executor(&self) -> std::sync::Arc<dyn ToolExecutor> {
        std::sync::Arc::new(Fixed(self.value.clone()))
    }
}

struct Fixed(Value);

#[async_trait::async_trait]
impl ToolExecutor for Fixed {
    async fn execute(&self, _context: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::new(self.0.clone()))
    }
}
