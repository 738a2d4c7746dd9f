//! Headers a task or a destination asks to send with its calls: the rules
//! they must follow (one place, used for both), how a view hides the values
//! that are credentials, and the one text form the stores keep.
//!
//! The rules: at most [`Headers::MAX_COUNT`] headers and
//! [`Headers::MAX_BYTES`] in names and values together; a name is an HTTP
//! token, case-insensitive, kept lower-cased, and may be given once; a value
//! is visible ASCII, space and tab (no CR, LF or NUL, so no header can be
//! smuggled in). Names the transport owns (`host`, `content-length`, …,
//! `proxy-*`) or that taskcenter sets itself (`idempotency-key`,
//! `webhook-signature`, `user-agent`, …) are refused: a header that could
//! change how a request is framed, or forge what the server vouches for,
//! never reaches the wire.

use std::collections::BTreeMap;
use std::fmt;

/// Names of headers whose values are credentials: a view shows
/// [`REDACTED`] in their place. They are stored and sent as given.
pub const SENSITIVE: [&str; 4] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
];

/// What a view shows instead of a [`SENSITIVE`] header's value.
pub const REDACTED: &str = "[redacted]";

/// Names that frame the request or belong to the connection: the HTTP
/// client sets them, from the url and the body.
const TRANSPORT: [&str; 9] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
];

/// Names taskcenter sets on every call itself (the delivery's own headers).
const OWN: [&str; 10] = [
    "idempotency-key",
    "traceparent",
    "tracestate",
    "x-task-id",
    "x-task-attempt",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "user-agent",
    "content-type",
];

/// Why a header (or the set) was refused. Its message starts with the
/// field as the API names it: `headers.<name>` for one header, `headers`
/// for the set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", self.field())]
pub struct HeaderError {
    /// The header's name, lower-cased, when the error is about one header
    /// whose name is a token.
    pub name: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl HeaderError {
    fn about(name: &str, message: impl Into<String>) -> HeaderError {
        HeaderError {
            name: Some(name.to_owned()),
            message: message.into(),
        }
    }

    fn of_set(message: impl Into<String>) -> HeaderError {
        HeaderError {
            name: None,
            message: message.into(),
        }
    }

    /// The field the error names: `headers.<name>` or `headers`.
    pub fn field(&self) -> String {
        match &self.name {
            Some(name) => format!("headers.{name}"),
            None => "headers".to_owned(),
        }
    }
}

/// A valid set of headers, names lower-cased, in name order. One that
/// exists has passed every rule (see the module docs). Its `Debug` shows
/// the names only: a value may be a credential.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Headers(BTreeMap<String, String>);

impl Headers {
    /// The most headers a set may hold.
    pub const MAX_COUNT: usize = 32;
    /// The most bytes a set's names and values may take together.
    pub const MAX_BYTES: usize = 8 * 1024;

    /// Checks every rule, or says what the first broken one is about.
    pub fn parse(
        pairs: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Headers, HeaderError> {
        let mut headers = BTreeMap::new();
        let mut bytes = 0usize;
        for (name, value) in pairs {
            if headers.len() == Headers::MAX_COUNT {
                return Err(HeaderError::of_set(format!(
                    "at most {} headers",
                    Headers::MAX_COUNT
                )));
            }
            if !is_token(&name) {
                return Err(HeaderError::of_set(format!(
                    "name {name:?} is not an HTTP token"
                )));
            }
            let name = name.to_ascii_lowercase();
            if let Some(why) = refusal(&name) {
                return Err(HeaderError::about(&name, why));
            }
            if !value.bytes().all(is_value_byte) {
                return Err(HeaderError::about(
                    &name,
                    "the value must be visible ASCII, space or tab (no CR, LF or NUL)",
                ));
            }
            bytes += name.len() + value.len();
            if headers.contains_key(&name) {
                return Err(HeaderError::about(
                    &name,
                    "given twice (names are case-insensitive)",
                ));
            }
            headers.insert(name, value);
        }
        if bytes > Headers::MAX_BYTES {
            return Err(HeaderError::of_set(format!(
                "names and values together must be at most {} bytes, got {bytes}",
                Headers::MAX_BYTES
            )));
        }
        Ok(Headers(headers))
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Each header as `(name, value)`, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// The value of `name` (lower case), if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Each header as a view shows it: a [`SENSITIVE`] one's value is
    /// [`REDACTED`].
    pub fn redacted(&self) -> impl Iterator<Item = (&str, &str)> {
        self.iter().map(|(name, value)| {
            if SENSITIVE.contains(&name) {
                (name, REDACTED)
            } else {
                (name, value)
            }
        })
    }

    /// The text the stores keep: a JSON object in name order; `None` for
    /// no headers (a NULL column).
    pub fn to_stored(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let object: serde_json::Map<String, serde_json::Value> = self
            .0
            .iter()
            .map(|(n, v)| (n.clone(), serde_json::Value::String(v.clone())))
            .collect();
        Some(serde_json::Value::Object(object).to_string())
    }

    /// Headers from the text [`Headers::to_stored`] wrote (`None` for a
    /// NULL column: no headers). Trusted as valid, as the store only keeps
    /// what passed [`Headers::parse`]; `Err` for text it never writes.
    pub fn from_stored(text: Option<&str>) -> Result<Headers, CorruptHeaders> {
        let Some(text) = text else {
            return Ok(Headers::default());
        };
        let serde_json::Value::Object(object) =
            serde_json::from_str(text).map_err(|_| CorruptHeaders)?
        else {
            return Err(CorruptHeaders);
        };
        object
            .into_iter()
            .map(|(name, value)| match value {
                serde_json::Value::String(value) => Ok((name, value)),
                _ => Err(CorruptHeaders),
            })
            .collect::<Result<_, _>>()
            .map(Headers)
    }

    /// These headers with `name` set to `value` by taskcenter itself (a
    /// topic's task carries its event's `webhook-id` and `event-type`):
    /// not checked against the rules a client's headers pass, as the name
    /// may be one of taskcenter's own.
    pub(crate) fn with_own(mut self, name: &str, value: String) -> Headers {
        self.0.insert(name.to_owned(), value);
        self
    }

    /// These headers over `defaults`, in name order: every default whose
    /// name is not set here, and all of these (a task's own header wins
    /// over its destination's).
    pub fn over<'a>(&'a self, defaults: &'a Headers) -> Vec<(&'a str, &'a str)> {
        let mut merged: BTreeMap<&str, &str> = defaults.iter().collect();
        merged.extend(self.iter());
        merged.into_iter().collect()
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// Stored header text that [`Headers::to_stored`] never writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stored headers are not a JSON object of strings")]
pub struct CorruptHeaders;

/// Why `name` (lower case) may not be given, if it may not.
fn refusal(name: &str) -> Option<&'static str> {
    if TRANSPORT.contains(&name) || name.starts_with("proxy-") {
        Some("is set by the HTTP client and cannot be given")
    } else if OWN.contains(&name) {
        Some("is set by taskcenter on every call and cannot be given")
    } else {
        None
    }
}

/// RFC 9110's `token`: one or more `tchar`.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Visible ASCII, space or tab.
fn is_value_byte(b: u8) -> bool {
    matches!(b, b'\t' | b' '..=b'~')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Parses `list`: `Ok(names)` checks the names kept, in order;
    /// `Err(field)` that it was refused naming `field`.
    fn check(list: &[(&str, &str)], expected: Result<&[&str], &str>) {
        let got = Headers::parse(pairs(list));
        match (&got, expected) {
            (Ok(headers), Ok(names)) => {
                assert_eq!(headers.names().collect::<Vec<_>>(), names, "{list:?}");
            }
            (Err(e), Err(field)) => {
                assert_eq!(e.field(), field, "{list:?}: {e}");
                assert!(e.to_string().starts_with(field), "{e}");
            }
            _ => panic!("{list:?}: expected {expected:?}, got {got:?}"),
        }
    }

    #[test]
    fn names_are_tokens_kept_lower_cased_and_given_once() {
        check(&[], Ok(&[]));
        check(
            &[("X-Tenant", "acme"), ("Authorization", "Bearer t")],
            Ok(&["authorization", "x-tenant"]),
        );
        check(
            &[("x-odd!#$%&'*+.^_`|~1", "v")],
            Ok(&["x-odd!#$%&'*+.^_`|~1"]),
        );
        check(&[("x-a", "1"), ("X-A", "2")], Err("headers.x-a"));
        check(&[("x-a", "1"), ("x-a", "1")], Err("headers.x-a"));
        for bad in ["", "x a", "x:a", "x\na", "ü", "x(a)", "x/a", "x\"a"] {
            check(&[(bad, "v")], Err("headers"));
        }
    }

    #[test]
    fn values_are_visible_ascii_space_and_tab() {
        check(&[("x-a", "")], Ok(&["x-a"]));
        check(&[("x-a", " a\tb ~!")], Ok(&["x-a"]));
        for bad in [
            "a\rb",
            "a\nb",
            "a\0b",
            "a\r\nx-evil: 1",
            "é",
            "\u{7f}",
            "\u{1b}[31m",
        ] {
            check(&[("x-a", bad)], Err("headers.x-a"));
        }
    }

    #[test]
    fn the_transport_s_and_taskcenter_s_own_headers_are_refused() {
        for name in TRANSPORT.iter().chain(OWN.iter()) {
            check(&[(name, "v")], Err(&format!("headers.{name}")));
            let upper = name.to_ascii_uppercase();
            check(&[(&upper, "v")], Err(&format!("headers.{name}")));
        }
        for name in ["proxy-authorization", "Proxy-Connection", "proxy-x"] {
            check(
                &[(name, "v")],
                Err(&format!("headers.{}", name.to_lowercase())),
            );
        }
        // Near misses are ordinary headers.
        check(
            &[("x-host", "v"), ("hosts", "v"), ("x-proxy", "v")],
            Ok(&["hosts", "x-host", "x-proxy"]),
        );
    }

    #[test]
    fn at_most_32_headers_and_8_kib() {
        let names: Vec<String> = (0..33).map(|i| format!("x-{i:02}")).collect();
        let list: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
        assert_eq!(Headers::parse(pairs(&list[..32])).map(|h| h.len()), Ok(32));
        check(&list, Err("headers"));

        // 8192 bytes exactly: "x-a" and 8189 bytes of value.
        let at_limit = "v".repeat(Headers::MAX_BYTES - 3);
        check(&[("x-a", &at_limit)], Ok(&["x-a"]));
        let over = "v".repeat(Headers::MAX_BYTES - 2);
        check(&[("x-a", &over)], Err("headers"));
        let half = "v".repeat(Headers::MAX_BYTES / 2);
        check(&[("x-a", &half), ("x-b", &half)], Err("headers"));
    }

    #[test]
    fn views_hide_credentials_and_debug_shows_no_value() {
        let headers = Headers::parse(pairs(&[
            ("Authorization", "Bearer secret-1"),
            ("Cookie", "s=secret-2"),
            ("X-Api-Key", "secret-3"),
            ("X-Tenant", "acme"),
        ]))
        .unwrap();
        assert_eq!(
            headers.redacted().collect::<Vec<_>>(),
            [
                ("authorization", REDACTED),
                ("cookie", REDACTED),
                ("x-api-key", REDACTED),
                ("x-tenant", "acme"),
            ]
        );
        let debug = format!("{headers:?}");
        assert!(
            !debug.contains("secret") && !debug.contains("acme"),
            "{debug}"
        );
        assert!(debug.contains("authorization"), "{debug}");
        assert!(SENSITIVE.contains(&"proxy-authorization"));
    }

    #[test]
    fn stored_text_round_trips_and_no_headers_is_null() {
        let headers = Headers::parse(pairs(&[("X-B", "2 \"q\""), ("x-a", "1")])).unwrap();
        let text = headers.to_stored().unwrap();
        assert_eq!(text, r#"{"x-a":"1","x-b":"2 \"q\""}"#);
        assert_eq!(Headers::from_stored(Some(&text)), Ok(headers));
        assert_eq!(Headers::default().to_stored(), None);
        assert_eq!(Headers::from_stored(None), Ok(Headers::default()));
        for never_written in ["[]", "{\"a\":1}", "x", "null"] {
            assert_eq!(
                Headers::from_stored(Some(never_written)),
                Err(CorruptHeaders)
            );
        }
    }

    #[test]
    fn a_task_s_header_wins_over_its_destination_s() {
        let destination =
            Headers::parse(pairs(&[("authorization", "Bearer d"), ("x-region", "eu")])).unwrap();
        let task = Headers::parse(pairs(&[
            ("Authorization", "Bearer t"),
            ("x-tenant", "acme"),
        ]))
        .unwrap();
        assert_eq!(
            task.over(&destination),
            [
                ("authorization", "Bearer t"),
                ("x-region", "eu"),
                ("x-tenant", "acme"),
            ]
        );
        assert_eq!(
            Headers::default().over(&destination),
            destination.iter().collect::<Vec<_>>()
        );
    }
}
