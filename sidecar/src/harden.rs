//! Process hardening, applied once at start by `tether-sidecar`.
//!
//! [`Hardening::apply`] must run while the process has ONE thread — after
//! the listeners are bound, before the async runtime starts — because
//! `unshare(CLONE_NEWNET)` moves only the calling thread into the new
//! namespace, and threads started later inherit it. (`setuid` and `setgroups`
//! go through glibc, which applies them to every thread; being
//! single-threaded makes that moot too.)
//!
//! In order:
//! 1. `RLIMIT_CORE` 0 and `PR_SET_DUMPABLE` 0: no core dump holds a run's
//!    data, and no other process of the same user may `ptrace` the sidecar.
//! 2. `RLIMIT_NOFILE` to [`Hardening::max_open_files`] (soft and hard).
//! 3. `PR_SET_NO_NEW_PRIVS`: no `execve` can gain privileges (setuid
//!    binaries, file capabilities) — not that a script can `execve` at all.
//! 4. `--unshare-net`: a fresh network namespace with only a downed
//!    loopback; sockets bound before keep working, nothing new reaches a
//!    network.
//! 5. `--user UID[:GID]`: when root, `setgroups([])`, `setgid`, `setuid`;
//!    then checks that uid 0 cannot be regained. A failure is an error: the
//!    sidecar never goes on as root when told not to. `--user 0` is refused
//!    (not accepted as a no-op): whoever wrote it meant to leave root, and
//!    running as root is had by leaving `--user` out.

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::unistd::{Gid, Uid};

/// What [`Hardening::apply`] failed to do; the sidecar must not start.
#[derive(Debug, thiserror::Error)]
pub enum HardenError {
    /// A system call failed.
    #[error("cannot {what}: {errno}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        errno: nix::Error,
    },
    /// `--user` was given but the process is not root and is not that user.
    #[error(
        "cannot switch to uid `{uid}`: the sidecar runs as uid `{current}` and only root can switch users; start it as root or drop `--user`"
    )]
    NotRoot {
        /// The uid asked for.
        uid: u32,
        /// The uid the process has.
        current: u32,
    },
    /// After the drop, the process could still become root again.
    #[error("after switching to uid `{0}` the process could regain root; refusing to continue")]
    RootRegained(u32),
    /// `--user 0`: switching to root leaves the sidecar root.
    #[error(
        "`--user 0` would leave the sidecar running as root, which `--user` is there to prevent; give an unprivileged uid (the container image uses `65532`), or leave `--user` out to run as root knowingly"
    )]
    StaysRoot,
    /// A `--user` value that does not parse.
    #[error("`--user` takes `UID` or `UID:GID` (numbers), not `{0}`")]
    BadUser(String),
}

/// An unprivileged user to run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    /// The uid.
    pub uid: u32,
    /// The gid; `UID` alone means the same number as the uid.
    pub gid: u32,
}

impl std::str::FromStr for RunAs {
    type Err = HardenError;

    fn from_str(value: &str) -> Result<RunAs, HardenError> {
        let bad = || HardenError::BadUser(value.to_owned());
        let (uid, gid) = match value.split_once(':') {
            Some((uid, gid)) => (uid.parse().map_err(|_| bad())?, gid.parse().map_err(|_| bad())?),
            None => {
                let id = value.parse().map_err(|_| bad())?;
                (id, id)
            }
        };
        Ok(RunAs { uid, gid })
    }
}

/// The hardening to apply.
#[derive(Debug, Clone, Default)]
pub struct Hardening {
    /// `RLIMIT_NOFILE` (soft and hard). `None`: left alone. Without
    /// `CAP_SYS_RESOURCE` it cannot go above the current hard limit, and is
    /// lowered to it.
    pub max_open_files: Option<u64>,
    /// Enter a fresh network namespace (needs `CAP_SYS_ADMIN`).
    pub unshare_net: bool,
    /// Switch to this user (needs root, unless already that user).
    pub run_as: Option<RunAs>,
}

/// What [`Hardening::apply`] did, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardenReport {
    /// `RLIMIT_NOFILE` now.
    pub max_open_files: u64,
    /// Whether the process is in a network namespace of its own.
    pub unshared_net: bool,
    /// The uid and gid the process runs as now.
    pub uid: u32,
    /// The gid.
    pub gid: u32,
}

fn sys<T>(what: &'static str, result: nix::Result<T>) -> Result<T, HardenError> {
    result.map_err(|errno| HardenError::Sys { what, errno })
}

impl Hardening {
    /// Applies everything, in the order the module documents. Call it with
    /// one thread only, after binding the listeners.
    ///
    /// # Errors
    /// If a step fails, or [`HardenError::StaysRoot`] for a switch to uid 0
    /// (checked before anything is done); the process must then exit.
    pub fn apply(&self) -> Result<HardenReport, HardenError> {
        if self.run_as.is_some_and(|user| user.uid == 0) {
            return Err(HardenError::StaysRoot);
        }
        sys("set RLIMIT_CORE to 0", setrlimit(Resource::RLIMIT_CORE, 0, 0))?;
        sys("turn off PR_SET_DUMPABLE", nix::sys::prctl::set_dumpable(false))?;
        if let Some(wanted) = self.max_open_files {
            set_max_open_files(wanted)?;
        }
        sys("set PR_SET_NO_NEW_PRIVS", nix::sys::prctl::set_no_new_privs())?;
        if self.unshare_net {
            sys(
                "enter a new network namespace (needs CAP_SYS_ADMIN: start as root, or drop --unshare-net)",
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET),
            )?;
        }
        if let Some(user) = self.run_as {
            drop_to(user)?;
        }
        let (max_open_files, _) = sys("read RLIMIT_NOFILE", getrlimit(Resource::RLIMIT_NOFILE))?;
        Ok(HardenReport {
            max_open_files,
            unshared_net: self.unshare_net,
            uid: Uid::current().as_raw(),
            gid: Gid::current().as_raw(),
        })
    }
}

/// Sets `RLIMIT_NOFILE` to `wanted`; above the hard limit without
/// `CAP_SYS_RESOURCE` (even root may lack it in a container), to the hard
/// limit ([`HardenReport::max_open_files`] tells; the caller warns, its
/// logging is not set up yet).
fn set_max_open_files(wanted: u64) -> Result<(), HardenError> {
    let (_, hard) = sys("read RLIMIT_NOFILE", getrlimit(Resource::RLIMIT_NOFILE))?;
    if wanted <= hard {
        return sys("set RLIMIT_NOFILE", setrlimit(Resource::RLIMIT_NOFILE, wanted, wanted));
    }
    match setrlimit(Resource::RLIMIT_NOFILE, wanted, wanted) {
        Err(nix::Error::EPERM) => sys("set RLIMIT_NOFILE", setrlimit(Resource::RLIMIT_NOFILE, hard, hard)),
        result => sys("set RLIMIT_NOFILE", result),
    }
}

fn drop_to(user: RunAs) -> Result<(), HardenError> {
    let (uid, gid) = (Uid::from_raw(user.uid), Gid::from_raw(user.gid));
    if !Uid::effective().is_root() {
        let current = Uid::current();
        if current == uid && Uid::effective() == uid {
            return Ok(());
        }
        return Err(HardenError::NotRoot { uid: user.uid, current: current.as_raw() });
    }
    sys("drop supplementary groups (setgroups)", nix::unistd::setgroups(&[]))?;
    sys("set the group (setgid)", nix::unistd::setgid(gid))?;
    sys("set the user (setuid)", nix::unistd::setuid(uid))?;
    // Only a full drop (real, effective and saved uid) makes this fail.
    if nix::unistd::setuid(Uid::from_raw(0)).is_ok() || Uid::effective().is_root() {
        return Err(HardenError::RootRegained(user.uid));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_parses_as_uid_or_uid_and_gid() {
        assert_eq!("65534".parse::<RunAs>().unwrap(), RunAs { uid: 65534, gid: 65534 });
        assert_eq!("1000:100".parse::<RunAs>().unwrap(), RunAs { uid: 1000, gid: 100 });
        assert!("nobody".parse::<RunAs>().is_err());
        assert!("1:".parse::<RunAs>().is_err());
    }

    #[test]
    fn a_switch_to_root_is_refused_before_anything_is_done() {
        let hardening = Hardening { run_as: Some(RunAs { uid: 0, gid: 0 }), ..Hardening::default() };
        let error = hardening.apply().unwrap_err();
        assert!(matches!(error, HardenError::StaysRoot), "{error}");
        assert!(error.to_string().contains("`--user 0`"), "{error}");
    }
}
