//! One group's transaction in SQLite: every write applied in order, one
//! commit (one fsync under `synchronous=FULL`).

use super::super::error::StoreError;
use super::super::store::{StartVerdict, StoreWrite, start_verdict};
use super::schema;
use rusqlite::{Connection, TransactionBehavior};

/// Applies `writes` in one transaction and commits it: each write's own
/// outcome (a refused replay, a failed statement) if the commit succeeds.
/// SQLite undoes a failed statement alone, so the rest of the group goes on.
///
/// # Errors
/// If the transaction could not begin or commit, or a failed statement rolled
/// the whole transaction back: then no write of the group is durable.
pub(super) fn commit(
    connection: &mut Connection,
    writes: &[&StoreWrite],
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut results = Vec::with_capacity(writes.len());
    for write in writes {
        let result = apply(&transaction, write);
        if let Err(error) = &result
            && transaction.is_autocommit()
        {
            return Err(StoreError::Commit(format!("a failed write rolled the group back: {error}")));
        }
        results.push(result);
    }
    transaction.commit()?;
    Ok(results)
}

fn apply(c: &Connection, write: &StoreWrite) -> Result<(), StoreError> {
    match write {
        StoreWrite::OpenTurn { turn_id, opened_at_ms } => {
            if !schema::claim_turn(c, turn_id, *opened_at_ms)? {
                return Err(StoreError::TurnTaken { turn_id: turn_id.clone() });
            }
        }
        StoreWrite::Audit(record) => schema::insert_audit(c, record)?,
        StoreWrite::Started { entry, replay } => {
            let existing = schema::ledger_state(c, &entry.call.turn_id, &entry.call.call_id)?;
            match start_verdict(&entry.call.call_id, existing, *replay)? {
                StartVerdict::Insert => schema::insert_started(c, entry)?,
                StartVerdict::Restart => schema::restart(c, entry)?,
            }
        }
        StoreWrite::Settled { turn_id, call_id, outcome, settled_at_ms } => {
            schema::settle(c, turn_id, call_id, *outcome, *settled_at_ms)?;
        }
    }
    Ok(())
}
