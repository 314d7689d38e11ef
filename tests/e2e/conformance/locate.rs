//! Where monty's test cases are: `test_cases/` beside the `monty` crate's
//! manifest, wherever cargo unpacked it. `cargo metadata` names that path for
//! the very monty version in `Cargo.lock`, so the suite always matches the
//! interpreter under test and nothing is copied into this repository; a clean
//! clone needs only `cargo fetch`. `TETHER_MONTY_TEST_CASES` overrides it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding monty's `test_cases/*.py`.
///
/// # Errors
/// Why it could not be found, and what to do.
pub fn test_cases_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("TETHER_MONTY_TEST_CASES") {
        return Ok(PathBuf::from(dir));
    }
    let cargo =
        std::env::var("CARGO").ok().or_else(|| option_env!("CARGO").map(str::to_owned)).unwrap_or("cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    // Only this platform's packages: a clean build has downloaded no others
    // (e.g. the `windows` crate some dependencies name for Windows only).
    let rustc = Path::new(&cargo).with_file_name("rustc");
    let host = Command::new(if rustc.exists() { rustc.as_os_str() } else { "rustc".as_ref() })
        .arg("-vV")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| v.lines().find_map(|l| l.strip_prefix("host: ").map(str::to_owned)))
        .ok_or_else(|| "could not ask `rustc -vV` for the host platform; set TETHER_MONTY_TEST_CASES".to_owned())?;
    let output = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--offline", "--filter-platform", &host, "--manifest-path"])
        .arg(&manifest)
        .output()
        .map_err(|error| format!("could not run `{cargo} metadata`: {error}; set TETHER_MONTY_TEST_CASES"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "`cargo metadata` failed (run `cargo fetch` first, or set TETHER_MONTY_TEST_CASES): {stderr}"
        ));
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|error| format!("`cargo metadata` printed no JSON: {error}"))?;
    let montys: Vec<&str> = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|package| package["name"] == "monty")
        .filter_map(|package| package["manifest_path"].as_str())
        .collect();
    let [manifest_path] = montys.as_slice() else {
        return Err(format!("expected one `monty` package in Cargo.lock, found {montys:?}"));
    };
    let dir = Path::new(manifest_path).with_file_name("test_cases");
    if dir.is_dir() { Ok(dir) } else { Err(format!("`{}` is missing; run `cargo fetch`", dir.display())) }
}
