//! The JSON the API speaks, and its conversion to and from domain types. Only
//! this module knows the wire shapes; the domain types stay free of serde.

use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use tc_model::callback::{Callback, CallbackOn};
use tc_model::store::{BulkAction, BulkOutcome, TaskFilter};
use tc_model::{FirstRun, Limits, NewTask, State, TaskId, Timestamp, ValidationError};

use crate::config::HttpConfig;
use crate::error::{ApiError, json_type};
use crate::query::{FILTER_FIELDS, FilterFields};

/// The body of `POST /tasks` as sent. Every field is a raw JSON value so that
/// type errors can be reported with the field's name (serde's own messages
/// for a wrong type do not name it); `Some(Value::Null)` is an explicit null,
/// `None` an absent field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    #[serde(default, deserialize_with = "present")]
    url: Option<Value>,
    /// Kept as the client wrote it: the downstream gets its key order,
    /// number digits and string escapes unchanged.
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
    #[serde(default, deserialize_with = "present")]
    method: Option<Value>,
    /// Kept as text: [`crate::call_fields::parse_headers`] reads its members in
    /// order, so a name given twice is refused rather than one copy lost.
    #[serde(default, deserialize_with = "present_raw")]
    headers: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    callback_url: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    callback_on: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    priority: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    flow_key: Option<Value>,
}

/// A submit's `flow_key`: a string (tc-model checks its characters).
fn parse_flow_key(value: Option<Value>) -> Result<Option<String>, ApiError> {
    match value {
        None => Ok(None),
        Some(Value::String(k)) => Ok(Some(k)),
        Some(other) => Err(ApiError::InvalidRequest(format!(
            "flow_key: must be a string, got {}",
            json_type(&other)
        ))),
    }
}

/// Deserializes a field that is present, even as `null`, to `Some`.
pub(crate) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Like [`present`], for a value kept as its JSON text.
pub(crate) fn present_raw<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// `json` without its insignificant whitespace, every other byte as sent.
/// The input is valid JSON (serde checked it), so whitespace outside
/// strings is exactly what may go.
pub(crate) fn compact(json: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for &b in json.as_bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            continue;
        }
        out.push(b);
    }
    out
}

/// Parses and validates a submission. Every refusal is 400 and its message
/// starts with the field's name as the API spells it.
pub(crate) fn parse_submit(
    bytes: &[u8],
    config: &HttpConfig,
    now: Timestamp,
) -> Result<NewTask, ApiError> {
    let invalid = ApiError::InvalidRequest;
    // A struct also deserializes from a JSON array (fields by position):
    // only an object is a submission.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(match serde_json::from_slice::<Value>(bytes) {
            Ok(_) => invalid("body: must be a JSON object".into()),
            Err(e) => invalid(format!("body: not valid JSON: {e}")),
        });
    }
    // Straight from the bytes, not through a `Value`, so that a repeated
    // field is refused rather than silently last-one-wins.
    let body: SubmitBody = serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => crate::error::data_refusal("body", &e),
        _ => invalid(format!("body: not valid JSON: {e}")),
    })?;

    let url = required_string("url", body.url)?;
    let idempotency_key = required_string("idempotency_key", body.idempotency_key)?;
    let max_attempts = match body.max_attempts {
        None => config.default_max_attempts,
        Some(v) => {
            let n = integer("max_attempts", &v, 1, u64::from(Limits::MAX_ATTEMPTS))?;
            u32::try_from(n).map_err(|_| range_error("max_attempts", 1, Limits::MAX_ATTEMPTS))?
        }
    };
    let max_timeout_ms = u64::try_from(Limits::MAX_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
    let timeout = match body.timeout_ms {
        None => config.default_timeout,
        Some(v) => Duration::from_millis(integer("timeout_ms", &v, 1, max_timeout_ms)?),
    };
    let method = crate::call_fields::parse_method(body.method)?;
    let headers = crate::call_fields::parse_headers(body.headers.as_deref())?;
    // Without `json`, a POST, PUT or PATCH sends `{}`; a GET or DELETE
    // sends nothing.
    let downstream_body = match body.json {
        Some(raw) => compact(raw.get()),
        None if method.has_default_body() => b"{}".to_vec(),
        None => Vec::new(),
    };
    let schedule = parse_schedule(body.run_at, body.delay_ms, now)?;
    let callback = parse_callback(body.callback_url, body.callback_on)?;
    let max_priority = tc_model::priority::MAX_PRIORITY;
    let priority = match body.priority {
        None => 0,
        Some(v) => {
            let p = integer("priority", &v, 0, u64::from(max_priority))?;
            u8::try_from(p).map_err(|_| range_error("priority", 0, max_priority))?
        }
    };
    let flow_key = parse_flow_key(body.flow_key)?;
    let limits = Limits {
        max_body_bytes: config.max_body_bytes,
    };
    NewTask::new(
        url,
        downstream_body,
        idempotency_key,
        max_attempts,
        timeout,
        &limits,
    )
    .and_then(|task| task.with_first_run(schedule))
    .and_then(|task| task.with_method(method))
    .and_then(|task| task.with_priority(priority))
    .and_then(|task| task.with_flow_key(flow_key))
    .map(|task| task.with_headers(headers))
    .map(|task| match callback {
        Some(callback) => task.with_callback(callback),
        None => task,
    })
    .map_err(|e| invalid(validation_message(&e)))
}

/// `callback_url` (a url, as `url` is) and `callback_on` (a non-empty list
/// of distinct states among success, failed and canceled; success and
/// failed by default). `callback_on` without a `callback_url` is checked
/// and asks for nothing.
fn parse_callback(url: Option<Value>, on: Option<Value>) -> Result<Option<Callback>, ApiError> {
    let invalid = ApiError::InvalidRequest;
    let on = match on {
        None => None,
        Some(Value::Array(items)) => {
            let names = items
                .iter()
                .map(Value::as_str)
                .collect::<Option<Vec<&str>>>()
                .ok_or_else(|| invalid("callback_on: every state must be a string".into()))?;
            Some(
                CallbackOn::parse(names)
                    .map_err(|message| invalid(format!("callback_on: {message}")))?,
            )
        }
        Some(other) => {
            return Err(invalid(format!(
                "callback_on: must be a list of states, got {}",
                json_type(&other)
            )));
        }
    };
    let Some(url) = url else {
        return Ok(None);
    };
    let url = required_string("callback_url", Some(url))?;
    Callback::new(url, on.unwrap_or_default())
        .map(Some)
        .map_err(|e| invalid(validation_message(&e)))
}

/// `run_at` (RFC 3339, at most 365 days after `now`; a past time runs at
/// once) or `delay_ms` (0..=365 days), not both.
pub(crate) fn parse_schedule(
    run_at: Option<Value>,
    delay_ms: Option<Value>,
    now: Timestamp,
) -> Result<FirstRun, ApiError> {
    let invalid = ApiError::InvalidRequest;
    let max_ms = u64::try_from(FirstRun::MAX_AHEAD.as_millis()).unwrap_or(u64::MAX);
    match (run_at, delay_ms) {
        (Some(_), Some(_)) => Err(invalid("run_at: give run_at or delay_ms, not both".into())),
        (None, None) => Ok(FirstRun::Now),
        (None, Some(v)) => Ok(FirstRun::After(Duration::from_millis(integer(
            "delay_ms", &v, 0, max_ms,
        )?))),
        (Some(Value::String(text)), None) => {
            // humantime reads RFC 3339 in UTC (`Z`), with any fraction.
            let at = humantime::parse_rfc3339(&text)
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .and_then(|d| i64::try_from(d.as_millis()).ok())
                .map(Timestamp::from_millis)
                .ok_or_else(|| {
                    invalid(format!(
                        "run_at: not an RFC 3339 time in UTC (e.g. 2026-01-02T03:04:05Z): {text:?}"
                    ))
                })?;
            if at.duration_since(now) > FirstRun::MAX_AHEAD {
                return Err(invalid("run_at: must be at most 365 days ahead".into()));
            }
            Ok(FirstRun::At(at))
        }
        (Some(other), None) => Err(invalid(format!(
            "run_at: must be a string, got {}",
            json_type(&other)
        ))),
    }
}

/// The body of `POST /tasks/batch`: each task kept as its JSON text, to be
/// parsed like a single submit.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    tasks: Vec<Box<RawValue>>,
}

/// The most tasks in one batch.
pub(crate) const MAX_BATCH: usize = 1000;

/// Parses a batch's envelope: `{"tasks": [1..=1000 submit bodies]}`. The
/// items themselves are parsed one by one, so that one bad item fails alone.
pub(crate) fn parse_batch(bytes: &[u8]) -> Result<Vec<Box<RawValue>>, ApiError> {
    let invalid = ApiError::InvalidRequest;
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(invalid(
            "body: must be a JSON object {\"tasks\": [...]}".into(),
        ));
    }
    let body: BatchBody = serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => crate::error::data_refusal("tasks", &e),
        _ => invalid(format!("body: not valid JSON: {e}")),
    })?;
    if !(1..=MAX_BATCH).contains(&body.tasks.len()) {
        return Err(invalid(format!(
            "tasks: must hold 1 to {MAX_BATCH} tasks, got {}",
            body.tasks.len()
        )));
    }
    Ok(body.tasks)
}

/// One entry of a batch's answer: the task, or why this item was refused.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum BatchItem<'a> {
    Task {
        status: u16,
        task: Box<TaskView<'a>>,
    },
    Refused {
        status: u16,
        error: ErrorView,
    },
}

/// An error as the API spells it, inside a batch's answer.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorView {
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

/// The answer to `POST /tasks/batch`, in the order the tasks were sent.
#[derive(Debug, Serialize)]
pub(crate) struct BatchView<'a> {
    pub(crate) results: Vec<BatchItem<'a>>,
}

/// The optional body of `POST /tasks/{id}/retry`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryBody {
    #[serde(default, deserialize_with = "present")]
    delay_ms: Option<Value>,
}

/// The longest a retry or a delayed task may be put off: 365 days.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses a retry's body: empty, or `{"delay_ms": N}` with N in
/// `0..=365 days`. Returns the delay.
pub(crate) fn parse_retry(bytes: &[u8]) -> Result<Duration, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Duration::ZERO);
    }
    let body: RetryBody = object_body(bytes)?;
    let max_ms = u64::try_from(MAX_DELAY.as_millis()).unwrap_or(u64::MAX);
    match body.delay_ms {
        None => Ok(Duration::ZERO),
        Some(v) => Ok(Duration::from_millis(integer("delay_ms", &v, 0, max_ms)?)),
    }
}

/// A body that must be a JSON object, read straight into `T`: anything
/// else, or a field `T` refuses, is 400 naming the body.
pub(crate) fn object_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let invalid = ApiError::InvalidRequest;
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(invalid("body: must be a JSON object".into()));
    }
    serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => crate::error::data_refusal("body", &e),
        _ => invalid(format!("body: not valid JSON: {e}")),
    })
}

pub(crate) fn required_string(field: &str, value: Option<Value>) -> Result<String, ApiError> {
    match value {
        Some(Value::String(s)) => Ok(s),
        None => Err(ApiError::InvalidRequest(format!("{field}: is required"))),
        Some(other) => Err(ApiError::InvalidRequest(format!(
            "{field}: must be a string, got {}",
            json_type(&other)
        ))),
    }
}

/// A non-negative integer in `min..=max`, however the number is written
/// (`3`, `3.0`, `3e0`); a fraction, a negative and a number too large for
/// u64 are refused, naming the field.
pub(crate) fn integer(field: &str, value: &Value, min: u64, max: u64) -> Result<u64, ApiError> {
    match value {
        Value::Number(n) => match whole_number(n) {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(range_error(field, min, max)),
        },
        _ => Err(range_error(field, min, max)),
    }
}

/// The value of `n` when it is a whole number from 0 to `u64::MAX`, as JSON
/// Schema's `integer` reads a number: `3.0`, `30e-1` and `-0` are integers,
/// `1.0000000000000001` is not. Exact: the digits as written are read, never
/// rounded through a float.
pub(crate) fn whole_number(n: &serde_json::Number) -> Option<u64> {
    if let Some(v) = n.as_u64() {
        return Some(v);
    }
    let text = n.to_string();
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (unsigned, None),
    };
    let (int_part, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = format!("{int_part}{fraction}");
    let significant = digits.trim_start_matches('0');
    let kept = significant.trim_end_matches('0');
    if kept.is_empty() {
        return Some(0);
    }
    if negative {
        return None;
    }
    // The value is `kept` × 10^shift.
    let trailing_zeros = i64::try_from(significant.len() - kept.len()).ok()?;
    let exponent: i64 = match exponent {
        None => 0,
        // Longer than any exponent that keeps a nonzero value in u64.
        Some(e) if e.trim_start_matches(['+', '-']).len() > 18 => return None,
        Some(e) => e.parse().ok()?,
    };
    let fraction_len = i64::try_from(fraction.len()).ok()?;
    let shift = exponent - fraction_len + trailing_zeros;
    if shift < 0 {
        return None;
    }
    let base: u64 = kept.parse().ok()?;
    10u64
        .checked_pow(u32::try_from(shift).ok()?)
        .and_then(|scale| base.checked_mul(scale))
}

fn range_error(field: &str, min: impl std::fmt::Display, max: impl std::fmt::Display) -> ApiError {
    ApiError::InvalidRequest(format!(
        "{field}: must be an integer between {min} and {max}"
    ))
}

/// The domain's message with the field renamed to the API's spelling.
fn validation_message(e: &ValidationError) -> String {
    let field = e.field();
    let api_field = match field {
        "timeout" => "timeout_ms",
        "body" => "json",
        other => other,
    };
    let text = e.to_string();
    if api_field == field {
        return text;
    }
    let rest = text
        .strip_prefix(field)
        .and_then(|r| r.strip_prefix(": "))
        .unwrap_or(&text);
    format!("{api_field}: {rest}")
}

/// A task as the API shows it: tc-model's, the shape a callback posts too.
pub(crate) use tc_model::view::TaskView;

/// The body of `POST /tasks/bulk`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkBody {
    #[serde(default, deserialize_with = "present")]
    action: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    filter: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    dry_run: Option<Value>,
}

/// A parsed `POST /tasks/bulk`.
#[derive(Debug, PartialEq)]
pub(crate) struct BulkRequest {
    pub(crate) action: BulkAction,
    pub(crate) filter: TaskFilter,
    pub(crate) dry_run: bool,
}

/// Parses `{"action": "retry"|"cancel"|"delete", "filter": {...}, "dry_run":
/// bool}`: the filter takes the list's filter fields, as strings, and is
/// required (`{}` covers every task, said on purpose).
pub(crate) fn parse_bulk(bytes: &[u8]) -> Result<BulkRequest, ApiError> {
    let invalid = ApiError::InvalidRequest;
    let body: BulkBody = object_body(bytes)?;
    let action = match required_string("action", body.action)?.as_str() {
        "retry" => BulkAction::Retry,
        "cancel" => BulkAction::Cancel,
        "delete" => BulkAction::Delete,
        other => {
            return Err(invalid(format!(
                "action: must be one of retry, cancel, delete; got {other:?}"
            )));
        }
    };
    let dry_run = match body.dry_run {
        None => false,
        Some(Value::Bool(b)) => b,
        Some(other) => {
            return Err(invalid(format!(
                "dry_run: must be a boolean, got {}",
                json_type(&other)
            )));
        }
    };
    let fields = match body.filter {
        Some(Value::Object(fields)) => fields,
        None => {
            return Err(invalid("filter: is required ({} covers every task)".into()));
        }
        Some(other) => {
            return Err(invalid(format!(
                "filter: must be an object, got {}",
                json_type(&other)
            )));
        }
    };
    let mut filter = FilterFields::default();
    for (name, value) in fields {
        let slot = filter.slot(&name).ok_or_else(|| {
            crate::error::unknown_field(&format!("filter.{name}"), &FILTER_FIELDS)
        })?;
        match value {
            // The one number among the filter's fields: any number with an
            // integer value, as everywhere in the API.
            Value::Number(n) if name == "priority" => {
                *slot = Some(match whole_number(&n) {
                    Some(whole) => whole.to_string(),
                    None => n.to_string(),
                });
            }
            other if name == "priority" => {
                return Err(invalid(format!(
                    "filter.priority: must be an integer from 0 to {}, got {}",
                    tc_model::priority::MAX_PRIORITY,
                    json_type(&other)
                )));
            }
            Value::String(s) => *slot = Some(s),
            other => {
                return Err(invalid(format!(
                    "filter.{name}: must be a string, got {}",
                    json_type(&other)
                )));
            }
        }
    }
    Ok(BulkRequest {
        action,
        filter: filter.parse().map_err(|e| match e {
            ApiError::InvalidRequest(m) => invalid(format!("filter.{m}")),
            other => other,
        })?,
        dry_run,
    })
}

/// The answer to `POST /tasks/bulk`.
#[derive(Debug, Serialize)]
pub(crate) struct BulkView {
    matched: u64,
    applied: u64,
    /// A retry's tasks left as they were for their tenant's `max_pending`
    /// or submit rate.
    refused_quota: u64,
    /// Of a retry: the covered failed or canceled tasks not retried because
    /// the allow-list no longer admits their url or callback url (0 for
    /// the other actions).
    refused_url: u64,
    sample: Vec<String>,
}

impl BulkView {
    pub(crate) fn new(outcome: &BulkOutcome) -> BulkView {
        BulkView {
            matched: outcome.matched,
            applied: outcome.applied,
            refused_quota: outcome.refused_quota,
            refused_url: outcome.refused_url,
            sample: outcome.sample.iter().map(ToString::to_string).collect(),
        }
    }
}

/// The answer to `POST /tasks/{id}/cancel`.
#[derive(Debug, Serialize)]
pub(crate) struct CancelView {
    id: String,
    state: &'static str,
}

impl CancelView {
    pub(crate) fn new(id: TaskId, state: State) -> CancelView {
        CancelView {
            id: id.to_string(),
            state: state.as_str(),
        }
    }
}

pub use tc_model::view::rfc3339;

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-01-01T00:00:00Z.
    const NOW: Timestamp = Timestamp::from_millis(1_767_225_600_000);

    fn config() -> HttpConfig {
        HttpConfig {
            default_max_attempts: 7,
            default_timeout: Duration::from_millis(1234),
            max_body_bytes: 64,
            ..HttpConfig::default()
        }
    }

    /// Parses `body`; `Ok(())` checks it was accepted, `Err(prefix)` that it
    /// was refused with a message starting with `prefix`.
    fn check(body: &str, expected: Result<(), &str>) {
        let got = parse_submit(body.as_bytes(), &config(), NOW);
        match (got, expected) {
            (Ok(_), Ok(())) => {}
            (Err(ApiError::InvalidRequest(message)), Err(prefix)) => {
                assert!(
                    message.starts_with(prefix),
                    "{body}: message {message:?} should start with {prefix:?}"
                );
            }
            (got, expected) => panic!("{body}: expected {expected:?}, got {got:?}"),
        }
    }

    const URL: &str = r#""url":"http://127.0.0.1:9/hook""#;
    const KEY: &str = r#""idempotency_key":"k1""#;

    #[test]
    fn submissions_are_checked_field_by_field() {
        let ok = |extra: &str| format!("{{{URL},{KEY}{extra}}}");
        let cases: Vec<(String, Result<(), &str>)> = vec![
            (ok(""), Ok(())),
            (
                ok(r#","json":{"a":[1,2]},"max_attempts":100,"timeout_ms":600000"#),
                Ok(()),
            ),
            (ok(r#","json":null"#), Ok(())),
            (ok(r#","json":"text""#), Ok(())),
            (ok(r#","max_attempts":1,"timeout_ms":1"#), Ok(())),
            ("".into(), Err("body: not valid JSON")),
            ("{".into(), Err("body: not valid JSON")),
            (format!("{{{URL},{KEY}}} x"), Err("body: not valid JSON")),
            ("[]".into(), Err("body: must be a JSON object")),
            (
                r#"["http://x/","k"]"#.into(),
                Err("body: must be a JSON object"),
            ),
            ("null".into(), Err("body: must be a JSON object")),
            (
                ok(r#","extra":1"#),
                Err("extra: unknown field (expected url, json"),
            ),
            (
                ok(r#","timeout":1"#),
                Err("timeout: unknown field; did you mean timeout_ms?"),
            ),
            (
                ok(r#","url":"http://a/""#),
                Err("body: duplicate field `url`"),
            ),
            (format!("{{{KEY}}}"), Err("url: is required")),
            (format!("{{{URL}}}"), Err("idempotency_key: is required")),
            (
                format!(r#"{{"url":5,{KEY}}}"#),
                Err("url: must be a string, got a number"),
            ),
            (
                format!(r#"{{"url":null,{KEY}}}"#),
                Err("url: must be a string, got null"),
            ),
            (
                format!(r#"{{{URL},"idempotency_key":["k"]}}"#),
                Err("idempotency_key: must be a string"),
            ),
            (
                format!(r#"{{"url":"ftp://h/x",{KEY}}}"#),
                Err("url: scheme must be http or https"),
            ),
            (format!(r#"{{"url":"/relative",{KEY}}}"#), Err("url: ")),
            (format!(r#"{{"url":"not a url",{KEY}}}"#), Err("url: ")),
            (
                format!(r#"{{{URL},"idempotency_key":""}}"#),
                Err("idempotency_key: must not be empty"),
            ),
            (
                ok(r#","max_attempts":0"#),
                Err("max_attempts: must be an integer between 1 and 100"),
            ),
            (
                ok(r#","max_attempts":101"#),
                Err("max_attempts: must be an integer between 1 and 100"),
            ),
            (ok(r#","max_attempts":-1"#), Err("max_attempts: ")),
            (ok(r#","max_attempts":2.5"#), Err("max_attempts: ")),
            // An integer is a number with no fraction, however written
            // (JSON Schema's `integer`, which the document promises).
            (ok(r#","max_attempts":3.0"#), Ok(())),
            (ok(r#","max_attempts":3e0,"timeout_ms":383.000"#), Ok(())),
            (ok(r#","max_attempts":30e-1,"delay_ms":0.5e1"#), Ok(())),
            (
                ok(r#","max_attempts":1.0000000000000001"#),
                Err("max_attempts: "),
            ),
            (ok(r#","max_attempts":100.5"#), Err("max_attempts: ")),
            (ok(r#","max_attempts":1e3"#), Err("max_attempts: ")),
            (
                ok(r#","max_attempts":99999999999999999999999"#),
                Err("max_attempts: "),
            ),
            (ok(r#","max_attempts":"3""#), Err("max_attempts: ")),
            (ok(r#","max_attempts":null"#), Err("max_attempts: ")),
            (
                ok(r#","timeout_ms":0"#),
                Err("timeout_ms: must be an integer between 1 and 600000"),
            ),
            (ok(r#","timeout_ms":600001"#), Err("timeout_ms: ")),
            (ok(r#","timeout_ms":-5"#), Err("timeout_ms: ")),
            (
                ok(r#","timeout_ms":18446744073709551615"#),
                Err("timeout_ms: "),
            ),
            (
                ok(r#","json":"0123456789012345678901234567890123456789012345678901234567890123""#),
                Err("json: "),
            ),
            // Delayed tasks: NOW is 2026-01-01T00:00:00Z.
            (ok(r#","delay_ms":0"#), Ok(())),
            (ok(r#","delay_ms":31536000000"#), Ok(())),
            (ok(r#","delay_ms":31536000001"#), Err("delay_ms: ")),
            (ok(r#","delay_ms":-1"#), Err("delay_ms: ")),
            (ok(r#","delay_ms":1.5"#), Err("delay_ms: ")),
            (ok(r#","delay_ms":-0.0"#), Ok(())),
            (ok(r#","delay_ms":0e99999999999999999999"#), Ok(())),
            (
                ok(r#","delay_ms":1e99999999999999999999"#),
                Err("delay_ms: "),
            ),
            (
                ok(r#","delay_ms":1e-99999999999999999999"#),
                Err("delay_ms: "),
            ),
            (ok(r#","delay_ms":315360000000000e-4"#), Ok(())),
            (ok(r#","delay_ms":315360000010000e-4"#), Err("delay_ms: ")),
            (ok(r#","run_at":"2026-06-01T12:00:00Z""#), Ok(())),
            (ok(r#","run_at":"2026-12-31T23:59:59.999Z""#), Ok(())),
            (ok(r#","run_at":"2025-01-01T00:00:00Z""#), Ok(())),
            (
                ok(r#","run_at":"2027-01-01T00:00:00.001Z""#),
                Err("run_at: must be at most 365 days"),
            ),
            (
                ok(r#","run_at":"tomorrow""#),
                Err("run_at: not an RFC 3339"),
            ),
            (
                ok(r#","run_at":"2026-06-01""#),
                Err("run_at: not an RFC 3339"),
            ),
            (
                ok(r#","run_at":1767225600000"#),
                Err("run_at: must be a string"),
            ),
            (
                ok(r#","run_at":"2026-06-01T12:00:00Z","delay_ms":5"#),
                Err("run_at: give run_at or delay_ms, not both"),
            ),
            (ok(r#","callback_url":"http://127.0.0.1:9/cb""#), Ok(())),
            (
                ok(r#","callback_url":"http://h/cb","callback_on":["canceled"]"#),
                Ok(()),
            ),
            (ok(r#","callback_on":["failed"]"#), Ok(())),
            (
                ok(r#","callback_url":"ftp://h/cb""#),
                Err("callback_url: scheme must be http or https"),
            ),
            (
                ok(r#","callback_url":5"#),
                Err("callback_url: must be a string"),
            ),
            (
                ok(r#","callback_url":null"#),
                Err("callback_url: must be a string"),
            ),
            (
                ok(r#","callback_url":"http://h/cb","callback_on":[]"#),
                Err("callback_on: must name at least one state"),
            ),
            (
                ok(r#","callback_url":"http://h/cb","callback_on":["success","success"]"#),
                Err("callback_on: \"success\" is given twice"),
            ),
            (
                ok(r#","callback_url":"http://h/cb","callback_on":["pending"]"#),
                Err("callback_on: must hold only"),
            ),
            (
                ok(r#","callback_url":"http://h/cb","callback_on":[1]"#),
                Err("callback_on: every state must be a string"),
            ),
            (
                ok(r#","callback_url":"http://h/cb","callback_on":"success""#),
                Err("callback_on: must be a list of states, got a string"),
            ),
        ];
        for (body, expected) in cases {
            check(&body, expected);
        }
    }

    #[test]
    fn whole_numbers_are_read_exactly() {
        let check = |text: &str, expected: Option<u64>| {
            let n: serde_json::Number = serde_json::from_str(text).unwrap();
            assert_eq!(whole_number(&n), expected, "{text}");
        };
        check("0", Some(0));
        check("-0", Some(0));
        check("-0.000e5", Some(0));
        check("7", Some(7));
        check("7.000", Some(7));
        check("0.7e1", Some(7));
        check("700e-2", Some(7));
        check("7E+0", Some(7));
        check("18446744073709551615", Some(u64::MAX));
        check("1.8446744073709551615e19", Some(u64::MAX));
        check("18446744073709551616", None);
        check("1e20", None);
        check("-1", None);
        check("-1.0", None);
        check("0.5", None);
        check("7.0000000000000001", None);
        check("7e-1", None);
        check("1e999999999999999999999", None);
    }

    #[test]
    fn a_schedule_is_kept_as_asked() {
        let parse = |extra: &str| {
            parse_submit(format!("{{{URL},{KEY}{extra}}}").as_bytes(), &config(), NOW)
                .unwrap()
                .first_run()
        };
        assert_eq!(parse(""), FirstRun::Now);
        assert_eq!(
            parse(r#","delay_ms":1500"#),
            FirstRun::After(Duration::from_millis(1500))
        );
        assert_eq!(
            parse(r#","run_at":"2026-01-01T00:00:01.250Z""#),
            FirstRun::At(Timestamp::from_millis(NOW.as_millis() + 1250))
        );
    }

    #[test]
    fn defaults_come_from_the_config_and_json_from_the_json_field() {
        let task = parse_submit(format!("{{{URL},{KEY}}}").as_bytes(), &config(), NOW).unwrap();
        assert_eq!(task.max_attempts(), 7);
        assert_eq!(task.timeout(), Duration::from_millis(1234));
        assert_eq!(task.body(), b"{}");
        assert_eq!(task.url(), "http://127.0.0.1:9/hook");
        assert_eq!(task.idempotency_key(), "k1");

        let body = format!("{{{URL},{KEY},\"json\":{{ \"b\" : [1, \"x\"],\n\t\"a\": null }}}}");
        let task = parse_submit(body.as_bytes(), &config(), NOW).unwrap();
        assert_eq!(
            task.body(),
            br#"{"b":[1,"x"],"a":null}"#,
            "compact JSON, keys in the order sent"
        );

        let task = parse_submit(
            format!(r#"{{{URL},{KEY},"json":null}}"#).as_bytes(),
            &config(),
            NOW,
        )
        .unwrap();
        assert_eq!(task.body(), b"null", "an explicit null is sent as null");
    }

    #[test]
    fn the_downstream_gets_the_json_as_sent_less_its_whitespace() {
        let check = |json: &str, expected: &str| {
            let body = format!(r#"{{{URL},{KEY},"json":{json}}}"#);
            let config = HttpConfig {
                max_body_bytes: 1024,
                ..config()
            };
            let task = parse_submit(body.as_bytes(), &config, NOW).unwrap();
            assert_eq!(String::from_utf8_lossy(task.body()), expected, "{json}");
        };
        // Numbers keep their digits: no rounding through f64, no rewriting.
        check(
            r#"{"big":123456789012345678901234567890,"exp":1e2,"neg":-0.10,"f":1.50}"#,
            r#"{"big":123456789012345678901234567890,"exp":1e2,"neg":-0.10,"f":1.50}"#,
        );
        // serde_json's arbitrary_precision marker is just an object here.
        check(
            r#"{"$serde_json::private::Number":"1"}"#,
            r#"{"$serde_json::private::Number":"1"}"#,
        );
        check(r#"{ "z" : 1 , "a" : 2 }"#, r#"{"z":1,"a":2}"#);
        // Escapes and whitespace inside strings stay as written.
        check(
            r#""a \"q\" \u00e9\n\\ \t b""#,
            r#""a \"q\" \u00e9\n\\ \t b""#,
        );
        check(r#"[ "x y" , { } ]"#, r#"["x y",{}]"#);
        check("null", "null");
        check(r#""\\""#, r#""\\""#);
    }

    #[test]
    fn domain_field_names_become_api_field_names() {
        let e = ValidationError::Timeout { got_ms: 0 };
        assert!(validation_message(&e).starts_with("timeout_ms: must be between"));
        let e = ValidationError::Body { got: 9, limit: 1 };
        assert_eq!(
            validation_message(&e),
            "json: 9 bytes is over the limit of 1 bytes"
        );
        let e = ValidationError::Url("must have a host".into());
        assert_eq!(validation_message(&e), "url: must have a host");
    }
}
