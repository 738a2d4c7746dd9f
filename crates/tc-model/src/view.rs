//! A task as the API shows it ([`TaskView`]): one shape for `GET
//! /tasks/{id}`, every listing and the body a callback POSTs, so the two
//! can never drift apart. Serialized with serde; no I/O. Credentials in
//! the task's headers are redacted ([`Headers::redacted`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use crate::{AttemptRecord, Headers, Task, Timestamp};

/// A task as the API shows it.
#[derive(Debug, Serialize)]
pub struct TaskView<'a> {
    id: String,
    state: &'static str,
    url: &'a str,
    method: &'static str,
    headers: HeadersView<'a>,
    destination: &'a str,
    idempotency_key: &'a str,
    /// The tenant it belongs to (null: submitted with the admin credential,
    /// or before tenants existed).
    tenant: Option<&'a str>,
    /// A topic's task: its topic, event and subscription (null
    /// for other tasks).
    topic: Option<&'a str>,
    event_id: Option<&'a str>,
    subscription: Option<&'a str>,
    /// The W3C trace id its calls carry (null for tasks stored before
    /// traces were kept).
    trace_id: Option<String>,
    attempt: u32,
    max_attempts: u32,
    /// 0 to 9, higher first within its destination.
    priority: u8,
    /// Its flow key, if any.
    flow_key: Option<&'a str>,
    http_status: Option<u16>,
    error: Option<&'a str>,
    result: Option<Cow<'a, str>>,
    /// Only in a callback's body: whether `result` was cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    result_truncated: Option<bool>,
    created_at: String,
    updated_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
    run_at: Option<String>,
    duration_ms: Option<u64>,
    callback_url: Option<&'a str>,
    callback_on: Option<Vec<&'static str>>,
    callback_of: Option<String>,
    callback_task_id: Option<String>,
    attempts: Vec<AttemptView<'a>>,
}

/// One try in a task view.
#[derive(Debug, Serialize)]
pub struct AttemptView<'a> {
    n: u32,
    started_at: String,
    finished_at: Option<String>,
    http_status: Option<u16>,
    error: Option<&'a str>,
    duration_ms: Option<u64>,
}

impl<'a> TaskView<'a> {
    /// The view of `task`, its result as text (invalid UTF-8 replaced).
    pub fn new(task: &'a Task) -> TaskView<'a> {
        TaskView {
            id: task.id.to_string(),
            state: task.state.as_str(),
            url: &task.url,
            method: task.method.as_str(),
            headers: HeadersView::new(&task.headers),
            destination: &task.destination,
            idempotency_key: &task.idempotency_key,
            tenant: task.tenant.as_deref(),
            topic: task.topic.as_ref().map(|l| l.topic.as_str()),
            event_id: task.topic.as_ref().map(|l| l.event_id.as_str()),
            subscription: task.topic.as_ref().map(|l| l.subscription.as_str()),
            trace_id: task.trace.as_ref().map(crate::TraceContext::trace_id_hex),
            attempt: task.attempt,
            max_attempts: task.max_attempts,
            priority: task.priority,
            flow_key: task.flow_key.as_deref(),
            http_status: task.http_status,
            error: task.error.as_deref(),
            result: task.result.as_deref().map(String::from_utf8_lossy),
            result_truncated: None,
            created_at: rfc3339(task.created_at),
            updated_at: rfc3339(task.updated_at),
            started_at: task.started_at.map(rfc3339),
            finished_at: task.finished_at.map(rfc3339),
            run_at: task.first_run.run_at(task.created_at).map(rfc3339),
            duration_ms: task.attempts.last().and_then(|a| a.duration_ms),
            callback_url: task.callback.as_ref().map(|c| c.url()),
            callback_on: task.callback.as_ref().map(|c| c.on().names()),
            callback_of: task.callback_of.map(|id| id.to_string()),
            callback_task_id: task.callback_task_id.map(|id| id.to_string()),
            attempts: task.attempts.iter().map(AttemptView::new).collect(),
        }
    }

    /// The view a callback POSTs: [`TaskView::new`] with the result cut to
    /// at most `result_bytes` bytes of text (on a character boundary) and
    /// `result_truncated` saying whether it was.
    pub fn for_callback(task: &'a Task, result_bytes: usize) -> TaskView<'a> {
        let mut view = TaskView::new(task);
        let mut truncated = false;
        if let Some(text) = view.result.take() {
            let (kept, cut) = cut_at(text, result_bytes);
            truncated = cut;
            view.result = Some(kept);
        }
        view.result_truncated = Some(truncated);
        view
    }
}

/// `text` cut to at most `limit` bytes, backing off to a character
/// boundary; and whether anything was cut.
fn cut_at(text: Cow<'_, str>, limit: usize) -> (Cow<'_, str>, bool) {
    if text.len() <= limit {
        return (text, false);
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let kept = match text {
        Cow::Borrowed(s) => Cow::Borrowed(&s[..end]),
        Cow::Owned(mut s) => {
            s.truncate(end);
            Cow::Owned(s)
        }
    };
    (kept, true)
}

impl<'a> AttemptView<'a> {
    fn new(a: &'a AttemptRecord) -> AttemptView<'a> {
        AttemptView {
            n: a.n,
            started_at: rfc3339(a.started_at),
            finished_at: a.finished_at.map(rfc3339),
            http_status: a.http_status,
            error: a.error.as_deref(),
            duration_ms: a.duration_ms,
        }
    }
}

/// A task's headers as views show them: an object in name order, the
/// values of credentials replaced by `"[redacted]"`.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct HeadersView<'a>(BTreeMap<&'a str, &'a str>);

impl<'a> HeadersView<'a> {
    /// The view of `headers`.
    pub fn new(headers: &'a Headers) -> HeadersView<'a> {
        HeadersView(headers.redacted().collect())
    }
}

/// The last millisecond humantime can print (end of year 9999).
const MAX_PRINTABLE_MS: i64 = 253_402_300_800_000 - 1;

/// RFC 3339 in UTC with milliseconds, e.g. `2026-01-02T03:04:05.678Z`.
/// Times outside 1970..=9999 are clamped: humantime panics on those, and
/// no clock this service runs on produces them.
pub fn rfc3339(t: Timestamp) -> String {
    let ms = t.as_millis().clamp(0, MAX_PRINTABLE_MS);
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs()))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_cut_on_a_character_boundary() {
        let check = |text: &str, limit: usize, kept: &str, cut: bool| {
            let (got, was_cut) = cut_at(Cow::Borrowed(text), limit);
            assert_eq!((got.as_ref(), was_cut), (kept, cut), "{text:?} at {limit}");
            let (got, was_cut) = cut_at(Cow::Owned(text.to_owned()), limit);
            assert_eq!((got.as_ref(), was_cut), (kept, cut), "{text:?} at {limit}");
        };
        check("", 0, "", false);
        check("abc", 3, "abc", false);
        check("abc", 2, "ab", true);
        check("abc", 0, "", true);
        check("aé", 2, "a", true);
        check("aé", 3, "aé", false);
        check("€x", 1, "", true);
        check("€x", 3, "€", true);
    }

    #[test]
    fn timestamps_print_as_rfc3339_utc_millis() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_767_225_845_678, "2026-01-01T00:04:05.678Z"),
            (-5, "1970-01-01T00:00:00.000Z"),
            (i64::MAX, "9999-12-31T23:59:59.999Z"),
        ];
        for (ms, expected) in cases {
            assert_eq!(rfc3339(Timestamp::from_millis(ms)), expected, "{ms}");
        }
    }

    #[test]
    fn views_redact_credentials() {
        let headers = Headers::parse([
            ("Authorization".to_owned(), "Bearer s3cr3t".to_owned()),
            ("X-Tenant".to_owned(), "acme".to_owned()),
        ])
        .unwrap();
        assert_eq!(
            serde_json::to_value(HeadersView::new(&headers)).unwrap(),
            serde_json::json!({"authorization": "[redacted]", "x-tenant": "acme"})
        );
    }
}
