//! One group's transaction in PostgreSQL, safe beside other backends writing
//! the same tables.
//!
//! PostgreSQL aborts a whole transaction on any failed statement, where
//! SQLite undoes the statement alone. So that a write the database rejects
//! (a trigger, a value out of range) still fails alone, as in SQLite, the
//! group is rolled back and run again without it. A conflict with another
//! writer (a deadlock between two groups taking the same rows in opposite
//! orders, a serialization failure) rolls back the group, which is then run
//! again as a whole, up to [`MAX_CONFLICT_RETRIES`] times. Anything else
//! fails the group.
//!
//! A group that writes ledger rows or claims turn ids first takes an
//! advisory lock per turn it writes or claims, in one global order: two
//! backends' groups for one turn run one after the other, so they never
//! deadlock on each other's rows, even when they claim the same ids in
//! opposite orders (a deadlock with some other writer of the tables is
//! still run again).
//!
//! The replay rule is decided on the row as it is committed: `started` locks
//! the call's row (`FOR UPDATE`), and a call id another writer inserts
//! meanwhile makes the insert wait for that writer's transaction and then
//! insert nothing, so the rule is decided again on that writer's row. Two
//! backends starting the same call id: exactly one gets `Ok`.

use super::schema::Statements;
use crate::group_commit::{Committed, GroupFailure};
use postgres::{Client, GenericClient};
use tether_turn::LedgerState;
use tether_turn::StoreError;
use tether_turn::{StartVerdict, StoreWrite, start_verdict};

/// How many times a group is run again after conflicting with another
/// writer: 5.
const MAX_CONFLICT_RETRIES: u32 = 5;

/// Why one attempt at the group's transaction failed.
enum Attempt {
    /// The database rejected write `.0` alone: run the group again without it.
    Write(usize, StoreError),
    /// Another writer conflicted: run the group again.
    Conflict(StoreError),
    /// The group fails.
    Group(GroupFailure),
}

/// Commits `writes` in one transaction: see the module documentation.
///
/// # Errors
/// If the group could not commit; `before_begin` when its transaction could
/// not begin.
pub(super) fn commit(
    client: &mut Client,
    statements: &Statements,
    writes: &[&StoreWrite],
) -> Result<Committed, GroupFailure> {
    // Writes the database rejected alone, left out of later attempts.
    let mut rejected: Vec<Option<StoreError>> = writes.iter().map(|_| None).collect();
    let (mut conflicts, mut retries) = (0_u32, 0_u64);
    loop {
        match attempt(client, statements, writes, &rejected) {
            Ok(results) => {
                let results =
                    results.into_iter().zip(rejected).map(|(result, rejected)| rejected.map_or(result, Err)).collect();
                return Ok(Committed { results, retries });
            }
            Err(Attempt::Write(index, error)) => {
                tracing::warn!(%error, write = ?writes[index], "the audit database rejected one write; committing the rest of its group without it");
                rejected[index] = Some(error);
            }
            Err(Attempt::Conflict(error)) if conflicts < MAX_CONFLICT_RETRIES => {
                tracing::info!(%error, "a group of audit writes conflicted with another writer; running it again");
                conflicts += 1;
            }
            Err(Attempt::Conflict(error)) => {
                return Err(GroupFailure::from(StoreError::Commit(format!(
                    "the group conflicted with other writers `{}` times in a row: {error}",
                    conflicts + 1
                ))));
            }
            Err(Attempt::Group(failure)) => return Err(failure),
        }
        retries += 1;
    }
}

/// One try: every write not `rejected`, in order, then COMMIT. A dropped
/// transaction rolls back.
fn attempt(
    client: &mut Client,
    statements: &Statements,
    writes: &[&StoreWrite],
    rejected: &[Option<StoreError>],
) -> Result<Vec<Result<(), StoreError>>, Attempt> {
    let mut transaction = client
        .transaction()
        .map_err(|error| Attempt::Group(GroupFailure { error: crate::db(error), before_begin: true }))?;
    let turns: Vec<&str> = writes
        .iter()
        .zip(rejected)
        .filter_map(|(write, rejected)| match write {
            _ if rejected.is_some() => None,
            StoreWrite::Audit(_) => None,
            StoreWrite::OpenTurn { turn_id, .. } => Some(turn_id.as_str()),
            StoreWrite::Started { entry, .. } => Some(entry.call.turn_id.as_str()),
            StoreWrite::Settled { turn_id, .. } => Some(turn_id.as_str()),
        })
        .collect();
    if !turns.is_empty() {
        statements.lock_turns(&mut transaction, &turns).map_err(|error| classify(error, None))?;
    }
    let mut results = Vec::with_capacity(writes.len());
    for (index, write) in writes.iter().enumerate() {
        if rejected[index].is_some() {
            // Replaced by its rejection once the group commits.
            results.push(Ok(()));
            continue;
        }
        match apply(&mut transaction, statements, write) {
            Ok(outcome) => results.push(outcome),
            Err(error) => return Err(classify(error, Some(index))),
        }
    }
    transaction.commit().map_err(|error| classify(error, None))?;
    Ok(results)
}

/// Applies one write. The outer error is the database's (the transaction is
/// aborted); the inner one is the replay rule's refusal (the transaction
/// goes on).
fn apply(
    c: &mut impl GenericClient,
    statements: &Statements,
    write: &StoreWrite,
) -> Result<Result<(), StoreError>, postgres::Error> {
    match write {
        StoreWrite::OpenTurn { turn_id, opened_at_ms } => {
            if !statements.claim_turn(c, turn_id, *opened_at_ms)? {
                return Ok(Err(StoreError::TurnTaken { turn_id: turn_id.clone() }));
            }
        }
        StoreWrite::Audit(record) => statements.insert_audit(c, record)?,
        StoreWrite::Started { entry, replay } => {
            let (turn_id, call_id) = (&entry.call.turn_id, &entry.call.call_id);
            let mut existing = statements.ledger_state(c, turn_id, call_id)?;
            // Two looks at most: a call id another writer inserted since the
            // first is there for good (rows are never deleted).
            for _ in 0..2 {
                match start_verdict(call_id, existing, *replay) {
                    Err(refused) => return Ok(Err(refused)),
                    Ok(StartVerdict::Restart) => {
                        statements.restart(c, entry)?;
                        return Ok(Ok(()));
                    }
                    Ok(StartVerdict::Insert) => {
                        if statements.insert_started(c, entry)? {
                            return Ok(Ok(()));
                        }
                        // Another writer inserted it and committed: decide on its row.
                        existing = statements.ledger_state(c, turn_id, call_id)?;
                    }
                }
            }
            // Only a row deleted under us gets here: nobody knows whether that call ran.
            return Ok(Err(StoreError::Replayed { call_id: call_id.clone(), state: LedgerState::Started }));
        }
        StoreWrite::Settled { turn_id, call_id, outcome, settled_at_ms, result } => {
            statements.settle(c, turn_id, call_id, *outcome, *settled_at_ms, result.as_deref())?;
        }
    }
    Ok(Ok(()))
}

/// What a failed statement (of write `write`, or COMMIT) means for the group,
/// by its SQLSTATE class.
fn classify(error: postgres::Error, write: Option<usize>) -> Attempt {
    let class = error.code().map(|code| code.code().get(..2).unwrap_or_default().to_owned());
    match (class.as_deref(), write) {
        // Transaction rollback: deadlock detected, serialization failure.
        (Some("40"), _) => Attempt::Conflict(crate::db(error)),
        // The write's own data (22), an integrity rule (23) or a trigger's
        // exception (P0) rejected it.
        (Some("22" | "23" | "P0"), Some(index)) => Attempt::Write(index, crate::db(error)),
        _ => Attempt::Group(GroupFailure::from(StoreError::Commit(crate::db(error).to_string()))),
    }
}
