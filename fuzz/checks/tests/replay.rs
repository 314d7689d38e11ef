//! Every fuzz target's check over the committed corpus (`fuzz/corpus/T/`),
//! the findings `./x fuzz` saved on this machine (`fuzz/artifacts/T/`, git
//! ignores them) and `GENERATED` inputs from a fixed-seed generator: the same
//! inputs on every run of a clean clone.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use tether_fuzz_checks::TARGETS;

/// How many generated inputs each target gets, on top of its corpus.
const GENERATED: usize = 3000;

fn inputs(folder: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(folder) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries.map(|entry| entry.unwrap().path()).filter(|path| path.is_file()).collect();
    files.sort();
    files.into_iter().map(|path| (path.clone(), std::fs::read(&path).unwrap())).collect()
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A splitmix64 stream: a fixed sequence of inputs of 0 to 1,023 bytes.
fn generated(seed: u64) -> impl Iterator<Item = Vec<u8>> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    std::iter::repeat_with(move || {
        let len = (next() % 1024) as usize;
        (0..len).map(|_| next() as u8).collect()
    })
}

#[test]
fn every_target_has_a_committed_corpus() {
    for (target, _) in TARGETS {
        let corpus = inputs(&fuzz_dir().join("corpus").join(target));
        assert!(!corpus.is_empty(), "fuzz/corpus/{target}/ holds no input");
    }
}

#[test]
fn the_corpus_and_every_saved_finding_pass_their_checks() {
    for (target, check) in TARGETS {
        for folder in ["corpus", "artifacts"] {
            for (path, data) in inputs(&fuzz_dir().join(folder).join(target)) {
                eprintln!("{target}: {}", path.display());
                check(&data);
            }
        }
    }
}

#[test]
fn generated_inputs_pass_their_checks() {
    for (seed, (target, check)) in TARGETS.into_iter().enumerate() {
        for (index, data) in generated(seed as u64).take(GENERATED).enumerate() {
            let result = std::panic::catch_unwind(|| check(&data));
            assert!(result.is_ok(), "{target}: generated input {index} (seed {seed}) failed: {data:?}");
        }
    }
}
