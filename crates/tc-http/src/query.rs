//! The query string of `GET /tasks`.

use tc_model::State;
use tc_model::store::{Cursor, ListQuery};

use crate::error::ApiError;

/// The default page size.
pub(crate) const DEFAULT_LIMIT: usize = 50;
/// The largest page size.
pub(crate) const MAX_LIMIT: usize = 500;

/// Parses `state`, `limit` and `after`; anything else, a repeated parameter
/// or a bad value is 400 naming the parameter.
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

pub(crate) fn parse_list_query(query: Option<&str>) -> Result<ListQuery, ApiError> {
    let invalid = ApiError::InvalidRequest;
    let mut state = None;
    let mut limit = None;
    let mut after = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = decode(raw_name)
            .ok_or_else(|| invalid("query: not valid percent-encoded UTF-8".into()))?;
        let value = decode(raw_value)
            .ok_or_else(|| invalid(format!("{name}: not valid percent-encoded UTF-8")))?;
        let slot = match name.as_str() {
            "state" => &mut state,
            "limit" => &mut limit,
            "after" => &mut after,
            _ => {
                return Err(invalid(format!(
                    "{name}: unknown query parameter (expected state, limit or after)"
                )));
            }
        };
        if slot.replace(value).is_some() {
            return Err(invalid(format!("{name}: given more than once")));
        }
    }
    let state = match state {
        None => None,
        Some(s) => Some(s.parse::<State>().map_err(|_| {
            invalid(format!(
                "state: must be one of pending, running, success, failed, canceled; got {s:?}"
            ))
        })?),
    };
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
        state,
        limit,
        after,
        max_result_bytes: None,
    })
}

/// Decodes `application/x-www-form-urlencoded` text (`%XX` and `+`); `None`
/// for a broken escape or bytes that are not UTF-8.
fn decode(s: &str) -> Option<String> {
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
            state,
            limit,
            after: after.map(Cursor::from_position),
            max_result_bytes: None,
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
    fn decodes_form_encoding() {
        assert_eq!(decode("a+b%20c%2Bd").as_deref(), Some("a b c+d"));
        assert_eq!(decode("%e2%82%ac").as_deref(), Some("€"));
        assert_eq!(decode("%2"), None);
        assert_eq!(decode("%c3"), None, "half a UTF-8 sequence");
    }
}
