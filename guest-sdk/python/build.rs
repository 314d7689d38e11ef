//! Link-time settings of the Wasm guest.
//!
//! The guest's linear-memory stack (the "shadow stack" of Rust frames whose
//! locals live in memory) must hold monty's recursive Rust work at the
//! script's full recursion depth (`runner::MAX_RECURSION_DEPTH`): `==` of
//! dicts nested 1,000 deep needs more than the 1 MiB Rust gives a
//! `wasm32-wasip1` binary by default. Rust links the stack below the data,
//! so running past its end traps instead of corrupting memory.

/// The guest's linear-memory stack. Untouched pages cost no host memory.
const STACK_BYTES: u64 = 4 << 20;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|arch| arch == "wasm32") {
        println!("cargo:rustc-link-arg-bins=-zstack-size={STACK_BYTES}");
    }
}
