//! Parked runs in a SQL store: the rules every [`Database`] shares, written
//! once over its few statements.
//!
//! Each operation is ONE statement in autocommit on the writer's connection,
//! run through the queue ([`GroupCommitStore::read`](super::GroupCommitStore::read))
//! after the round's group has committed, never inside its transaction: it
//! is durable when it returns (SQLite under `synchronous=FULL`, PostgreSQL
//! with `synchronous_commit` on). The claim is a single conditional `UPDATE`,
//! so of two processes claiming one run at once exactly one gets it; when a
//! conditional statement changed nothing, a second look says why (the run is
//! gone, or who holds it). The record is the run's JSON ([`ParkedRun::to_json`]),
//! written and read on the caller's side, off the writer thread.

use super::Database;
use tether_turn::{ParkedRun, StoreError};

/// How many times an operation looks again when the run changed between its
/// conditional statement and the look that says why it changed nothing (a
/// claim released in between): 3.
const ATTEMPTS: usize = 3;

/// A parked run as its row holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParkedRow {
    /// The turn.
    pub(crate) turn_id: String,
    /// The run.
    pub(crate) run_id: String,
    /// When the run parked, Unix milliseconds (the order runs are listed in).
    pub(crate) parked_at_ms: i64,
    /// The run's JSON.
    pub(crate) record: String,
}

/// Who holds a parked run's claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holder {
    /// No such run is parked.
    NotParked,
    /// The run is parked and nobody holds it.
    Free,
    /// `claimant` holds it since `since_ms` (Unix milliseconds).
    Claimed {
        /// Who.
        claimant: String,
        /// Since when.
        since_ms: i64,
    },
}

/// The row `run` is stored as.
///
/// # Errors
/// If the run has no JSON form (never for a run the turn built).
pub(crate) fn row(run: &ParkedRun) -> Result<ParkedRow, StoreError> {
    let record = run.to_json().map_err(|error| {
        StoreError::database_with_message(
            format!(
                "the parked run `{}` of turn `{}` cannot be written as JSON: {error}; nothing was stored",
                run.run_id, run.turn_id
            ),
            error,
        )
    })?;
    Ok(ParkedRow { turn_id: run.turn_id.clone(), run_id: run.run_id.clone(), parked_at_ms: run.parked_at_ms, record })
}

/// The run stored as `record` in the row of `(turn_id, run_id)`.
///
/// # Errors
/// A [`StoreError::Database`] saying the record is corrupt, naming the run,
/// if it is not a parked run's JSON or names another run.
pub(crate) fn parse(turn_id: &str, run_id: &str, record: &str) -> Result<ParkedRun, StoreError> {
    let corrupt = |why: String| {
        format!(
            "the record of parked run `{run_id}` of turn `{turn_id}` is corrupt ({why}); it cannot be resumed: \
             restore the audit database from a backup, or delete that run's row"
        )
    };
    let run = ParkedRun::from_json(record)
        .map_err(|error| StoreError::database_with_message(corrupt(error.to_string()), error))?;
    if run.turn_id != turn_id || run.run_id != run_id {
        let why = format!("it holds run `{}` of turn `{}`", run.run_id, run.turn_id);
        return Err(StoreError::database_with_message(corrupt(why.clone()), Corrupt(why)));
    }
    Ok(run)
}

/// Why a record is corrupt, as an error's source.
#[derive(Debug)]
struct Corrupt(String);

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Corrupt {}

/// Claims run `(turn_id, run_id)` for `claimant` (see
/// [`AuditStore::claim_parked`](tether_turn::AuditStore::claim_parked)): its
/// record.
///
/// # Errors
/// [`StoreError::NotParked`], [`StoreError::ParkedClaimed`], or the database's.
pub(crate) fn claim<D: Database>(
    c: &mut D::Connection,
    turn_id: &str,
    run_id: &str,
    claimant: &str,
    take_over: bool,
    now_ms: i64,
) -> Result<String, StoreError> {
    for _ in 0..ATTEMPTS {
        if let Some(record) = D::claim_parked(c, turn_id, run_id, claimant, take_over, now_ms)? {
            return Ok(record);
        }
        match D::parked_holder(c, turn_id, run_id)? {
            Holder::NotParked => return Err(not_parked(turn_id, run_id)),
            Holder::Claimed { claimant, since_ms } => {
                return Err(claimed(turn_id, run_id, claimant, since_ms));
            }
            // Released since the claim looked: claim again.
            Holder::Free => {}
        }
    }
    Err(changing(turn_id, run_id))
}

/// Runs `act` (a statement that acts only if `claimant` holds run
/// `(turn_id, run_id)`, and says whether it did); if it did not, why not.
///
/// # Errors
/// [`StoreError::ParkedClaimed`] naming the holder, [`StoreError::NotParked`],
/// a [`StoreError::Other`] when nobody holds the run (it was parked again
/// since `claimant` claimed it), or the database's.
pub(crate) fn held<D: Database>(
    c: &mut D::Connection,
    turn_id: &str,
    run_id: &str,
    claimant: &str,
    mut act: impl FnMut(&mut D::Connection) -> Result<bool, StoreError>,
) -> Result<(), StoreError> {
    for _ in 0..ATTEMPTS {
        if act(c)? {
            return Ok(());
        }
        match D::parked_holder(c, turn_id, run_id)? {
            Holder::NotParked => return Err(not_parked(turn_id, run_id)),
            Holder::Free => return Err(unclaimed(turn_id, run_id, claimant)),
            Holder::Claimed { claimant: holder, since_ms } if holder != claimant => {
                return Err(claimed(turn_id, run_id, holder, since_ms));
            }
            // Claimed again by `claimant` since `act` looked: act again.
            Holder::Claimed { .. } => {}
        }
    }
    Err(changing(turn_id, run_id))
}

fn not_parked(turn_id: &str, run_id: &str) -> StoreError {
    StoreError::NotParked { turn_id: turn_id.to_owned(), run_id: run_id.to_owned() }
}

fn claimed(turn_id: &str, run_id: &str, claimant: String, since_ms: i64) -> StoreError {
    StoreError::ParkedClaimed { turn_id: turn_id.to_owned(), run_id: run_id.to_owned(), claimant, since_ms }
}

/// `claimant` acts on a parked run nobody holds: the same words as the
/// memory store's.
fn unclaimed(turn_id: &str, run_id: &str, claimant: &str) -> StoreError {
    StoreError::Other(format!(
        "`{claimant}` does not hold run `{run_id}` of turn `{turn_id}`: the run was parked again since, and nobody \
         holds it now; claim it again to resume it"
    ))
}

fn changing(turn_id: &str, run_id: &str) -> StoreError {
    StoreError::Other(format!(
        "parked run `{run_id}` of turn `{turn_id}` kept changing hands while this process looked at it \
         (`{ATTEMPTS}` times); try again"
    ))
}
