//! A tenant's submit rate on this node: one [`SubmitBucket`] per tenant,
//! kept in memory. The rate holds per node (documented in api.md): with N
//! nodes a tenant may submit up to N times its rate in all. `max_pending`
//! is the store's to enforce (one count on every node).
//!
//! A bucket belongs to one tenant as created: it is keyed by the tenant's
//! name and its `created_at` as the store answers them with the key's owner,
//! so a tenant deleted and made again (on any node) starts with a full
//! bucket, and a node never has to be told of a delete. A bucket drawn under
//! other rate settings than the caller's (changed on any node) starts full
//! under the new ones. A delete through this node also forgets the bucket.

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

/// This node's submit buckets, by tenant name.
#[derive(Debug, Default)]
pub(crate) struct SubmitBuckets {
    buckets: Mutex<HashMap<String, Drawn>>,
}

/// One tenant's bucket, with whose it is and the settings it is drawn
/// under.
#[derive(Debug)]
struct Drawn {
    bucket: SubmitBucket,
    /// The tenant's `created_at`: another one is another tenant of the
    /// same name.
    created_at: Timestamp,
    /// The settings it was drawn under (to tell whether it is full again,
    /// and whether the rate changed since).
    settings: TenantSettings,
}

/// The tenant a submit's token is taken for: its name, and its creation
/// time and settings as the store answered them for this request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BucketOwner<'a> {
    pub(crate) name: &'a str,
    pub(crate) created_at: Timestamp,
    pub(crate) settings: &'a TenantSettings,
}

/// Whether two settings give the same bucket: the same rate and size.
fn same_rate(a: &TenantSettings, b: &TenantSettings) -> bool {
    a.submit_rate_per_s == b.submit_rate_per_s && a.bucket_size() == b.bucket_size()
}

impl SubmitBuckets {
    /// Takes one submit's token from `owner`'s bucket at `now`, or answers
    /// the 429 naming the rate, with how long until a token comes. A bucket
    /// of an earlier tenant of that name, or of other rate settings, is
    /// replaced by a full one first.
    pub(crate) fn take(&self, owner: BucketOwner<'_>, now: Timestamp) -> Result<(), ApiError> {
        let settings = owner.settings;
        let Some(rate) = settings.submit_rate_per_s else {
            return Ok(());
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        drawn_for(&mut buckets, owner, now)
            .bucket
            .take(1, now, settings)
            .map_err(|wait| refused(rate, settings, wait))
    }

    /// How many submits `owner`'s bucket allows now; `None` without a
    /// rate. Takes nothing ([`SubmitBuckets::take_n`] takes what was used).
    pub(crate) fn allowance(&self, owner: BucketOwner<'_>, now: Timestamp) -> Option<u64> {
        owner.settings.submit_rate_per_s?;
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        drawn_for(&mut buckets, owner, now)
            .bucket
            .available(now, owner.settings)
    }

    /// Takes `n` tokens from `owner`'s bucket, as many as it has if fewer
    /// (a bulk retry takes what its [`SubmitBuckets::allowance`] let it
    /// use; another request may have taken some since).
    pub(crate) fn take_n(&self, owner: BucketOwner<'_>, n: u64, now: Timestamp) {
        if owner.settings.submit_rate_per_s.is_none() || n == 0 {
            return;
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = &mut drawn_for(&mut buckets, owner, now).bucket;
        let have = bucket.available(now, owner.settings).unwrap_or(0);
        let n = u32::try_from(n.min(have)).unwrap_or(u32::MAX);
        // `n` is at most what the bucket holds: the take succeeds.
        let _ = bucket.take(n, now, owner.settings);
    }

    /// Forgets `tenant`'s bucket (it was deleted through this node).
    pub(crate) fn forget(&self, tenant: &str) {
        self.buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(tenant);
    }
}

/// `owner`'s bucket in `buckets`: a bucket of an earlier tenant of that
/// name, or of other rate settings, is replaced by a full one first; past
/// [`MAX_BUCKETS`] the full ones are forgotten.
fn drawn_for<'m>(
    buckets: &'m mut HashMap<String, Drawn>,
    owner: BucketOwner<'_>,
    now: Timestamp,
) -> &'m mut Drawn {
    let settings = owner.settings;
    if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(owner.name) {
        buckets.retain(|_, drawn| !drawn.bucket.is_full(now, &drawn.settings));
    }
    let fresh = || Drawn {
        bucket: SubmitBucket::new(now, settings),
        created_at: owner.created_at,
        settings: settings.clone(),
    };
    let drawn = buckets.entry(owner.name.to_owned()).or_insert_with(fresh);
    if drawn.created_at != owner.created_at || !same_rate(&drawn.settings, settings) {
        *drawn = fresh();
    }
    drawn
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
        let owner = |name, settings| BucketOwner {
            name,
            created_at: at,
            settings,
        };
        assert!(buckets.take(owner("a", &settings), at).is_ok());
        assert!(buckets.take(owner("a", &settings), at).is_ok());
        match buckets.take(owner("a", &settings), at) {
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
        assert!(buckets.take(owner("b", &settings), at).is_ok());
        let unlimited = TenantSettings::default();
        for _ in 0..100 {
            assert!(buckets.take(owner("c", &unlimited), at).is_ok());
        }
    }

    #[test]
    fn a_bucket_is_the_tenant_s_as_created_under_its_rate() {
        let buckets = SubmitBuckets::default();
        let settings = TenantSettings {
            submit_rate_per_s: Some(0.001),
            submit_burst: Some(1),
            ..TenantSettings::default()
        };
        let at = Timestamp::from_millis(0);
        let check = |created_at: i64, settings: &TenantSettings, passes: bool| {
            let owner = BucketOwner {
                name: "a",
                created_at: Timestamp::from_millis(created_at),
                settings,
            };
            assert_eq!(
                buckets.take(owner, at).is_ok(),
                passes,
                "{created_at} {settings:?}"
            );
        };
        check(0, &settings, true);
        check(0, &settings, false);
        // Made again (elsewhere): full.
        check(5, &settings, true);
        check(5, &settings, false);
        // Another weight: the same bucket.
        let heavier = TenantSettings {
            weight: 7,
            ..settings.clone()
        };
        check(5, &heavier, false);
        // Another burst: full under it.
        let larger = TenantSettings {
            submit_burst: Some(2),
            ..heavier.clone()
        };
        check(5, &larger, true);
        check(5, &larger, true);
        check(5, &larger, false);
        // Deleted here: forgotten.
        buckets.forget("a");
        check(5, &larger, true);
    }
}
