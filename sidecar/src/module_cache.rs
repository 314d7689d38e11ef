//! Compiled guests, cached on disk so no process compiles a guest twice and a
//! restart does not recompile.
//!
//! A cache file is named by the guest's SHA-256 and the engine's compatibility
//! hash, so a new guest or a new wasmtime/config never loads a stale file. It
//! is written to a temporary file and renamed, so a crash never leaves half a
//! file under the final name, and loaded with `mmap` (well under a millisecond).

use sha2::{Digest, Sha256};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use wasmtime::{Engine, Module};

/// Serializes compile-or-load across threads of one process, so sidecars
/// started together (as tests do) compile a guest once, not once each.
static COMPILE_LOCK: Mutex<()> = Mutex::new(());

/// The default cache directory: `$XDG_CACHE_HOME/tether`, else `~/.cache/tether`,
/// else the system temporary directory.
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("tether");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return PathBuf::from(home).join(".cache/tether");
    }
    std::env::temp_dir().join("tether-cache")
}

/// The default cache directory of a sidecar started as root that switches to
/// `uid` (`--user`): that user's own, not root's — `~/.cache/tether` in the
/// user's home (from the passwd database) when it has one, else
/// `tether-cache-<uid>` in the system temporary directory. Root's
/// environment (`$HOME`, `$XDG_CACHE_HOME`) is not the user's, so it is not
/// read. [`claim_cache_dir`] makes sure it is the user's alone.
pub fn default_cache_dir_for_user(uid: u32) -> PathBuf {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) if user.dir.is_dir() && user.dir != Path::new("/") => user.dir.join(".cache/tether"),
        _ => std::env::temp_dir().join(format!("tether-cache-{uid}")),
    }
}

/// Why a cache directory may not be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheDirError {
    /// It could not be created or read.
    #[error("cannot create the compile cache `{}`: {source}; give `--cache-dir` a directory the sidecar's user can write", dir.display())]
    Create {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Another user owns it, or others may write to it: compiled code loaded
    /// from there could be anyone's.
    #[error(
        "the compile cache `{}` belongs to uid `{owner}` with mode `{mode:o}`, not to uid `{uid}` alone; remove it, or give `--cache-dir` a directory only uid `{uid}` can write", dir.display()
    )]
    NotPrivate {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// Its permission bits.
        mode: u32,
        /// The uid the sidecar runs as.
        uid: u32,
    },
}

/// Creates `dir` (mode 0700) if it is missing and checks that it belongs to
/// the calling process's uid and that no one else may write to it — call it
/// after the switch to `--user`, for a cache directory the sidecar chose
/// itself ([`default_cache_dir_for_user`]).
///
/// # Errors
/// [`CacheDirError`] when it cannot be created, or is not the user's alone.
pub fn claim_cache_dir(dir: &Path) -> Result<(), CacheDirError> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    let create = |source| CacheDirError::Create { dir: dir.to_owned(), source };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(create)?;
    let meta = std::fs::symlink_metadata(dir).map_err(create)?;
    let uid = nix::unistd::Uid::effective().as_raw();
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(CacheDirError::NotPrivate {
            dir: dir.to_owned(),
            owner: meta.uid(),
            mode: meta.mode() & 0o7777,
            uid,
        });
    }
    Ok(())
}

/// A guest module, and whether its compiled form is in the cache.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// The module.
    pub(crate) module: Module,
    /// True when the cache holds it (loaded from there, or stored there after
    /// compiling): loading it again takes milliseconds, not a compile.
    pub(crate) cached: bool,
}

/// Loads `name`'s compiled form from `dir`, or compiles `wasm` and stores it.
///
/// # Errors
/// Only when `wasm` does not compile. A cache that cannot be read or written is
/// logged and bypassed, so a read-only cache directory works: warm, it is only
/// read; cold, the guest is compiled in memory at every start.
pub(crate) fn load_or_compile(engine: &Engine, dir: &Path, name: &str, wasm: &[u8]) -> wasmtime::Result<Loaded> {
    let path = dir.join(cache_file_name(engine, name, wasm));
    let _guard = COMPILE_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(module) = load(engine, &path) {
        return Ok(Loaded { module, cached: true });
    }
    let module = compile(engine, name, wasm)?;
    let cached = match store(&module, dir, &path) {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "could not cache the compiled guest; the next start compiles again");
            false
        }
    };
    Ok(Loaded { module, cached })
}

/// Makes sure `dir` holds a compiled form of `name` that loads, compiling and
/// storing it if not, and returns its path.
///
/// # Errors
/// [`CacheError::Compile`] when `wasm` does not compile, [`CacheError::Store`]
/// when the compiled form cannot be written to `dir`.
pub(crate) fn prepare(engine: &Engine, dir: &Path, name: &str, wasm: &[u8]) -> Result<PathBuf, CacheError> {
    let path = dir.join(cache_file_name(engine, name, wasm));
    let _guard = COMPILE_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if load(engine, &path).is_none() {
        // Find out that the directory cannot be written before spending
        // seconds on compiling.
        check_writable(dir).map_err(|error| CacheError::Store(error.into()))?;
        let module = compile(engine, name, wasm).map_err(CacheError::Compile)?;
        store(&module, dir, &path).map_err(CacheError::Store)?;
    }
    Ok(path)
}

/// Why [`prepare`] failed.
#[derive(Debug)]
pub(crate) enum CacheError {
    /// The guest does not compile.
    Compile(wasmtime::Error),
    /// The compiled guest could not be written.
    Store(wasmtime::Error),
}

/// The module stored at `path`, if there is one and it loads.
fn load(engine: &Engine, path: &Path) -> Option<Module> {
    if !path.is_file() {
        return None;
    }
    // SAFETY: only this module writes files under these names, each is
    // renamed into place whole, and the name includes the engine's
    // compatibility hash. A directory an attacker can write to is outside
    // this guarantee, as for any executable code cache.
    match unsafe { Module::deserialize_file(engine, path) } {
        Ok(module) => Some(module),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "discarding an unreadable compiled guest");
            None
        }
    }
}

fn compile(engine: &Engine, name: &str, wasm: &[u8]) -> wasmtime::Result<Module> {
    let started = std::time::Instant::now();
    let module = Module::new(engine, wasm)?;
    tracing::info!(guest = name, elapsed_ms = started.elapsed().as_millis() as u64, "compiled guest");
    Ok(module)
}

fn cache_file_name(engine: &Engine, name: &str, wasm: &[u8]) -> String {
    let digest = Sha256::digest(wasm);
    let mut compat = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut compat);
    let short: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("{name}-{short}-{:016x}.cwasm", compat.finish())
}

fn store(module: &Module, dir: &Path, path: &Path) -> wasmtime::Result<()> {
    std::fs::create_dir_all(dir)?;
    let bytes = module.serialize()?;
    let temp = tempfile_in(dir)?;
    std::fs::write(&temp, bytes)?;
    std::fs::rename(&temp, path)?;
    Ok(())
}

fn check_writable(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe = tempfile_in(dir)?;
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

fn tempfile_in(dir: &Path) -> std::io::Result<PathBuf> {
    let unique = format!(".tmp-{}-{:?}", std::process::id(), std::thread::current().id());
    Ok(dir.join(unique.replace(['(', ')'], "")))
}
