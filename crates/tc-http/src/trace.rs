//! W3C trace context of API requests, and their server spans.
//!
//! One place, entered from [`crate::handle`]: it reads the request's
//! `traceparent` and `tracestate` (tc-model's rules; an invalid one is
//! ignored, never refused), starts the request's server span as a child of
//! that context when a tracer is configured (`--otlp-endpoint`), and ends
//! it with the route and status (OpenTelemetry HTTP server conventions).
//! A submitted task is stored in the request's trace: the server span when
//! there is one, else the caller's context, else a new trace. Scrapes and
//! probes ([`UNTRACED_PATHS`]: `/metrics`, `/healthz`) make no span: a
//! Prometheus scrape every few seconds would otherwise be most of the
//! spans exported.

use http::request::Parts;
use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanBuilder, SpanKind};
use tc_model::TraceContext;
use tc_trace::ChildSpan;

/// The tracer the API makes its server spans with.
pub use tc_trace::SpanTracer;

/// The paths whose requests make no server span.
pub(crate) const UNTRACED_PATHS: [&str; 2] = ["/metrics", "/healthz"];

/// One request's trace: its server span, if spans are made, and the context
/// a task it submits is stored with.
pub(crate) struct RequestTrace {
    span: Option<ChildSpan>,
}

/// The context tasks submitted by a request belong to, kept in the
/// request's extensions; `None`: a new trace each time it is asked for
/// (one per request: the batch's items share it).
#[derive(Clone)]
struct TaskTrace(Option<TraceContext>);

impl RequestTrace {
    /// Reads the request's context, starts its server span and records in
    /// `parts` the context its tasks get.
    pub(crate) fn start(tracer: Option<&SpanTracer>, parts: &mut Parts) -> RequestTrace {
        let incoming = incoming(parts);
        let tracer = tracer.filter(|_| !UNTRACED_PATHS.contains(&parts.uri.path()));
        let Some(tracer) = tracer else {
            parts.extensions.insert(TaskTrace(incoming));
            return RequestTrace { span: None };
        };
        let builder = SpanBuilder::from_name(parts.method.as_str().to_owned())
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("http.request.method", parts.method.as_str().to_owned()),
                KeyValue::new("url.path", parts.uri.path().to_owned()),
                KeyValue::new("url.scheme", "http"),
            ]);
        let span = ChildSpan::start(tracer, builder, incoming.as_ref());
        let own = span.context().cloned();
        parts.extensions.insert(TaskTrace(own.or(incoming)));
        RequestTrace { span: Some(span) }
    }

    /// Ends the span: the route matched (`None`: none), the status sent; a
    /// 5xx is an error.
    pub(crate) fn end(self, method: &http::Method, route: Option<&'static str>, status: u16) {
        let Some(mut span) = self.span else {
            return;
        };
        if let Some(route) = route {
            span.update_name(format!("{method} {route}"));
            span.set_attribute(KeyValue::new("http.route", route));
        }
        let error_type = (status >= 500).then(|| status.to_string());
        span.end(Some(status), error_type.as_deref());
    }
}

/// The trace context a task submitted by this request is stored with.
pub(crate) fn task_context(parts: &Parts) -> TraceContext {
    match parts.extensions.get::<TaskTrace>() {
        Some(TaskTrace(Some(context))) => context.clone(),
        _ => new_root(),
    }
}

/// A new trace, from the OS's entropy; should that fail, from the clock
/// (trace ids must be unlikely to repeat, not secret).
fn new_root() -> TraceContext {
    let mut random = [0u8; 24];
    if getrandom::fill(&mut random).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos());
        random[..16].copy_from_slice(&nanos.to_le_bytes());
        random[16..].copy_from_slice(&nanos.to_be_bytes()[..8]);
    }
    TraceContext::new_root(random)
}

/// The request's `traceparent` and `tracestate`: a `traceparent` given more
/// than once is invalid; several `tracestate` lines are one list.
fn incoming(parts: &Parts) -> Option<TraceContext> {
    let mut parents = parts.headers.get_all("traceparent").iter();
    let parent = parents.next()?.to_str().ok()?;
    if parents.next().is_some() {
        return None;
    }
    let states: Vec<&str> = parts
        .headers
        .get_all("tracestate")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let state = (!states.is_empty()).then(|| states.join(","));
    TraceContext::from_headers(Some(parent), state.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::builder().method("POST").uri("/tasks");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn check(headers: &[(&str, &str)], expected: Option<(&str, Option<&str>)>) {
        let mut parts = parts(headers);
        RequestTrace::start(None, &mut parts).end(&http::Method::POST, None, 200);
        let got = task_context(&parts);
        match expected {
            Some((parent, state)) => {
                assert_eq!((got.traceparent().as_str(), got.state()), (parent, state));
            }
            // A new trace: not the caller's, and a new one each time.
            None => {
                assert_ne!(got.trace_id_hex(), "0af7651916cd43dd8448eb211c80319c");
                assert_ne!(got.trace_id(), task_context(&parts).trace_id());
            }
        }
    }

    #[test]
    fn scrapes_and_probes_make_no_span() {
        let tracer: SpanTracer = std::sync::Arc::new(opentelemetry::global::BoxedTracer::new(
            Box::new(opentelemetry::trace::noop::NoopTracer::new()),
        ));
        let check = |method: &str, path: &str, spanned: bool| {
            let mut parts = http::Request::builder()
                .method(method)
                .uri(path)
                .body(())
                .unwrap()
                .into_parts()
                .0;
            let trace = RequestTrace::start(Some(&tracer), &mut parts);
            assert_eq!(trace.span.is_some(), spanned, "{method} {path}");
            trace.end(&parts.method, None, 200);
        };
        check("GET", "/metrics", false);
        check("GET", "/healthz", false);
        check("GET", "/healthz?verbose=1", false);
        check("GET", "/tasks", true);
        check("POST", "/tasks", true);
        check("GET", "/metrics/x", true);
    }

    #[test]
    fn without_spans_a_task_gets_the_caller_s_context_or_a_new_trace() {
        check(&[("traceparent", PARENT)], Some((PARENT, None)));
        check(
            &[
                ("traceparent", PARENT),
                ("tracestate", "a=1"),
                ("tracestate", "b=2"),
            ],
            Some((PARENT, Some("a=1,b=2"))),
        );
        check(
            &[("traceparent", PARENT), ("tracestate", "BAD")],
            Some((PARENT, None)),
        );
        check(&[], None);
        check(&[("traceparent", "nonsense"), ("tracestate", "a=1")], None);
        check(&[("traceparent", PARENT), ("traceparent", PARENT)], None);
    }
}
