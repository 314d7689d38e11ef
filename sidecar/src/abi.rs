//! The host side of the `tether_v1` ABI (documented in `guest-sdk/README.md`).
//!
//! Five imports: `start` and `call` stage a JSON document and return its
//! length, `take_response` copies the staged document into the guest,
//! `finish` records the script's outcome, and `park` takes the state of a
//! guest the host asked to park (`call` answered `{"park": …}`) and ends it. A guest that breaks the ABI (a bad
//! pointer, an unreadable document, `take_response` with nothing staged) is
//! ended with a trap that says what it did wrong.
//!
//! The imports reach a run's state only through [`AbiView`], so this module
//! knows nothing of the rest of the store.

use crate::calls::{BatchAnswer, CallPort, ParkWhen};
use crate::config::MAX_SENT_MESSAGE_BYTES;
use crate::park::ParkedGuest;
use std::time::Instant;
use tether_guest::wire::{CallBatch, CallResults, ParkAsk, ParkDoc};
use tether_guest::{IMPORT_MODULE, Outcome};
use wasmtime::{Caller, Linker, Memory};

/// Room in a `Parked` message for everything but the guest's state, the
/// output and the answers it carries (ids, names, counters, the seal).
const PARKED_OVERHEAD_BYTES: u64 = 64 << 10;

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
    /// When this run parks; `None` for one that may not (its backend or its
    /// guest cannot).
    park: Option<ParkPlan>,
    /// When `call` answered `{"park": …}`: the guest owes a `park`.
    park_asked: Option<Instant>,
    /// What the guest parked with, once it has.
    parked: Option<ParkedGuest>,
}

/// When a run parks, and how large a state it may park with.
#[derive(Debug, Clone)]
pub(crate) struct ParkPlan {
    /// When the run parks.
    pub(crate) when: ParkWhen,
    /// The most bytes of guest state.
    pub(crate) max_state_bytes: u64,
    /// The most bytes the resuming `Start` may add to this run's own: what
    /// the sidecar accepts in one message, less the `Start` it got.
    pub(crate) max_resume_bytes: u64,
}

/// The trap that ends a guest that parked: not a fault, the run's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the run parked")]
pub(crate) struct Parked;

impl HostLink {
    /// A link that hands the guest `start_doc` (a serialized `StartDoc`),
    /// sends its calls through `calls`, and parks it as `park` says.
    pub(crate) fn new(start_doc: Vec<u8>, calls: CallPort, park: Option<ParkPlan>) -> Self {
        HostLink { start_doc, staged: None, outcome: None, calls, park, park_asked: None, parked: None }
    }

    /// The outcome the guest reported, if it did.
    pub(crate) fn take_outcome(&mut self) -> Option<Outcome> {
        self.outcome.take()
    }

    /// What the guest parked with, if it did.
    pub(crate) fn take_parked(&mut self) -> Option<ParkedGuest> {
        self.parked.take()
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
            let host = caller.data_mut().abi();
            if host.park_asked.is_some() {
                wasmtime::bail!("guest fault: `tether_v1.call` called while a `park` is owed");
            }
            let park = host.park.clone();
            let max_bytes = park.as_ref().map_or(0, |plan| plan.max_state_bytes);
            let document = answer_call(&mut host.calls, &bytes, park).await?;
            let host = caller.data_mut().abi();
            host.park_asked = document.is_none().then(Instant::now);
            let document = match document {
                Some(results) => results,
                None => serde_json::to_vec(&ParkDoc { park: ParkAsk { max_bytes } })?,
            };
            host.stage(document)
        })
    })?;

    linker.func_wrap_async(IMPORT_MODULE, "park", |mut caller: Caller<'_, T>, (ptr, len): (u32, u32)| {
        Box::new(async move {
            let host = caller.data_mut().abi();
            let Some(asked) = host.park_asked.take() else {
                wasmtime::bail!("guest fault: `tether_v1.park` called with no park asked for");
            };
            let max = host.park.as_ref().map_or(0, |plan| plan.max_state_bytes);
            let max_resume = host.park.as_ref().map_or(0, |plan| plan.max_resume_bytes);
            // An empty state, one over the size, or one whose `Parked`, or
            // the `Start` that would resume it, would not fit one message is
            // declined: the run waits on its batch, holding its instance.
            let state = u64::from(len);
            let fits = host.calls.parked_bytes(state) + PARKED_OVERHEAD_BYTES <= MAX_SENT_MESSAGE_BYTES
                && host.calls.resume_bytes(state) + PARKED_OVERHEAD_BYTES <= max_resume;
            if len > 0 && u64::from(len) <= max && fits {
                let guest_state = read_guest(&mut caller, ptr, len)?;
                let host = caller.data_mut().abi();
                let port = host.calls.park_snapshot();
                host.parked = Some(ParkedGuest { guest_state, port, asked });
                return Err(wasmtime::Error::new(Parked));
            }
            if len > 0 {
                tracing::info!(
                    state_bytes = len,
                    max_state_bytes = max,
                    "the run's state is too large to park; it waits on"
                );
            }
            let host = caller.data_mut().abi();
            let results = match host.calls.wait_on(None).await.map_err(wasmtime::Error::new)? {
                BatchAnswer::Results(results) => results,
                BatchAnswer::Park => Vec::new(),
            };
            let document = serde_json::to_vec(&CallResults { results })?;
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
        if caller.data_mut().abi().park_asked.is_some() {
            wasmtime::bail!("guest fault: `tether_v1.finish` called while a `park` is owed");
        }
        let bytes = read_guest(&mut caller, ptr, len)?;
        let outcome: Outcome = serde_json::from_slice(&bytes)
            .map_err(|e| wasmtime::format_err!("guest fault: `tether_v1.finish` got an unreadable outcome: {e}"))?;
        caller.data_mut().abi().outcome = Some(outcome);
        Ok(())
    })?;
    Ok(())
}

/// What `tether_v1.call` does with the request document a guest wrote: reads
/// the batch, makes its calls, and returns the response document to stage —
/// or `None` when the run should park (only if `park` allows it).
///
/// # Errors
/// A guest fault for a batch that is not a readable `CallBatch`;
/// [`BackendGone`](crate::stream::BackendGone), inside the error, when the
/// backend stopped reading.
pub(crate) async fn answer_call(
    calls: &mut CallPort,
    request: &[u8],
    park: Option<ParkPlan>,
) -> wasmtime::Result<Option<Vec<u8>>> {
    let batch: CallBatch = serde_json::from_slice(request)
        .map_err(|e| wasmtime::format_err!("guest fault: `tether_v1.call` got an unreadable batch: {e}"))?;
    match calls.call_batch(batch.calls, park.map(|plan| plan.when)).await.map_err(wasmtime::Error::new)? {
        BatchAnswer::Results(results) => Ok(Some(serde_json::to_vec(&CallResults { results })?)),
        BatchAnswer::Park => Ok(None),
    }
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
