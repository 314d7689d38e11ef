//! One case of monty's own test suite (`test_cases/*.py` in the `monty`
//! crate) and its verdict, read with the suite's conventions: the expectation
//! is the file's last line (`# Raise=…`, `# Return=…`, `# Return.str=…`,
//! `# Return.type=…`), a closing `"""\nTRACEBACK:\n…"""` block, or nothing,
//! meaning "runs without an exception". `# ref-counts=` lines check monty's
//! reference counts, which only a monty test build can see: such a case
//! counts as "runs without an exception". A case whose `# /// monty` header
//! says `xfail = ['monty']` is expected to fail its expectation (strictly:
//! meeting it is a failure).

use serde_json::Value;

/// The file name tracebacks give a script in Tether's runtime.
const SCRIPT_NAME: &str = "main.py";

/// What a case expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expectation {
    /// An uncaught exception whose repr is this, e.g. `ValueError('bad')`.
    Raise(String),
    /// The last expression's `repr()`.
    Return(String),
    /// The last expression's `str()`.
    ReturnStr(String),
    /// The last expression's type name.
    ReturnType(String),
    /// An uncaught exception with exactly this traceback.
    Traceback(String),
    /// The script completes.
    NoException,
}

/// A case ready to run.
#[derive(Debug, Clone)]
pub struct Case {
    /// The file name, e.g. `traceback__division_error.py`.
    pub file: String,
    /// The script to run. For `Return` expectations the last line is wrapped
    /// in `repr()`/`str()`/`type().__name__`, because Tether reports a result
    /// as JSON, not as a Python object.
    pub source: String,
    /// What the script must do.
    pub expectation: Expectation,
    /// monty is known not to meet the expectation (`xfail = ['monty']`).
    pub xfail: bool,
    /// The case needs a feature of monty's test-harness host that Tether does
    /// not offer: its external functions (`call-external`), files
    /// (`mount-fs`) or a time zone (`timezone`).
    pub needs_harness_host: bool,
}

impl Case {
    /// Reads the case `file` with contents `text`.
    ///
    /// # Errors
    /// A case this reader cannot follow, with why.
    pub fn parse(file: &str, text: &str) -> Result<Case, String> {
        let mut case = Self::parse_expectation(file, text)?;
        let header: Vec<&str> = text.lines().take_while(|line| line.starts_with('#')).collect();
        case.xfail = header.iter().any(|line| line.starts_with("# xfail") && line.contains("'monty'"));
        case.needs_harness_host = header.iter().any(|line| {
            ["# call-external = true", "# mount-fs = true", "# timezone ="].iter().any(|key| line.starts_with(key))
        });
        Ok(case)
    }

    fn parse_expectation(file: &str, text: &str) -> Result<Case, String> {
        const MARKER: &str = "\"\"\"\nTRACEBACK:\n";
        if let Some(at) = text.find(MARKER) {
            let rest = &text[at + MARKER.len()..];
            let end = rest.find("\n\"\"\"").ok_or_else(|| format!("{file}: the TRACEBACK block is not closed"))?;
            let source = text[..at].trim_end().to_owned();
            let expectation = Expectation::Traceback(rest[..end].to_owned());
            return Ok(Case { file: file.to_owned(), source, expectation, xfail: false, needs_harness_host: false });
        }
        let lines: Vec<&str> = text.lines().collect();
        let last = lines.last().copied().unwrap_or_default();
        let body = || lines[..lines.len() - 1].join("\n");
        let wrapped = |wrap: &str, suffix: &str| -> Result<String, String> {
            let code = &lines[..lines.len() - 1];
            let (result_line, before) =
                code.split_last().ok_or_else(|| format!("{file}: no code before `# Return`"))?;
            if result_line.starts_with([' ', '\t', '#']) || result_line.trim().is_empty() {
                return Err(format!("{file}: the line before `# Return` is not a top-level expression"));
            }
            let mut source = before.join("\n");
            source.push_str(&format!("\n{wrap}({result_line}){suffix}\n"));
            Ok(source)
        };
        let (source, expectation) = if let Some(repr) = last.strip_prefix("# Raise=") {
            (body(), Expectation::Raise(repr.to_owned()))
        } else if let Some(text) = last.strip_prefix("# Return.str=") {
            (wrapped("str", "")?, Expectation::ReturnStr(text.to_owned()))
        } else if let Some(name) = last.strip_prefix("# Return.type=") {
            (wrapped("type", ".__name__")?, Expectation::ReturnType(name.to_owned()))
        } else if let Some(repr) = last.strip_prefix("# Return=") {
            (wrapped("repr", "")?, Expectation::Return(repr.to_owned()))
        } else if last.starts_with("# ref-counts=") {
            (body(), Expectation::NoException)
        } else {
            (text.to_owned(), Expectation::NoException)
        };
        Ok(Case { file: file.to_owned(), source, expectation, xfail: false, needs_harness_host: false })
    }

    /// Whether `observed` is what the suite wants: the expectation met, or
    /// for an `xfail` case, not met. `Ok(())`, or why not.
    pub fn judge(&self, observed: &Observed) -> Result<(), String> {
        match (self.meets(observed), self.xfail) {
            (Ok(()), true) => Err("xfail = ['monty'], but the expectation was met".to_owned()),
            (Err(_), true) => Ok(()),
            (verdict, false) => verdict,
        }
    }

    fn meets(&self, observed: &Observed) -> Result<(), String> {
        let failure = |observed: &Observed| match &observed.result {
            Ok(value) => format!("completed with {value}"),
            Err(failure) => format!("{}: {}", failure.kind, failure.summary()),
        };
        match (&self.expectation, &observed.result) {
            (Expectation::NoException, Ok(_)) => Ok(()),
            (Expectation::Raise(repr), Err(error)) if error.repr().as_deref() == Some(repr.as_str()) => Ok(()),
            (Expectation::Return(text) | Expectation::ReturnStr(text) | Expectation::ReturnType(text), Ok(value))
                if value.as_str() == Some(text.as_str()) =>
            {
                Ok(())
            }
            (Expectation::Traceback(expected), Err(error)) => {
                let actual =
                    error.traceback.replace(&format!("File \"{SCRIPT_NAME}\""), &format!("File \"{}\"", self.file));
                if actual.trim_end() == expected.trim_end() {
                    Ok(())
                } else {
                    Err(format!("traceback differs:\n--- expected\n{expected}\n--- got\n{actual}"))
                }
            }
            (expected, _) => Err(format!("expected {expected:?}, {}", failure(observed))),
        }
    }
}

/// What a run did, from the runtime built natively or from the sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// The result, or how the run failed.
    pub result: Result<Value, Failure>,
}

/// How a run failed: the fields a `ScriptError` / `RunError` carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `runtime_error`, `syntax_error`, a limit's kind, …
    pub kind: String,
    /// The Python exception type, if it was one.
    pub exception_type: String,
    /// The message.
    pub message: String,
    /// The traceback text, ending with the `Type: message` line.
    pub traceback: String,
}

impl Failure {
    /// `Type: message (line N)`, for reports.
    pub fn summary(&self) -> String {
        let line =
            self.traceback.rsplit_once(", line ").map(|(_, rest)| rest.split([',', '\n']).next().unwrap_or(rest));
        match line {
            Some(line) => format!("{}: {} (line {line})", self.exception_type, self.message),
            None => format!("{}: {}", self.exception_type, self.message),
        }
    }

    /// The exception's `repr()`, e.g. `ValueError('bad')`, or `None` for a
    /// failure that is not a Python exception.
    ///
    /// A runtime error's `message` is its type name when the exception had no
    /// message, so the traceback's last line tells `ValueError()` (just the
    /// type) from `ValueError('')` (`Type: `).
    pub fn repr(&self) -> Option<String> {
        if self.exception_type.is_empty() {
            return None;
        }
        let with_message = format!("{}: {}", self.exception_type, self.message);
        if self.traceback.ends_with(&with_message) {
            Some(format!("{}({})", self.exception_type, py_str_repr(&self.message)))
        } else {
            Some(format!("{}()", self.exception_type))
        }
    }
}

/// Python's `repr()` of a str: single quotes unless the text has a single
/// quote and no double quote; backslash escapes for the quote, backslash and
/// control characters.
pub fn py_str_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(exception_type: &str, message: &str, traceback: &str) -> Observed {
        let error = Failure {
            kind: "runtime_error".into(),
            exception_type: exception_type.into(),
            message: message.into(),
            traceback: traceback.into(),
        };
        Observed { result: Err(error) }
    }

    #[test]
    fn raise_expectations_compare_the_exception_repr() {
        let case = Case::parse("a.py", "x = 1\n1 / 0\n# Raise=ZeroDivisionError('division by zero')").unwrap();
        assert_eq!(case.source, "x = 1\n1 / 0");
        let observed = failure("ZeroDivisionError", "division by zero", "Tb\nZeroDivisionError: division by zero");
        assert_eq!(case.judge(&observed), Ok(()));
        let case = Case::parse("a.py", "assert False\n# Raise=AssertionError()").unwrap();
        assert_eq!(case.judge(&failure("AssertionError", "AssertionError", "Tb\nAssertionError")), Ok(()));
        assert!(case.judge(&failure("AssertionError", "", "Tb\nAssertionError: ")).is_err());
    }

    #[test]
    fn return_expectations_wrap_the_last_line() {
        let case = Case::parse("a.py", "a = [1]\na\n# Return=[1]").unwrap();
        assert_eq!(case.source, "a = [1]\nrepr(a)\n");
        assert_eq!(case.judge(&Observed { result: Ok(Value::from("[1]")) }), Ok(()));
        assert!(case.judge(&Observed { result: Ok(Value::from("[2]")) }).is_err());
        assert!(Case::parse("a.py", "if x:\n    y\n# Return=1").is_err());
    }

    #[test]
    fn traceback_expectations_use_the_case_file_name() {
        let text = "1 / 0\n\"\"\"\nTRACEBACK:\nTraceback (most recent call last):\n  File \"t.py\", line 1, in <module>\nZeroDivisionError: division by zero\n\"\"\"\n";
        let case = Case::parse("t.py", text).unwrap();
        assert_eq!(case.source, "1 / 0");
        let ours = "Traceback (most recent call last):\n  File \"main.py\", line 1, in <module>\nZeroDivisionError: division by zero";
        assert_eq!(case.judge(&failure("ZeroDivisionError", "division by zero", ours)), Ok(()));
    }

    #[test]
    fn no_expectation_means_it_completes() {
        let case = Case::parse("a.py", "assert 1 == 1\n").unwrap();
        assert_eq!(case.judge(&Observed { result: Ok(Value::Null) }), Ok(()));
        assert!(case.judge(&failure("AssertionError", "x", "AssertionError: x")).is_err());
    }

    #[test]
    fn xfail_cases_pass_by_failing() {
        let case =
            Case::parse("a.py", "# /// monty\n# xfail = ['monty']\n# ///\nx = [1]\nx += 2\n# Raise=TypeError('x')")
                .unwrap();
        assert!(case.xfail);
        assert_eq!(case.judge(&failure("TypeError", "y", "TypeError: y")), Ok(()));
        assert!(case.judge(&failure("TypeError", "x", "TypeError: x")).is_err());
        assert!(!Case::parse("a.py", "# /// monty\n# xfail = ['cpython']\n# ///\n1\n").unwrap().xfail);
    }

    #[test]
    fn harness_host_features_are_noticed() {
        let case = Case::parse("a.py", "# /// monty\n# call-external = true\n# ///\nadd_ints(1, 2)\n").unwrap();
        assert!(case.needs_harness_host);
        assert!(
            Case::parse("a.py", "# /// monty\n# timezone = 'Europe/London'\n# ///\n1\n").unwrap().needs_harness_host
        );
        assert!(!Case::parse("a.py", "# /// monty\n# run-async = true\n# ///\n1\n").unwrap().needs_harness_host);
    }

    #[test]
    fn str_reprs_follow_python() {
        assert_eq!(py_str_repr("plain"), "'plain'");
        assert_eq!(py_str_repr("it's"), "\"it's\"");
        assert_eq!(py_str_repr("both ' and \""), "'both \\' and \"'");
        assert_eq!(py_str_repr("a\nb\\"), "'a\\nb\\\\'");
    }
}
