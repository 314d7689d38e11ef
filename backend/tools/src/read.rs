//! The reading kit every kind of tool (and every section) of `tether.toml`
//! uses: where an entry is ([`At`], so every error names the file and the
//! key), key checks with a did-you-mean, schemas, names and TOML to JSON.
//! It knows no kind: `catalog.rs`, which knows every kind, stands above it,
//! and so does the file's reader (`tether-backend`'s `Config`).

use super::error::ConfigError;
use super::vars::Vars;
use serde_json::Value;
use std::path::{Path, PathBuf};

pub use super::meta::parse_duration;

/// Where an entry is being read: the file, the entry's key, the variables.
/// Every kind reads its keys through this, so every error says where it is.
#[derive(Debug, Clone)]
pub struct At<'a> {
    /// The file.
    pub file: &'a Path,
    /// The entry's key, e.g. `tools[2]` (empty: the top level).
    pub key: String,
    /// The variables `${NAME}` expands from.
    pub vars: &'a Vars,
}

impl At<'_> {
    /// A mistake at `sub` (a key of this entry, or `""` for the entry).
    pub fn error(&self, sub: &str, problem: impl Into<String>) -> ConfigError {
        let key = match (self.key.is_empty(), sub.is_empty()) {
            (_, true) => self.key.clone(),
            (true, false) => sub.to_owned(),
            (false, false) => format!("{}.{sub}", self.key),
        };
        ConfigError::new(self.file, key, problem)
    }

    /// `text` with `${NAME}` expanded.
    pub fn expand(&self, sub: &str, text: &str) -> Result<String, ConfigError> {
        self.vars.expand(text).map_err(|problem| {
            self.error(sub, problem).fix("set it in the backend's environment, give it a default (`${NAME:-default}`), or write the value itself")
        })
    }

    /// A path after `${NAME}` expansion; relative paths are relative to the
    /// configuration file's folder.
    pub fn path(&self, sub: &str, text: &str) -> Result<PathBuf, ConfigError> {
        let path = PathBuf::from(self.expand(sub, text)?);
        Ok(if path.is_relative() { self.file.parent().unwrap_or(Path::new(".")).join(path) } else { path })
    }

    /// Reads this entry's `table` as `T`, after checking its keys against
    /// `allowed` (so a typo is named with the keys it could have been).
    pub fn read<T: serde::de::DeserializeOwned>(
        &self,
        table: &toml::Table,
        allowed: &[&str],
    ) -> Result<T, ConfigError> {
        check_keys(self, table, allowed)?;
        T::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
            let message = e.message().to_owned();
            if message.starts_with("missing field") {
                return self.error("", message);
            }
            // serde's message names the value, not the key: find the key
            // whose value alone gives the same complaint.
            let key = table.iter().find(|(key, value)| {
                let alone: toml::Table = [((*key).clone(), (*value).clone())].into_iter().collect();
                T::deserialize(toml::Value::Table(alone)).is_err_and(|e| e.message() == message)
            });
            let error = self.error(key.map_or("", |(k, _)| k.as_str()), message.clone());
            match key {
                // A number where a duration's text goes: say how to write it.
                Some((name, toml::Value::Integer(n))) if message.contains("expected a string") && is_duration(name) => {
                    error.fix(format!("a duration is text with its unit: write \"{n}s\" (or \"{n}ms\", \"{n}m\")"))
                }
                _ => error,
            }
        })
    }
}

/// True for the keys that hold a duration (`timeout`, `startup_timeout`, …).
fn is_duration(key: &str) -> bool {
    key.ends_with("timeout") || key == "deadline"
}

/// Refuses keys of `table` that are not in `allowed`, suggesting the
/// closest allowed one.
pub fn check_keys(at: &At<'_>, table: &toml::Table, allowed: &[&str]) -> Result<(), ConfigError> {
    for key in table.keys() {
        if allowed.contains(&key.as_str()) {
            continue;
        }
        let closest = did_you_mean(key, allowed.iter().copied());
        return Err(at.error(key, "unknown key").fix(format!("{closest}the keys here are: {}", allowed.join(", "))));
    }
    Ok(())
}

/// "did you mean `x`? " for the one of `candidates` closest to `word`, if
/// one is close; else nothing.
pub(crate) fn did_you_mean<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    candidates
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| format!("did you mean `{c}`? "))
        .unwrap_or_default()
}

/// The entries of `table` whose keys are in `keys`: one entry's keys split
/// by who reads them (the metadata, the kind).
pub fn split(table: &toml::Table, keys: &[&str]) -> toml::Table {
    table.iter().filter(|(k, _)| keys.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// A JSON Schema written as a TOML table (or as a JSON string).
pub fn schema(at: &At<'_>, key: &str, value: toml::Value) -> Result<Value, ConfigError> {
    let json = match value {
        toml::Value::String(text) => serde_json::from_str(&text).map_err(|e| {
            at.error(key, format!("is not valid JSON: {e}"))
                .fix("write the schema as a TOML table, or as a JSON string")
        })?,
        other => toml_to_json(other),
    };
    if !json.is_object() {
        return Err(at
            .error(key, "must be a JSON Schema object")
            .fix("e.g. `{ type = \"object\", properties = { id = { type = \"string\" } } }`"));
    }
    jsonschema::validator_for(&json).map_err(|e| at.error(key, format!("is not a valid JSON Schema: {e}")))?;
    Ok(json)
}

/// TOML to JSON (dates become strings).
pub fn toml_to_json(value: toml::Value) -> Value {
    match value {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(items.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(table) => Value::Object(table.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect()),
    }
}

/// A tool name: what a script calls and the model sees.
pub fn check_name(at: &At<'_>, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(at.error("name", format!("`{name}` is not a usable tool name"))
            .fix("use 1 to 64 letters, digits, `_` or `-`, not starting with a digit (a script calls it as a Python function)"))
    }
}
