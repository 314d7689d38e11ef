//! The sleep budget: how long one run may sleep in total (`time.sleep`,
//! `asyncio.sleep`).
//!
//! A sleeping script holds its execution slot (a tool wait gives it back), so
//! a script that sleeps in a loop would starve other runs until its deadline.
//! A sleep that would pass the budget ends the run at once, without sleeping
//! what is left: a limit, like the CPU limit, never a silent early return.

use std::{fmt, thread, time::Duration};

use tether_codes::RunErrorKind;
use tether_guest::ScriptError;

/// How long one run may sleep in total. Default for [`SleepBudget`].
pub const MAX_TOTAL_SLEEP: Duration = Duration::from_secs(10);

/// The [`ScriptError::limit`] name of the sleep budget.
pub const SLEEP_LIMIT_NAME: &str = "sleep_ms";

/// What is left of a run's sleep budget.
#[derive(Debug, Clone)]
pub struct SleepBudget {
    total: Duration,
    left: Duration,
}

impl Default for SleepBudget {
    fn default() -> Self {
        Self::new(MAX_TOTAL_SLEEP)
    }
}

impl SleepBudget {
    /// A budget of `total`, none of it used.
    pub fn new(total: Duration) -> Self {
        Self { total, left: total }
    }

    /// The budget of a run resumed from a park: `total`, of which `left` is
    /// left (at most all of it).
    pub fn resumed(total: Duration, left: Duration) -> Self {
        Self { total, left: left.min(total) }
    }

    /// The whole budget.
    pub fn total(&self) -> Duration {
        self.total
    }

    /// What is left of it.
    pub fn left(&self) -> Duration {
        self.left
    }

    /// Sleeps `duration` out of the budget.
    ///
    /// # Errors
    ///
    /// When `duration` is more than what is left: [`SleepLimit`], returned
    /// at once without sleeping and without using the budget.
    pub fn sleep(&mut self, duration: Duration) -> Result<(), SleepLimit> {
        self.take(duration)?;
        if !duration.is_zero() {
            thread::sleep(duration);
        }
        Ok(())
    }

    /// Takes `duration` from the budget without sleeping.
    ///
    /// # Errors
    ///
    /// As [`Self::sleep`].
    fn take(&mut self, duration: Duration) -> Result<(), SleepLimit> {
        let exceeded = SleepLimit { total: self.total, asked: duration, left: self.left };
        self.left = self.left.checked_sub(duration).ok_or(exceeded)?;
        Ok(())
    }
}

/// A sleep that did not fit in what was left of the budget; becomes the
/// run's [`ScriptError`] (kind [`RunErrorKind::SleepLimit`], limit
/// [`SLEEP_LIMIT_NAME`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SleepLimit {
    total: Duration,
    asked: Duration,
    left: Duration,
}

impl fmt::Display for SleepLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "this script tried to sleep past its `{}` s sleep budget (it asked for `{}` s with `{}` s left; \
             a sleeping script holds an execution slot): wait on tools instead, or split the work",
            seconds(self.total),
            seconds(self.asked),
            seconds(self.left),
        )
    }
}

impl From<SleepLimit> for ScriptError {
    fn from(limit: SleepLimit) -> Self {
        ScriptError {
            kind: RunErrorKind::SleepLimit.as_str().to_owned(),
            limit: SLEEP_LIMIT_NAME.to_owned(),
            message: limit.to_string(),
            ..ScriptError::default()
        }
    }
}

/// `duration` in seconds, to the millisecond, without trailing zeros.
fn seconds(duration: Duration) -> String {
    let text = format!("{:.3}", duration.as_secs_f64());
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn sleeps_within_the_budget_are_obeyed() {
        let mut budget = SleepBudget::new(Duration::from_millis(30));
        let started = Instant::now();
        assert!(budget.sleep(Duration::from_millis(10)).is_ok());
        assert!(budget.sleep(Duration::from_millis(20)).is_ok());
        assert!(started.elapsed() >= Duration::from_millis(30));
        // Exactly used up: a zero sleep still fits.
        assert!(budget.sleep(Duration::ZERO).is_ok());
    }

    #[test]
    fn a_sleep_past_the_budget_is_a_limit_error_at_once() {
        let mut budget = SleepBudget::new(Duration::from_secs(10));
        let started = Instant::now();
        let error = budget.sleep(Duration::from_secs(100_000)).err();
        assert!(started.elapsed() < Duration::from_secs(1), "the limit must not sleep first");
        let error = ScriptError::from(error.unwrap_or_else(|| panic!("a 100000 s sleep passed a 10 s budget")));
        assert_eq!((error.kind.as_str(), error.limit.as_str()), ("sleep_limit", SLEEP_LIMIT_NAME));
        assert!(error.message.contains("`10` s sleep budget"), "{}", error.message);
        assert!(error.message.contains("`100000` s"), "{}", error.message);
        assert!(error.message.contains("wait on tools instead"), "{}", error.message);
    }

    #[test]
    fn a_refused_sleep_uses_none_of_the_budget() {
        let mut budget = SleepBudget::new(Duration::from_millis(50));
        assert!(budget.take(Duration::from_millis(40)).is_ok());
        let error = budget.take(Duration::from_millis(11)).err().map(|error| error.to_string());
        assert!(error.is_some_and(|message| message.contains("`0.011` s with `0.01` s left")));
        assert!(budget.take(Duration::from_millis(10)).is_ok());
    }
}
