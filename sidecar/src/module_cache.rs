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
