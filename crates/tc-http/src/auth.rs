//! Who may call a route: the bearer token of the `/tasks` and
//! `/destinations` routes, or the dashboard's session standing in for it.

use http::HeaderMap;
use http::header::AUTHORIZATION;
use http::request::Parts;
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::ui::auth::Sessions;

/// Checks a route's credential: with a configured `token` and a route that
/// `needs_token`, the request must carry the token, or a dashboard session
/// (with its CSRF token for writes).
pub(crate) fn check_token(
    token: Option<&str>,
    sessions: &Sessions,
    parts: &Parts,
    needs_token: bool,
) -> Result<(), ApiError> {
    match token {
        Some(token)
            if needs_token
                && !authorized(&parts.headers, token)
                && !sessions.authorizes(&parts.method, &parts.headers) =>
        {
            Err(ApiError::Unauthorized)
        }
        _ => Ok(()),
    }
}

/// Whether the request carries `Authorization: Bearer <token>` with exactly
/// `token`. The comparison takes the same time wherever the first wrong byte
/// is, so response times do not reveal how much of a guess was right (only
/// a length mismatch returns early, and the length is not the secret).
pub(crate) fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers.get(AUTHORIZATION) else {
        return false;
    };
    let value = value.as_bytes();
    // The scheme is case-insensitive (RFC 9110 §11.1).
    let Some((scheme, given)) = value.split_at_checked(7) else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return false;
    }
    given.ct_eq(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    use http::HeaderValue;

    fn check(header: Option<&[u8]>, expected: bool) {
        let mut headers = HeaderMap::new();
        if let Some(h) = header {
            headers.insert(AUTHORIZATION, HeaderValue::from_bytes(h).unwrap());
        }
        assert_eq!(authorized(&headers, "s3cret"), expected, "{header:?}");
    }

    #[test]
    fn bearer_tokens() {
        check(Some(b"Bearer s3cret"), true);
        check(Some(b"bearer s3cret"), true);
        check(Some(b"BEARER s3cret"), true);
        check(None, false);
        check(Some(b""), false);
        check(Some(b"Bearer"), false);
        check(Some(b"Bearer "), false);
        check(Some(b"Bearer s3cre"), false);
        check(Some(b"Bearer s3cret2"), false);
        check(Some(b"Bearer S3CRET"), false);
        check(Some(b"Bearer  s3cret"), false);
        check(Some(b"Basic s3cret"), false);
        check(Some(b"Bearer \xffs3cret"), false);
    }
}
