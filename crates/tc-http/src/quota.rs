//! A tenant's submit rate on this node: one [`SubmitBucket`] per tenant,
//! kept in memory. The rate holds per node (documented in api.md): with N
//! nodes a tenant may submit up to N times its rate in all. `max_pending`
//! is the store's to enforce (one count on every node).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tc_model::Timestamp;
use tc_model::tenant::TenantSettings;
use tc_model::tenant::quota::{QuotaLimit, SubmitBucket, retry_after_secs};

use crate::error::ApiError;

/// Past this many buckets, the full ones are forgotten (a fresh bucket is
/// full: forgetting one changes nothing).
const MAX_BUCKETS: usize = 1000;

/// This node's submit buckets, by tenant.
#[derive(Debug, Default)]
pub(crate) struct SubmitBuckets {
    /// Each bucket with the settings it was last drawn under (to tell
    /// whether it is full again).
    buckets: Mutex<HashMap<String, (SubmitBucket, TenantSettings)>>,
}

impl SubmitBuckets {
    /// Takes one submit's token from `tenant`'s bucket at `now`, or answers
    /// the 429 naming the rate, with how long until a token comes.
    pub(crate) fn take(
        &self,
        tenant: &str,
        now: Timestamp,
        settings: &TenantSettings,
    ) -> Result<(), ApiError> {
        let Some(rate) = settings.submit_rate_per_s else {
            return Ok(());
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(tenant) {
            buckets.retain(|_, (bucket, drawn_under)| !bucket.is_full(now, drawn_under));
        }
        let (bucket, drawn_under) = buckets
            .entry(tenant.to_owned())
            .or_insert_with(|| (SubmitBucket::new(now, settings), settings.clone()));
        *drawn_under = settings.clone();
        bucket
            .take(1, now, settings)
            .map_err(|wait| refused(rate, settings, wait))
    }
}

impl SubmitBuckets {
    /// How many submits `tenant`'s bucket allows now; `None` without a
    /// rate. Takes nothing ([`SubmitBuckets::take_n`] takes what was used).
    pub(crate) fn allowance(
        &self,
        tenant: &str,
        now: Timestamp,
        settings: &TenantSettings,
    ) -> Option<u64> {
        settings.submit_rate_per_s?;
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        match buckets.get_mut(tenant) {
            Some((bucket, _)) => bucket.available(now, settings),
            None => SubmitBucket::new(now, settings).available(now, settings),
        }
    }

    /// Takes `n` tokens from `tenant`'s bucket, as many as it has if fewer
    /// (a bulk retry takes what its [`SubmitBuckets::allowance`] let it
    /// use; another request may have taken some since).
    pub(crate) fn take_n(&self, tenant: &str, n: u64, now: Timestamp, settings: &TenantSettings) {
        if settings.submit_rate_per_s.is_none() || n == 0 {
            return;
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let (bucket, drawn_under) = buckets
            .entry(tenant.to_owned())
            .or_insert_with(|| (SubmitBucket::new(now, settings), settings.clone()));
        *drawn_under = settings.clone();
        let have = bucket.available(now, settings).unwrap_or(0);
        let n = u32::try_from(n.min(have)).unwrap_or(u32::MAX);
        // `n` is at most what the bucket holds: the take succeeds.
        let _ = bucket.take(n, now, settings);
    }
}

/// The 429 of a submit past its tenant's rate.
fn refused(rate: f64, settings: &TenantSettings, wait: Duration) -> ApiError {
    let retry_after = retry_after_secs(wait);
    let burst = settings.bucket_size().unwrap_or(1.0);
    ApiError::QuotaExceeded {
        message: format!(
            "{}: the tenant's submit rate of {rate} per second (burst {burst}) is used up \
             on this node; retry in {retry_after} s",
            QuotaLimit::SubmitRate.as_str()
        ),
        retry_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_refuses_past_its_burst_and_names_itself() {
        let buckets = SubmitBuckets::default();
        let settings = TenantSettings {
            submit_rate_per_s: Some(0.5),
            submit_burst: Some(2),
            ..TenantSettings::default()
        };
        let at = Timestamp::from_millis(0);
        assert!(buckets.take("a", at, &settings).is_ok());
        assert!(buckets.take("a", at, &settings).is_ok());
        match buckets.take("a", at, &settings) {
            Err(ApiError::QuotaExceeded {
                message,
                retry_after,
            }) => {
                assert!(message.starts_with("submit_rate_per_s: "), "{message}");
                assert_eq!(retry_after, 2);
            }
            other => panic!("{other:?}"),
        }
        // Another tenant has its own bucket; no rate, no bucket.
        assert!(buckets.take("b", at, &settings).is_ok());
        for _ in 0..100 {
            assert!(buckets.take("c", at, &TenantSettings::default()).is_ok());
        }
    }
}
