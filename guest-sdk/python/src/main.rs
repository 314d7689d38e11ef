//! The Python runtime of Tether: a `wasm32-wasip1` guest that runs one
//! script with monty, reaching the turn's tools through the `tether_v1` ABI.
//!
//! One process is one run: read the start document, run the script (or go on
//! from its parked state), report the outcome, exit 0. Whatever the script
//! does ends as an [`Outcome`], never a panic. A run the host parks ends
//! inside `tether_v1.park` instead, without an outcome. The logic lives in the `tether_python` library, which also builds
//! natively, so the run loop is tested with a fake host.
//!
//! [`Outcome`]: tether_guest::Outcome

// The runtime looks tools up by name; it reads the schema of a tool the
// script names, to refuse a call that cannot fit it before the script runs
// (`tether_python::check`). Descriptions and other schemas need not travel.
tether_guest::reads_tool_schemas_if_named!();
// It parks when asked (`tether_python::park`), so the host may end a run
// waiting on tools and resume it later, on any sidecar.
tether_guest::parks!();

#[cfg(target_arch = "wasm32")]
fn main() {
    use tether_guest::{ABI_VERSION, Outcome, ScriptError};
    use tether_python::{output::Printer, runner};

    let doc = tether_guest::start();
    let outcome = if doc.abi == ABI_VERSION {
        let mut printer = Printer::new(std::io::stdout(), std::io::stderr());
        runner::run_parkable(&doc, |calls, park| tether_guest::call_batch_parkable(calls, park), &mut printer)
    } else {
        Outcome::Err(ScriptError {
            kind: tether_codes::RunErrorKind::UnsupportedAbi.as_str().to_owned(),
            message: format!("this runtime speaks tether_v{ABI_VERSION}, the host sent a tether_v{} run", doc.abi),
            ..ScriptError::default()
        })
    };
    tether_guest::finish(&outcome);
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!(
        "tether-python runs only as a wasm32-wasip1 guest of Tether: \
         build it with `cargo build --profile guest --target wasm32-wasip1 -p tether-python`"
    );
    std::process::exit(2);
}
