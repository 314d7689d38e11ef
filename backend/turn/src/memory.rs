//! [`MemoryAuditStore`]: the [`AuditStore`] in memory, for tests and turns
//! that need no durable record.

use super::audit::{AuditRecord, LedgerEntry, LedgerState};
use super::error::StoreError;
use super::store::{AuditStore, Commit, StartVerdict, StoreWrite, start_verdict};
use std::collections::HashSet;
use std::sync::Mutex;

/// An [`AuditStore`] in memory. Nothing survives the process. Every write is
/// applied when it is enqueued (its [`Commit`] is already decided), so the
/// queue is never full.
#[derive(Debug, Default)]
pub struct MemoryAuditStore {
    turns: Mutex<HashSet<String>>,
    audit: Mutex<Vec<AuditRecord>>,
    ledger: Mutex<Vec<LedgerEntry>>,
}

impl MemoryAuditStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryAuditStore::default()
    }

    fn apply(&self, write: StoreWrite) -> Result<(), StoreError> {
        match write {
            StoreWrite::OpenTurn { turn_id, .. } => {
                let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
                // Rows of a turn built without a claim hold the id too.
                let has_rows = || {
                    self.audit.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|r| r.call.turn_id == turn_id)
                        || self
                            .ledger
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .iter()
                            .any(|e| e.call.turn_id == turn_id)
                };
                if turns.contains(&turn_id) || has_rows() {
                    return Err(StoreError::TurnTaken { turn_id });
                }
                turns.insert(turn_id);
            }
            StoreWrite::Audit(record) => {
                self.audit.lock().unwrap_or_else(|p| p.into_inner()).push(record);
            }
            StoreWrite::Started { entry, replay } => {
                let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
                let at = ledger
                    .iter()
                    .position(|e| e.call.turn_id == entry.call.turn_id && e.call.call_id == entry.call.call_id);
                match start_verdict(&entry.call.call_id, at.map(|i| ledger[i].state), replay)? {
                    StartVerdict::Insert => ledger.push(entry),
                    StartVerdict::Restart => {
                        if let Some(row) = at.and_then(|i| ledger.get_mut(i)) {
                            row.state = LedgerState::Started;
                            row.started_at_ms = entry.started_at_ms;
                            row.settled_at_ms = None;
                            row.outcome = None;
                        }
                    }
                }
            }
            StoreWrite::Settled { turn_id, call_id, outcome, settled_at_ms } => {
                let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(e) = ledger.iter_mut().find(|e| e.call.turn_id == turn_id && e.call.call_id == call_id) {
                    e.state = LedgerState::Settled;
                    e.settled_at_ms = Some(settled_at_ms);
                    e.outcome = Some(outcome);
                }
            }
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl AuditStore for MemoryAuditStore {
    async fn enqueue(&self, write: StoreWrite) -> Result<Commit, StoreError> {
        self.try_enqueue(write)
    }

    fn try_enqueue(&self, write: StoreWrite) -> Result<Commit, StoreError> {
        Ok(Commit::done(self.apply(write)))
    }

    async fn audit_log(&self, turn_id: &str) -> Result<Vec<AuditRecord>, StoreError> {
        let audit = self.audit.lock().unwrap_or_else(|p| p.into_inner());
        Ok(audit.iter().filter(|r| r.call.turn_id == turn_id).cloned().collect())
    }

    async fn ledger(&self, turn_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        Ok(ledger.iter().filter(|e| e.call.turn_id == turn_id).cloned().collect())
    }
}
