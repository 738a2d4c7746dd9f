//! OpenTelemetry export (`--otlp-endpoint`): the tracer the API's server
//! spans and the worker's client spans are made with, exported over OTLP/HTTP
//! (protobuf) to `<endpoint>/v1/traces`.
//!
//! Export is the SDK's batch span processor: a span that ends goes into a
//! bounded queue ([`MAX_QUEUE_SPANS`]) without waiting (a full queue drops
//! it), and the processor's own thread sends batches. So a collector that is
//! slow or gone costs at most the queue's memory and never slows a submit
//! or a call. The HTTP client is hyper-util's, already in the tree (no
//! reqwest), each export bounded by [`EXPORT_TIMEOUT`] and run on the
//! server's runtime (the processor's thread only waits for it).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};

/// The most ended spans waiting for export; more are dropped.
pub(crate) const MAX_QUEUE_SPANS: usize = 2048;
/// The most spans in one export request.
const MAX_BATCH_SPANS: usize = 512;
/// How long spans wait to fill a batch.
const SCHEDULED_DELAY: Duration = Duration::from_millis(500);
/// The bound on one export request, connect to last byte.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a collector's answer read (its body is not used).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// Where and as what spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OtlpConfig {
    /// The collector's base URL (`http://host:4318`); spans go to
    /// `<endpoint>/v1/traces`.
    pub(crate) endpoint: String,
    /// `service.name`; the other resource attributes come from
    /// `OTEL_RESOURCE_ATTRIBUTES`.
    pub(crate) service_name: String,
}

/// Why export could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TelemetryError {
    /// The endpoint is not an http(s) URL, or the exporter refused it.
    #[error("--otlp-endpoint: {0}")]
    Endpoint(String),
}

/// The tracer provider while the server runs; [`Telemetry::shutdown`]
/// sends what is queued (bounded by the export timeout).
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
    tracer: Arc<BoxedTracer>,
}

impl Telemetry {
    /// Starts the exporter on the current runtime.
    pub(crate) fn start(config: &OtlpConfig) -> Result<Telemetry, TelemetryError> {
        let endpoint = traces_url(&config.endpoint)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(OtlpClient::new())
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Endpoint(e.to_string()))?;
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(MAX_QUEUE_SPANS)
                    .with_max_export_batch_size(MAX_BATCH_SPANS)
                    .with_scheduled_delay(SCHEDULED_DELAY)
                    .build(),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(
                Resource::builder()
                    .with_service_name(config.service_name.clone())
                    .build(),
            )
            .build();
        let tracer = Arc::new(BoxedTracer::new(Box::new(provider.tracer("taskcenter"))));
        Ok(Telemetry { provider, tracer })
    }

    /// The tracer the API and the worker make their spans with.
    pub(crate) fn tracer(&self) -> Arc<BoxedTracer> {
        Arc::clone(&self.tracer)
    }

    /// Exports what is queued and stops the processor's thread. Blocking:
    /// call it off the runtime's workers.
    pub(crate) fn shutdown(self) {
        let _ = self.provider.shutdown();
    }
}

/// `<endpoint>/v1/traces`, as the OTLP specification builds it from
/// `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub(crate) fn traces_url(endpoint: &str) -> Result<String, TelemetryError> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|e| TelemetryError::Endpoint(format!("not a valid url: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http")) || uri.host().is_none() {
        return Err(TelemetryError::Endpoint(
            "must be an http:// url with a host (a collector on loopback or a trusted network)"
                .into(),
        ));
    }
    Ok(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
}

/// The exporter's HTTP client: hyper-util's pooled client on the server's
/// runtime.
#[derive(Debug, Clone)]
struct OtlpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
}

impl OtlpClient {
    fn new() -> OtlpClient {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(EXPORT_TIMEOUT));
        OtlpClient {
            client: Client::builder(TokioExecutor::new()).build(connector),
            runtime: tokio::runtime::Handle::current(),
        }
    }

    async fn send(
        client: Client<HttpConnector, Full<Bytes>>,
        request: Request<Bytes>,
    ) -> Result<Response<Bytes>, HttpError> {
        let call = async {
            let response = client.request(request.map(Full::new)).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE_BYTES).collect().await?;
            Ok::<_, HttpError>(Response::from_parts(parts, body.to_bytes()))
        };
        tokio::time::timeout(EXPORT_TIMEOUT, call)
            .await
            .map_err(|_| HttpError::from("OTLP export timed out"))?
    }
}

// By hand what `#[async_trait]` writes: the trait is declared with it.
impl HttpClient for OtlpClient {
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        // Spawned on the server's runtime: the batch processor's thread
        // drives this future without one.
        let call = self
            .runtime
            .spawn(OtlpClient::send(self.client.clone(), request));
        Box::pin(async move { call.await.map_err(|e| HttpError::from(e.to_string()))? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_url_is_the_endpoint_s_v1_traces_and_only_http_is_taken() {
        let check = |endpoint: &str, expected: Option<&str>| {
            assert_eq!(traces_url(endpoint).ok().as_deref(), expected, "{endpoint}");
        };
        check(
            "http://127.0.0.1:4318",
            Some("http://127.0.0.1:4318/v1/traces"),
        );
        check(
            "http://collector:4318/",
            Some("http://collector:4318/v1/traces"),
        );
        check("http://c/otlp", Some("http://c/otlp/v1/traces"));
        check("https://collector:4318", None);
        check("collector:4318", None);
        check("", None);
    }
}
