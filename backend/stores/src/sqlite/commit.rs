//! One group's transaction in SQLite: every write applied in order, one
//! commit (one fsync under `synchronous=FULL`).

use super::schema;
use rusqlite::{Connection, TransactionBehavior};
use tether_turn::StoreError;
use tether_turn::{StartVerdict, StoreWrite, start_verdict};

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
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate).map_err(crate::db)?;
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
    transaction.commit().map_err(crate::db)?;
    Ok(results)
}

fn apply(c: &Connection, write: &StoreWrite) -> Result<(), StoreError> {
    match write {
        StoreWrite::OpenTurn { turn_id, opened_at_ms } => {
            if !schema::claim_turn(c, turn_id, *opened_at_ms).map_err(crate::db)? {
                return Err(StoreError::TurnTaken { turn_id: turn_id.clone() });
            }
        }
        StoreWrite::Audit(record) => schema::insert_audit(c, record).map_err(crate::db)?,
        StoreWrite::Started { entry, replay } => {
            let existing = schema::ledger_state(c, &entry.call.turn_id, &entry.call.call_id).map_err(crate::db)?;
            match start_verdict(&entry.call.call_id, existing, *replay)? {
                StartVerdict::Insert => schema::insert_started(c, entry).map_err(crate::db)?,
                StartVerdict::Restart => schema::restart(c, entry).map_err(crate::db)?,
            }
        }
        StoreWrite::Settled { turn_id, call_id, outcome, settled_at_ms, result } => {
            schema::settle(c, turn_id, call_id, *outcome, *settled_at_ms, result.as_deref()).map_err(crate::db)?;
        }
    }
    Ok(())
}
