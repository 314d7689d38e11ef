//! Where a tool call cannot pause. monty pauses a run at a tool call only
//! when every frame between its loop and the call is a Python frame: a
//! generator's body driven by a `for`, a comprehension or `next()`, a
//! function called by Python code, or by a builtin that calls it through a
//! Python frame. A tool call reached from code the runtime drives from inside
//! itself, in Rust, cannot pause there: the run would fail at that call,
//! after the calls before it. This module names the script's functions and
//! generators that call tools, and the consumers that would drive them from
//! inside:
//!
//! - a generator (or generator expression) that calls a tool, handed to a
//!   module's function (`statistics.mean(...)`, `heapq.nlargest(...)`) or to
//!   a set or dict method such as `set.union` or `dict.fromkeys`;
//! - a function (or lambda) that calls a tool, handed to a module's function
//!   that calls it back from inside, such as `itertools.groupby(key=...)`,
//!   `heapq.nlargest(key=...)` or `collections.defaultdict(...)`;
//! - a special method that calls a tool, which the runtime calls from inside
//!   for an operator, a conversion or a protocol (`__getitem__` for `obj[k]`,
//!   `__str__` for an f-string, `__len__` for `len(obj)`, `__post_init__`).
//!   Only `__init__`, `__call__`, `__enter__` and `__exit__` are called as
//!   Python frames (measured in the sandbox, method by method); a special
//!   method that is a generator (`__iter__` with `yield`) only makes one,
//!   which a `for` drives where its calls pause.
//!
//! The builtins monty's patches route through Python frames are not
//! consumers here: they pause as a `for` does (`list`, `sum`, `any`,
//! `sorted`/`min`/`max` with a `key=`, `map`, `filter`, `enumerate`, `zip`,
//! `str.join`, `in`, unpacking, `list.extend`, `set.update`, `dict.update`,
//! `itertools.islice`/`chain`, `collections.deque`/`Counter`/`OrderedDict`,
//! `functools.reduce`; patches 0038 and 0041-0043).

use std::collections::BTreeSet;

use ruff_python_ast::{
    self as ast, Expr, Stmt,
    visitor::{Visitor, walk_expr, walk_stmt},
};

/// The functions of the runtime's modules that drive a generator through a
/// Python frame, by name: every other module function drives it from inside.
const MODULE_FUNCTIONS_PAUSING: &[&str] =
    &["islice", "chain", "from_iterable", "deque", "Counter", "OrderedDict", "reduce"];

/// The methods of built-in types that take an iterable and drive it from
/// inside, as in `s.union(g)`.
const METHODS_DRIVEN_INSIDE: &[&str] = &[
    "fromkeys",
    "union",
    "intersection",
    "difference",
    "symmetric_difference",
    "issubset",
    "issuperset",
    "isdisjoint",
];

/// The functions of the runtime's modules that call a function they are
/// given from inside the runtime, by module.
const CALLBACKS_DRIVEN_INSIDE: &[(&str, &[&str])] = &[
    ("itertools", &["groupby", "accumulate", "takewhile", "dropwhile", "filterfalse", "starmap"]),
    ("heapq", &["nlargest", "nsmallest", "merge"]),
    ("collections", &["defaultdict"]),
];

/// The special methods the runtime calls through a Python frame, where a
/// tool call pauses: a class's constructor, a call of an instance, `with`.
const SPECIAL_METHODS_PAUSING: &[&str] = &["__init__", "__call__", "__enter__", "__exit__"];

/// The script's functions (at any depth) that call a tool when they run:
/// by a tool's function, by `call`/`call_async`, or through another of
/// them. `generators` are those whose body yields.
#[derive(Debug, Default)]
pub(super) struct ToolCallers {
    /// Plain (not `async`) functions that do not yield.
    pub functions: BTreeSet<String>,
    /// Plain generator functions.
    pub generators: BTreeSet<String>,
    /// Every function the script defines, tool-calling or not.
    pub defined: BTreeSet<String>,
}

impl ToolCallers {
    /// Finds them in `body`, following calls between the script's functions
    /// by name until nothing new is found.
    pub(super) fn of(body: &[Stmt], is_tool_call: &dyn Fn(&ast::ExprCall) -> bool) -> Self {
        let mut defs = Defs::default();
        defs.visit_body(body);
        let mut callers =
            ToolCallers { defined: defs.0.iter().map(|def| def.name.to_string()).collect(), ..Default::default() };
        loop {
            let known: BTreeSet<String> = callers.functions.union(&callers.generators).cloned().collect();
            let calls =
                |call: &ast::ExprCall| is_tool_call(call) || called_name(call).is_some_and(|n| known.contains(n));
            let before = known.len();
            for def in &defs.0 {
                if def.is_async || !OwnBody::calls(&def.body, &calls) {
                    continue;
                }
                let set = if OwnBody::yields(&def.body) { &mut callers.generators } else { &mut callers.functions };
                set.insert(def.name.to_string());
            }
            if callers.functions.len() + callers.generators.len() == before {
                return callers;
            }
        }
    }

    /// Whether `call` calls a tool: directly, or through one of these functions.
    pub(super) fn calls_tool(&self, call: &ast::ExprCall, is_tool_call: &dyn Fn(&ast::ExprCall) -> bool) -> bool {
        self.runs_tool_call(call, is_tool_call) || called_name(call).is_some_and(|name| self.generators.contains(name))
    }

    /// Whether `call` itself runs a tool call: directly, or through one of
    /// these functions. A generator's call only makes the generator: its
    /// calls run where it is driven.
    pub(super) fn runs_tool_call(&self, call: &ast::ExprCall, is_tool_call: &dyn Fn(&ast::ExprCall) -> bool) -> bool {
        is_tool_call(call) || called_name(call).is_some_and(|name| self.functions.contains(name))
    }
}

/// Every function definition of the script that a bare name can call, at
/// any depth: not a class's methods, which only an attribute reaches
/// (`self.filter(...)`, not `filter(...)`).
#[derive(Default)]
struct Defs<'a>(Vec<&'a ast::StmtFunctionDef>);

impl<'a> Visitor<'a> for Defs<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::FunctionDef(def) => self.0.push(def),
            Stmt::ClassDef(class) => {
                for stmt in &class.body {
                    match stmt {
                        // A method's own body may hold functions a bare name calls.
                        Stmt::FunctionDef(method) => self.visit_body(&method.body),
                        stmt => self.visit_stmt(stmt),
                    }
                }
                return;
            }
            _ => {}
        }
        walk_stmt(self, stmt);
    }
}

/// The name a call calls, when it calls a bare name.
fn called_name(call: &ast::ExprCall) -> Option<&str> {
    match call.func.as_ref() {
        Expr::Name(name) => Some(name.id.as_str()),
        _ => None,
    }
}

/// The sentence for `method` of `class` when it is a special method the
/// runtime calls from inside itself and `body` calls a tool (`calls`), or
/// `None` when it may.
pub(super) fn special_method_hint(
    class: &str,
    method: &ast::StmtFunctionDef,
    calls: &dyn Fn(&ast::ExprCall) -> bool,
) -> Option<String> {
    let name = method.name.as_str();
    let special = name.len() > 4 && name.starts_with("__") && name.ends_with("__");
    // A special method that yields (`def __iter__(self): ... yield ...`) is a
    // generator function: the runtime's call only makes the generator, and its
    // calls pause where a `for` drives it.
    if !special
        || method.is_async
        || SPECIAL_METHODS_PAUSING.contains(&name)
        || OwnBody::yields(&method.body)
        || !OwnBody::calls(&method.body, calls)
    {
        return None;
    }
    let instead = match name {
        "__post_init__" => "call the tool before you build the dataclass and pass its result as a field".to_owned(),
        "__iter__" | "__next__" => {
            "write a generator function (def ...: yield ...) that calls the tool instead".to_owned()
        }
        _ => format!("make it a plain method (def {}(self, ...)) and call that", name.trim_matches('_')),
    };
    Some(format!(
        "{class}.{name} calls a tool, but the runtime calls {name} from inside itself, where a tool call cannot \
         pause: {instead}"
    ))
}

/// What a function's own body does (not its nested functions' or lambdas').
struct OwnBody<'f> {
    is_tool_call: &'f dyn Fn(&ast::ExprCall) -> bool,
    yields: bool,
    calls_tool: bool,
}

impl OwnBody<'_> {
    fn walk(body: &[Stmt], is_tool_call: &dyn Fn(&ast::ExprCall) -> bool) -> (bool, bool) {
        let mut own = OwnBody { is_tool_call, yields: false, calls_tool: false };
        own.visit_body(body);
        (own.yields, own.calls_tool)
    }

    fn yields(body: &[Stmt]) -> bool {
        Self::walk(body, &|_| false).0
    }

    fn calls(body: &[Stmt], is_tool_call: &dyn Fn(&ast::ExprCall) -> bool) -> bool {
        Self::walk(body, is_tool_call).1
    }
}

impl<'a> Visitor<'a> for OwnBody<'_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        if !matches!(stmt, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
            walk_stmt(self, stmt);
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Lambda(_) => return,
            Expr::Yield(_) | Expr::YieldFrom(_) => self.yields = true,
            Expr::Call(call) if (self.is_tool_call)(call) => self.calls_tool = true,
            _ => {}
        }
        walk_expr(self, expr);
    }
}

/// Whether `expr` (a generator expression or a lambda) calls a tool in its
/// own body. A generator expression's outermost iterable is not its body:
/// it is evaluated where the expression is written, where a call pauses.
pub(super) fn calls_tool(expr: &Expr, is_tool_call: &dyn Fn(&ast::ExprCall) -> bool) -> bool {
    let mut own = OwnBody { is_tool_call, yields: false, calls_tool: false };
    match expr {
        Expr::Lambda(lambda) => own.visit_expr(&lambda.body),
        Expr::Generator(generator) => {
            own.visit_expr(&generator.elt);
            for (n, comprehension) in generator.generators.iter().enumerate() {
                if n > 0 {
                    own.visit_expr(&comprehension.iter);
                }
                for condition in &comprehension.ifs {
                    own.visit_expr(condition);
                }
            }
        }
        _ => own.visit_expr(expr),
    }
    own.calls_tool
}

/// The generator `expr` makes, if it is a call of one of `generators`.
pub(super) fn generator_made<'e>(expr: &'e Expr, generators: &BTreeSet<String>) -> Option<&'e str> {
    match expr {
        Expr::Call(call) => called_name(call).filter(|name| generators.contains(*name)),
        _ => None,
    }
}

/// What a call calls, as far as this module tells callees apart.
enum Callee<'c> {
    /// A name the script imported: a module's function or class.
    Imported(&'c str),
    /// `module.function`, of a module the script imported.
    ModuleFunction { module: &'c str, function: &'c str },
    /// A method of some other value.
    Method(&'c str),
}

/// What `call` calls. `imported` are the names the script imported (a
/// module's functions are the runtime's); `own` the names the script defines
/// itself, which are its own whatever they shadow.
fn callee<'c>(call: &'c ast::ExprCall, imported: &BTreeSet<String>, own: &BTreeSet<String>) -> Option<Callee<'c>> {
    let theirs = |name: &str| imported.contains(name) && !own.contains(name);
    match call.func.as_ref() {
        Expr::Name(name) if theirs(name.id.as_str()) => Some(Callee::Imported(name.id.as_str())),
        Expr::Attribute(attribute) => match attribute.value.as_ref() {
            Expr::Name(module) if theirs(module.id.as_str()) => {
                Some(Callee::ModuleFunction { module: module.id.as_str(), function: attribute.attr.as_str() })
            }
            _ => Some(Callee::Method(attribute.attr.as_str())),
        },
        _ => None,
    }
}

/// How `call` names the consumer that would drive its argument from inside
/// the runtime (`statistics.mean()`, `.union()`), if it is one: a module's
/// function, by `module.function` or by a name the script imported, or a
/// method that drives it inside.
pub(super) fn consumer_driven_inside(
    call: &ast::ExprCall,
    imported: &BTreeSet<String>,
    own: &BTreeSet<String>,
) -> Option<String> {
    match callee(call, imported, own)? {
        Callee::Imported(function) if !MODULE_FUNCTIONS_PAUSING.contains(&function) => Some(format!("{function}()")),
        Callee::ModuleFunction { module, function } if !MODULE_FUNCTIONS_PAUSING.contains(&function) => {
            Some(format!("{module}.{function}()"))
        }
        Callee::Method(method) if METHODS_DRIVEN_INSIDE.contains(&method) => Some(format!(".{method}()")),
        _ => None,
    }
}

/// How `call` names the module function that would call a function it is
/// given from inside the runtime (`itertools.groupby()`, `defaultdict()`),
/// if it is one: by `module.function`, or by a name the script imported.
pub(super) fn callback_driven_inside(
    call: &ast::ExprCall,
    imported: &BTreeSet<String>,
    own: &BTreeSet<String>,
) -> Option<String> {
    let drives = |module: Option<&str>, function: &str| {
        CALLBACKS_DRIVEN_INSIDE
            .iter()
            .any(|(owner, functions)| module.is_none_or(|module| module == *owner) && functions.contains(&function))
    };
    match callee(call, imported, own)? {
        Callee::Imported(function) if drives(None, function) => Some(format!("{function}()")),
        Callee::ModuleFunction { module, function } if drives(Some(module), function) => {
            Some(format!("{module}.{function}()"))
        }
        _ => None,
    }
}

/// The sentence for a consumer that cannot drive a tool-calling generator
/// expression.
pub(super) fn expression_hint(consumer: &str) -> String {
    format!(
        "{consumer} cannot pause for the tool calls in this generator expression here (it drives it from inside \
         the runtime): write a list comprehension, [... for ...], instead"
    )
}

/// The sentence for a consumer that cannot drive a tool-calling generator.
pub(super) fn hint(consumer: &str, generator: &str) -> String {
    format!(
        "{consumer} cannot pause for the tool calls of the generator {generator}() here (it drives the generator \
         from inside the runtime): take its values first with list({generator}(...)), or loop over it with a for"
    )
}

/// The sentence for a module function that cannot call back a function
/// that calls a tool (`function` names it, or is `None` for a lambda).
pub(super) fn callback_hint(consumer: &str, function: Option<&str>) -> String {
    let what = function.map_or_else(|| "this lambda".to_owned(), |name| format!("{name}()"));
    format!(
        "{consumer} cannot pause for the tool calls of {what} here (it calls it from inside the runtime): make \
         the calls first, in a for loop or a list comprehension, and hand them their results"
    )
}
