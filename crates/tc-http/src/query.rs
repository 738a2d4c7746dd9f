//! The query strings of `GET /tasks` and `GET /tasks/{id}`, and the filter
//! fields `POST /tasks/bulk` shares with the listing.

use tc_model::destination::parse_destination;
use tc_model::store::{Cursor, ListQuery, TaskFilter};
use tc_model::{State, Timestamp};

use crate::error::ApiError;

/// The default page size.
pub(crate) const DEFAULT_LIMIT: usize = 50;
/// The largest page size.
pub(crate) const MAX_LIMIT: usize = 500;

/// The longest `GET /tasks/{id}?wait_ms=` may wait.
pub(crate) const MAX_WAIT_MS: u64 = 60_000;

/// The `wait_ms` of `GET /tasks/{id}` (0..=60000; absent is 0). Other
/// parameters are ignored, as they always were on this route.
pub(crate) fn parse_wait(query: Option<&str>) -> Result<std::time::Duration, ApiError> {
    let invalid = ApiError::InvalidRequest;
    let mut wait = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        if decode(raw_name).as_deref() != Some("wait_ms") {
            continue;
        }
        let value = decode(raw_value)
            .ok_or_else(|| invalid("wait_ms: not valid percent-encoded UTF-8".into()))?;
        let ms = value
            .parse::<u64>()
            .ok()
            .filter(|ms| *ms <= MAX_WAIT_MS && value.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| {
                invalid(format!(
                    "wait_ms: must be an integer between 0 and {MAX_WAIT_MS}, got {value:?}"
                ))
            })?;
        if wait.replace(ms).is_some() {
            return Err(invalid("wait_ms: given more than once".into()));
        }
    }
    Ok(std::time::Duration::from_millis(wait.unwrap_or(0)))
}

/// Parses the filters, `limit` and `after`; anything else, a repeated
/// parameter or a bad value is 400 naming the parameter.
pub(crate) fn parse_list_query(query: Option<&str>) -> Result<ListQuery, ApiError> {
    let invalid = ApiError::InvalidRequest;
    let mut filter = FilterFields::default();
    let mut limit = None;
    let mut after = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = decode(raw_name)
            .ok_or_else(|| invalid("query: not valid percent-encoded UTF-8".into()))?;
        let value = decode(raw_value)
            .ok_or_else(|| invalid(format!("{name}: not valid percent-encoded UTF-8")))?;
        let slot = match name.as_str() {
            "limit" => &mut limit,
            "after" => &mut after,
            _ => filter.slot(&name).ok_or_else(|| {
                invalid(format!(
                    "{name}: unknown query parameter (expected {}, limit or after)",
                    FILTER_FIELDS.join(", ")
                ))
            })?,
        };
        if slot.replace(value).is_some() {
            return Err(invalid(format!("{name}: given more than once")));
        }
    }
    let limit = match limit {
        None => DEFAULT_LIMIT,
        Some(s) => match s.parse::<usize>() {
            // Only plain digits: usize's parser also takes a leading '+'.
            Ok(n) if (1..=MAX_LIMIT).contains(&n) && s.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => {
                return Err(invalid(format!(
                    "limit: must be an integer between 1 and {MAX_LIMIT}; got {s:?}"
                )));
            }
        },
    };
    let after = match after {
        None => None,
        Some(s) => Some(s.parse::<Cursor>().map_err(|_| {
            invalid(format!(
                "after: not a cursor from a previous page's `next`; got {s:?}"
            ))
        })?),
    };
    Ok(ListQuery {
        filter: filter.parse()?,
        limit,
        after,
        ..ListQuery::default()
    })
}

/// The filter fields `GET /tasks` and `POST /tasks/bulk` take.
pub(crate) const FILTER_FIELDS: [&str; 12] = [
    "state",
    "destination",
    "error",
    "created_after",
    "created_before",
    "idempotency_key",
    "tenant",
    "topic",
    "event_id",
    "subscription",
    "priority",
    "flow_key",
];

/// The longest error reason or idempotency key a filter takes, in
/// characters (as the document's `maxLength` counts).
const MAX_FILTER_VALUE: usize = 1024;

/// A filter's fields as given (query parameters or JSON strings), before
/// their values are checked.
#[derive(Debug, Default)]
pub(crate) struct FilterFields {
    state: Option<String>,
    destination: Option<String>,
    error: Option<String>,
    created_after: Option<String>,
    created_before: Option<String>,
    idempotency_key: Option<String>,
    /// The admin's filter by tenant; a tenant's own requests are narrowed
    /// to it whatever this says ([`tc_model::store::TaskFilter::within`]).
    tenant: Option<String>,
    /// A topic's tasks: the caller's topic of this name.
    topic: Option<String>,
    event_id: Option<String>,
    subscription: Option<String>,
    priority: Option<String>,
    /// The caller's flow key of this name.
    flow_key: Option<String>,
}

impl FilterFields {
    /// Where the field called `name` goes; `None` for a name that is not a
    /// filter field.
    pub(crate) fn slot(&mut self, name: &str) -> Option<&mut Option<String>> {
        Some(match name {
            "state" => &mut self.state,
            "destination" => &mut self.destination,
            "error" => &mut self.error,
            "created_after" => &mut self.created_after,
            "created_before" => &mut self.created_before,
            "idempotency_key" => &mut self.idempotency_key,
            "tenant" => &mut self.tenant,
            "topic" => &mut self.topic,
            "event_id" => &mut self.event_id,
            "subscription" => &mut self.subscription,
            "priority" => &mut self.priority,
            "flow_key" => &mut self.flow_key,
            _ => return None,
        })
    }

    /// Checks every value; 400 naming the field otherwise.
    pub(crate) fn parse(self) -> Result<TaskFilter, ApiError> {
        let invalid = ApiError::InvalidRequest;
        let state = match self.state {
            None => None,
            Some(s) => Some(s.parse::<State>().map_err(|_| {
                invalid(format!(
                    "state: must be one of pending, running, success, failed, canceled; got {s:?}"
                ))
            })?),
        };
        let destination = match self.destination {
            None => None,
            Some(d) => Some(parse_destination(&d).map_err(|_| {
                invalid(format!(
                    "destination: must be host:port with the port written \
                     (e.g. api.example.com:443); got {d:?}"
                ))
            })?),
        };
        let text = |name: &str, value: Option<String>| match value {
            Some(v) if v.is_empty() || v.chars().count() > MAX_FILTER_VALUE => Err(invalid(
                format!("{name}: must be 1 to {MAX_FILTER_VALUE} characters"),
            )),
            v => Ok(v),
        };
        let time = |name: &str, value: Option<String>| match value {
            None => Ok(None),
            Some(v) => parse_rfc3339(&v).map(Some).ok_or_else(|| {
                invalid(format!(
                    "{name}: not an RFC 3339 time in UTC (e.g. 2026-01-02T03:04:05Z); got {v:?}"
                ))
            }),
        };
        let flow_key = match self.flow_key {
            None => None,
            Some(k) => {
                tc_model::flow_key::check_key("flow_key", &k)
                    .map_err(|e| invalid(format!("{e}; got {k:?}")))?;
                Some(k)
            }
        };
        Ok(TaskFilter {
            flow_key,
            topic: text("topic", self.topic)?,
            event_id: text("event_id", self.event_id)?,
            subscription: text("subscription", self.subscription)?,
            state,
            destination,
            error: text("error", self.error)?,
            created_after: time("created_after", self.created_after)?,
            created_before: time("created_before", self.created_before)?,
            idempotency_key: text("idempotency_key", self.idempotency_key)?,
            tenant: match self.tenant {
                None => None,
                Some(t) => {
                    tc_model::tenant::check_name(&t)
                        .map_err(|e| invalid(format!("tenant: {}; got {t:?}", e.message)))?;
                    Some(t)
                }
            },
            priority: match self.priority {
                None => None,
                Some(p) => Some(
                    p.parse::<u8>()
                        .ok()
                        .filter(|p| *p <= tc_model::priority::MAX_PRIORITY)
                        .ok_or_else(|| {
                            invalid(format!(
                                "priority: must be an integer from 0 to {}; got {p:?}",
                                tc_model::priority::MAX_PRIORITY
                            ))
                        })?,
                ),
            },
        })
    }
}

/// RFC 3339 (humantime reads it in UTC, `Z`, with any fraction) as a
/// timestamp in milliseconds.
pub(crate) fn parse_rfc3339(text: &str) -> Option<Timestamp> {
    humantime::parse_rfc3339(text)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .map(Timestamp::from_millis)
}

/// Decodes `application/x-www-form-urlencoded` text (`%XX` and `+`); `None`
/// for a broken escape or bytes that are not UTF-8.
pub(crate) fn decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hi = hex(bytes.next()?)?;
                let lo = hex(bytes.next()?)?;
                out.push((hi << 4) | lo);
            }
            _ => out.push(b),
        }
    }
    String::from_utf8(out).ok()
}

fn hex(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Ok(query)` for the expected result, `Err(prefix)` for a refusal whose
    /// message starts with `prefix`.
    fn check(query: Option<&str>, expected: Result<ListQuery, &str>) {
        let got = parse_list_query(query);
        match (got, expected) {
            (Ok(got), Ok(expected)) => assert_eq!(got, expected, "{query:?}"),
            (Err(ApiError::InvalidRequest(message)), Err(prefix)) => assert!(
                message.starts_with(prefix),
                "{query:?}: {message:?} should start with {prefix:?}"
            ),
            (got, expected) => panic!("{query:?}: expected {expected:?}, got {got:?}"),
        }
    }

    fn q(
        state: Option<State>,
        limit: usize,
        after: Option<i64>,
    ) -> Result<ListQuery, &'static str> {
        Ok(ListQuery {
            filter: TaskFilter::state(state),
            limit,
            after: after.map(Cursor::from_position),
            ..ListQuery::default()
        })
    }

    #[test]
    fn list_queries() {
        check(None, q(None, 50, None));
        check(Some(""), q(None, 50, None));
        check(Some("state=pending"), q(Some(State::Pending), 50, None));
        check(
            Some("limit=1&state=canceled"),
            q(Some(State::Canceled), 1, None),
        );
        check(Some("limit=500&after=42"), q(None, 500, Some(42)));
        check(Some("after=%34%32&"), q(None, 50, Some(42)));
        check(Some("state=done"), Err("state: must be one of"));
        check(Some("state="), Err("state: "));
        check(Some("state=PENDING"), Err("state: "));
        check(
            Some("limit=0"),
            Err("limit: must be an integer between 1 and 500"),
        );
        check(Some("limit=501"), Err("limit: "));
        check(Some("limit=-1"), Err("limit: "));
        check(Some("limit=+5"), Err("limit: "));
        check(Some("limit=1.5"), Err("limit: "));
        check(Some("limit=99999999999999999999999"), Err("limit: "));
        check(Some("limit"), Err("limit: "));
        check(Some("after=x"), Err("after: not a cursor"));
        check(Some("after=-1"), Err("after: "));
        check(
            Some("state=pending&state=failed"),
            Err("state: given more than once"),
        );
        check(Some("page=2"), Err("page: unknown query parameter"));
        check(Some("%ZZ=1"), Err("query: "));
        check(Some("state=%ff"), Err("state: not valid"));
        check(Some("limit=%"), Err("limit: not valid"));
    }

    #[test]
    fn list_filters() {
        let with = |edit: fn(&mut TaskFilter)| {
            let mut filter = TaskFilter::default();
            edit(&mut filter);
            Ok(ListQuery {
                filter,
                ..ListQuery::default()
            })
        };
        check(
            Some("destination=API.example.com:443&error=http_503"),
            with(|f| {
                f.destination = Some("api.example.com:443".into());
                f.error = Some("http_503".into());
            }),
        );
        check(
            Some("destination=%5B::1%5D:8080"),
            with(|f| f.destination = Some("[::1]:8080".into())),
        );
        check(
            Some("created_after=2026-01-02T03:04:05Z&created_before=2026-01-02T03:04:05.5Z"),
            with(|f| {
                f.created_after = Some(Timestamp::from_millis(1_767_323_045_000));
                f.created_before = Some(Timestamp::from_millis(1_767_323_045_500));
            }),
        );
        check(
            Some("idempotency_key=a+b&state=failed"),
            with(|f| {
                f.idempotency_key = Some("a b".into());
                f.state = Some(State::Failed);
            }),
        );
        // The destination rule is the one /destinations/{destination}
        // follows: the port as tasks write it, a host of at most 253 bytes.
        check(
            Some("destination=Example.com:0443"),
            with(|f| f.destination = Some("example.com:443".into())),
        );
        check(
            Some(&format!("destination={}:1", "h".repeat(253))),
            Ok(ListQuery {
                filter: TaskFilter {
                    destination: Some(format!("{}:1", "h".repeat(253))),
                    ..TaskFilter::default()
                },
                ..ListQuery::default()
            }),
        );
        check(
            Some(&format!("destination={}:1", "h".repeat(254))),
            Err("destination: "),
        );
        for bad in [
            "example.com",
            "example.com:",
            "example.com:99999",
            ":80",
            "a b:80",
            "[x]:1",
        ] {
            check(
                Some(&format!("destination={bad}")),
                Err("destination: must be host:port"),
            );
        }
        // Lengths count characters, as the document's maxLength does.
        let long = "%C3%A9".repeat(1024);
        check(
            Some(&format!("error={long}")),
            with(|f| f.error = Some("é".repeat(1024))),
        );
        check(
            Some(&format!("idempotency_key={long}e")),
            Err("idempotency_key: must be 1 to 1024 characters"),
        );
        check(Some("error="), Err("error: must be 1 to"));
        check(
            Some("idempotency_key="),
            Err("idempotency_key: must be 1 to"),
        );
        check(
            Some("created_after=yesterday"),
            Err("created_after: not an RFC 3339"),
        );
        check(
            Some("created_before=2026-13-01T00:00:00Z"),
            Err("created_before: "),
        );
        check(Some("error=a&error=b"), Err("error: given more than once"));
    }

    #[test]
    fn decodes_form_encoding() {
        assert_eq!(decode("a+b%20c%2Bd").as_deref(), Some("a b c+d"));
        assert_eq!(decode("%e2%82%ac").as_deref(), Some("€"));
        assert_eq!(decode("%2"), None);
        assert_eq!(decode("%c3"), None, "half a UTF-8 sequence");
    }
}
