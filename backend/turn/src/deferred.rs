//! The calls of a turn that wait on a deferring approver
//! ([`Approver::defers`](super::Approver::defers)), and those handed to the
//! audit store with a parked run or model loop: their rows are then another
//! process's to write (`handoff.rs`).

use super::parked::PendingCall;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// The turn's calls waiting on a deferring approver, and those it handed to
/// its store (whose rows another process writes).
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    waiting: Mutex<HashMap<String, PendingCall>>,
    handed: Mutex<HashSet<String>>,
}

/// A call's place in [`Deferred`] while it waits: left when it stops waiting.
pub(crate) struct Waiting<'a> {
    deferred: &'a Deferred,
    call_id: String,
}

impl Deferred {
    /// `call` waits for a person who answers from outside this process.
    pub(crate) fn wait(&self, call: PendingCall) -> Waiting<'_> {
        let call_id = call.request.call_id.clone();
        lock(&self.waiting).insert(call_id.clone(), call);
        Waiting { deferred: self, call_id }
    }

    /// Takes the calls `awaiting` when every one of them waits here
    /// ([`Turn::hand_off`](super::Turn::hand_off)); `None`, and nothing
    /// taken, when any does not.
    pub(crate) fn hand_off(&self, awaiting: &[String]) -> Option<Vec<PendingCall>> {
        let mut waiting = lock(&self.waiting);
        if awaiting.is_empty() || !awaiting.iter().all(|id| waiting.contains_key(id)) {
            return None;
        }
        let mut handed = lock(&self.handed);
        let calls = awaiting.iter().filter_map(|id| waiting.remove(id)).collect();
        handed.extend(awaiting.iter().cloned());
        Some(calls)
    }

    /// True when the call was handed to the store: its row is not this process's to write.
    pub(crate) fn was_handed(&self, call_id: &str) -> bool {
        lock(&self.handed).contains(call_id)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(&self.deferred.waiting).remove(&self.call_id);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
