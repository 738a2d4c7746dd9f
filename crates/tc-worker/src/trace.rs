//! The span of one try, by the OpenTelemetry HTTP client conventions: named
//! by its method, a child of the task's stored trace context, carrying the
//! call's attributes and how it ended. Made with the OpenTelemetry API and
//! an explicit parent (the context comes from the store, not from the
//! current span); without a tracer (no `--otlp-endpoint`) there is no span,
//! and the call's `traceparent` names the stored parent instead.
//!
//! Also the ids a task's log lines carry: `trace_id`, and `span_id` inside
//! a span.

use std::sync::Arc;

use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags,
    TraceId, TraceState,
};
use opentelemetry::{Context, KeyValue};
use tc_model::{Task, TraceContext};

/// The tracer the worker makes its spans with (the server's, exporting
/// over OTLP); `None` in [`crate::WorkerConfig`]: no spans.
pub type SpanTracer = Arc<BoxedTracer>;

/// One try's span, if spans are made, and its context as the call's
/// `traceparent` names it.
pub(crate) struct AttemptSpan {
    span: Option<BoxedSpan>,
    own: Option<TraceContext>,
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
                own: None,
                trace_id: stored.map(TraceContext::trace_id_hex),
                span_id: None,
            };
        };
        let parent = match stored {
            Some(stored) => Context::new().with_remote_span_context(remote(stored)),
            None => Context::new(),
        };
        let span = SpanBuilder::from_name(task.method.as_str())
            .with_kind(SpanKind::Client)
            .with_attributes(attributes(task))
            .start_with_context(tracer.as_ref(), &parent);
        let context = span.span_context().clone();
        let own = own_context(stored, &context);
        AttemptSpan {
            trace_id: own.as_ref().or(stored).map(TraceContext::trace_id_hex),
            span_id: own.as_ref().map(|_| context.span_id().to_string()),
            span: Some(span),
            own,
        }
    }

    /// The context the call's `traceparent` carries when the try has a span.
    pub(crate) fn context(&self) -> Option<&TraceContext> {
        self.own.as_ref()
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
    /// was no answer).
    pub(crate) fn answered(&mut self, status: Option<u16>, error_type: Option<&str>) {
        let Some(span) = self.span.as_mut() else {
            return;
        };
        if let Some(status) = status {
            span.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
        }
        if let Some(error_type) = error_type {
            span.set_attribute(KeyValue::new("error.type", error_type.to_owned()));
            span.set_status(Status::error(error_type.to_owned()));
        }
        span.end();
    }

    /// The call was abandoned: `error_type` says why (`canceled`, or
    /// `interrupted` at shutdown or when the task was taken away).
    pub(crate) fn abandoned(&mut self, error_type: &'static str) {
        self.answered(None, Some(error_type));
    }
}

/// The stored context as the remote parent of the try's span.
fn remote(stored: &TraceContext) -> SpanContext {
    let state = stored
        .state()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    SpanContext::new(
        TraceId::from_bytes(stored.trace_id()),
        SpanId::from_bytes(stored.parent_id()),
        TraceFlags::new(stored.flags()),
        true,
        state,
    )
}

/// The try's own context: the span's ids, the caller's `tracestate`.
fn own_context(stored: Option<&TraceContext>, span: &SpanContext) -> Option<TraceContext> {
    if !span.is_valid() {
        return None;
    }
    let base = match stored {
        Some(stored) => stored.clone(),
        // A task stored without a context: the span began a trace.
        None => TraceContext::from_headers(
            Some(&format!(
                "00-{}-{}-{:02x}",
                span.trace_id(),
                span.span_id(),
                span.trace_flags().to_u8()
            )),
            None,
        )?,
    };
    base.with_parent(span.span_id().to_bytes(), span.is_sampled())
}

/// The HTTP client attributes (url without its query) and taskcenter's own.
fn attributes(task: &Task) -> Vec<KeyValue> {
    let (origin, path) = tc_model::origin_and_path(&task.url);
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
        KeyValue::new("url.full", format!("{origin}{path}")),
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
