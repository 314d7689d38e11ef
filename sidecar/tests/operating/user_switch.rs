//! `--user` when started as root (`sidecar/src/socket_file.rs`,
//! `module_cache.rs`, `harden.rs`): the socket belongs to the user the
//! sidecar runs as, with the group and mode the flags give, so that user —
//! and a member of the socket's group — can connect while others cannot;
//! without `--cache-dir` the compile cache is the user's; `--user 0` is
//! refused; the socket file is removed on exit. The root-only test says so
//! and is skipped when not run as root.

use crate::support::{PATIENCE, SidecarProcess, check};
use nix::sys::signal::Signal;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;
use tonic_health::pb::health_check_response::ServingStatus;

/// The user the sidecar switches to, the socket's group, a user in that
/// group, and a user in neither.
const USER: u32 = 65534;
const SOCKET_GROUP: u32 = 65533;
const GROUP_MEMBER: u32 = 65532;
const STRANGER: u32 = 65531;

/// Set when this test binary runs as [`client_child`].
const CLIENT_SOCKET: &str = "TETHER_USER_SWITCH_CLIENT_SOCKET";

/// Not a test of its own: a backend connecting as another uid, for
/// [`started_as_root_with_user_the_socket_and_the_cache_are_that_users`],
/// which runs this test binary again as that uid with only this test.
#[tokio::test]
#[ignore = "the client process of `started_as_root_with_user_…`; that test starts it as another uid"]
async fn client_child() {
    let socket = std::env::var(CLIENT_SOCKET).expect("run by `started_as_root_with_user_…`, which sets the socket");
    let client = tether_backend::SidecarClient::connect(&format!("unix:{socket}")).await.unwrap();
    client.describe().await.expect("the sidecar lets this uid in");
}

/// Whether uid `uid` (primary group `gid`, no others) can open a client and
/// call `Describe` on `socket`; what it printed when not.
fn connects_as(socket: &Path, uid: u32, gid: u32) -> Result<(), String> {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["user_switch::client_child", "--exact", "--ignored", "--nocapture"])
        .env(CLIENT_SOCKET, socket)
        .env("RUST_BACKTRACE", "0")
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    if output.status.success() {
        return Ok(());
    }
    Err(format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)))
}

#[tokio::test]
async fn started_as_root_with_user_the_socket_and_the_cache_are_that_users() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: switching users needs root, and this test runs as uid {}", nix::unistd::Uid::current());
        return;
    }
    // The socket's directory belongs to the user, as `/run/tether` does in the image.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(USER), Some(USER)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("s.sock");
    let cache = tether_sidecar::default_cache_dir_for_user(USER);
    let (user, group, member) = (format!("{USER}:{USER}"), SOCKET_GROUP.to_string(), GROUP_MEMBER.to_string());
    // No `--cache-dir`: the default must be the user's, not root's.
    let mut sidecar = SidecarProcess::start_with(
        None,
        &[
            "--socket",
            socket.to_str().unwrap(),
            "--user",
            &user,
            "--socket-group",
            &group,
            "--socket-mode",
            "0660",
            "--allow-uid",
            &USER.to_string(),
            "--allow-uid",
            &member,
            "--health-listen",
            "127.0.0.1:0",
        ],
    );
    let meta = std::fs::metadata(&socket).unwrap();
    assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o777), (USER, SOCKET_GROUP, 0o660), "owner, group, mode");

    connects_as(&socket, USER, USER).expect("the user the sidecar runs as connects");
    connects_as(&socket, GROUP_MEMBER, SOCKET_GROUP).expect("an allowed uid in the socket's group connects");
    let stranger = connects_as(&socket, STRANGER, STRANGER).expect_err("a uid outside the mode is kept out");
    assert!(stranger.to_lowercase().contains("permission denied"), "{stranger}");

    // Ready, with the guest compiled into (or loaded from) the user's cache.
    let mut health = SidecarProcess::health_client(sidecar.health_address.as_deref().unwrap()).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while check(&mut health, "").await != ServingStatus::Serving {
        assert!(tokio::time::Instant::now() < deadline, "never ready:\n{}", sidecar.log());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let log = sidecar.log();
    assert!(log.contains(&cache.display().to_string()), "start-up says where the cache is:\n{log}");
    let cache_meta = std::fs::metadata(&cache).unwrap();
    assert_eq!((cache_meta.uid(), cache_meta.mode() & 0o022), (USER, 0), "the user's alone: {}", cache.display());
    let compiled = std::fs::read_dir(&cache)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "cwasm"))
        .find(|entry| entry.metadata().is_ok_and(|meta| meta.uid() == USER));
    assert!(compiled.is_some(), "the user's cache holds the compiled guest: {}", cache.display());
    assert!(log.contains("an allowed uid can connect to the socket only if it is in the socket's group"), "{log}");

    sidecar.signal(Signal::SIGTERM);
    assert!(sidecar.exited().await.success(), "{}", sidecar.log());
    assert!(!socket.exists(), "the socket file is removed on exit");
}

#[test]
fn user_0_is_refused_at_start() {
    let output = Command::new(env!("CARGO_BIN_EXE_tether-sidecar"))
        .args(["--listen", "127.0.0.1:0", "--insecure-loopback", "--user", "0"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("`--user 0` would leave the sidecar running as root"), "{stderr}");
}
