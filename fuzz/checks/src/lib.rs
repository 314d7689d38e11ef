//! What each fuzz target checks, as a function of the input bytes.
//!
//! One function per target, `check(data: &[u8])`: it decodes `data` exactly
//! as the libFuzzer target in `fuzz/libfuzzer/fuzz_targets/` does ([`decode`]) and
//! panics on a finding. Two callers: the libFuzzer binaries (`./x fuzz
//! TARGET`, which explore), and `tests/replay.rs` under `cargo test`, which
//! replays the committed corpus, every saved finding and a fixed set of
//! generated inputs — the same inputs every run, so the suite never turns red
//! by chance and needs no build of its own. `docs/security.md` says what each
//! target checks.

// A failed `unwrap` here is a finding, reported as the panic it is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use arbitrary::{Arbitrary, Unstructured};

pub mod abi_documents;
pub mod json;
pub mod parked_state;
pub mod python_values;
pub mod sidecar_stream;
pub mod tool_config;

/// A target's check: returns when `data` holds, panics on a finding.
pub type Check = fn(data: &[u8]);

/// Every target, by the name `./x fuzz` and the corpus folders use, with its check.
pub const TARGETS: [(&str, Check); 5] = [
    ("abi_documents", abi_documents::check),
    ("parked_state", parked_state::check),
    ("python_values", python_values::check),
    ("sidecar_stream", sidecar_stream::check),
    ("tool_config", tool_config::check),
];

/// `data` as libfuzzer-sys's `fuzz_target!` decodes a structured input
/// (the binaries take bytes and call the checks, so this is the one decoder):
/// too few bytes for `T`'s smallest form, or bytes `T` cannot be read from,
/// are no input (`None`); otherwise all of `data` goes to `T`.
pub fn decode<'a, T: Arbitrary<'a>>(data: &'a [u8]) -> Option<T> {
    if data.len() < T::size_hint(0).0 {
        return None;
    }
    T::arbitrary_take_rest(Unstructured::new(data)).ok()
}
