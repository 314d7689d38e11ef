//! Python reaching for the operating system: files, sockets, the
//! environment, arguments, `sys` tricks, and `eval`/`exec` of strings. Each
//! is refused with an exception that names what was refused and says that
//! effects go through tool calls; no call reaches the backend.

use super::*;

/// Runs `source`; it must raise `exception_type` mentioning `mentions`,
/// make no call, and leave the sidecar working.
async fn refused(source: &str, exception_type: &str, mentions: &[&str]) {
    let client = shared_client().await;
    let (outcome, recorder) = run(&client, python(source)).await;
    assert_raised(&outcome, exception_type, mentions);
    assert!(recorder.calls.lock().unwrap().is_empty(), "{source}: no call reaches the backend");
    assert_still_works(&client).await;
}

const FILES: &str = "file access is not available";
const ENV: &str = "environment access is not available";
const TOOLS: &str = "every effect goes through a tool call";

#[tokio::test]
async fn reading_etc_passwd_is_refused() {
    refused("open('/etc/passwd').read()", "PermissionError", &[FILES, TOOLS]).await;
}

#[tokio::test]
async fn a_relative_path_is_refused_too() {
    refused("open('Cargo.toml').read()", "PermissionError", &[FILES]).await;
}

#[tokio::test]
async fn writing_a_file_is_refused() {
    refused("f = open('/tmp/tether-escape', 'w')\nf.write('x')", "PermissionError", &[FILES]).await;
}

#[tokio::test]
async fn pathlib_reads_and_writes_are_refused() {
    refused("from pathlib import Path\nPath('/etc/passwd').read_text()", "PermissionError", &[FILES]).await;
    refused("from pathlib import Path\nPath('/tmp/x').write_text('x')", "PermissionError", &[FILES]).await;
}

#[tokio::test]
async fn listing_and_walking_directories_is_refused() {
    refused("import os\nos.listdir('/')", "PermissionError", &[FILES]).await;
    refused("import os\nlist(os.scandir('.'))", "PermissionError", &[FILES]).await;
    refused("from pathlib import Path\nlist(Path('/').iterdir())", "PermissionError", &[FILES]).await;
}

#[tokio::test]
async fn walking_the_tree_finds_nothing_and_reports_the_refusal() {
    // `os.walk` passes errors to `onerror` and otherwise skips them, as in CPython.
    let client = shared_client().await;
    let source = "import os\nerrors = []\nfound = list(os.walk('/', onerror=lambda e: errors.append(type(e).__name__ + ': ' + str(e))))\n[found, errors]";
    let (outcome, _) = run(&client, python(source)).await;
    let result = outcome.result.unwrap_or_else(|| panic!("{:#?}", outcome.error));
    assert_eq!(result[0], json!([]), "{result}");
    let errors = result[1].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{result}");
    assert!(errors[0].as_str().unwrap().starts_with(&format!("PermissionError: {FILES}")), "{result}");
    assert_still_works(&client).await;
}

#[tokio::test]
async fn changing_or_deleting_files_is_refused() {
    refused("import os\nos.remove('/etc/passwd')", "PermissionError", &[FILES]).await;
    refused("import os\nos.rename('/etc/passwd', '/tmp/p')", "PermissionError", &[FILES]).await;
    refused("import os\nos.makedirs('/tmp/a/b')", "PermissionError", &[FILES]).await;
}

#[tokio::test]
async fn the_working_directory_is_virtual_and_cannot_be_changed() {
    // monty keeps its own working directory, the virtual root: the host's
    // is never asked for. Changing it needs a stat of the target: refused.
    let client = shared_client().await;
    let (outcome, _) = run(&client, python("import os\n[os.getcwd(), os.getcwdb().decode()]")).await;
    assert_eq!(outcome.result, Some(json!(["/", "/"])), "{outcome:#?}");
    refused("import os\nos.chdir('/etc')", "PermissionError", &[FILES]).await;
}

#[tokio::test]
async fn os_environ_is_refused() {
    refused("import os\ndict(os.environ)", "PermissionError", &[ENV, TOOLS]).await;
}

#[tokio::test]
async fn getenv_is_refused_even_with_a_default() {
    refused("import os\nos.getenv('HOME', 'none')", "PermissionError", &[ENV]).await;
    refused("import os\nos.environ.get('HOME')", "PermissionError", &[ENV]).await;
}

#[tokio::test]
async fn the_home_directory_is_not_revealed() {
    refused("import os\nos.path.expanduser('~')", "PermissionError", &[ENV]).await;
}

#[tokio::test]
async fn checking_that_a_file_exists_is_refused() {
    refused("import os\nos.path.exists('/etc/passwd')", "PermissionError", &[FILES, "Path.exists"]).await;
    refused("import os\nos.stat('/etc/passwd')", "PermissionError", &[FILES, "Path.stat"]).await;
}

/// `source` is refused before it runs (`script_refused`), and no call
/// reaches the backend.
async fn refused_before_it_runs(source: &str, exception_type: &str, mentions: &[&str]) {
    let client = shared_client().await;
    let (outcome, recorder) = run(&client, python(source)).await;
    assert_refused(&outcome, exception_type, mentions);
    assert!(recorder.calls.lock().unwrap().is_empty(), "{source}: no call reaches the backend");
    assert_still_works(&client).await;
}

#[tokio::test]
async fn a_socket_cannot_be_imported() {
    refused_before_it_runs(
        "import socket\ns = socket.create_connection(('example.com', 80))",
        "ModuleNotFoundError",
        &["module 'socket' is not available here", TOOLS],
    )
    .await;
}

#[tokio::test]
async fn subprocess_and_os_system_are_absent() {
    refused_before_it_runs("import subprocess\nsubprocess.run(['id'])", "ModuleNotFoundError", &["'subprocess'"]).await;
    refused("import os\nos.system('id')", "AttributeError", &["system"]).await;
    refused("import os\nos.popen('id')", "AttributeError", &["popen"]).await;
}

#[tokio::test]
async fn sys_argv_and_sys_path_hold_nothing_of_the_host() {
    let client = shared_client().await;
    let source = "import sys\nout = {}\nfor name in ['argv', 'orig_argv', 'path', 'executable', 'prefix', 'exec_prefix', 'base_prefix']:\n    out[name] = repr(getattr(sys, name, None))\nout";
    let (outcome, _) = run(&client, python(source)).await;
    // The script's own virtual name, and nothing of the host's command line or install tree.
    let expected = json!({
        "argv": "['main.py']", "orig_argv": "None", "path": "None",
        "executable": "''", "prefix": "''", "exec_prefix": "''", "base_prefix": "''",
    });
    assert_eq!(outcome.result, Some(expected), "{outcome:#?}");
    assert_still_works(&client).await;
}

#[tokio::test]
async fn sys_cannot_raise_the_recursion_limit() {
    refused("import sys\nsys.setrecursionlimit(10 ** 6)", "AttributeError", &["setrecursionlimit"]).await;
}

#[tokio::test]
async fn sys_exit_is_absent_so_a_script_cannot_end_as_a_success_early() {
    refused("import sys\nsys.exit(0)\n'after exit'", "AttributeError", &["exit"]).await;
}

#[tokio::test]
async fn eval_of_a_string_gets_no_more_than_the_script() {
    refused("eval(\"open('/etc/passwd').read()\")", "PermissionError", &[FILES]).await;
}

#[tokio::test]
async fn exec_of_a_string_cannot_import_what_the_script_cannot() {
    refused("exec('import socket')", "ModuleNotFoundError", &["'socket'"]).await;
}

#[tokio::test]
async fn dunder_import_does_not_exist() {
    refused("__import__('subprocess')", "NameError", &["__import__"]).await;
}

#[tokio::test]
async fn the_subclasses_escape_finds_nothing() {
    // The classic CPython sandbox escape: walk from a literal to `object` and
    // look for a class that wraps `os` or `subprocess`.
    refused("().__class__.__base__.__subclasses__()", "AttributeError", &["__class__"]).await;
}

#[tokio::test]
async fn builtins_and_introspection_tricks_find_no_way_out() {
    for (source, exception, mentions) in [
        ("__builtins__['open']('/etc/passwd')", "NameError", "__builtins__"),
        ("globals()['__builtins__'].__import__('os')", "NameError", "globals"),
        ("vars()", "NameError", "vars"),
        ("dir()", "NameError", "dir"),
        ("type(print).__module__", "AttributeError", "__module__"),
        ("print.__self__.open('/etc/passwd')", "AttributeError", "__self__"),
        ("compile('import os', 'x', 'exec')", "NameError", "compile"),
        ("breakpoint()", "NameError", "breakpoint"),
        ("exit()", "NameError", "exit"),
        ("help()", "NameError", "help"),
        ("import asyncio\nasyncio.get_event_loop()", "AttributeError", "get_event_loop"),
    ] {
        refused(source, exception, &[mentions]).await;
    }
    // Where an attribute lookup has a default, the default is all it finds.
    let client = shared_client().await;
    let (outcome, _) = run(&client, python("getattr(print, '__globals__', 'none')")).await;
    assert_eq!(outcome.result, Some(json!("none")), "{outcome:#?}");
}

#[tokio::test]
async fn entropy_from_the_os_is_refused_and_the_random_module_still_works() {
    refused("import os\nos.urandom(8)", "NotImplementedError", &["os.urandom is not available"]).await;
    refused("open('/dev/urandom', 'rb').read(8)", "PermissionError", &[FILES]).await;
    let client = shared_client().await;
    let (first, _) = run(&client, python("import random\nrandom.random()")).await;
    let (second, _) = run(&client, python("import random\nrandom.random()")).await;
    assert!(first.result.as_ref().is_some_and(|r| r.is_f64()), "{first:#?}");
    assert_ne!(first.result, second.result, "each run draws afresh");
}

#[tokio::test]
async fn a_sleep_past_the_sleep_budget_ends_at_once_with_a_limit_error() {
    let client = shared_client().await;
    let mut request = python("import time\ntime.sleep(3600)\n'woke'");
    request.limits.deadline_ms = 300;
    let (outcome, _) = alongside(&client, run(&client, request)).await;
    assert_failed(&outcome, pb::RunStatus::LimitExceeded, "sleep_limit", &["sleep budget"]);
    assert_still_works(&client).await;
}
