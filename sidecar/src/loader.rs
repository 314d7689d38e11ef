//! The sandbox engine, built at once or on a background thread, and handed
//! out once built.
//!
//! Compiling the Python guest takes seconds to tens of seconds on a cold
//! cache; built in the background, the listeners (and health) are up at once
//! and readiness turns SERVING when the engine is ready.

use crate::config::SidecarConfig;
use crate::engine::{EngineError, SandboxEngine};
use std::sync::Arc;
use tokio::sync::watch;

/// Where the engine is.
#[derive(Debug, Clone)]
pub(crate) enum EngineState {
    /// Still compiling or loading its guests.
    Loading,
    /// Built.
    Ready(Arc<SandboxEngine>),
    /// Could not be built; the sidecar cannot run scripts.
    Failed(Arc<EngineError>),
}

/// The engine, once built. Cheap to read.
#[derive(Debug)]
pub(crate) struct EngineCell {
    state: watch::Sender<EngineState>,
}

impl EngineCell {
    /// A cell holding an engine built already.
    pub(crate) fn ready(engine: SandboxEngine) -> Self {
        EngineCell { state: watch::Sender::new(EngineState::Ready(Arc::new(engine))) }
    }

    /// A cell whose engine is not built yet: see [`EngineCell::load_in_background`].
    pub(crate) fn loading() -> Self {
        EngineCell { state: watch::Sender::new(EngineState::Loading) }
    }

    /// Builds the engine from `config` on a new thread; `on_ready` runs on
    /// that thread once it is built.
    ///
    /// # Errors
    /// If the thread cannot be started.
    pub(crate) fn load_in_background(
        &self,
        config: SidecarConfig,
        on_ready: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<()> {
        let loaded = self.state.clone();
        // The thread ends when the engine is built: it owns nothing else.
        std::thread::Builder::new().name("tether-load-guests".into()).spawn(move || {
            let started = std::time::Instant::now();
            match SandboxEngine::new(&config) {
                Ok(engine) => {
                    tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "guests loaded");
                    loaded.send_replace(EngineState::Ready(Arc::new(engine)));
                    on_ready();
                }
                Err(error) => {
                    tracing::error!(%error, "the sidecar cannot load its guests");
                    loaded.send_replace(EngineState::Failed(Arc::new(error)));
                }
            }
        })?;
        Ok(())
    }

    /// Puts `engine` in place of a ready engine and returns the one it
    /// replaces; runs admitted before keep the one they took until they end.
    /// Does nothing (and returns `None`) unless an engine is ready.
    pub(crate) fn replace(&self, engine: SandboxEngine) -> Option<Arc<SandboxEngine>> {
        let mut old = None;
        self.state.send_if_modified(|state| match state {
            EngineState::Ready(current) => {
                old = Some(std::mem::replace(current, Arc::new(engine)));
                true
            }
            EngineState::Loading | EngineState::Failed(_) => false,
        });
        old
    }

    /// The engine's state now.
    pub(crate) fn state(&self) -> EngineState {
        self.state.borrow().clone()
    }

    /// Waits until the engine is built or has failed.
    ///
    /// # Errors
    /// Why it could not be built.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only waits.
    pub(crate) async fn loaded(&self) -> Result<Arc<SandboxEngine>, Arc<EngineError>> {
        let mut state = self.state.subscribe();
        loop {
            match &*state.borrow_and_update() {
                EngineState::Loading => {}
                EngineState::Ready(engine) => return Ok(engine.clone()),
                EngineState::Failed(error) => return Err(error.clone()),
            }
            // The sender lives in `self`, so the channel cannot close while
            // we wait; if it ever did, nothing would be loaded any more.
            if state.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}
