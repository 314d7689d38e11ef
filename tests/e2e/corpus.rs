//! A committed corpus of Python files and the lists beside it, as the
//! conformance tests read them (monty's `test_cases`, the agent-style
//! scripts): one reader, so both read files and lists alike.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every `*.py` in `dir`, in name order, with its text.
pub fn read_py_files(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("reading `{}`: {error}", dir.display()))
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "py"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no `*.py` files in `{}`", dir.display());
    files
        .iter()
        .map(|path| {
            let file = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
            let text = std::fs::read_to_string(path).unwrap_or_else(|error| panic!("reading `{file}`: {error}"));
            (file, text)
        })
        .collect()
}

/// A committed list: `<file> <reason>` per line, `#` comments; a file
/// listed without a reason fails the test.
pub fn listed(list: &'static str) -> BTreeMap<&'static str, &'static str> {
    list.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (file, reason) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            assert!(!reason.trim().is_empty(), "`{file}` is listed without a reason");
            (file, reason.trim())
        })
        .collect()
}
