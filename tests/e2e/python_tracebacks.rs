//! Tracebacks read as CPython's would (issue 13): a `NameError`'s caret sits
//! under the undefined name, and a bare `raise` with nothing to re-raise
//! names the script and its line, not the file `"\0"`.

use crate::support::*;

#[tokio::test]
async fn a_name_errors_caret_covers_the_name() {
    let (_sidecar, client) = sidecar().await;
    let (outcome, _) = run_demo(&client, "def f():\n    return snap(1) + 1\nf()\n").await;
    let error = outcome.error.expect("the run fails");
    assert_eq!((error.exception_type.as_str(), error.line), ("NameError", 2), "{error:?}");
    assert!(error.traceback.contains("    return snap(1) + 1\n           ~~~~\n"), "{}", error.traceback);
}

#[tokio::test]
async fn a_bare_raise_names_the_script_and_its_line() {
    let (_sidecar, client) = sidecar().await;
    let (outcome, _) = run_demo(&client, "def f():\n    raise\nf()\n").await;
    let error = outcome.error.expect("the run fails");
    assert_eq!((error.exception_type.as_str(), error.line), ("RuntimeError", 2), "{error:?}");
    assert!(!error.traceback.contains('\0'), "{:?}", error.traceback);
    assert!(error.traceback.contains("File \"main.py\", line 2, in f\n    raise\n"), "{}", error.traceback);
}
