//! Generators (and generator expressions) whose body calls a tool, and the
//! consumers that cannot drive them. monty runs a generator's frame on its own stack, so a tool call in
//! it pauses the run, but only when Python code drives it: a `for`, a
//! comprehension, `next()`, and the builtins that take an iterable through a
//! Python frame (`list`, `tuple`, `set`, `frozenset`, `dict`, `sorted`, `sum`,
//! `min`, `max`, `any`, `all`). Everything else — `enumerate`, `zip`, `map`,
//! `filter`, `str.join`, unpacking, `in`, a module's function — drives it from
//! inside the runtime, where the call cannot pause, and the run would fail at
//! that call, after the calls before it.

use std::collections::BTreeSet;

use ruff_python_ast::{
    self as ast, Expr, Stmt,
    visitor::{Visitor, walk_expr, walk_stmt},
};

/// The builtins that take an iterable and cannot pause while they drive it.
const DRIVEN_INSIDE: &[&str] = &["enumerate", "zip", "map", "filter", "reversed"];

/// The methods of built-in types that take an iterable, as in `'-'.join(g)`
/// and `xs.extend(g)`.
const METHODS_DRIVEN_INSIDE: &[&str] = &["join", "extend", "update", "fromkeys", "union", "difference"];

/// The names of the functions (at any depth) whose own body both yields and
/// calls a tool (by its function, or by `call`/`call_async`).
pub(super) fn tool_generators(body: &[Stmt], is_tool_call: &dyn Fn(&ast::ExprCall) -> bool) -> BTreeSet<String> {
    let mut finder = Finder { is_tool_call, names: BTreeSet::new() };
    finder.visit_body(body);
    finder.names
}

struct Finder<'f> {
    is_tool_call: &'f dyn Fn(&ast::ExprCall) -> bool,
    names: BTreeSet<String>,
}

impl<'a> Visitor<'a> for Finder<'_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        if let Stmt::FunctionDef(def) = stmt {
            let mut body = OwnBody { is_tool_call: self.is_tool_call, yields: false, calls_tool: false };
            body.visit_body(&def.body);
            if body.yields && body.calls_tool && !def.is_async {
                self.names.insert(def.name.to_string());
            }
        }
        walk_stmt(self, stmt);
    }
}

/// What a function's own body does (not its nested functions').
struct OwnBody<'f> {
    is_tool_call: &'f dyn Fn(&ast::ExprCall) -> bool,
    yields: bool,
    calls_tool: bool,
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

/// Whether `expr` (a generator expression) calls a tool in its own body.
pub(super) fn calls_tool(expr: &Expr, is_tool_call: &dyn Fn(&ast::ExprCall) -> bool) -> bool {
    let mut body = OwnBody { is_tool_call, yields: false, calls_tool: false };
    body.visit_expr(expr);
    body.calls_tool
}

/// The generator `expr` makes, if it is a call of one of `generators`.
pub(super) fn generator_made<'e>(expr: &'e Expr, generators: &BTreeSet<String>) -> Option<&'e str> {
    match expr {
        Expr::Call(ast::ExprCall { func, .. }) => match func.as_ref() {
            Expr::Name(name) if generators.contains(name.id.as_str()) => Some(name.id.as_str()),
            _ => None,
        },
        _ => None,
    }
}

/// How `call` names the consumer that would drive its argument from inside
/// the runtime (`enumerate()`, `.join()`, `itertools.islice()`), if it is one.
/// `modules` are the names the script imported (a module's functions are
/// the runtime's); `own` the names the script defines itself.
pub(super) fn consumer_driven_inside(
    call: &ast::ExprCall,
    modules: &BTreeSet<String>,
    own: &BTreeSet<String>,
) -> Option<String> {
    match call.func.as_ref() {
        Expr::Name(name) if DRIVEN_INSIDE.contains(&name.id.as_str()) && !own.contains(name.id.as_str()) => {
            Some(format!("{}()", name.id))
        }
        Expr::Attribute(attribute) => match attribute.value.as_ref() {
            Expr::Name(module) if modules.contains(module.id.as_str()) && !own.contains(module.id.as_str()) => {
                Some(format!("{}.{}()", module.id, attribute.attr))
            }
            _ if METHODS_DRIVEN_INSIDE.contains(&attribute.attr.as_str()) => Some(format!(".{}()", attribute.attr)),
            _ => None,
        },
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
