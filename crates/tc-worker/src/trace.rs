//! The span of one try, by the OpenTelemetry HTTP client conventions: named
//! by its method, a child of the task's stored trace context, carrying the
//! call's attributes and how it ended. Made with the OpenTelemetry API and
//! an explicit parent (the context comes from the store, not from the
//! current span); without a tracer (no `--otlp-endpoint`) there is no span,
//! and the call's `traceparent` names the stored parent instead.
//!
//! Also the ids a task's log lines carry: `trace_id`, and `span_id` inside
//! a span.

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanBuilder, SpanKind};
use tc_model::{Task, TraceContext};
use tc_trace::ChildSpan;

/// The tracer the worker makes its spans with (the server's, exporting
/// over OTLP); `None` in [`crate::config::WorkerConfig`]: no spans.
pub use tc_trace::SpanTracer;

/// One try's span, if spans are made, and its context as the call's
/// `traceparent` names it.
pub(crate) struct AttemptSpan {
    span: Option<ChildSpan>,
    trace_id: Option<String>,
    span_id: Option<String>,
}

impl AttemptSpan {
    /// Starts the span of `task`'s current try, a child of its stored
    /// context (a root when it has none).
    pub(crate) fn start(tracer: Option<&SpanTracer>, task: &Task) -> AttemptSpan {
        let stored = task.trace.as_ref();
        let Some(tracer) = tracer else {
            return AttemptSpan {
                span: None,
                trace_id: stored.map(TraceContext::trace_id_hex),
                span_id: None,
            };
        };
        let builder = SpanBuilder::from_name(task.method.as_str())
            .with_kind(SpanKind::Client)
            .with_attributes(attributes(task));
        let span = ChildSpan::start(tracer, builder, stored);
        AttemptSpan {
            trace_id: span.context().or(stored).map(TraceContext::trace_id_hex),
            span_id: span.span_id_hex(),
            span: Some(span),
        }
    }

    /// The context the call's `traceparent` carries when the try has a span.
    pub(crate) fn context(&self) -> Option<&TraceContext> {
        self.span.as_ref().and_then(ChildSpan::context)
    }

    /// The task's trace id, for its log lines.
    pub(crate) fn trace_id(&self) -> Option<&str> {
        self.trace_id.as_deref()
    }

    /// The try's span id, for its log lines (only inside a span).
    pub(crate) fn span_id(&self) -> Option<&str> {
        self.span_id.as_deref()
    }

    /// The call was answered with `status`; `error_type` names a failure
    /// (the status as text for 4xx and 5xx, the outcome's reason when there
    /// was no answer). Ends the span.
    pub(crate) fn answered(&mut self, status: Option<u16>, error_type: Option<&str>) {
        if let Some(span) = self.span.take() {
            span.end(status, error_type);
        }
    }

    /// The call was abandoned: `error_type` says why (`canceled`, or
    /// `interrupted` at shutdown or when the task was taken away).
    pub(crate) fn abandoned(&mut self, error_type: &'static str) {
        self.answered(None, Some(error_type));
    }
}

/// The HTTP client attributes (the url with its query's values redacted)
/// and taskcenter's own.
fn attributes(task: &Task) -> Vec<KeyValue> {
    let (address, port) = match task.destination.rsplit_once(':') {
        Some((host, port)) => (
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port.parse::<i64>().ok(),
        ),
        None => (task.destination.clone(), None),
    };
    let mut attributes = vec![
        KeyValue::new("http.request.method", task.method.as_str()),
        KeyValue::new("url.full", tc_model::redacted_url(&task.url)),
        KeyValue::new("server.address", address),
        KeyValue::new(
            "http.request.resend_count",
            i64::from(task.attempt.saturating_sub(1)),
        ),
        KeyValue::new("taskcenter.task.id", task.id.to_string()),
        KeyValue::new("taskcenter.attempt", i64::from(task.attempt)),
        KeyValue::new("taskcenter.destination", task.destination.clone()),
    ];
    if let Some(port) = port {
        attributes.push(KeyValue::new("server.port", port));
    }
    attributes
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    use tc_model::{Limits, NewTask, TaskId, Timestamp};

    fn check(url: &str, expected: &str) {
        let new = NewTask::new(
            url.into(),
            Vec::new(),
            "k".into(),
            1,
            Duration::from_secs(1),
            &Limits::default(),
        )
        .unwrap();
        let at = Timestamp::from_millis(1);
        let task = Task::submitted(TaskId::new(at, [1; 10]), &new, at);
        let full = attributes(&task)
            .into_iter()
            .find(|kv| kv.key.as_str() == "url.full")
            .map(|kv| kv.value.to_string());
        assert_eq!(full.as_deref(), Some(expected), "{url}");
    }

    #[test]
    fn url_full_keeps_the_query_s_names_and_redacts_its_values() {
        check("http://a.test/hook", "http://a.test:80/hook");
        check(
            "https://a.test/hook?token=s3cret&id=7",
            "https://a.test:443/hook?token=REDACTED&id=REDACTED",
        );
        check(
            "http://a.test/hook?dry_run",
            "http://a.test:80/hook?dry_run",
        );
    }
}
