//! Who is calling, and what it may reach: the request's [`Scope`]. The
//! admin credential (`--api-token`, or the dashboard session it opened)
//! sees everything, as before tenants; a tenant's key (`tck_...`, or a
//! dashboard session opened with one) only its own tasks. A key is hashed
//! and looked up in the store on every request, with no cache, so a
//! revoked key stops working at once on every node.

use http::HeaderMap;
use http::header::AUTHORIZATION;
use http::request::Parts;
use subtle::ConstantTimeEq;
use tc_model::Timestamp;
use tc_model::store::TaskStore;
use tc_model::tenant::key::{KeyHash, is_key};
use tc_model::tenant::{Acting, Scope, TenantSettings};

use crate::app::App;
use crate::error::{ApiError, Credential};
use crate::worker_port::Control;

/// The caller of one request: its scope and, for a tenant, the tenant's
/// settings as stored now (its quotas).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Caller {
    pub(crate) scope: Scope,
    pub(crate) settings: TenantSettings,
    /// The id of the tenant's key it called with (`None`: the admin).
    pub(crate) key_id: Option<String>,
    /// For a tenant, when the tenant was created, as stored: a tenant of
    /// the same name made again is another tenant to its submit bucket
    /// (the admin: the epoch, unused).
    pub(crate) created_at: Timestamp,
}

impl Caller {
    /// The admin credential (or none where the server has none).
    pub(crate) fn admin() -> Caller {
        Caller {
            scope: Scope::Admin,
            settings: TenantSettings::default(),
            key_id: None,
            created_at: Timestamp::from_millis(0),
        }
    }

    /// The tenant's key its writes are made with: the store refuses them
    /// once the key is revoked or the tenant deleted, however long the
    /// request's body took to arrive after this caller was resolved.
    pub(crate) fn acting(&self) -> Option<Acting> {
        match (&self.scope, &self.key_id) {
            (Scope::Tenant(tenant), Some(key_id)) => Some(Acting::new(tenant, key_id)),
            _ => None,
        }
    }
}

/// Resolves a request's caller. A route that does not `need_token`
/// (health; metrics under `metrics_public`) is the admin's for anyone. Otherwise: a bearer
/// credential shaped like a key is looked up as one; the admin token or
/// the dashboard's session otherwise, as before tenants (no token
/// configured: the admin, as before).
pub(crate) async fn caller<S: TaskStore, C: Control>(
    app: &App<S, C>,
    parts: &Parts,
    needs_token: bool,
) -> Result<Caller, ApiError> {
    if !needs_token {
        return Ok(Caller::admin());
    }
    let token = app.config().api_token.as_deref();
    if let Some(given) = bearer(&parts.headers).filter(|g| is_key(g)) {
        if let Some(caller) = tenant_caller(app, KeyHash::of(given)).await? {
            return Ok(caller);
        }
        // An admin token that happens to look like a key still works.
        return match token {
            Some(token) if authorized(&parts.headers, token) => Ok(Caller::admin()),
            _ => Err(ApiError::Unauthorized(Credential::NotAccepted)),
        };
    }
    let Some(token) = token else {
        return Ok(Caller::admin());
    };
    if authorized(&parts.headers, token) {
        return Ok(Caller::admin());
    }
    match app.ui().sessions.authorizes(&parts.method, &parts.headers) {
        Some(session) => match session.key {
            None => Ok(Caller::admin()),
            Some(hash) => tenant_caller(app, hash)
                .await?
                .ok_or(ApiError::Unauthorized(Credential::NotAccepted)),
        },
        None => Err(ApiError::Unauthorized(refusal(&parts.headers))),
    }
}

/// Why a request without a valid credential is refused: none came (no
/// `Authorization`, no cookie), or one came and was not accepted.
fn refusal(headers: &HeaderMap) -> Credential {
    if headers.contains_key(AUTHORIZATION) || headers.contains_key(http::header::COOKIE) {
        Credential::NotAccepted
    } else {
        Credential::Missing
    }
}

/// The tenant whose live key hashes to `hash`, with its settings now; `None`
/// for no such key (never made, or revoked). Records the key's use.
pub(crate) async fn tenant_caller<S: TaskStore, C: Control>(
    app: &App<S, C>,
    hash: KeyHash,
) -> Result<Option<Caller>, ApiError> {
    let Some(owner) = app.store().api_key(hash).await? else {
        return Ok(None);
    };
    // The store found it by hash; compared again in constant time so that
    // no adapter's index lookup is the only check.
    if !owner.hash.matches(&hash) {
        return Ok(None);
    }
    let now = app.control().now();
    if app.key_use().due(&owner.key_id, now) {
        // A failed record costs only the `last_used_at` shown, never the
        // request.
        if let Err(e) = app.store().touch_api_key(owner.key_id.clone(), now).await {
            tracing::warn!(key_id = %owner.key_id, error = %e, "api_key_touch_failed");
        }
    }
    Ok(Some(Caller {
        scope: Scope::Tenant(owner.tenant.name),
        settings: owner.tenant.settings,
        key_id: Some(owner.key_id),
        created_at: owner.tenant.created_at,
    }))
}

/// The credential of `Authorization: Bearer <credential>`, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.as_bytes();
    let (scheme, given) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    std::str::from_utf8(given).ok()
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
    fn bearer_credentials() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer(&headers), None);
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer tck_abc"));
        assert_eq!(bearer(&headers), Some("tck_abc"));
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Basic tck_abc"));
        assert_eq!(bearer(&headers), None);
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
