//! `prepare_cache` (`tether-sidecar --prepare-cache`): fills the compile cache
//! so a later start loads instead of compiling; the container image is built
//! with it (`deploy/Dockerfile`, tested in `sidecar/tests/deploy`).

use crate::support::*;
use tether_sidecar::{EngineError, SidecarConfig, prepare_cache};

#[test]
fn prepare_cache_names_one_loadable_file_per_runtime_and_is_idempotent() {
    let config = test_config();
    let dir = config.cache_dir.clone().unwrap();
    let paths = prepare_cache(&config).unwrap();
    let names: Vec<String> = paths.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(paths.len(), 2, "the Python runtime and the extra one: {names:?}");
    assert!(names[0].starts_with("python-") && names[1].starts_with(&format!("{RUST_GUEST}-")), "{names:?}");
    for path in &paths {
        assert_eq!(path.parent(), Some(dir.as_path()), "in the configured directory");
        assert!(std::fs::metadata(path).unwrap().len() > 0, "`{}` was written", path.display());
    }
    assert_eq!(prepare_cache(&config).unwrap(), paths, "a second call finds the same files");
}

#[test]
fn prepare_cache_into_a_directory_it_cannot_write_says_which_and_what_to_do() {
    let file = tempfile::NamedTempFile::new().unwrap();
    // A directory under a regular file cannot be made, even by root.
    let dir = file.path().join("cache");
    let config = SidecarConfig { cache_dir: Some(dir.clone()), ..SidecarConfig::default() };
    let error = prepare_cache(&config).unwrap_err();
    assert!(
        matches!(&error, EngineError::Cache { runtime, dir: d, .. } if runtime == "python" && *d == dir),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains(&dir.display().to_string()) && message.contains("--cache-dir"), "{message}");
}
