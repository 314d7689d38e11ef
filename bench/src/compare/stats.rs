//! What one measurement yields, and its percentiles.

use serde_json::Value;
use std::time::Duration;

/// One measurement of a system on a workload: the time of each timed run
/// (from submitting the script to its result), the wall time of them all,
/// and the last run's result (checked against Tether's).
#[derive(Debug, Clone)]
pub(crate) struct Measured {
    /// Each timed run.
    pub(crate) samples: Vec<Duration>,
    /// From the first timed run's start to the last one's end.
    pub(crate) elapsed: Duration,
    /// The script's result (its last expression).
    pub(crate) result: Value,
}

impl Measured {
    /// The `q`-quantile (0..=1) of the samples, nearest rank; zero if there are none.
    pub(crate) fn quantile(&self, q: f64) -> Duration {
        let mut sorted = self.samples.clone();
        sorted.sort();
        let Some(last) = sorted.len().checked_sub(1) else { return Duration::ZERO };
        sorted[((last as f64) * q.clamp(0.0, 1.0)).round() as usize]
    }

    /// Runs per second over the whole measurement.
    pub(crate) fn throughput(&self) -> f64 {
        self.samples.len() as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// A duration for a table cell: µs below 1 ms, ms below 1 s, else s; three
/// significant figures at most.
pub(crate) fn human(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    // Below 999.5 µs, so that nothing rounds up to "1000 µs".
    if us < 999.5 {
        format!("{us:.0} µs")
    } else if us < 999_500.0 {
        format!("{} ms", three_figures(us / 1000.0))
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// `x` with two decimals below 10, one below 100, none above: three
/// significant figures at most from 1 up (`0.48`, `16.7`, `4795`).
pub(crate) fn three_figures(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.2}")
    } else if x < 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

/// Runs per second for a table cell: a decimal only below 10.
pub(crate) fn rate(runs_per_second: f64) -> String {
    if runs_per_second < 10.0 { format!("{runs_per_second:.1}") } else { format!("{runs_per_second:.0}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(micros: &[u64]) -> Measured {
        Measured {
            samples: micros.iter().map(|&us| Duration::from_micros(us)).collect(),
            elapsed: Duration::from_secs(2),
            result: Value::Null,
        }
    }

    #[test]
    fn quantiles_are_nearest_rank_of_the_sorted_samples() {
        let m = measured(&[50, 10, 40, 20, 30]);
        assert_eq!(m.quantile(0.5), Duration::from_micros(30));
        assert_eq!(m.quantile(0.99), Duration::from_micros(50));
        assert_eq!(m.quantile(0.0), Duration::from_micros(10));
        assert_eq!(measured(&[]).quantile(0.5), Duration::ZERO);
        assert_eq!(m.throughput(), 2.5);
    }

    #[test]
    fn durations_read_in_the_unit_that_fits() {
        assert_eq!(human(Duration::from_micros(457)), "457 µs");
        assert_eq!(human(Duration::from_micros(1_234)), "1.23 ms");
        assert_eq!(human(Duration::from_micros(12_345)), "12.3 ms");
        assert_eq!(human(Duration::from_micros(123_456)), "123 ms");
        assert_eq!(human(Duration::from_millis(2_507)), "2.51 s");
        assert_eq!(human(Duration::from_nanos(999_600)), "1.00 ms");
        assert_eq!((rate(0.43), rate(254.4)), ("0.4".to_owned(), "254".to_owned()));
    }
}
