//! A tenant's submit rate: a token bucket per tenant, refilled continuously
//! at `submit_rate_per_s` up to its size ([`super::TenantSettings::bucket_size`]).
//! Each node keeps its own buckets (a rate holds per node; documented), and
//! a submit that finds the bucket empty is told when the next token comes.

use std::collections::BTreeMap;
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

    /// How many whole tokens the bucket holds at `now` (refilled first);
    /// `None` without a rate (no limit).
    pub fn available(&mut self, now: Timestamp, settings: &TenantSettings) -> Option<u64> {
        let (rate, size) = (settings.submit_rate_per_s?, settings.bucket_size()?);
        let earned = now.duration_since(self.refilled).as_secs_f64() * rate;
        self.tokens = (self.tokens + earned).min(size);
        self.refilled = now;
        // Saturating float-to-int: a bucket holds at most 1e6 tokens.
        Some(self.tokens.floor() as u64)
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

/// What retries of tenants' tasks may do under the tenants' quotas, as
/// submits would: a retry makes a task pending again, so it counts against
/// the tenant's `max_pending` (the tasks not yet terminal, counted by the
/// store inside the retry's transaction) and, for a bulk retry, against the
/// tenant's submit rate on this node (the tokens the caller found in its
/// buckets, [`RetryQuota::new`]). Tasks without a tenant have no quota.
///
/// An adapter walks the tasks it would retry in order: before the first
/// task of a tenant in a transaction it tells the quota that tenant's
/// `max_pending` and how many of its tasks are open ([`RetryQuota::learn`]),
/// then asks [`RetryQuota::admit`] for each task and retries the admitted
/// ones only. The rule is here once; the adapters count and write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetryQuota {
    /// Per tenant with a submit rate: how many more retries the rate allows.
    rate_allowance: BTreeMap<String, u64>,
    /// Per tenant learnt in this transaction: its limit and open tasks.
    room: BTreeMap<String, Room>,
    refused: u64,
    retried: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Room {
    limit: Option<u64>,
    open: u64,
}

/// [`RetryQuota::admit`]'s answer for one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Retry it (counted as open, and against the rate).
    Admitted,
    /// Its tenant has this `max_pending` tasks open already.
    OverPending(u64),
    /// Its tenant's submit rate on this node is used up.
    OverRate,
}

impl RetryQuota {
    /// A quota whose submit rates allow, per tenant named, that many
    /// retries; a tenant not named has no rate (a single retry's caller
    /// takes its token itself and names none).
    pub fn new(rate_allowance: BTreeMap<String, u64>) -> RetryQuota {
        RetryQuota {
            rate_allowance,
            ..RetryQuota::default()
        }
    }

    /// Whether `tenant`'s room is known in this transaction (tasks without
    /// a tenant, [`super::NO_TENANT`], need none).
    pub fn knows(&self, tenant: &str) -> bool {
        tenant == super::NO_TENANT || self.room.contains_key(tenant)
    }

    /// `tenant`'s `max_pending` (`None`: no limit, or no such tenant) and
    /// how many of its tasks are pending or running now (an adapter may
    /// stop counting at the limit).
    pub fn learn(&mut self, tenant: &str, max_pending: Option<u64>, open: u64) {
        self.room.insert(
            tenant.to_owned(),
            Room {
                limit: max_pending,
                open,
            },
        );
    }

    /// A new transaction starts: the counts learnt before are stale (tasks
    /// ended or were claimed meanwhile); the rate's allowance and the tally
    /// go on.
    pub fn new_transaction(&mut self) {
        self.room.clear();
    }

    /// Whether one more of `tenant`'s tasks may be retried now; an admitted
    /// one is counted as open and against the rate, a refused one in
    /// [`RetryQuota::refused`].
    pub fn admit(&mut self, tenant: &str) -> Admission {
        if tenant == super::NO_TENANT {
            return Admission::Admitted;
        }
        let room = self.room.entry(tenant.to_owned()).or_insert(Room {
            limit: None,
            open: 0,
        });
        if let Some(limit) = room.limit.filter(|&limit| room.open >= limit) {
            self.refused += 1;
            return Admission::OverPending(limit);
        }
        if let Some(left) = self.rate_allowance.get_mut(tenant) {
            if *left == 0 {
                self.refused += 1;
                return Admission::OverRate;
            }
            *left -= 1;
        }
        room.open += 1;
        *self.retried.entry(tenant.to_owned()).or_default() += 1;
        Admission::Admitted
    }

    /// How many tasks [`RetryQuota::admit`] refused.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// How many tasks of each tenant were admitted (the caller takes that
    /// many tokens from the tenant's bucket).
    pub fn retried(&self) -> &BTreeMap<String, u64> {
        &self.retried
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
    fn available_counts_whole_tokens_after_the_refill() {
        let settings = TenantSettings {
            submit_rate_per_s: Some(2.0),
            submit_burst: Some(3),
            ..TenantSettings::default()
        };
        let mut bucket = SubmitBucket::new(at(0), &settings);
        assert_eq!(bucket.available(at(0), &settings), Some(3));
        assert_eq!(bucket.take(3, at(0), &settings), Ok(()));
        assert_eq!(bucket.available(at(0), &settings), Some(0));
        assert_eq!(bucket.available(at(400), &settings), Some(0));
        assert_eq!(bucket.available(at(500), &settings), Some(1));
        assert_eq!(bucket.available(at(60_000), &settings), Some(3));
        let none = TenantSettings::default();
        assert_eq!(
            SubmitBucket::new(at(0), &none).available(at(0), &none),
            None
        );
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
    fn retries_count_against_max_pending_and_the_rate() {
        use Admission::{Admitted, OverPending, OverRate};
        // (tenant, max_pending, open, allowance, admissions asked, answers)
        fn check(
            limit: Option<u64>,
            open: u64,
            allowance: Option<u64>,
            asks: usize,
            expected: &[Admission],
        ) {
            let rates = allowance
                .map(|n| BTreeMap::from([("t".to_owned(), n)]))
                .unwrap_or_default();
            let mut quota = RetryQuota::new(rates);
            assert!(!quota.knows("t"));
            quota.learn("t", limit, open);
            assert!(quota.knows("t"));
            let got: Vec<Admission> = (0..asks).map(|_| quota.admit("t")).collect();
            assert_eq!(got, expected, "{limit:?} {open} {allowance:?}");
            let admitted = expected.iter().filter(|a| **a == Admitted).count() as u64;
            assert_eq!(quota.refused(), asks as u64 - admitted);
            assert_eq!(quota.retried().get("t").copied().unwrap_or(0), admitted);
        }
        check(None, 5, None, 3, &[Admitted, Admitted, Admitted]);
        check(Some(2), 0, None, 3, &[Admitted, Admitted, OverPending(2)]);
        check(Some(2), 2, None, 1, &[OverPending(2)]);
        check(Some(8), 7, None, 2, &[Admitted, OverPending(8)]);
        check(None, 0, Some(1), 2, &[Admitted, OverRate]);
        check(Some(1), 0, Some(5), 2, &[Admitted, OverPending(1)]);
        check(None, 0, Some(0), 1, &[OverRate]);
    }

    #[test]
    fn tasks_without_a_tenant_have_no_quota_and_counts_are_per_transaction() {
        let mut quota = RetryQuota::new(BTreeMap::new());
        assert!(quota.knows(crate::tenant::NO_TENANT));
        for _ in 0..10 {
            assert_eq!(quota.admit(crate::tenant::NO_TENANT), Admission::Admitted);
        }
        assert!(quota.retried().is_empty());
        quota.learn("t", Some(1), 1);
        assert_eq!(quota.admit("t"), Admission::OverPending(1));
        // The next transaction counts again: a task ended meanwhile.
        quota.new_transaction();
        assert!(!quota.knows("t"));
        quota.learn("t", Some(1), 0);
        assert_eq!(quota.admit("t"), Admission::Admitted);
        assert_eq!(quota.refused(), 1);
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
