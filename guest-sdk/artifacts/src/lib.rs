//! The compiled Tether guests, embedded so a sidecar binary is self-contained.
//!
//! `./x guests` builds them (profile `guest`, target `wasm32-wasip1`) into
//! `target/guests/`; this crate's build script fails with that advice if they
//! are missing.

/// The Python runtime (`guest-sdk/python`): monty behind the `tether_v1` ABI.
pub static PYTHON: &[u8] = include_bytes!(env!("TETHER_PYTHON_WASM"));

/// The example Rust guest (`guest-sdk/example-guest`): a tiny command language
/// used by the tests.
pub static EXAMPLE_RUST: &[u8] = include_bytes!(env!("TETHER_EXAMPLE_GUEST_WASM"));
