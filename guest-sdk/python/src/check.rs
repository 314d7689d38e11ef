//! What is refused before a script runs: a script that uses what the
//! runtime lacks, or calls a tool in a way its schema rules out, ends as
//! `script_refused` before its first line, not after three emails went out.
//!
//! Two sources of findings, each named by line and column with one sentence
//! on how to write it instead:
//!
//! - [`compile_finding`]: what monty itself refuses when it compiles the
//!   script (metaclasses, async generators, `async for`, relative imports, …):
//!   monty is the one judge of its constructs, so a construct a patch adds
//!   stops being refused with no change here; this module only words the
//!   hint.
//! - [`script_findings`]: one pass over the syntax tree of ruff's parser,
//!   the version monty parses with: an `import` of a module the runtime does
//!   not ship ([`sandbox::importable_modules`], monty's own list), and a
//!   call of a tool's function (or `call("tool", …)`) with a keyword the
//!   tool's input schema does not have, or a literal whose type (or value,
//!   for an `enum`) it rules out. The schema is the one the model's typed
//!   stubs are made from (`tether-turn`'s `stubs.rs`), and the check follows
//!   the stubs: keyword-only parameters, an optional one may be `None`.
//!   The same pass finds a base class monty refuses (a built-in type,
//!   `TypedDict`, a dataclass over a dataclass), a function as `re.sub`'s
//!   replacement, and a tool call the runtime would make from inside itself,
//!   where it cannot pause (`pausing`: a special method such as
//!   `__getitem__`, `statistics.mean(pages())`,
//!   `itertools.groupby(xs, key=owner_of)`).
//!
//! Only what is certain is refused: an import inside a `try` that catches
//! `ImportError` (or under `if TYPE_CHECKING:`), a keyword passed through
//! `**kwargs`, a tool whose name the script binds to something else, a
//! value that is not a literal, a schema that admits other keys or that
//! this pass cannot read: none is refused. One exception, on purpose: a
//! special method that calls a tool (`__getitem__`, `__str__`, ...) is
//! refused where it is defined, though a script might only ever call it by
//! name, because a class defines one for the runtime to call, and the run
//! would fail there after the calls before it.

use std::collections::{BTreeMap, BTreeSet};

use monty_types::{ExcType, MontyException};
use ruff_python_ast::{
    self as ast, Expr, ExprContext, Number, Pattern, Stmt, UnaryOp,
    visitor::{Visitor, walk_expr, walk_pattern, walk_stmt},
};
use ruff_text_size::{Ranged, TextRange};
use serde_json::{Map, Value};
use tether_codes::RunErrorKind;
use tether_guest::{ScriptError, ToolDoc};

mod pausing;

use crate::{
    api::{Bindings, CALL, CALL_ASYNC},
    errors::SCRIPT_NAME,
    sandbox,
};

/// How deep the pass follows nested statements and expressions. monty
/// compiles nothing deeper (its `MAX_NESTING_DEPTH` in release builds), and
/// its parser has bounded the tree before this pass sees it; the cap keeps
/// the walk's own recursion small on the guest's stack even when monty's
/// compile stopped early, at a construct it refuses.
const MAX_DEPTH: usize = 200;

/// How deep a schema's `$ref`s are followed.
const MAX_REFS: usize = 8;

/// One reason to refuse the script.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Finding {
    /// The 1-based line it is on.
    pub line: u32,
    /// The 1-based column (in characters) where it starts.
    pub column: u32,
    /// The exception a run would have raised there, e.g. `ModuleNotFoundError`.
    pub exception_type: String,
    /// One sentence: what cannot run, and how to write it instead.
    pub text: String,
    /// A CPython-style traceback pointing at it (monty's own, for what
    /// monty refused).
    pub traceback: String,
}

/// The finding of a script monty would not compile for a reason other than
/// its syntax: a construct it does not have (`NotImplementedError`) or an
/// import it cannot resolve at compile time (`ImportError`). `None` for a
/// `SyntaxError` (or anything else), which stays a `syntax_error`.
pub fn compile_finding(exception: &MontyException) -> Option<Finding> {
    let exception_type = exception.exc_type();
    if !matches!(exception_type, ExcType::NotImplementedError | ExcType::ImportError) {
        return None;
    }
    let message = exception.message().unwrap_or_default();
    let (line, column) = exception.traceback().last().map_or((0, 0), |frame| (frame.start.line, frame.start.column));
    Some(Finding {
        line,
        column,
        exception_type: exception_type.to_string(),
        text: construct_hint(message),
        traceback: exception.to_string(),
    })
}

/// What monty's compile refusals say (a fragment of its message), and how
/// to write each instead. A construct not listed gets monty's message and a
/// general hint.
const CONSTRUCT_HINTS: &[(&str, &str)] = &[
    (
        "metaclasses and class keywords",
        "metaclasses and class keywords are not available here: write a plain class (a base class of your own is \
         fine)",
    ),
    ("starred base classes", "class C(*bases) is not available here: name each base class"),
    (
        "async generators",
        "async generators (async def with yield) are not available here: collect the values in a list and return \
         it, or write a plain generator over awaited results",
    ),
    ("yield inside lambda", "yield inside a lambda is not available here: write a def with yield"),
    (
        "async for",
        "async for is not available here: await asyncio.gather(...) of the awaitables and loop over its results \
         with a plain for",
    ),
    ("async context managers", "async with is not available here: do the setup and the cleanup in a try/finally"),
    (
        "async comprehensions",
        "async comprehensions are not available here: await asyncio.gather(...) of the awaitables, then use a plain \
         comprehension over the results",
    ),
    ("exception groups", "except* is not available here: use a plain except clause"),
    ("the 'del' statement", "del is not available here: use dict.pop(key) or list.pop(i), or rebind the name"),
    ("type aliases", "type statements are not available here: assign the type to a plain name, X = list[int]"),
    ("template strings", "t-strings are not available here: use an f-string"),
    ("starred expressions", "this use of *expr is not available here: build the list with + or list(...) instead"),
    ("Wildcard imports", "from ... import * is not available here: import the names you use by name"),
    ("multiple **kwargs", "only one **mapping per call is available here: merge them first, f(**{**a, **b})"),
    (
        "class bodies containing",
        "a class body here holds only methods and name = value lines: move other statements out of the class",
    ),
    (
        "complex class variable targets",
        "a class body here assigns plain names only (name = value): set other attributes in __init__",
    ),
    (
        "assignment expressions (`:=`) in class bodies",
        "the walrus := is not available in a class body: assign the value on a line of its own",
    ),
    ("future feature", "this __future__ feature is not available here: remove it from the import"),
    ("aliasing a `__future__` feature", "a __future__ feature cannot be renamed: drop the `as`"),
    (
        "relative import",
        "relative imports are not available here: a script is not in a package, so import by module name",
    ),
    ("read-only module attribute", "this module attribute is read-only here: use a name of your own"),
    ("IPython escape commands", "IPython's % and ! commands are not Python: remove them"),
];

/// The one-sentence hint for what monty said it refuses.
fn construct_hint(message: &str) -> String {
    CONSTRUCT_HINTS.iter().find(|(fragment, _)| message.contains(fragment)).map_or_else(
        || format!("{message}: this is not available in Tether's Python (monty), so write it another way"),
        |(_, hint)| (*hint).to_owned(),
    )
}

/// What the script would get wrong, found without running it: imports of
/// modules the runtime does not ship, and calls of `tools` (those with a
/// schema: the sidecar sends the schemas of the tools the source names)
/// that their schema rules out. A source that does not parse has none (its
/// compile reports it).
pub fn script_findings(source: &str, tools: &[ToolDoc], bindings: &Bindings) -> Vec<Finding> {
    let Ok(parsed) = ruff_python_parser::parse_module(source) else {
        return Vec::new();
    };
    let body = &parsed.syntax().body;
    let mut bound = BoundNames::default();
    bound.visit_body(body);
    let tool_callers =
        pausing::ToolCallers::of(body, &|call: &ast::ExprCall| is_tool_call(call, &bound.names, bindings));
    let mut pass = Pass {
        lines: Lines::new(source),
        importable: sandbox::importable_modules(),
        tools: tools.iter().map(|tool| (tool.name.as_str(), tool)).collect(),
        params: BTreeMap::new(),
        bindings,
        bound: bound.names,
        own: bound.own,
        imported: bound.imported,
        tool_callers,
        depth: 0,
        imports_guarded: 0,
        dataclasses: BTreeSet::new(),
        findings: Vec::new(),
    };
    pass.visit_body(body);
    pass.findings
}

/// Every name the script binds, in any scope: a tool function or `call` it
/// rebinds is not the runtime's, so its calls are not checked.
#[derive(Default)]
struct BoundNames {
    names: BTreeSet<String>,
    /// The names bound otherwise than by an import: what the script itself
    /// defines (a `class list:` of its own is a base monty takes).
    own: BTreeSet<String>,
    /// The names bound by an import: modules, and names taken from them.
    imported: BTreeSet<String>,
    depth: usize,
}

impl BoundNames {
    fn bind(&mut self, name: &str) {
        self.names.insert(name.to_owned());
        self.own.insert(name.to_owned());
    }

    fn bind_import(&mut self, name: &str) {
        self.names.insert(name.to_owned());
        self.imported.insert(name.to_owned());
    }
}

impl<'a> Visitor<'a> for BoundNames {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        if self.depth >= MAX_DEPTH {
            return;
        }
        match stmt {
            Stmt::FunctionDef(def) => self.bind(def.name.as_str()),
            Stmt::ClassDef(class) => self.bind(class.name.as_str()),
            Stmt::Import(import) => {
                for alias in &import.names {
                    let name = alias.asname.as_ref().unwrap_or(&alias.name).as_str();
                    self.bind_import(name.split('.').next().unwrap_or(name));
                }
            }
            Stmt::ImportFrom(import) => {
                for alias in &import.names {
                    self.bind_import(alias.asname.as_ref().unwrap_or(&alias.name).as_str());
                }
            }
            Stmt::Global(ast::StmtGlobal { names, .. }) | Stmt::Nonlocal(ast::StmtNonlocal { names, .. }) => {
                for name in names {
                    self.bind(name.as_str());
                }
            }
            Stmt::Try(try_stmt) => {
                for ast::ExceptHandler::ExceptHandler(handler) in &try_stmt.handlers {
                    if let Some(name) = &handler.name {
                        self.bind(name.as_str());
                    }
                }
            }
            _ => {}
        }
        self.depth += 1;
        walk_stmt(self, stmt);
        self.depth -= 1;
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if self.depth >= MAX_DEPTH {
            return;
        }
        if let Expr::Name(name) = expr
            && matches!(name.ctx, ExprContext::Store | ExprContext::Del)
        {
            self.bind(name.id.as_str());
        }
        self.depth += 1;
        walk_expr(self, expr);
        self.depth -= 1;
    }

    fn visit_parameter(&mut self, parameter: &'a ast::Parameter) {
        self.bind(parameter.name.as_str());
    }

    fn visit_pattern(&mut self, pattern: &'a Pattern) {
        match pattern {
            Pattern::MatchAs(ast::PatternMatchAs { name: Some(name), .. })
            | Pattern::MatchStar(ast::PatternMatchStar { name: Some(name), .. })
            | Pattern::MatchMapping(ast::PatternMatchMapping { rest: Some(name), .. }) => self.bind(name.as_str()),
            _ => {}
        }
        walk_pattern(self, pattern);
    }
}

/// The pass that finds what to refuse.
struct Pass<'s> {
    lines: Lines<'s>,
    importable: Vec<&'static str>,
    tools: BTreeMap<&'s str, &'s ToolDoc>,
    /// Each checked tool's parameters, read from its schema once; `None`
    /// when it has no schema this pass can follow.
    params: BTreeMap<String, Option<Params>>,
    bindings: &'s Bindings,
    bound: BTreeSet<String>,
    /// The names the script binds otherwise than by an import.
    own: BTreeSet<String>,
    /// The names the script binds by an import.
    imported: BTreeSet<String>,
    /// The script's functions and generators that call a tool.
    tool_callers: pausing::ToolCallers,
    depth: usize,
    /// How many `try` bodies that catch `ImportError` the walk is in.
    imports_guarded: usize,
    /// The classes defined so far under `@dataclass`, by name.
    dataclasses: BTreeSet<String>,
    findings: Vec<Finding>,
}

impl<'a> Visitor<'a> for Pass<'_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        if self.depth >= MAX_DEPTH {
            return;
        }
        self.depth += 1;
        match stmt {
            Stmt::Import(import) => {
                for alias in &import.names {
                    self.check_import(alias.name.as_str(), alias.range());
                }
            }
            // A relative import, and `from __future__`, are monty's to judge.
            Stmt::ImportFrom(import) if import.level == 0 => {
                if let Some(module) = import.module.as_ref().filter(|module| module.as_str() != "__future__") {
                    self.check_import(module.as_str(), import.range());
                }
            }
            Stmt::ClassDef(class) => {
                self.check_class_bases(class);
                self.check_special_methods(class);
            }
            Stmt::Try(try_stmt) if try_stmt.handlers.iter().any(catches_import_error) => {
                self.imports_guarded += 1;
                self.visit_body(&try_stmt.body);
                self.imports_guarded -= 1;
                for handler in &try_stmt.handlers {
                    self.visit_except_handler(handler);
                }
                self.visit_body(&try_stmt.orelse);
                self.visit_body(&try_stmt.finalbody);
                self.depth -= 1;
                return;
            }
            // Never runs: `if TYPE_CHECKING:` (monty skips its imports too), `if False:`.
            Stmt::If(if_stmt) if never_true(&if_stmt.test) => {
                for clause in &if_stmt.elif_else_clauses {
                    self.visit_elif_else_clause(clause);
                }
                self.depth -= 1;
                return;
            }
            _ => {}
        }
        walk_stmt(self, stmt);
        self.depth -= 1;
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if self.depth >= MAX_DEPTH {
            return;
        }
        if let Expr::Call(call) = expr {
            self.check_call(call);
            self.check_generator_consumer(call);
            self.check_callback_consumer(call);
            self.check_function_replacement(call);
        }
        self.depth += 1;
        walk_expr(self, expr);
        self.depth -= 1;
    }
}

impl Pass<'_> {
    /// `import module` (or `from module import …`) of a module the runtime
    /// does not ship. monty's list names each module by its import name,
    /// submodules included (`os.path`), and monty refuses any other
    /// submodule of a module it ships (`collections.abc`: "'collections' is
    /// not a package"), so a dotted name is judged whole.
    fn check_import(&mut self, module: &str, range: TextRange) {
        if self.imports_guarded > 0 || module.is_empty() || self.importable.contains(&module) {
            return;
        }
        let top = module.split('.').next().unwrap_or(module);
        let missing = if self.importable.contains(&top) {
            format!("module '{module}' is not available here ('{top}' is, without it)")
        } else {
            format!("module '{top}' is not available here")
        };
        let text = format!(
            "{missing}: {}; the modules there are: {}",
            sandbox::why_not_importable(module),
            self.importable.join(", ")
        );
        self.find(range, "ModuleNotFoundError", text);
    }

    /// The special methods of `class` that call a tool and that the runtime
    /// calls from inside itself (`__getitem__`, `__str__`, ...).
    fn check_special_methods(&mut self, class: &ast::StmtClassDef) {
        let found: Vec<_> = class
            .body
            .iter()
            .filter_map(|stmt| match stmt {
                Stmt::FunctionDef(method) => {
                    let calls =
                        |call: &ast::ExprCall| self.tool_callers.runs_tool_call(call, &|c| self.is_tool_call(c));
                    pausing::special_method_hint(class.name.as_str(), method, &calls)
                        .map(|text| (method.name.range(), text))
                }
                _ => None,
            })
            .collect();
        for (range, text) in found {
            self.find(range, "NotImplementedError", text);
        }
    }

    /// A class whose base monty refuses when the class statement runs: a
    /// built-in type, an exception with a constructor of its own (`OSError`,
    /// `StopIteration`, …), one of `typing`'s special forms, or a dataclass
    /// under `@dataclass`.
    /// A base the script defines itself is its own class, and is left to run.
    fn check_class_bases(&mut self, class: &ast::StmtClassDef) {
        let bases = class.arguments.as_ref().map_or(&[][..], |arguments| &arguments.args[..]);
        // `class Level(int, Enum)`: the mixin form of IntEnum, which monty's enum builds.
        let enum_mixin = bases.iter().any(|base| {
            let name = match base {
                Expr::Name(name) => name.id.as_str(),
                Expr::Attribute(attribute) => attribute.attr.as_str(),
                _ => "",
            };
            matches!(name, "Enum" | "IntEnum" | "StrEnum")
        });
        for base in bases {
            if enum_mixin && matches!(base, Expr::Name(name) if matches!(name.id.as_str(), "int" | "str")) {
                continue;
            }
            let name = match base {
                Expr::Name(name) if !self.own.contains(name.id.as_str()) => name.id.as_str(),
                Expr::Attribute(attribute) if matches!(attribute.value.as_ref(), Expr::Name(module) if module.id.as_str() == "typing") => {
                    attribute.attr.as_str()
                }
                _ => continue,
            };
            if let Some(text) = refused_base(name) {
                self.find(base.range(), "TypeError", text);
            }
        }
        if is_dataclass(&class.decorator_list) {
            for base in bases {
                if let Expr::Name(name) = base
                    && self.dataclasses.contains(name.id.as_str())
                {
                    let text = format!(
                        "a dataclass cannot inherit another dataclass here ({} from {}): declare all the fields in \
                         one dataclass, or drop @dataclass from the subclass and write its __init__",
                        class.name, name.id
                    );
                    self.find(base.range(), "TypeError", text);
                }
            }
            self.dataclasses.insert(class.name.to_string());
        }
    }

    /// A generator that calls a tool, handed to a consumer that drives it
    /// from inside the runtime (`statistics.mean(pages())`,
    /// `s.union(pages())`): the run would fail at the generator's first call.
    fn check_generator_consumer(&mut self, call: &ast::ExprCall) {
        let Some(consumer) = pausing::consumer_driven_inside(call, &self.imported, &self.own) else {
            return;
        };
        // A starred argument hands the consumer the generator's items, which
        // `f(*g)` collects in a Python frame (and `*(genexpr)` builds as a list).
        for arg in call.arguments.args.iter().filter(|arg| !arg.is_starred_expr()) {
            self.check_generator_driven_inside(arg, &consumer);
        }
    }

    fn check_generator_driven_inside(&mut self, expr: &Expr, consumer: &str) {
        let text = if let Some(generator) = pausing::generator_made(expr, &self.tool_callers.generators) {
            pausing::hint(consumer, generator)
        } else if matches!(expr, Expr::Generator(_)) && self.calls_tool(expr) {
            pausing::expression_hint(consumer)
        } else {
            return;
        };
        self.find(expr.range(), "NotImplementedError", text);
    }

    /// A function or lambda that calls a tool, handed to a module's function
    /// that calls it back from inside the runtime
    /// (`itertools.groupby(xs, key=owner_of)`): the run would fail at its
    /// first call.
    fn check_callback_consumer(&mut self, call: &ast::ExprCall) {
        let Some(consumer) = pausing::callback_driven_inside(call, &self.imported, &self.own) else {
            return;
        };
        let args = call.arguments.args.iter().chain(call.arguments.keywords.iter().map(|keyword| &keyword.value));
        let found: Vec<_> = args
            .filter_map(|arg| match arg {
                Expr::Name(name) if self.tool_callers.functions.contains(name.id.as_str()) => {
                    Some((arg.range(), pausing::callback_hint(&consumer, Some(name.id.as_str()))))
                }
                Expr::Lambda(_) if self.calls_tool(arg) => Some((arg.range(), pausing::callback_hint(&consumer, None))),
                _ => None,
            })
            .collect();
        for (range, text) in found {
            self.find(range, "NotImplementedError", text);
        }
    }

    /// `re.sub(pattern, function, text)` (or `subn`, or a compiled
    /// pattern's): monty's `re` takes a string replacement only.
    fn check_function_replacement(&mut self, call: &ast::ExprCall) {
        let Expr::Attribute(attribute) = call.func.as_ref() else {
            return;
        };
        let method = attribute.attr.as_str();
        if method != "sub" && method != "subn" {
            return;
        }
        let by_module = matches!(attribute.value.as_ref(), Expr::Name(module) if module.id.as_str() == "re"
            && self.imported.contains("re") && !self.own.contains("re"));
        let args = &call.arguments.args;
        let replacement = if by_module { args.get(1) } else { args.first() }
            .or_else(|| call.arguments.find_keyword("repl").map(|keyword| &keyword.value));
        let is_function = match replacement {
            Some(Expr::Lambda(_)) => true,
            Some(Expr::Name(name)) => self.tool_callers.defined.contains(name.id.as_str()),
            _ => false,
        };
        if let Some(replacement) = replacement.filter(|_| is_function) {
            let shown = if by_module { format!("re.{method}()") } else { format!(".{method}()") };
            let text = format!(
                "{shown} with a function as the replacement is not available here: build the text in a loop over \
                 re.finditer(...) (m.start(), m.end(), m.group()), or pass a replacement string such as r'\\1'"
            );
            self.find(replacement.range(), "NotImplementedError", text);
        }
    }

    /// Whether a generator expression's or a lambda's own body calls a tool,
    /// directly or through the script's functions.
    fn calls_tool(&self, expr: &Expr) -> bool {
        pausing::calls_tool(expr, &|call: &ast::ExprCall| self.tool_callers.calls_tool(call, &|c| self.is_tool_call(c)))
    }

    /// Whether `call` calls a tool: its function, or `call`/`call_async`.
    fn is_tool_call(&self, call: &ast::ExprCall) -> bool {
        is_tool_call(call, &self.bound, self.bindings)
    }

    /// A call of a tool, by its function or by `call`/`call_async` with a
    /// literal name: each keyword its schema does not have, each literal of
    /// a type (or `enum` value) its schema rules out.
    fn check_call(&mut self, call: &ast::ExprCall) {
        if !self.is_tool_call(call) {
            return;
        }
        let Expr::Name(function) = call.func.as_ref() else {
            return;
        };
        let function = function.id.as_str();
        let by_call = function == CALL || function == CALL_ASYNC;
        let tool = if by_call {
            // call("tool", …) or call(name="tool", …)
            let name = call.arguments.args.first().or_else(|| {
                call.arguments.keywords.iter().find(|k| k.arg.as_ref().is_some_and(|a| a == "name")).map(|k| &k.value)
            });
            match name {
                Some(Expr::StringLiteral(name)) => name.value.to_str().to_owned(),
                _ => return,
            }
        } else {
            function.to_owned()
        };
        let Some(params) = self.params(&tool) else {
            return;
        };
        let shown = if by_call { format!("call({tool:?}, …)") } else { format!("{tool}()") };
        let mut found = Vec::new();
        for keyword in &call.arguments.keywords {
            // `**kwargs`: its keys are known only when it runs.
            let Some(arg) = &keyword.arg else {
                continue;
            };
            let arg = arg.as_str();
            if by_call && (arg == "name" || arg == "args") {
                continue;
            }
            let text = match params.property(arg) {
                None if params.closed => Some(params.unknown_keyword(&shown, arg)),
                None => None,
                Some(property) => params
                    .literal_mismatch(property, arg, &keyword.value)
                    .map(|why| format!("{shown}'s parameter '{arg}' {why}")),
            };
            if let Some(text) = text {
                found.push((keyword.range(), text));
            }
        }
        for (range, text) in found {
            self.find(range, "TypeError", text);
        }
    }

    /// The parameters of `tool`, if it is a tool of the run with a schema.
    fn params(&mut self, tool: &str) -> Option<Params> {
        if let Some(params) = self.params.get(tool) {
            return params.clone();
        }
        let params = self.tools.get(tool).and_then(|doc| doc.input_schema.parse().ok()).and_then(Params::of);
        self.params.insert(tool.to_owned(), params.clone());
        params
    }

    fn find(&mut self, range: TextRange, exception_type: &str, text: String) {
        let (line, column) = self.lines.position(range);
        let traceback = format!(
            "Traceback (most recent call last):\n  File \"{SCRIPT_NAME}\", line {line}\n{}{exception_type}: {text}",
            self.lines.preview(range)
        );
        self.findings.push(Finding { line, column, exception_type: exception_type.to_owned(), text, traceback });
    }
}

/// Whether `call` calls a tool — its function, or `call`/`call_async` — in a
/// script that binds `bound` (a name it binds is not the runtime's).
fn is_tool_call(call: &ast::ExprCall, bound: &BTreeSet<String>, bindings: &Bindings) -> bool {
    match call.func.as_ref() {
        Expr::Name(name) => {
            let name = name.id.as_str();
            !bound.contains(name) && (name == CALL || name == CALL_ASYNC || bindings.is_tool_function(name))
        }
        _ => false,
    }
}

/// Why a class cannot take `base` (a built-in name) as its base here, and
/// what to write instead; `None` for a base monty takes.
fn refused_base(base: &str) -> Option<String> {
    const BUILTIN_TYPES: &[&str] = &[
        "bool",
        "bytearray",
        "bytes",
        "complex",
        "dict",
        "float",
        "frozenset",
        "int",
        "list",
        "memoryview",
        "range",
        "set",
        "slice",
        "str",
        "tuple",
        "type",
    ];
    // monty's patch 0039 takes every other built-in exception as a base.
    const EXCEPTIONS_WITH_OWN_CONSTRUCTORS: &[&str] = &[
        "OSError",
        "IOError",
        "EnvironmentError",
        "FileNotFoundError",
        "FileExistsError",
        "PermissionError",
        "IsADirectoryError",
        "NotADirectoryError",
        "TimeoutError",
        "ConnectionError",
        "BrokenPipeError",
        "ConnectionResetError",
        "ConnectionRefusedError",
        "ConnectionAbortedError",
        "BlockingIOError",
        "ChildProcessError",
        "InterruptedError",
        "ProcessLookupError",
        "ImportError",
        "ModuleNotFoundError",
        "StopIteration",
        "StopAsyncIteration",
        "SystemExit",
        "SyntaxError",
        "IndentationError",
        "TabError",
        "UnicodeDecodeError",
        "UnicodeEncodeError",
        "JSONDecodeError",
        "TOMLDecodeError",
    ];
    let text = match base {
        _ if BUILTIN_TYPES.contains(&base) => format!(
            "subclassing the built-in type '{base}' is not available here: keep the {base} in an attribute of your \
             own class (self.value = ...) and write the methods you need"
        ),
        "TypedDict" => "TypedDict is not available here: use a plain dict with those keys".to_owned(),
        "NamedTuple" => {
            "NamedTuple classes are not available here: use collections.namedtuple('Name', ['a', 'b']) or a \
             @dataclass"
                .to_owned()
        }
        _ if EXCEPTIONS_WITH_OWN_CONSTRUCTORS.contains(&base) => format!(
            "subclassing {base} is not available here (its special constructor and attributes are not modelled): \
             derive your exception from Exception, or ValueError, instead"
        ),
        "Protocol" | "Generic" => {
            format!("{base} cannot be a base here: drop it from the bases, a plain class works by its methods")
        }
        _ => return None,
    };
    Some(text)
}

/// Whether a class is decorated with `@dataclass` (`@dataclasses.dataclass`,
/// with or without arguments).
fn is_dataclass(decorators: &[ast::Decorator]) -> bool {
    decorators.iter().any(|decorator| {
        let target = match &decorator.expression {
            Expr::Call(call) => call.func.as_ref(),
            other => other,
        };
        match target {
            Expr::Name(name) => name.id.as_str() == "dataclass",
            Expr::Attribute(attribute) => attribute.attr.as_str() == "dataclass",
            _ => false,
        }
    })
}

/// Whether an `except` clause catches a failed import.
fn catches_import_error(handler: &ast::ExceptHandler) -> bool {
    let ast::ExceptHandler::ExceptHandler(handler) = handler;
    let Some(caught) = &handler.type_ else {
        return true;
    };
    let catches = |expr: &Expr| {
        let name = match expr {
            Expr::Name(name) => name.id.as_str(),
            Expr::Attribute(attribute) => attribute.attr.as_str(),
            // Anything else may hold any exception class.
            _ => return true,
        };
        matches!(name, "ImportError" | "ModuleNotFoundError" | "Exception" | "BaseException")
    };
    match caught.as_ref() {
        Expr::Tuple(tuple) => tuple.elts.iter().any(catches),
        caught => catches(caught),
    }
}

/// `TYPE_CHECKING`, `typing.TYPE_CHECKING`, `False`, `0`: a test that never holds.
fn never_true(test: &Expr) -> bool {
    match test {
        Expr::Name(name) => name.id.as_str() == "TYPE_CHECKING",
        Expr::Attribute(attribute) => attribute.attr.as_str() == "TYPE_CHECKING",
        Expr::BooleanLiteral(literal) => !literal.value,
        Expr::NumberLiteral(ast::ExprNumberLiteral { value: Number::Int(int), .. }) => int.as_i64() == Some(0),
        _ => false,
    }
}

/// A tool's parameters, as its input schema (and so its stub) has them.
#[derive(Debug, Clone)]
struct Params {
    /// The schema, with its `$defs` for the `$ref`s inside it.
    root: Value,
    /// The declared parameters.
    properties: Map<String, Value>,
    /// The parameters the schema requires.
    required: Vec<String>,
    /// The schema admits no other keys: none declared otherwise
    /// (`additionalProperties` absent or false, no `patternProperties`, no
    /// combinator that could add some).
    closed: bool,
}

impl Params {
    /// The parameters of `schema`; `None` unless it declares `properties`.
    fn of(schema: Value) -> Option<Params> {
        let object = resolve(&schema, &schema)?;
        let properties = object.get("properties")?.as_object()?.clone();
        let required = object
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        let open_keys = ["patternProperties", "allOf", "anyOf", "oneOf", "if", "dependentSchemas", "$ref"];
        let closed = matches!(object.get("additionalProperties"), None | Some(Value::Bool(false)))
            && !matches!(object.get("unevaluatedProperties"), Some(value) if value != &Value::Bool(false))
            && !open_keys.iter().any(|key| object.get(*key).is_some());
        Some(Params { root: schema, properties, required, closed })
    }

    fn property(&self, name: &str) -> Option<&Value> {
        self.properties.get(name)
    }

    /// The sentence for a keyword the tool does not have.
    fn unknown_keyword(&self, shown: &str, arg: &str) -> String {
        let names: Vec<&str> = self.properties.keys().map(String::as_str).collect();
        if names.is_empty() {
            return format!("{shown} takes no arguments, so '{arg}' is not one of them: call it with none");
        }
        let closest = names
            .iter()
            .map(|name| (strsim::jaro_winkler(arg, name), *name))
            .filter(|(score, _)| *score > 0.8)
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, name)| format!("did you mean '{name}'? "))
            .unwrap_or_default();
        format!("{shown} has no parameter '{arg}': {closest}pass only its parameters: {}", names.join(", "))
    }

    /// Why the literal `value` cannot be parameter `arg`'s (`property`), or
    /// `None` if it can, or if it is no literal, or the schema says too
    /// little to be sure.
    fn literal_mismatch(&self, property: &Value, arg: &str, value: &Expr) -> Option<String> {
        let literal = Literal::of(value)?;
        // The stubs give an optional parameter `= None`: None leaves it out.
        if literal == Literal::None && !self.required.iter().any(|name| name == arg) {
            return None;
        }
        let property = resolve(&self.root, property)?;
        if let Some(values) = property.get("enum").and_then(Value::as_array) {
            if literal.value_in(values)? {
                return None;
            }
            let listed: Vec<String> = values.iter().map(python_value).collect();
            let fix = literal.enum_fix(values).map_or_else(|| "one of those".to_owned(), |fix| format!("{arg}={fix}"));
            return Some(format!("takes one of {}, not {}: pass {fix}", listed.join(", "), literal.shown()));
        }
        let types = self.types(property, 0)?;
        if types.iter().any(|ty| literal.fits(ty)) {
            return None;
        }
        let wanted: Vec<&str> = types.iter().map(|ty| python_type(ty)).collect();
        let wanted = article(&wanted);
        let fix = literal.fix(&types).map_or_else(|| format!("{wanted} instead"), |fix| format!("{arg}={fix}"));
        Some(format!("takes {wanted}, not {}: pass {fix}", literal.type_name()))
    }

    /// The JSON types `schema` admits, or `None` for any (or unknown).
    fn types(&self, schema: &Value, depth: usize) -> Option<Vec<String>> {
        if depth > MAX_REFS {
            return None;
        }
        let schema = resolve(&self.root, schema)?;
        if let Some(options) = schema.get("anyOf").or_else(|| schema.get("oneOf")).and_then(Value::as_array) {
            let mut all = Vec::new();
            for option in options {
                all.extend(self.types(option, depth + 1)?);
            }
            return Some(all);
        }
        if schema.get("allOf").is_some() || schema.get("const").is_some() {
            return None;
        }
        match schema.get("type")? {
            Value::String(ty) => Some(vec![ty.clone()]),
            Value::Array(types) => types.iter().map(|ty| ty.as_str().map(str::to_owned)).collect(),
            _ => None,
        }
    }
}

/// `schema`, or what its local `$ref` (`#/$defs/Name`) points to in `root`;
/// `None` for a `$ref` this pass cannot follow.
fn resolve<'v>(root: &'v Value, schema: &'v Value) -> Option<&'v Value> {
    let mut schema = schema;
    for _ in 0..MAX_REFS {
        let Some(reference) = schema.get("$ref") else {
            return Some(schema);
        };
        let pointer = reference.as_str()?.strip_prefix('#')?;
        schema = root.pointer(pointer)?;
    }
    None
}

/// The Python type the stubs show for a JSON type.
fn python_type(ty: &str) -> &str {
    match ty {
        "string" => "str",
        "integer" => "int",
        "number" => "float",
        "boolean" => "bool",
        "null" => "None",
        "array" => "list",
        "object" => "dict",
        other => other,
    }
}

/// "a str", "an int or None".
fn article(types: &[&str]) -> String {
    let first = types.first().copied().unwrap_or("value");
    let article = if first.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    if first == "None" { types.join(" or ") } else { format!("{article} {}", types.join(" or ")) }
}

/// A JSON value as Python writes it.
fn python_value(value: &Value) -> String {
    match value {
        Value::String(text) => format!("{text:?}"),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Null => "None".to_owned(),
        other => other.to_string(),
    }
}

/// A literal argument: its type is certain, its value known when it is a
/// constant.
#[derive(Debug, Clone, PartialEq)]
enum Literal {
    /// A string; `None` for an f-string, whose value is known only when it runs.
    Str(Option<String>),
    /// An int; `None` when it does not fit in 64 bits.
    Int(Option<i64>),
    Float(f64),
    Bool(bool),
    None,
    /// A list or tuple display (a tuple travels as a JSON array).
    List,
    /// A dict display.
    Dict,
}

impl Literal {
    fn of(expr: &Expr) -> Option<Literal> {
        Some(match expr {
            Expr::StringLiteral(string) => Literal::Str(Some(string.value.to_str().to_owned())),
            Expr::FString(_) => Literal::Str(None),
            Expr::NumberLiteral(number) => Literal::number(&number.value, false)?,
            Expr::UnaryOp(ast::ExprUnaryOp { op: op @ (UnaryOp::USub | UnaryOp::UAdd), operand, .. }) => {
                match operand.as_ref() {
                    Expr::NumberLiteral(number) => Literal::number(&number.value, *op == UnaryOp::USub)?,
                    _ => return None,
                }
            }
            Expr::BooleanLiteral(boolean) => Literal::Bool(boolean.value),
            Expr::NoneLiteral(_) => Literal::None,
            Expr::List(_) | Expr::Tuple(_) => Literal::List,
            Expr::Dict(_) => Literal::Dict,
            _ => return None,
        })
    }

    fn number(number: &Number, negative: bool) -> Option<Literal> {
        match number {
            Number::Int(int) => Some(Literal::Int(
                int.as_i64().and_then(|value| if negative { value.checked_neg() } else { Some(value) }),
            )),
            Number::Float(value) => Some(Literal::Float(if negative { -value } else { *value })),
            // No JSON form: the call would fail as it is made, not by its schema.
            Number::Complex { .. } => None,
        }
    }

    /// Whether a value of this literal's type passes JSON Schema `type: ty`.
    fn fits(&self, ty: &str) -> bool {
        match (self, ty) {
            (Literal::Str(_), "string") | (Literal::Bool(_), "boolean") | (Literal::None, "null") => true,
            (Literal::List, "array") | (Literal::Dict, "object") => true,
            (Literal::Int(_) | Literal::Float(_), "number") | (Literal::Int(_), "integer") => true,
            // JSON Schema counts 2.0 as an integer.
            (Literal::Float(value), "integer") => value.fract() == 0.0,
            (_, "string" | "boolean" | "null" | "array" | "object" | "number" | "integer") => false,
            // A type this pass does not know: not sure.
            _ => true,
        }
    }

    /// Whether the literal is one of `values`; `None` when its value is not
    /// known (an f-string, a list, …).
    fn value_in(&self, values: &[Value]) -> Option<bool> {
        let equal = |value: &Value| match (self, value) {
            (Literal::Str(Some(text)), Value::String(other)) => Some(text == other),
            (Literal::Bool(flag), Value::Bool(other)) => Some(flag == other),
            (Literal::None, Value::Null) => Some(true),
            (Literal::Int(Some(number)), Value::Number(other)) => other.as_f64().map(|other| *number as f64 == other),
            (Literal::Float(number), Value::Number(other)) => other.as_f64().map(|other| *number == other),
            (Literal::Str(None) | Literal::Int(None) | Literal::List | Literal::Dict, _) => None,
            _ => Some(false),
        };
        let mut any_unknown = false;
        for value in values {
            match equal(value) {
                Some(true) => return Some(true),
                Some(false) => {}
                None => any_unknown = true,
            }
        }
        if any_unknown { None } else { Some(false) }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Literal::Str(_) => "a str",
            Literal::Int(_) => "an int",
            Literal::Float(_) => "a float",
            Literal::Bool(_) => "a bool",
            Literal::None => "None",
            Literal::List => "a list",
            Literal::Dict => "a dict",
        }
    }

    /// The literal as the script wrote it, as near as known.
    fn shown(&self) -> String {
        match self {
            Literal::Str(Some(text)) => format!("{text:?}"),
            Literal::Int(Some(number)) => number.to_string(),
            Literal::Float(number) => number.to_string(),
            Literal::Bool(flag) => if *flag { "True" } else { "False" }.to_owned(),
            Literal::None => "None".to_owned(),
            other => other.type_name().to_owned(),
        }
    }

    /// The same value written as one of `types`, when it has an obvious
    /// form: `"3"` for an int is `3`, `3` for a str is `"3"`.
    fn fix(&self, types: &[String]) -> Option<String> {
        let wants = |ty: &str| types.iter().any(|wanted| wanted == ty);
        match self {
            Literal::Str(Some(text)) => {
                let text = text.trim();
                let integer = wants("integer") && text.parse::<i64>().is_ok();
                if integer || (wants("number") && text.parse::<f64>().is_ok_and(f64::is_finite)) {
                    Some(text.to_owned())
                } else if wants("boolean") && text.eq_ignore_ascii_case("true") {
                    Some("True".to_owned())
                } else if wants("boolean") && text.eq_ignore_ascii_case("false") {
                    Some("False".to_owned())
                } else if wants("array") {
                    Some(format!("[{}]", self.shown()))
                } else {
                    None
                }
            }
            Literal::Int(Some(_)) | Literal::Float(_) | Literal::Bool(_) if wants("string") => {
                Some(format!("{:?}", self.shown()))
            }
            Literal::Int(_) | Literal::Float(_) | Literal::Bool(_) if wants("array") => {
                Some(format!("[{}]", self.shown()))
            }
            _ => None,
        }
    }

    /// The one of `values` this literal differs from only in case.
    fn enum_fix(&self, values: &[Value]) -> Option<String> {
        let Literal::Str(Some(text)) = self else {
            return None;
        };
        values.iter().filter_map(Value::as_str).find(|value| value.eq_ignore_ascii_case(text)).map(|v| format!("{v:?}"))
    }
}

/// Line and column of byte offsets in the source, and its lines for previews.
struct Lines<'s> {
    source: &'s str,
    /// The byte offset where each line starts.
    starts: Vec<usize>,
}

impl<'s> Lines<'s> {
    fn new(source: &'s str) -> Self {
        let starts = std::iter::once(0).chain(source.match_indices('\n').map(|(at, _)| at + 1)).collect();
        Lines { source, starts }
    }

    /// The 1-based line and character column where `range` starts.
    fn position(&self, range: TextRange) -> (u32, u32) {
        let offset = usize::from(range.start()).min(self.source.len());
        let index = self.starts.partition_point(|start| *start <= offset).saturating_sub(1);
        let start = self.starts.get(index).copied().unwrap_or(0);
        let column = self.source.get(start..offset).map_or(0, |text| text.chars().count());
        (u32::try_from(index + 1).unwrap_or(u32::MAX), u32::try_from(column + 1).unwrap_or(u32::MAX))
    }

    /// The line `range` starts on, indented, with carets under the range
    /// (to the line's end if it goes on), as a traceback shows it.
    fn preview(&self, range: TextRange) -> String {
        let (line, column) = self.position(range);
        let Some(start) = self.starts.get((line as usize).saturating_sub(1)).copied() else {
            return String::new();
        };
        let text = self.source[start..].lines().next().unwrap_or_default();
        let indent = text.chars().take_while(|c| c.is_whitespace()).count();
        let shown: String = text.chars().skip(indent).collect();
        let end = usize::from(range.end()).min(start + text.len());
        let width = self.source.get(usize::from(range.start()).min(end)..end).map_or(1, |part| part.chars().count());
        let pad = (column as usize).saturating_sub(1).saturating_sub(indent);
        format!("    {}\n    {}{}\n", shown.trim_end(), " ".repeat(pad), "^".repeat(width.max(1)))
    }
}

/// How many findings a refusal lists; it says how many more there are.
pub const MAX_FINDINGS_LISTED: usize = 10;

/// A script refused before it ran: every finding,
/// by line and column, each with how to write it instead; the first one's
/// line, exception type and traceback.
pub fn script_refused(mut findings: Vec<Finding>) -> ScriptError {
    findings.sort_by_key(|finding| (finding.line, finding.column));
    findings.dedup_by(|a, b| a.line == b.line && a.column == b.column && a.text == b.text);
    let count = findings.len();
    let mut message = format!(
        "the script was refused before it ran, so none of it ran and no tool was called; fix {} and run it again:",
        if count == 1 { "this".to_owned() } else { format!("these {count}") }
    );
    for finding in findings.iter().take(MAX_FINDINGS_LISTED) {
        message.push_str(&format!("\n- line {}, column {}: {}", finding.line, finding.column, finding.text));
    }
    if count > MAX_FINDINGS_LISTED {
        message.push_str(&format!("\n- and {} more", count - MAX_FINDINGS_LISTED));
    }
    let first = findings.into_iter().next().unwrap_or_default();
    ScriptError {
        kind: RunErrorKind::ScriptRefused.as_str().to_owned(),
        message,
        exception_type: first.exception_type,
        traceback: first.traceback,
        line: first.line,
        ..ScriptError::default()
    }
}

#[cfg(test)]
mod tests;
