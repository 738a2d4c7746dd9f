//! A tenant's submit rate: a token bucket per tenant, refilled continuously
//! at `submit_rate_per_s` up to its size ([`super::TenantSettings::bucket_size`]).
//! Each node keeps its own buckets (a rate holds per node; documented), and
//! a submit that finds the bucket empty is told when the next token comes.

use std::time::Duration;

use super::TenantSettings;
use crate::Timestamp;

/// The limit a refused submit hit: the `limit` label of
/// `taskcenter_quota_rejections_total` and the start of its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaLimit {
    /// `max_pending`.
    MaxPending,
    /// `submit_rate_per_s`.
    SubmitRate,
}

impl QuotaLimit {
    /// The limit's name, as the settings field is named.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaLimit::MaxPending => "max_pending",
            QuotaLimit::SubmitRate => "submit_rate_per_s",
        }
    }
}

/// How long a client refused for `max_pending` is asked to wait before it
/// tries again (the store cannot know when a task will end).
pub const PENDING_RETRY_AFTER: Duration = Duration::from_secs(1);

/// One tenant's submit bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmitBucket {
    tokens: f64,
    refilled: Timestamp,
}

impl SubmitBucket {
    /// A full bucket at `now` (a tenant starts with its burst).
    pub fn new(now: Timestamp, settings: &TenantSettings) -> SubmitBucket {
        SubmitBucket {
            tokens: settings.bucket_size().unwrap_or(0.0),
            refilled: now,
        }
    }

    /// Takes `n` tokens for `n` submits at `now` if the bucket has them;
    /// otherwise takes none and answers how long until it will (rounded up
    /// to whole seconds by [`retry_after_secs`]). No rate: always `Ok`.
    pub fn take(
        &mut self,
        n: u32,
        now: Timestamp,
        settings: &TenantSettings,
    ) -> Result<(), Duration> {
        let (Some(rate), Some(size)) = (settings.submit_rate_per_s, settings.bucket_size()) else {
            return Ok(());
        };
        let earned = now.duration_since(self.refilled).as_secs_f64() * rate;
        self.tokens = (self.tokens + earned).min(size);
        self.refilled = now;
        let n = f64::from(n);
        if self.tokens >= n {
            self.tokens -= n;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((n - self.tokens) / rate))
        }
    }

    /// Whether the bucket is full at `now` (then a fresh one is the same,
    /// and a caller may forget this one).
    pub fn is_full(&self, now: Timestamp, settings: &TenantSettings) -> bool {
        match (settings.submit_rate_per_s, settings.bucket_size()) {
            (Some(rate), Some(size)) => {
                self.tokens + now.duration_since(self.refilled).as_secs_f64() * rate >= size
            }
            _ => true,
        }
    }
}

/// A wait as a `Retry-After` value: whole seconds, rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn the_bucket_refills_at_the_rate_up_to_its_size() {
        let settings = TenantSettings {
            submit_rate_per_s: Some(2.0),
            submit_burst: Some(3),
            ..TenantSettings::default()
        };
        let mut bucket = SubmitBucket::new(at(0), &settings);
        for _ in 0..3 {
            assert_eq!(bucket.take(1, at(0), &settings), Ok(()));
        }
        assert_eq!(
            bucket.take(1, at(0), &settings),
            Err(Duration::from_millis(500))
        );
        // Half a second later one token is back.
        assert_eq!(bucket.take(1, at(500), &settings), Ok(()));
        assert!(bucket.take(1, at(500), &settings).is_err());
        // A long quiet spell fills it to its size, not beyond.
        assert!(bucket.is_full(at(100_000), &settings));
        assert_eq!(bucket.take(3, at(100_000), &settings), Ok(()));
        assert!(bucket.take(1, at(100_000), &settings).is_err());
        // A batch takes its items' tokens at once or none.
        assert!(bucket.take(2, at(100_500), &settings).is_err());
        assert_eq!(bucket.take(1, at(100_500), &settings), Ok(()));
    }

    #[test]
    fn no_rate_no_limit() {
        let settings = TenantSettings::default();
        let mut bucket = SubmitBucket::new(at(0), &settings);
        for _ in 0..1000 {
            assert_eq!(bucket.take(1, at(0), &settings), Ok(()));
        }
    }

    #[test]
    fn retry_after_rounds_up() {
        let check = |ms: u64, secs: u64| {
            assert_eq!(retry_after_secs(Duration::from_millis(ms)), secs, "{ms}")
        };
        check(0, 1);
        check(1, 1);
        check(1000, 1);
        check(1001, 2);
        check(2500, 3);
    }
}
