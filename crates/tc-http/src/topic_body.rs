//! The bodies of the `/topics` routes, parsed and checked field
//! by field: a topic's settings, a subscription (whole, or a patch), an
//! event, a replay. Every refusal is 400 and names its field.

use std::time::{Duration, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tc_model::setting::InvalidSetting;
use tc_model::topic::event::NewEvent;
use tc_model::topic::{EventTypes, SubscriptionSpec, SubscriptionUpdate, TopicRef, TopicSpec};
use tc_model::{Limits, Timestamp};

use crate::call_fields::{parse_headers, parse_signing_secrets};
use crate::config::HttpConfig;
use crate::dto::{compact, integer, object_body, parse_schedule, present, present_raw};
use crate::error::{ApiError, json_type};

fn invalid(e: InvalidSetting) -> ApiError {
    ApiError::InvalidRequest(e.to_string())
}

/// `PUT /topics/{name}`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicBody {
    #[serde(default, deserialize_with = "present")]
    description: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    callback_url: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    disable_after_s: Option<Value>,
}

/// A string field that may be absent or null.
fn optional_string(field: &str, value: Option<Value>) -> Result<Option<String>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ApiError::InvalidRequest(format!(
            "{field}: must be a string, got {}",
            json_type(&other)
        ))),
    }
}

/// A topic's settings; the callback url must be under the allow-list.
pub(crate) fn parse_topic(bytes: &[u8], config: &HttpConfig) -> Result<TopicSpec, ApiError> {
    let body: TopicBody = if bytes.iter().all(u8::is_ascii_whitespace) {
        TopicBody {
            description: None,
            callback_url: None,
            disable_after_s: None,
        }
    } else {
        object_body(bytes)?
    };
    let description = optional_string("description", body.description)?.unwrap_or_default();
    let callback_url = optional_string("callback_url", body.callback_url)?;
    let disable_after_s = match body.disable_after_s {
        None | Some(Value::Null) => None,
        Some(v) => Some(integer("disable_after_s", &v, 1, u64::MAX)?),
    };
    let spec = TopicSpec::new(description, callback_url, disable_after_s).map_err(invalid)?;
    if let Some(url) = &spec.callback_url {
        url_allowed("callback_url", url, config)?;
    }
    Ok(spec)
}

/// 403 `url_not_allowed` when `url` is under no allowed prefix.
fn url_allowed(field: &str, url: &str, config: &HttpConfig) -> Result<(), ApiError> {
    tc_model::urls_allowed(url, None, &config.allow_url_prefixes)
        .map_err(|e| ApiError::UrlNotAllowed(format!("{field}: {e}")))
}

/// A subscription's body, whole (`POST`) or a patch.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubscriptionBody {
    #[serde(default, deserialize_with = "present")]
    url: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    event_types: Option<Value>,
    #[serde(default, deserialize_with = "present_raw")]
    headers: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    signing_secrets: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    enabled: Option<Value>,
}

fn parse_event_types(value: Value) -> Result<EventTypes, ApiError> {
    let list = match value {
        Value::Null => None,
        Value::Array(items) => Some(
            items
                .into_iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s),
                    other => Err(ApiError::InvalidRequest(format!(
                        "event_types: each must be a string, got {}",
                        json_type(&other)
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        other => {
            return Err(ApiError::InvalidRequest(format!(
                "event_types: must be a list of strings, got {}",
                json_type(&other)
            )));
        }
    };
    EventTypes::parse(list).map_err(invalid)
}

fn parse_enabled(value: Value) -> Result<bool, ApiError> {
    match value {
        Value::Bool(b) => Ok(b),
        other => Err(ApiError::InvalidRequest(format!(
            "enabled: must be a boolean, got {}",
            json_type(&other)
        ))),
    }
}

/// The fields of a subscription body, each checked (a url against the
/// allow-list too).
fn parse_subscription_fields(
    bytes: &[u8],
    config: &HttpConfig,
) -> Result<SubscriptionUpdate, ApiError> {
    let body: SubscriptionBody = object_body(bytes)?;
    let url = match body.url {
        None => None,
        Some(v) => {
            let url = optional_string("url", Some(v))?
                .ok_or_else(|| ApiError::InvalidRequest("url: must be a string".into()))?;
            SubscriptionSpec::new(url.clone(), EventTypes::all()).map_err(invalid)?;
            url_allowed("url", &url, config)?;
            Some(url)
        }
    };
    Ok(SubscriptionUpdate {
        url,
        event_types: body.event_types.map(parse_event_types).transpose()?,
        headers: body
            .headers
            .map(|raw| parse_headers(Some(&raw)))
            .transpose()?,
        signing_secrets: body
            .signing_secrets
            .map(|v| parse_signing_secrets(&v))
            .transpose()?,
        enabled: body.enabled.map(parse_enabled).transpose()?,
    })
}

/// `POST /topics/{name}/subscriptions`: `url` is required.
pub(crate) fn parse_subscription(
    bytes: &[u8],
    config: &HttpConfig,
) -> Result<SubscriptionSpec, ApiError> {
    let fields = parse_subscription_fields(bytes, config)?;
    let url = fields
        .url
        .ok_or_else(|| ApiError::InvalidRequest("url: is required".into()))?;
    let mut spec =
        SubscriptionSpec::new(url, fields.event_types.unwrap_or_default()).map_err(invalid)?;
    spec.headers = fields.headers.unwrap_or_default();
    spec.signing_secrets = fields.signing_secrets.unwrap_or_default();
    spec.enabled = fields.enabled.unwrap_or(true);
    Ok(spec)
}

/// `PATCH /topics/{name}/subscriptions/{id}`.
pub(crate) fn parse_patch(
    bytes: &[u8],
    config: &HttpConfig,
) -> Result<SubscriptionUpdate, ApiError> {
    parse_subscription_fields(bytes, config)
}

/// `POST /topics/{name}/events`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventBody {
    #[serde(default, deserialize_with = "present")]
    event_type: Option<Value>,
    #[serde(default, deserialize_with = "present_raw")]
    json: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    idempotency_key: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    max_attempts: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    timeout_ms: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    run_at: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    delay_ms: Option<Value>,
}

fn required(field: &str, value: Option<Value>) -> Result<String, ApiError> {
    optional_string(field, value)?
        .ok_or_else(|| ApiError::InvalidRequest(format!("{field}: is required")))
}

/// An event to publish on `topic`, with the server's defaults for the
/// budget and timeout.
pub(crate) fn parse_event(
    bytes: &[u8],
    topic: TopicRef,
    config: &HttpConfig,
    now: Timestamp,
) -> Result<NewEvent, ApiError> {
    let body: EventBody = object_body(bytes)?;
    let event_type = required("event_type", body.event_type)?;
    let idempotency_key = required("idempotency_key", body.idempotency_key)?;
    let json = match body.json {
        Some(raw) => compact(raw.get()),
        None => b"{}".to_vec(),
    };
    let max_attempts = match body.max_attempts {
        None => config.default_max_attempts,
        Some(v) => {
            let n = integer("max_attempts", &v, 1, u64::from(Limits::MAX_ATTEMPTS))?;
            u32::try_from(n).unwrap_or(Limits::MAX_ATTEMPTS)
        }
    };
    let max_timeout_ms = u64::try_from(Limits::MAX_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
    let timeout = match body.timeout_ms {
        None => config.default_timeout,
        Some(v) => Duration::from_millis(integer("timeout_ms", &v, 1, max_timeout_ms)?),
    };
    let first_run = parse_schedule(body.run_at, body.delay_ms, now)?;
    let limits = Limits {
        max_body_bytes: config.max_body_bytes,
    };
    NewEvent::new(
        topic,
        event_type,
        json,
        idempotency_key,
        max_attempts,
        timeout,
        &limits,
    )
    .and_then(|e| e.with_first_run(first_run))
    .map_err(invalid)
}

/// `POST …/replay`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayBody {
    #[serde(default, deserialize_with = "present")]
    since: Option<Value>,
}

/// The replay's `since`, an RFC 3339 time in UTC.
pub(crate) fn parse_replay(bytes: &[u8]) -> Result<Timestamp, ApiError> {
    let body: ReplayBody = object_body(bytes)?;
    let text = required("since", body.since)?;
    humantime::parse_rfc3339(&text)
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .map(Timestamp::from_millis)
        .ok_or_else(|| {
            ApiError::InvalidRequest(format!(
                "since: not an RFC 3339 time in UTC (e.g. 2026-01-02T03:04:05Z): {text:?}"
            ))
        })
}
