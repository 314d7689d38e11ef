//! Step 9's records: one audit row per call, and the effect ledger
//! (`started` durable before a tool with effects runs, `settled` after).
//!
//! [`AuditStore`] is the seam a host plugs its own store into;
//! [`SqliteAuditStore`](super::SqliteAuditStore) is the default and
//! [`MemoryAuditStore`] keeps rows in memory (tests, throwaway turns).

use super::approval::ApprovalVerdict;
use super::call::CallStatus;
use super::step::Step;
use tether_codes::Code;
use super::error::StoreError;
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// Default cap on the arguments stored in an audit or ledger row: 4 KiB.
pub const DEFAULT_AUDIT_ARGS_BYTES: usize = 4096;

/// Rewrites a call's arguments before they reach any host-side record (audit
/// row, ledger row, events, nested-call summary): `(tool, args) -> args`.
/// The tool itself always receives the original arguments.
pub type Redactor = Arc<dyn Fn(&str, &Value) -> Value + Send + Sync>;

/// One row per call, written when the call ends, whatever the outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    /// The turn.
    pub turn_id: String,
    /// The call's id.
    pub call_id: String,
    /// The immediate parent's call id (a script's calls: the `run_script` call).
    pub parent_call_id: Option<String>,
    /// The script run, for a script's call.
    pub script_run_id: Option<String>,
    /// The tool named.
    pub tool: String,
    /// `"model"` or `"script"`.
    pub origin: String,
    /// The arguments as JSON text, redacted, cut at the turn's cap.
    pub args: String,
    /// True when [`AuditRecord::args`] was cut.
    pub args_truncated: bool,
    /// The step that refused or ended the call; `None` when the tool returned.
    pub step: Option<Step>,
    /// The failure code: a [`Code`], or the tool's own code for status `error`.
    pub code: Option<String>,
    /// The approval verdict, when the call reached the approval step.
    pub approval: Option<ApprovalVerdict>,
    /// Who decided the approval.
    pub decided_by: Option<String>,
    /// How the call ended.
    pub status: CallStatus,
    /// When the call arrived, Unix milliseconds.
    pub started_at_ms: i64,
    /// When it ended, Unix milliseconds.
    pub finished_at_ms: i64,
    /// How long it took, microseconds (monotonic clock).
    pub duration_us: i64,
}

impl AuditRecord {
    /// The display name of [`AuditRecord::code`], when it is a [`Code`].
    pub fn display_name(&self) -> Option<&'static str> {
        self.code.as_deref().and_then(Code::parse).map(Code::display_name)
    }
}

/// Whether a ledger row's call is known to have finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LedgerState {
    /// Recorded before the tool ran; the effect may or may not have happened.
    Started,
    /// The tool returned; [`LedgerEntry::outcome`] says how.
    Settled,
}

/// One effect-ledger row: a call of a tool with effects.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerEntry {
    /// The turn.
    pub turn_id: String,
    /// The call's id; `(turn_id, call_id)` is unique.
    pub call_id: String,
    /// The immediate parent's call id.
    pub parent_call_id: Option<String>,
    /// The script run, for a script's call.
    pub script_run_id: Option<String>,
    /// The tool.
    pub tool: String,
    /// `"model"` or `"script"`.
    pub origin: String,
    /// The arguments as JSON text, redacted and capped.
    pub args: String,
    /// True when the call needed approval (and got it).
    pub approval_required: bool,
    /// Started or settled.
    pub state: LedgerState,
    /// When `started` was recorded, Unix milliseconds.
    pub started_at_ms: i64,
    /// When `settled` was recorded.
    pub settled_at_ms: Option<i64>,
    /// The status the tool returned with (`ok` or `error`), once settled.
    pub outcome: Option<CallStatus>,
}

/// Where audit rows and ledger rows go. Methods may block briefly; the turn
/// calls them on tokio's blocking pool, except when a call is dropped
/// mid-way (its audit row is then written from `Drop`, on whatever thread
/// drops it).
pub trait AuditStore: Send + Sync + 'static {
    /// Appends an audit row.
    ///
    /// # Errors
    /// If the row could not be stored.
    fn record(&self, record: &AuditRecord) -> Result<(), StoreError>;

    /// Records `started`. Must be durable when it returns `Ok`: the tool runs
    /// only after.
    ///
    /// # Errors
    /// If the row is not durable, or a row for this call already exists
    /// ([`StoreError::DuplicateLedgerRow`]); the turn then refuses to run the tool.
    fn ledger_started(&self, entry: &LedgerEntry) -> Result<(), StoreError>;

    /// Marks the call settled with `outcome`.
    ///
    /// # Errors
    /// If the row could not be updated.
    fn ledger_settled(
        &self,
        turn_id: &str,
        call_id: &str,
        outcome: CallStatus,
        settled_at_ms: i64,
    ) -> Result<(), StoreError>;

    /// The turn's ledger rows, in the order they started.
    ///
    /// # Errors
    /// If the rows could not be read.
    fn ledger(&self, turn_id: &str) -> Result<Vec<LedgerEntry>, StoreError>;

    /// The turn's audit rows, in the order they were written.
    ///
    /// # Errors
    /// If the rows could not be read.
    fn audit_log(&self, turn_id: &str) -> Result<Vec<AuditRecord>, StoreError>;
}

/// An [`AuditStore`] in memory. Nothing survives the process: for tests and
/// turns that need no durable record.
#[derive(Debug, Default)]
pub struct MemoryAuditStore {
    audit: Mutex<Vec<AuditRecord>>,
    ledger: Mutex<Vec<LedgerEntry>>,
}

impl MemoryAuditStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryAuditStore::default()
    }
}

impl AuditStore for MemoryAuditStore {
    fn record(&self, record: &AuditRecord) -> Result<(), StoreError> {
        self.audit.lock().unwrap_or_else(|p| p.into_inner()).push(record.clone());
        Ok(())
    }

    fn ledger_started(&self, entry: &LedgerEntry) -> Result<(), StoreError> {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        if ledger.iter().any(|e| e.turn_id == entry.turn_id && e.call_id == entry.call_id) {
            return Err(StoreError::DuplicateLedgerRow(entry.call_id.clone()));
        }
        ledger.push(entry.clone());
        Ok(())
    }

    fn ledger_settled(
        &self,
        turn_id: &str,
        call_id: &str,
        outcome: CallStatus,
        settled_at_ms: i64,
    ) -> Result<(), StoreError> {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = ledger.iter_mut().find(|e| e.turn_id == turn_id && e.call_id == call_id) {
            e.state = LedgerState::Settled;
            e.settled_at_ms = Some(settled_at_ms);
            e.outcome = Some(outcome);
        }
        Ok(())
    }

    fn ledger(&self, turn_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        Ok(ledger.iter().filter(|e| e.turn_id == turn_id).cloned().collect())
    }

    fn audit_log(&self, turn_id: &str) -> Result<Vec<AuditRecord>, StoreError> {
        let audit = self.audit.lock().unwrap_or_else(|p| p.into_inner());
        Ok(audit.iter().filter(|r| r.turn_id == turn_id).cloned().collect())
    }
}

/// `text` cut to at most `max` bytes at a character boundary; `true` if cut.
pub(crate) fn cut(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_owned(), true)
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_ms(at: std::time::SystemTime) -> i64 {
    at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutting_respects_character_boundaries() {
        assert_eq!(cut("abc", 5), ("abc".into(), false));
        assert_eq!(cut("abcdef", 3), ("abc".into(), true));
        // "é" is two bytes: cutting inside it backs off to the boundary.
        assert_eq!(cut("aé", 2), ("a".into(), true));
    }
}
