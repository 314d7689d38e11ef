//! Finds the compiled guests that `./x guests` puts in `target/guests/` (or
//! `$TETHER_GUEST_DIR`) so `src/lib.rs` can embed them.

use std::path::PathBuf;

const GUESTS: [(&str, &str); 2] =
    [("TETHER_PYTHON_WASM", "tether-python.wasm"), ("TETHER_EXAMPLE_GUEST_WASM", "tether-example-guest.wasm")];

fn main() {
    println!("cargo:rerun-if-env-changed=TETHER_GUEST_DIR");
    let dir = match std::env::var_os("TETHER_GUEST_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/guests"),
    };
    for (var, file) in GUESTS {
        let path = dir.join(file);
        println!("cargo:rerun-if-changed={}", path.display());
        if !path.is_file() {
            eprintln!("error: the guest `{}` is not built; run `./x guests` (or `./x test`) first", path.display());
            std::process::exit(1);
        }
        println!("cargo:rustc-env={var}={}", path.display());
    }
}
