//! The network path: a real server on 127.0.0.1 and plain blocking clients
//! that behave like Python's http.client or curl without `Expect`.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tc_http::{HttpConfig, Server};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::support::harness;

/// A running server and the switch that stops it.
struct Running {
    server: Server,
    stop: oneshot::Sender<()>,
}

impl Running {
    fn addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(10), self.server.wait())
            .await
            .expect("server stops within its grace period")
            .unwrap();
    }
}

async fn start(config: HttpConfig) -> Running {
    let h = harness(config).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tc_http::serve(listener, h.app, async {
        let _ = stopped.await;
    })
    .unwrap();
    Running { server, stop }
}

/// A parsed HTTP/1.1 response.
#[derive(Debug)]
struct Raw {
    status: u16,
    /// Lowercased names.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn error_code(&self) -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        v["error"]["code"].as_str().map(str::to_owned)
    }

    fn error_message(&self) -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        v["error"]["message"].as_str().map(str::to_owned)
    }
}

/// Reads one response (Content-Length framed) from the stream.
fn read_response(stream: &mut TcpStream) -> std::io::Result<Raw> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Ok(Raw {
        status,
        headers,
        body,
    })
}

/// The outcome of a read on a connection the server closed without an
/// answer: end of stream, or a reset.
fn assert_closed(read: &std::io::Result<usize>) {
    assert!(
        matches!(read, Ok(0))
            || read
                .as_ref()
                .is_err_and(|e| e.kind() == ErrorKind::ConnectionReset),
        "expected the server to close the connection, got {read:?}"
    );
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    // Bounds every blocking read: a hung server fails the test, not CI.
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// Writes all of `request` first, then reads the answer: the order of a
/// plain client that does not use `Expect: 100-continue`.
async fn send_then_read(addr: SocketAddr, request: Vec<u8>) -> Raw {
    tokio::task::spawn_blocking(move || {
        let mut stream = connect(addr);
        stream.write_all(&request).unwrap();
        read_response(&mut stream).unwrap()
    })
    .await
    .unwrap()
}

fn post_tasks_head(extra: &str) -> String {
    format!(
        "POST /tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{extra}\r\n"
    )
}

const MIB: usize = 1024 * 1024;

/// Over the 1 MiB limit, and larger than what loopback's socket buffers take
/// in while the server does not read: a server that answered without
/// draining would reset the connection while this client still writes.
const OVERSIZED: usize = 8 * MIB;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_that_sends_an_oversized_body_first_reads_413() {
    let running = start(HttpConfig::default()).await;
    let body = vec![b' '; OVERSIZED];
    let mut request = post_tasks_head(&format!("Content-Length: {}\r\n", body.len())).into_bytes();
    request.extend_from_slice(&body);
    let reply = send_then_read(running.addr(), request).await;
    assert_eq!(reply.status, 413, "{reply:?}");
    assert_eq!(reply.error_code().as_deref(), Some("payload_too_large"));
    assert_eq!(reply.header("connection"), Some("close"));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_oversized_body_without_length_is_413() {
    let running = start(HttpConfig::default()).await;
    let mut request = post_tasks_head("Transfer-Encoding: chunked\r\n").into_bytes();
    let chunk = vec![b' '; 64 * 1024];
    for _ in 0..(OVERSIZED / chunk.len()) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(&chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let reply = send_then_read(running.addr(), request).await;
    assert_eq!(reply.status, 413, "{reply:?}");
    assert_eq!(reply.error_code().as_deref(), Some("payload_too_large"));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_expects_100_continue_gets_413_without_sending_the_body() {
    let running = start(HttpConfig::default()).await;
    let addr = running.addr();
    let reply = tokio::task::spawn_blocking(move || {
        let mut stream = connect(addr);
        let head = post_tasks_head(&format!(
            "Content-Length: {}\r\nExpect: 100-continue\r\n",
            2 * MIB
        ));
        stream.write_all(head.as_bytes()).unwrap();
        read_response(&mut stream).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(reply.status, 413, "{reply:?}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_submit_over_the_socket_is_201() {
    let running = start(HttpConfig::default()).await;
    let body = br#"{"url":"http://127.0.0.1:9/a","idempotency_key":"sock-1"}"#;
    let mut request = post_tasks_head(&format!("Content-Length: {}\r\n", body.len())).into_bytes();
    request.extend_from_slice(body);
    let reply = send_then_read(running.addr(), request).await;
    assert_eq!(reply.status, 201, "{reply:?}");
    assert!(
        reply
            .header("location")
            .is_some_and(|l| l.starts_with("/tasks/"))
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_is_disconnected_after_the_header_read_timeout() {
    let timeout = Duration::from_millis(300);
    let running = start(HttpConfig {
        header_read_timeout: timeout,
        ..HttpConfig::default()
    })
    .await;
    let addr = running.addr();
    let (outcome, waited) = tokio::task::spawn_blocking(move || {
        let mut stream = connect(addr);
        let started = Instant::now();
        // Half a request head, then silence.
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0")
            .unwrap();
        let mut buf = [0u8; 1024];
        (stream.read(&mut buf), started.elapsed())
    })
    .await
    .unwrap();
    assert_closed(&outcome);
    assert!(
        waited >= timeout,
        "closed after {waited:?}, before the timeout"
    );
    assert!(
        waited < Duration::from_secs(15),
        "closed by the server, not the client's bound"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_read_timeout() {
    let timeout = Duration::from_millis(300);
    let running = start(HttpConfig {
        header_read_timeout: timeout,
        ..HttpConfig::default()
    })
    .await;
    let addr = running.addr();
    let (read, idle) = tokio::task::spawn_blocking(move || {
        let mut stream = connect(addr);
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut stream).unwrap().status, 200);
        let answered = Instant::now();
        let mut buf = [0u8; 16];
        (stream.read(&mut buf), answered.elapsed())
    })
    .await
    .unwrap();
    assert_closed(&read);
    // The server's timer starts when it has written the answer, a little
    // before this client has read it: allow for that gap.
    assert!(
        idle >= timeout / 2,
        "closed after {idle:?} idle: not by the timer"
    );
    assert!(idle < Duration::from_secs(15), "closed by the server");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_method_over_the_socket_is_405_with_allow() {
    let running = start(HttpConfig::default()).await;
    let request =
        b"DELETE /tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n".to_vec();
    let reply = send_then_read(running.addr(), request).await;
    assert_eq!(reply.status, 405);
    assert_eq!(reply.header("allow"), Some("GET, POST"));
    assert_eq!(reply.error_code().as_deref(), Some("method_not_allowed"));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_checked_over_the_socket() {
    let running = start(HttpConfig {
        api_token: Some("s3cret".into()),
        ..HttpConfig::default()
    })
    .await;
    // The message says whether a credential came; never whether a key
    // exists (a made-up key reads as a wrong token).
    const MISSING: &str = "Authorization: no credential given";
    const NOT_ACCEPTED: &str = "Authorization: the credential was not accepted";
    let made_up_key = format!("Authorization: Bearer tck_{}\r\n", "A".repeat(43));
    let cases: [(&str, &str, u16, &str); 7] = [
        ("/tasks", "", 401, MISSING),
        (
            "/tasks",
            "Authorization: Bearer nope\r\n",
            401,
            NOT_ACCEPTED,
        ),
        (
            "/tasks",
            "Authorization: Basic czNjcmV0\r\n",
            401,
            NOT_ACCEPTED,
        ),
        ("/tasks", &made_up_key, 401, NOT_ACCEPTED),
        ("/tasks", "Cookie: tc_session=stale\r\n", 401, NOT_ACCEPTED),
        ("/tasks", "Authorization: Bearer s3cret\r\n", 200, ""),
        ("/healthz", "", 200, ""),
    ];
    for (path, auth, status, message) in cases {
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}\r\n").into_bytes();
        let reply = send_then_read(running.addr(), request).await;
        assert_eq!(reply.status, status, "{path} {auth:?}");
        if status == 401 {
            assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
            assert_eq!(reply.error_code().as_deref(), Some("unauthorized"));
            let got = reply.error_message().unwrap_or_default();
            assert!(got.starts_with(message), "{auth:?}: {got}");
        }
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_request_is_never_a_5xx() {
    let running = start(HttpConfig::default()).await;
    let requests: [&[u8]; 4] = [
        b"NOT HTTP AT ALL\r\n\r\n",
        b"GET /tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n",
        b"POST /tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\nzz\r\n",
        b"GET /tasks HTTP/1.1\r\nBad Header Line\r\n\r\n",
    ];
    for request in requests {
        let addr = running.addr();
        let request = request.to_vec();
        let shown = String::from_utf8_lossy(&request).into_owned();
        let reply = tokio::task::spawn_blocking(move || {
            let mut stream = connect(addr);
            stream.write_all(&request).unwrap();
            read_response(&mut stream)
        })
        .await
        .unwrap();
        // Either an answer below 500 or a closed connection.
        if let Ok(reply) = reply {
            assert!(reply.status < 500, "{shown:?}: {reply:?}");
        }
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_serves_several_requests_and_shutdown_closes_idle_connections() {
    let running = start(HttpConfig::default()).await;
    let addr = running.addr();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let client = tokio::task::spawn_blocking(move || {
        let mut stream = connect(addr);
        for _ in 0..3 {
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                .unwrap();
            let reply = read_response(&mut stream).unwrap();
            assert_eq!(reply.status, 200);
            assert_eq!(reply.body, br#"{"status":"ok"}"#);
        }
        // Tell the test the connection is idle, then wait for the server to
        // close it during shutdown.
        tx.send(()).unwrap();
        let mut buf = [0u8; 16];
        stream.read(&mut buf)
    });
    tokio::task::spawn_blocking(move || rx.recv().unwrap())
        .await
        .unwrap();
    running.stop().await;
    let read = client.await.unwrap();
    assert_closed(&read);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_the_bound_is_answered_503_at_once_and_closed() {
    let running = start(HttpConfig {
        max_connections: 1,
        ..HttpConfig::default()
    })
    .await;
    let addr = running.addr();
    let (refused, closed, after) = tokio::task::spawn_blocking(move || {
        let mut first = connect(addr);
        first
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut first).unwrap().status, 200);
        // The first connection stays open (keep-alive) and holds the only
        // permit; the second is told so instead of waiting in the backlog.
        let mut second = connect(addr);
        second
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        let refused = read_response(&mut second).unwrap();
        let closed = second.read(&mut [0u8; 1]);
        drop(first);
        // Once the first is gone its permit is free again. The server sees
        // the close asynchronously: retry as Retry-After asks, bounded.
        let mut after = None;
        for _ in 0..50 {
            let mut third = connect(addr);
            third
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .unwrap();
            let status = read_response(&mut third).unwrap().status;
            if status == 200 {
                after = Some(status);
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        (refused, closed, after)
    })
    .await
    .unwrap();
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.header("connection"), Some("close"));
    assert_eq!(refused.error_code().as_deref(), Some("unavailable"));
    assert_closed(&closed);
    assert_eq!(after, Some(200), "served once the first closed");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_loses_its_connection_after_the_write_timeout() {
    let h = harness(HttpConfig {
        write_timeout: Duration::from_millis(300),
        max_connections: 1,
        ..HttpConfig::default()
    })
    .await;
    // Far more than loopback's socket buffers hold for a client that reads
    // nothing.
    let big = vec![b'x'; 64 * MIB];
    let id = h
        .seed(
            "big",
            Some(tc_model::store::Completion::Success {
                http_status: 200,
                result: big,
                content_type: None,
            }),
        )
        .await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tc_http::serve(listener, h.app, async {
        let _ = stopped.await;
    })
    .unwrap();
    let running = Running { server, stop };
    let addr = running.addr();
    let received = tokio::task::spawn_blocking(move || {
        let mut stuck = connect(addr);
        stuck
            .write_all(
                format!("GET /tasks/{id}/result HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes(),
            )
            .unwrap();
        // With one connection allowed, the stuck one holds the slot until
        // the server gives up writing to it: probes are refused with 503
        // until then, and served after.
        let mut probes = Vec::new();
        for _ in 0..100 {
            let mut probe = connect(addr);
            probe
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .unwrap();
            let status = read_response(&mut probe).unwrap().status;
            probes.push(status);
            if status == 200 {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            probes.first(),
            Some(&503),
            "the stuck connection held the slot"
        );
        assert_eq!(probes.last(), Some(&200), "the slot came back: {probes:?}");
        let mut total = 0usize;
        let mut chunk = vec![0u8; 1 << 16];
        loop {
            match stuck.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
        total
    })
    .await
    .unwrap();
    assert!(
        received < 64 * MIB,
        "the whole response arrived ({received} bytes): the connection was not cut"
    );
    running.stop().await;
}

/// Unauthenticated login posts that announce large bodies and never send
/// them (the issue's flood: Content-Length 1 MiB, 6 bytes sent) must not
/// hold the request-body budget that API requests need: an authenticated
/// submit right after is served, not left waiting for a 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_flood_does_not_take_the_body_budget_of_api_requests() {
    let running = start(HttpConfig {
        api_token: Some("s3cret".into()),
        // A small budget the flood would take whole: four 1 MiB logins.
        max_body_bytes_in_flight: 4 * MIB,
        body_read_timeout: Duration::from_secs(60),
        ..HttpConfig::default()
    })
    .await;
    let addr = running.addr();
    let flood = tokio::task::spawn_blocking(move || {
        let mut held = Vec::new();
        // Over the login cap, then at it: each announces a body and sends
        // `token=` only.
        for (n, length) in [(8, MIB), (100, 4000)] {
            for _ in 0..n {
                let mut stream = connect(addr);
                let head = format!(
                    "POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                     Content-Type: application/x-www-form-urlencoded\r\n\
                     Content-Length: {length}\r\n\r\ntoken="
                );
                stream.write_all(head.as_bytes()).unwrap();
                held.push(stream);
            }
        }
        // Every flood connection was accepted before this one.
        let mut probe = connect(addr);
        probe
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut probe).unwrap().status, 200);
        held
    })
    .await
    .unwrap();
    let body = br#"{"url":"http://127.0.0.1:9/a","idempotency_key":"after-flood"}"#;
    let mut request = post_tasks_head(&format!(
        "Authorization: Bearer s3cret\r\nContent-Length: {}\r\n",
        body.len()
    ))
    .into_bytes();
    request.extend_from_slice(body);
    // Were the flood holding the budget, this would wait for the body read
    // timeout (a minute) and then be refused: the client's 20 s bound on
    // reading fails the test first.
    let reply = send_then_read(addr, request).await;
    assert_eq!(reply.status, 201, "{reply:?}");
    drop(flood);
    running.stop().await;
}

/// A login body over 4 KiB is refused before it is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_body_over_4_kib_is_413() {
    let running = start(HttpConfig {
        api_token: Some("s3cret".into()),
        ..HttpConfig::default()
    })
    .await;
    for (length, status) in [(4096, 401), (4097, 413)] {
        let body = format!("token={}", "x".repeat(length - 6));
        let request = format!(
            "POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Content-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {length}\r\n\r\n{body}"
        );
        let reply = send_then_read(running.addr(), request.into_bytes()).await;
        assert_eq!(reply.status, status, "{length} bytes: {reply:?}");
    }
    running.stop().await;
}

/// Long-polls hold their connections while they wait; they may never hold
/// them all: a 64th of the connection limit (at least one) stays for other
/// requests, so a health probe is served while every waiter a client could
/// open waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_never_take_every_connection_and_health_is_served() {
    let h = harness(HttpConfig {
        max_connections: 8,
        ..HttpConfig::default()
    })
    .await;
    let pending = h.seed("waited-for", None).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tc_http::serve(listener, h.app, async {
        let _ = stopped.await;
    })
    .unwrap();
    let running = Running { server, stop };
    let addr = running.addr();
    let (refused, probe) = tokio::task::spawn_blocking(move || {
        // As many long-polls as there are connections: those past the
        // waiters' share are refused at once (and their connections closed).
        let mut waiting = Vec::new();
        let mut refused = 0;
        for _ in 0..8 {
            let mut stream = connect(addr);
            let request = format!(
                "GET /tasks/{pending}?wait_ms=60000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Connection: close\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            match read_response(&mut stream) {
                Ok(reply) => {
                    assert_eq!(reply.status, 503, "{reply:?}");
                    refused += 1;
                }
                Err(_) => waiting.push(stream),
            }
        }
        // The refused connections close as their answers go out; then a
        // probe finds a free slot (retried as Retry-After asks, bounded).
        let mut probe = None;
        for _ in 0..50 {
            let mut stream = connect(addr);
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .unwrap();
            let status = read_response(&mut stream).unwrap().status;
            if status == 200 {
                probe = Some(status);
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(waiting);
        (refused, probe)
    })
    .await
    .unwrap();
    assert_eq!(refused, 1, "7 of 8 connections may wait");
    assert_eq!(probe, Some(200), "the probe was never served");
    running.stop().await;
}

/// A flood of connections past the limit that never read nor close: each
/// still gets its 503, and so does a health probe that comes after them —
/// an answer, never a reset — as long as fewer than 4096 are past the
/// limit at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_past_the_limit_gets_503_even_behind_a_flood_of_silent_connections() {
    let running = start(HttpConfig {
        max_connections: 1,
        ..HttpConfig::default()
    })
    .await;
    let addr = running.addr();
    let probe = tokio::task::spawn_blocking(move || {
        let mut holder = connect(addr);
        holder
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut holder).unwrap().status, 200);
        // Silent connections past the limit: they send nothing, read
        // nothing and stay open.
        let silent: Vec<TcpStream> = (0..300).map(|_| connect(addr)).collect();
        let mut probe = connect(addr);
        probe
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        let answer = read_response(&mut probe);
        drop((silent, holder));
        answer
    })
    .await
    .unwrap();
    let refused = probe.expect("the probe got an answer, not a reset");
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"));
    running.stop().await;
}

/// The admin listener serves `/healthz` and `/metrics` with a connection
/// limit of its own: while API clients hold every connection of the main
/// listener, probes and scrapes there are still answered; it serves no
/// other route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_answers_probes_while_the_main_one_is_full() {
    let h = harness(HttpConfig {
        max_connections: 1,
        admin_max_connections: 2,
        api_token: Some("s3cret".into()),
        ..HttpConfig::default()
    })
    .await;
    let (stop, stopped) = oneshot::channel::<()>();
    let main = tc_http::serve(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        std::sync::Arc::clone(&h.app),
        async {
            let _ = stopped.await;
        },
    )
    .unwrap();
    let (stop_admin, admin_stopped) = oneshot::channel::<()>();
    let admin = tc_http::serve_admin(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        h.app,
        async {
            let _ = admin_stopped.await;
        },
    )
    .unwrap();
    let (main_addr, admin_addr) = (main.local_addr(), admin.local_addr());
    let get = |addr: SocketAddr, path: &str, keep: bool| {
        let mut stream = connect(addr);
        let close = if keep { "" } else { "Connection: close\r\n" };
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{close}\r\n").as_bytes())
            .unwrap();
        (read_response(&mut stream).unwrap(), stream)
    };
    tokio::task::spawn_blocking(move || {
        // An API client holds the main listener's only connection.
        let (first, _held) = get(main_addr, "/healthz", true);
        assert_eq!(first.status, 200);
        assert_eq!(get(main_addr, "/healthz", false).0.status, 503);
        // The admin listener answers probes and scrapes, and nothing else;
        // a scrape there needs no credential (the main listener's needs the
        // token: contract.rs).
        let (health, a) = get(admin_addr, "/healthz", true);
        assert_eq!(health.status, 200, "{health:?}");
        let (scrape, b) = get(admin_addr, "/metrics", true);
        assert_eq!(scrape.status, 200);
        assert!(String::from_utf8_lossy(&scrape.body).contains("taskcenter_tasks"));
        // Its own limit (2, both held now).
        let (third, _) = get(admin_addr, "/healthz", false);
        assert_eq!(third.status, 503, "{third:?}");
        assert_eq!(third.header("retry-after"), Some("1"));
        drop((a, b));
        let mut served = None;
        for _ in 0..50 {
            let (reply, _) = get(admin_addr, "/tasks", false);
            if reply.status != 503 {
                served = Some(reply);
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let tasks = served.expect("the admin listener serves again");
        assert_eq!(tasks.status, 404, "{tasks:?}");
        assert_eq!(tasks.error_code().as_deref(), Some("not_found"));
    })
    .await
    .unwrap();
    let _ = stop.send(());
    let _ = stop_admin.send(());
    main.wait().await.unwrap();
    admin.wait().await.unwrap();
}
