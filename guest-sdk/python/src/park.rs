//! A run's parked state: what the runner hands the host when it is asked to
//! park instead of waiting on a batch, and reads back when a later start
//! resumes the run with the batch's results.
//!
//! The state is monty's dump of the suspended run plus what the runner
//! itself holds between suspensions: which suspension the batch answers
//! ([`Waiting`]), the `call_async` calls made and not yet sent, the pending
//! `asyncio.sleep`s (as the time each had left) and what is left of the sleep
//! budget. [`frame`] says how the two are put together and why.
//!
//! The host keeps the state between park and resume, sealed and bound to its
//! run, so the state that comes back is the one that left. It is still read
//! as bytes from outside: whatever is wrong with it ends the run with
//! `parked_state_invalid` ([`InvalidState`]), never a panic.

pub mod frame;

use std::{
    collections::BTreeMap,
    fmt,
    time::{Duration, Instant},
};

use monty::{Dump, DumpError, RunProgress, Session, SessionRef};
use serde::{Deserialize, Serialize};
use tether_codes::RunErrorKind;
use tether_guest::{CallRequest, ScriptError, wire::StateNotBase64};

use crate::{errors::SCRIPT_NAME, sleep::SleepBudget};

use self::frame::FrameError;

/// The suspension a batch answers: how monty resumes with its results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Waiting {
    /// A tool function or `call(...)`: one call, whose result the call returns.
    Call,
    /// `await call_async(...)` with nothing else to run: one call, awaited
    /// on the spot.
    AwaitedCall,
    /// Every task waits (`asyncio.gather` and the like): the batch is the
    /// calls with these monty call ids, in this order.
    Futures {
        /// The monty call ids of the batch's calls, in batch order.
        batch: Vec<u32>,
    },
}

impl Waiting {
    /// How many calls the batch has.
    pub fn calls(&self) -> usize {
        match self {
            Waiting::Call | Waiting::AwaitedCall => 1,
            Waiting::Futures { batch } => batch.len(),
        }
    }

    /// Whether `progress` is a suspension this can resume: the live runner
    /// makes only such pairs, so a pair that is not one came from outside.
    fn fits(&self, progress: &RunProgress) -> bool {
        match (self, progress) {
            (Waiting::Call, RunProgress::FunctionCall(call)) => call.object_id.is_none(),
            (Waiting::AwaitedCall, RunProgress::FunctionCall(call)) => {
                call.object_id.is_none() && call.allow_eager_await
            }
            (Waiting::Futures { batch }, RunProgress::ResolveFutures(state)) => {
                let pending = state.pending_call_ids();
                let mut seen = batch.clone();
                seen.sort_unstable();
                seen.dedup();
                !batch.is_empty() && seen.len() == batch.len() && batch.iter().all(|id| pending.contains(id))
            }
            _ => false,
        }
    }
}

/// The runner's part of a parked state, beside monty's dump.
#[derive(Debug, Serialize, Deserialize)]
struct RunnerPart {
    waiting: Waiting,
    /// `call_async` calls made and not yet sent, by monty call id.
    unsent_calls: BTreeMap<u32, CallRequest>,
    /// Pending `asyncio.sleep`s by monty call id: how long each had left.
    sleeps: BTreeMap<u32, Duration>,
    sleep_total: Duration,
    sleep_left: Duration,
}

/// A run suspended on a batch the host has, as the runner holds it: what
/// [`Suspended::park`] writes.
#[derive(Debug, Clone, Copy)]
pub struct Suspended<'a> {
    /// The script, whose fingerprint the state carries.
    pub source: &'a str,
    /// monty's suspended run.
    pub progress: &'a RunProgress,
    /// The suspension the batch answers.
    pub waiting: &'a Waiting,
    /// `call_async` calls made and not yet sent, by monty call id.
    pub unsent_calls: &'a BTreeMap<u32, CallRequest>,
    /// Pending `asyncio.sleep`s by monty call id, and when each is due.
    pub sleeps: &'a BTreeMap<u32, Instant>,
    /// What is left of the run's sleep budget.
    pub sleep: &'a SleepBudget,
}

impl Suspended<'_> {
    /// The parked state of this run, if it takes at most `max_bytes`;
    /// `None` if it takes more or monty cannot dump the run (the host then
    /// goes on waiting). [`read`] gives it back.
    pub fn park(&self, max_bytes: u64) -> Option<Vec<u8>> {
        let now = Instant::now();
        let runner = RunnerPart {
            waiting: self.waiting.clone(),
            unsent_calls: self.unsent_calls.clone(),
            sleeps: self.sleeps.iter().map(|(id, due)| (*id, due.saturating_duration_since(now))).collect(),
            sleep_total: self.sleep.total(),
            sleep_left: self.sleep.left(),
        };
        let runner = serde_json::to_vec(&runner).ok()?;
        let dump = monty::dump(SCRIPT_NAME, None, &[], SessionRef::Running(self.progress)).ok()?;
        let state = frame::seal(frame::fingerprint(self.source), &runner, &dump)?;
        (state.len() as u64 <= max_bytes).then_some(state)
    }
}

/// A run read back from its parked state, waiting for the results of the
/// batch it parked on.
#[derive(Debug)]
pub struct Parked {
    /// monty's suspended run; [`Waiting`] fits it.
    pub progress: RunProgress,
    /// The suspension the batch answers.
    pub waiting: Waiting,
    /// `call_async` calls made and not yet sent, by monty call id.
    pub unsent_calls: BTreeMap<u32, CallRequest>,
    /// Pending `asyncio.sleep`s by monty call id: how long each had left
    /// when the run parked.
    pub sleeps: BTreeMap<u32, Duration>,
    /// What was left of the sleep budget when the run parked.
    pub sleep: SleepBudget,
}

/// Reads `bytes`, the parked state of a run of the script `source`, as
/// [`Suspended::park`] wrote it.
///
/// # Errors
/// [`InvalidState`] for bytes that are not such a state (empty, truncated,
/// damaged, of another format, of another script, or one monty cannot load).
pub fn read(bytes: &[u8], source: &str) -> Result<Parked, InvalidState> {
    let (runner, dump) = frame::open(bytes, frame::fingerprint(source)).map_err(InvalidState::Frame)?;
    let runner: RunnerPart =
        serde_json::from_slice(runner).map_err(|error| InvalidState::RunnerPart(error.to_string()))?;
    let progress = match Dump::load(dump).map_err(InvalidState::Dump)?.state {
        Session::Running(progress) => *progress,
        Session::Idle(_) | Session::Suspended(_) => return Err(InvalidState::NotARun),
    };
    if !runner.waiting.fits(&progress) {
        return Err(InvalidState::Mismatch);
    }
    Ok(Parked {
        progress,
        waiting: runner.waiting,
        unsent_calls: runner.unsent_calls,
        sleeps: runner.sleeps,
        sleep: SleepBudget::resumed(runner.sleep_total, runner.sleep_left),
    })
}

/// Why a start's parked state cannot resume its run. The run then ends with
/// `parked_state_invalid`, and the message says to start the script again.
#[derive(Debug, PartialEq, Eq)]
pub enum InvalidState {
    /// The start document's state is not base64.
    NotBase64(StateNotBase64),
    /// The bytes are not a parked state of this script.
    Frame(FrameError),
    /// The runner's part does not read.
    RunnerPart(String),
    /// monty cannot load its dump.
    Dump(DumpError),
    /// monty's dump holds no suspended run.
    NotARun,
    /// The runner's part and monty's dump disagree on where the run waits.
    Mismatch,
}

impl From<StateNotBase64> for InvalidState {
    fn from(error: StateNotBase64) -> Self {
        InvalidState::NotBase64(error)
    }
}

impl fmt::Display for InvalidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidState::NotBase64(error) => write!(f, "{error}")?,
            InvalidState::Frame(error) => write!(f, "{error}")?,
            InvalidState::RunnerPart(error) => write!(f, "the parked state's runner part does not read: {error}")?,
            InvalidState::Dump(error) => write!(f, "the parked interpreter state does not load: {error}")?,
            InvalidState::NotARun => f.write_str("the parked interpreter state holds no suspended run")?,
            InvalidState::Mismatch => f.write_str(
                "the parked state's runner part and interpreter state disagree on the calls the run waits on",
            )?,
        }
        f.write_str(". The run cannot go on from it: start the script again")
    }
}

impl From<InvalidState> for ScriptError {
    fn from(invalid: InvalidState) -> Self {
        ScriptError {
            kind: RunErrorKind::ParkedStateInvalid.as_str().to_owned(),
            message: invalid.to_string(),
            ..ScriptError::default()
        }
    }
}

#[cfg(test)]
mod tests;
