//! The JSON documents of the `tether_v1` ABI, shared by guests and the host.

use base64::Engine as _;
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
    /// Set when this start resumes a parked run: the guest goes on from its
    /// state instead of starting the script from the top. `source`, `input`
    /// and `tools` are then those of the run's first start. Absent (and not
    /// written) for a fresh run, so a start document without it reads as one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Resume>,
}

/// What a resuming start hands the guest: the state it parked with and the
/// answer to the batch it was waiting on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    /// The guest's own parked state, exactly the bytes it gave `park`, in
    /// base64 (standard alphabet, padded). Opaque to the host.
    pub state: String,
    /// One result per call of the batch the guest parked on, in the batch's
    /// order: what `call` would have answered had the guest waited.
    pub results: Vec<CallResult>,
}

impl Resume {
    /// The resume of a run parked with `state`, answered with `results`.
    pub fn new(state: &[u8], results: Vec<CallResult>) -> Resume {
        Resume { state: base64::engine::general_purpose::STANDARD.encode(state), results }
    }

    /// The state bytes, as the guest gave them to `park`.
    ///
    /// # Errors
    /// If `state` is not padded standard base64: the host did not write it.
    pub fn state_bytes(&self) -> Result<Vec<u8>, StateNotBase64> {
        base64::engine::general_purpose::STANDARD.decode(&self.state).map_err(StateNotBase64)
    }
}

/// A [`Resume::state`] that is not padded standard base64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateNotBase64(base64::DecodeError);

impl std::fmt::Display for StateNotBase64 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the parked state is not base64: {}", self.0)
    }
}

impl std::error::Error for StateNotBase64 {}

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

/// What the host asks of a guest instead of answering its batch: to park.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkAsk {
    /// The largest state, in bytes, the host takes from `park`; a larger
    /// one is declined and the host goes on waiting on the batch.
    pub max_bytes: u64,
}

/// The response document of `tether_v1.call` that asks the guest to park:
/// `{"park": {"max_bytes": N}}`. The host sends it only to a guest that
/// declares [`PARKS_SECTION`](crate::PARKS_SECTION); the guest answers with
/// `tether_v1.park`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkDoc {
    /// The ask.
    pub park: ParkAsk,
}

/// The response document of `tether_v1.call`, either form: the batch's
/// results, or the host's ask to park. On the wire `{"results": [...]}` or
/// `{"park": {"max_bytes": N}}`; a document with both or neither is not one.
#[derive(Debug, Clone, PartialEq)]
pub enum CallAnswer {
    /// One result per call of the batch, in order.
    Results(Vec<CallResult>),
    /// Park instead of waiting: hand `tether_v1.park` a state of at most
    /// `max_bytes` bytes.
    Park {
        /// The largest state the host takes.
        max_bytes: u64,
    },
}

/// The one wire form of a [`CallAnswer`]: exactly one of the two fields.
#[derive(Serialize, Deserialize)]
struct CallAnswerWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    results: Option<Vec<CallResult>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    park: Option<ParkAsk>,
}

impl Serialize for CallAnswer {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(untagged)]
        enum Borrowed<'a> {
            Results { results: &'a [CallResult] },
            Park { park: ParkAsk },
        }
        match self {
            CallAnswer::Results(results) => Borrowed::Results { results },
            CallAnswer::Park { max_bytes } => Borrowed::Park { park: ParkAsk { max_bytes: *max_bytes } },
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CallAnswer {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match CallAnswerWire::deserialize(deserializer)? {
            CallAnswerWire { results: Some(results), park: None } => Ok(CallAnswer::Results(results)),
            CallAnswerWire { results: None, park: Some(ask) } => Ok(CallAnswer::Park { max_bytes: ask.max_bytes }),
            CallAnswerWire { results: Some(_), park: Some(_) } => {
                Err(serde::de::Error::custom("a call answer has `results` or `park`, not both"))
            }
            CallAnswerWire { results: None, park: None } => Err(serde::de::Error::missing_field("results")),
        }
    }
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
/// calls, as a guest that does not park does: always exactly `count`
/// results, in order. A document the guest cannot read fails every call with
/// `invalid_result`; one with too few results fails the calls it lacks with
/// `missing_result` (and results past `count` are dropped). A bad answer
/// fails these calls, never the whole run. An ask to park, which only a guest
/// that declares [`PARKS_SECTION`](crate::PARKS_SECTION) gets, is such a bad
/// answer here.
pub fn read_results(document: &[u8], count: usize) -> Vec<CallResult> {
    match read_answer(document, count) {
        CallAnswer::Results(results) => results,
        CallAnswer::Park { .. } => {
            unreadable(count, "the host asked this guest to park, and it does not declare `tether_v1.parks`".to_owned())
        }
    }
}

/// Reads the response document of `tether_v1.call` for a batch of `count`
/// calls, as a guest that parks does: an ask to park, or exactly `count`
/// results in order, read as [`read_results`] reads them (an unreadable
/// document fails every call with `invalid_result`, missing results fail
/// with `missing_result`, extra ones are dropped). Never fails the run.
pub fn read_answer(document: &[u8], count: usize) -> CallAnswer {
    match serde_json::from_slice::<CallAnswer>(document) {
        Ok(CallAnswer::Results(mut results)) => {
            results.resize_with(count, || CallResult::Err(Failure::from(&tether_codes::Reason::MissingResult)));
            CallAnswer::Results(results)
        }
        Ok(park @ CallAnswer::Park { .. }) => park,
        Err(error) => CallAnswer::Results(unreadable(count, error.to_string())),
    }
}

/// `count` results failed with `invalid_result`, saying `why`.
fn unreadable(count: usize, why: String) -> Vec<CallResult> {
    let message = format!("the host sent a result this guest cannot read: {why}");
    let failure = Failure { code: tether_codes::Code::InvalidResult.as_str().into(), message };
    vec![CallResult::Err(failure); count]
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
    fn read_answer_reads_results_as_read_results_does() {
        let document = serde_json::to_vec(&CallResults { results: vec![CallResult::Ok(json!(1))] }).unwrap();
        for count in [0, 1, 2] {
            assert_eq!(read_answer(&document, count), CallAnswer::Results(read_results(&document, count)));
        }
        for unreadable in [&b"{\"results\": 7}"[..], b"{}", b"[]", b"not json"] {
            let CallAnswer::Results(results) = read_answer(unreadable, 2) else { panic!("a park from {unreadable:?}") };
            assert_eq!(results, read_results(unreadable, 2));
            assert!(results.iter().all(|r| matches!(r, CallResult::Err(f) if f.code == "invalid_result")));
        }
    }

    #[test]
    fn read_answer_reads_an_ask_to_park() {
        let ask = serde_json::to_vec(&ParkDoc { park: ParkAsk { max_bytes: 65_536 } }).unwrap();
        assert_eq!(ask, br#"{"park":{"max_bytes":65536}}"#);
        assert_eq!(read_answer(&ask, 3), CallAnswer::Park { max_bytes: 65_536 });
        assert_eq!(serde_json::to_vec(&CallAnswer::Park { max_bytes: 65_536 }).unwrap(), ask);
        // A guest that does not park fails its calls instead.
        let refused = read_results(&ask, 2);
        assert!(refused.iter().all(|r| matches!(r, CallResult::Err(f) if f.code == "invalid_result")), "{refused:?}");
        // Both forms at once is neither.
        let both = br#"{"results": [], "park": {"max_bytes": 1}}"#;
        assert!(matches!(read_answer(both, 1), CallAnswer::Results(r) if matches!(&r[0], CallResult::Err(_))));
        let results = CallAnswer::Results(vec![CallResult::Ok(json!(2))]);
        assert_eq!(serde_json::to_value(&results).unwrap(), json!({"results": [{"ok": true, "value": 2}]}));
    }

    #[test]
    fn a_resume_carries_the_state_as_base64() {
        let state = [0u8, 1, 2, 250, 251, 255];
        let resume = Resume::new(&state, vec![CallResult::Ok(json!("done"))]);
        assert_eq!(resume.state, "AAEC+vv/", "standard alphabet, padded");
        assert_eq!(resume.state_bytes().unwrap(), state);
        let bad = Resume { state: "AAEC-vv_".into(), results: vec![] };
        assert!(bad.state_bytes().unwrap_err().to_string().starts_with("the parked state is not base64"));
        let unpadded = Resume { state: "AAE".into(), results: vec![] };
        assert!(unpadded.state_bytes().is_err());

        let fresh = StartDoc {
            abi: 1,
            language: "python".into(),
            source: "1".into(),
            input: Value::Null,
            tools: vec![],
            resume: None,
        };
        let wire = serde_json::to_value(&fresh).unwrap();
        assert!(wire.get("resume").is_none(), "a fresh start writes no `resume`: {wire}");
        let resuming = StartDoc { resume: Some(resume.clone()), ..fresh };
        let wire = serde_json::to_value(&resuming).unwrap();
        assert_eq!(wire["resume"], json!({"state": "AAEC+vv/", "results": [{"ok": true, "value": "done"}]}));
        assert_eq!(serde_json::from_value::<StartDoc>(wire).unwrap().resume, Some(resume));
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
