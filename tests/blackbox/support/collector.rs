//! A loopback OpenTelemetry collector: it takes OTLP/HTTP export requests
//! (`POST /v1/traces`, protobuf), decodes them with the OpenTelemetry
//! project's own proto types, keeps every span with its resource, and
//! answers 200. Tests wait on the spans that arrived, never on time.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Failure guard for waiting on spans.
const GUARD: Duration = Duration::from_secs(30);

/// One span as exported, with its resource's attributes.
#[derive(Debug, Clone)]
pub(crate) struct Exported {
    pub(crate) span: Span,
    pub(crate) resource: HashMap<String, String>,
}

impl Exported {
    pub(crate) fn name(&self) -> &str {
        &self.span.name
    }

    pub(crate) fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    pub(crate) fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    pub(crate) fn parent_span_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    /// An attribute's value as text (strings as they are, integers in
    /// decimal), `None` when the span lacks it.
    pub(crate) fn attr(&self, key: &str) -> Option<String> {
        self.span
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .map(text)
    }

    /// Whether the span ended with status error.
    pub(crate) fn is_error(&self) -> bool {
        self.span.status.as_ref().is_some_and(|s| s.code == 2)
    }
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The collector: its address and every span it took.
pub(crate) struct Collector {
    endpoint: String,
    spans: Arc<Mutex<Vec<Exported>>>,
    arrived: watch::Receiver<usize>,
}

impl Collector {
    pub(crate) async fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let spans = Arc::new(Mutex::new(Vec::new()));
        let (count, arrived) = watch::channel(0);
        let count = Arc::new(count);
        let kept = Arc::clone(&spans);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (kept, count) = (Arc::clone(&kept), Arc::clone(&count));
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (kept, count) = (Arc::clone(&kept), Arc::clone(&count));
                    async move {
                        assert_eq!(req.uri().path(), "/v1/traces");
                        assert_eq!(
                            req.headers()
                                .get("content-type")
                                .and_then(|v| v.to_str().ok()),
                            Some("application/x-protobuf")
                        );
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let export = ExportTraceServiceRequest::decode(body).unwrap();
                        let mut kept = kept.lock().unwrap();
                        for resource_spans in export.resource_spans {
                            let resource: HashMap<String, String> = resource_spans
                                .resource
                                .iter()
                                .flat_map(|r| &r.attributes)
                                .filter_map(|kv| Some((kv.key.clone(), text(kv.value.as_ref()?))))
                                .collect();
                            for scope in resource_spans.scope_spans {
                                for span in scope.spans {
                                    kept.push(Exported {
                                        span,
                                        resource: resource.clone(),
                                    });
                                }
                            }
                        }
                        count.send_replace(kept.len());
                        let answer = ExportTraceServiceResponse::default().encode_to_vec();
                        let mut response = Response::new(Full::new(Bytes::from(answer)));
                        response.headers_mut().insert(
                            "content-type",
                            http::HeaderValue::from_static("application/x-protobuf"),
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        Collector {
            endpoint,
            spans,
            arrived,
        }
    }

    /// The `--otlp-endpoint` to give the server.
    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Waits until the spans taken satisfy `done`, and returns them.
    pub(crate) async fn wait_for(
        &mut self,
        what: &str,
        done: impl Fn(&[Exported]) -> bool,
    ) -> Vec<Exported> {
        let deadline = tokio::time::Instant::now() + GUARD;
        loop {
            {
                let spans = self.spans.lock().unwrap();
                if done(&spans) {
                    return spans.clone();
                }
            }
            match tokio::time::timeout_at(deadline, self.arrived.changed()).await {
                Ok(Ok(())) => {}
                _ => panic!(
                    "{what}: not within 30 s; spans: {:#?}",
                    self.spans.lock().unwrap()
                ),
            }
        }
    }
}
