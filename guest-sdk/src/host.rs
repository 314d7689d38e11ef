//! The `tether_v1` host imports, wrapped in safe functions.
//!
//! Every function here is single-threaded by construction (`wasm32-wasip1` has
//! no threads), and every host fault (the run cancelled, the turn gone) ends the
//! guest with a trap: a guest never sees a half-answered call.

use crate::wire::{CallAnswer, CallBatch, CallRequest, CallResult, Outcome, StartDoc};
use serde::Serialize;
use serde_json::Value;

#[link(wasm_import_module = "tether_v1")]
unsafe extern "C" {
    /// Stages the start document; returns its length.
    #[link_name = "start"]
    fn tether_start() -> u32;
    /// Sends a batch of calls (JSON at `ptr..ptr+len`); blocks until every call
    /// is answered; stages the results and returns their length.
    #[link_name = "call"]
    fn tether_call(ptr: *const u8, len: u32) -> u32;
    /// After a `{"park": …}` answer: hands the host the guest's state
    /// (`ptr..ptr+len`; `0, 0` for none). Returns only if the host declines,
    /// with the length of the staged results of the same batch.
    #[link_name = "park"]
    fn tether_park(ptr: *const u8, len: u32) -> u32;
    /// Copies the staged document to `ptr` (`len` must equal its length).
    #[link_name = "take_response"]
    fn tether_take_response(ptr: *mut u8, len: u32) -> u32;
    /// Reports the script's outcome (JSON at `ptr..ptr+len`).
    #[link_name = "finish"]
    fn tether_finish(ptr: *const u8, len: u32);
}

fn take_response(len: u32) -> Vec<u8> {
    let mut buffer = vec![0u8; len as usize];
    // SAFETY: `buffer` is valid for `len` writes; the host writes at most `len` bytes.
    let written = unsafe { tether_take_response(buffer.as_mut_ptr(), len) };
    buffer.truncate(written as usize);
    buffer
}

/// Reads the run's start document: source, input, tools.
///
/// # Panics
/// If the host sends a document this crate cannot read, which means the host
/// and guest disagree on the ABI: the guest cannot do anything useful then.
pub fn start() -> StartDoc {
    // SAFETY: no arguments; the host only stages a document.
    let len = unsafe { tether_start() };
    match serde_json::from_slice(&take_response(len)) {
        Ok(doc) => doc,
        Err(error) => panic!("the host sent a start document this guest cannot read: {error}"),
    }
}

/// Calls one tool and waits for its result.
pub fn call(name: &str, args: Value) -> CallResult {
    let mut results = call_batch(vec![CallRequest { name: name.to_owned(), args }]);
    results.pop().unwrap_or_else(|| CallResult::Err(missing_result()))
}

/// Calls several tools at once; the backend may run them concurrently.
/// Returns one result per request, in order.
pub fn call_batch(calls: Vec<CallRequest>) -> Vec<CallResult> {
    let count = calls.len();
    let request = document(&CallBatch { calls });
    // SAFETY: `request` is valid for `len` reads for the duration of the call.
    let len = unsafe { tether_call(request.as_ptr(), request.len() as u32) };
    // An unreadable answer fails these calls, not the whole run.
    crate::wire::read_results(&take_response(len), count)
}

/// Calls several tools at once, as [`call_batch`] does, in a guest that
/// parks (one that declares [`PARKS_SECTION`](crate::PARKS_SECTION)).
///
/// When the host asks the guest to park instead of waiting, `park` is called
/// with the largest state the host takes and gives the guest's state, or
/// `None` if it has none to give. A state the host accepts ends the instance
/// inside this function: the run is parked, and a later start resumes it
/// (`StartDoc::resume`). Otherwise (no state, an empty or too large one, or
/// the host declines) the host goes on waiting, and this returns one result
/// per request, in order, like [`call_batch`].
pub fn call_batch_parkable(calls: Vec<CallRequest>, park: impl FnOnce(u64) -> Option<Vec<u8>>) -> Vec<CallResult> {
    let count = calls.len();
    let request = document(&CallBatch { calls });
    // SAFETY: `request` is valid for `len` reads for the duration of the call.
    let len = unsafe { tether_call(request.as_ptr(), request.len() as u32) };
    let max_bytes = match crate::wire::read_answer(&take_response(len), count) {
        CallAnswer::Results(results) => return results,
        CallAnswer::Park { max_bytes } => max_bytes,
    };
    // Checked here too, so a state the host would refuse is not copied to it.
    let state = park(max_bytes).filter(|state| !state.is_empty() && state.len() as u64 <= max_bytes);
    let len = match &state {
        // SAFETY: `state` is valid for `len` reads for the duration of the call.
        Some(state) => unsafe { tether_park(state.as_ptr(), state.len() as u32) },
        // SAFETY: a null, empty state: the host reads nothing.
        None => unsafe { tether_park(std::ptr::null(), 0) },
    };
    crate::wire::read_results(&take_response(len), count)
}

/// `doc` as the JSON a host import takes: a [`CallBatch`] or an [`Outcome`].
#[allow(
    clippy::expect_used,
    reason = "serde_json fails only on a map key that is not a string or a `Serialize` impl that fails; \
              a call batch and an outcome hold strings, numbers and `Value`s (whose keys are strings)"
)]
fn document(doc: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(doc).expect("a `tether_v1` document always serializes")
}

fn missing_result() -> crate::Failure {
    crate::Failure::from(&tether_codes::Reason::MissingResult)
}

/// Reports how the script ended. Call it once, then return from `main`.
pub fn finish(outcome: &Outcome) {
    let bytes = document(outcome);
    // SAFETY: `bytes` is valid for `len` reads for the duration of the call.
    unsafe { tether_finish(bytes.as_ptr(), bytes.len() as u32) }
}
