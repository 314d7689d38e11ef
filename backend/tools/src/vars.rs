//! `${NAME}` (and `${NAME:-default}`) in a configuration's strings: a value from the backend's
//! environment (or one the host sets, such as the demo's database path), read
//! when the file is loaded — never from a script, so a secret in a header
//! stays in the backend.
//!
//! Hand-written (a dozen lines) rather than a templating crate: it is one
//! syntax with one escape (`$$`), and a crate would bring syntax of its own
//! that a config file could trip over.

use std::collections::BTreeMap;

/// Where `${NAME}` values come from: the host's own values first, then the
/// process environment.
#[derive(Debug, Clone, Default)]
pub struct Vars {
    own: BTreeMap<String, String>,
}

impl Vars {
    /// The process environment only.
    pub fn from_env() -> Self {
        Vars::default()
    }

    /// Adds a value that wins over the environment's.
    pub fn set(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.own.insert(name.into(), value.into());
        self
    }

    fn get(&self, name: &str) -> Option<String> {
        self.own.get(name).cloned().or_else(|| std::env::var(name).ok())
    }

    /// `text` with every `${NAME}` replaced, every `${NAME:-default}` by
    /// the variable or, when it is unset or empty, `default` (as a shell
    /// does), and `$$` made `$`.
    ///
    /// # Errors
    /// The message a [`ConfigError`](super::ConfigError) shows: the variable
    /// that is not set, a `${` without its `}`, or a form other than these
    /// two (`${NAME:?}`, `${NAME-x}` …), named as refused.
    pub fn expand(&self, text: &str) -> Result<String, String> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                out.push('$');
                rest = tail;
            } else if let Some(tail) = after.strip_prefix('{') {
                let Some(end) = tail.find('}') else {
                    return Err(format!("`${{` without a closing `}}` in `{text}` (write `$$` for a literal `$`)"));
                };
                out.push_str(&self.value_of(&tail[..end])?);
                rest = &tail[end + 1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        Ok(out)
    }
}

impl Vars {
    /// What `${inside}` stands for.
    fn value_of(&self, inside: &str) -> Result<String, String> {
        let (name, default) = match inside.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inside, None),
        };
        let is_name = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !is_name {
            return Err(format!(
                "`${{{inside}}}` is not a variable this file can read: write `${{NAME}}` or `${{NAME:-default}}` \
                 (other shell forms are not supported), or `$$` for a literal `$`"
            ));
        }
        match (self.get(name), default) {
            (Some(value), Some(default)) if value.is_empty() => Ok(default.to_owned()),
            (Some(value), _) => Ok(value),
            (None, Some(default)) => Ok(default.to_owned()),
            (None, None) => Err(format!("the environment variable `{name}` is not set")),
        }
    }
}

/// `template` with each `{name}` replaced by the argument `name` (a string
/// as is, anything else as JSON); an unknown name is left as written. For
/// messages, which are not URIs (a URL template is RFC 6570, see `http`).
pub(crate) fn fill(template: &str, args: &serde_json::Value) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let tail = &rest[open + 1..];
        match tail.find('}') {
            Some(close) => {
                let name = &tail[..close];
                match args.get(name) {
                    Some(serde_json::Value::String(s)) => out.push_str(s),
                    Some(other) => out.push_str(&other.to_string()),
                    None => out.push_str(&rest[open..open + close + 2]),
                }
                rest = &tail[close + 1..];
            }
            None => {
                out.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn variables_come_from_the_host_first_then_the_environment() {
        let vars = Vars::from_env().set("TETHER_TEST_DB", "/tmp/x.db");
        assert_eq!(vars.expand("${TETHER_TEST_DB}").unwrap(), "/tmp/x.db");
        assert_eq!(vars.expand("a $$b $c").unwrap(), "a $b $c");
        let home = std::env::var("PATH").unwrap();
        assert_eq!(vars.expand("${PATH}").unwrap(), home);
        let missing = vars.expand("Bearer ${TETHER_SURELY_UNSET_VAR}").unwrap_err();
        assert!(missing.contains("`TETHER_SURELY_UNSET_VAR` is not set"), "{missing}");
        assert!(vars.expand("${OPEN").unwrap_err().contains("closing"));
    }

    #[test]
    fn a_default_stands_in_for_an_unset_or_empty_variable_and_other_forms_are_refused() {
        let vars = Vars::from_env().set("TETHER_TEST_SET", "x").set("TETHER_TEST_EMPTY", "");
        assert_eq!(vars.expand("${TETHER_TEST_SET:-d}").unwrap(), "x");
        assert_eq!(vars.expand("${TETHER_TEST_EMPTY:-d}").unwrap(), "d");
        assert_eq!(
            vars.expand("${TETHER_SURELY_UNSET_VAR:-http://localhost:8080/v1}/x").unwrap(),
            "http://localhost:8080/v1/x"
        );
        assert_eq!(vars.expand("${TETHER_SURELY_UNSET_VAR:-}").unwrap(), "");
        assert_eq!(vars.expand("${TETHER_TEST_EMPTY}").unwrap(), "", "no default: empty is a value");
        for refused in ["${TETHER_TEST_SET:?no}", "${TETHER_TEST_SET-d}", "${TETHER_TEST_SET:+d}", "${1A}", "${}"] {
            let error = vars.expand(refused).unwrap_err();
            assert!(error.contains("other shell forms are not supported"), "{refused}: {error}");
        }
    }

    #[test]
    fn messages_are_filled_from_the_arguments() {
        let args = json!({"id": "c8", "n": 3});
        assert_eq!(fill("no contract for `{id}` ({n}) {other}", &args), "no contract for `c8` (3) {other}");
        assert_eq!(fill("open { brace", &args), "open { brace");
    }
}
