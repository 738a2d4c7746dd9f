//! The downstream port: what the worker needs to perform one try of a task.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

use crate::Delivery;

/// What the downstream answered, whatever the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownResponse {
    /// The HTTP status code.
    pub status: u16,
    /// The `Retry-After` header as sent (seconds or an HTTP date), if it was
    /// present and printable.
    pub retry_after: Option<String>,
    /// The `Content-Type` header as sent, if it was present and printable.
    pub content_type: Option<String>,
    /// The rate-limit fields among [`RATE_LIMIT_HEADERS`] that were present
    /// and printable, by their lower-case names, as sent: the worker paces
    /// the destination by them.
    pub rate_limit: Vec<(&'static str, String)>,
    /// The whole response body.
    pub body: Bytes,
}

/// The response fields that say how many calls a server's window has left
/// and when it resets (the spellings tc-retry's `parse_rate_limit` reads).
pub const RATE_LIMIT_HEADERS: [&str; 6] = [
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

/// Why a try got no HTTP answer, in kinds the retry policy can act on.
///
/// The kinds map one-to-one onto tc-retry's outcomes, whose reason strings
/// (`timeout`, `connect`, ...) are the only ones; the strings here carry the
/// transport's own explanation for logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DownError {
    /// The call did not finish within [`Delivery::timeout`].
    #[error("downstream call timed out")]
    Timeout,
    /// The connection failed: refused, reset, closed before the response was
    /// complete, DNS or TLS failure. Worth retrying.
    #[error("downstream connection failed: {0}")]
    Connect(String),
    /// The response body was larger than the configured cap. Not worth
    /// retrying: the downstream would send the same again.
    #[error("downstream response exceeds {limit} bytes")]
    ResponseTooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
    /// The destination, as resolved when connecting, is not a public
    /// address and the client refuses those (SSRF protection). Not worth
    /// retrying: the same name leads to the same place.
    #[error("downstream destination denied: {0}")]
    DestinationDenied(String),
    /// The destination's credentials could not be had: its OAuth2 token
    /// endpoint failed or answered no token, so the call was not
    /// sent. Made by the worker's auth layer around a downstream, never by a
    /// transport; the text names the endpoint's status, never a secret.
    #[error("auth_failed: {0}")]
    AuthFailed(String),
    /// Anything else: an invalid URL or header value, a reply that is not
    /// HTTP, an unsupported scheme.
    #[error("downstream call failed: {0}")]
    Other(String),
}

/// Performs one try of a task against its downstream.
///
/// # Contract for implementations
///
/// - The request is the [`Delivery`] as built: its method, url, headers in
///   their order and body, nothing added but what the transport itself
///   needs (`Host`, `Content-Length`). Which headers a delivery carries is
///   decided once, in [`Delivery::build`] (`Idempotency-Key`, `X-Task-Id`,
///   `X-Task-Attempt`, the signature, …), never by an implementation.
///   Delivery is at-least-once (a try whose answer was lost is tried
///   again), so the key is what lets the downstream swallow duplicates.
/// - Any HTTP answer, 2xx or not, is `Ok`: judging statuses is the retry
///   policy's job.
/// - [`Delivery::timeout`] bounds the whole call — connect, sending,
///   response headers and body — and running out yields
///   [`DownError::Timeout`].
/// - Dropping the returned future aborts the call and closes its connection:
///   that is how canceling a task stops a try in flight, and a half-read
///   connection must never be reused.
/// - No error message carries a header value (they may be credentials).
pub trait Downstream: Send + Sync + 'static {
    /// Sends `delivery` and returns the downstream's answer.
    fn send(
        &self,
        delivery: Delivery,
    ) -> impl Future<Output = Result<DownResponse, DownError>> + Send;
}

/// Lets one downstream be shared, e.g. between the worker and a test that
/// inspects a fake.
impl<D: Downstream> Downstream for Arc<D> {
    fn send(
        &self,
        delivery: Delivery,
    ) -> impl Future<Output = Result<DownResponse, DownError>> + Send {
        (**self).send(delivery)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_the_detail() {
        assert_eq!(
            DownError::ResponseTooLarge { limit: 1024 }.to_string(),
            "downstream response exceeds 1024 bytes"
        );
        assert_eq!(
            DownError::Connect("connection refused".into()).to_string(),
            "downstream connection failed: connection refused"
        );
    }
}
