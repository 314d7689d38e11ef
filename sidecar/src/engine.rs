//! The sandbox engine: wasmtime set up once per process, and the runtimes
//! (compiled guests) a run can name.
//!
//! Built once and shared: the `Engine`, its pooling allocator, the `Linker`
//! with WASI and the `tether_v1` imports, and one `InstancePre` per runtime.
//! Every run gets a fresh `Store` and instance from these (see `run.rs`).

use crate::abi;
use crate::config::SidecarConfig;
use crate::module_cache;
use crate::state::RunState;
use sha2::Digest;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, InstancePre, Linker, PoolingAllocationConfig};

/// How often the epoch advances. A running guest checks its CPU budget and
/// yields to other tasks at every tick, so this bounds both how late a CPU
/// limit or a cancellation lands and how long one guest holds a thread.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The most wasm stack a guest may use; deeper recursion ends the run with a
/// stack-limit error.
const MAX_WASM_STACK: usize = 4 << 20;

/// Errors building the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// wasmtime rejected the configuration (e.g. the pooling allocator could
    /// not reserve its memory).
    #[error("failed to set up wasmtime: {0:#}")]
    Setup(wasmtime::Error),
    /// The thread that drives CPU limits and yields could not start.
    #[error("failed to start the epoch ticker thread: {0}")]
    Ticker(std::io::Error),
    /// A guest module did not compile or does not fit the `tether_v1` ABI.
    #[error("the `{runtime}` guest cannot be loaded: {source:#}")]
    Guest {
        /// The runtime's name.
        runtime: String,
        /// Why.
        source: wasmtime::Error,
    },
    /// [`prepare_cache`] could not write a compiled guest.
    #[error("cannot store the compiled `{runtime}` guest in `{}`: {source:#}; give the sidecar a cache directory it can write (`--cache-dir`)", dir.display())]
    Cache {
        /// The runtime's name.
        runtime: String,
        /// The cache directory.
        dir: PathBuf,
        /// Why.
        source: wasmtime::Error,
    },
}

/// A compiled, linked guest a run can name, and what it reads of the run.
pub(crate) struct Runtime {
    /// Instantiates the guest for a run.
    pub(crate) pre: InstancePre<RunState>,
    /// What its start document carries of each tool.
    pub(crate) tool_fields: ToolFields,
    /// The guest can park: it carries the
    /// [`PARKS_SECTION`](tether_guest::PARKS_SECTION).
    pub(crate) parks: bool,
    /// SHA-256 of the guest module: a parked run resumes only on this build.
    pub(crate) build: [u8; 32],
}

/// What a runtime's start document carries of each tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolFields {
    /// Name, description and input schema.
    All,
    /// The name alone: the guest carries the
    /// [`TOOL_NAMES_ONLY_SECTION`](tether_guest::TOOL_NAMES_ONLY_SECTION).
    NamesOnly,
    /// The name, and the input schema of a tool the script's source names
    /// (a fresh start only): the guest carries the
    /// [`TOOL_SCHEMAS_IF_NAMED_SECTION`](tether_guest::TOOL_SCHEMAS_IF_NAMED_SECTION).
    SchemasIfNamed,
}

impl ToolFields {
    /// What the guest `wasm` declares it reads.
    fn declared_by(wasm: &[u8]) -> ToolFields {
        if declares(wasm, tether_guest::TOOL_SCHEMAS_IF_NAMED_SECTION) {
            ToolFields::SchemasIfNamed
        } else if declares(wasm, tether_guest::TOOL_NAMES_ONLY_SECTION) {
            ToolFields::NamesOnly
        } else {
            ToolFields::All
        }
    }
}

/// True when the guest `wasm` has a custom section named `section`.
fn declares(wasm: &[u8], section: &str) -> bool {
    wasmparser::Parser::new(0)
        .parse_all(wasm)
        .any(|payload| matches!(payload, Ok(wasmparser::Payload::CustomSection(custom)) if custom.name() == section))
}

/// wasmtime, configured once, with every runtime compiled and linked.
pub(crate) struct SandboxEngine {
    engine: Engine,
    runtimes: BTreeMap<String, Runtime>,
    /// Every runtime's compiled form is in the compile cache.
    cached: bool,
}

impl std::fmt::Debug for SandboxEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxEngine").field("runtimes", &self.runtimes.keys()).finish_non_exhaustive()
    }
}

impl SandboxEngine {
    /// Sets up wasmtime for `config` and loads the built-in Python runtime
    /// plus `config.extra_runtimes`, from the compile cache where possible.
    ///
    /// # Errors
    /// If wasmtime cannot be set up or a guest does not load.
    pub(crate) fn new(config: &SidecarConfig) -> Result<Self, EngineError> {
        let engine = Engine::new(&wasmtime_config(config)).map_err(EngineError::Setup)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |state: &mut RunState| &mut state.wasi)
            .map_err(EngineError::Setup)?;
        abi::add_to_linker(&mut linker).map_err(EngineError::Setup)?;

        let cache_dir = cache_dir(config);
        let mut runtimes = BTreeMap::new();
        let mut cached = true;
        for (name, wasm) in guests(config) {
            let guest_error = |source| EngineError::Guest { runtime: name.clone(), source };
            let loaded = module_cache::load_or_compile(&engine, &cache_dir, &name, wasm).map_err(guest_error)?;
            cached &= loaded.cached;
            let pre = linker.instantiate_pre(&loaded.module).map_err(guest_error)?;
            let runtime = Runtime {
                pre,
                tool_fields: ToolFields::declared_by(wasm),
                parks: declares(wasm, tether_guest::PARKS_SECTION),
                build: sha2::Sha256::digest(wasm).into(),
            };
            runtimes.insert(name, runtime);
        }
        spawn_epoch_ticker(&engine).map_err(EngineError::Ticker)?;
        Ok(SandboxEngine { engine, runtimes, cached })
    }

    /// True when every runtime is in the compile cache, so that building
    /// this engine again loads them in milliseconds instead of compiling.
    pub(crate) fn cached(&self) -> bool {
        self.cached
    }

    /// Instance-pool slots that were used and are free now: each keeps up to
    /// `pool_keep_resident_bytes` of memory resident, plus its table and
    /// fiber stack, until this engine is dropped.
    pub(crate) fn warm_pool_slots(&self) -> u32 {
        self.engine.pooling_allocator_metrics().map_or(0, |pool| pool.unused_warm_memories())
    }

    /// The linked runtime for a `Start.language`, if the sidecar has it.
    pub(crate) fn runtime(&self, language: &str) -> Option<&Runtime> {
        self.runtimes.get(language)
    }

    /// The names `Start.language` may take.
    pub(crate) fn runtime_names(&self) -> Vec<String> {
        self.runtimes.keys().cloned().collect()
    }
}

/// Compiles every runtime a sidecar with `config` loads (the Python runtime
/// and `config.extra_runtimes`) into its cache directory, unless a compiled
/// form that loads is already there, and returns the cached files' paths.
///
/// A sidecar started later with the same wasmtime, guests and cache directory
/// on a compatible CPU then loads them without compiling, even from a
/// read-only directory: this is how a container image ships ready to serve.
///
/// # Errors
/// [`EngineError::Setup`] if wasmtime cannot be set up for `config`,
/// [`EngineError::Guest`] if a guest does not compile, [`EngineError::Cache`]
/// if the cache directory cannot be written.
pub fn prepare_cache(config: &SidecarConfig) -> Result<Vec<PathBuf>, EngineError> {
    let engine = Engine::new(&wasmtime_config(config)).map_err(EngineError::Setup)?;
    let dir = cache_dir(config);
    guests(config)
        .map(|(runtime, wasm)| {
            module_cache::prepare(&engine, &dir, &runtime, wasm).map_err(|error| match error {
                module_cache::CacheError::Compile(source) => EngineError::Guest { runtime, source },
                module_cache::CacheError::Store(source) => EngineError::Cache { runtime, dir: dir.clone(), source },
            })
        })
        .collect()
}

/// The cache directory `config` names, else the default one.
fn cache_dir(config: &SidecarConfig) -> PathBuf {
    config.cache_dir.clone().unwrap_or_else(module_cache::default_cache_dir)
}

/// Every runtime a sidecar with `config` loads: its name and its module.
fn guests(config: &SidecarConfig) -> impl Iterator<Item = (String, &[u8])> {
    std::iter::once(("python".to_owned(), tether_guests::PYTHON))
        .chain(config.extra_runtimes.iter().map(|(name, wasm)| (name.clone(), wasm.as_slice())))
}

/// Bytes of each table kept mapped when a pool slot is reused.
const KEEP_RESIDENT_TABLE: usize = 64 << 10;

fn wasmtime_config(config: &SidecarConfig) -> Config {
    // Instances alive at once: one per executing run plus one per run waiting
    // on tool results (a run keeps its waiting place until it has a slot again).
    let instances = (config.slots + config.max_waiting_runs) as u32;
    let mut pool = PoolingAllocationConfig::default();
    pool.total_core_instances(instances)
        .total_memories(instances)
        .total_tables(instances)
        .total_stacks(instances)
        .max_memory_size(config.limits.memory_bytes as usize)
        // A slot's pages stay mapped between runs and only the pages a run
        // dirtied are reset (found with PAGEMAP_SCAN where the kernel has it):
        // a fresh instance no longer page-faults on every page it first touches.
        .linear_memory_keep_resident(config.pool_keep_resident_bytes)
        .table_keep_resident(KEEP_RESIDENT_TABLE)
        .pagemap_scan(Enabled::Auto);

    let mut wasm = Config::new();
    wasm.epoch_interruption(true)
        .max_wasm_stack(MAX_WASM_STACK)
        .async_stack_size(MAX_WASM_STACK + (1 << 20))
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    wasm
}

/// Advances the engine's epoch every [`EPOCH_TICK`] on a thread that holds
/// only a weak reference, so it ends when the engine is dropped.
fn spawn_epoch_ticker(engine: &Engine) -> std::io::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new().name("tether-epoch".into()).spawn(move || {
        loop {
            std::thread::sleep(EPOCH_TICK);
            match weak.upgrade() {
                Some(engine) => engine.increment_epoch(),
                None => return,
            }
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{ToolFields, declares};

    #[test]
    fn the_python_runtime_declares_it_reads_the_schemas_of_named_tools_and_the_example_guest_everything() {
        assert_eq!(ToolFields::declared_by(tether_guests::PYTHON), ToolFields::SchemasIfNamed);
        assert_eq!(ToolFields::declared_by(tether_guests::EXAMPLE_RUST), ToolFields::All);
        assert_eq!(ToolFields::declared_by(b"not wasm"), ToolFields::All, "an unreadable module reads everything");
    }

    #[test]
    fn the_python_runtime_can_park_and_the_example_guest_cannot() {
        assert!(declares(tether_guests::PYTHON, tether_guest::PARKS_SECTION));
        assert!(!declares(tether_guests::EXAMPLE_RUST, tether_guest::PARKS_SECTION));
    }
}
