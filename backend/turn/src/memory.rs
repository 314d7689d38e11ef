//! [`MemoryAuditStore`]: the [`AuditStore`] in memory, for tests and turns
//! that need no durable record.

use super::audit::{AuditRecord, LedgerEntry, LedgerState};
use super::call::CallStatus;
use super::error::StoreError;
use super::parked::ParkedRun;
use super::store::{AuditStore, Commit, StartVerdict, StoreWrite, TurnListing, start_verdict};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// An [`AuditStore`] in memory. Nothing survives the process. Every write is
/// applied when it is enqueued (its [`Commit`] is already decided), so the
/// queue is never full.
#[derive(Debug, Default)]
pub struct MemoryAuditStore {
    /// Opened turns: when each was opened.
    turns: Mutex<HashMap<String, i64>>,
    audit: Mutex<Vec<AuditRecord>>,
    ledger: Mutex<Vec<LedgerEntry>>,
    /// Parked runs by `(turn_id, run_id)`.
    parked: Mutex<BTreeMap<(String, String), Parked>>,
}

/// A parked run as the memory store keeps it.
#[derive(Debug)]
struct Parked {
    run: ParkedRun,
    /// Who holds the claim, and since when (Unix milliseconds).
    claim: Option<(String, i64)>,
}

impl Parked {
    /// Whether `claimant` holds the claim; otherwise why not.
    fn held_by(&self, claimant: &str) -> Result<(), StoreError> {
        match &self.claim {
            Some((holder, _)) if holder == claimant => Ok(()),
            Some((holder, since_ms)) => Err(StoreError::ParkedClaimed {
                turn_id: self.run.turn_id.clone(),
                run_id: self.run.run_id.clone(),
                claimant: holder.clone(),
                since_ms: *since_ms,
            }),
            None => Err(unclaimed(&self.run.turn_id, &self.run.run_id, claimant)),
        }
    }
}

/// `claimant` acts on a parked run nobody holds (it was parked again since
/// `claimant` claimed it, which released the claim).
fn unclaimed(turn_id: &str, run_id: &str, claimant: &str) -> StoreError {
    StoreError::Other(format!(
        "`{claimant}` does not hold run `{run_id}` of turn `{turn_id}`: the run was parked again since, and nobody \
         holds it now; claim it again to resume it"
    ))
}

impl MemoryAuditStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryAuditStore::default()
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Parked>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn apply(&self, write: StoreWrite) -> Result<(), StoreError> {
        match write {
            StoreWrite::OpenTurn { turn_id, opened_at_ms } => {
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
                if turns.contains_key(&turn_id) || has_rows() {
                    return Err(StoreError::TurnTaken { turn_id });
                }
                turns.insert(turn_id, opened_at_ms);
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
                            row.result = None;
                        }
                    }
                }
            }
            StoreWrite::Settled { turn_id, call_id, outcome, settled_at_ms, result } => {
                let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(e) = ledger.iter_mut().find(|e| e.call.turn_id == turn_id && e.call.call_id == call_id) {
                    e.state = LedgerState::Settled;
                    e.settled_at_ms = Some(settled_at_ms);
                    e.outcome = Some(outcome);
                    e.result = result;
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

    async fn turns(&self, turn_id: Option<&str>, limit: usize) -> Result<Vec<TurnListing>, StoreError> {
        let turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        let audit = self.audit.lock().unwrap_or_else(|p| p.into_inner());
        let mut listed: Vec<TurnListing> = turns
            .iter()
            .filter(|(id, _)| turn_id.is_none_or(|wanted| wanted == id.as_str()))
            .map(|(id, opened_at_ms)| {
                let rows = || audit.iter().filter(|r| &r.call.turn_id == id);
                TurnListing {
                    turn_id: id.clone(),
                    opened_at_ms: *opened_at_ms,
                    calls: rows().count() as u64,
                    not_ok: rows().filter(|r| r.status != CallStatus::Ok).count() as u64,
                }
            })
            .collect();
        listed.sort_by(|a, b| b.opened_at_ms.cmp(&a.opened_at_ms).then_with(|| a.turn_id.cmp(&b.turn_id)));
        listed.truncate(limit);
        Ok(listed)
    }

    async fn park_run(&self, run: &ParkedRun) -> Result<(), StoreError> {
        let key = (run.turn_id.clone(), run.run_id.clone());
        self.parked().insert(key, Parked { run: run.clone(), claim: None });
        Ok(())
    }

    async fn parked_runs(&self, turn_id: Option<&str>) -> Result<Vec<ParkedRun>, StoreError> {
        let parked = self.parked();
        // The map is in (turn, run) order: a stable sort by age keeps it among equals.
        let mut runs: Vec<ParkedRun> = parked
            .values()
            .filter(|p| turn_id.is_none_or(|turn_id| p.run.turn_id == turn_id))
            .map(|p| p.run.clone())
            .collect();
        runs.sort_by_key(|run| run.parked_at_ms);
        Ok(runs)
    }

    async fn claim_parked(
        &self,
        turn_id: &str,
        run_id: &str,
        claimant: &str,
        take_over: bool,
        now_ms: i64,
    ) -> Result<ParkedRun, StoreError> {
        let mut parked = self.parked();
        let Some(entry) = parked.get_mut(&(turn_id.to_owned(), run_id.to_owned())) else {
            return Err(StoreError::NotParked { turn_id: turn_id.to_owned(), run_id: run_id.to_owned() });
        };
        if let Some((holder, since_ms)) = &entry.claim
            && !take_over
        {
            return Err(StoreError::ParkedClaimed {
                turn_id: turn_id.to_owned(),
                run_id: run_id.to_owned(),
                claimant: holder.clone(),
                since_ms: *since_ms,
            });
        }
        entry.claim = Some((claimant.to_owned(), now_ms));
        Ok(entry.run.clone())
    }

    async fn update_parked(&self, run: &ParkedRun, claimant: &str) -> Result<(), StoreError> {
        let mut parked = self.parked();
        let Some(entry) = parked.get_mut(&(run.turn_id.clone(), run.run_id.clone())) else {
            return Err(StoreError::NotParked { turn_id: run.turn_id.clone(), run_id: run.run_id.clone() });
        };
        entry.held_by(claimant)?;
        entry.run = run.clone();
        Ok(())
    }

    async fn unpark(&self, turn_id: &str, run_id: &str, claimant: &str) -> Result<(), StoreError> {
        let mut parked = self.parked();
        let key = (turn_id.to_owned(), run_id.to_owned());
        let Some(entry) = parked.get(&key) else {
            return Err(StoreError::NotParked { turn_id: turn_id.to_owned(), run_id: run_id.to_owned() });
        };
        entry.held_by(claimant)?;
        parked.remove(&key);
        Ok(())
    }
}
