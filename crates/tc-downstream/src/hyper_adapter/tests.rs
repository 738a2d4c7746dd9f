//! The adapter against the fake downstream served on 127.0.0.1
//! ([`crate::fake::FakeServer`]), which can send bytes no HTTP library would.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::net::TcpListener;

use crate::fake::FakeDownstream;
use crate::fake::{Call, FakeServer, Script, Step, Then};
use crate::{
    Delivery, DeliverySpec, DownError, DownResponse, Downstream, DownstreamConfig, HyperDownstream,
    Method,
};

/// Write `bytes`, keep the connection for the next request.
pub(super) fn keep(bytes: &'static [u8]) -> Step {
    Step::Raw(Bytes::from_static(bytes), Then::KeepAlive)
}

/// Write `bytes`, then close (FIN).
fn close(bytes: &'static [u8]) -> Step {
    Step::Raw(Bytes::from_static(bytes), Then::Close)
}

/// Write `bytes`, then reset (RST).
fn reset(bytes: &'static [u8]) -> Step {
    Step::Raw(Bytes::from_static(bytes), Then::Reset)
}

/// Write `bytes`, then only wait for the client to close.
pub(super) fn hold(bytes: &'static [u8]) -> Step {
    Step::Raw(Bytes::from_static(bytes), Then::Hold)
}

/// A script playing `steps` in order, one per call whatever its path; the
/// last repeats.
pub(super) fn in_order(steps: Vec<Step>) -> Arc<Script> {
    assert!(!steps.is_empty(), "a server needs at least one step");
    let next = AtomicUsize::new(0);
    Script::with_rule(move |_, _| {
        let i = next.fetch_add(1, Ordering::Relaxed);
        steps[i.min(steps.len() - 1)].clone()
    })
}

/// Serves `steps` (see [`in_order`]) on loopback.
async fn serve(steps: Vec<Step>) -> (Arc<Script>, FakeServer) {
    let script = in_order(steps);
    let server = FakeServer::start(Arc::clone(&script)).await.unwrap();
    (script, server)
}

/// The `n`th call (from 0) the server received, once it has.
pub(super) async fn nth_call(script: &Script, n: usize) -> Call {
    tokio::time::timeout(GUARD, script.wait_calls(n + 1))
        .await
        .expect("no call within the guard");
    script.all_calls()[n].clone()
}

/// Waits until the client closed `connection`.
pub(super) async fn closed(script: &Script, connection: Option<usize>) {
    let connection = connection.expect("a call over loopback");
    tokio::time::timeout(GUARD, script.wait_closed(connection))
        .await
        .expect("the connection was not closed within the guard");
}

/// Request timeout for calls that should not time out, and failure guard for
/// waits: far above anything a passing test takes.
const GUARD: Duration = Duration::from_secs(10);
/// The response cap in these tests, small enough to cross in one line.
const CAP: usize = 16;

fn client() -> HyperDownstream {
    HyperDownstream::new(DownstreamConfig {
        max_response_bytes: CAP,
        ..DownstreamConfig::default()
    })
}

fn request(url: String) -> Delivery {
    Delivery::build(spec(&url, &Bytes::from_static(br#"{"n":1}"#)))
}

/// A try of task `task-1` with key `key-1`, no headers of its own, unsigned.
fn spec<'a>(url: &'a str, body: &'a Bytes) -> DeliverySpec<'a> {
    DeliverySpec {
        method: Method::Post,
        url,
        body,
        timeout: GUARD,
        task_id: "task-1",
        attempt: 1,
        idempotency_key: "key-1",
        headers: &[],
        trace: crate::TraceHeaders::default(),
        sent_at_s: 1_767_225_600,
        signing_keys: &[],
    }
}

fn answer(
    status: u16,
    retry_after: Option<&str>,
    content_type: Option<&str>,
    body: &'static [u8],
) -> Result<DownResponse, DownError> {
    Ok(DownResponse {
        status,
        retry_after: retry_after.map(str::to_owned),
        content_type: content_type.map(str::to_owned),
        rate_limit: Vec::new(),
        body: Bytes::from_static(body),
    })
}

/// Errors compare by kind (the messages are the OS's and hyper's), except the
/// cap, which is ours.
fn shape(result: &Result<DownResponse, DownError>) -> String {
    match result {
        Ok(response) => format!("{response:?}"),
        Err(error @ DownError::ResponseTooLarge { .. }) => format!("{error:?}"),
        Err(DownError::Timeout) => "timeout".to_owned(),
        Err(DownError::Connect(_)) => "connect".to_owned(),
        Err(DownError::Other(_)) => "other".to_owned(),
        Err(DownError::DestinationDenied(_)) => "destination_denied".to_owned(),
        Err(DownError::AuthFailed(_)) => "auth_failed".to_owned(),
    }
}

/// Serves `reply` to one call and checks what the call returns, and that it
/// returned well before its timeout.
async fn check(name: &str, step: Step, expected: Result<DownResponse, DownError>) {
    let (_script, server) = serve(vec![step]).await;
    let started = Instant::now();
    let result = client()
        .send(request(format!("{}/hook", server.url())))
        .await;
    assert_eq!(shape(&result), shape(&expected), "{name}: got {result:?}");
    assert!(
        started.elapsed() < GUARD / 2,
        "{name}: took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn answers_and_failures_map_to_the_right_results() {
    let too_large = Err(DownError::ResponseTooLarge { limit: CAP });
    let connect = Err(DownError::Connect(String::new()));
    let other = Err(DownError::Other(String::new()));
    let cases: Vec<(&str, Step, Result<DownResponse, DownError>)> = vec![
        (
            "200 with a JSON body",
            keep(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}",
            ),
            answer(200, None, Some("application/json"), b"{\"ok\":true}"),
        ),
        (
            "503 with Retry-After in seconds",
            keep(
                b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 120\r\nContent-Length: 0\r\n\r\n",
            ),
            answer(503, Some("120"), None, b""),
        ),
        (
            "429 with Retry-After as a date and a non-JSON content type",
            keep(
                b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 9\r\n\r\nslow down",
            ),
            answer(
                429,
                Some("Wed, 21 Oct 2015 07:28:00 GMT"),
                Some("text/plain; charset=utf-8"),
                b"slow down",
            ),
        ),
        (
            "chunked body",
            keep(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
            ),
            answer(200, None, None, b"hello world"),
        ),
        (
            "body exactly at the cap",
            keep(b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n0123456789abcdef"),
            answer(200, None, None, b"0123456789abcdef"),
        ),
        (
            "complete response, then the server closes",
            close(b"HTTP/1.1 204 No Content\r\n\r\n"),
            answer(204, None, None, b""),
        ),
        (
            "declared length one past the cap",
            keep(b"HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n0123456789abcdefg"),
            too_large.clone(),
        ),
        (
            "declared length over the cap, body never sent: refused without reading",
            hold(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n"),
            too_large.clone(),
        ),
        (
            "chunked body growing past the cap",
            keep(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\na\r\n0123456789\r\n0\r\n\r\n",
            ),
            too_large,
        ),
        ("closed before any response", close(b""), connect.clone()),
        (
            "closed in the middle of the headers",
            close(b"HTTP/1.1 200 OK\r\nContent-Le"),
            connect.clone(),
        ),
        (
            "closed in the middle of the body",
            close(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart"),
            connect.clone(),
        ),
        ("reset before any response", reset(b""), connect.clone()),
        (
            "reset in the middle of the body",
            reset(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart"),
            connect,
        ),
        ("not HTTP", keep(b"garbage\r\n\r\n"), other.clone()),
        ("not HTTP, then closed", close(b"garbage\r\n\r\n"), other.clone()),
        (
            "unparsable status code",
            keep(b"HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n"),
            other,
        ),
    ];
    for (name, step, expected) in cases {
        check(name, step, expected).await;
    }
}

/// What a loopback server and the in-process fake record for `delivery`:
/// the real client's call and the fake's.
async fn received_both_ways(delivery: &Delivery, path: &str) -> (Call, Call) {
    let (script, server) = serve(vec![keep(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")]).await;
    let over_loopback = Delivery {
        url: format!("{}{path}", server.url()),
        ..delivery.clone()
    };
    client().send(over_loopback).await.unwrap();
    let real = nth_call(&script, 0).await;
    let script = in_order(vec![Step::Reply(crate::fake::Reply::status(200))]);
    FakeDownstream::new(Arc::clone(&script))
        .send(delivery.clone())
        .await
        .unwrap();
    (real, script.all_calls()[0].clone())
}

#[tokio::test]
async fn sends_the_delivery_as_built_and_the_fake_records_the_same() {
    let key = [7u8; 32];
    let body = Bytes::from_static(br#"{"amount":42}"#);
    let url = "http://127.0.0.1:9/hooks/payment?tenant=7";
    let delivery = Delivery::build(DeliverySpec {
        method: Method::Put,
        idempotency_key: "order-17:charge",
        task_id: "0192d3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
        attempt: 3,
        headers: &[("authorization", "Bearer t0k3n"), ("x-tenant", "acme")],
        trace: crate::TraceHeaders {
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            tracestate: Some("congo=t61rcWkgMzE"),
        },
        signing_keys: &[&key],
        ..spec(url, &body)
    });
    let (real, fake) = received_both_ways(&delivery, "/hooks/payment?tenant=7").await;

    for call in [&real, &fake] {
        assert_eq!(call.method, "PUT");
        assert_eq!(call.path, "/hooks/payment?tenant=7");
        assert_eq!(&call.body[..], br#"{"amount":42}"#);
        assert_eq!(call.idempotency_key.as_deref(), Some("order-17:charge"));
        assert_eq!(call.attempt, Some(3));
    }
    // Over the wire: the delivery's headers in its order, and only what the
    // transport adds besides (hyper puts `host` last).
    let transport = ["host", "content-length"];
    let sent: Vec<_> = real
        .headers
        .iter()
        .filter(|(name, _)| !transport.contains(&name.as_str()))
        .cloned()
        .collect();
    assert_eq!(sent, delivery.headers);
    assert_eq!(real.header("content-length"), Some("13"));
    assert_eq!(
        fake.headers, delivery.headers,
        "the fake sends what the real client sends"
    );
    assert_eq!(real.header("user-agent"), Some(crate::USER_AGENT));
    assert_eq!(real.header("authorization"), Some("Bearer t0k3n"));
    assert_eq!(
        real.header("traceparent"),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    );
    assert!(
        real.header("webhook-signature")
            .is_some_and(|s| s.starts_with("v1,"))
    );
}

#[tokio::test]
async fn a_get_sends_no_body_and_no_content_type() {
    let empty = Bytes::new();
    let delivery = Delivery::build(DeliverySpec {
        method: Method::Get,
        ..spec("http://127.0.0.1:9/items/7", &empty)
    });
    let (real, fake) = received_both_ways(&delivery, "/items/7").await;
    for call in [&real, &fake] {
        assert_eq!(call.method, "GET");
        assert!(call.body.is_empty());
        assert_eq!(call.header("content-type"), None);
    }
    assert_eq!(
        real.header("content-length"),
        None,
        "hyper sends no length for an empty GET"
    );
}

#[tokio::test]
async fn refused_connection_is_a_connect_error() {
    // Binding then dropping a listener leaves a port nobody listens on.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);

    let result = client().send(request(format!("http://{addr}/"))).await;
    assert!(
        matches!(&result, Err(DownError::Connect(message)) if message.contains("refused")),
        "{result:?}"
    );
}

/// A plain test: building the client needs no runtime.
#[test]
fn requests_that_cannot_be_sent_are_other_errors() {
    let check = |what: &str, request: Delivery, expected: &str| {
        let result = HyperDownstream::default().build_request(request);
        match result {
            Err(DownError::Other(message)) => {
                assert!(message.contains(expected), "{what}: {message}");
                assert!(
                    !message.contains("Injected"),
                    "{what}: repeats a value: {message}"
                );
            }
            other => panic!("{what}: expected Other, got {other:?}"),
        }
    };
    let base = request("http://127.0.0.1:9/".into());
    let with_url = |url: &str| Delivery {
        url: url.into(),
        ..base.clone()
    };
    let with_header = |name: &str, value: &str| {
        let mut delivery = base.clone();
        delivery.headers.push((name.to_owned(), value.to_owned()));
        delivery
    };
    check(
        "not a url",
        with_url("not a url"),
        "invalid url \"not a url\"",
    );
    check(
        "relative",
        with_url("/hooks"),
        "not an absolute http or https url",
    );
    check(
        "ftp",
        with_url("ftp://example.com/"),
        "not an absolute http or https url",
    );
    check(
        "no scheme",
        with_url("example.com:80"),
        "not an absolute http or https url",
    );
    check(
        "line break in key",
        with_header("idempotency-key", "a\r\nInjected: 1"),
        "the value of idempotency-key is not valid",
    );
    check(
        "control character in a value",
        with_header("x-task-id", "t\u{0}Injected"),
        "the value of x-task-id is not valid",
    );
    check(
        "not a header name",
        with_header("x y", "v"),
        "\"x y\" is not a valid header name",
    );
}

#[tokio::test]
async fn slow_body_times_out_and_closes_the_connection() {
    // Headers and part of the body arrive at once; the rest never does.
    let (script, server) = serve(vec![hold(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart",
    )])
    .await;
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let result = client()
        .send(Delivery {
            timeout,
            ..request(format!("{}/", server.url()))
        })
        .await;
    let elapsed = started.elapsed();

    assert_eq!(result, Err(DownError::Timeout));
    assert!(
        elapsed >= timeout,
        "returned before the timeout: {elapsed:?}"
    );
    assert!(
        elapsed < timeout + GUARD / 2,
        "hung past the timeout: {elapsed:?}"
    );
    let call = nth_call(&script, 0).await;
    closed(&script, call.connection).await;
}

#[tokio::test]
async fn silent_server_times_out_and_the_connection_is_closed() {
    let (script, server) = serve(vec![hold(b"")]).await;
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let result = client()
        .send(Delivery {
            timeout,
            ..request(format!("{}/", server.url()))
        })
        .await;

    assert_eq!(result, Err(DownError::Timeout));
    assert!(
        started.elapsed() < timeout + GUARD / 2,
        "{:?}",
        started.elapsed()
    );
    let call = nth_call(&script, 0).await;
    closed(&script, call.connection).await;
}

#[tokio::test]
async fn dropping_a_call_waiting_for_headers_closes_its_connection() {
    let (script, server) = serve(vec![hold(b"")]).await;
    let downstream = client();
    let call = tokio::spawn({
        let request = request(format!("{}/", server.url()));
        async move { downstream.send(request).await }
    });
    // The server has the request, so the call is in flight.
    let received = nth_call(&script, 0).await;

    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    closed(&script, received.connection).await;
}

#[tokio::test]
async fn dropping_a_call_reading_the_body_closes_its_connection() {
    let (script, server) = serve(vec![hold(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart",
    )])
    .await;
    let downstream = client();
    let head = downstream
        .send_head(request(format!("{}/", server.url())))
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    let received = nth_call(&script, 0).await;

    let mut reading: Pin<Box<dyn Future<Output = _>>> = Box::pin(downstream.read_body(head));
    let first_poll = std::future::poll_fn(|cx| Poll::Ready(reading.as_mut().poll(cx))).await;
    assert!(first_poll.is_pending(), "the body cannot be complete yet");
    drop(reading);

    closed(&script, received.connection).await;
}

#[tokio::test]
async fn a_dropped_call_leaves_no_connection_behind_for_the_next() {
    let (script, server) = serve(vec![
        hold(b""),
        keep(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
    ])
    .await;
    let downstream = client();
    let first = tokio::spawn({
        let downstream = downstream.clone();
        let request = request(format!("{}/", server.url()));
        async move { downstream.send(request).await }
    });
    let dropped_on = nth_call(&script, 0).await.connection;
    first.abort();
    closed(&script, dropped_on).await;

    let second = downstream.send(request(format!("{}/", server.url()))).await;
    assert_eq!(second, answer(200, None, None, b"ok"));
    let served_on = nth_call(&script, 1).await.connection;
    assert_ne!(served_on, dropped_on);
}

#[tokio::test]
async fn sequential_calls_reuse_one_keep_alive_connection() {
    let (script, server) = serve(vec![keep(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    )])
    .await;
    let downstream = client();
    // Each answer is one small write, so hyper reads the whole message in one
    // go and the connection is idle, hence back in the pool, by the time the
    // response is handed over: the next call finds it there rather than
    // racing a new connect against its return.
    for call in 0..5 {
        let result = downstream.send(request(format!("{}/", server.url()))).await;
        assert_eq!(result, answer(200, None, None, b"ok"), "call {call}");
        let connection = nth_call(&script, call).await.connection;
        assert_eq!(connection, Some(0), "call {call} opened a new connection");
    }
    assert_eq!(
        script.read(|r| r.connections()),
        1,
        "only connection 0 was ever opened"
    );
}

#[test]
fn default_config_caps_responses_at_one_mebibyte() {
    let config = DownstreamConfig::default();
    assert_eq!(config.max_response_bytes, 1024 * 1024);
    assert_eq!(config.connect_timeout, None);
}

/// With `deny_private_destinations`, loopback is refused however the url
/// names it (a literal in any of IPv4's number forms, a name resolved at
/// connect time, an IPv4-mapped IPv6 literal), before any connection;
/// without it the same call goes through.
#[tokio::test]
async fn private_destinations_are_refused_at_connect_time_when_asked() {
    let (script, server) = serve(vec![keep(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")]).await;
    let port = server.url().rsplit(':').next().unwrap().to_owned();
    let guarded = HyperDownstream::new(DownstreamConfig {
        deny_private_destinations: true,
        ..DownstreamConfig::default()
    });
    for url in [
        format!("http://127.0.0.1:{port}/hook"),
        format!("http://localhost:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        format!("http://[::1]:{port}/hook"),
        // IPv4's number forms are the same address.
        format!("http://2130706433:{port}/hook"),
        format!("http://0x7f.1:{port}/hook"),
        format!("http://127.0.0.1.:{port}/hook"),
        format!("https://127.0.0.1:{port}/hook"),
    ] {
        let result = guarded.send(request(url.clone())).await;
        assert!(
            matches!(&result, Err(DownError::DestinationDenied(m)) if m.contains("public")),
            "{url}: {result:?}"
        );
    }
    assert!(script.all_calls().is_empty(), "nothing reached the server");

    let open = client()
        .send(request(format!("http://localhost:{port}/hook")))
        .await;
    assert_eq!(open.map(|r| r.status), Ok(200), "off by default");
}
