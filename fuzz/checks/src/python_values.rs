//! JSON ↔ Python values in the Python runtime (`guest-sdk/python/src/convert.rs`).
//!
//! - JSON → Python → JSON is the identity for every value the host hands a
//!   script (nested at most `MAX_DEPTH`), and refuses deeper ones as too
//!   deep; a result dict carries the value unchanged.
//! - What a script sends back reaches the host intact: the call batch that
//!   carries it reads back equal with the host's reader.
//! - Any Python value (None, bool, int of any size, float with nan and
//!   infinities, str, bytes, list, tuple, dict with any keys, set, function,
//!   cycle, exception) converts as `json.dumps` would, or is refused with the
//!   `json.dumps` error for the first value that has no JSON form; never a
//!   panic.

use crate::json::Json;
use arbitrary::Arbitrary;
use monty_types::{ExcType, MontyObject};
use num_bigint::BigInt;
use serde_json::{Map, Number, Value, json};
use std::mem::discriminant;
use tether_guest::wire::{self, CallBatch, CallRequest, CallResult};
use tether_python::convert::{self, ConvertError, MAX_DEPTH};

#[derive(Arbitrary, Debug)]
enum Input {
    Json(Json),
    Text(Vec<u8>),
    Python(Py),
}

/// A Python value, as the runtime receives it from monty.
#[derive(Arbitrary, Debug)]
enum Py {
    None,
    Bool(bool),
    Int(i64),
    BigInt(i128, u8),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Py>),
    Tuple(Vec<Py>),
    Dict(Vec<(Py, Py)>),
    Set(Vec<Py>),
    Function(String),
    Cycle,
    Exception(String),
    /// Single-item lists around a value, to reach the depth limit.
    Nested(u8, Box<Py>),
}

/// Checks one input: `data` decoded as libFuzzer decodes it for this target
/// (`crate::decode`); bytes that decode to no input are skipped.
pub fn check(data: &[u8]) {
    let Some(input) = crate::decode::<Input>(data) else { return };
    match input {
        Input::Json(json) => json_round_trip(&json.0),
        Input::Text(bytes) => {
            if let Ok(value) = serde_json::from_slice::<Value>(&bytes) {
                json_round_trip(&value);
            }
        }
        Input::Python(py) => {
            let object = py.object();
            let got = convert::to_json(object.as_ref());
            let want = json_dumps(&py, 0);
            match (&got, &want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want),
                (Err(got), Err(want)) => {
                    assert_eq!(discriminant(got), discriminant(want), "{got:?} vs {want:?}");
                    let expected_type = match got {
                        ConvertError::NotSerializable(_) | ConvertError::InvalidKey(_) => ExcType::TypeError,
                        _ => ExcType::ValueError,
                    };
                    assert_eq!(got.exc_type(), expected_type);
                }
                _ => panic!("convert::to_json gave {got:?}, json.dumps semantics give {want:?}"),
            }
            if let Ok(value) = got {
                // What a script can send, it can send again unchanged.
                json_round_trip(&value);
            }
        }
    }
}

fn json_round_trip(value: &Value) {
    let object = convert::from_json(value);
    let back = convert::to_json(object.as_ref());
    let depth = wire::depth(value);
    if depth <= wire::MAX_DEPTH {
        assert_eq!(back.as_ref(), Ok(value), "JSON → Python → JSON changed the value");
        // A result dict adds one level; the host never sends values that deep.
        if depth < wire::MAX_DEPTH {
            let dict = convert::call_result_to_object(&CallResult::Ok(value.clone()));
            let want = json!({"ok": true, "value": value, "error": null});
            assert_eq!(convert::to_json(dict.as_ref()), Ok(want));
        }
    } else if depth > wire::MAX_DEPTH + 1 {
        assert_eq!(back, Err(ConvertError::TooDeep));
    }
    // What the script sends, the host reads back equal.
    if let Ok(args) = back {
        let batch = CallBatch { calls: vec![CallRequest { name: "t".into(), args }] };
        let document = serde_json::to_vec(&batch).unwrap();
        let read: CallBatch = serde_json::from_slice(&document).expect("the host reads every batch a script can send");
        assert_eq!(read, batch);
    }
}

impl Py {
    fn object(&self) -> MontyObject {
        match self {
            Py::None => MontyObject::none(),
            Py::Bool(flag) => MontyObject::bool(*flag),
            Py::Int(int) => MontyObject::int(*int),
            Py::BigInt(int, shift) => MontyObject::bigint(big(*int, *shift)),
            Py::Float(float) => MontyObject::float(*float),
            Py::Str(text) => MontyObject::string(text.as_str()),
            Py::Bytes(bytes) => MontyObject::bytes(bytes.clone()),
            Py::List(items) => MontyObject::list(items.iter().map(Py::object)),
            Py::Tuple(items) => MontyObject::tuple(items.iter().map(Py::object)),
            Py::Dict(pairs) => MontyObject::dict(pairs.iter().map(|(k, v)| (k.object(), v.object()))),
            Py::Set(items) => MontyObject::set(items.iter().map(Py::object)),
            Py::Function(name) => MontyObject::function(name.as_str(), None),
            Py::Cycle => MontyObject::cycle("[...]"),
            Py::Exception(message) => MontyObject::exception(ExcType::ValueError, Some(message.clone())),
            Py::Nested(levels, inner) => {
                let mut object = inner.object();
                for _ in 0..nesting(*levels) {
                    object = MontyObject::list([object]);
                }
                object
            }
        }
    }
}

/// A big int as monty holds one: any size (monty keeps those within i64 as
/// `Int`, but the conversion must not depend on that).
fn big(int: i128, shift: u8) -> BigInt {
    BigInt::from(int) << u32::from(shift % 80)
}

fn nesting(levels: u8) -> usize {
    usize::from(levels) % 8 + 95
}

/// `json.dumps(value, allow_nan=False)` with the sandbox's extra rule
/// (at most `MAX_DEPTH` containers deep; ints of any size are exact), as the
/// module docs of `convert` state them, written from the contract.
fn json_dumps(py: &Py, depth: usize) -> Result<Value, ConvertError> {
    let container = |depth: usize| if depth >= MAX_DEPTH { Err(ConvertError::TooDeep) } else { Ok(depth + 1) };
    match py {
        Py::None => Ok(Value::Null),
        Py::Bool(flag) => Ok(Value::Bool(*flag)),
        Py::Int(int) => Ok(Value::from(*int)),
        // An int of any size is a JSON number with all its digits (the
        // workspace's serde_json keeps them: `arbitrary_precision`).
        Py::BigInt(int, shift) => serde_json::from_str::<Value>(&big(*int, *shift).to_string())
            .map_err(|_| ConvertError::NotSerializable("int".to_owned())),
        Py::Float(float) => {
            Number::from_f64(*float).map(Value::Number).ok_or(ConvertError::NonFiniteFloat(String::new()))
        }
        Py::Str(text) => Ok(Value::String(text.clone())),
        Py::List(items) | Py::Tuple(items) => {
            let depth = container(depth)?;
            items.iter().map(|item| json_dumps(item, depth)).collect::<Result<_, _>>().map(Value::Array)
        }
        Py::Nested(levels, inner) => {
            let mut depth_now = depth;
            for _ in 0..nesting(*levels) {
                depth_now = container(depth_now)?;
            }
            let mut value = json_dumps(inner, depth_now)?;
            for _ in 0..nesting(*levels) {
                value = Value::Array(vec![value]);
            }
            Ok(value)
        }
        Py::Dict(pairs) => {
            let depth = container(depth)?;
            let mut object = Map::new();
            for (key, value) in pairs {
                let key = match key {
                    Py::Str(text) => text.clone(),
                    Py::Bool(flag) => flag.to_string(),
                    Py::None => "null".to_owned(),
                    Py::Int(int) => int.to_string(),
                    Py::BigInt(int, shift) => big(*int, *shift).to_string(),
                    Py::Float(float) if float.is_finite() => MontyObject::float(*float).py_repr(),
                    Py::Float(_) => return Err(ConvertError::NonFiniteFloat(String::new())),
                    _ => return Err(ConvertError::InvalidKey(String::new())),
                };
                object.insert(key, json_dumps(value, depth)?);
            }
            Ok(Value::Object(object))
        }
        Py::Bytes(_) | Py::Set(_) | Py::Function(_) | Py::Exception(_) => {
            Err(ConvertError::NotSerializable(String::new()))
        }
        Py::Cycle => Err(ConvertError::Circular),
    }
}
