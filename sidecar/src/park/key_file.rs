//! A park key kept in a file, so that a run parked by one process resumes
//! in another that reads the same file (`docs/parking.md`, "Keys and
//! deployments"): what `tether-sidecar --park-key-file` reads, and what an
//! embedded sidecar (the `tether` CLI's, the Python package's) reads or
//! makes on first use.

use super::{ParkKey, ShortParkKey};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// Bytes of secret in a key file made here.
const KEY_BYTES: usize = 32;

/// Why a park key file could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum ParkKeyFileError {
    /// The file is there but cannot be read.
    #[error("cannot read the park key file `{}`: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file holds too little secret.
    #[error("the park key file `{}`: {error}", path.display())]
    Short {
        /// The file.
        path: PathBuf,
        /// How little.
        error: ShortParkKey,
    },
    /// No file was there, and none could be made.
    #[error(
        "cannot make the park key file `{}`: {error}; name a file this user may write (`--park-key-file`, \
         `TETHER_PARK_KEY_FILE`), or make one with `head -c 32 /dev/urandom > FILE`",
        path.display()
    )]
    Make {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The system's random source failed.
    #[error("cannot read random bytes for a park key: {0}")]
    Random(std::io::Error),
}

/// Where an embedded sidecar's park key lives unless one is named:
/// `$XDG_STATE_HOME/tether/park.key`, else `~/.local/state/tether/park.key`,
/// else the temp directory's `tether-park.key`.
pub fn default_park_key_file() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME").filter(|dir| !dir.is_empty()).map(PathBuf::from).or_else(|| {
        std::env::var_os("HOME").filter(|home| !home.is_empty()).map(|home| PathBuf::from(home).join(".local/state"))
    });
    match state {
        Some(state) => state.join("tether").join("park.key"),
        None => std::env::temp_dir().join("tether-park.key"),
    }
}

impl ParkKey {
    /// The key in the file at `path` (at least 32 secret bytes).
    ///
    /// # Errors
    /// [`ParkKeyFileError::Read`] if it cannot be read,
    /// [`ParkKeyFileError::Short`] if it holds fewer than 32 bytes.
    pub fn from_file(path: &Path) -> Result<ParkKey, ParkKeyFileError> {
        let secret = std::fs::read(path).map_err(|error| ParkKeyFileError::Read { path: path.to_owned(), error })?;
        ParkKey::from_secret(&secret).map_err(|error| ParkKeyFileError::Short { path: path.to_owned(), error })
    }

    /// The key in the file at `path`, made first if no file is there: 32
    /// bytes from the system's random source, in a file only this user may
    /// read (mode 0600), its directory made if needed. Of processes making
    /// it at once, one's file is put in place whole and every one reads
    /// that: the secret is written to a file of its own in the same
    /// directory first and then linked to `path`, so no process ever reads
    /// a key half written.
    ///
    /// # Errors
    /// [`ParkKeyFileError`]: the file cannot be read or made, or holds
    /// fewer than 32 bytes.
    pub fn load_or_make(path: &Path) -> Result<ParkKey, ParkKeyFileError> {
        match ParkKey::from_file(path) {
            Err(ParkKeyFileError::Read { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
                make(path)?;
                ParkKey::from_file(path)
            }
            read => read,
        }
    }
}

/// Puts a new key at `path`, unless another process put one there first.
fn make(path: &Path) -> Result<(), ParkKeyFileError> {
    let failed = |error| ParkKeyFileError::Make { path: path.to_owned(), error };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(failed)?;
    let mut secret = [0u8; KEY_BYTES];
    getrandom::fill(&mut secret).map_err(|error| ParkKeyFileError::Random(error.into()))?;
    let mut tag = [0u8; 8];
    getrandom::fill(&mut tag).map_err(|error| ParkKeyFileError::Random(error.into()))?;
    let name = path.file_name().map_or_else(|| "park.key".into(), |name| name.to_string_lossy().into_owned());
    let tag: String = tag.iter().map(|byte| format!("{byte:02x}")).collect();
    let temp = dir.join(format!(".{name}.{}.{tag}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .and_then(|mut file| file.write_all(&secret).and_then(|()| file.sync_all()));
    // The whole key appears at `path` at once, or not at all: a link never
    // replaces a file, so the first process's key stays.
    let placed = written.and_then(|()| match std::fs::hard_link(&temp, path) {
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        linked => linked,
    });
    // Only the name goes; the key stays at `path` under its other link.
    let _ = std::fs::remove_file(&temp);
    placed.map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_key_is_made_once_with_mode_0600_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/tether/park.key");
        let made = ParkKey::load_or_make(&path).unwrap();
        let first = std::fs::read(&path).unwrap();
        assert_eq!(first.len(), KEY_BYTES);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let again = ParkKey::load_or_make(&path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), first, "not made again");
        assert_eq!(made.0, again.0);
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind: {left:?}");
    }

    #[test]
    fn a_short_or_unreadable_file_says_which_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("park.key");
        std::fs::write(&path, b"short").unwrap();
        let short = ParkKey::load_or_make(&path).unwrap_err();
        assert!(matches!(short, ParkKeyFileError::Short { .. }), "{short}");
        assert!(short.to_string().contains("park key file") && short.to_string().contains("32 bytes"), "{short}");
        let missing = ParkKey::from_file(&dir.path().join("none")).unwrap_err();
        assert!(missing.to_string().contains("cannot read the park key file"), "{missing}");
        // No one may make files in /proc, root included.
        let unmade = ParkKey::load_or_make(Path::new("/proc/tether-park.key")).unwrap_err();
        assert!(matches!(unmade, ParkKeyFileError::Make { .. }), "{unmade}");
        assert!(unmade.to_string().contains("TETHER_PARK_KEY_FILE"), "{unmade}");
    }

    #[test]
    fn processes_making_the_key_at_once_all_read_the_same_whole_key() {
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(format!("tether/park-{round}.key"));
            let barrier = std::sync::Barrier::new(8);
            let keys: Vec<[u8; 32]> = std::thread::scope(|scope| {
                let threads: Vec<_> = (0..8)
                    .map(|_| {
                        scope.spawn(|| {
                            barrier.wait();
                            ParkKey::load_or_make(&path).unwrap().0
                        })
                    })
                    .collect();
                threads.into_iter().map(|thread| thread.join().unwrap()).collect()
            });
            assert!(keys.iter().all(|key| *key == keys[0]), "round {round}: every one reads the one key");
            assert_eq!(std::fs::read(&path).unwrap().len(), KEY_BYTES);
            assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 1, "round {round}");
        }
    }

    #[test]
    fn the_default_file_is_in_the_state_directory() {
        let path = default_park_key_file();
        assert!(path.ends_with("tether/park.key") || path.ends_with("tether-park.key"), "{}", path.display());
    }
}
