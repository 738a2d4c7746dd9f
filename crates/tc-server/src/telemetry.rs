//! OpenTelemetry export (`--otlp-endpoint`): the tracer the API's server
//! spans and the worker's client spans are made with, exported over OTLP/HTTP
//! (protobuf).
//!
//! Where spans go follows the OTLP exporter specification:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is the collector's base URL and
//! `/v1/traces` is appended (unless the path already ends with it);
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is used as given.
//! `OTEL_EXPORTER_OTLP_HEADERS` (`key=value,…`, values percent-decoded) go
//! with every export and are never logged. `https://` endpoints verify the
//! collector with the system's root certificates (the CLI client's rustls).
//!
//! Export is the SDK's batch span processor: a span that ends goes into a
//! bounded queue ([`MAX_QUEUE_SPANS`]) without waiting (a full queue drops
//! it), and the processor's own thread sends batches. So a collector that is
//! slow or gone costs at most the queue's memory and never slows a submit
//! or a call. The HTTP client is hyper-util's, already in the tree (no
//! reqwest), each export bounded by [`EXPORT_TIMEOUT`] and run on the
//! server's runtime (the processor's thread only waits for it).
//!
//! Export never fails silently: a failed export and a span dropped from a
//! full queue are counted ([`OtlpMetrics`]) and logged as
//! `otlp_export_failed`, at most once a minute ([`LOG_INTERVAL`]) with the
//! counts since the last such line.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

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
/// At most one `otlp_export_failed` line this often.
pub(crate) const LOG_INTERVAL: Duration = Duration::from_secs(60);
/// The path OTLP/HTTP appends to a base endpoint for traces.
const TRACES_PATH: &str = "/v1/traces";

/// Where and as what spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OtlpConfig {
    /// The URL export requests are posted to (already resolved, see
    /// [`traces_url`]).
    pub(crate) traces_url: String,
    /// Sent with every export request (`OTEL_EXPORTER_OTLP_HEADERS`).
    pub(crate) headers: ExportHeaders,
    /// `service.name`; the other resource attributes come from
    /// `OTEL_RESOURCE_ATTRIBUTES`.
    pub(crate) service_name: String,
}

/// Where spans go, as configured: `--otlp-endpoint`
/// (`OTEL_EXPORTER_OTLP_ENDPOINT`), `--otlp-traces-endpoint`
/// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) and `OTEL_EXPORTER_OTLP_HEADERS`;
/// an empty value is unset.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OtlpSources<'a> {
    pub(crate) endpoint: Option<&'a str>,
    pub(crate) traces_endpoint: Option<&'a str>,
    pub(crate) headers: Option<&'a str>,
}

impl OtlpSources<'_> {
    /// The export configuration; `None` when no endpoint is set (no spans).
    pub(crate) fn resolve(&self, service_name: &str) -> Result<Option<OtlpConfig>, TelemetryError> {
        let Some(traces_url) = traces_url(self.endpoint, self.traces_endpoint)? else {
            return Ok(None);
        };
        let headers = match self.headers.filter(|h| !h.trim().is_empty()) {
            Some(headers) => parse_headers(headers)?,
            None => ExportHeaders::default(),
        };
        Ok(Some(OtlpConfig {
            traces_url,
            headers,
            service_name: service_name.to_owned(),
        }))
    }
}

/// Headers sent with every export. Their values are credentials (a hosted
/// collector's API key): `Debug` shows the names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct ExportHeaders(Vec<(HeaderName, HeaderValue)>);

impl std::fmt::Debug for ExportHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| name))
            .finish()
    }
}

/// Why export could not be set up. Never quotes a header's value.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TelemetryError {
    /// An endpoint is not an http(s) URL.
    #[error("{source_name}: {why}")]
    Endpoint {
        /// The flag and variable the URL came from.
        source_name: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// `OTEL_EXPORTER_OTLP_HEADERS` is not a `key=value,…` list.
    #[error("OTEL_EXPORTER_OTLP_HEADERS: {0}")]
    Headers(String),
    /// The exporter or its TLS could not be built.
    #[error("--otlp-endpoint: {0}")]
    Exporter(String),
}

const ENDPOINT_SOURCE: &str = "--otlp-endpoint (OTEL_EXPORTER_OTLP_ENDPOINT)";
const TRACES_SOURCE: &str = "--otlp-traces-endpoint (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)";

/// The URL spans are posted to: the traces-specific endpoint as given;
/// else the base endpoint with `/v1/traces` appended to its path (unless it
/// already ends with it); `None` when neither is set. Both must be http(s)
/// URLs with a host.
pub(crate) fn traces_url(
    endpoint: Option<&str>,
    traces_endpoint: Option<&str>,
) -> Result<Option<String>, TelemetryError> {
    if let Some(traces) = traces_endpoint.filter(|t| !t.is_empty()) {
        check_url(traces, TRACES_SOURCE)?;
        return Ok(Some(traces.to_owned()));
    }
    let Some(base) = endpoint.filter(|e| !e.is_empty()) else {
        return Ok(None);
    };
    check_url(base, ENDPOINT_SOURCE)?;
    let (before_query, query) = match base.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (base, None),
    };
    let path = before_query.trim_end_matches('/');
    let mut url = if path.ends_with(TRACES_PATH) {
        path.to_owned()
    } else {
        format!("{path}{TRACES_PATH}")
    };
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    Ok(Some(url))
}

fn check_url(url: &str, source_name: &'static str) -> Result<(), TelemetryError> {
    let fail = |why: String| TelemetryError::Endpoint { source_name, why };
    let uri: http::Uri = url
        .parse()
        .map_err(|e| fail(format!("not a valid url: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(fail(
            "must be an http:// or https:// url with a host".into(),
        ));
    }
    Ok(())
}

/// `OTEL_EXPORTER_OTLP_HEADERS`: `key=value` pairs separated by commas,
/// blanks around either trimmed, each value percent-decoded (as the
/// OpenTelemetry specification says, W3C baggage's format). An error names
/// the pair by its position and the key, never the value.
pub(crate) fn parse_headers(list: &str) -> Result<ExportHeaders, TelemetryError> {
    let mut headers = Vec::new();
    for (n, pair) in list.split(',').enumerate() {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let position = n + 1;
        let Some((key, value)) = pair.split_once('=') else {
            return Err(TelemetryError::Headers(format!(
                "entry {position} is not key=value"
            )));
        };
        let key = key.trim();
        let name = HeaderName::from_bytes(key.as_bytes()).map_err(|_| {
            TelemetryError::Headers(format!("entry {position}: {key:?} is not a header name"))
        })?;
        let decoded = percent_decode(value.trim()).ok_or_else(|| {
            TelemetryError::Headers(format!(
                "{key}: the value is not valid percent-encoded UTF-8"
            ))
        })?;
        let mut value = HeaderValue::from_str(&decoded).map_err(|_| {
            TelemetryError::Headers(format!("{key}: the value is not a valid header value"))
        })?;
        value.set_sensitive(true);
        headers.push((name, value));
    }
    Ok(ExportHeaders(headers))
}

/// `%XX` escapes decoded; `None` for a broken escape or bytes that are not
/// UTF-8.
fn percent_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What the start line says of where spans go: the URL without user info
/// and with its query's values redacted.
pub(crate) fn shown(config: &OtlpConfig) -> String {
    tc_model::redacted_url(&config.traces_url)
}

/// The exporter's own metrics, in the server's registry.
#[derive(Debug, Clone, Default)]
pub(crate) struct OtlpMetrics {
    export_failures: Counter,
    spans_dropped: Counter,
}

impl OtlpMetrics {
    /// Adds `taskcenter_otlp_export_failures_total` and
    /// `taskcenter_otlp_spans_dropped_total` to `registry`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "taskcenter_otlp_export_failures",
            "OTLP span export requests that failed (collector unreachable, timed out or refused)",
            self.export_failures.clone(),
        );
        registry.register(
            "taskcenter_otlp_spans_dropped",
            "Spans never exported: in a failed export, or dropped from a full export queue",
            self.spans_dropped.clone(),
        );
    }
}

/// The rate limit of `otlp_export_failed`: counts failures and dropped
/// spans, and says when a line is due (the first failure, then at most once
/// per [`LOG_INTERVAL`]) with the counts since the last line.
#[derive(Debug, Default)]
struct FailureLog {
    last_line: Option<Instant>,
    failures: u64,
    spans: u64,
}

/// One `otlp_export_failed` line's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FailureLine {
    failures: u64,
    spans_dropped: u64,
}

impl FailureLog {
    fn record(&mut self, now: Instant, failures: u64, spans: u64) -> Option<FailureLine> {
        self.failures += failures;
        self.spans += spans;
        let due = self
            .last_line
            .is_none_or(|last| now.saturating_duration_since(last) >= LOG_INTERVAL);
        if !due {
            return None;
        }
        self.last_line = Some(now);
        let line = FailureLine {
            failures: std::mem::take(&mut self.failures),
            spans_dropped: std::mem::take(&mut self.spans),
        };
        Some(line)
    }
}

/// Counts and logs what export loses; shared by the exporter and the queue
/// gate.
#[derive(Debug)]
struct Losses {
    metrics: OtlpMetrics,
    log: Mutex<FailureLog>,
    /// The endpoint as the log shows it.
    shown: String,
    /// Spans handed to the batch processor and not yet to an export.
    queued: AtomicUsize,
}

impl Losses {
    fn lost(&self, failures: u64, spans: u64, error: &str) {
        self.metrics.export_failures.inc_by(failures);
        self.metrics.spans_dropped.inc_by(spans);
        let line = match self.log.lock() {
            Ok(mut log) => log.record(Instant::now(), failures, spans),
            Err(_) => None,
        };
        if let Some(line) = line {
            tracing::warn!(
                endpoint = %self.shown,
                failures = line.failures,
                spans_dropped = line.spans_dropped,
                error,
                "otlp_export_failed"
            );
        }
    }
}

/// The OTLP exporter, counting what it fails to send.
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    losses: Arc<Losses>,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        // They left the queue.
        let _ = self
            .losses
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                Some(q.saturating_sub(spans))
            });
        let result = self.inner.export(batch).await;
        if let Err(error) = &result {
            self.losses.lost(1, spans as u64, &error.to_string());
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The batch processor behind a queue bound of our own, so that a span
/// dropped from a full queue is counted: the processor's own queue is
/// larger than [`MAX_QUEUE_SPANS`] plus a batch, so it never drops one
/// itself.
#[derive(Debug)]
struct QueueGate {
    inner: BatchSpanProcessor,
    losses: Arc<Losses>,
}

impl SpanProcessor for QueueGate {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        let admitted = self
            .losses
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                (q < MAX_QUEUE_SPANS).then_some(q + 1)
            })
            .is_ok();
        if admitted {
            self.inner.on_end(span);
        } else {
            self.losses.lost(0, 1, "the export queue is full");
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The tracer provider while the server runs; [`Telemetry::shutdown`]
/// sends what is queued (bounded by the export timeout).
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
    tracer: Arc<BoxedTracer>,
}

impl Telemetry {
    /// Starts the exporter on the current runtime; what it loses is counted
    /// in `metrics`.
    pub(crate) fn start(
        config: &OtlpConfig,
        metrics: OtlpMetrics,
    ) -> Result<Telemetry, TelemetryError> {
        let client = OtlpClient::new(&config.traces_url, config.headers.clone())?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(config.traces_url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let losses = Arc::new(Losses {
            metrics,
            log: Mutex::new(FailureLog::default()),
            shown: shown(config),
            queued: AtomicUsize::new(0),
        });
        let exporter = CountingExporter {
            inner: exporter,
            losses: Arc::clone(&losses),
        };
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(MAX_QUEUE_SPANS + 2 * MAX_BATCH_SPANS)
                    .with_max_export_batch_size(MAX_BATCH_SPANS)
                    .with_scheduled_delay(SCHEDULED_DELAY)
                    .build(),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(QueueGate {
                inner: processor,
                losses,
            })
            .with_resource(
                Resource::builder()
                    .with_service_name(config.service_name.clone())
                    .with_attribute(opentelemetry::KeyValue::new(
                        "service.version",
                        env!("CARGO_PKG_VERSION"),
                    ))
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

/// The exporter's HTTP client: hyper-util's pooled client on the server's
/// runtime, `https://` through rustls, the configured headers on every
/// request.
#[derive(Debug, Clone)]
struct OtlpClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    headers: ExportHeaders,
    runtime: tokio::runtime::Handle,
}

impl OtlpClient {
    fn new(url: &str, headers: ExportHeaders) -> Result<OtlpClient, TelemetryError> {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(EXPORT_TIMEOUT));
        http.enforce_http(false);
        // The system's roots are only needed (and must exist) for https.
        let tls = if url.starts_with("https://") {
            crate::client::tls_config().map_err(TelemetryError::Exporter)?
        } else {
            crate::client::tls_config_with_roots(rustls::RootCertStore::empty())
                .map_err(TelemetryError::Exporter)?
        };
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(OtlpClient {
            client: Client::builder(TokioExecutor::new()).build(connector),
            headers,
            runtime: tokio::runtime::Handle::current(),
        })
    }

    async fn send(
        client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
        mut request: Request<Bytes>,
        headers: ExportHeaders,
    ) -> Result<Response<Bytes>, HttpError> {
        for (name, value) in headers.0 {
            request.headers_mut().insert(name, value);
        }
        let call = async {
            let response = client
                .request(request.map(Full::new))
                .await
                .map_err(|e| HttpError::from(causes(&e)))?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE_BYTES).collect().await?;
            Ok::<_, HttpError>(Response::from_parts(parts, body.to_bytes()))
        };
        tokio::time::timeout(EXPORT_TIMEOUT, call)
            .await
            .map_err(|_| HttpError::from("OTLP export timed out"))?
    }
}

/// An error's causes, `: `-joined (hyper's own Display says only "client
/// error (Connect)").
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
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
        let call = self.runtime.spawn(OtlpClient::send(
            self.client.clone(),
            request,
            self.headers.clone(),
        ));
        Box::pin(async move { call.await.map_err(|e| HttpError::from(e.to_string()))? })
    }
}

#[cfg(test)]
mod tests;
