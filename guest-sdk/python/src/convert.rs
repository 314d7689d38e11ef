//! Conversion between JSON values and monty's Python values.
//!
//! JSON → Python is total: null, bool, int, float, str, list and dict all have
//! a Python twin, and an integer of any size is a Python `int` with the same
//! value.
//!
//! Python → JSON has two modes. [`to_json`], for tool arguments, follows
//! `json.dumps(value, allow_nan=False)`: tuples become lists; dict keys that
//! are int, float, bool or None become strings as `json.dumps` writes them
//! (`1` → `"1"`, `True` → `"true"`, `None` → `"null"`); every other value (a
//! set, bytes, a function, a class instance, a cycle, `nan`) is refused with
//! the exception and message `json.dumps` raises, so a tool never receives a
//! value the script did not mean to send. [`result_to_json`], for the
//! script's result, never refuses a value for its form: it converts what
//! `json.dumps` refuses (a dataclass instance to its dict, a set or frozenset
//! to a list, anything else to its repr marked with [`REPR_MARK`]) and says
//! what it converted, so the run's work is not lost at its last line.
//!
//! Both write an `int` of any size as a JSON number with all its digits: the
//! workspace builds serde_json with `arbitrary_precision`, so the host reads
//! it back exactly (a test below fails if that feature goes). Both stop at
//! [`MAX_DEPTH`] levels and [`MAX_NODES`] values.

use std::{collections::BTreeSet, fmt, str::FromStr};

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

/// What starts the string a result value with no JSON form becomes:
/// `"!repr: <function f at 0x…>"`. The model reads it as a repr, not as
/// data the script made.
pub const REPR_MARK: &str = "!repr: ";

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
            Self::Circular | Self::NonFiniteFloat(_) | Self::TooDeep | Self::TooLarge => ExcType::ValueError,
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
            Self::TooDeep => write!(f, "the value is nested more than {MAX_DEPTH} levels deep"),
            Self::TooLarge => write!(f, "the value expands to more than {MAX_NODES} JSON values"),
        }
    }
}

impl std::error::Error for ConvertError {}

/// One kind of conversion [`result_to_json`] made that `json.dumps` would
/// have refused. Ordered, so a result's notes read the same every run.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Conversion {
    /// An instance of this dataclass became a dict of its fields.
    Dataclass(String),
    /// A `set` or `frozenset` (the type name) became a list.
    Set(&'static str),
    /// A value of this type became its marked repr.
    Repr(String),
    /// A dict key of this type became its repr (unmarked: keys are strings).
    Key(String),
    /// A reference back to an enclosing container became its marked repr.
    Cycle,
    /// A value nested past [`MAX_DEPTH`] became a marked placeholder.
    Deep,
}

impl fmt::Display for Conversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dataclass(name) => write!(f, "dataclass `{name}` → dict of its fields"),
            Self::Set(type_name) => write!(f, "{type_name} → list"),
            Self::Repr(type_name) => write!(f, "{type_name} → its repr, a string starting {REPR_MARK:?}"),
            Self::Key(type_name) => write!(f, "{type_name} dict key → its repr"),
            Self::Cycle => write!(f, "a container inside itself → its repr, a string starting {REPR_MARK:?}"),
            Self::Deep => write!(f, "values nested past {MAX_DEPTH} levels → a string starting {REPR_MARK:?}"),
        }
    }
}

/// The script's result as JSON, and what was converted to get it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvertedResult {
    /// The result.
    pub value: Value,
    /// What `json.dumps` would have refused and was converted, each kind once.
    pub conversions: BTreeSet<Conversion>,
}

impl ConvertedResult {
    /// One line telling the model what was converted, or `None` when
    /// nothing was: ``note: the script's result was converted to JSON: set → list; …``.
    pub fn note(&self) -> Option<String> {
        if self.conversions.is_empty() {
            return None;
        }
        let list: Vec<String> = self.conversions.iter().map(ToString::to_string).collect();
        Some(format!("note: the script's result was converted to JSON: {}\n", list.join("; ")))
    }
}

/// Converts a tool call's arguments to JSON as `json.dumps` would; see the
/// module docs.
///
/// # Errors
///
/// A [`ConvertError`] for the first value with no JSON form.
pub fn to_json(value: ObjectRef<'_>) -> Result<Value, ConvertError> {
    let mut walk = Walk { lenient: false, budget: MAX_NODES, conversions: BTreeSet::new() };
    walk.value(value, 0)
}

/// Converts the script's result to JSON, converting what `json.dumps`
/// refuses instead of failing; see the module docs.
///
/// # Errors
///
/// Only [`ConvertError::TooLarge`]: a result of more than [`MAX_NODES`]
/// values, which no host would take.
pub fn result_to_json(value: ObjectRef<'_>) -> Result<ConvertedResult, ConvertError> {
    let mut walk = Walk { lenient: true, budget: MAX_NODES, conversions: BTreeSet::new() };
    let value = walk.value(value, 0)?;
    Ok(ConvertedResult { value, conversions: walk.conversions })
}

/// One conversion: strict (arguments) or lenient (the result).
struct Walk {
    /// Convert what has no JSON form instead of refusing it.
    lenient: bool,
    /// JSON values still allowed.
    budget: usize,
    /// What a lenient walk converted.
    conversions: BTreeSet<Conversion>,
}

impl Walk {
    fn value(&mut self, value: ObjectRef<'_>, depth: usize) -> Result<Value, ConvertError> {
        self.budget = self.budget.checked_sub(1).ok_or(ConvertError::TooLarge)?;
        match self.exact(value, depth) {
            Err(ConvertError::TooLarge) => Err(ConvertError::TooLarge),
            Err(error) if self.lenient => Ok(self.converted(value, &error)),
            result => result,
        }
    }

    /// `value` as `json.dumps` writes it, its children through [`Walk::value`].
    fn exact(&mut self, value: ObjectRef<'_>, depth: usize) -> Result<Value, ConvertError> {
        match node(value) {
            MontyNode::None => Ok(Value::Null),
            MontyNode::Bool(flag) => Ok(Value::Bool(*flag)),
            MontyNode::Int(int) => Ok(Value::from(*int)),
            MontyNode::BigInt(int) => big_int_number(int).map(Value::Number),
            MontyNode::Float(float) => {
                Number::from_f64(*float).map(Value::Number).ok_or_else(|| ConvertError::NonFiniteFloat(value.py_repr()))
            }
            MontyNode::String(text) => Ok(Value::String(text.clone())),
            // Tuples and named tuples are sequences to JSON, as `json.dumps` has it.
            MontyNode::List(ids) | MontyNode::Tuple(ids) | MontyNode::NamedTuple { values: ids, .. } => {
                self.array(value, ids, depth)
            }
            MontyNode::Set(ids) | MontyNode::FrozenSet(ids) if self.lenient => {
                let array = self.array(value, ids, depth)?;
                let type_name = if matches!(node(value), MontyNode::Set(_)) { "set" } else { "frozenset" };
                self.conversions.insert(Conversion::Set(type_name));
                Ok(array)
            }
            MontyNode::Dict(pairs) => self.object(value, pairs, depth),
            MontyNode::ClassInstance { class_type, attrs, .. } if self.lenient => match node(child(value, *class_type))
            {
                MontyNode::ClassType(class) if class.is_dataclass => {
                    let object = self.object(value, attrs, depth)?;
                    self.conversions.insert(Conversion::Dataclass(class.name.clone()));
                    Ok(object)
                }
                _ => Err(ConvertError::NotSerializable(value.type_name().to_owned())),
            },
            // monty exports a reference back to an enclosing container as a cycle leaf.
            MontyNode::Cycle(_) => Err(ConvertError::Circular),
            MontyNode::Exception { exc_type, .. } => Err(ConvertError::NotSerializable(exc_type.to_string())),
            MontyNode::Repr(repr) => Err(ConvertError::NotSerializable(repr_type_name(repr).to_owned())),
            _ => Err(ConvertError::NotSerializable(value.type_name().to_owned())),
        }
    }

    fn array(
        &mut self,
        value: ObjectRef<'_>,
        ids: &[monty_types::unstable::NodeId],
        depth: usize,
    ) -> Result<Value, ConvertError> {
        let depth = nested(depth)?;
        let values = ids.iter().map(|id| self.value(child(value, *id), depth)).collect::<Result<Vec<_>, _>>()?;
        Ok(Value::Array(values))
    }

    fn object(
        &mut self,
        value: ObjectRef<'_>,
        pairs: &[(monty_types::unstable::NodeId, monty_types::unstable::NodeId)],
        depth: usize,
    ) -> Result<Value, ConvertError> {
        let depth = nested(depth)?;
        let mut object = Map::with_capacity(pairs.len());
        for (key, item) in pairs {
            let key = self.key(child(value, *key))?;
            // A repeated key keeps the last value, as `json.loads(json.dumps(d))` does.
            object.insert(key, self.value(child(value, *item), depth)?);
        }
        Ok(Value::Object(object))
    }

    /// A dict key as `json.dumps` writes it; in a lenient walk, any other
    /// key as its repr.
    fn key(&mut self, key: ObjectRef<'_>) -> Result<String, ConvertError> {
        match key_text(key) {
            Err(ConvertError::InvalidKey(type_name)) if self.lenient => {
                self.conversions.insert(Conversion::Key(type_name));
                Ok(key.py_repr())
            }
            Err(ConvertError::NonFiniteFloat(repr)) if self.lenient => {
                self.conversions.insert(Conversion::Key("float".to_owned()));
                Ok(repr)
            }
            result => result,
        }
    }

    /// The marked string a value with no JSON form becomes, noted.
    fn converted(&mut self, value: ObjectRef<'_>, error: &ConvertError) -> Value {
        let (conversion, repr) = match error {
            ConvertError::Circular => (Conversion::Cycle, value.py_repr()),
            // Not its repr: that could be as deep as what it replaces.
            ConvertError::TooDeep => (Conversion::Deep, format!("<{} nested too deep>", value.type_name())),
            ConvertError::NotSerializable(type_name) => (Conversion::Repr(type_name.clone()), value.py_repr()),
            _ => (Conversion::Repr(value.type_name().to_owned()), value.py_repr()),
        };
        self.conversions.insert(conversion);
        Value::String(format!("{REPR_MARK}{repr}"))
    }
}

/// An int of any size as a JSON number with all its digits.
///
/// # Errors
///
/// Never with serde_json's `arbitrary_precision`, which keeps the digits.
/// Without it a number past 64 bits would be an `f64`: refused here rather
/// than sent rounded.
fn big_int_number(int: &BigInt) -> Result<Number, ConvertError> {
    let digits = int.to_string();
    match Number::from_str(&digits) {
        Ok(number) if number.to_string() == digits => Ok(number),
        _ => Err(ConvertError::NotSerializable("int".to_owned())),
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

/// A JSON number as a Python `int` when its text is an integer (of any
/// size: serde_json's `arbitrary_precision` keeps the digits), else a
/// `float`, as `json.loads` reads it (`1e400` is `inf`).
fn number_to_object(number: &Number) -> MontyObject {
    if let Some(int) = number.as_i64() {
        return MontyObject::int(int);
    }
    let text = number.to_string();
    let digits = text.strip_prefix('-').unwrap_or(&text);
    if !digits.is_empty()
        && digits.bytes().all(|byte| byte.is_ascii_digit())
        && let Ok(int) = BigInt::from_str(&text)
    {
        return MontyObject::bigint(int);
    }
    let float = number.as_f64().or_else(|| text.parse::<f64>().ok());
    let infinity = if text.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY };
    MontyObject::float(float.unwrap_or(infinity))
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
    }

    /// Fails if the workspace's serde_json loses `arbitrary_precision`.
    #[test]
    fn an_int_of_any_size_is_a_json_number_with_all_its_digits() {
        let fib_100 = "354224848179261915075";
        let huge = format!("-{}", "9".repeat(400));
        for digits in [fib_100, huge.as_str(), "18446744073709551616", "-9223372036854775809"] {
            let int = MontyObject::bigint(BigInt::from_str(digits).unwrap());
            let json = to_json(int.as_ref()).unwrap();
            assert_eq!(serde_json::to_string(&json).unwrap(), digits);
            // And back: the host's JSON, read by the guest, is the same int.
            let read: Value = serde_json::from_str(digits).unwrap();
            assert_eq!(from_json(&read), int);
            assert_eq!(from_json(&read).type_name(), "int");
        }
        let nested = MontyObject::dict([(
            MontyObject::string("n"),
            MontyObject::list([MontyObject::bigint(BigInt::from(u64::MAX) * 4)]),
        )]);
        let text = serde_json::to_string(&to_json(nested.as_ref()).unwrap()).unwrap();
        assert_eq!(text, r#"{"n":[73786976294838206460]}"#);
    }

    #[test]
    fn json_floats_stay_floats_and_overflow_to_infinity() {
        let read = |text: &str| from_json(&serde_json::from_str::<Value>(text).unwrap());
        assert_eq!(read("1.5"), MontyObject::float(1.5));
        assert_eq!(read("1e2"), MontyObject::float(100.0));
        assert_eq!(read("-0.0").type_name(), "float");
        assert_eq!(read("1e400"), MontyObject::float(f64::INFINITY));
        assert_eq!(read("-1e400"), MontyObject::float(f64::NEG_INFINITY));
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

    fn converted(object: MontyObject) -> (Value, Vec<String>) {
        let converted = result_to_json(object.as_ref()).unwrap();
        (converted.value, converted.conversions.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_result_json_dumps_takes_is_not_converted_and_not_noted() {
        let value = MontyObject::dict([
            (MontyObject::string("t"), MontyObject::tuple([MontyObject::int(1)])),
            (MontyObject::int(2), MontyObject::bigint(BigInt::from(u64::MAX) * 4)),
        ]);
        let converted = result_to_json(value.as_ref()).unwrap();
        assert_eq!(converted.value, serde_json::from_str::<Value>(r#"{"t": [1], "2": 73786976294838206460}"#).unwrap());
        assert!(converted.conversions.is_empty());
        assert_eq!(converted.note(), None);
    }

    #[test]
    fn a_result_set_becomes_a_list_and_other_values_their_marked_repr() {
        let value = MontyObject::list([
            MontyObject::set([MontyObject::int(1)]),
            MontyObject::frozenset([MontyObject::string("a")]),
            MontyObject::bytes(b"x".to_vec()),
            MontyObject::float(f64::NAN),
            MontyObject::dict([(MontyObject::tuple([MontyObject::int(1), MontyObject::int(2)]), MontyObject::none())]),
            MontyObject::list([MontyObject::cycle("[...]")]),
        ]);
        let (json, notes) = converted(value);
        assert_eq!(json, json!([[1], ["a"], "!repr: b'x'", "!repr: nan", {"(1, 2)": null}, ["!repr: [...]"]]));
        assert_eq!(
            notes,
            [
                "frozenset → list",
                "set → list",
                "bytes → its repr, a string starting \"!repr: \"",
                "float → its repr, a string starting \"!repr: \"",
                "tuple dict key → its repr",
                "a container inside itself → its repr, a string starting \"!repr: \"",
            ]
        );
    }

    #[test]
    fn a_result_nested_too_deep_is_cut_with_a_marked_placeholder() {
        let mut value = MontyObject::none();
        for _ in 0..=MAX_DEPTH {
            value = MontyObject::list([value]);
        }
        let (mut json, notes) = converted(value);
        for _ in 0..MAX_DEPTH {
            json = json[0].take();
        }
        assert_eq!(json, json!("!repr: <list nested too deep>"));
        assert_eq!(notes, [format!("values nested past {MAX_DEPTH} levels → a string starting \"!repr: \"")]);
    }
}
