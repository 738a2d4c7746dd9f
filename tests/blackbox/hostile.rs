//! Hostile browsers and floods against the release binary: the issue's own
//! reproductions. A page on another site driving the API, DNS rebinding,
//! a flood of unauthenticated logins, password guessing, long-polls from
//! one client, and connections that never read.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use http::Method;
use serde_json::json;

use crate::support;

/// Bounds every blocking read and write of a plain client.
const GUARD: Duration = Duration::from_secs(30);

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(GUARD)).unwrap();
    stream.set_write_timeout(Some(GUARD)).unwrap();
    stream
}

/// Sends `request` on a new connection and reads the whole answer (the
/// requests here ask `Connection: close`); an error if the connection was
/// reset or closed before any answer.
fn exchange(addr: SocketAddr, request: &str) -> std::io::Result<String> {
    let mut stream = connect(addr);
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    if answer.is_empty() {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
}

/// A cross-site form (text/plain, no preflight) cannot pause a destination,
/// and a page on a rebound name cannot even read.
#[tokio::test]
async fn another_site_cannot_drive_the_api_nor_a_rebound_name_reach_it() {
    let s = support::start().await;
    let destination = s.down.destination();
    let pause = format!("/destinations/{destination}/pause");
    let forged = s
        .api
        .send(
            Method::POST,
            &pause,
            &[
                ("origin", "https://evil.example"),
                ("content-type", "text/plain"),
            ],
            "x",
        )
        .await;
    assert_eq!(forged.status, 403, "{forged:?}");
    assert_eq!(forged.error_code(), "cross_origin");
    let view = s.api.get(&format!("/destinations/{destination}")).await;
    assert!(
        view.status == 404 || view.json()["paused"] == false,
        "{view:?}"
    );

    let rebound = s
        .api
        .send(
            Method::GET,
            "/tasks",
            &[("host", "rebind.evil.example")],
            "",
        )
        .await;
    assert_eq!(rebound.status, 421);
    assert_eq!(rebound.error_code(), "misdirected_request");

    // The same request from the server's own origin (its dashboard), or
    // from a client that is not a browser (no Origin), is served.
    let own = format!("http://{}", s.server.addr);
    let paused = s
        .api
        .send(Method::POST, &pause, &[("origin", &own)], "")
        .await;
    assert_eq!(paused.status, 200, "{paused:?}");
    assert_eq!(paused.json()["paused"], true);
    let resumed = s
        .api
        .send(
            Method::POST,
            &format!("/destinations/{destination}/resume"),
            &[],
            "",
        )
        .await;
    assert_eq!(resumed.status, 200);
}

/// `--allowed-host` names the hosts a server answers to besides the
/// loopback names.
#[tokio::test]
async fn allowed_hosts_come_from_the_flag_and_the_environment() {
    for (flag, env) in [
        (Some("tasks.example.com"), None),
        (None, Some("a.example,tasks.example.com")),
    ] {
        let s = support::start_with(|c, _| {
            if let Some(host) = flag {
                c.repeat("--allowed-host", host);
            }
            if let Some(hosts) = env {
                c.env("TC_ALLOWED_HOSTS", hosts);
            }
        })
        .await;
        for (host, status) in [
            ("tasks.example.com:8080", 200),
            ("localhost", 200),
            ("rebind.evil.example", 421),
        ] {
            let reply = s
                .api
                .send(Method::GET, "/healthz", &[("host", host)], "")
                .await;
            assert_eq!(reply.status, status, "{flag:?} {env:?} {host}");
        }
    }
}

/// The flood: 200 unauthenticated logins announcing 1 MiB bodies
/// and sending 6 bytes. An authenticated submit right after is created at
/// once (before, it waited for the body read timeout, 30 s, for a 503).
#[tokio::test]
async fn a_login_flood_does_not_hold_back_an_authenticated_submit() {
    let s = support::start_with(|c, _| {
        c.flag("--api-token", "s3cret");
    })
    .await;
    let addr = s.server.addr;
    let flood = tokio::task::spawn_blocking(move || {
        let mut held = Vec::new();
        for _ in 0..200 {
            let mut stream = connect(addr);
            stream
                .write_all(
                    b"POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                      Content-Type: application/x-www-form-urlencoded\r\n\
                      Content-Length: 1048576\r\n\r\ntoken=",
                )
                .unwrap();
            held.push(stream);
        }
        held
    })
    .await
    .unwrap();
    let api = s.api.with_token("s3cret");
    let reply = api
        .send(
            Method::POST,
            "/tasks",
            &[("content-type", "application/json")],
            json!({"url": s.down.url("/ok"), "idempotency_key": "after-the-flood"}).to_string(),
        )
        .await;
    assert_eq!(reply.status, 201, "{reply:?}");
    drop(flood);
}

/// Behind a trusted proxy that says https, the session cookie is `Secure`;
/// ten wrong tokens from one client (as the proxy forwards it) within a
/// minute, then 429 with Retry-After for that client only.
#[tokio::test]
async fn logins_behind_a_trusted_proxy_get_secure_cookies_and_guessing_is_throttled() {
    let s = support::start_with(|c, _| {
        c.flag("--api-token", "s3cret");
        c.env("TC_TRUSTED_PROXIES", "127.0.0.0/8,::1");
    })
    .await;
    let login = |client: &'static str, token: &'static str| {
        let api = s.api.clone();
        async move {
            api.send(
                Method::POST,
                "/ui/login",
                &[
                    ("content-type", "application/x-www-form-urlencoded"),
                    ("x-forwarded-for", client),
                    ("x-forwarded-proto", "https"),
                ],
                format!("token={token}"),
            )
            .await
        }
    };
    let ok = login("192.0.2.1", "s3cret").await;
    assert_eq!(ok.status, 303);
    let cookie = ok.header("set-cookie").unwrap();
    assert!(cookie.split("; ").any(|p| p == "Secure"), "{cookie}");
    for _ in 0..10 {
        assert_eq!(login("192.0.2.66", "guess").await.status, 401);
    }
    let held = login("192.0.2.66", "s3cret").await;
    assert_eq!(held.status, 429);
    let retry_after: u64 = held.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(
        login("192.0.2.1", "s3cret").await.status,
        303,
        "others are not held"
    );
}

/// One client address may hold `--max-waiters-per-client` long-polls;
/// past that, 429 too_many_waiters.
#[tokio::test]
async fn long_polls_per_client_are_bounded() {
    let s = support::start_with(|c, _| {
        c.flag("--max-waiters-per-client", "2");
    })
    .await;
    let later = s
        .api
        .send(
            Method::POST,
            "/tasks",
            &[("content-type", "application/json")],
            json!({"url": s.down.url("/ok"), "idempotency_key": "later", "delay_ms": 3_600_000})
                .to_string(),
        )
        .await
        .id();
    let path = format!("/tasks/{later}?wait_ms=30000");
    // Each on a client of its own: its own connection.
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let (api, path) = (support::Api::new(s.server.base_url()), path.clone());
            tokio::spawn(async move { api.get(&path).await })
        })
        .collect();
    // Once both wait (the server sees them asynchronously), a third is
    // refused.
    support::poll(
        "both long-polls wait",
        Duration::from_secs(20),
        Duration::from_millis(20),
        async || {
            let metrics = s.api.get("/metrics").await;
            let text = String::from_utf8_lossy(&metrics.body).into_owned();
            if text.lines().any(|l| l == "taskcenter_http_waiters 2") {
                Ok(())
            } else {
                Err(text)
            }
        },
    )
    .await;
    let refused = s.api.get(&path).await;
    assert_eq!(refused.status, 429, "{refused:?}");
    assert_eq!(refused.error_code(), "too_many_waiters");
    assert_eq!(refused.header("retry-after"), Some("1"));
    let cancel = s
        .api
        .send(Method::POST, &format!("/tasks/{later}/cancel"), &[], "")
        .await;
    assert_eq!(cancel.status, 200);
    for w in waiting {
        assert_eq!(w.await.unwrap().json()["state"], "canceled");
    }
}

/// The flood: 1,100 connections that never read nor send. A fresh
/// probe on the main listener is told 503 with Retry-After (never reset),
/// and on the admin listener it is served, with the metrics.
#[tokio::test]
async fn health_is_answered_under_a_connection_flood() {
    let mut s = support::start_with(|c, _| {
        c.flag("--admin-listen", "127.0.0.1:0");
    })
    .await;
    let admin: SocketAddr = s.server.logged("admin_listening").await["addr"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let main = s.server.addr;
    let (on_main, on_admin, scrape, tasks) = tokio::task::spawn_blocking(move || {
        let silent: Vec<TcpStream> = (0..1100).map(|_| connect(main)).collect();
        let probe = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        let on_main = exchange(main, probe);
        let on_admin = exchange(admin, probe);
        let scrape = exchange(
            admin,
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        );
        let tasks = exchange(
            admin,
            "GET /tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        );
        drop(silent);
        (on_main, on_admin, scrape, tasks)
    })
    .await
    .unwrap();
    let on_main = on_main.expect("the main listener answered, not reset");
    assert_eq!(status_of(&on_main), 503, "{on_main}");
    assert!(
        on_main.to_ascii_lowercase().contains("retry-after: 1\r\n"),
        "{on_main}"
    );
    let on_admin = on_admin.unwrap();
    assert_eq!(status_of(&on_admin), 200, "{on_admin}");
    let scrape = scrape.unwrap();
    assert_eq!(status_of(&scrape), 200);
    assert!(scrape.contains("taskcenter_tasks"), "{scrape}");
    assert_eq!(
        status_of(&tasks.unwrap()),
        404,
        "the admin listener serves probes only"
    );
    // And the main listener still serves both once the flood is gone.
    support::poll(
        "the main listener serves /healthz again",
        Duration::from_secs(20),
        Duration::from_millis(100),
        async || {
            let reply = s.api.get("/healthz").await;
            if reply.status == 200 {
                Ok(())
            } else {
                Err(reply.status.to_string())
            }
        },
    )
    .await;
    assert_eq!(s.api.get("/metrics").await.status, 200);
}
