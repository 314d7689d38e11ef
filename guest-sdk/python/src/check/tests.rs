//! The pass before a script runs: each kind of finding, and valid scripts
//! it must let through.

use monty::MontyRun;
use monty_types::CompileOptions;
use serde_json::{Value, json};

use super::*;

fn tool(name: &str, schema: Value) -> ToolDoc {
    ToolDoc { name: name.into(), description: String::new(), input_schema: (&schema).into() }
}

/// The tools of these tests, with schemas as MCP servers and pydantic write them.
fn tools() -> Vec<ToolDoc> {
    vec![
        tool(
            "send_email",
            json!({
                "type": "object",
                "properties": {
                    "to": {"type": "string"},
                    "subject": {"type": "string"},
                    "body": {"type": "string"},
                    "priority": {"type": "integer"},
                    "urgent": {"type": "boolean"},
                    "cc": {"type": "array", "items": {"type": "string"}},
                    "score": {"type": ["number", "null"]}
                },
                "required": ["to", "subject"]
            }),
        ),
        tool(
            "list_issues",
            json!({
                "type": "object",
                "properties": {
                    "state": {"$ref": "#/$defs/State"},
                    "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]}
                },
                "$defs": {"State": {"type": "string", "enum": ["open", "closed"]}},
                "additionalProperties": false
            }),
        ),
        tool(
            "open_tool",
            json!({"type": "object", "properties": {"q": {"type": "string"}}, "additionalProperties": true}),
        ),
        tool("untyped", json!({"type": "object"})),
        tool("no_schema", Value::Null),
        tool("list-items", json!({"type": "object", "properties": {"page": {"type": "integer"}}})),
    ]
}

fn findings(source: &str) -> Vec<Finding> {
    let tools = tools();
    script_findings(source, &tools, &Bindings::new(&tools))
}

/// The one finding of `source`.
fn finding(source: &str) -> Finding {
    let mut found = findings(source);
    assert_eq!(found.len(), 1, "{source}: {found:#?}");
    found.remove(0)
}

fn assert_clean(source: &str) {
    let found = findings(source);
    assert!(found.is_empty(), "a valid script was refused:\n{source}\n{found:#?}");
}

#[test]
fn an_import_of_a_module_the_runtime_lacks_is_found_at_its_line_and_column() {
    let found = finding("import json\nx = 1\nif x:\n    import requests as r\n");
    assert_eq!((found.line, found.column), (4, 12), "{found:#?}");
    assert_eq!(found.exception_type, "ModuleNotFoundError");
    assert!(found.text.starts_with("module 'requests' is not available here"), "{}", found.text);
    assert!(
        found.text.contains("json") && found.text.contains("every effect goes through a tool call"),
        "{}",
        found.text
    );
    assert!(
        found.traceback.contains("line 4\n    import requests as r\n           ^^^^^^^^^^^^^"),
        "{}",
        found.traceback
    );
    assert_eq!(finding("from xml.dom import minidom").text.split(' ').nth(1), Some("'xml'"));
    assert_eq!(finding("import xml.etree.ElementTree").line, 1);
    assert_eq!(findings("import numpy, pandas, json").len(), 2);
}

#[test]
fn a_submodule_the_runtime_lacks_is_found_though_its_package_ships() {
    // monty refuses it when it runs ("'collections' is not a package").
    let found = finding("import json\nfrom collections.abc import Mapping\n");
    assert_eq!((found.line, found.exception_type.as_str()), (2, "ModuleNotFoundError"));
    assert!(
        found.text.starts_with("module 'collections.abc' is not available here ('collections' is, without it)"),
        "{}",
        found.text
    );
    assert_eq!(finding("import os.nope").line, 1);
    assert_clean("import os.path\nfrom os import path\nimport collections\n");
}

#[test]
fn the_module_list_is_monty_s_own() {
    // Every module monty ships imports without a finding, whatever a patch adds.
    for module in sandbox::importable_modules() {
        assert_clean(&format!("import {module}\n"));
    }
}

#[test]
fn imports_that_may_fail_safely_or_never_run_are_not_found() {
    assert_clean("try:\n    import requests\nexcept ImportError:\n    requests = None\n");
    assert_clean("try:\n    import yaml\nexcept (ValueError, ModuleNotFoundError):\n    pass\n");
    assert_clean("try:\n    import yaml\nexcept Exception as e:\n    pass\n");
    assert_clean("try:\n    import yaml\nexcept:\n    pass\n");
    assert_clean("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pandas\n");
    assert_clean("import typing\nif typing.TYPE_CHECKING:\n    from pandas import DataFrame\n");
    assert_clean("from __future__ import annotations\nimport os.path\n");
    // A handler that catches something else does not guard it.
    assert_eq!(finding("try:\n    import yaml\nexcept KeyError:\n    pass\n").line, 2);
    // Nor does the handler itself, or the else branch.
    assert_eq!(findings("try:\n    pass\nexcept ImportError:\n    import yaml\nelse:\n    import toml\n").len(), 2);
}

#[test]
fn a_keyword_the_schema_lacks_is_found_with_the_nearest_names() {
    let found = finding("a = 1\nb = 2\nsend_email(to='x@y.z', subjet='hi')\n");
    assert_eq!((found.line, found.column, found.exception_type.as_str()), (3, 24, "TypeError"));
    assert!(
        found.text.starts_with("send_email() has no parameter 'subjet': did you mean 'subject'?"),
        "{}",
        found.text
    );
    assert!(found.text.contains("body, cc, priority, score, subject, to, urgent"), "{}", found.text);
    let found = finding("list_issues(status='open')");
    assert!(found.text.contains("did you mean 'state'?"), "{}", found.text);
    // Nothing near: the parameters alone.
    let found = finding("send_email(to='a', subject='b', recipient_list=[])");
    assert!(
        found.text.contains("has no parameter 'recipient_list': pass only its parameters: body, cc,"),
        "{}",
        found.text
    );
    // By call(), too.
    let found = finding("r = call('list_issues', {'limit': 1}, stat='open')");
    assert!(found.text.starts_with("call(\"list_issues\", …) has no parameter 'stat'"), "{}", found.text);
    assert_eq!(findings("call_async(name='list-items', pages=2)").len(), 1);
}

#[test]
fn keywords_that_may_be_right_are_not_found() {
    // Keys of **kwargs are known only when it runs.
    assert_clean("args = {'subjet': 'x'}\nsend_email(to='a', subject='b', **args)\n");
    // A schema that admits other keys, or declares none, or none at all.
    assert_clean("open_tool(q='a', extra=1)\nuntyped(anything=1)\nno_schema(x=1)\n");
    // A tool the script rebinds, in any scope, is not the tool any more.
    assert_clean("def send_email(**kw):\n    return kw\nsend_email(recipient='x')\n");
    assert_clean("send_email = print\nsend_email(sep='x')\n");
    assert_clean("def f(send_email):\n    return send_email(whatever=1)\n");
    assert_clean("for send_email in [dict]:\n    send_email(a=1)\n");
    assert_clean("call = dict\ncall('list_issues', stat='open')\n");
    // A name that is not a literal, a method of something else, a tool name that is no function.
    assert_clean("name = 'list_issues'\ncall(name, stat='open')\nx = {}\nx.send_email(bogus=1)\n");
    assert_clean("list_items(page='x')\n");
    // The stubs' own shape: the tool's function defined by the stubs text.
    assert_clean("def send_email(*, to: str, subject: str) -> dict:\n    ...\n");
}

#[test]
fn a_literal_of_a_type_the_schema_rules_out_is_found_with_the_fix() {
    let found = finding("send_email(to='a', subject='b', priority='3')");
    assert_eq!(found.column, 33);
    assert_eq!(found.text, "send_email()'s parameter 'priority' takes an int, not a str: pass priority=3");
    let found = finding("send_email(to=42, subject='b')");
    assert!(found.text.ends_with("'to' takes a str, not an int: pass to=\"42\""), "{}", found.text);
    let found = finding("send_email(to='a', subject='b', urgent='yes')");
    assert!(found.text.contains("takes a bool, not a str: pass a bool instead"), "{}", found.text);
    assert!(finding("send_email(to='a', subject='b', urgent='true')").text.ends_with("pass urgent=True"));
    assert!(finding("send_email(to='a', subject='b', priority=True)").text.contains("not a bool"));
    assert!(finding("send_email(to='a', subject='b', priority=2.5)").text.contains("not a float"));
    assert!(finding("send_email(to='a', subject='b', cc='x@y.z')").text.ends_with("pass cc=[\"x@y.z\"]"));
    assert!(finding("send_email(to='a', subject=f'{1}', score='high')").text.contains("takes a float or None"));
    assert!(finding("send_email(to=None, subject='b')").text.contains("'to' takes a str, not None"));
    assert!(finding("list_issues(limit=-1.5)").text.contains("takes an int or None, not a float"));
    // call()'s keywords are the tool's too.
    assert_eq!(findings("call('send_email', to='a', subject=1)").len(), 1);
}

#[test]
fn a_literal_outside_an_enum_is_found_with_the_value_it_meant() {
    let found = finding("list_issues(state='Open')");
    let expected =
        "list_issues()'s parameter 'state' takes one of \"open\", \"closed\", not \"Open\": pass state=\"open\"";
    assert_eq!(found.text, expected);
    assert!(finding("list_issues(state=3)").text.contains("not 3: pass one of those"));
    assert_clean("list_issues(state='closed', limit=None)\n");
}

#[test]
fn literals_that_fit_and_values_not_known_until_run_are_not_found() {
    assert_clean(
        "p = '3'\nsend_email(to='a', subject=f'{p}', priority=p, urgent=False, cc=['x'], score=2)\n\
         send_email(to='a', subject='b', priority=2.0, cc=('x', 'y'), score=None, body=str(1))\n\
         send_email(to='a', subject='b', priority=-3, score=-1.5)\n\
         send_email(to='a', subject='b', priority=None, urgent=None)\n\
         send_email(to='a', subject='b', priority=10**30)\n\
         list_issues(state='op' + 'en', limit=len([1]))\n",
    );
}

#[test]
fn every_finding_of_a_script_is_found_in_order() {
    let source = "import requests\nsend_email(to=1, subject='b', bogus=2)\nimport yaml\n";
    let found = findings(source);
    let found: Vec<(u32, &str)> = found.iter().map(|f| (f.line, f.exception_type.as_str())).collect();
    assert_eq!(found, [(1, "ModuleNotFoundError"), (2, "TypeError"), (2, "TypeError"), (3, "ModuleNotFoundError")]);
}

#[test]
fn a_source_that_does_not_parse_or_nests_past_the_cap_is_left_to_the_compiler() {
    assert!(findings("import requests\nx = (\n").is_empty());
    // Deeper than the walk follows: what lies below the cap is not checked, and nothing overflows.
    let deep = format!("x = {}send_email(bogus=1){}\n", "[".repeat(MAX_DEPTH + 10), "]".repeat(MAX_DEPTH + 10));
    assert!(findings(&deep).is_empty());
}

fn compile(source: &str) -> MontyException {
    match MontyRun::new(source.to_owned(), SCRIPT_NAME, Vec::new(), CompileOptions::default()) {
        Ok(_) => panic!("{source} compiled"),
        Err(exception) => exception,
    }
}

#[test]
fn what_monty_refuses_to_compile_gets_a_rewrite_hint_and_keeps_monty_s_traceback() {
    let cases = [
        ("x = 1\nclass Oops(metaclass=type):\n    pass\n", 2, "metaclasses and class keywords are not available"),
        ("async def gen():\n    yield 1\n", 2, "async generators (async def with yield) are not available here"),
        ("from .tools import x\n", 1, "relative imports are not available here"),
        ("from sys import *\n", 1, "from ... import * is not available here"),
    ];
    // monty's patches compile what it used to refuse: method decorators (0031), inheritance (0034), yield (0038).
    let decorated = "class A:\n    @property\n    def x(self):\n        return 1\n    @staticmethod\n    def s():\n        return 2\n";
    let subclass = "class A:\n    pass\nclass B(A):\n    def __init__(self):\n        super().__init__()\n";
    let generator = "def pages():\n    yield 1\n    yield from [2, 3]\n";
    for source in [decorated, subclass, generator] {
        assert!(MontyRun::new(source.to_owned(), SCRIPT_NAME, Vec::new(), CompileOptions::default()).is_ok());
    }
    for (source, line, hint) in cases {
        let exception = compile(source);
        let found = compile_finding(&exception).unwrap_or_else(|| panic!("{source}: {exception:?}"));
        assert_eq!(found.line, line, "{source}: {found:#?}");
        assert!(found.column >= 1, "{found:#?}");
        assert!(found.text.starts_with(hint), "{source}: {}", found.text);
        assert_eq!(found.traceback, exception.to_string(), "monty's own traceback");
        assert_eq!(found.exception_type, exception.exc_type().to_string());
    }
    // A construct without a worded hint still gets monty's message and a general one.
    assert!(construct_hint("The monty syntax parser does not yet support frobs").ends_with("so write it another way"));
    // A syntax error is not a refusal: it stays a `syntax_error`.
    assert_eq!(compile_finding(&compile("x = (\n")), None);
}

#[test]
fn a_base_class_monty_refuses_is_found_with_what_to_write_instead() {
    let found = finding("class Tags(list):\n    pass\n");
    assert_eq!((found.line, found.column, found.exception_type.as_str()), (1, 12, "TypeError"), "{found:#?}");
    assert!(found.text.starts_with("subclassing the built-in type 'list' is not available here"), "{}", found.text);
    let found = finding("import typing\nclass Row(typing.TypedDict):\n    id: int\n");
    assert!(found.text.starts_with("TypedDict is not available here: use a plain dict"), "{}", found.text);
    let found = finding("from typing import NamedTuple\nclass P(NamedTuple):\n    x: int\n");
    assert!(found.text.contains("collections.namedtuple"), "{}", found.text);
    let found = finding("class ToolTimeout(TimeoutError):\n    pass\n");
    assert!(found.text.starts_with("subclassing TimeoutError is not available here"), "{}", found.text);
    assert!(found.text.ends_with("derive your exception from Exception, or ValueError, instead"), "{}", found.text);
    assert_clean("class AppError(Exception):\n    pass\nclass NotFound(AppError, KeyError):\n    pass\n");
    assert_clean("from enum import Enum\nclass Level(int, Enum):\n    LOW = 1\nclass Tag(str, Enum):\n    A = 'a'\n");
    assert_eq!(finding("from enum import Enum\nclass Level(list, Enum):\n    LOW = 1\n").line, 2);
    // A dataclass under @dataclass over another: monty's dataclasses take their fields from one class.
    let nested = "from dataclasses import dataclass\n@dataclass\nclass A:\n    x: int\n\
                  @dataclass(frozen=True)\nclass B(A):\n    y: int\n";
    let found = finding(nested);
    assert_eq!(found.line, 6, "{found:#?}");
    assert!(found.text.starts_with("a dataclass cannot inherit another dataclass here (B from A)"), "{}", found.text);
    // The script's own classes, object, a plain subclass of a dataclass, and a name the script rebinds are its own.
    assert_clean("class A:\n    pass\nclass B(A, object):\n    pass\n");
    assert_clean("from dataclasses import dataclass\n@dataclass\nclass A:\n    x: int\nclass B(A):\n    pass\n");
    assert_clean("class list:\n    pass\nclass Tags(list):\n    pass\n");
}

#[test]
fn a_tool_calling_generator_handed_to_a_consumer_that_cannot_pause_is_found() {
    let pages = "import statistics, itertools\nfrom statistics import median\n\
                 def pages():\n    r = list_issues(limit=2)\n    yield from r['value']\n";
    let cases = [
        (
            "m = statistics.mean(pages())\n",
            "statistics.mean() cannot pause for the tool calls of the generator pages()",
        ),
        ("m = median(pages())\n", "median() cannot pause"),
        ("s = {1}.union(pages())\n", ".union() cannot pause"),
        ("d = dict.fromkeys(pages())\n", ".fromkeys() cannot pause"),
        ("g = list(itertools.groupby(pages()))\n", "itertools.groupby() cannot pause"),
    ];
    for (usage, text) in cases {
        let found = finding(&format!("{pages}{usage}"));
        assert_eq!((found.line, found.exception_type.as_str()), (6, "NotImplementedError"), "{usage}: {found:#?}");
        assert!(found.text.starts_with(text), "{usage}: {}", found.text);
        assert!(found.text.contains("list(pages(...))"), "{}", found.text);
    }
    // What drives a generator through Python frames pauses at its calls (patches 0038, 0041-0043), and a
    // generator that calls no tool (or a consumer the script defines) may go anywhere.
    assert_clean(&format!(
        "{pages}for x in pages():\n    pass\nxs = [x for x in pages()]\nn = sum(1 for _ in pages())\n\
         s = sorted(pages())\ng = pages()\nfirst = next(g)\nfor i, x in enumerate(pages()):\n    pass\n\
         z = list(zip(pages(), [1]))\nj = '-'.join(pages())\nfound = 7 in pages()\na, b = pages()\nprint(*pages())\n\
         xs.extend(pages())\nt = list(itertools.islice(pages(), 3))\nm = statistics.mean(list(pages()))\n"
    ));
    assert_clean("import statistics\ndef nums():\n    yield 1\n    yield 2\nx = statistics.mean(nums())\n");
    // A generator expression that calls a tool, likewise, also through the script's own functions.
    let found = finding(
        "import statistics\ndef size(n):\n    return len(list_issues(limit=n)['value'])\n\
         m = statistics.mean(size(n) for n in [1, 2])\n",
    );
    assert!(
        found.text.starts_with("statistics.mean() cannot pause for the tool calls in this generator expression"),
        "{}",
        found.text
    );
    assert!(found.text.ends_with("write a list comprehension, [... for ...], instead"), "{}", found.text);
    assert_clean(
        "ids = [1, 2]\nfirst = next((n for n in ids if list_issues(limit=n)['ok']), None)\n\
         any(list_issues(limit=n)['ok'] for n in ids)\nnames = ', '.join(str(list_issues(limit=n)) for n in ids)\n",
    );
    assert_clean(&format!("{pages}def mean(xs):\n    return xs\nx = mean(pages())\n"));
    // `chain.from_iterable` pauses, by whatever name it is reached.
    assert_clean(&format!(
        "{pages}from itertools import chain\na = list(chain.from_iterable(pages() for _ in [1]))\n\
         b = list(itertools.chain.from_iterable(list_issues(limit=n)['value'] for n in [1]))\n"
    ));
    // Starred, a consumer gets the items, collected where they are written; a generator expression's outermost
    // iterable is evaluated where it is written too.
    assert_clean(
        "import asyncio, statistics\nasync def main(ids):\n    \
         return await asyncio.gather(*(call_async('list_issues', limit=n) for n in ids))\n\
         m = statistics.mean(len(x) for x in list_issues(limit=2)['value'])\n",
    );
    let found = finding("import statistics\nm = statistics.mean(n for n in [1] if list_issues(limit=n)['ok'])\n");
    assert!(found.text.starts_with("statistics.mean() cannot pause"), "{}", found.text);
}

#[test]
fn a_tool_calling_function_handed_to_a_module_function_that_calls_it_back_is_found() {
    let owner = "import itertools, heapq\nfrom collections import defaultdict\n\
                 def owner(i):\n    return list_issues(limit=i)['value']\n\
                 def owner_of(i):\n    return owner(i)\n";
    let cases = [
        (
            "g = itertools.groupby([1, 2], key=owner)\n",
            "itertools.groupby() cannot pause for the tool calls of owner()",
        ),
        // Through another of the script's functions.
        (
            "top = heapq.nlargest(2, [1, 2], key=owner_of)\n",
            "heapq.nlargest() cannot pause for the tool calls of owner_of()",
        ),
        (
            "d = defaultdict(lambda: list_issues(limit=1))\n",
            "defaultdict() cannot pause for the tool calls of this lambda",
        ),
        ("d = list(itertools.takewhile(lambda i: owner(i), [1]))\n", "itertools.takewhile() cannot pause"),
    ];
    for (usage, text) in cases {
        let found = finding(&format!("{owner}{usage}"));
        assert_eq!((found.line, found.exception_type.as_str()), (7, "NotImplementedError"), "{usage}: {found:#?}");
        assert!(found.text.starts_with(text), "{usage}: {}", found.text);
        assert!(
            found.text.ends_with("in a for loop or a list comprehension, and hand them their results"),
            "{}",
            found.text
        );
    }
    // Functions that call no tool go anywhere; the builtins and functools.reduce call back through Python frames;
    // a groupby the script defines is its own.
    assert_clean(&format!(
        "{owner}def size(x):\n    return len(x)\ng = itertools.groupby([1, 2], key=size)\n\
         d = defaultdict(list)\nimport functools\nt = functools.reduce(lambda a, i: a + len(owner(i)), [1], 0)\n\
         s = sorted([1, 2], key=owner)\n"
    ));
    assert_clean(
        "def groupby(xs, key):\n    return xs\ndef f(i):\n    return list_issues(limit=i)\nx = groupby([1], key=f)\n",
    );
}

#[test]
fn a_special_method_that_calls_a_tool_where_the_runtime_cannot_pause_is_found() {
    let lookup = "def fetch(i):\n    return list_issues(limit=i)['value']\n";
    let cases = [
        (
            "class Issues:\n    def __getitem__(self, i):\n        return fetch(i)\n",
            "Issues.__getitem__ calls a tool",
            "def getitem(self, ...)",
        ),
        (
            "class Issue:\n    def __str__(self):\n        return str(list_issues(limit=1))\n",
            "Issue.__str__ calls a tool",
            "def str(self, ...)",
        ),
        (
            "class Pages:\n    def __iter__(self):\n        return iter(fetch(1))\n",
            "Pages.__iter__",
            "write a generator function",
        ),
        (
            "from dataclasses import dataclass\n@dataclass\nclass Row:\n    i: int\n    def __post_init__(self):\n        self.v = fetch(self.i)\n",
            "Row.__post_init__",
            "pass its result as a field",
        ),
    ];
    for (class, text, instead) in cases {
        let found = finding(&format!("{lookup}{class}"));
        assert_eq!(found.exception_type, "NotImplementedError", "{found:#?}");
        assert!(found.text.starts_with(text), "{}", found.text);
        assert!(found.text.contains(instead), "{}", found.text);
        assert!(found.traceback.contains("def __"), "the finding points at the method: {}", found.traceback);
    }
    // A special method that is a generator, or that only makes one, runs no call itself: a `for` drives it.
    assert_clean(&format!(
        "{lookup}def pages(n):\n    for i in range(n):\n        yield fetch(i)\nclass Pager:\n    def __iter__(self):\n        \
         yield from fetch(1)\nclass Lazy:\n    def __iter__(self):\n        return pages(3)\nfor x in Pager():\n    pass\n"
    ));
    // A method is reached by an attribute only: one named like a builtin does not make the builtin a tool call.
    assert_clean(&format!(
        "{lookup}class Query:\n    def __init__(self, rows):\n        self.rows = rows\n    def filter(self, **kw):\n        \
         return fetch(1)\n    def __len__(self):\n        return len(list(filter(None, self.rows)))\n"
    ));
    // The constructor, a call of the instance, `with`, plain methods, properties, and special methods that call
    // no tool all run where a call pauses.
    assert_clean(&format!(
        "{lookup}class Client:\n    def __init__(self):\n        self.first = fetch(1)\n    def __call__(self, i):\n        \
         return fetch(i)\n    def __enter__(self):\n        return fetch(0)\n    def __exit__(self, *a):\n        fetch(0)\n    \
         def get(self, i):\n        return fetch(i)\n    @property\n    def size(self):\n        return len(fetch(1))\n    \
         def __len__(self):\n        return 3\n"
    ));
}

#[test]
fn a_function_as_a_regex_replacement_is_found() {
    let found = finding("import re\nx = re.sub(r'\\d+', lambda m: str(int(m.group()) * 2), 'a1b22')\n");
    assert_eq!((found.line, found.column, found.exception_type.as_str()), (2, 20, "NotImplementedError"), "{found:#?}");
    assert!(
        found.text.starts_with("re.sub() with a function as the replacement is not available here"),
        "{}",
        found.text
    );
    let found =
        finding("import re\ndef up(m):\n    return m.group().upper()\np = re.compile('a')\ny = p.subn(up, 'banana')\n");
    assert_eq!(found.line, 5, "{found:#?}");
    assert!(found.text.starts_with(".subn() with a function as the replacement"), "{}", found.text);
    // A replacement string, a variable holding one, and a `sub` of the script's own are fine.
    assert_clean(
        "import re\nr = 'x'\na = re.sub('a', r'\\1', 'b')\nb = re.sub('a', r, 'b')\nc = re.compile('a').sub('-', 'a')\n",
    );
    assert_clean("class Calc:\n    def sub(self, a, b):\n        return a - b\nx = Calc().sub(3, 1)\n");
}
