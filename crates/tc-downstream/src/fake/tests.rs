//! The fake downstream's own tests: scripted answers, recorded deliveries,
//! and the bytes it puts on a loopback wire.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[test]
fn paths_are_taken_from_urls() {
    for (url, path) in [
        ("http://127.0.0.1:1/a/b?x=1", "/a/b?x=1"),
        ("http://h", "/"),
        ("https://h/", "/"),
    ] {
        assert_eq!(path_of(url), path, "{url}");
    }
}

fn request(path: &str, timeout: Duration) -> Delivery {
    request_with_key(path, timeout, "k")
}

fn request_with_key(path: &str, timeout: Duration, key: &str) -> Delivery {
    Delivery::build(crate::DeliverySpec {
        method: crate::Method::Post,
        url: &format!("http://127.0.0.1:9{path}"),
        body: &Bytes::from_static(b"{}"),
        timeout,
        task_id: "t",
        attempt: 1,
        idempotency_key: key,
        headers: &[],
        trace: crate::TraceHeaders::default(),
        sent_at_s: 0,
        signing_keys: &[],
    })
}

#[tokio::test(start_paused = true)]
async fn the_fake_plays_the_plan_then_the_rule() {
    let script = Script::new();
    script.plan(
        "/x",
        [Step::Reply(Reply::status(503).retry_after("2")), Step::Hang],
    );
    let fake = FakeDownstream::new(Arc::clone(&script));
    let first = fake
        .send(request("/x", Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(
        (first.status, first.retry_after.as_deref()),
        (503, Some("2"))
    );
    assert_eq!(first.content_type.as_deref(), Some("application/json"));
    let started = Instant::now();
    assert_eq!(
        fake.send(request("/x", Duration::from_secs(1))).await,
        Err(DownError::Timeout)
    );
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    let last = fake
        .send(request("/x", Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(
        (last.status, &last.body[..]),
        (200, &b"{\"status\":200}"[..])
    );
    assert_eq!(script.calls("/x").len(), 3);
    assert_eq!(script.abandoned(), 1);
    assert_eq!(script.peak_in_flight(), 1);
    assert_eq!(script.read(|r| (r.count(), r.answered())), (3, 2));
    // The hung call ended at its timeout, a second after it began.
    let (began, ended) = script.read(|r| (r.calls()[1].at, r.ended_at(1)));
    assert_eq!(ended, Some(began + Duration::from_secs(1)));
    assert_eq!(
        script.read(|r| (r.status_of(0), r.status_of(1))),
        (Some(503), None)
    );
}

#[tokio::test(start_paused = true)]
async fn peaks_per_path_replay_starts_and_ends_in_order() {
    // /a: two overlapping calls, then a third that starts at the instant
    // the second ends, while the first still runs; /b: one call alongside.
    let script = Script::new();
    let step = |ms| Step::ReplyAfter(Duration::from_millis(ms), Reply::status(200));
    script.plan("/a", [step(100), step(50), step(10)]);
    script.plan("/b", [step(100)]);
    let fake = Arc::new(FakeDownstream::new(Arc::clone(&script)));
    let call = |path: &'static str| {
        let fake = Arc::clone(&fake);
        tokio::spawn(async move { fake.send(request(path, Duration::from_secs(1))).await })
    };
    let (a1, a2, b) = (call("/a"), call("/a"), call("/b"));
    a2.await.unwrap().unwrap();
    let a3 = call("/a");
    for done in [a1, b, a3] {
        done.await.unwrap().unwrap();
    }
    let peak = |path: &str| script.read(|r| r.peak_in_flight_of(|c| c.path == path));
    assert_eq!((peak("/a"), peak("/b")), (2, 1));
    assert_eq!(script.peak_in_flight(), 3);
    assert_eq!(peak("/none"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_rule_sees_how_often_a_key_called_its_path_and_wire_steps_fail_in_process() {
    // 503 for a key's first call on a path, then 200.
    let script = Script::with_rule(|call, earlier| match (call.path.as_str(), earlier) {
        ("/reset", _) => Step::Reset,
        ("/raw", _) => Step::Raw(Bytes::from_static(b"garbage"), Then::Close),
        (_, 0) => Step::Reply(Reply::status(503)),
        _ => Step::Reply(Reply::with_body(200, "text/plain", "fine")),
    });
    let fake = FakeDownstream::new(Arc::clone(&script));
    let timeout = Duration::from_secs(1);
    let status = |r: Result<DownResponse, DownError>| r.map(|r| r.status);
    assert_eq!(status(fake.send(request("/a", timeout)).await), Ok(503));
    assert_eq!(status(fake.send(request("/a", timeout)).await), Ok(200));
    assert_eq!(status(fake.send(request("/b", timeout)).await), Ok(503));
    let other_key = request_with_key("/a", timeout, "other");
    assert_eq!(status(fake.send(other_key).await), Ok(503));
    assert!(matches!(
        fake.send(request("/reset", timeout)).await,
        Err(DownError::Connect(_))
    ));
    assert!(matches!(
        fake.send(request("/raw", timeout)).await,
        Err(DownError::Other(_))
    ));
    let seen = script.calls("/a");
    assert_eq!(seen[0].header("x-task-attempt"), Some("1"));
    assert_eq!(seen[0].body, Bytes::from_static(b"{}"));
}

#[tokio::test(start_paused = true)]
async fn a_counting_script_keeps_no_calls() {
    let script = Script::counting(|_, _| Step::Reply(Reply::status(200)));
    let fake = FakeDownstream::new(Arc::clone(&script));
    for _ in 0..3 {
        fake.send(request("/n", Duration::from_secs(1)))
            .await
            .unwrap();
    }
    assert_eq!(script.read(|r| (r.count(), r.calls().len())), (3, 0));
}

#[tokio::test(start_paused = true)]
async fn a_gate_holds_calls_until_opened() {
    let script = Script::new();
    script.plan("/g", [Step::Gate(Reply::status(201))]);
    let fake = Arc::new(FakeDownstream::new(Arc::clone(&script)));
    let call = tokio::spawn({
        let fake = Arc::clone(&fake);
        async move { fake.send(request("/g", Duration::from_secs(3600))).await }
    });
    script.wait_calls(1).await;
    script.open_gate();
    assert_eq!(call.await.unwrap().unwrap().status, 201);
}

/// Over loopback, with a plain client: the bytes on the wire.
#[tokio::test]
async fn the_server_answers_over_http_and_sees_a_client_close() {
    let script = Script::new();
    script.plan("/busy", [Step::Reply(Reply::status(429).retry_after("1"))]);
    script.plan("/hang", [Step::Hang]);
    let server = FakeServer::start(Arc::clone(&script)).await.unwrap();
    let mut conn = TcpStream::connect(server.addr()).await.unwrap();
    conn.write_all(
        b"POST /busy HTTP/1.1\r\nhost: x\r\nidempotency-key: k1\r\nx-task-attempt: 2\r\ncontent-length: 2\r\n\r\n{}",
    )
    .await
    .unwrap();
    let mut answer = vec![0; 1024];
    let n = conn.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 429 "), "{answer}");
    assert!(answer.contains("retry-after: 1\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\n{\"status\":429}"), "{answer}");
    let busy = &script.calls("/busy")[0];
    assert_eq!(
        (
            busy.method.as_str(),
            busy.idempotency_key.as_deref(),
            busy.attempt
        ),
        ("POST", Some("k1"), Some(2))
    );
    assert_eq!(busy.connection, Some(0));

    conn.write_all(b"POST /hang HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    script.wait_calls(2).await;
    drop(conn);
    tokio::time::timeout(Duration::from_secs(10), script.wait_closed(0))
        .await
        .expect("the server saw the connection close");
    assert_eq!(script.abandoned(), 1);
    assert_eq!(script.read(|r| r.connections()), 1);
}

/// A second loopback host (Linux routes all of 127.0.0.0/8 to lo): the
/// server listens there and its url names it, so two fakes can be two
/// destinations that differ by host.
#[tokio::test]
async fn the_server_can_listen_on_another_loopback_host() {
    let script = Script::new();
    let ip: std::net::IpAddr = [127, 0, 0, 2].into();
    let server = FakeServer::start_on(Arc::clone(&script), ip).await.unwrap();
    assert_eq!(server.addr().ip(), ip);
    assert_eq!(
        server.url(),
        format!("http://127.0.0.2:{}", server.addr().port())
    );
    let mut conn = TcpStream::connect(server.addr()).await.unwrap();
    conn.write_all(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    let mut answer = vec![0; 1024];
    let n = conn.read(&mut answer).await.unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200 "));
    assert_eq!(script.calls("/x").len(), 1);
}
