//! The host side of the `tether_v1` ABI (documented in `guest-sdk/README.md`).
//!
//! Four imports: `start` and `call` stage a JSON document and return its
//! length, `take_response` copies the staged document into the guest, and
//! `finish` records the script's outcome. A guest that breaks the ABI (a bad
//! pointer, an unreadable document, `take_response` with nothing staged) is
//! ended with a trap that says what it did wrong.
//!
//! The imports reach a run's state only through [`AbiView`], so this module
//! knows nothing of the rest of the store.

use crate::calls::CallPort;
use tether_guest::wire::{CallBatch, CallResults};
use tether_guest::{IMPORT_MODULE, Outcome};
use wasmtime::{Caller, Linker, Memory};

/// How the `tether_v1` imports reach their part of a store's state.
pub(crate) trait AbiView: Send + 'static {
    /// The run's guest-facing state.
    fn abi(&mut self) -> &mut HostLink;
}

/// The guest-facing state of one run.
#[derive(Debug)]
pub(crate) struct HostLink {
    start_doc: Vec<u8>,
    staged: Option<Vec<u8>>,
    outcome: Option<Outcome>,
    calls: CallPort,
}

impl HostLink {
    /// A link that hands the guest `start_doc` (a serialized `StartDoc`) and
    /// sends its calls through `calls`.
    pub(crate) fn new(start_doc: Vec<u8>, calls: CallPort) -> Self {
        HostLink { start_doc, staged: None, outcome: None, calls }
    }

    /// The outcome the guest reported, if it did.
    pub(crate) fn take_outcome(&mut self) -> Option<Outcome> {
        self.outcome.take()
    }

    fn stage(&mut self, document: Vec<u8>) -> wasmtime::Result<u32> {
        let len = u32::try_from(document.len())
            .map_err(|_| wasmtime::format_err!("a `{}`-byte document does not fit a wasm32 guest", document.len()))?;
        self.staged = Some(document);
        Ok(len)
    }
}

/// Adds the `tether_v1` imports to `linker`.
pub(crate) fn add_to_linker<T: AbiView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.func_wrap(IMPORT_MODULE, "start", |mut caller: Caller<'_, T>| -> wasmtime::Result<u32> {
        let host = caller.data_mut().abi();
        // Handed over, not copied: the host keeps no bytes of it once the
        // guest has taken it (a guest that asks twice gets an empty document).
        let document = std::mem::take(&mut host.start_doc);
        host.stage(document)
    })?;

    linker.func_wrap_async(IMPORT_MODULE, "call", |mut caller: Caller<'_, T>, (ptr, len): (u32, u32)| {
        Box::new(async move {
            let bytes = read_guest(&mut caller, ptr, len)?;
            let document = answer_call(&mut caller.data_mut().abi().calls, &bytes).await?;
            caller.data_mut().abi().stage(document)
        })
    })?;

    linker.func_wrap(
        IMPORT_MODULE,
        "take_response",
        |mut caller: Caller<'_, T>, ptr: u32, len: u32| -> wasmtime::Result<u32> {
            let document = caller.data_mut().abi().staged.take().ok_or_else(|| {
                wasmtime::format_err!("guest fault: `tether_v1.take_response` called with no response staged")
            })?;
            if document.len() != len as usize {
                wasmtime::bail!(
                    "guest fault: `tether_v1.take_response` asked for `{len}` bytes but `{}` are staged",
                    document.len()
                );
            }
            let memory = guest_memory(&mut caller)?;
            memory
                .write(&mut caller, ptr as usize, &document)
                .map_err(|_| wasmtime::format_err!("guest fault: `tether_v1.take_response` buffer is out of bounds"))?;
            Ok(len)
        },
    )?;

    linker.func_wrap(IMPORT_MODULE, "finish", |mut caller: Caller<'_, T>, ptr: u32, len: u32| {
        let bytes = read_guest(&mut caller, ptr, len)?;
        let outcome: Outcome = serde_json::from_slice(&bytes)
            .map_err(|e| wasmtime::format_err!("guest fault: `tether_v1.finish` got an unreadable outcome: {e}"))?;
        caller.data_mut().abi().outcome = Some(outcome);
        Ok(())
    })?;
    Ok(())
}

/// What `tether_v1.call` does with the request document a guest wrote: reads
/// the batch, makes its calls, and returns the response document to stage.
///
/// # Errors
/// A guest fault for a batch that is not a readable `CallBatch`;
/// [`BackendGone`](crate::stream::BackendGone), inside the error, when the
/// backend stopped reading.
pub(crate) async fn answer_call(calls: &mut CallPort, request: &[u8]) -> wasmtime::Result<Vec<u8>> {
    let batch: CallBatch = serde_json::from_slice(request)
        .map_err(|e| wasmtime::format_err!("guest fault: `tether_v1.call` got an unreadable batch: {e}"))?;
    let results = calls.call_batch(batch.calls).await.map_err(wasmtime::Error::new)?;
    Ok(serde_json::to_vec(&CallResults { results })?)
}

fn guest_memory<T>(caller: &mut Caller<'_, T>) -> wasmtime::Result<Memory> {
    caller
        .get_export("memory")
        .and_then(|export| export.into_memory())
        .ok_or_else(|| wasmtime::format_err!("guest fault: the guest exports no `memory`"))
}

fn read_guest<T>(caller: &mut Caller<'_, T>, ptr: u32, len: u32) -> wasmtime::Result<Vec<u8>> {
    let memory = guest_memory(caller)?;
    // Bounds first: `len` comes from the guest and must not size a host allocation.
    let data = memory.data(&*caller);
    let range = ptr as usize..(ptr as usize).saturating_add(len as usize);
    data.get(range)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| wasmtime::format_err!("guest fault: a `tether_v1` buffer is out of bounds"))
}
