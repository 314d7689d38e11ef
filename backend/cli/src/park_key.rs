//! The key an embedded sidecar seals parked runs with, kept in a file so
//! that a run parked by one `tether` process resumes in another
//! (`docs/parking.md`, "Keys and deployments").

use anyhow::Context;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use tether_sidecar::ParkKey;

/// Bytes of a key this command makes.
const KEY_BYTES: usize = 32;

/// Where the key lives without `--park-key-file`: `$XDG_STATE_HOME/tether/park.key`,
/// else `~/.local/state/tether/park.key`, else the temp directory's `tether-park.key`.
pub fn default_path() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/state")));
    match state {
        Some(state) => state.join("tether").join("park.key"),
        None => std::env::temp_dir().join("tether-park.key"),
    }
}

/// The key at `path` (the [`default_path`] without one), made first if no
/// file is there: 32 bytes from the system's random source, in a file only
/// this user may read.
///
/// # Errors
/// If the file cannot be read or made, or holds fewer than 32 bytes.
pub fn load_or_make(path: Option<&Path>) -> anyhow::Result<ParkKey> {
    let path = path.map_or_else(default_path, Path::to_owned);
    if !path.exists() {
        make(&path)?;
    }
    let secret = std::fs::read(&path).with_context(|| format!("cannot read the park key file `{}`", path.display()))?;
    ParkKey::from_secret(&secret).with_context(|| format!("the park key file `{}`", path.display()))
}

fn make(path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot make `{}` for the park key", dir.display()))?;
    }
    let mut secret = [0u8; KEY_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut secret))
        .context("cannot read random bytes for a park key")?;
    // `create_new`: of two processes making it at once, one writes it and
    // the other reads that one.
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(mut file) => {
            file.write_all(&secret).with_context(|| format!("cannot write the park key `{}`", path.display()))
        }
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error).with_context(|| format!("cannot make the park key file `{}`", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/tether/park.key");
        load_or_make(Some(&path)).unwrap();
        let first = std::fs::read(&path).unwrap();
        assert_eq!(first.len(), KEY_BYTES);
        load_or_make(Some(&path)).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), first, "not made again");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::write(&path, b"short").unwrap();
        let short = load_or_make(Some(&path)).unwrap_err();
        assert!(format!("{short:#}").contains("park key file"), "{short:#}");
    }
}
