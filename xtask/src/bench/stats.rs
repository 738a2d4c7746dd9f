//! Latency statistics: percentiles by nearest rank over every sample, no
//! histogram buckets to blur the tail.

use std::time::Duration;

/// The usual summary of one latency distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) count: usize,
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) p999: Duration,
    pub(crate) max: Duration,
}

/// The `p`-th percentile (0 < p ≤ 100) of `sorted` by nearest rank: the
/// smallest sample with at least p% of the samples at or below it. `None`
/// for no samples.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len() as u128;
    // In integers (p in thousandths of a percent): in floats 99.9% of 1000
    // is 999.0000000000001, whose ceiling is one rank too high.
    let milli_percent = (p.clamp(0.0, 100.0) * 1000.0).round() as u128;
    let rank = (milli_percent * n).div_ceil(100_000);
    let index = usize::try_from(rank.clamp(1, n) - 1).ok()?;
    sorted.get(index).copied()
}

/// Sorts the samples and summarizes them; `None` for no samples.
pub(crate) fn summarize(mut samples: Vec<Duration>) -> Option<Summary> {
    samples.sort_unstable();
    Some(Summary {
        count: samples.len(),
        p50: percentile(&samples, 50.0)?,
        p99: percentile(&samples, 99.0)?,
        p999: percentile(&samples, 99.9)?,
        max: *samples.last()?,
    })
}

/// Milliseconds as a float, the unit every latency is reported in.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Events per second; zero when no time passed.
pub(crate) fn rate(count: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn millis(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let hundred: Vec<u64> = (1..=100).collect();
        let thousand: Vec<u64> = (1..=1000).collect();
        let check = |samples: &[u64], p: f64, want: Option<u64>| {
            let mut sorted = millis(samples);
            sorted.sort_unstable();
            assert_eq!(
                percentile(&sorted, p),
                want.map(Duration::from_millis),
                "p{p} of {} samples",
                samples.len()
            );
        };
        check(&[], 50.0, None);
        check(&[7], 0.1, Some(7));
        check(&[7], 50.0, Some(7));
        check(&[7], 100.0, Some(7));
        check(&[1, 2], 50.0, Some(1));
        check(&[1, 2], 51.0, Some(2));
        check(&hundred, 50.0, Some(50));
        check(&hundred, 99.0, Some(99));
        check(&hundred, 99.9, Some(100));
        check(&hundred, 100.0, Some(100));
        check(&thousand, 99.9, Some(999));
        check(&thousand, 99.0, Some(990));
        check(&thousand, 0.0, Some(1));
    }

    #[test]
    fn summary_sorts_its_samples() {
        let got = summarize(millis(&[5, 1, 4, 2, 3])).unwrap();
        assert_eq!(got.count, 5);
        assert_eq!(got.p50, Duration::from_millis(3));
        assert_eq!(got.p99, Duration::from_millis(5));
        assert_eq!(got.max, Duration::from_millis(5));
        assert_eq!(summarize(Vec::new()), None);
    }

    #[test]
    fn rates_and_units() {
        assert_eq!(rate(10, Duration::from_secs(2)), 5.0);
        assert_eq!(rate(10, Duration::ZERO), 0.0);
        assert_eq!(ms(Duration::from_micros(1500)), 1.5);
    }
}
