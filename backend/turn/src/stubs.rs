//! Typed stubs: the turn's tools as a Python API, the text the model reads
//! before it writes a script. One function per tool with keyword parameters
//! typed from the input schema, a docstring from the description, a return
//! type from the output schema, the shape every call returns, and how to
//! batch calls.
//!
//! Generated from the list a script is started with
//! ([`Turn::callable_tools`](super::Turn::callable_tools)'s tools: depth and
//! exclusions applied), so the stubs never show a tool a script cannot call.
//! The text is valid Python: the Python guest parses and runs it (tested).

use super::tool::{ApprovalRequirement, ToolSpec};
use serde_json::Value;
use std::fmt::Write;

/// What the stubs say before the functions: the result shape, `unwrap`,
/// `call`, and batching.
const PREAMBLE: &str = r#"# The tools this script may call. Every call returns a Result and never raises:
#   {"ok": True,  "value": <the tool's result>, "error": None}
#   {"ok": False, "value": None, "error": {"code": str, "message": str}}
# unwrap(result) returns the value or raises. A call may wait for a human's
# approval; a refusal (e.g. "approval_denied") is a value: read error["code"]. `input` holds the run's input.
# call(name, args) reaches any tool by name; call_async(...) with
# asyncio.gather runs calls together:
#   import asyncio
#   a, b = await asyncio.gather(call_async("t1", {...}), call_async("t2", {...}))
# The value of the script's last expression is its result.
from typing import Any, Literal

# What every function returns: {"ok": bool, "value": Any, "error": Failure | None}
Result = dict
# A failure: {"code": str, "message": str}
Failure = dict
"#;

/// Python's keywords: never a function or parameter name.
const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

/// Names the script already has; a tool of that name is reached with `call`.
const RESERVED: &[&str] = &["call", "call_async", "unwrap", "input"];

/// The modules monty reserves (`monty_types::SANDBOX_MODULE_NAMES`, checked
/// equal in a test): the Python runtime gives a tool of such a name no
/// function (`guest-sdk/python/src/api.rs`, `gets_function`), so neither
/// does its stub.
const MODULE_NAMES: &[&str] = &[
    "asyncio",
    "base64",
    "binascii",
    "bisect",
    "collections",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "functools",
    "gc",
    "hashlib",
    "itertools",
    "json",
    "math",
    "os",
    "pathlib",
    "posixpath",
    "random",
    "re",
    "sys",
    "time",
    "tomllib",
    "typing",
    "unicodedata",
];

/// The Python minor version whose builtins the runtime keeps: monty's (3.14).
const PYTHON_MINOR: u8 = 14;

/// True when the script has a function named `name` for the tool: the
/// same rule as the Python runtime's (`gets_function`). A tool named like a
/// builtin (`max`, `list`), a module or a name the script already has is
/// reached with `call()` only.
fn gets_function(name: &str) -> bool {
    is_name(name)
        && !RESERVED.contains(&name)
        && !MODULE_NAMES.contains(&name)
        && !ruff_python_stdlib::builtins::is_python_builtin(name, PYTHON_MINOR, false)
}

/// The Python stubs for `tools`, in their order.
pub fn python_stubs(tools: &[ToolSpec]) -> String {
    let mut out = String::from(PREAMBLE);
    for tool in tools {
        out.push_str("\n\n");
        write_tool(&mut out, tool);
    }
    out
}

fn write_tool(out: &mut String, tool: &ToolSpec) {
    let types = Types { root: &tool.input_schema };
    let params = Params::of(&types);
    let returns =
        tool.output_schema.as_ref().map_or_else(|| "Any".to_owned(), |schema| Types { root: schema }.shape(schema));
    let doc = doc_text(tool, &params, &returns);
    if gets_function(&tool.name) && params.all_named {
        let _ = writeln!(out, "def {}({}) -> Result:", tool.name, params.signature());
        // A docstring that cannot end early: no triple quotes or backslashes inside.
        let quoted = doc.replace('\\', "\\\\").replace("\"\"\"", "'''").replace('\n', "\n    ");
        let _ = writeln!(out, "    \"\"\"{quoted}\n    \"\"\"");
        out.push_str("    ...\n");
    } else {
        // Not a Python name (or its arguments aren't): no function of it
        // exists in the script, so it is shown only as the call it takes.
        let _ = writeln!(out, "# {:?} is reached only with call():", tool.name);
        let _ = writeln!(out, "#   call({:?}, {}) -> Result", tool.name, params.as_dict());
        for line in doc.lines() {
            let _ = writeln!(out, "#   {line}");
        }
    }
}

/// The tool's documentation: the description, each argument's (with the
/// shape of a structured argument), and the value's type.
fn doc_text(tool: &ToolSpec, params: &Params, returns: &str) -> String {
    let mut text = tool.description.trim().to_owned();
    let documented: Vec<_> = params.list.iter().filter(|p| !p.description.is_empty() || p.shape.is_some()).collect();
    if !documented.is_empty() {
        text.push_str("\n\nArgs:");
        for param in documented {
            let _ = write!(text, "\n    {}: {}", param.name, param.description.trim());
            if let Some(shape) = &param.shape {
                let _ = write!(text, "{}shape {shape}", if param.description.trim().is_empty() { "" } else { "; " });
            }
        }
    }
    let _ = write!(text, "\n\nValue (result[\"value\"] when ok): {returns}");
    if tool.meta.approval == ApprovalRequirement::Always {
        text.push_str(
            "\nAsks a human to approve the exact arguments first; a denial is error code \"approval_denied\".",
        );
    }
    if !tool.meta.read_only {
        text.push_str("\nHas effects: do not repeat a call that succeeded.");
    }
    text
}

struct Param {
    name: String,
    ty: String,
    required: bool,
    description: String,
    /// The fields of a structured argument, when its type alone hides them.
    shape: Option<String>,
}

struct Params {
    list: Vec<Param>,
    /// Every argument is a Python name, so keyword parameters can carry it.
    all_named: bool,
}

impl Params {
    fn of(types: &Types<'_>) -> Params {
        let schema = types.resolve(types.root);
        let required: Vec<&str> =
            schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        let list: Vec<Param> = schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(name, property)| {
                let ty = types.python_type(property);
                let shape = Some(types.shape(property)).filter(|shape| shape.contains('{'));
                Param {
                    name: name.clone(),
                    ty,
                    required: required.contains(&name.as_str()),
                    description: property.get("description").and_then(Value::as_str).unwrap_or_default().to_owned(),
                    shape,
                }
            })
            .collect();
        let all_named = list.iter().all(|p| is_name(&p.name));
        Params { list, all_named }
    }

    /// `*, a: str, b: int | None = None` — required first, keywords only.
    fn signature(&self) -> String {
        if self.list.is_empty() {
            return String::new();
        }
        let required = self.list.iter().filter(|p| p.required).map(|p| format!("{}: {}", p.name, p.ty));
        let optional = self.list.iter().filter(|p| !p.required).map(|p| {
            let nullable = p.ty.split(" | ").any(|ty| ty == "None");
            format!("{}: {}{} = None", p.name, p.ty, if nullable { "" } else { " | None" })
        });
        let params: Vec<String> = required.chain(optional).collect();
        format!("*, {}", params.join(", "))
    }

    /// `{"a": str, "b": int (optional)}`: the arguments as the dict `call` takes.
    fn as_dict(&self) -> String {
        let fields: Vec<String> = self
            .list
            .iter()
            .map(|p| format!("{:?}: {}{}", p.name, p.ty, if p.required { "" } else { " (optional)" }))
            .collect();
        format!("{{{}}}", fields.join(", "))
    }
}

/// How deep `$ref`s and nested shapes are followed: a recursive model ends
/// as `Any` rather than looping.
const MAX_DEPTH: usize = 8;

/// How many levels of nested fields a shape shows: enough for a model's
/// arguments, short for a recursive one.
const SHAPE_DEPTH: usize = 3;

/// Python types of the schemas inside one root schema, whose `$defs` (or
/// `definitions`) a `$ref` names.
struct Types<'a> {
    root: &'a Value,
}

impl<'a> Types<'a> {
    /// `schema`, or what its local `$ref` (`#/$defs/Name`) points to.
    fn resolve(&self, schema: &'a Value) -> &'a Value {
        let mut schema = schema;
        for _ in 0..MAX_DEPTH {
            let Some(pointer) = schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix('#')) else {
                return schema;
            };
            match self.root.pointer(pointer) {
                Some(target) => schema = target,
                None => return schema,
            }
        }
        schema
    }

    /// The Python type of a JSON Schema (the common subset; anything else is `Any`).
    fn python_type(&self, schema: &Value) -> String {
        self.type_at(schema, 0)
    }

    fn type_at(&self, schema: &Value, depth: usize) -> String {
        if depth > MAX_DEPTH {
            return "Any".to_owned();
        }
        let schema = self.resolve(schema);
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            let literals: Vec<String> = values.iter().filter_map(python_literal).collect();
            if literals.len() == values.len() && !literals.is_empty() {
                return format!("Literal[{}]", literals.join(", "));
            }
        }
        if let Some(options) = schema.get("anyOf").or_else(|| schema.get("oneOf")).and_then(Value::as_array) {
            return union(options.iter().map(|option| self.type_at(option, depth + 1)));
        }
        match schema.get("type") {
            Some(Value::String(ty)) => self.json_type(ty, schema, depth),
            Some(Value::Array(types)) => {
                union(types.iter().filter_map(Value::as_str).map(|ty| self.json_type(ty, schema, depth)))
            }
            None if schema.get("properties").is_some() => "dict[str, Any]".to_owned(),
            _ => "Any".to_owned(),
        }
    }

    fn json_type(&self, ty: &str, schema: &Value, depth: usize) -> String {
        match ty {
            "string" => "str".to_owned(),
            "integer" => "int".to_owned(),
            "number" => "float".to_owned(),
            "boolean" => "bool".to_owned(),
            "null" => "None".to_owned(),
            "array" => format!(
                "list[{}]",
                schema.get("items").map_or_else(|| "Any".to_owned(), |items| self.type_at(items, depth + 1))
            ),
            "object" => match schema.get("additionalProperties") {
                Some(values) if values.is_object() && schema.get("properties").is_none() => {
                    format!("dict[str, {}]", self.type_at(values, depth + 1))
                }
                _ => "dict[str, Any]".to_owned(),
            },
            _ => "Any".to_owned(),
        }
    }

    /// A value's shape for the docstring: objects with known fields as the
    /// dict the model will read (`{"ends": str, "owner": str}`), lists of
    /// them as `list[{...}]`, anything else as its Python type.
    fn shape(&self, schema: &Value) -> String {
        self.shape_at(schema, 0)
    }

    fn shape_at(&self, schema: &Value, depth: usize) -> String {
        if depth > SHAPE_DEPTH {
            return "Any".to_owned();
        }
        let schema = self.resolve(schema);
        if let Some(fields) = schema.get("properties").and_then(Value::as_object).filter(|fields| !fields.is_empty()) {
            let fields: Vec<String> =
                fields.iter().map(|(name, field)| format!("{name:?}: {}", self.shape_at(field, depth + 1))).collect();
            return format!("{{{}}}", fields.join(", "));
        }
        if let Some(options) = schema.get("anyOf").or_else(|| schema.get("oneOf")).and_then(Value::as_array) {
            return union(options.iter().map(|option| self.shape_at(option, depth + 1)));
        }
        match (schema.get("type").and_then(Value::as_str), schema.get("items"), schema.get("additionalProperties")) {
            (Some("array"), Some(items), _) => format!("list[{}]", self.shape_at(items, depth + 1)),
            (Some("object"), _, Some(values)) if values.is_object() => {
                format!("dict[str, {}]", self.shape_at(values, depth + 1))
            }
            _ => self.type_at(schema, depth),
        }
    }
}

fn union(types: impl Iterator<Item = String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for ty in types {
        if !seen.contains(&ty) {
            seen.push(ty);
        }
    }
    match seen.len() {
        0 => "Any".to_owned(),
        _ => seen.join(" | "),
    }
}

fn python_literal(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(format!("{s:?}")),
        Value::Bool(true) => Some("True".to_owned()),
        Value::Bool(false) => Some("False".to_owned()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null => Some("None".to_owned()),
        _ => None,
    }
}

/// A Python identifier that is not a keyword and not private-looking.
fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    starts_well
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
        && !KEYWORDS.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ToolMeta;
    use serde_json::json;

    fn contract_tool() -> ToolSpec {
        ToolSpec::new(
            "get_contract",
            "A customer's contract.",
            json!({
                "type": "object",
                "properties": {
                    "customer_id": {"type": "string", "description": "the customer's id"},
                    "fields": {"type": "array", "items": {"type": "string", "enum": ["ends", "owner"]}},
                    "limit": {"type": ["integer", "null"]}
                },
                "required": ["customer_id"]
            }),
        )
        .output_schema(json!({"type": "object", "properties": {"ends": {"type": "string"}}}))
        .meta(ToolMeta { read_only: true, ..ToolMeta::default() })
    }

    #[test]
    fn a_tool_named_like_a_builtin_or_a_module_is_shown_as_the_call_it_takes() {
        let named = |name: &str| ToolSpec::new(name, "Does it.", json!({"type": "object", "properties": {}}));
        let stubs = python_stubs(&[named("max"), named("list"), named("math"), named("heap_top"), named("input")]);
        for reached_by_call in ["max", "list", "math", "input"] {
            assert!(!stubs.contains(&format!("def {reached_by_call}(")), "{stubs}");
            assert!(stubs.contains(&format!("# \"{reached_by_call}\" is reached only with call():")), "{stubs}");
        }
        assert!(stubs.contains("def heap_top() -> Result:"), "{stubs}");
    }

    #[test]
    fn the_module_names_are_monty_s_own() {
        assert_eq!(MODULE_NAMES, monty_types::SANDBOX_MODULE_NAMES);
    }

    #[test]
    fn a_tool_becomes_a_function_with_typed_keyword_parameters_and_its_value_type() {
        let stubs = python_stubs(&[contract_tool()]);
        assert!(
            stubs.contains(
                "def get_contract(*, customer_id: str, fields: list[Literal[\"ends\", \"owner\"]] | None = None, limit: int | None = None) -> Result:"
            ),
            "{stubs}"
        );
        assert!(stubs.contains("customer_id: the customer's id"), "{stubs}");
        assert!(stubs.contains("Value (result[\"value\"] when ok): {\"ends\": str}"), "{stubs}");
        assert!(!stubs.contains("Has effects"), "a read-only tool: {stubs}");
    }

    #[test]
    fn names_python_cannot_carry_are_shown_as_calls_and_docstrings_cannot_break_out() {
        let odd = ToolSpec::new("list-items", "Lists \"\"\" items\nper page", json!({"type": "object"}));
        let keyword_arg = ToolSpec::new("find", "", json!({"properties": {"from": {"type": "string"}}}));
        let escaping = ToolSpec::new("note", "Ends \"\"\" here \\ and", json!({"type": "object"}));
        let stubs = python_stubs(&[odd, keyword_arg, escaping]);
        assert!(
            stubs.contains("# \"list-items\" is reached only with call():\n#   call(\"list-items\", {}) -> Result\n"),
            "{stubs}"
        );
        assert!(stubs.contains("#   Lists \"\"\" items\n#   per page\n"), "every line of it is a comment: {stubs}");
        assert!(!stubs.contains("def _tool"), "no function the script does not have: {stubs}");
        assert!(
            stubs.contains("#   call(\"find\", {\"from\": str (optional)}) -> Result"),
            "an argument named `from` cannot be a parameter: {stubs}"
        );
        assert!(stubs.contains("Ends ''' here \\\\ and"), "{stubs}");
        assert!(stubs.contains("Has effects"), "{stubs}");
    }

    #[test]
    fn nested_types_survive_refs_maps_and_lists_of_models() {
        // What pydantic makes of `(labels: Dict[str, str], lines: List[Line], to: Address, tree: Node = None)`.
        let tool = ToolSpec::new(
            "order",
            "",
            json!({
                "type": "object",
                "properties": {
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
                    "to": {"$ref": "#/$defs/Address", "description": "where it goes"},
                    "tree": {"$ref": "#/$defs/Node"}
                },
                "required": ["labels", "lines", "to"],
                "$defs": {
                    "Line": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}},
                    "Address": {"type": "object", "properties": {"city": {"type": "string"}}},
                    "Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}
                }
            }),
        );
        let stubs = python_stubs(&[tool]);
        assert!(
            stubs.contains(
                "def order(*, labels: dict[str, str], lines: list[dict[str, Any]], to: dict[str, Any], tree: dict[str, Any] | None = None)"
            ),
            "{stubs}"
        );
        assert!(stubs.contains("lines: shape list[{\"qty\": int, \"sku\": str}]"), "{stubs}");
        assert!(stubs.contains("to: where it goes; shape {\"city\": str}"), "{stubs}");
        assert!(stubs.contains("tree: shape {\"child\": {\"child\":"), "a recursive model ends: {stubs}");
    }
}
