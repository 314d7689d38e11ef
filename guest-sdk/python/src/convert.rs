//! Conversion between JSON values and monty's Python values.
//!
//! JSON → Python is total: null, bool, int, float, str, list and dict all have
//! a Python twin. Python → JSON follows `json.dumps(value, allow_nan=False)`:
//! tuples become lists; dict keys that are int, float, bool or None become
//! strings as `json.dumps` writes them (`1` → `"1"`, `True` → `"true"`,
//! `None` → `"null"`); every other value (a set, bytes, a function, a class
//! instance, a cycle, `nan`) is refused with the exception and message
//! `json.dumps` raises, so a tool never receives a value the script did not
//! mean to send. Beyond `json.dumps`, the sandbox refuses ints outside the
//! 64-bit range (the host's JSON reader would round them) and values nested
//! deeper than [`MAX_DEPTH`].

use std::fmt;

use monty_types::{
    ExcType, MontyObject, ObjectRef,
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

/// Why a Python value has no JSON form. Displays as the message
/// `json.dumps` raises, where it raises one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConvertError {
    /// A value of a type JSON cannot hold, e.g. a set: its type name.
    NotSerializable(String),
    /// A dict key that is not str, int, float, bool or None: its type name.
    InvalidKey(String),
    /// A container that contains itself.
    Circular,
    /// `nan` or an infinity, as its repr.
    NonFiniteFloat(String),
    /// An int outside the 64-bit range (`json.dumps` writes it; the host's
    /// JSON reader could not read it back exactly).
    IntTooLarge,
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// More than [`MAX_NODES`] values once shared sub-values are expanded.
    TooLarge,
}

impl ConvertError {
    /// The Python exception `json.dumps` raises for this: `TypeError` for a
    /// type it cannot write, `ValueError` for a value it cannot.
    pub fn exc_type(&self) -> ExcType {
        match self {
            Self::NotSerializable(_) | Self::InvalidKey(_) => ExcType::TypeError,
            Self::Circular | Self::NonFiniteFloat(_) | Self::IntTooLarge | Self::TooDeep | Self::TooLarge => {
                ExcType::ValueError
            }
        }
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotSerializable(type_name) => write!(f, "Object of type {type_name} is not JSON serializable"),
            Self::InvalidKey(type_name) => write!(f, "keys must be str, int, float, bool or None, not {type_name}"),
            Self::Circular => f.write_str("Circular reference detected"),
            Self::NonFiniteFloat(repr) => write!(f, "Out of range float values are not JSON compliant: {repr}"),
            Self::IntTooLarge => {
                f.write_str("an int outside the 64-bit range has no exact JSON form here; send it as a str")
            }
            Self::TooDeep => write!(f, "the value is nested more than {MAX_DEPTH} levels deep"),
            Self::TooLarge => write!(f, "the value expands to more than {MAX_NODES} JSON values"),
        }
    }
}

impl std::error::Error for ConvertError {}

/// Converts a Python value to JSON as `json.dumps` would; see the module docs.
///
/// # Errors
///
/// A [`ConvertError`] for the first value with no JSON form.
pub fn to_json(value: ObjectRef<'_>) -> Result<Value, ConvertError> {
    let mut budget = MAX_NODES;
    to_json_at(value, 0, &mut budget)
}

fn to_json_at(value: ObjectRef<'_>, depth: usize, budget: &mut usize) -> Result<Value, ConvertError> {
    *budget = budget.checked_sub(1).ok_or(ConvertError::TooLarge)?;
    match node(value) {
        MontyNode::None => Ok(Value::Null),
        MontyNode::Bool(flag) => Ok(Value::Bool(*flag)),
        MontyNode::Int(int) => Ok(Value::from(*int)),
        // The 64-bit range, i64 and u64, is what serde_json keeps exact. monty
        // keeps ints within i64 as `Int`, but a `BigInt` that fits is no error.
        MontyNode::BigInt(int) => i64::try_from(int)
            .map(Value::from)
            .or_else(|_| u64::try_from(int).map(Value::from))
            .map_err(|_| ConvertError::IntTooLarge),
        MontyNode::Float(float) => {
            Number::from_f64(*float).map(Value::Number).ok_or_else(|| ConvertError::NonFiniteFloat(value.py_repr()))
        }
        MontyNode::String(text) => Ok(Value::String(text.clone())),
        // Tuples and named tuples are sequences to JSON, as `json.dumps` has it.
        MontyNode::List(ids) | MontyNode::Tuple(ids) | MontyNode::NamedTuple { values: ids, .. } => {
            let depth = nested(depth)?;
            let values =
                ids.iter().map(|id| to_json_at(child(value, *id), depth, budget)).collect::<Result<Vec<_>, _>>()?;
            Ok(Value::Array(values))
        }
        MontyNode::Dict(pairs) => {
            let depth = nested(depth)?;
            let mut object = Map::with_capacity(pairs.len());
            for (key, item) in pairs {
                // A repeated key keeps the last value, as `json.loads(json.dumps(d))` does.
                object.insert(key_text(child(value, *key))?, to_json_at(child(value, *item), depth, budget)?);
            }
            Ok(Value::Object(object))
        }
        // monty exports a reference back to an enclosing container as a cycle leaf.
        MontyNode::Cycle(_) => Err(ConvertError::Circular),
        MontyNode::Exception { exc_type, .. } => Err(ConvertError::NotSerializable(exc_type.to_string())),
        MontyNode::Repr(repr) => Err(ConvertError::NotSerializable(repr_type_name(repr).to_owned())),
        _ => Err(ConvertError::NotSerializable(value.type_name().to_owned())),
    }
}

/// A dict key as `json.dumps` writes it.
fn key_text(key: ObjectRef<'_>) -> Result<String, ConvertError> {
    match node(key) {
        MontyNode::String(text) => Ok(text.clone()),
        MontyNode::Bool(flag) => Ok(flag.to_string()),
        MontyNode::None => Ok("null".to_owned()),
        MontyNode::Int(int) => Ok(int.to_string()),
        MontyNode::BigInt(int) => Ok(int.to_string()),
        MontyNode::Float(float) if float.is_finite() => Ok(key.py_repr()),
        MontyNode::Float(_) => Err(ConvertError::NonFiniteFloat(key.py_repr())),
        _ => Err(ConvertError::InvalidKey(key.type_name().to_owned())),
    }
}

/// The type name an output-only repr shows: `<list_iterator object>` →
/// `list_iterator`, `<class 'A'>` → `type`, `Context(prec=28, …)` → `Context`.
fn repr_type_name(repr: &str) -> &str {
    let name = match repr.strip_prefix('<') {
        Some(rest) if rest.starts_with("class ") => "type",
        Some(rest) if rest.starts_with("built-in ") => "builtin_function_or_method",
        Some(rest) => rest.split([' ', '>']).next().unwrap_or_default(),
        None => repr.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')).next().unwrap_or_default(),
    };
    if name.is_empty() { "object" } else { name }
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
    fn a_big_int_within_64_bits_is_a_json_number() {
        // Found by the `python_values` fuzz target: a negative one was refused.
        assert_eq!(to_json(MontyObject::bigint(BigInt::from(-7)).as_ref()), Ok(json!(-7)));
        assert_eq!(to_json(MontyObject::bigint(BigInt::from(i64::MIN)).as_ref()), Ok(json!(i64::MIN)));
        assert_eq!(to_json(MontyObject::bigint(BigInt::from(u64::MAX)).as_ref()), Ok(json!(u64::MAX)));
        let below = MontyObject::bigint(BigInt::from(i64::MIN) - 1);
        assert_eq!(to_json(below.as_ref()), Err(ConvertError::IntTooLarge));
    }

    #[test]
    fn tuples_become_lists() {
        let tuple = MontyObject::tuple([MontyObject::int(1), MontyObject::string("x")]);
        assert_eq!(to_json(tuple.as_ref()), Ok(json!([1, "x"])));
    }

    fn refused(object: MontyObject) -> Result<Value, (ExcType, String)> {
        to_json(object.as_ref()).map_err(|error| (error.exc_type(), error.to_string()))
    }

    #[test]
    fn non_json_values_are_refused_as_json_dumps_refuses_them() {
        let type_error = |message: &str| Err((ExcType::TypeError, message.to_owned()));
        let value_error = |message: &str| Err((ExcType::ValueError, message.to_owned()));
        let set = MontyObject::set([MontyObject::int(1)]);
        assert_eq!(refused(set), type_error("Object of type set is not JSON serializable"));
        let function = MontyObject::function("f", None);
        assert_eq!(refused(function), type_error("Object of type function is not JSON serializable"));
        let bytes = MontyObject::bytes(b"x".to_vec());
        assert_eq!(refused(bytes), type_error("Object of type bytes is not JSON serializable"));
        let iterator = MontyObject::repr("<list_iterator object>");
        assert_eq!(refused(iterator), type_error("Object of type list_iterator is not JSON serializable"));
        let class = MontyObject::repr("<class 'A'>");
        assert_eq!(refused(class), type_error("Object of type type is not JSON serializable"));
        let context = MontyObject::repr("Context(prec=28, rounding=ROUND_HALF_EVEN)");
        assert_eq!(refused(context), type_error("Object of type Context is not JSON serializable"));
        let nan = MontyObject::float(f64::NAN);
        assert_eq!(refused(nan), value_error("Out of range float values are not JSON compliant: nan"));
        let cycle = MontyObject::list([MontyObject::cycle("[...]")]);
        assert_eq!(refused(cycle), value_error("Circular reference detected"));
        let huge = MontyObject::bigint(BigInt::from(u64::MAX) * 4);
        assert_eq!(to_json(huge.as_ref()), Err(ConvertError::IntTooLarge));
    }

    #[test]
    fn dict_keys_become_strings_as_json_dumps_writes_them() {
        let dict = MontyObject::dict([
            (MontyObject::int(1), MontyObject::string("int")),
            (MontyObject::bigint(BigInt::from(u64::MAX) * 4), MontyObject::none()),
            (MontyObject::float(2.5), MontyObject::none()),
            (MontyObject::float(1e16), MontyObject::none()),
            (MontyObject::bool(true), MontyObject::none()),
            (MontyObject::bool(false), MontyObject::none()),
            (MontyObject::none(), MontyObject::none()),
        ]);
        let mut keys: Vec<String> = match to_json(dict.as_ref()) {
            Ok(Value::Object(object)) => object.keys().cloned().collect(),
            other => panic!("not an object: {other:?}"),
        };
        keys.sort();
        let mut expected = ["1", "73786976294838206460", "2.5", "1e+16", "true", "false", "null"].map(str::to_owned);
        expected.sort();
        assert_eq!(keys, expected);
    }

    #[test]
    fn a_repeated_key_keeps_the_last_value() {
        let dict = MontyObject::dict([
            (MontyObject::int(1), MontyObject::string("int")),
            (MontyObject::string("1"), MontyObject::string("str")),
        ]);
        assert_eq!(to_json(dict.as_ref()), Ok(json!({"1": "str"})));
    }

    #[test]
    fn other_dict_keys_are_refused() {
        let tuple_key = MontyObject::dict([(MontyObject::tuple([MontyObject::int(1)]), MontyObject::none())]);
        let expected = (ExcType::TypeError, "keys must be str, int, float, bool or None, not tuple".to_owned());
        assert_eq!(refused(tuple_key), Err(expected));
        let nan_key = MontyObject::dict([(MontyObject::float(f64::NAN), MontyObject::none())]);
        assert_eq!(to_json(nan_key.as_ref()), Err(ConvertError::NonFiniteFloat("nan".into())));
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
