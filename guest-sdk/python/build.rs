//! Link-time settings of the Wasm guest.
//!
//! The guest's linear-memory stack (the "shadow stack" of Rust frames whose
//! locals live in memory) must hold monty's recursive Rust work at the
//! script's full recursion depth (`runner::MAX_RECURSION_DEPTH`): `==` of
//! dicts nested 1,000 deep needs more than the 1 MiB Rust gives a
//! `wasm32-wasip1` binary by default. Rust links the stack below the data,
//! so running past its end traps instead of corrupting memory.
//!
//! The initial memory holds a small script's heap as well (wasi-libc's
//! malloc uses the initial memory above the data first): a run that needs
//! no `memory.grow` spares the host two `mprotect`s, one to grow the memory
//! and one to shrink the pool slot back for the next run, each a TLB
//! shootdown across cores.

/// The guest's linear-memory stack. Untouched pages cost no host memory.
const STACK_BYTES: u64 = 4 << 20;

/// The guest's initial memory: the stack, the data (about 1.75 MiB) and the
/// heap of a trivial run (which grew the memory by 1 MiB past the 5.75 MiB
/// the stack and data need). Charged to the run's memory limit like any
/// memory; a multiple of the 64 KiB Wasm page.
const INITIAL_MEMORY_BYTES: u64 = 7 << 20;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|arch| arch == "wasm32") {
        println!("cargo:rustc-link-arg-bins=-zstack-size={STACK_BYTES}");
        println!("cargo:rustc-link-arg-bins=--initial-memory={INITIAL_MEMORY_BYTES}");
    }
}
