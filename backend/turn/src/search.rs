//! `search_tools` and `describe_tools`, the meta tools of a turn that offers
//! its model the script tool and finds the rest on demand
//! ([`ModelOffer::Search`](super::ModelOffer::Search)): over hundreds of
//! tools the model loads the few stubs it needs, not every schema.
//!
//! Both read the tools a script the model starts may call (one level below
//! the caller), so they show exactly what a script can call.

use super::activate::{names_of, names_schema};
use super::error::TurnError;
use super::executor::{ToolContext, executor_fn};
use super::registry::Tool;
use super::stubs::python_stubs;
use super::tool::{ToolError, ToolOutput, ToolSpec};
use serde_json::{Value, json};
use tether_codes::Code;

/// The name of the meta tool [`search_tools_tool`] makes.
pub const SEARCH_TOOLS_NAME: &str = "search_tools";

/// The name of the meta tool [`describe_tools_tool`] makes.
pub const DESCRIBE_TOOLS_NAME: &str = "describe_tools";

/// How many tools `search_tools` returns unless asked for another number.
const DEFAULT_MATCHES: usize = 10;

/// The most `search_tools` returns, whatever it is asked.
const MAX_MATCHES: usize = 50;

/// `search_tools(query, limit?)`: the tools whose names and descriptions
/// share the most words with `query`, best first, as `{name, description}`.
/// A meta tool: excluded from scripts, read-only.
///
/// # Errors
/// Never in practice (the schema is fixed).
pub fn search_tools_tool() -> Result<Tool, TurnError> {
    let spec = ToolSpec::new(
        SEARCH_TOOLS_NAME,
        "Find the tools a script can call by words in their names and descriptions; \
         returns the best matches' names and descriptions. Then `describe_tools` gives their Python signatures.",
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to look for, e.g. \"refund order\"."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_MATCHES, "description": "How many to return (default 10)."}
            },
            "required": ["query"],
            "additionalProperties": false
        }),
    )
    .meta_tool()
    .read_only()
    .allow_repeats();
    Tool::new(
        spec,
        executor_fn(|context: ToolContext, args: Value| async move {
            let query = args.get("query").and_then(Value::as_str).unwrap_or_default();
            let limit = args
                .get("limit")
                .and_then(Value::as_u64)
                .map_or(DEFAULT_MATCHES, |n| usize::try_from(n).unwrap_or(MAX_MATCHES).min(MAX_MATCHES));
            let specs = context.turn.callable_specs(context.depth() + 1);
            let matches: Vec<Value> = rank(&specs, query)
                .into_iter()
                .take(limit)
                .map(|spec| json!({"name": spec.name, "description": spec.description}))
                .collect();
            Ok(ToolOutput::new(json!({"matches": matches, "tools": specs.len()})))
        }),
    )
}

/// `describe_tools(names)`: the typed Python stubs of the named tools, as a
/// script calls them. A meta tool: excluded from scripts, read-only.
///
/// # Errors
/// Never in practice (the schema is fixed).
pub fn describe_tools_tool() -> Result<Tool, TurnError> {
    let spec = ToolSpec::new(
        DESCRIBE_TOOLS_NAME,
        "The Python signatures (typed stubs, with their docs) of the named tools, as a script calls them.",
        names_schema(),
    )
    .meta_tool()
    .read_only()
    .allow_repeats();
    Tool::new(
        spec,
        executor_fn(|context: ToolContext, args: Value| async move {
            let names = names_of(&args);
            let specs = context.turn.callable_specs(context.depth() + 1);
            let (known, unknown): (Vec<&str>, Vec<&str>) =
                names.iter().partition(|name| specs.iter().any(|spec| spec.name == **name));
            if known.is_empty() {
                return Err(ToolError::new(
                    Code::ToolNotFound.as_str(),
                    format!(
                        "a script can call no tool named {}; `search_tools` finds them by words",
                        unknown.join(", ")
                    ),
                ));
            }
            let chosen: Vec<ToolSpec> = specs.into_iter().filter(|spec| known.contains(&spec.name.as_str())).collect();
            Ok(ToolOutput::new(json!({"stubs": python_stubs(&chosen), "unknown": unknown})))
        }),
    )
}

/// The specs sharing a word with `query`, most shared words first (a word
/// in the name counts twice), then by name.
fn rank<'a>(specs: &'a [ToolSpec], query: &str) -> Vec<&'a ToolSpec> {
    let asked: Vec<String> = words(query).collect();
    let mut scored: Vec<(usize, &ToolSpec)> = specs
        .iter()
        .map(|spec| {
            let name: Vec<String> = words(&spec.name).collect();
            let description: Vec<String> = words(&spec.description).collect();
            let score = asked
                .iter()
                .map(|word| {
                    let hit = |w: &String| w == word || (word.len() > 3 && w.starts_with(word.as_str()));
                    2 * usize::from(name.iter().any(hit)) + usize::from(description.iter().any(hit))
                })
                .sum();
            (score, spec)
        })
        .filter(|(score, _)| *score > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    scored.into_iter().map(|(_, spec)| spec).collect()
}

/// The lowercase words of `text`; `_`, `-` and `.` split words, so a tool
/// `get_contract` has the words `get` and `contract`.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, description: &str) -> ToolSpec {
        ToolSpec::new(name, description, json!({"type": "object"}))
    }

    #[test]
    fn the_best_match_shares_the_most_words_and_a_name_counts_twice() {
        let specs = [
            spec("get_contract", "Looks up a customer's contract."),
            spec("send_email", "Sends an email to a customer."),
            spec("list_issues", "Lists the issues opened in a date range."),
            spec("refund", "Refunds an order."),
        ];
        let names = |query: &str| rank(&specs, query).into_iter().map(|s| s.name.as_str()).collect::<Vec<_>>();
        assert_eq!(names("customer contract"), ["get_contract", "send_email"]);
        assert_eq!(names("EMAIL"), ["send_email"], "case does not matter");
        assert_eq!(names("issue"), ["list_issues"], "a word's start matches a longer word");
        assert_eq!(names("weather"), Vec::<&str>::new(), "nothing shares a word");
        assert_eq!(
            names("a"),
            ["get_contract", "list_issues", "send_email"],
            "a short word must match whole (not `an`)"
        );
    }
}
