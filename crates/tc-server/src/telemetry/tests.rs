//! The exporter against loopback collectors (OTLP/HTTP decoded with the
//! OpenTelemetry project's own proto types): where spans go, the headers
//! and resource they carry, and a failing collector counted and logged;
//! and the pure rules (endpoint resolution, header parsing, the log's rate
//! limit) as tables.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::AtomicU16;

use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use opentelemetry::trace::{Span as _, Tracer as _};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message as _;
use tokio::net::TcpListener;

use super::*;

#[test]
fn the_traces_url_appends_v1_traces_to_the_base_only() {
    let check = |base: Option<&str>, traces: Option<&str>, expected: Result<Option<&str>, &str>| {
        let got = traces_url(base, traces);
        let got = got.as_ref().map(Option::as_deref).map_err(|e| match e {
            TelemetryError::Endpoint { source_name, .. } => *source_name,
            other => panic!("{other}"),
        });
        assert_eq!(got, expected, "{base:?} {traces:?}");
    };
    let ok = |url| Ok(Some(url));
    check(None, None, Ok(None));
    check(Some(""), Some(""), Ok(None));
    check(
        Some("http://127.0.0.1:4318"),
        None,
        ok("http://127.0.0.1:4318/v1/traces"),
    );
    check(Some("http://c:4318/"), None, ok("http://c:4318/v1/traces"));
    check(Some("http://c/otlp"), None, ok("http://c/otlp/v1/traces"));
    // Already the traces path: not appended twice.
    check(
        Some("http://c:4318/v1/traces"),
        None,
        ok("http://c:4318/v1/traces"),
    );
    check(
        Some("http://c:4318/v1/traces/"),
        None,
        ok("http://c:4318/v1/traces"),
    );
    check(
        Some("https://otlp.example.com"),
        None,
        ok("https://otlp.example.com/v1/traces"),
    );
    check(
        Some("http://c/p?tenant=a"),
        None,
        ok("http://c/p/v1/traces?tenant=a"),
    );
    // The traces-specific endpoint as given, and it wins.
    check(
        None,
        Some("http://c:4318/custom"),
        ok("http://c:4318/custom"),
    );
    check(
        Some("http://base"),
        Some("https://t/x/"),
        ok("https://t/x/"),
    );
    // Refused, naming where the url came from.
    check(Some("collector:4318"), None, Err(ENDPOINT_SOURCE));
    check(Some("ftp://c"), None, Err(ENDPOINT_SOURCE));
    check(Some("http://ok"), Some("not a url"), Err(TRACES_SOURCE));
}

#[test]
fn export_headers_are_key_value_pairs_with_percent_decoded_values() {
    let check = |list: &str, expected: Result<&[(&str, &str)], &str>| {
        let got = parse_headers(list).map(|h| {
            h.0.iter()
                .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned()))
                .collect::<Vec<_>>()
        });
        let expected = expected
            .map(|pairs| {
                pairs
                    .iter()
                    .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                    .collect::<Vec<_>>()
            })
            .map_err(str::to_owned);
        assert_eq!(got.map_err(|e| e.to_string()), expected, "{list}");
    };
    check("", Ok(&[]));
    check("api-key=abc", Ok(&[("api-key", "abc")]));
    check(
        " Authorization = Basic%20dXNlcg%3D%3D , x-b=1,",
        Ok(&[("authorization", "Basic dXNlcg=="), ("x-b", "1")]),
    );
    check("k=a=b", Ok(&[("k", "a=b")]));
    check("k=", Ok(&[("k", "")]));
    // Errors name the entry, never its value.
    check(
        "a=1,novalue",
        Err("OTEL_EXPORTER_OTLP_HEADERS: entry 2 is not key=value"),
    );
    check(
        "bad key=s3cret",
        Err("OTEL_EXPORTER_OTLP_HEADERS: entry 1: \"bad key\" is not a header name"),
    );
    check(
        "k=s3cret%zz",
        Err("OTEL_EXPORTER_OTLP_HEADERS: k: the value is not valid percent-encoded UTF-8"),
    );
    check(
        "k=s3cret%0A",
        Err("OTEL_EXPORTER_OTLP_HEADERS: k: the value is not a valid header value"),
    );
    // Debug shows names only.
    let headers = parse_headers("api-key=s3cret").unwrap();
    assert_eq!(format!("{headers:?}"), "[\"api-key\"]");
}

#[test]
fn export_failures_are_logged_at_most_once_a_minute_with_the_counts_since() {
    let start = Instant::now();
    let mut log = FailureLog::default();
    let mut check = |after_s: u64, failures: u64, spans: u64, expected: Option<(u64, u64)>| {
        let now = start + Duration::from_secs(after_s);
        let got = log.record(now, failures, spans);
        let expected = expected.map(|(failures, spans_dropped)| FailureLine {
            failures,
            spans_dropped,
        });
        assert_eq!(got, expected, "at {after_s} s");
    };
    check(0, 1, 10, Some((1, 10)));
    check(1, 1, 5, None);
    check(30, 0, 1, None);
    check(59, 1, 2, None);
    check(60, 1, 3, Some((3, 11)));
    check(61, 1, 1, None);
    check(200, 1, 1, Some((2, 2)));
}

/// A log line's text, as the JSON formatter would carry it.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn losses_are_counted_and_logged_once_per_interval() {
    let metrics = OtlpMetrics::default();
    let losses = Losses {
        metrics: metrics.clone(),
        log: Mutex::new(FailureLog::default()),
        shown: "http://c:4318/v1/traces".into(),
        queued: AtomicUsize::new(0),
    };
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        losses.lost(1, 3, "HTTP export failed with status code: 500");
        losses.lost(1, 2, "HTTP export failed with status code: 500");
        losses.lost(0, 1, "the export queue is full");
    });
    assert_eq!(metrics.export_failures.get(), 2);
    assert_eq!(metrics.spans_dropped.get(), 6);
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(line["fields"]["message"], "otlp_export_failed");
    assert_eq!(line["fields"]["failures"], 1);
    assert_eq!(line["fields"]["spans_dropped"], 3);
    assert_eq!(line["fields"]["endpoint"], "http://c:4318/v1/traces");
}

/// One export request as a collector received it.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: http::HeaderMap,
    spans: usize,
    resource: HashMap<String, String>,
}

/// A loopback collector answering every export with `status`; what it
/// received.
struct Receiver {
    base: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start(status: u16) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&received);
        let status = Arc::new(AtomicU16::new(status));
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (kept, status) = (Arc::clone(&kept), Arc::clone(&status));
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (kept, status) = (Arc::clone(&kept), Arc::clone(&status));
                    async move {
                        let path = req.uri().path().to_owned();
                        let headers = req.headers().clone();
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let export = ExportTraceServiceRequest::decode(body).unwrap();
                        let mut spans = 0;
                        let mut resource = HashMap::new();
                        for rs in export.resource_spans {
                            for kv in rs.resource.iter().flat_map(|r| &r.attributes) {
                                if let Some(any_value::Value::StringValue(v)) =
                                    kv.value.as_ref().and_then(|v| v.value.as_ref())
                                {
                                    resource.insert(kv.key.clone(), v.clone());
                                }
                            }
                            spans += rs.scope_spans.iter().map(|s| s.spans.len()).sum::<usize>();
                        }
                        kept.lock().unwrap().push(Received {
                            path,
                            headers,
                            spans,
                            resource,
                        });
                        let mut response = hyper::Response::new(Full::new(Bytes::new()));
                        *response.status_mut() =
                            http::StatusCode::from_u16(status.load(Ordering::Relaxed)).unwrap();
                        Ok::<_, Infallible>(response)
                    }
                });
                tokio::spawn(
                    http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
            }
        });
        Receiver { base, received }
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// Exports `spans` spans through `config` and flushes; the metrics after.
async fn export(config: OtlpConfig, spans: usize) -> OtlpMetrics {
    let metrics = OtlpMetrics::default();
    let telemetry = Telemetry::start(&config, metrics.clone()).unwrap();
    let tracer = telemetry.tracer();
    for n in 0..spans {
        tracer.start(format!("span {n}")).end();
    }
    // The flush blocks until the export ended: off the runtime's workers.
    tokio::task::spawn_blocking(move || {
        let _ = telemetry.provider.force_flush();
        telemetry.shutdown();
    })
    .await
    .unwrap();
    metrics
}

fn config(sources: OtlpSources<'_>) -> OtlpConfig {
    sources.resolve("tc-test").unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_v1_traces_once_with_the_headers_and_the_version() {
    let receiver = Receiver::start(200).await;
    let base = receiver.base.clone();
    let with_path = format!("{base}/v1/traces");
    let custom = format!("{base}/custom/traces");
    let headers = "x-api-key=s3cret%2Fkey, x-tenant=t1";
    let rows: [(OtlpSources<'_>, &str); 3] = [
        (
            OtlpSources {
                endpoint: Some(&base),
                headers: Some(headers),
                ..OtlpSources::default()
            },
            "/v1/traces",
        ),
        (
            OtlpSources {
                endpoint: Some(&with_path),
                headers: Some(headers),
                ..OtlpSources::default()
            },
            "/v1/traces",
        ),
        (
            OtlpSources {
                endpoint: Some(&base),
                traces_endpoint: Some(&custom),
                headers: Some(headers),
            },
            "/custom/traces",
        ),
    ];
    for (n, (sources, path)) in rows.into_iter().enumerate() {
        let metrics = export(config(sources), 2).await;
        let got = receiver.received();
        assert_eq!(got.len(), n + 1, "{got:#?}");
        let last = &got[n];
        assert_eq!(last.path, path, "row {n}");
        assert_eq!(last.spans, 2);
        let header = |name: &str| last.headers.get(name).and_then(|v| v.to_str().ok());
        assert_eq!(header("x-api-key"), Some("s3cret/key"));
        assert_eq!(header("x-tenant"), Some("t1"));
        assert_eq!(
            last.resource.get("service.version").map(String::as_str),
            Some(env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(
            last.resource.get("service.name").map(String::as_str),
            Some("tc-test")
        );
        assert_eq!(
            (metrics.export_failures.get(), metrics.spans_dropped.get()),
            (0, 0)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_collector_is_counted() {
    // A collector answering 500.
    let receiver = Receiver::start(500).await;
    let metrics = export(
        config(OtlpSources {
            endpoint: Some(&receiver.base),
            ..OtlpSources::default()
        }),
        3,
    )
    .await;
    assert_eq!(receiver.received().len(), 1);
    assert_eq!(
        (metrics.export_failures.get(), metrics.spans_dropped.get()),
        (1, 3)
    );

    // No collector at all: the connection is refused.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let metrics = export(
        config(OtlpSources {
            endpoint: Some(&refused),
            ..OtlpSources::default()
        }),
        2,
    )
    .await;
    assert_eq!(
        (metrics.export_failures.get(), metrics.spans_dropped.get()),
        (1, 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_endpoint_is_taken() {
    // The handshake needs a collector the system trusts (none on
    // loopback); the exporter is built and its start does not fail.
    let config = config(OtlpSources {
        endpoint: Some("https://127.0.0.1:1"),
        ..OtlpSources::default()
    });
    assert_eq!(config.traces_url, "https://127.0.0.1:1/v1/traces");
    let telemetry = Telemetry::start(&config, OtlpMetrics::default());
    match telemetry {
        Ok(telemetry) => {
            tokio::task::spawn_blocking(move || telemetry.shutdown())
                .await
                .unwrap();
        }
        // A machine without root certificates says so.
        Err(e) => assert!(e.to_string().contains("no root certificates"), "{e}"),
    }
}
