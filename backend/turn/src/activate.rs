//! `activate_tools`, the meta tool that makes deferred tools callable.

use super::error::TurnError;
use super::executor::{ToolContext, executor_fn};
use super::registry::Tool;
use super::tool::{ToolError, ToolOutput, ToolSpec};
use serde_json::{Value, json};
use tether_codes::Code;

/// The name of the meta tool [`activate_tools_tool`] makes.
pub const ACTIVATE_TOOLS_NAME: &str = "activate_tools";

/// The meta tool that activates deferred tools: `activate_tools(names=[...])`.
/// Excluded from scripts (it changes the turn's state); read-only (no
/// external effects, so no ledger rows).
///
/// # Errors
/// Never in practice (the schema is fixed).
pub fn activate_tools_tool() -> Result<Tool, TurnError> {
    let spec = ToolSpec::new(
        ACTIVATE_TOOLS_NAME,
        "Activate deferred tools (listed by name only) so they can be called, also from scripts.",
        names_schema(),
    )
    .meta_tool()
    .read_only();
    Tool::new(
        spec,
        executor_fn(|context: ToolContext, args: Value| async move {
            let (mut activated, mut unknown) = (Vec::new(), Vec::new());
            for name in names_of(&args) {
                match context.turn.activate(name) {
                    Ok(_) => activated.push(name),
                    Err(_) => unknown.push(name),
                }
            }
            if activated.is_empty() {
                return Err(ToolError::new(
                    Code::ToolNotFound.as_str(),
                    format!("no such tools: {}", unknown.join(", ")),
                ));
            }
            Ok(ToolOutput::new(json!({"activated": activated, "unknown": unknown})))
        }),
    )
}

/// The arguments of a meta tool that takes tool names: `{"names": [...]}`,
/// at least one.
pub(crate) fn names_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"names": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
        "required": ["names"],
        "additionalProperties": false
    })
}

/// The names in arguments of [`names_schema`]'s shape.
pub(crate) fn names_of(args: &Value) -> Vec<&str> {
    args.get("names")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}
