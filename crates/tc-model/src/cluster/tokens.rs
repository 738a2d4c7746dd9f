//! One destination's token bucket as the store keeps it, and the one rule
//! that refills it and takes a grant from it ([`Bucket::settle`]).

use std::time::Duration;

use crate::Timestamp;

/// What a node asks of one destination's bucket: tokens back from its last
/// grant (those its claim did not use), then a new grant.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenAsk {
    /// `host:port`.
    pub destination: String,
    /// The destination's `rate_per_s` as this node read it.
    pub rate_per_s: f64,
    /// Its bucket's size ([`crate::destination::DestinationSettings::bucket_size`]).
    pub size: f64,
    /// Tokens this node took and did not use, returned first.
    pub give_back: u32,
    /// Tokens wanted now (0: only giving back).
    pub take: u32,
}

/// What the store answered one [`TokenAsk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenGrant {
    /// Tokens granted, at most the ask's `take`.
    pub granted: u32,
    /// When fewer were granted than asked: how long until the next whole
    /// token is there (a delay, so that clocks of nodes and database need
    /// not agree).
    pub next_in: Option<Duration>,
}

/// A destination's bucket: the tokens it held at `at`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// Tokens at `at` (fractions count towards the next one).
    pub tokens: f64,
    /// When `tokens` was computed.
    pub at: Timestamp,
}

impl Bucket {
    /// A bucket first met: full, as a node's own bucket started.
    pub fn full(size: f64, now: Timestamp) -> Bucket {
        Bucket {
            tokens: size.max(0.0),
            at: now,
        }
    }

    /// Refills the bucket up to `now` at the ask's rate, up to its size,
    /// takes the tokens given back (up to the size: never more than a
    /// full bucket), then grants what whole tokens allow of the ask.
    /// Returns the bucket to store and the grant. A `now` before the
    /// bucket's time (another node's clock) refills nothing and keeps the
    /// later time.
    pub fn settle(self, ask: &TokenAsk, now: Timestamp) -> (Bucket, TokenGrant) {
        let size = ask.size.max(0.0);
        let rate = if ask.rate_per_s.is_finite() {
            ask.rate_per_s.max(0.0)
        } else {
            0.0
        };
        let at = self.at.max(now);
        let earned = now.duration_since(self.at).as_secs_f64() * rate;
        let mut tokens = (self.tokens + earned).min(size);
        tokens = (tokens + f64::from(ask.give_back)).min(size);
        let whole = tokens.floor().max(0.0);
        let granted = f64::from(ask.take).min(whole);
        tokens -= granted;
        // `granted` is a whole number at most `take`, a u32.
        let granted = granted as u32;
        let next_in = (granted < ask.take && rate > 0.0).then(|| {
            let secs = ((1.0 - tokens).max(0.0) / rate).min(3600.0);
            // At least a millisecond: the store's times are whole ones.
            Duration::from_secs_f64(secs).max(Duration::from_millis(1))
        });
        (Bucket { tokens, at }, TokenGrant { granted, next_in })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + ms)
    }

    fn ask(rate: f64, size: f64, give_back: u32, take: u32) -> TokenAsk {
        TokenAsk {
            destination: "d:80".into(),
            rate_per_s: rate,
            size,
            give_back,
            take,
        }
    }

    /// Each row: the bucket (tokens, at ms), the ask (rate, size, back,
    /// take) at `now` ms, the tokens left, the grant and its wait (ms).
    #[test]
    fn a_bucket_refills_takes_back_and_grants_whole_tokens() {
        #[allow(clippy::type_complexity)]
        let check = |bucket: (f64, i64),
                     a: (f64, f64, u32, u32),
                     now: i64,
                     left: f64,
                     granted: u32,
                     next_in_ms: Option<u64>| {
            let b = Bucket {
                tokens: bucket.0,
                at: at(bucket.1),
            };
            let (after, grant) = b.settle(&ask(a.0, a.1, a.2, a.3), at(now));
            assert!(
                (after.tokens - left).abs() < 1e-9,
                "{bucket:?} {a:?}: {after:?}"
            );
            assert_eq!(after.at, at(now.max(bucket.1)), "{bucket:?} {a:?}");
            assert_eq!(grant.granted, granted, "{bucket:?} {a:?}");
            assert_eq!(
                grant.next_in.map(|d| d.as_millis() as u64),
                next_in_ms,
                "{bucket:?} {a:?}"
            );
        };
        // A full bucket of 5 grants 3 of 3, then 2 of 3 (and says when).
        check((5.0, 0), (50.0, 5.0, 0, 3), 0, 2.0, 3, None);
        check((2.0, 0), (50.0, 5.0, 0, 3), 0, 0.0, 2, Some(20));
        // 100 ms at 50/s earn 5, never above the size.
        check((0.0, 0), (50.0, 5.0, 0, 10), 100, 0.0, 5, Some(20));
        check((0.0, 0), (50.0, 5.0, 0, 1), 1_000, 4.0, 1, None);
        // Half a token: none granted, the rest in 10 ms.
        check((0.5, 0), (50.0, 5.0, 0, 1), 0, 0.5, 0, Some(10));
        // Given back, then taken by the same ask; never above the size.
        check((0.0, 0), (50.0, 5.0, 2, 1), 0, 1.0, 1, None);
        check((4.0, 0), (50.0, 5.0, 3, 0), 0, 5.0, 0, None);
        // Another node's clock behind: nothing earned, the later time kept.
        check((1.0, 100), (50.0, 5.0, 0, 2), 50, 0.0, 1, Some(20));
    }

    /// Many nodes asking in turn, in any order, never get more than the
    /// bucket's size plus what the rate earned: 3 nodes asking every 5 ms
    /// for 10 s at 50/s with a bucket of 5 get 505 at most.
    #[test]
    fn grants_never_exceed_the_size_plus_the_rate() {
        let mut bucket = Bucket::full(5.0, at(0));
        let mut total = 0u64;
        for step in 0..2_000i64 {
            for _node in 0..3 {
                let (b, grant) = bucket.settle(&ask(50.0, 5.0, 0, 4), at(step * 5));
                bucket = b;
                total += u64::from(grant.granted);
            }
        }
        assert!(total <= 505, "{total}");
        assert!(total >= 495, "{total}: the rate is used");
    }
}
