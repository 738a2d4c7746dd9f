//! Retry decisions for HTTP calls: after each attempt, should the caller stop
//! with success, try again after some delay, or give up, and why.
//!
//! The crate is pure (no I/O, no clock, no async runtime) and depends on no
//! other taskcenter crate, so any project can use it. The caller performs the
//! call, describes what happened as an [`Outcome`], and [`classify()`] returns a
//! [`Decision`]. Randomness comes from a [`fastrand::Rng`] the caller owns, so
//! a seeded generator makes every decision reproducible.
//!
//! # Rules
//!
//! | Outcome                                 | Decision                                   |
//! |-----------------------------------------|--------------------------------------------|
//! | 2xx                                     | [`Decision::Success`]                      |
//! | 5xx, [`Outcome::Timeout`], [`Outcome::Connect`] | retry after [`backoff()`]            |
//! | [`Outcome::AuthFailed`]                 | retry after [`backoff()`] (`auth_failed`)    |
//! | 408, 429                                | retry after `Retry-After` if usable, else [`backoff()`] |
//! | any other 4xx, 1xx, 3xx                 | fail at once                               |
//! | a status outside `100..=599`            | fail at once                               |
//! | [`Outcome::ResponseTooLarge`]           | fail at once (`response_too_large`)        |
//! | [`Outcome::DestinationDenied`]          | fail at once (`destination_denied`)        |
//! | [`Outcome::Other`]                      | fail at once (`error`)                     |
//!
//! [`Outcome::Other`] is not retried: the downstream may already have acted on
//! the request, and only the failures listed above are promised to be retried.
//!
//! A retryable outcome on the last allowed attempt (`attempt >= max_attempts`)
//! fails with the same reason it would have been retried for.
//!
//! Reasons are stable strings meant for storage and metrics: `http_<status>`
//! (e.g. `http_503`), `timeout`, `connect`, `response_too_large`,
//! `destination_denied`, `error`.
//!
//! # Backoff
//!
//! The delay before retrying after attempt `n` (1-based; 0 counts as 1) starts
//! from `raw = min(cap, base * 2^(n-1))` and adds *equal jitter*:
//! `delay = raw + raw * 0.5 * U[0, 1)`, so `delay` lies in `[raw, 1.5 * raw)`.
//! Equal jitter keeps a floor of `raw`, so a struggling downstream is never hit
//! again sooner than the exponential schedule says, while the random upper
//! half still spreads out the retries of many callers that failed together.
//! The arithmetic saturates: any attempt number up to `u32::MAX` and any
//! [`Duration`](std::time::Duration) in the [`Policy`] give a delay, never a
//! panic (a delay beyond `Duration::MAX` is `Duration::MAX`).
//!
//! # Retry-After
//!
//! For 408 and 429 the `Retry-After` header is honoured in both of its forms:
//! delta-seconds (ASCII digits only) or an HTTP-date, whose delay is measured
//! from when the response arrived (the `received_at` given to [`RetryAfter::parse`]); a date in the
//! past means no delay. The honoured delay is bounded by
//! [`Policy::max_retry_after`], not by the backoff cap: a server asking for a
//! minute gets its minute. A value that parses as neither form is ignored and
//! the plain backoff is used. See [`parse_retry_after`].
//!
//! # Example
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use tc_retry::{Decision, Outcome, Policy, RetryAfter, classify};
//!
//! let policy = Policy::default();
//! let mut rng = fastrand::Rng::with_seed(7);
//! let max_attempts = 3;
//!
//! // Attempt 1 hit a 503: retry after 200 ms of backoff plus jitter.
//! let outcome = Outcome::Status { code: 503, retry_after: None };
//! match classify(&outcome, 1, max_attempts, &policy, &mut rng) {
//!     Decision::Retry { delay, reason } => {
//!         assert!(delay >= Duration::from_millis(200) && delay < Duration::from_millis(300));
//!         assert_eq!(reason, "http_503");
//!     }
//!     other => panic!("expected a retry, got {other:?}"),
//! }
//!
//! // Attempt 2 was throttled; the server's Retry-After wins over the backoff.
//! let outcome = Outcome::Status {
//!     code: 429,
//!     retry_after: Some(RetryAfter::parse("30", SystemTime::now())),
//! };
//! assert_eq!(
//!     classify(&outcome, 2, max_attempts, &policy, &mut rng),
//!     Decision::Retry { delay: Duration::from_secs(30), reason: "http_429".into() },
//! );
//!
//! // Attempt 3 timed out, and it was the last one allowed.
//! assert_eq!(
//!     classify(&Outcome::Timeout, 3, max_attempts, &policy, &mut rng),
//!     Decision::Fail { reason: "timeout".into() },
//! );
//!
//! // A 404 is never retried.
//! let outcome = Outcome::Status { code: 404, retry_after: None };
//! assert_eq!(
//!     classify(&outcome, 1, max_attempts, &policy, &mut rng),
//!     Decision::Fail { reason: "http_404".into() },
//! );
//! ```

mod backoff;
mod classify;
mod outcome;
mod rate_limit;
mod retry_after;

pub use backoff::{Policy, backoff};
pub use classify::{Decision, classify};
pub use outcome::{Outcome, RetryAfter};
pub use rate_limit::{RATE_LIMIT_FIELDS, RateLimit, parse_rate_limit};
pub use retry_after::parse_retry_after;
