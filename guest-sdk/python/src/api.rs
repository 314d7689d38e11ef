//! The functions and globals a script sees, and how their calls become tool
//! requests. Pure logic: nothing here talks to the host.
//!
//! - `call(name, args=None, **kwargs)`: a tool call, answered at once.
//! - `call_async(name, args=None, **kwargs)`: the awaitable form.
//! - `<tool>(**kwargs)`: one function per tool whose name is a free Python
//!   identifier; `get_contract(id=7)` is `call("get_contract", {"id": 7})`.
//! - `unwrap(result)`: a call's value, or a `RuntimeError` if it failed.
//! - `input`: the run's input value.

use std::collections::BTreeSet;

use monty_types::{CallArgs, ExcType, MontyException, MontyObject, ObjectRef, SANDBOX_MODULE_NAMES, is_identifier};
use ruff_python_stdlib::builtins::is_python_builtin;
use serde_json::{Map, Value};
use tether_guest::{CallRequest, ToolDoc};

use crate::convert::{from_json, to_json};

/// The synchronous tool-call function.
pub const CALL: &str = "call";
/// The awaitable tool-call function.
pub const CALL_ASYNC: &str = "call_async";
/// The function that opens a call result.
pub const UNWRAP: &str = "unwrap";
/// The global holding the run's input (it shadows the builtin `input()`,
/// which has no stdin to read here anyway).
pub const INPUT: &str = "input";

/// The Python minor version whose builtins tool functions must not shadow.
const PYTHON_MINOR: u8 = 14;

/// The script's names: `call`, `call_async`, `unwrap` and `input` are
/// inputs of the run; a tool's function is made when the script first names
/// it (monty's name lookup), so a run pays for the tools it uses, not for
/// every tool of the turn.
#[derive(Debug, Clone)]
pub struct Bindings {
    /// Tools that got a function of their own, by name.
    tool_functions: BTreeSet<String>,
}

impl Bindings {
    /// Picks the tools that get a function: a valid identifier that shadows
    /// no builtin, no module the sandbox provides, none of our names, and is
    /// not a dunder. The others stay reachable through `call`.
    pub fn new(tools: &[ToolDoc]) -> Self {
        let tool_functions =
            tools.iter().map(|tool| tool.name.as_str()).filter(|name| gets_function(name)).map(str::to_owned).collect();
        Self { tool_functions }
    }

    /// Whether `name` is a tool that got a function of its own.
    pub fn is_tool_function(&self, name: &str) -> bool {
        self.tool_functions.contains(name)
    }

    /// The value of a name the script uses but never defined: the tool's
    /// function, if `name` is a tool that gets one.
    pub fn lookup(&self, name: &str) -> Option<MontyObject> {
        self.is_tool_function(name).then(|| MontyObject::function(name, None))
    }

    /// The input names for `MontyRun::new`, in the order of [`Self::input_values`].
    pub fn input_names(&self) -> Vec<String> {
        [CALL, CALL_ASYNC, UNWRAP, INPUT].into_iter().map(str::to_owned).collect()
    }

    /// The input values for `MontyRun::start`: our functions and the input.
    pub fn input_values(&self, input: &Value) -> Vec<MontyObject> {
        let function = |name: &str| MontyObject::function(name, None);
        vec![function(CALL), function(CALL_ASYNC), function(UNWRAP), from_json(input)]
    }
}

fn gets_function(name: &str) -> bool {
    is_identifier(name)
        && !name.starts_with("__")
        && ![CALL, CALL_ASYNC, UNWRAP, INPUT].contains(&name)
        && !is_python_builtin(name, PYTHON_MINOR, false)
        && !SANDBOX_MODULE_NAMES.contains(&name)
}

/// The arguments of `call`/`call_async` as a tool request:
/// `(name, args=None, **kwargs)`, `args` a dict merged with the keywords.
///
/// `name` and `args` are the function's own parameters, so a tool argument
/// with one of those names must go inside the `args` dict.
pub fn parse_call(function: &str, args: &CallArgs) -> Result<CallRequest, MontyException> {
    let mut positional = args.args();
    if positional.len() > 2 {
        return Err(type_error(format!(
            "{function}() takes at most 2 positional arguments (name, args), got {}",
            positional.len()
        )));
    }
    let mut name = positional.next();
    let mut dict = positional.next();
    let mut keywords = Vec::new();
    for (key, value) in args.kwargs() {
        match key.as_str() {
            Some("name") if name.is_none() => name = Some(value),
            Some("args") if dict.is_none() => dict = Some(value),
            Some("name" | "args") => {
                let key = key.as_str().unwrap_or_default();
                return Err(type_error(format!("{function}() got multiple values for argument '{key}'")));
            }
            _ => keywords.push((key, value)),
        }
    }
    let Some(name) = name else {
        return Err(type_error(format!("{function}() missing required argument: 'name' (the tool to call)")));
    };
    let Some(name) = name.as_str() else {
        return Err(type_error(format!("{function}() name must be a str, not '{}'", name.type_name())));
    };
    let args = merge_args(function, dict, keywords)?;
    Ok(CallRequest { name: name.to_owned(), args })
}

/// The arguments of a tool function as a tool request: keywords, optionally
/// after one positional dict of arguments (`get_contract({"id": 7})`).
pub fn parse_tool_call(tool: &str, args: &CallArgs) -> Result<CallRequest, MontyException> {
    let mut positional = args.args();
    let dict = match (positional.next(), positional.len()) {
        (None, _) => None,
        (Some(dict), 0) if dict.pairs().is_some() && dict.type_name() == "dict" => Some(dict),
        (Some(_), _) => {
            return Err(type_error(format!(
                "{tool}() takes keyword arguments only, e.g. {tool}(id=7), or a single dict of arguments"
            )));
        }
    };
    let keywords = args.kwargs().collect();
    let args = merge_args(tool, dict, keywords)?;
    Ok(CallRequest { name: tool.to_owned(), args })
}

/// Merges an optional dict of arguments and keyword arguments into the JSON
/// object a tool receives. A key given both ways is refused, as Python
/// refuses a duplicate argument.
fn merge_args(
    function: &str,
    dict: Option<ObjectRef<'_>>,
    keywords: Vec<(ObjectRef<'_>, ObjectRef<'_>)>,
) -> Result<Value, MontyException> {
    let mut object = match dict.map(to_json).transpose().map_err(not_serializable)? {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(object)) => object,
        Some(_) => {
            let type_name = dict.map_or("None", |dict| dict.type_name());
            return Err(type_error(format!("{function}() args must be a dict, not '{type_name}'")));
        }
    };
    for (key, value) in keywords {
        let Some(key) = key.as_str() else {
            return Err(type_error(format!("{function}() keywords must be strings")));
        };
        if object.contains_key(key) {
            return Err(type_error(format!("{function}() got multiple values for argument '{key}'")));
        }
        object.insert(key.to_owned(), to_json(value).map_err(not_serializable)?);
    }
    Ok(Value::Object(object))
}

/// `unwrap(result)`: the value of a successful call result, or a
/// `RuntimeError("tool call failed: <code>: <message>")`.
pub fn unwrap(args: &CallArgs) -> Result<MontyObject, MontyException> {
    let mut positional = args.args();
    let result = match (positional.next(), positional.len(), args.kwargs().len()) {
        (Some(result), 0, 0) => result,
        _ => return Err(type_error("unwrap() takes exactly one argument: the result of a tool call")),
    };
    let not_a_result =
        || type_error(format!("unwrap() expects the dict a tool call returns, not '{}'", result.type_name()));
    if result.type_name() != "dict" {
        return Err(not_a_result());
    }
    let pairs = result.pairs().ok_or_else(not_a_result)?;
    let field = |name: &str| pairs.iter().find(|(key, _)| key.as_str() == Some(name)).map(|(_, value)| *value);
    match field("ok").and_then(|ok| ok.as_bool()) {
        Some(true) => Ok(field("value").map_or_else(MontyObject::none, |value| value.to_owned())),
        Some(false) => {
            let error = field("error").and_then(|error| error.pairs()).unwrap_or_default();
            let text = |name: &str| {
                error
                    .iter()
                    .find(|(key, _)| key.as_str() == Some(name))
                    .and_then(|(_, value)| value.as_str())
                    .unwrap_or("unknown")
                    .to_owned()
            };
            let message = format!("tool call failed: {}: {}", text("code"), text("message"));
            Err(MontyException::new(ExcType::RuntimeError, Some(message)))
        }
        None => Err(not_a_result()),
    }
}

fn type_error(message: impl Into<String>) -> MontyException {
    MontyException::new(ExcType::TypeError, Some(message.into()))
}

/// The exception `json.dumps` raises for the argument, with what it was.
fn not_serializable(error: crate::convert::ConvertError) -> MontyException {
    MontyException::new(error.exc_type(), Some(format!("argument is not JSON-serializable: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> ToolDoc {
        ToolDoc { name: name.into(), description: String::new(), input_schema: (&json!({})).into() }
    }

    fn kwargs(pairs: &[(&str, MontyObject)]) -> Vec<(MontyObject, MontyObject)> {
        pairs.iter().map(|(key, value)| (MontyObject::string(*key), value.clone())).collect()
    }

    #[test]
    fn only_free_identifiers_get_tool_functions() {
        let tools = ["get_contract", "list-items", "print", "json", "call", "class", "__x__", "len", "Search2"];
        let bindings = Bindings::new(&tools.map(tool));
        let with_functions: Vec<_> = tools.into_iter().filter(|name| bindings.is_tool_function(name)).collect();
        assert_eq!(with_functions, ["get_contract", "Search2"]);
        assert_eq!(bindings.input_names(), ["call", "call_async", "unwrap", "input"]);
        assert_eq!(bindings.input_values(&json!(1)).len(), 4);
        // Tool functions come by name lookup, and only for those tools.
        assert_eq!(bindings.lookup("get_contract"), Some(MontyObject::function("get_contract", None)));
        for name in ["list-items", "print", "call", "len", "nothing"] {
            assert!(bindings.lookup(name).is_none(), "{name}");
        }
    }

    #[test]
    fn call_merges_args_and_keywords() {
        let args = CallArgs::from((
            vec![MontyObject::string("t"), MontyObject::dict([(MontyObject::string("a"), MontyObject::int(1))])],
            kwargs(&[("b", MontyObject::list([MontyObject::bool(true)]))]),
        ));
        let request = parse_call(CALL, &args).unwrap();
        assert_eq!(request, CallRequest { name: "t".into(), args: json!({"a": 1, "b": [true]}) });
    }

    #[test]
    fn call_accepts_name_and_args_by_keyword() {
        let args = CallArgs::from((
            vec![],
            kwargs(&[
                ("name", MontyObject::string("t")),
                ("args", MontyObject::dict([(MontyObject::string("a"), MontyObject::int(1))])),
            ]),
        ));
        assert_eq!(parse_call(CALL, &args).unwrap().args, json!({"a": 1}));
        let none_args = CallArgs::from(vec![MontyObject::string("t"), MontyObject::none()]);
        assert_eq!(parse_call(CALL, &none_args).unwrap().args, json!({}));
    }

    #[test]
    fn call_refuses_bad_arguments() {
        let message = |args: CallArgs| parse_call(CALL, &args).unwrap_err().message().unwrap_or_default().to_owned();
        assert!(message(CallArgs::new()).contains("missing required argument"));
        assert!(message(vec![MontyObject::int(1)].into()).contains("name must be a str"));
        assert!(message(vec![MontyObject::string("t"), MontyObject::int(1)].into()).contains("args must be a dict"));
        let set_arg = CallArgs::from((vec![MontyObject::string("t")], kwargs(&[("s", MontyObject::set([]))])));
        assert!(message(set_arg).starts_with("argument is not JSON-serializable"));
        let duplicate = CallArgs::from((
            vec![MontyObject::string("t"), MontyObject::dict([(MontyObject::string("a"), MontyObject::int(1))])],
            kwargs(&[("a", MontyObject::int(2))]),
        ));
        assert!(message(duplicate).contains("multiple values for argument 'a'"));
    }

    #[test]
    fn tool_functions_take_keywords_or_one_dict() {
        let args = CallArgs::from((vec![], kwargs(&[("id", MontyObject::int(7))])));
        assert_eq!(parse_tool_call("get", &args).unwrap(), CallRequest { name: "get".into(), args: json!({"id": 7}) });
        let dict = CallArgs::from(vec![MontyObject::dict([(MontyObject::string("id"), MontyObject::int(7))])]);
        assert_eq!(parse_tool_call("get", &dict).unwrap().args, json!({"id": 7}));
        let error = parse_tool_call("get", &vec![MontyObject::int(7)].into()).unwrap_err();
        assert_eq!(error.exc_type(), ExcType::TypeError);
        assert!(error.message().unwrap_or_default().contains("keyword arguments only"));
    }

    #[test]
    fn unwrap_opens_call_results() {
        let ok = crate::convert::call_result_to_object(&tether_guest::CallResult::Ok(json!([1, 2])));
        assert_eq!(unwrap(&vec![ok].into()).unwrap(), MontyObject::list([MontyObject::int(1), MontyObject::int(2)]));
        let failure = tether_guest::Failure { code: "not_found".into(), message: "no such contract".into() };
        let err = crate::convert::call_result_to_object(&tether_guest::CallResult::Err(failure));
        let error = unwrap(&vec![err].into()).unwrap_err();
        assert_eq!(error.exc_type(), ExcType::RuntimeError);
        assert_eq!(error.message(), Some("tool call failed: not_found: no such contract"));
        assert_eq!(unwrap(&vec![MontyObject::int(1)].into()).unwrap_err().exc_type(), ExcType::TypeError);
    }
}
