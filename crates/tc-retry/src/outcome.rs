//! [`Outcome`]: what one attempt came to, as the classifier takes it.

use std::time::{Duration, SystemTime};

/// What one attempt of a call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The downstream answered with an HTTP status.
    Status {
        /// The status code, as received (not necessarily in `100..=599`).
        code: u16,
        /// The `Retry-After` header, if the response carried one.
        retry_after: Option<RetryAfter>,
    },
    /// The call did not finish within its timeout.
    Timeout,
    /// The connection was refused, reset, or closed mid-response.
    Connect,
    /// The response body was over the caller's size cap.
    ResponseTooLarge,
    /// The client refused the destination (not a public address).
    DestinationDenied,
    /// The destination's credentials could not be had (its OAuth2 token
    /// endpoint failed): the call was not sent. Retried: the
    /// endpoint may recover, and nothing reached the destination.
    AuthFailed,
    /// Any other error, e.g. a reply that is not HTTP.
    Other,
}

impl Outcome {
    /// The stable reason string for this outcome: `http_<status>`, `timeout`,
    /// `connect`, `response_too_large`, `destination_denied`, `auth_failed`
    /// or `error`.
    pub fn reason(&self) -> String {
        match self {
            Outcome::Status { code, .. } => format!("http_{code}"),
            Outcome::Timeout => "timeout".to_owned(),
            Outcome::Connect => "connect".to_owned(),
            Outcome::ResponseTooLarge => "response_too_large".to_owned(),
            Outcome::DestinationDenied => "destination_denied".to_owned(),
            Outcome::AuthFailed => "auth_failed".to_owned(),
            Outcome::Other => "error".to_owned(),
        }
    }
}

/// A `Retry-After` header, parsed once when its response arrived.
///
/// The HTTP-date form names a moment, and the delay it asks for is that
/// moment minus the arrival, not minus the time the decision happens to be
/// made: [`RetryAfter::parse`] takes the arrival time and keeps only the
/// delay, so every reader (the task's retry, the destination's backoff)
/// sees the same wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter {
    /// The delay the header asks for; `None` when it is unusable (the
    /// backoff is used instead).
    pub wait: Option<Duration>,
}

impl RetryAfter {
    /// Parses a header `value` received at `received_at` (see
    /// [`crate::parse_retry_after`]).
    pub fn parse(value: &str, received_at: SystemTime) -> RetryAfter {
        RetryAfter {
            wait: crate::parse_retry_after(value, received_at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_stable_strings() {
        let cases = [
            (
                Outcome::Status {
                    code: 503,
                    retry_after: None,
                },
                "http_503",
            ),
            (
                Outcome::Status {
                    code: 0,
                    retry_after: None,
                },
                "http_0",
            ),
            (
                Outcome::Status {
                    code: u16::MAX,
                    retry_after: None,
                },
                "http_65535",
            ),
            (Outcome::Timeout, "timeout"),
            (Outcome::Connect, "connect"),
            (Outcome::ResponseTooLarge, "response_too_large"),
            (Outcome::DestinationDenied, "destination_denied"),
            (Outcome::AuthFailed, "auth_failed"),
            (Outcome::Other, "error"),
        ];
        for (outcome, reason) in cases {
            assert_eq!(outcome.reason(), reason, "{outcome:?}");
        }
    }
}
