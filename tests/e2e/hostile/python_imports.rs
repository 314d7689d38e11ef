//! Importing every module the Python runtime does not ship: an import the
//! script guards (`try`/`except ImportError`) is a `ModuleNotFoundError` that
//! names the module and says why; an unguarded one refuses the script before
//! it runs (`script_refused`), naming the module and its line. Nothing else
//! happens.

use super::*;

/// CPython 3.13's `sys.stdlib_module_names`, plus 3.14's additions: every
/// name a script could hope to find in the standard library.
const STDLIB: &[&str] = &[
    "__future__",
    "_abc",
    "_aix_support",
    "_android_support",
    "_ast",
    "_asyncio",
    "_bisect",
    "_blake2",
    "_bz2",
    "_codecs",
    "_codecs_cn",
    "_codecs_hk",
    "_codecs_iso2022",
    "_codecs_jp",
    "_codecs_kr",
    "_codecs_tw",
    "_collections",
    "_collections_abc",
    "_colorize",
    "_compat_pickle",
    "_compression",
    "_contextvars",
    "_csv",
    "_ctypes",
    "_curses",
    "_curses_panel",
    "_datetime",
    "_dbm",
    "_decimal",
    "_elementtree",
    "_frozen_importlib",
    "_frozen_importlib_external",
    "_functools",
    "_gdbm",
    "_hashlib",
    "_heapq",
    "_imp",
    "_interpchannels",
    "_interpqueues",
    "_interpreters",
    "_io",
    "_ios_support",
    "_json",
    "_locale",
    "_lsprof",
    "_lzma",
    "_markupbase",
    "_md5",
    "_multibytecodec",
    "_multiprocessing",
    "_opcode",
    "_opcode_metadata",
    "_operator",
    "_osx_support",
    "_overlapped",
    "_pickle",
    "_posixshmem",
    "_posixsubprocess",
    "_py_abc",
    "_pydatetime",
    "_pydecimal",
    "_pyio",
    "_pylong",
    "_pyrepl",
    "_queue",
    "_random",
    "_scproxy",
    "_sha1",
    "_sha2",
    "_sha3",
    "_signal",
    "_sitebuiltins",
    "_socket",
    "_sqlite3",
    "_sre",
    "_ssl",
    "_stat",
    "_statistics",
    "_string",
    "_strptime",
    "_struct",
    "_suggestions",
    "_symtable",
    "_sysconfig",
    "_thread",
    "_threading_local",
    "_tkinter",
    "_tokenize",
    "_tracemalloc",
    "_typing",
    "_uuid",
    "_warnings",
    "_weakref",
    "_weakrefset",
    "_winapi",
    "_wmi",
    "_zoneinfo",
    "abc",
    "antigravity",
    "argparse",
    "array",
    "ast",
    "asyncio",
    "atexit",
    "base64",
    "bdb",
    "binascii",
    "bisect",
    "builtins",
    "bz2",
    "cProfile",
    "calendar",
    "cmath",
    "cmd",
    "code",
    "codecs",
    "codeop",
    "collections",
    "colorsys",
    "compileall",
    "concurrent",
    "configparser",
    "contextlib",
    "contextvars",
    "copy",
    "copyreg",
    "csv",
    "ctypes",
    "curses",
    "dataclasses",
    "datetime",
    "dbm",
    "decimal",
    "difflib",
    "dis",
    "doctest",
    "email",
    "encodings",
    "ensurepip",
    "enum",
    "errno",
    "faulthandler",
    "fcntl",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "gc",
    "genericpath",
    "getopt",
    "getpass",
    "gettext",
    "glob",
    "graphlib",
    "grp",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "idlelib",
    "imaplib",
    "importlib",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "keyword",
    "linecache",
    "locale",
    "logging",
    "lzma",
    "mailbox",
    "marshal",
    "math",
    "mimetypes",
    "mmap",
    "modulefinder",
    "msvcrt",
    "multiprocessing",
    "netrc",
    "nt",
    "ntpath",
    "nturl2path",
    "numbers",
    "opcode",
    "operator",
    "optparse",
    "os",
    "pathlib",
    "pdb",
    "pickle",
    "pickletools",
    "pkgutil",
    "platform",
    "plistlib",
    "poplib",
    "posix",
    "posixpath",
    "pprint",
    "profile",
    "pstats",
    "pty",
    "pwd",
    "py_compile",
    "pyclbr",
    "pydoc",
    "pydoc_data",
    "pyexpat",
    "queue",
    "quopri",
    "random",
    "re",
    "readline",
    "reprlib",
    "resource",
    "rlcompleter",
    "runpy",
    "sched",
    "secrets",
    "select",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "signal",
    "site",
    "smtplib",
    "socket",
    "socketserver",
    "sqlite3",
    "sre_compile",
    "sre_constants",
    "sre_parse",
    "ssl",
    "stat",
    "statistics",
    "string",
    "stringprep",
    "struct",
    "subprocess",
    "symtable",
    "sys",
    "sysconfig",
    "syslog",
    "tabnanny",
    "tarfile",
    "tempfile",
    "termios",
    "textwrap",
    "this",
    "threading",
    "time",
    "timeit",
    "tkinter",
    "token",
    "tokenize",
    "tomllib",
    "trace",
    "traceback",
    "tracemalloc",
    "tty",
    "turtle",
    "turtledemo",
    "types",
    "typing",
    "unicodedata",
    "unittest",
    "urllib",
    "uuid",
    "venv",
    "warnings",
    "wave",
    "weakref",
    "webbrowser",
    "winreg",
    "winsound",
    "wsgiref",
    "xml",
    "xmlrpc",
    "zipapp",
    "zipfile",
    "zipimport",
    "zlib",
    "zoneinfo",
    // 3.14
    "annotationlib",
    "compression",
    "_hmac",
    "_remote_debugging",
    "_zstd",
];

/// The modules the runtime ships (monty's `StandardLib`, as its
/// `ModuleNotFoundError` lists them): importing them works, and what they
/// can reach is refused per call (`python_os`). monty's
/// `SANDBOX_MODULE_NAMES` also names `gc`, which it does not ship.
const SHIPPED: &[&str] = &[
    "asyncio",
    "base64",
    "binascii",
    "bisect",
    "collections",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "enum",
    "functools",
    "hashlib",
    "heapq",
    "io",
    "itertools",
    "json",
    "math",
    "operator",
    "os",
    "pathlib",
    "posixpath",
    "random",
    "re",
    "statistics",
    "string",
    "sys",
    "textwrap",
    "time",
    "tomllib",
    "typing",
    "unicodedata",
    "urllib",
    "uuid",
];

/// One script that tries every name and reports, per name, whether the
/// import worked or the exception it raised.
fn sweep_script(names: &[&str]) -> String {
    let mut script = String::from("out = {}\n");
    for name in names {
        script.push_str(&format!(
            "try:\n    import {name}\n    out['{name}'] = 'imported'\nexcept Exception as e:\n    out['{name}'] = type(e).__name__ + ': ' + str(e)\n"
        ));
    }
    script.push_str("out\n");
    script
}

#[tokio::test]
async fn every_stdlib_module_the_runtime_does_not_ship_is_refused_by_name() {
    let client = shared_client().await;
    let missing: Vec<&str> = STDLIB.iter().copied().filter(|n| !SHIPPED.contains(n)).collect();
    assert!(missing.len() > 250, "the sweep covers the standard library");
    let (outcome, recorder) = run(&client, python(&sweep_script(&missing))).await;
    assert!(outcome.is_ok(), "{outcome:#?}");
    let result = outcome.result.unwrap();
    for name in &missing {
        let seen = result[*name].as_str().unwrap_or_else(|| panic!("`{name}` missing from {result}"));
        let expected = format!("ModuleNotFoundError: No module named '{name}'");
        assert!(seen.starts_with(&expected), "import {name}: {seen}");
        // Each refusal says what to do instead: reach the effect through a
        // tool, or write the computation with the modules there are.
        let effect = seen.contains("every effect goes through a tool call: do its work with the turn's tools");
        let computation = seen.contains("this runtime does not have it: write what it would give");
        assert!(effect != computation, "import {name}: {seen}");
        if ["socket", "subprocess", "http", "sqlite3", "smtplib", "tempfile"].contains(name) {
            assert!(effect, "import {name} is an effect: {seen}");
        }
        if ["fractions", "pprint", "xml", "abc"].contains(name) {
            assert!(computation, "import {name} only computes: {seen}");
        }
    }
    assert!(recorder.calls.lock().unwrap().is_empty());
    assert_still_works(&client).await;
}

#[tokio::test]
async fn the_shipped_modules_import_so_the_sweep_is_not_vacuous() {
    let client = shared_client().await;
    let (outcome, _) = run(&client, python(&sweep_script(SHIPPED))).await;
    let result = outcome.result.unwrap_or_else(|| panic!("{:#?}", outcome.error));
    for name in SHIPPED {
        assert_eq!(result[*name], json!("imported"), "import {name}");
    }
}

#[tokio::test]
async fn future_statements_are_compiler_features_not_imports() {
    // `from __future__ import …` is resolved by the parser; `import __future__`
    // (in the sweep above) is a module import like any other, and refused.
    let client = shared_client().await;
    let (outcome, recorder) = run(&client, python("from __future__ import annotations\n'compiled'")).await;
    assert_eq!(outcome.result, Some(json!("compiled")), "{outcome:#?}");
    assert!(recorder.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_unguarded_forbidden_import_refuses_the_script_naming_the_module_and_line() {
    let client = shared_client().await;
    let (outcome, recorder) = run(&client, python("x = 1\nimport ctypes\nctypes.CDLL(None)\n")).await;
    assert_refused(&outcome, "ModuleNotFoundError", &["line 2, column 8: module 'ctypes' is not available here"]);
    assert_eq!(outcome.error.as_ref().unwrap().line, 2, "the error points at the import");
    assert!(recorder.calls.lock().unwrap().is_empty());
    assert_still_works(&client).await;
}

#[tokio::test]
async fn from_imports_dotted_imports_and_imports_in_functions_are_refused_too() {
    let client = shared_client().await;
    for (source, module) in [
        ("from subprocess import Popen", "subprocess"),
        ("import urllib.request", "urllib.request"),
        ("from http.client import HTTPConnection", "http"),
        ("import importlib\nimportlib.import_module('os')", "importlib"),
        ("def f():\n    import socket\n    return socket\nf()", "socket"),
        ("import json, pickle", "pickle"),
        ("import requests", "requests"),
        ("import numpy as np", "numpy"),
    ] {
        let (outcome, _) = run(&client, python(source)).await;
        assert_refused(&outcome, "ModuleNotFoundError", &[&format!("module '{module}' is not available here")]);
    }
    // What the script cannot see statically still fails when it runs.
    let (outcome, _) = run(&client, python("exec('import socket')")).await;
    assert_raised(&outcome, "ModuleNotFoundError", &["No module named 'socket'"]);
    assert_still_works(&client).await;
}
