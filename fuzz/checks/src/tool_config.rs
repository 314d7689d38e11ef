//! `tether.toml`, the tool catalog (`backend/tools/src/catalog.rs`): any text
//! is either a checked configuration or one `ConfigError` naming the file
//! (and, for a syntax error, a line and column inside the text) — never a
//! panic. A configuration that loads has only usable, unique tool names.

use std::path::Path;
use tether_backend::tools::{Config, Vars};

const FILE: &str = "/etc/tether/tether.toml";

/// Checks one input: any bytes, read as the fuzzer gives them.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let vars = Vars::default().set("TOKEN", "secret").set("DB", "demo.db");
    match Config::parse(text, Path::new(FILE), &vars) {
        Ok(config) => {
            let names = config.tool_names();
            for (index, name) in names.iter().enumerate() {
                assert!(!names[..index].contains(name), "`{name}` twice");
                let usable = (1..=64).contains(&name.len())
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    && !name.starts_with(|c: char| c.is_ascii_digit());
                assert!(usable, "`{name}` is not a usable tool name");
            }
        }
        Err(error) => {
            assert_eq!(error.file, Path::new(FILE));
            assert!(!error.problem.is_empty());
            assert!(error.to_string().starts_with(&format!("`{FILE}`")), "{error}");
            if let Some(place) = error.key.strip_prefix("line ") {
                let (line, column) =
                    place.split_once(", column ").expect("a syntax error's place is `line L, column C`");
                let (line, column): (usize, usize) = (line.parse().unwrap(), column.parse().unwrap());
                assert!(
                    line >= 1 && line <= text.lines().count().max(1) + 1,
                    "line {line} of {}",
                    text.lines().count()
                );
                assert!(column >= 1);
            }
        }
    }
}
