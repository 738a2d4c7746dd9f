//! What the overview charts: submits, completions, failures and retries per
//! second over the last 15 minutes, in memory, and windows of the worker's
//! call-duration histogram for p50/p99.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use tc_model::{State, Timestamp};

/// How many one-second buckets are kept: 15 minutes.
pub(crate) const WINDOW_SECONDS: usize = 900;

/// What one bucket counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A task was created by a submit (single or batch).
    Submitted,
    /// An attempt ended with the task in `success`.
    Completed,
    /// An attempt ended with the task in `failed` (no try left, or not
    /// retryable).
    Failed,
    /// An attempt ended and the task waits for another try.
    Retried,
}

impl Event {
    fn index(self) -> usize {
        match self {
            Event::Submitted => 0,
            Event::Completed => 1,
            Event::Failed => 2,
            Event::Retried => 3,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// The second (since the epoch) these counts belong to; a bucket whose
    /// second is not the one asked for is stale and reads as zero.
    second: i64,
    counts: [u64; 4],
}

/// A cumulative reading of the call-duration histogram: `(upper bound in
/// seconds, calls at or below it)`, ascending, `+Inf` last.
pub(crate) type Buckets = Vec<(f64, u64)>;

/// Per-second counts over the last [`WINDOW_SECONDS`], fed by the submit
/// path (tc-http) and by the worker's attempt endings (wired by tc-server:
/// [`Activity::attempt_ended`]). A ring of buckets tagged with their second,
/// so nothing has to tick while no event comes.
#[derive(Debug)]
pub struct Activity {
    ring: Mutex<Vec<Bucket>>,
    /// Histogram readings, at most one per [`SNAPSHOT_EVERY_S`], for the
    /// last [`WINDOW_SECONDS`]: the latency of the window is the newest
    /// reading less the oldest.
    latency: Mutex<VecDeque<(i64, Buckets)>>,
}

/// Seconds between two kept histogram readings.
const SNAPSHOT_EVERY_S: i64 = 10;

/// One series of the chart: counts per second, oldest first, the last one
/// being the current second.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    /// Submits per second.
    pub submitted: Vec<u64>,
    /// Completions (success) per second.
    pub completed: Vec<u64>,
    /// Failures (terminal) per second.
    pub failed: Vec<u64>,
    /// Attempts that ended in a retry, per second.
    pub retried: Vec<u64>,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            ring: Mutex::new(vec![Bucket::default(); WINDOW_SECONDS]),
            latency: Mutex::new(VecDeque::new()),
        }
    }
}

fn second_of(now: Timestamp) -> i64 {
    now.as_millis().div_euclid(1000)
}

fn slot(second: i64) -> usize {
    // rem_euclid of a positive modulus is in 0..WINDOW_SECONDS.
    usize::try_from(second.rem_euclid(WINDOW_SECONDS as i64)).unwrap_or(0)
}

impl Activity {
    /// Counts `n` events of `kind` at `now`.
    pub fn record(&self, kind: Event, n: u64, now: Timestamp) {
        let second = second_of(now);
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = &mut ring[slot(second)];
        if bucket.second != second {
            *bucket = Bucket {
                second,
                counts: [0; 4],
            };
        }
        bucket.counts[kind.index()] = bucket.counts[kind.index()].saturating_add(n);
    }

    /// An attempt ended with the task in `state` (the worker's
    /// `AttemptEnded`): counted as a completion, a failure or a retry;
    /// cancels and interruptions are not counted here.
    pub fn attempt_ended(&self, state: State, now: Timestamp) {
        let kind = match state {
            State::Success => Event::Completed,
            State::Failed => Event::Failed,
            State::Pending => Event::Retried,
            State::Running | State::Canceled => return,
        };
        self.record(kind, 1, now);
    }

    /// The last [`WINDOW_SECONDS`] seconds up to `now`, oldest first.
    pub fn series(&self, now: Timestamp) -> Series {
        let last = second_of(now);
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let mut series = Series {
            submitted: Vec::with_capacity(WINDOW_SECONDS),
            completed: Vec::with_capacity(WINDOW_SECONDS),
            failed: Vec::with_capacity(WINDOW_SECONDS),
            retried: Vec::with_capacity(WINDOW_SECONDS),
        };
        for back in (0..WINDOW_SECONDS as i64).rev() {
            let second = last - back;
            let bucket = ring[slot(second)];
            let counts = if bucket.second == second {
                bucket.counts
            } else {
                [0; 4]
            };
            series.submitted.push(counts[0]);
            series.completed.push(counts[1]);
            series.failed.push(counts[2]);
            series.retried.push(counts[3]);
        }
        series
    }

    /// Keeps `reading` (the histogram now, kept at most every
    /// [`SNAPSHOT_EVERY_S`]) and returns the calls of the last
    /// [`WINDOW_SECONDS`]: the reading less the newest kept one that is at
    /// least that old, with the seconds between them; while none is that old
    /// (the process or the dashboard is younger), the whole reading and
    /// `None` (since start).
    pub(crate) fn latency_window(
        &self,
        reading: Buckets,
        now: Timestamp,
    ) -> (Buckets, Option<i64>) {
        let second = second_of(now);
        let window = WINDOW_SECONDS as i64;
        let mut kept = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
        // Only the newest reading at least a window old is needed as a base.
        while kept.len() >= 2 && kept.get(1).is_some_and(|(s, _)| second - s >= window) {
            kept.pop_front();
        }
        let answer = match kept.front() {
            Some((since, old)) if second - since >= window && old.len() == reading.len() => {
                let diff = reading
                    .iter()
                    .zip(old)
                    .map(|((le, new), (_, old))| (*le, new.saturating_sub(*old)))
                    .collect();
                (diff, Some(second - since))
            }
            _ => (reading.clone(), None),
        };
        if kept
            .back()
            .is_none_or(|(s, _)| second - s >= SNAPSHOT_EVERY_S)
        {
            kept.push_back((second, reading));
        }
        answer
    }
}

/// The `q` quantile (0..=1) of a cumulative histogram, interpolated
/// linearly inside the bucket it falls in (as Prometheus'
/// `histogram_quantile` does); `None` without observations. A quantile in
/// the `+Inf` bucket answers the highest finite bound.
pub(crate) fn quantile(buckets: &[(f64, u64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut lower = (0.0, 0u64);
    for &(le, count) in buckets {
        if count as f64 >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            let in_bucket = (count - lower.1) as f64;
            let fraction = if in_bucket > 0.0 {
                (rank - lower.1 as f64) / in_bucket
            } else {
                1.0
            };
            return Some(lower.0 + (le - lower.0) * fraction);
        }
        lower = (le, count);
    }
    Some(lower.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_millis(second * 1000 + 500)
    }

    #[test]
    fn events_land_in_their_second_and_age_out_after_the_window() {
        let activity = Activity::default();
        activity.record(Event::Submitted, 3, at(1000));
        activity.attempt_ended(State::Success, at(1000));
        activity.attempt_ended(State::Failed, at(1001));
        activity.attempt_ended(State::Pending, at(1001));
        activity.attempt_ended(State::Canceled, at(1001));
        let s = activity.series(at(1001));
        assert_eq!(s.submitted.len(), WINDOW_SECONDS);
        assert_eq!(&s.submitted[WINDOW_SECONDS - 2..], &[3, 0]);
        assert_eq!(&s.completed[WINDOW_SECONDS - 2..], &[1, 0]);
        assert_eq!(&s.failed[WINDOW_SECONDS - 2..], &[0, 1]);
        assert_eq!(&s.retried[WINDOW_SECONDS - 2..], &[0, 1]);
        // 900 s later the same slot holds a new second: the old counts are
        // gone, not added to.
        let later = 1000 + WINDOW_SECONDS as i64;
        assert_eq!(activity.series(at(later)).submitted.iter().sum::<u64>(), 0);
        activity.record(Event::Submitted, 1, at(later));
        assert_eq!(activity.series(at(later)).submitted.iter().sum::<u64>(), 1);
    }

    #[test]
    fn quantiles_interpolate_within_a_bucket() {
        let check = |buckets: &[(f64, u64)], q: f64, expected: Option<f64>| {
            let got = quantile(buckets, q);
            match (got, expected) {
                (Some(g), Some(e)) => assert!((g - e).abs() < 1e-9, "{buckets:?} q{q}: {g} != {e}"),
                _ => assert_eq!(got, expected, "{buckets:?} q{q}"),
            }
        };
        let b = [(0.001, 0), (0.002, 50), (0.004, 100), (f64::INFINITY, 100)];
        check(&b, 0.5, Some(0.002));
        check(&b, 0.25, Some(0.0015));
        check(&b, 0.99, Some(0.00396));
        check(&[(0.001, 0), (f64::INFINITY, 0)], 0.5, None);
        check(&[(0.001, 0), (f64::INFINITY, 4)], 0.5, Some(0.001));
        check(&[], 0.5, None);
    }

    #[test]
    fn the_latency_window_is_since_start_until_a_reading_is_a_window_old() {
        let activity = Activity::default();
        let reading = |fast: u64, all: u64| vec![(0.1, fast), (f64::INFINITY, all)];
        let check = |r: Buckets, second: i64, expected: (Buckets, Option<i64>)| {
            assert_eq!(
                activity.latency_window(r, at(second)),
                expected,
                "at {second}"
            );
        };
        check(reading(10, 10), 0, (reading(10, 10), None));
        check(reading(12, 20), 100, (reading(12, 20), None));
        // 900 s after the first reading: only what came since.
        check(reading(15, 25), 900, (reading(5, 15), Some(900)));
        // Later the base moves to the newest reading a window old (100 s).
        check(reading(15, 30), 1000, (reading(3, 10), Some(900)));
        // Readings closer than 10 s apart are not kept.
        check(reading(15, 31), 1005, (reading(3, 11), Some(905)));
    }
}
