//! The dashboard's sessions: the API token, posted once to the login form,
//! becomes a random session id in an HttpOnly, SameSite=Strict cookie; each
//! session has its own CSRF token, which the pages carry in a meta tag and
//! the JavaScript sends back as `X-CSRF-Token` on every state change.
//! A tenant's key logs in too: its session keeps the key's hash (never the
//! key) and is looked up again on every request, so a revoked key's
//! session ends with it.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::HeaderMap;
use http::header::COOKIE;
use subtle::ConstantTimeEq;
use tc_model::tenant::key::KeyHash;

/// The session cookie's name.
pub(crate) const COOKIE_NAME: &str = "tc_session";
/// The header the dashboard's JavaScript sends the CSRF token in.
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";
/// How long a session lasts after its login.
pub(crate) const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// The most sessions kept at once; a login past it forgets the oldest, so
/// logins cannot grow memory without bound.
const MAX_SESSIONS: usize = 256;

/// Why a session could not be made.
#[derive(Debug, thiserror::Error)]
#[error("no entropy for a session id: {0}")]
pub(crate) struct NoEntropy(String);

/// One logged-in browser.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// The cookie's value: 32 random bytes, hex.
    pub(crate) id: String,
    /// The CSRF token: 32 other random bytes, hex.
    pub(crate) csrf: String,
    /// The hash of the tenant key it logged in with; `None`: the admin
    /// token.
    pub(crate) key: Option<KeyHash>,
    created: Instant,
}

/// The sessions of this process (a restart logs everyone out).
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    sessions: Mutex<Vec<Session>>,
}

fn random_hex() -> Result<String, NoEntropy> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| NoEntropy(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `given` is `token`, in time independent of where they differ.
pub(crate) fn token_matches(given: &str, token: &str) -> bool {
    given.as_bytes().ct_eq(token.as_bytes()).into()
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.trim())
}

impl Sessions {
    /// A new session (after a correct token, or a live tenant key whose
    /// hash is `key`).
    pub(crate) fn create(&self, key: Option<KeyHash>) -> Result<Session, NoEntropy> {
        let session = Session {
            id: random_hex()?,
            csrf: random_hex()?,
            key,
            created: Instant::now(),
        };
        let mut sessions = self.lock();
        sessions.retain(|s| s.created.elapsed() < SESSION_LIFETIME);
        if sessions.len() >= MAX_SESSIONS {
            sessions.remove(0);
        }
        sessions.push(session.clone());
        Ok(session)
    }

    /// The live session whose id the request's cookie carries. Every kept
    /// id is compared in constant time, so the answer's timing says nothing
    /// about how close a guess was.
    pub(crate) fn find(&self, headers: &HeaderMap) -> Option<Session> {
        let given = cookie(headers, COOKIE_NAME)?;
        let sessions = self.lock();
        let mut found = None;
        for s in sessions.iter() {
            if token_matches(given, &s.id) && s.created.elapsed() < SESSION_LIFETIME {
                found = Some(s.clone());
            }
        }
        found
    }

    /// Forgets the session with this id (logout).
    pub(crate) fn remove(&self, id: &str) {
        self.lock().retain(|s| !token_matches(id, &s.id));
    }

    /// The session, when the request carries a live session cookie and,
    /// unless it is a read (GET or HEAD), that session's CSRF token in
    /// `X-CSRF-Token`: what lets the dashboard's JavaScript call the JSON
    /// API without the bearer token. A cross-site page cannot read the
    /// token, and SameSite=Strict keeps the cookie off its requests anyway.
    pub(crate) fn authorizes(&self, method: &http::Method, headers: &HeaderMap) -> Option<Session> {
        let session = self.find(headers)?;
        if matches!(*method, http::Method::GET | http::Method::HEAD) {
            return Some(session);
        }
        headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|given| token_matches(given, &session.csrf))
            .then_some(session)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Session>> {
        // Plain pushes and removes: a panic cannot leave the list torn.
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The `Set-Cookie` value that logs a browser in: never readable by
/// scripts, never sent by another site's requests, for the whole origin
/// (the JSON API under `/tasks` too); with `secure` (the dashboard is
/// served over https) never sent over plain http either.
pub(crate) fn set_cookie(session: &Session, secure: bool) -> String {
    format!(
        "{COOKIE_NAME}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        session.id,
        SESSION_LIFETIME.as_secs(),
        secure_attribute(secure)
    )
}

/// The `Set-Cookie` value that logs a browser out.
pub(crate) fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE_NAME}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}",
        secure_attribute(secure)
    )
}

fn secure_attribute(secure: bool) -> &'static str {
    if secure { "; Secure" } else { "" }
}

#[cfg(test)]
mod tests {
    use http::{HeaderValue, Method};

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(
                http::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        h
    }

    #[test]
    fn a_session_cookie_authorizes_reads_and_with_its_csrf_token_writes() {
        let sessions = Sessions::default();
        let s = sessions.create(None).unwrap();
        let other = sessions.create(None).unwrap();
        assert_ne!(s.id, other.id);
        assert_ne!(s.id, s.csrf);
        assert_eq!(s.id.len(), 64);
        let cookie = format!("a=b; {COOKIE_NAME}={}", s.id);
        let check = |pairs: &[(&str, &str)], method: Method, expected: bool| {
            assert_eq!(
                sessions.authorizes(&method, &headers(pairs)).is_some(),
                expected,
                "{method} {pairs:?}"
            );
        };
        check(&[("cookie", &cookie)], Method::GET, true);
        check(&[("cookie", &cookie)], Method::POST, false);
        check(
            &[("cookie", &cookie), (CSRF_HEADER, &s.csrf)],
            Method::POST,
            true,
        );
        check(
            &[("cookie", &cookie), (CSRF_HEADER, &s.csrf)],
            Method::DELETE,
            true,
        );
        // Another session's token, a truncated one, none.
        check(
            &[("cookie", &cookie), (CSRF_HEADER, &other.csrf)],
            Method::POST,
            false,
        );
        check(
            &[("cookie", &cookie), (CSRF_HEADER, &s.csrf[1..])],
            Method::POST,
            false,
        );
        check(&[(CSRF_HEADER, &s.csrf)], Method::POST, false);
        check(&[], Method::GET, false);
        check(
            &[("cookie", &format!("{COOKIE_NAME}=nope"))],
            Method::GET,
            false,
        );
        check(
            &[("cookie", &format!("{COOKIE_NAME}={}", &s.id[..63]))],
            Method::GET,
            false,
        );
        // Logged out: the cookie is worth nothing.
        sessions.remove(&s.id);
        check(
            &[("cookie", &cookie), (CSRF_HEADER, &s.csrf)],
            Method::POST,
            false,
        );
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_for_the_whole_origin() {
        let s = Sessions::default().create(None).unwrap();
        for secure in [false, true] {
            let set = set_cookie(&s, secure);
            for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
                assert!(set.split("; ").any(|p| p == part), "{set} lacks {part}");
            }
            assert_eq!(set.split("; ").any(|p| p == "Secure"), secure, "{set}");
            assert!(set.starts_with(&format!("{COOKIE_NAME}={};", s.id)));
            let clear = clear_cookie(secure);
            assert!(clear.contains("Max-Age=0"));
            assert_eq!(clear.ends_with("; Secure"), secure, "{clear}");
        }
    }

    #[test]
    fn sessions_are_bounded() {
        let sessions = Sessions::default();
        let first = sessions.create(None).unwrap();
        for _ in 0..MAX_SESSIONS {
            sessions.create(None).unwrap();
        }
        assert_eq!(sessions.lock().len(), MAX_SESSIONS);
        let h = headers(&[("cookie", &format!("{COOKIE_NAME}={}", first.id))]);
        assert!(
            sessions.find(&h).is_none(),
            "the oldest session is forgotten"
        );
    }
}
