//! What a valid submission is: the API's bounds ([`Limits`]), the error
//! that names the field a submission breaks ([`ValidationError`]), and the
//! rules of a url a task (or its callback) calls ([`check_url`]). Below
//! both the submission ([`crate::NewTask`]) and a task's callback
//! ([`crate::callback::Callback`]), which share them.

use std::time::Duration;

use crate::Method;
use crate::headers::HeaderError;

/// Bounds a submission must respect. Only the body limit is configurable; the
/// others are fixed by the API contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest body accepted, in bytes.
    pub max_body_bytes: usize,
}

impl Limits {
    /// The longest url, in bytes.
    pub const MAX_URL_BYTES: usize = 2048;
    /// The longest idempotency key, in bytes.
    pub const MAX_KEY_BYTES: usize = 255;
    /// The most attempts a task may ask for.
    pub const MAX_ATTEMPTS: u32 = 100;
    /// The shortest per-try timeout.
    pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);
    /// The longest per-try timeout.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
    /// The default body limit: 1 MiB.
    pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: Limits::DEFAULT_MAX_BODY_BYTES,
        }
    }
}

/// Why a submission is not a valid [`crate::NewTask`]. Each variant names its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// The url is not an absolute http(s) url with a host, or is too long.
    #[error("url: {0}")]
    Url(String),
    /// The idempotency key is empty, too long, not printable ASCII, or starts
    /// or ends with a space.
    #[error("idempotency_key: {0}")]
    IdempotencyKey(String),
    /// max_attempts is outside 1..=100.
    #[error("max_attempts: must be between 1 and {max}, got {got}", max = Limits::MAX_ATTEMPTS)]
    MaxAttempts {
        /// The value given.
        got: u32,
    },
    /// The body is larger than the configured limit.
    #[error("body: {got} bytes is over the limit of {limit} bytes")]
    Body {
        /// The body's size.
        got: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The timeout is outside 1 ms..=10 min.
    #[error("timeout: must be between 1 ms and 600000 ms, got {got_ms} ms")]
    Timeout {
        /// The value given, in milliseconds.
        got_ms: u128,
    },
    /// The delay is over 365 days.
    #[error("delay_ms: must be at most 365 days (31536000000 ms), got {got_ms} ms")]
    Delay {
        /// The value given, in milliseconds.
        got_ms: u128,
    },
    /// A method that sends no body (`GET`) was given one.
    #[error("body: a {method} sends no body")]
    BodyNotSent {
        /// The method.
        method: Method,
    },
    /// A header, or the set of them, breaks a rule (the message names
    /// `headers.<name>` or `headers`).
    #[error("{0}")]
    Headers(HeaderError),
    /// priority is above [`crate::priority::MAX_PRIORITY`].
    #[error("priority: must be between 0 and {max}, got {got}", max = crate::priority::MAX_PRIORITY)]
    Priority {
        /// The value given.
        got: u8,
    },
    /// flow_key is not 1 to 128 printable ASCII characters.
    #[error("flow_key: {0}")]
    FlowKey(String),
    /// The callback url breaks a rule of [`ValidationError::Url`].
    #[error("callback_url: {0}")]
    CallbackUrl(String),
    /// `callback_on` is not a non-empty subset of success, failed and
    /// canceled.
    #[error("callback_on: {0}")]
    CallbackOn(String),
}

impl ValidationError {
    /// The name of the offending field, as the API spells it.
    pub fn field(&self) -> &'static str {
        match self {
            ValidationError::Url(_) => "url",
            ValidationError::IdempotencyKey(_) => "idempotency_key",
            ValidationError::MaxAttempts { .. } => "max_attempts",
            ValidationError::Body { .. } => "body",
            ValidationError::Timeout { .. } => "timeout",
            ValidationError::Delay { .. } => "delay_ms",
            ValidationError::BodyNotSent { .. } => "body",
            ValidationError::Headers(_) => "headers",
            ValidationError::Priority { .. } => "priority",
            ValidationError::FlowKey(_) => "flow_key",
            ValidationError::CallbackUrl(_) => "callback_url",
            ValidationError::CallbackOn(_) => "callback_on",
        }
    }
}

pub(crate) fn check_url(url: &str) -> Result<(), ValidationError> {
    if url.len() > Limits::MAX_URL_BYTES {
        return Err(ValidationError::Url(format!(
            "{} bytes is over the limit of {} bytes",
            url.len(),
            Limits::MAX_URL_BYTES
        )));
    }
    let uri: http::Uri = url
        .parse()
        .map_err(|e| ValidationError::Url(format!("not a valid url: {e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(ValidationError::Url(format!(
                "scheme must be http or https, got {other:?}"
            )));
        }
        None => {
            return Err(ValidationError::Url(
                "must be an absolute http or https url".into(),
            ));
        }
    }
    let Some(authority) = uri.authority() else {
        return Err(ValidationError::Url("must have a host".into()));
    };
    if authority.host().is_empty() {
        return Err(ValidationError::Url("must have a host".into()));
    }
    if !crate::url::is_destination_host(authority.host()) {
        return Err(ValidationError::Url(format!(
            "the host must be a name of letters, digits, `.`, `-` and `_` (at most {} bytes), \
             an IPv4 address or an IPv6 address in brackets",
            crate::url::MAX_HOST_BYTES
        )));
    }
    if crate::url::canonical_host(authority.host()).is_none() {
        // `1.2.3.4.5` or `4294967296` look like IPv4 addresses and are none:
        // the WHATWG URL standard refuses them, so they would name no
        // destination.
        return Err(ValidationError::Url(
            "the host is not a valid name or IP address".into(),
        ));
    }
    if authority.as_str().contains('@') {
        // Credentials in a url end up in logs and the task view.
        return Err(ValidationError::Url(
            "must not contain user information".into(),
        ));
    }
    if crate::url::has_dot_segment(uri.path()) {
        // `/hooks/../admin` would pass a prefix check on the text and reach
        // `/admin` once the downstream resolves it.
        return Err(ValidationError::Url(
            "must not have `.` or `..` path segments, literal or percent-encoded".into(),
        ));
    }
    // `Authority::port` hides a port that does not fit in u16, so read it here.
    let raw = authority.as_str();
    let after_host = raw.rfind(']').unwrap_or(0);
    if let Some(colon) = raw[after_host..].rfind(':') {
        let port = &raw[after_host + colon + 1..];
        if !matches!(port.parse::<u16>(), Ok(p) if p > 0) {
            return Err(ValidationError::Url(
                "port must be between 1 and 65535".into(),
            ));
        }
    }
    Ok(())
}
