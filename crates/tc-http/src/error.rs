//! [`ApiError`]: every error the API answers with, its status and code, the
//! `{"error":{"code","message"}}` body, and the one mapping from store errors.

use bytes::Bytes;
use http::header::{ALLOW, CONNECTION, CONTENT_TYPE, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;
use serde_json::Value;
use tc_model::store::StoreError;

/// Why a request was not authenticated. A wrong admin token and an unknown
/// or revoked tenant key are the same "not accepted": the answer never says
/// whether a key exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credential {
    /// No `Authorization` header and no dashboard session cookie.
    Missing,
    /// A credential came and is not (or no longer) valid.
    NotAccepted,
}

/// Every error the API answers with: one variant per documented code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ApiError {
    /// 400: the request is malformed; the message names the field.
    InvalidRequest(String),
    /// 401: the credential is missing or was not accepted.
    Unauthorized(Credential),
    /// 403: the url is under none of the allowed prefixes.
    UrlNotAllowed(String),
    /// 403: a state change whose `Origin` is another site's.
    CrossOrigin(String),
    /// 404: no such route, task or result.
    NotFound(String),
    /// 405: the path exists but not with this method; `allow` lists those it has.
    MethodNotAllowed { allow: String },
    /// 408: the body did not arrive in time.
    RequestTimeout(String),
    /// 409: the idempotency key belongs to a task with another payload.
    IdempotencyConflict(String),
    /// 409: only a finished task can be deleted.
    TaskNotTerminal(String),
    /// 409: only a failed or canceled task can be retried.
    TaskNotRetryable(String),
    /// 409: a schedule of that name exists.
    ScheduleExists(String),
    /// 403: `POST /admin/backup` on a server without an API token.
    BackupNeedsToken(String),
    /// 403: a tenant or a key made on a server without an API token (a
    /// request without a credential is the admin there: a key would keep
    /// nothing apart).
    TenantsNeedToken(String),
    /// 409: the backup's target file already exists.
    BackupTargetExists(String),
    /// 409: another backup is running.
    BackupInProgress(String),
    /// 409: this server's store is backed up with its own tools.
    BackupUnsupported(String),
    /// 413: the body is over the limit.
    PayloadTooLarge { limit: usize },
    /// 415: the body is not JSON.
    UnsupportedMediaType(String),
    /// 421: the `Host` is not one this server answers to.
    MisdirectedRequest(String),
    /// 429: this client has as many requests waiting for tasks as it may.
    TooManyWaiters(String),
    /// 403: a tenant's key on a route only the admin credential may call.
    Forbidden(String),
    /// 409: a tenant of that name exists.
    TenantExists(String),
    /// 409: a tenant that still has tasks cannot be deleted.
    TenantNotEmpty(String),
    /// 409: a topic that still has subscriptions cannot be deleted.
    TopicNotEmpty(String),
    /// 409: a topic has as many subscriptions as it may.
    TopicFull(String),
    /// 429: a tenant's submit past its `max_pending` or its submit rate;
    /// the message starts with the limit's name, `retry_after` is the
    /// `Retry-After` in seconds.
    QuotaExceeded { message: String, retry_after: u64 },
    /// 500: a broken invariant; never caused by the request's content.
    Internal(String),
    /// 503: the store cannot serve now; the message is the store's reason.
    Unavailable(String),
}

impl ApiError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::UrlNotAllowed(_) | ApiError::CrossOrigin(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::IdempotencyConflict(_)
            | ApiError::TaskNotTerminal(_)
            | ApiError::TaskNotRetryable(_)
            | ApiError::ScheduleExists(_)
            | ApiError::BackupTargetExists(_)
            | ApiError::BackupInProgress(_)
            | ApiError::BackupUnsupported(_) => StatusCode::CONFLICT,
            ApiError::BackupNeedsToken(_)
            | ApiError::TenantsNeedToken(_)
            | ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::TenantExists(_)
            | ApiError::TenantNotEmpty(_)
            | ApiError::TopicNotEmpty(_)
            | ApiError::TopicFull(_) => StatusCode::CONFLICT,
            ApiError::QuotaExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::MisdirectedRequest(_) => StatusCode::MISDIRECTED_REQUEST,
            ApiError::TooManyWaiters(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub(crate) fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidRequest(_) => "invalid_request",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::UrlNotAllowed(_) => "url_not_allowed",
            ApiError::CrossOrigin(_) => "cross_origin",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::RequestTimeout(_) => "request_timeout",
            ApiError::IdempotencyConflict(_) => "idempotency_conflict",
            ApiError::TaskNotTerminal(_) => "task_not_terminal",
            ApiError::TaskNotRetryable(_) => "task_not_retryable",
            ApiError::ScheduleExists(_) => "schedule_exists",
            ApiError::BackupNeedsToken(_) => "backup_needs_token",
            ApiError::TenantsNeedToken(_) => "tenants_need_token",
            ApiError::BackupTargetExists(_) => "backup_target_exists",
            ApiError::BackupInProgress(_) => "backup_in_progress",
            ApiError::BackupUnsupported(_) => "backup_unsupported",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::MisdirectedRequest(_) => "misdirected_request",
            ApiError::TooManyWaiters(_) => "too_many_waiters",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::TenantExists(_) => "tenant_exists",
            ApiError::TenantNotEmpty(_) => "tenant_not_empty",
            ApiError::TopicNotEmpty(_) => "topic_not_empty",
            ApiError::TopicFull(_) => "topic_full",
            ApiError::QuotaExceeded { .. } => "quota_exceeded",
            ApiError::Internal(_) => "internal",
            ApiError::Unavailable(_) => "unavailable",
        }
    }

    pub(crate) fn message(&self) -> String {
        match self {
            ApiError::InvalidRequest(m)
            | ApiError::UrlNotAllowed(m)
            | ApiError::CrossOrigin(m)
            | ApiError::MisdirectedRequest(m)
            | ApiError::TooManyWaiters(m)
            | ApiError::NotFound(m)
            | ApiError::RequestTimeout(m)
            | ApiError::IdempotencyConflict(m)
            | ApiError::TaskNotTerminal(m)
            | ApiError::TaskNotRetryable(m)
            | ApiError::ScheduleExists(m)
            | ApiError::BackupNeedsToken(m)
            | ApiError::TenantsNeedToken(m)
            | ApiError::BackupTargetExists(m)
            | ApiError::BackupInProgress(m)
            | ApiError::BackupUnsupported(m)
            | ApiError::Forbidden(m)
            | ApiError::TenantExists(m)
            | ApiError::TenantNotEmpty(m)
            | ApiError::TopicNotEmpty(m)
            | ApiError::TopicFull(m)
            | ApiError::QuotaExceeded { message: m, .. }
            | ApiError::UnsupportedMediaType(m)
            | ApiError::Internal(m)
            | ApiError::Unavailable(m) => m.clone(),
            ApiError::Unauthorized(Credential::Missing) => {
                "Authorization: no credential given; this route needs the header \
                 Authorization: Bearer <token> (the API token or a tenant key)"
                    .into()
            }
            ApiError::Unauthorized(Credential::NotAccepted) => {
                "Authorization: the credential was not accepted (a wrong token, \
                 or a tenant key that is unknown or revoked)"
                    .into()
            }
            ApiError::MethodNotAllowed { allow } => {
                format!("method not allowed here; allowed: {allow}")
            }
            ApiError::PayloadTooLarge { limit } => {
                format!("request body is over the limit of {limit} bytes")
            }
        }
    }

    /// The JSON error response, with the headers its status calls for.
    pub(crate) fn into_response(self) -> Response<Full<Bytes>> {
        #[derive(Serialize)]
        struct Body<'a> {
            error: Detail<'a>,
        }
        #[derive(Serialize)]
        struct Detail<'a> {
            code: &'a str,
            message: &'a str,
        }
        let message = self.message();
        let body = Body {
            error: Detail {
                code: self.code(),
                message: &message,
            },
        };
        // Serializing two strings cannot fail; the fallback keeps that a
        // non-panicking truth rather than an unwrap.
        let bytes = serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec());
        let mut response = Response::new(Full::new(Bytes::from(bytes)));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        match &self {
            ApiError::Unauthorized(_) => {
                headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::MethodNotAllowed { allow } => {
                if let Ok(value) = HeaderValue::from_str(allow) {
                    headers.insert(ALLOW, value);
                }
            }
            // The client may still be sending the rest of its body; the
            // connection cannot carry another request after that.
            ApiError::PayloadTooLarge { .. } | ApiError::RequestTimeout(_) => {
                headers.insert(CONNECTION, HeaderValue::from_static("close"));
            }
            ApiError::Unavailable(_) | ApiError::TooManyWaiters(_) => {
                headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::QuotaExceeded { retry_after, .. } => {
                headers.insert(RETRY_AFTER, HeaderValue::from(*retry_after));
            }
            _ => {}
        }
        response
    }
}

/// The refusal of an unknown field: the field's name first, then the known
/// field it most likely meant when one is close (`timeout: unknown field;
/// did you mean timeout_ms?`), else the known fields.
pub(crate) fn unknown_field(name: &str, known: &[&str]) -> ApiError {
    ApiError::InvalidRequest(match nearest(name, known) {
        Some(near) => format!("{name}: unknown field; did you mean {near}?"),
        None => format!("{name}: unknown field (expected {})", known.join(", ")),
    })
}

/// How alike two names must be (Jaro-Winkler, 0 to 1, as clap's "did you
/// mean") for one to be suggested for the other.
const SUGGEST_SIMILARITY: f64 = 0.8;

/// The known name most like `name`, if it is alike enough.
fn nearest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    // `filter.stat`, `task.timeout`: the member's own name is compared.
    let name = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(&name, k), *k))
        .filter(|(similarity, _)| *similarity >= SUGGEST_SIMILARITY)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// serde's refusal of a body's data, as the API words it: an unknown field
/// by [`unknown_field`] (serde's message lists the known ones), anything
/// else after `field: `.
pub(crate) fn data_refusal(field: &str, e: &serde_json::Error) -> ApiError {
    let text = e.to_string();
    let Some((name, expected)) = text
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once('`'))
    else {
        return ApiError::InvalidRequest(format!("{field}: {text}"));
    };
    // "…, expected one of `a`, `b` at line 1 column 9": the quoted names.
    let expected = expected.split(" at line ").next().unwrap_or_default();
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    unknown_field(name, &known)
}

/// What kind of JSON value `v` is, as a refusal's message names what it
/// got ("must be a string, got a number").
pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
impl ApiError {
    /// One error of each variant, in declaration order, for tests that must
    /// cover them all (the OpenAPI test checks the document lists exactly
    /// their codes).
    pub(crate) fn one_of_each() -> Vec<ApiError> {
        vec![
            ApiError::InvalidRequest("x".into()),
            ApiError::Unauthorized(Credential::Missing),
            ApiError::UrlNotAllowed("x".into()),
            ApiError::CrossOrigin("x".into()),
            ApiError::NotFound("x".into()),
            ApiError::MethodNotAllowed {
                allow: "GET".into(),
            },
            ApiError::RequestTimeout("x".into()),
            ApiError::IdempotencyConflict("x".into()),
            ApiError::TaskNotTerminal("x".into()),
            ApiError::TaskNotRetryable("x".into()),
            ApiError::PayloadTooLarge { limit: 1 },
            ApiError::UnsupportedMediaType("x".into()),
            ApiError::MisdirectedRequest("x".into()),
            ApiError::TooManyWaiters("x".into()),
            ApiError::BackupNeedsToken("x".into()),
            ApiError::TenantsNeedToken("x".into()),
            ApiError::BackupTargetExists("x".into()),
            ApiError::BackupInProgress("x".into()),
            ApiError::BackupUnsupported("x".into()),
            ApiError::ScheduleExists("x".into()),
            ApiError::Forbidden("x".into()),
            ApiError::TenantExists("x".into()),
            ApiError::TenantNotEmpty("x".into()),
            ApiError::TopicNotEmpty("x".into()),
            ApiError::TopicFull("x".into()),
            ApiError::QuotaExceeded {
                message: "x".into(),
                retry_after: 1,
            },
            ApiError::Internal("x".into()),
            ApiError::Unavailable("x".into()),
        ]
    }
}

/// The allow-list's refusal ([`tc_model::urls_allowed`]), naming its field.
impl From<tc_model::UrlNotAllowed> for ApiError {
    fn from(e: tc_model::UrlNotAllowed) -> Self {
        ApiError::UrlNotAllowed(e.to_string())
    }
}

/// What a store error was about: the resource a route names, so that a
/// `NotFound` or an `Exists` says which.
#[derive(Debug, Clone, Copy)]
pub(crate) enum About<'a> {
    /// A task (by id, or the tasks of a listing or a bulk action).
    Task,
    /// The tenant of this name.
    Tenant(&'a str),
    /// The key `id` of the tenant `tenant`.
    Key { tenant: &'a str, id: &'a str },
    /// The schedule of this name.
    Schedule(&'a str),
    /// The destination of this name.
    Destination,
    /// The caller's topic of this name.
    Topic(&'a str),
    /// The subscription of this id (of a topic that is there).
    Subscription(&'a str),
    /// The event of this id (of a topic that is there).
    Event(&'a str),
    /// The caller's flow key of this name.
    FlowKey(&'a str),
}

/// A store error about a task: [`ApiError::from_store`] with [`About::Task`].
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::from_store(e, About::Task)
    }
}

impl ApiError {
    /// The one place where store errors become HTTP errors.
    pub(crate) fn from_store(e: StoreError, about: About<'_>) -> ApiError {
        match e {
            StoreError::NotFound => ApiError::NotFound(about.not_found()),
            StoreError::IdempotencyConflict { fields } => ApiError::IdempotencyConflict(format!(
                "idempotency_key: already used for a task with other work; \
                     differs in {}",
                fields.join(", ")
            )),
            StoreError::NotTerminal(state) => ApiError::TaskNotTerminal(format!(
                "task is {state}: only a finished task can be deleted; cancel it first"
            )),
            StoreError::NotRetryable(state) => ApiError::TaskNotRetryable(format!(
                "task is {state}: only failed or canceled tasks can be retried"
            )),
            StoreError::Exists => match about {
                About::Tenant(name) => {
                    ApiError::TenantExists(format!("name: a tenant named {name:?} exists"))
                }
                About::Schedule(name) => {
                    ApiError::ScheduleExists(format!("name: a schedule named {name:?} exists"))
                }
                // Only tenants and schedules are created by name.
                About::Task
                | About::Key { .. }
                | About::Destination
                | About::Topic(_)
                | About::Subscription(_)
                | About::Event(_)
                | About::FlowKey(_) => {
                    tracing::error!(?about, "store_exists_unexpected");
                    ApiError::Internal(format!("the store says {about:?} exists"))
                }
            },
            StoreError::NotEmpty => not_empty(about),
            // The store's message starts with the limit's name.
            StoreError::QuotaExceeded { .. } => ApiError::QuotaExceeded {
                message: e.to_string(),
                retry_after: tc_model::tenant::quota::retry_after_secs(
                    tc_model::tenant::quota::PENDING_RETRY_AFTER,
                ),
            },
            // The key was revoked, or its tenant deleted, while the request
            // was read: as a key that never was.
            StoreError::CredentialGone => ApiError::Unauthorized(Credential::NotAccepted),
            StoreError::IllegalTransition(t) => {
                tracing::error!(transition = %t, "store_illegal_transition");
                ApiError::Internal(format!("illegal transition {t}"))
            }
            StoreError::Unavailable(reason) => {
                tracing::warn!(%reason, "store_unavailable");
                ApiError::Unavailable(format!("store unavailable: {reason}"))
            }
        }
    }
}

impl About<'_> {
    /// What a 404 about this thing says.
    fn not_found(&self) -> String {
        match self {
            About::Task => "no task with this id".into(),
            About::Tenant(name) => format!("no tenant named {name:?}"),
            About::Key { tenant, id } => format!("tenant {tenant:?} has no key {id:?}"),
            About::Schedule(name) => format!("no schedule named {name:?}"),
            About::Destination => {
                "no destination with this name: it has neither tasks nor settings".into()
            }
            About::Topic(name) => format!("no topic named {name:?}"),
            About::Subscription(id) => format!("no subscription {id:?} on this topic"),
            About::Event(id) => format!("no event {id:?} on this topic"),
            About::FlowKey(key) => {
                format!("no flow key named {key:?}: it has neither settings nor tasks")
            }
        }
    }
}

/// [`StoreError::NotEmpty`] about `about`: a topic with subscriptions, a
/// topic at its most subscriptions, or a tenant with tasks.
fn not_empty(about: About<'_>) -> ApiError {
    match about {
        About::Topic(name) => ApiError::TopicNotEmpty(format!(
            "the topic still has subscriptions: delete them first \
             (DELETE /topics/{name}/subscriptions/{{id}})"
        )),
        About::Subscription(_) => ApiError::TopicFull(format!(
            "the topic has {} subscriptions, as many as it may",
            tc_model::topic::MAX_SUBSCRIPTIONS
        )),
        About::Tenant(name) => ApiError::TenantNotEmpty(format!(
            "tenant {name:?} still has tasks: delete them first \
             (POST /tasks/bulk {{\"action\":\"delete\",\"filter\":{{\"tenant\":\"{name}\"}}}} \
             once they are finished)"
        )),
        _ => ApiError::TenantNotEmpty(
            "the tenant still has tasks: delete them first (POST /tasks/bulk \
             with action delete and tenant=<name>)"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_of_each_lists_every_variant() {
        // A new variant breaks this exhaustive match until it gets a number
        // here and an entry in `one_of_each`.
        let numbers: std::collections::BTreeSet<u8> = ApiError::one_of_each()
            .iter()
            .map(|e| match e {
                ApiError::InvalidRequest(_) => 0,
                ApiError::Unauthorized(_) => 1,
                ApiError::UrlNotAllowed(_) => 2,
                ApiError::NotFound(_) => 3,
                ApiError::MethodNotAllowed { .. } => 4,
                ApiError::RequestTimeout(_) => 5,
                ApiError::IdempotencyConflict(_) => 6,
                ApiError::PayloadTooLarge { .. } => 7,
                ApiError::UnsupportedMediaType(_) => 8,
                ApiError::Internal(_) => 9,
                ApiError::Unavailable(_) => 10,
                ApiError::TaskNotTerminal(_) => 11,
                ApiError::TaskNotRetryable(_) => 12,
                ApiError::CrossOrigin(_) => 13,
                ApiError::MisdirectedRequest(_) => 14,
                ApiError::TooManyWaiters(_) => 15,
                ApiError::BackupNeedsToken(_) => 16,
                ApiError::BackupTargetExists(_) => 17,
                ApiError::BackupInProgress(_) => 18,
                ApiError::BackupUnsupported(_) => 19,
                ApiError::ScheduleExists(_) => 20,
                ApiError::Forbidden(_) => 21,
                ApiError::TenantExists(_) => 22,
                ApiError::TenantNotEmpty(_) => 23,
                ApiError::QuotaExceeded { .. } => 24,
                ApiError::TenantsNeedToken(_) => 25,
                ApiError::TopicNotEmpty(_) => 26,
                ApiError::TopicFull(_) => 27,
            })
            .collect();
        assert_eq!(numbers, (0..=27).collect());
    }

    #[test]
    fn every_variant_has_its_own_code() {
        let codes: Vec<&str> = ApiError::one_of_each().iter().map(ApiError::code).collect();
        let unique: std::collections::BTreeSet<&str> = codes.iter().copied().collect();
        assert_eq!(unique.len(), codes.len(), "{codes:?}");
    }

    #[test]
    fn error_bodies_carry_code_and_message() {
        for e in ApiError::one_of_each() {
            let code = e.code();
            let status = e.status();
            let response = e.into_response();
            assert_eq!(response.status(), status);
            assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
            let bytes = futures_body(response);
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(v["error"]["code"], code);
            assert!(
                v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty())
            );
        }
    }

    #[test]
    fn an_unknown_field_is_named_first_with_the_nearest_known_one() {
        let known = [
            "url",
            "json",
            "idempotency_key",
            "max_attempts",
            "timeout_ms",
            "callback_url",
        ];
        let check = |name: &str, expected: &str| {
            assert_eq!(unknown_field(name, &known).message(), expected, "{name}");
        };
        check(
            "timeout",
            "timeout: unknown field; did you mean timeout_ms?",
        );
        check(
            "max_attempt",
            "max_attempt: unknown field; did you mean max_attempts?",
        );
        check(
            "idempotencykey",
            "idempotencykey: unknown field; did you mean idempotency_key?",
        );
        check("URL", "URL: unknown field; did you mean url?");
        check(
            "callback",
            "callback: unknown field; did you mean callback_url?",
        );
        check(
            "extra",
            "extra: unknown field (expected url, json, idempotency_key, max_attempts, timeout_ms, callback_url)",
        );
        check(
            "body",
            "body: unknown field (expected url, json, idempotency_key, max_attempts, timeout_ms, callback_url)",
        );
    }

    #[test]
    fn serde_s_unknown_field_is_reworded() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Body {
            url: Option<String>,
            timeout_ms: Option<u64>,
        }
        let check = |json: &str, expected: &str| {
            let e = serde_json::from_str::<Body>(json).unwrap_err();
            assert_eq!(data_refusal("body", &e).message(), expected, "{json}");
        };
        check(
            r#"{"timeout":1}"#,
            "timeout: unknown field; did you mean timeout_ms?",
        );
        check(
            r#"{"zzz":1}"#,
            "zzz: unknown field (expected url, timeout_ms)",
        );
        check(
            r#"{"url":1}"#,
            "body: invalid type: integer `1`, expected a string at line 1 column 8",
        );
    }

    #[test]
    fn store_errors_map_to_their_statuses() {
        let cases = [
            (StoreError::NotFound, 404, "not_found"),
            (
                StoreError::IdempotencyConflict {
                    fields: vec!["json"],
                },
                409,
                "idempotency_conflict",
            ),
            (StoreError::Exists, 500, "internal"),
            (
                StoreError::NotTerminal(tc_model::State::Running),
                409,
                "task_not_terminal",
            ),
            (
                StoreError::NotRetryable(tc_model::State::Success),
                409,
                "task_not_retryable",
            ),
            (
                StoreError::Unavailable("database is locked".into()),
                503,
                "unavailable",
            ),
            (StoreError::NotEmpty, 409, "tenant_not_empty"),
            (
                StoreError::QuotaExceeded { limit: 3 },
                429,
                "quota_exceeded",
            ),
        ];
        for (store_error, status, code) in cases {
            let e = ApiError::from(store_error);
            assert_eq!(e.status().as_u16(), status);
            assert_eq!(e.code(), code);
        }
        // What a NotFound or an Exists names follows what it was about.
        for (store_error, about, code, message) in [
            (
                StoreError::Exists,
                About::Tenant("a"),
                "tenant_exists",
                "name: a tenant named \"a\" exists",
            ),
            (
                StoreError::Exists,
                About::Schedule("n"),
                "schedule_exists",
                "name: a schedule named \"n\" exists",
            ),
            (
                StoreError::NotFound,
                About::Schedule("n"),
                "not_found",
                "no schedule named \"n\"",
            ),
            (
                StoreError::NotFound,
                About::Key {
                    tenant: "a",
                    id: "k1",
                },
                "not_found",
                "tenant \"a\" has no key \"k1\"",
            ),
            (
                StoreError::NotFound,
                About::Destination,
                "not_found",
                "no destination with this name: it has neither tasks nor settings",
            ),
        ] {
            let e = ApiError::from_store(store_error, about);
            assert_eq!(
                (e.code(), e.message().as_str()),
                (code, message),
                "{about:?}"
            );
        }
        let quota = ApiError::from(StoreError::QuotaExceeded { limit: 3 });
        assert!(quota.message().starts_with("max_pending: "), "{quota:?}");
        assert_eq!(quota.into_response().headers()[RETRY_AFTER], "1");
        let e = ApiError::from(StoreError::Unavailable("disk I/O error".into()));
        assert!(e.message().contains("disk I/O error"), "keeps the reason");
    }

    fn futures_body(response: Response<Full<Bytes>>) -> Bytes {
        use http_body_util::BodyExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(response.into_body().collect())
            .unwrap()
            .to_bytes()
    }
}
