//! The OpenTelemetry glue of taskcenter's traces, written once for the
//! API's server spans (tc-http) and the worker's client spans (tc-worker).
//!
//! tc-model keeps the W3C trace context's rules (`TraceContext`: what is
//! valid, the header and stored forms) and knows no OpenTelemetry; this
//! crate turns such a context into an OpenTelemetry remote parent, starts a
//! span as its child with an explicit parent (the context comes from a
//! request's headers or from the store, never from the current span), gives
//! back the context the span's own ids make (what a stored task or a call's
//! `traceparent` carries next), and ends the span by the HTTP semantic
//! conventions. It knows only the OpenTelemetry API: no SDK, no exporter,
//! no runtime (tc-server owns those).

use std::sync::Arc;

use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState,
};
use opentelemetry::{Context, KeyValue};
use tc_model::TraceContext;

/// The tracer spans are made with (the server's, exporting over OTLP).
pub type SpanTracer = Arc<BoxedTracer>;

/// A span started as the child of a W3C trace context, and the context its
/// own ids make.
pub struct ChildSpan {
    span: BoxedSpan,
    own: Option<TraceContext>,
}

impl ChildSpan {
    /// Starts the span `builder` describes with `tracer`, as the child of
    /// `parent` (a root when there is none).
    pub fn start(
        tracer: &SpanTracer,
        builder: SpanBuilder,
        parent: Option<&TraceContext>,
    ) -> ChildSpan {
        let parent_context = match parent {
            Some(parent) => Context::new().with_remote_span_context(remote(parent)),
            None => Context::new(),
        };
        let span = builder.start_with_context(tracer.as_ref(), &parent_context);
        let own = own_context(parent, span.span_context());
        ChildSpan { span, own }
    }

    /// The parent's trace and `tracestate` under this span's id (a new trace
    /// named by this span when there was no parent); `None` when the tracer
    /// made no valid span (a no-op tracer).
    pub fn context(&self) -> Option<&TraceContext> {
        self.own.as_ref()
    }

    /// This span's id as 16 hex digits, when it is valid (what log lines
    /// carry as `span_id`).
    pub fn span_id_hex(&self) -> Option<String> {
        self.own
            .as_ref()
            .map(|_| self.span.span_context().span_id().to_string())
    }

    /// Renames the span (once the route it served is known).
    pub fn update_name(&mut self, name: String) {
        self.span.update_name(name);
    }

    /// Sets one attribute.
    pub fn set_attribute(&mut self, attribute: KeyValue) {
        self.span.set_attribute(attribute);
    }

    /// Ends the span by the HTTP conventions: the response's status when
    /// there was one; `error_type` names a failure (the status as text, or
    /// why there was no answer) and makes the span's status an error.
    pub fn end(mut self, status: Option<u16>, error_type: Option<&str>) {
        if let Some(status) = status {
            self.span.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
        }
        if let Some(error_type) = error_type {
            self.span
                .set_attribute(KeyValue::new("error.type", error_type.to_owned()));
            self.span.set_status(Status::error(error_type.to_owned()));
        }
        self.span.end();
    }
}

/// A stored or incoming context as an OpenTelemetry remote parent.
fn remote(context: &TraceContext) -> SpanContext {
    let state = context
        .state()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    SpanContext::new(
        TraceId::from_bytes(context.trace_id()),
        SpanId::from_bytes(context.parent_id()),
        TraceFlags::new(context.flags()),
        true,
        state,
    )
}

/// The span's own context: the parent's trace and `tracestate` under the
/// span's id; a span without a parent began a trace of its own.
fn own_context(parent: Option<&TraceContext>, span: &SpanContext) -> Option<TraceContext> {
    if !span.is_valid() {
        return None;
    }
    let base = match parent {
        Some(parent) => parent.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const SPAN_ID: [u8; 8] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];

    fn context(traceparent: &str, tracestate: Option<&str>) -> TraceContext {
        TraceContext::from_headers(Some(traceparent), tracestate).expect("a valid context")
    }

    /// A span of ours: `trace_id` (the parent's when it had one), sampled
    /// or not.
    fn span(trace_id: [u8; 16], span_id: [u8; 8], sampled: bool) -> SpanContext {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        SpanContext::new(
            TraceId::from_bytes(trace_id),
            SpanId::from_bytes(span_id),
            flags,
            false,
            TraceState::default(),
        )
    }

    /// Each row: the parent as headers (if any), the span's sampling, and
    /// the span's own context as `traceparent` and `tracestate`.
    fn check(
        parent: Option<(&str, Option<&str>)>,
        sampled: bool,
        expected: Option<(&str, Option<&str>)>,
    ) {
        let parent = parent.map(|(p, s)| context(p, s));
        let trace_id = parent.as_ref().map_or([0xab; 16], TraceContext::trace_id);
        let own = own_context(parent.as_ref(), &span(trace_id, SPAN_ID, sampled));
        let got = own.as_ref().map(|o| (o.traceparent(), o.state()));
        let expected = expected.map(|(p, s)| (p.to_owned(), s));
        assert_eq!(got, expected, "parent {parent:?}, sampled {sampled}");
        // The parent goes to OpenTelemetry as it came.
        if let Some(parent) = &parent {
            let remote = remote(parent);
            assert_eq!(remote.trace_id().to_bytes(), parent.trace_id());
            assert_eq!(remote.span_id().to_bytes(), parent.parent_id());
            assert_eq!(remote.trace_flags().to_u8(), parent.flags());
            assert_eq!(
                remote.trace_state().header(),
                parent.state().unwrap_or_default()
            );
            assert!(remote.is_remote());
        }
    }

    #[test]
    fn a_span_s_own_context_keeps_its_parent_s_trace_and_state() {
        check(
            Some((PARENT, None)),
            true,
            Some((
                "00-0af7651916cd43dd8448eb211c80319c-1122334455667788-01",
                None,
            )),
        );
        check(
            Some((PARENT, Some("a=1,b=2"))),
            true,
            Some((
                "00-0af7651916cd43dd8448eb211c80319c-1122334455667788-01",
                Some("a=1,b=2"),
            )),
        );
        // Our sampling decides the flag.
        check(
            Some((PARENT, None)),
            false,
            Some((
                "00-0af7651916cd43dd8448eb211c80319c-1122334455667788-00",
                None,
            )),
        );
        // No parent: the span began a trace.
        check(
            None,
            true,
            Some((
                "00-abababababababababababababababab-1122334455667788-01",
                None,
            )),
        );
    }

    #[test]
    fn an_invalid_span_makes_no_context() {
        let parent = context(PARENT, None);
        let invalid = SpanContext::empty_context();
        assert_eq!(own_context(Some(&parent), &invalid), None);
        assert_eq!(own_context(None, &invalid), None);
        // A no-op tracer without a parent makes an invalid span: no
        // context, no span id.
        let tracer: SpanTracer = Arc::new(BoxedTracer::new(Box::new(
            opentelemetry::trace::noop::NoopTracer::new(),
        )));
        let span = ChildSpan::start(&tracer, SpanBuilder::from_name("GET"), None);
        assert_eq!((span.context(), span.span_id_hex()), (None, None));
        span.end(Some(200), None);
    }
}
