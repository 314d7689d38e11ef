//! Process hardening (`sidecar/src/harden.rs`), read back from `/proc` of
//! the real process: no new privileges, no core dumps, the open-file limit,
//! the user drop and the network namespace. The last two need root; run
//! without it, they say so and are skipped.

use crate::support::{SidecarProcess, shared_cache};
use std::os::unix::process::CommandExt as _;
use tether_backend::SidecarClient;

/// The line of `/proc/<pid>/<file>` that starts with `prefix`.
fn proc_line(pid: u32, file: &str, prefix: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap();
    text.lines()
        .find(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` in {file}:\n{text}"))
        .to_owned()
}

/// The fields of a `/proc/<pid>/status` line after its name.
fn status_fields(pid: u32, name: &str) -> Vec<String> {
    proc_line(pid, "status", name).split_whitespace().skip(1).map(str::to_owned).collect()
}

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

async fn serves(socket: &std::path::Path) {
    let client = SidecarClient::connect(&format!("unix:{}", socket.display())).await.unwrap();
    client.describe().await.expect("the sidecar serves on the socket it bound before hardening");
}

#[tokio::test]
async fn no_new_privileges_no_core_dumps_and_the_open_file_limit() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let sidecar = SidecarProcess::start_exactly(
        &shared_cache(),
        &["--socket", socket.to_str().unwrap(), "--max-open-files", "1000"],
    );
    let pid = sidecar.pid();
    assert_eq!(status_fields(pid, "NoNewPrivs:"), ["1"]);
    let core = proc_line(pid, "limits", "Max core file size");
    assert_eq!(core.split_whitespace().skip(4).take(2).collect::<Vec<_>>(), ["0", "0"], "{core}");
    let files = proc_line(pid, "limits", "Max open files");
    assert_eq!(files.split_whitespace().skip(3).take(2).collect::<Vec<_>>(), ["1000", "1000"], "{files}");
    // Not dumpable: the kernel makes /proc/<pid>/ files of a non-dumpable
    // process owned by root.
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!(std::fs::metadata(format!("/proc/{pid}/mem")).unwrap().uid(), 0);
    serves(&socket).await;
}

#[tokio::test]
async fn started_as_root_it_drops_to_the_user_and_still_serves() {
    if !is_root() {
        eprintln!("skipped: switching users needs root, and this test runs as uid {}", nix::unistd::Uid::current());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    // The backend (this test) is root, so it is allowed by uid explicitly.
    let sidecar = SidecarProcess::start_exactly(
        &shared_cache(),
        &["--socket", socket.to_str().unwrap(), "--user", "65534:65533", "--allow-uid", "0"],
    );
    let pid = sidecar.pid();
    assert_eq!(status_fields(pid, "Uid:"), ["65534"; 4], "real, effective, saved and filesystem uid");
    assert_eq!(status_fields(pid, "Gid:"), ["65533"; 4], "real, effective, saved and filesystem gid");
    assert_eq!(status_fields(pid, "Groups:"), Vec::<String>::new(), "no supplementary groups");
    assert_eq!(status_fields(pid, "CapEff:"), ["0000000000000000"], "no capabilities left");
    serves(&socket).await;

    // Not root and asked to switch: it refuses to start rather than go on.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tether-sidecar"))
        .args(["--listen", "127.0.0.1:0", "--insecure-loopback", "--user", "1"])
        .env("RUST_BACKTRACE", "0")
        .uid(65534)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("only root can switch users"), "{stderr}");
}

#[tokio::test]
async fn unshare_net_puts_the_sidecar_in_a_network_namespace_of_its_own() {
    if !is_root() {
        eprintln!(
            "skipped: a new network namespace needs CAP_SYS_ADMIN, and this test runs as uid {}",
            nix::unistd::Uid::current()
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let sidecar =
        SidecarProcess::start_exactly(&shared_cache(), &["--socket", socket.to_str().unwrap(), "--unshare-net"]);
    let pid = sidecar.pid();
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    assert_ne!(ours, theirs, "the sidecar's network namespace is not ours");
    // Every thread, not only the first: the runtime started after unshare.
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        assert_eq!(std::fs::read_link(task.join("ns/net")).unwrap(), theirs, "{}", task.display());
    }
    // Only a loopback, and it is down.
    let dev = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap();
    let interfaces: Vec<&str> = dev.lines().skip(2).filter_map(|line| line.split(':').next()).map(str::trim).collect();
    assert_eq!(interfaces, ["lo"], "{dev}");
    serves(&socket).await;
}
