//! Arbitrary JSON values, shared by the checks that take JSON.

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{Map, Number, Value};

/// An arbitrary JSON value: every kind of number (i64, u64 beyond i64,
/// finite f64), strings with any character, and nesting up to `130` levels,
/// past the runtime's and serde_json's limits (100 and 128).
#[derive(Debug, Clone, PartialEq)]
pub struct Json(pub Value);

const MAX_NESTING: usize = 130;
/// How many levels a chain of single-item arrays adds: around the limits.
const CHAIN: std::ops::RangeInclusive<usize> = 95..=MAX_NESTING - 5;

impl<'a> Arbitrary<'a> for Json {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        value(u, 0).map(Json)
    }
}

fn value(u: &mut Unstructured<'_>, depth: usize) -> arbitrary::Result<Value> {
    let kinds = match depth {
        _ if u.is_empty() || depth >= MAX_NESTING => 5,
        // A chain only near the top, so no value nests past `MAX_NESTING`.
        _ if depth < MAX_NESTING - CHAIN.end() => 8,
        _ => 7,
    };
    let choice = u.int_in_range(0..=kinds)?;
    Ok(match choice {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => Value::from(u.int_in_range(i64::MAX as u64 + 1..=u64::MAX)?),
        4 => Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        5 => Value::String(u.arbitrary()?),
        6 => {
            let len = u.arbitrary_len::<u8>()?.min(8);
            Value::Array((0..len).map(|_| value(u, depth + 1)).collect::<Result<_, _>>()?)
        }
        7 => {
            let len = u.arbitrary_len::<u8>()?.min(8);
            let mut map = Map::new();
            for _ in 0..len {
                map.insert(u.arbitrary()?, value(u, depth + 1)?);
            }
            Value::Object(map)
        }
        // A chain of single-item arrays: depth is what the limits are about.
        _ => {
            let levels = u.int_in_range(CHAIN)?;
            let mut nested = value(u, MAX_NESTING)?;
            for _ in 0..levels {
                nested = Value::Array(vec![nested]);
            }
            nested
        }
    })
}
