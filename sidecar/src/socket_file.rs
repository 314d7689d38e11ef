//! The Unix socket's file: bound with the owner, group and mode the operator
//! asked for, and removed when the sidecar exits.
//!
//! Why here and not in the kernel's defaults: `tether-sidecar` binds its
//! socket before `--user` drops root, so a socket left as bound belongs to
//! root, and with the usual umask only root may connect — not the uid the
//! sidecar then runs as, which is the one uid its peer check allows by
//! default. So the file is given to the user the sidecar runs as, with a
//! group and mode the operator can set (`--socket-group`, `--socket-mode`).
//! The mode is a first gate only: the peer check (`auth`) decides who gets
//! in, so a mode that lets every local user connect is safe.
//!
//! Ownership: [`SocketFile`] owns the path it bound; dropping it removes the
//! file, but only while it is still the socket this process bound (another
//! sidecar may have replaced it since).

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// Why the socket could not be set up; the sidecar must not start.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Something that is not a socket is in the way.
    #[error("`{}` exists and is not a socket; remove it or give `--socket` another path", .0.display())]
    NotASocket(PathBuf),
    /// A system call on the path failed.
    #[error("cannot {what} `{}`: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The socket's path.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// Who the socket file belongs to and who may connect to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketAccess {
    /// The file's owner: the uid the sidecar runs as (after `--user`).
    pub uid: u32,
    /// The file's group (`--socket-group`; default: the sidecar's gid).
    pub gid: u32,
    /// The file's permission bits (`--socket-mode`); connecting needs write
    /// permission.
    pub mode: u32,
}

/// A bound socket's file; dropping it removes the file if it is still ours.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    device: u64,
    inode: u64,
}

impl SocketFile {
    /// Binds a Unix socket at `path` (replacing a stale socket there, never
    /// another kind of file), then gives it `access`'s owner, group and mode.
    /// Call it while still root when the owner is another user.
    ///
    /// # Errors
    /// If something other than a socket is at `path`, or binding, `chown`
    /// or `chmod` fails (a non-root process may only give the file a group
    /// it is in).
    pub fn bind(path: &Path, access: SocketAccess) -> Result<(UnixListener, SocketFile), SocketError> {
        let io = |what| move |source| SocketError::Io { what, path: path.to_owned(), source };
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => {
                std::fs::remove_file(path).map_err(io("remove the stale socket"))?
            }
            Ok(_) => return Err(SocketError::NotASocket(path.to_owned())),
            Err(_) => {}
        }
        let listener = UnixListener::bind(path).map_err(io("listen on"))?;
        let meta = std::fs::symlink_metadata(path).map_err(io("read back"))?;
        let file = SocketFile { path: path.to_owned(), device: meta.dev(), inode: meta.ino() };
        if (meta.uid(), meta.gid()) != (access.uid, access.gid) {
            std::os::unix::fs::lchown(path, Some(access.uid), Some(access.gid))
                .map_err(io("give the socket to its user"))?;
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(access.mode & 0o7777))
            .map_err(io("set the mode of"))?;
        Ok((listener, file))
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| (meta.dev(), meta.ino()) == (self.device, self.inode));
        if !ours {
            return;
        }
        if let Err(error) = std::fs::remove_file(&self.path) {
            tracing::warn!(
                socket = %self.path.display(),
                %error,
                "could not remove the socket on exit (its directory is not writable by the user the sidecar runs as); the next start replaces it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(mode: u32) -> SocketAccess {
        SocketAccess { uid: nix::unistd::Uid::effective().as_raw(), gid: nix::unistd::Gid::effective().as_raw(), mode }
    }

    #[test]
    fn the_socket_gets_its_mode_and_is_removed_on_drop_unless_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let (listener, file) = SocketFile::bind(&path, own(0o660)).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o660);
        drop((listener, file));
        assert!(!path.exists(), "removed on drop");

        // A stale socket is replaced; a socket another process put in its place is left alone.
        let (_first, stale) = SocketFile::bind(&path, own(0o600)).unwrap();
        let (_second, replaced) = SocketFile::bind(&path, own(0o600)).unwrap();
        drop(stale);
        assert!(path.exists(), "not the stale one's to remove");
        drop(replaced);
        assert!(!path.exists());
    }

    #[test]
    fn a_file_that_is_not_a_socket_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        std::fs::write(&path, b"keep me").unwrap();
        let error = SocketFile::bind(&path, own(0o660)).unwrap_err();
        assert!(error.to_string().contains("is not a socket"), "{error}");
        assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
    }
}
