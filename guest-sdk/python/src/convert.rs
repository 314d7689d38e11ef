//! Conversion between JSON values and monty's Python values.
//!
//! JSON → Python is total: null, bool, int, float, str, list and dict all have
//! a Python twin. Python → JSON accepts the same types plus tuples (as lists)
//! and refuses everything else, so a tool never receives a value the script
//! did not mean to send (a function, a set, a class instance).

use std::fmt;

use monty_types::{
    MontyObject, ObjectRef,
    unstable::{MontyNode, child, node},
};
use num_bigint::BigInt;
use serde_json::{Map, Number, Value};
use tether_guest::CallResult;

/// The deepest nesting a Python value may have to become JSON.
///
/// The host reads call batches with serde_json, which refuses documents nested
/// deeper than 128 levels; the batch envelope takes three of them. Stopping
/// here gives the script a clean exception instead of a batch the host cannot
/// read, and keeps this recursive walk far from the Wasm stack's end.
pub const MAX_DEPTH: usize = 100;

/// The most JSON values one conversion may produce.
///
/// monty's values are DAGs: `a = [a, a]` twenty times over is a small heap but
/// a JSON tree of a million nodes, and fifty times over an impossible one. This
/// budget turns such a value into an error instead of an out-of-memory trap.
pub const MAX_NODES: usize = 5_000_000;

/// Why a Python value has no JSON form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConvertError {
    /// A value of a type JSON cannot hold, e.g. a function or a set.
    Unsupported(String),
    /// A dict key that is not a string.
    NonStringKey(String),
    /// `nan` or an infinity.
    NonFiniteFloat(String),
    /// An int outside the range JSON tools can read back exactly.
    IntTooLarge,
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// More than [`MAX_NODES`] values once shared sub-values are expanded.
    TooLarge,
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported(type_name) => write!(f, "a value of type '{type_name}' has no JSON form"),
            Self::NonStringKey(type_name) => write!(f, "dict keys must be str, not '{type_name}'"),
            Self::NonFiniteFloat(repr) => write!(f, "the float {repr} has no JSON form"),
            Self::IntTooLarge => f.write_str("an int outside the 64-bit range has no JSON form"),
            Self::TooDeep => write!(f, "the value is nested more than {MAX_DEPTH} levels deep"),
            Self::TooLarge => write!(f, "the value expands to more than {MAX_NODES} JSON values"),
        }
    }
}

impl std::error::Error for ConvertError {}

/// Converts a Python value to JSON; see the module docs for what is accepted.
pub fn to_json(value: ObjectRef<'_>) -> Result<Value, ConvertError> {
    let mut budget = MAX_NODES;
    to_json_at(value, 0, &mut budget)
}

fn to_json_at(value: ObjectRef<'_>, depth: usize, budget: &mut usize) -> Result<Value, ConvertError> {
    *budget = budget.checked_sub(1).ok_or(ConvertError::TooLarge)?;
    let items = |ids: &[monty_types::unstable::NodeId], budget: &mut usize| -> Result<Value, ConvertError> {
        let depth = nested(depth)?;
        let values =
            ids.iter().map(|id| to_json_at(child(value, *id), depth, budget)).collect::<Result<Vec<_>, _>>()?;
        Ok(Value::Array(values))
    };
    match node(value) {
        MontyNode::None => Ok(Value::Null),
        MontyNode::Bool(flag) => Ok(Value::Bool(*flag)),
        MontyNode::Int(int) => Ok(Value::from(*int)),
        // Only the u64 range beyond i64 has a JSON number serde_json keeps exact.
        MontyNode::BigInt(int) => u64::try_from(int).map(Value::from).map_err(|_| ConvertError::IntTooLarge),
        MontyNode::Float(float) => {
            Number::from_f64(*float).map(Value::Number).ok_or_else(|| ConvertError::NonFiniteFloat(value.py_repr()))
        }
        MontyNode::String(text) => Ok(Value::String(text.clone())),
        // Tuples and named tuples are sequences to JSON, as `json.dumps` has it.
        MontyNode::List(ids) | MontyNode::Tuple(ids) | MontyNode::NamedTuple { values: ids, .. } => items(ids, budget),
        MontyNode::Dict(pairs) => {
            let depth = nested(depth)?;
            let mut object = Map::with_capacity(pairs.len());
            for (key, item) in pairs {
                let key = child(value, *key);
                let Some(key_text) = key.as_str() else {
                    return Err(ConvertError::NonStringKey(key.type_name().to_owned()));
                };
                object.insert(key_text.to_owned(), to_json_at(child(value, *item), depth, budget)?);
            }
            Ok(Value::Object(object))
        }
        _ => Err(ConvertError::Unsupported(value.type_name().to_owned())),
    }
}

fn nested(depth: usize) -> Result<usize, ConvertError> {
    if depth >= MAX_DEPTH { Err(ConvertError::TooDeep) } else { Ok(depth + 1) }
}

/// Converts JSON to the Python value a script sees.
///
/// Recursive on purpose: every JSON document here was parsed by serde_json,
/// whose 128-level nesting limit bounds the depth.
pub fn from_json(value: &Value) -> MontyObject {
    match value {
        Value::Null => MontyObject::none(),
        Value::Bool(flag) => MontyObject::bool(*flag),
        Value::Number(number) => number_to_object(number),
        Value::String(text) => MontyObject::string(text.as_str()),
        Value::Array(items) => MontyObject::list(items.iter().map(from_json)),
        Value::Object(object) => {
            MontyObject::dict(object.iter().map(|(key, item)| (MontyObject::string(key.as_str()), from_json(item))))
        }
    }
}

fn number_to_object(number: &Number) -> MontyObject {
    if let Some(int) = number.as_i64() {
        MontyObject::int(int)
    } else if let Some(int) = number.as_u64() {
        MontyObject::bigint(BigInt::from(int))
    } else {
        // Without serde_json's arbitrary_precision every other number is an f64.
        MontyObject::float(number.as_f64().unwrap_or(f64::NAN))
    }
}

/// The dict a tool call returns to the script:
/// `{"ok": True, "value": …, "error": None}` or
/// `{"ok": False, "value": None, "error": {"code": …, "message": …}}`.
pub fn call_result_to_object(result: &CallResult) -> MontyObject {
    let (ok, value, error) = match result {
        CallResult::Ok(value) => (true, from_json(value), MontyObject::none()),
        CallResult::Err(failure) => (
            false,
            MontyObject::none(),
            MontyObject::dict([
                (MontyObject::string("code"), MontyObject::string(failure.code.as_str())),
                (MontyObject::string("message"), MontyObject::string(failure.message.as_str())),
            ]),
        ),
    };
    MontyObject::dict([
        (MontyObject::string("ok"), MontyObject::bool(ok)),
        (MontyObject::string("value"), value),
        (MontyObject::string("error"), error),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tether_guest::Failure;

    fn round_trip(value: Value) {
        let object = from_json(&value);
        assert_eq!(to_json(object.as_ref()), Ok(value));
    }

    #[test]
    fn json_round_trips_through_python() {
        round_trip(json!(null));
        round_trip(json!(true));
        round_trip(json!(-7));
        round_trip(json!(u64::MAX));
        round_trip(json!(1.5));
        round_trip(json!("héllo"));
        round_trip(json!([1, "two", [3.0], {"four": null}]));
        round_trip(json!({"id": 7, "tags": ["a", "b"], "nested": {"deep": {"er": false}}}));
    }

    #[test]
    fn json_numbers_keep_their_python_type() {
        assert_eq!(from_json(&json!(3)).type_name(), "int");
        assert_eq!(from_json(&json!(3.0)).type_name(), "float");
        assert_eq!(from_json(&json!(u64::MAX)).type_name(), "int");
    }

    #[test]
    fn tuples_become_lists() {
        let tuple = MontyObject::tuple([MontyObject::int(1), MontyObject::string("x")]);
        assert_eq!(to_json(tuple.as_ref()), Ok(json!([1, "x"])));
    }

    #[test]
    fn non_json_values_are_refused() {
        let set = MontyObject::set([MontyObject::int(1)]);
        assert_eq!(to_json(set.as_ref()), Err(ConvertError::Unsupported("set".into())));
        let function = MontyObject::function("f", None);
        assert_eq!(to_json(function.as_ref()), Err(ConvertError::Unsupported("function".into())));
        let bytes = MontyObject::bytes(b"x".to_vec());
        assert_eq!(to_json(bytes.as_ref()), Err(ConvertError::Unsupported("bytes".into())));
        let nan = MontyObject::float(f64::NAN);
        assert_eq!(to_json(nan.as_ref()), Err(ConvertError::NonFiniteFloat("nan".into())));
        let huge = MontyObject::bigint(BigInt::from(u64::MAX) * 4);
        assert_eq!(to_json(huge.as_ref()), Err(ConvertError::IntTooLarge));
    }

    #[test]
    fn dict_keys_must_be_strings() {
        let dict = MontyObject::dict([(MontyObject::int(1), MontyObject::none())]);
        assert_eq!(to_json(dict.as_ref()), Err(ConvertError::NonStringKey("int".into())));
    }

    #[test]
    fn nesting_is_bounded() {
        let mut value = MontyObject::none();
        for _ in 0..MAX_DEPTH {
            value = MontyObject::list([value]);
        }
        assert!(to_json(value.as_ref()).is_ok());
        let value = MontyObject::list([value]);
        assert_eq!(to_json(value.as_ref()), Err(ConvertError::TooDeep));
    }

    #[test]
    fn call_results_become_result_dicts() {
        let ok = call_result_to_object(&CallResult::Ok(json!({"id": 7})));
        assert_eq!(to_json(ok.as_ref()), Ok(json!({"ok": true, "value": {"id": 7}, "error": null})));
        let failure = Failure { code: "policy_denied".into(), message: "no".into() };
        let err = call_result_to_object(&CallResult::Err(failure));
        assert_eq!(
            to_json(err.as_ref()),
            Ok(json!({"ok": false, "value": null, "error": {"code": "policy_denied", "message": "no"}}))
        );
    }
}
