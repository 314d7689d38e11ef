//! The JSON documents of the `tether_v1` ABI, shared by guests and the host.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// The deepest nesting of a JSON value (an input or a tool result) the host
/// hands a guest. Documents wrap values a few levels deeper, and serde_json
/// reads at most 128, so a guest can always read what it is given.
pub const MAX_DEPTH: usize = 100;

/// How deeply `value` nests: 1 for a scalar, one more per array or object.
pub fn depth(value: &Value) -> usize {
    // Iterative, so a hostile value cannot overflow the stack measuring it.
    let mut deepest = 0;
    let mut stack = vec![(value, 1)];
    while let Some((value, level)) = stack.pop() {
        deepest = deepest.max(level);
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, level + 1))),
            Value::Object(map) => stack.extend(map.values().map(|v| (v, level + 1))),
            _ => {}
        }
    }
    deepest
}

/// What the host hands a guest at the start of a run (`tether_v1.start`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartDoc {
    /// The ABI version the host speaks; a guest should refuse one it does not know.
    pub abi: u32,
    /// The runtime name the backend asked for, e.g. `"python"`.
    pub language: String,
    /// The script source.
    pub source: String,
    /// The run's input value (`null` when the backend gave none).
    #[serde(default)]
    pub input: Value,
    /// The tools the script may call: the turn's list as the model sees it,
    /// less what a script may not call.
    #[serde(default)]
    pub tools: Vec<ToolDoc>,
}

/// One tool of the turn as the start document lists it for the guest.
///
/// The same tool has two other forms: `tether_turn::ToolSpec` (the turn's,
/// with its metadata and schemas as JSON values) and `pb::ToolSpec` (the
/// gRPC contract's, which the sidecar turns into this).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDoc {
    /// The tool's name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of its arguments.
    #[serde(default)]
    pub input_schema: ToolSchema,
}

/// A tool's JSON Schema as JSON text, as the backend gave it.
///
/// Kept as text, so a guest that never reads the schemas (the Python runtime)
/// only checks that they are JSON instead of building a tree of every tool's
/// schema at the start of every run: MCP tools bring schemas of kilobytes.
/// [`ToolSchema::parse`] gives the tree to a guest that wants it. Two schemas
/// are equal when their text is.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ToolSchema(Box<RawValue>);

impl ToolSchema {
    /// The schema whose JSON text is `json`.
    ///
    /// # Errors
    /// If `json` is not one valid JSON value.
    pub fn from_json(json: String) -> Result<ToolSchema, serde_json::Error> {
        RawValue::from_string(json).map(ToolSchema)
    }

    /// The schema's JSON text.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    /// The schema as a JSON value.
    ///
    /// # Errors
    /// If the schema nests deeper than serde_json reads (128 levels).
    pub fn parse(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }
}

impl From<&Value> for ToolSchema {
    fn from(schema: &Value) -> ToolSchema {
        // A `Value` always serializes (its keys are strings) to valid JSON.
        ToolSchema::from_json(schema.to_string()).unwrap_or_default()
    }
}

/// `null`: what a start document without a schema means.
impl Default for ToolSchema {
    fn default() -> ToolSchema {
        ToolSchema(RawValue::NULL.to_owned())
    }
}

impl PartialEq for ToolSchema {
    fn eq(&self, other: &ToolSchema) -> bool {
        self.as_json() == other.as_json()
    }
}

/// One call inside a batch sent with `tether_v1.call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRequest {
    /// The tool to call.
    pub name: String,
    /// Its arguments, a JSON object.
    #[serde(default = "empty_object")]
    pub args: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// The request document of `tether_v1.call`: one or more calls made together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallBatch {
    /// The calls, answered in the same order.
    pub calls: Vec<CallRequest>,
}

/// The response document of `tether_v1.call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallResults {
    /// One result per call of the batch, in order.
    pub results: Vec<CallResult>,
}

/// The result of one tool call: a value on success, a [`Failure`] otherwise.
///
/// Refusals, denied approvals, tool errors and cancellations all arrive as
/// `Err`: a value the script branches on, never a trap. On the wire it is
/// `{"ok": true, "value": …}` or `{"ok": false, "error": {"code": …, "message": …}}`.
#[derive(Debug, Clone, PartialEq)]
pub enum CallResult {
    /// The tool ran and returned this value.
    Ok(Value),
    /// The call produced no value, and why.
    Err(Failure),
}

/// Why a call produced no value, as the guest reads it.
///
/// The same failure has two other forms: `tether_turn::Failure` (the turn's,
/// with a typed [`Code`](tether_codes::Code) and the step that decided it) and
/// `pb::Failure` (the gRPC contract's, code and message as here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// A stable machine code, e.g. `"tool_not_found"`, `"approval_denied"`:
    /// one of [`tether_codes::Code`], or a tool's own code.
    pub code: String,
    /// A human-readable reason.
    pub message: String,
}

impl From<&tether_codes::Reason> for Failure {
    fn from(reason: &tether_codes::Reason) -> Self {
        Failure { code: reason.code().as_str().to_owned(), message: reason.message() }
    }
}

impl Serialize for CallResult {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let result = match self {
            CallResult::Ok(value) => Ok(value),
            CallResult::Err(failure) => Err(failure),
        };
        OkOrError::borrowing(result).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CallResult {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match OkOrError::read(deserializer, "call result")? {
            Ok(value) => CallResult::Ok(value),
            Err(failure) => CallResult::Err(failure),
        })
    }
}

/// Reads the response document of `tether_v1.call` for a batch of `count`
/// calls, as a guest does: always exactly `count` results, in order. A
/// document the guest cannot read fails every call with `invalid_result`;
/// one with too few results fails the calls it lacks with `missing_result`
/// (and results past `count` are dropped). A bad answer fails these calls,
/// never the whole run.
pub fn read_results(document: &[u8], count: usize) -> Vec<CallResult> {
    let mut results = match serde_json::from_slice::<CallResults>(document) {
        Ok(results) => results.results,
        Err(error) => {
            let message = format!("the host sent a result this guest cannot read: {error}");
            let failure = Failure { code: tether_codes::Code::InvalidResult.as_str().into(), message };
            vec![CallResult::Err(failure); count]
        }
    };
    results.resize_with(count, || CallResult::Err(Failure::from(&tether_codes::Reason::MissingResult)));
    results
}

/// How a script ended, reported once with `tether_v1.finish`.
///
/// On the wire `{"ok": true, "value": …}` or `{"ok": false, "error": {…}}`.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The script completed with this result.
    Ok(Value),
    /// The script failed.
    Err(ScriptError),
}

/// A script's failure, as a guest reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ScriptError {
    /// `"syntax_error"`, `"runtime_error"`, or another kind the guest defines.
    pub kind: String,
    /// One line saying what went wrong.
    pub message: String,
    /// The language's exception type, e.g. `"ZeroDivisionError"`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub exception_type: String,
    /// The traceback, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub traceback: String,
    /// The 1-based script line the error points at; 0 when unknown.
    #[serde(default)]
    pub line: u32,
    /// For a limit the guest itself enforces: the limit's name (e.g. "sleep_ms"); empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub limit: String,
}

impl Serialize for Outcome {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let result = match self {
            Outcome::Ok(value) => Ok(value),
            Outcome::Err(error) => Err(error),
        };
        OkOrError::borrowing(result).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match OkOrError::read(deserializer, "outcome")? {
            Ok(value) => Outcome::Ok(value),
            Err(error) => Outcome::Err(error),
        })
    }
}

/// The one wire form of a value or an error, [`CallResult`]'s and
/// [`Outcome`]'s: `{"ok": true, "value": …}` or `{"ok": false, "error": …}`.
/// Serialized from borrows (`V`, `E` are references), so a large value is not
/// copied to be written.
#[derive(Serialize, Deserialize)]
// Without this, `default` on the fields would ask `V` and `E` for `Default`.
#[serde(bound(deserialize = "V: Deserialize<'de>, E: Deserialize<'de>"))]
struct OkOrError<V, E> {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<V>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<E>,
}

impl<'a, E> OkOrError<&'a Value, &'a E> {
    /// The form that writes `result`.
    fn borrowing(result: Result<&'a Value, &'a E>) -> Self {
        match result {
            Ok(value) => OkOrError { ok: true, value: Some(value), error: None },
            Err(error) => OkOrError { ok: false, value: None, error: Some(error) },
        }
    }
}

impl<E> OkOrError<Value, E> {
    /// Reads the form: with `"ok": true` the value (`null` when absent; an
    /// `error` beside it must read, and is dropped), with `"ok": false` the
    /// error, which must be there. `what` names the document in that error.
    fn read<'de, D>(deserializer: D, what: &str) -> Result<Result<Value, E>, D::Error>
    where
        D: serde::Deserializer<'de>,
        E: Deserialize<'de>,
    {
        let wire = OkOrError::<Value, E>::deserialize(deserializer)?;
        match (wire.ok, wire.error) {
            (true, _) => Ok(Ok(wire.value.unwrap_or(Value::Null))),
            (false, Some(error)) => Ok(Err(error)),
            (false, None) => Err(serde::de::Error::custom(format_args!("a failed {what} needs `error`"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn call_result_wire_shape() {
        let ok = CallResult::Ok(json!({"id": 7}));
        assert_eq!(serde_json::to_value(&ok).unwrap(), json!({"ok": true, "value": {"id": 7}}));
        let err = CallResult::Err(Failure { code: "policy_denied".into(), message: "no".into() });
        let wire = serde_json::to_value(&err).unwrap();
        assert_eq!(wire, json!({"ok": false, "error": {"code": "policy_denied", "message": "no"}}));
        assert_eq!(serde_json::from_value::<CallResult>(wire).unwrap(), err);
    }

    #[test]
    fn outcome_wire_shape() {
        let ok = Outcome::Ok(json!([1, "two"]));
        assert_eq!(serde_json::to_value(&ok).unwrap(), json!({"ok": true, "value": [1, "two"]}));
        let null = serde_json::to_value(Outcome::Ok(Value::Null)).unwrap();
        assert_eq!(null, json!({"ok": true, "value": null}));
        assert_eq!(serde_json::from_value::<Outcome>(json!({"ok": true})).unwrap(), Outcome::Ok(Value::Null));
        let error = ScriptError { kind: "runtime_error".into(), message: "boom".into(), line: 3, ..Default::default() };
        let wire = serde_json::to_value(Outcome::Err(error.clone())).unwrap();
        assert_eq!(wire, json!({"ok": false, "error": {"kind": "runtime_error", "message": "boom", "line": 3}}));
        assert_eq!(serde_json::from_value::<Outcome>(wire).unwrap(), Outcome::Err(error));
    }

    #[test]
    fn a_tool_schema_travels_as_json_text_and_parses_on_demand() {
        let document = br#"{"abi":1,"language":"python","source":"1","tools":[
            {"name":"a","input_schema":{"type":"object","properties":{"x":{"type":"integer"}}}},
            {"name":"b"}]}"#;
        let doc: StartDoc = serde_json::from_slice(document).unwrap();
        let schema = &doc.tools[0].input_schema;
        assert_eq!(schema.as_json(), r#"{"type":"object","properties":{"x":{"type":"integer"}}}"#);
        assert_eq!(schema.parse().unwrap(), json!({"type": "object", "properties": {"x": {"type": "integer"}}}));
        assert_eq!(doc.tools[1].input_schema.parse().unwrap(), Value::Null, "no schema reads as null");
        // Written back as the same JSON, not as a string.
        let again: Value = serde_json::to_value(&doc).unwrap();
        assert_eq!(again["tools"][0]["input_schema"]["properties"]["x"]["type"], "integer");
        assert_eq!(ToolSchema::from(&json!({"type": "object"})).as_json(), r#"{"type":"object"}"#);
        assert!(ToolSchema::from_json("{".into()).is_err());
        assert!(
            serde_json::from_slice::<StartDoc>(
                br#"{"abi":1,"language":"p","source":"","tools":[{"name":"a","input_schema":{]}"#
            )
            .is_err()
        );
    }

    #[test]
    fn failed_result_without_error_is_rejected() {
        assert!(serde_json::from_value::<CallResult>(json!({"ok": false})).is_err());
        assert!(serde_json::from_value::<Outcome>(json!({"ok": false})).is_err());
    }

    #[test]
    fn read_results_always_gives_one_result_per_call() {
        let document = serde_json::to_vec(&CallResults { results: vec![CallResult::Ok(json!(1))] }).unwrap();
        assert_eq!(read_results(&document, 1), vec![CallResult::Ok(json!(1))]);
        let short = read_results(&document, 2);
        assert_eq!(short[1], CallResult::Err(Failure::from(&tether_codes::Reason::MissingResult)));
        assert_eq!(read_results(&document, 0), vec![], "results past the batch are dropped");
        let unreadable = read_results(b"{\"results\": 7}", 2);
        assert_eq!(unreadable.len(), 2);
        assert!(
            unreadable.iter().all(|r| matches!(r, CallResult::Err(f) if f.code == "invalid_result")),
            "{unreadable:?}"
        );
    }

    #[test]
    fn depth_counts_nesting() {
        assert_eq!(depth(&json!(1)), 1);
        assert_eq!(depth(&json!({"a": [1, {"b": []}]})), 4);
    }

    #[test]
    fn call_request_args_default_to_empty_object() {
        let request: CallRequest = serde_json::from_value(json!({"name": "list"})).unwrap();
        assert_eq!(request.args, json!({}));
    }
}
