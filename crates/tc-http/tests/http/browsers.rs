//! Hostile browsers: a page on another site driving the API (cross-site
//! requests, refused `403 cross_origin` when they change state) and DNS
//! rebinding (a name the attacker controls pointed at this server, refused
//! `421 misdirected_request` unless it is an allowed host).

use tc_http::HttpConfig;

use crate::support::{Harness, harness};

const LOOPBACK: &str = "127.0.0.1:8080";

/// What a request with `host` to a server listening on `local` answers:
/// `GET /healthz`, so only the host rule can refuse it.
async fn health_via(h: &Harness, local: &str, host: Option<&str>) -> (u16, Option<String>) {
    let headers: Vec<(&str, &str)> = host.map(|h| ("host", h)).into_iter().collect();
    let reply = h
        .call_via(
            Some(("127.0.0.1:40000", local)),
            "GET",
            "/healthz",
            &headers,
            b"",
        )
        .await;
    (reply.status, reply.error_code())
}

#[tokio::test]
async fn only_allowed_hosts_are_served() {
    let default = harness(HttpConfig::default()).await;
    let flagged = harness(HttpConfig {
        allowed_hosts: vec!["tasks.example.com".into(), "[2001:db8::7]".into()],
        ..HttpConfig::default()
    })
    .await;
    let any = harness(HttpConfig {
        allowed_hosts: vec!["*".into()],
        ..HttpConfig::default()
    })
    .await;
    // (server, listen address, Host header, served)
    let cases: &[(&Harness, &str, Option<&str>, bool)] = &[
        // Loopback by default: the loopback names and the listen address,
        // any port, any case.
        (&default, LOOPBACK, Some("127.0.0.1:8080"), true),
        (&default, LOOPBACK, Some("127.0.0.1"), true),
        (&default, LOOPBACK, Some("localhost:3000"), true),
        (&default, LOOPBACK, Some("LocalHost"), true),
        (&default, LOOPBACK, Some("[::1]:8080"), true),
        (&default, LOOPBACK, None, true),
        (&default, "127.0.0.5:8080", Some("127.0.0.5:8080"), true),
        (&default, "[::1]:8080", Some("[::1]"), true),
        (&default, LOOPBACK, Some("rebind.evil.example"), false),
        (&default, LOOPBACK, Some("rebind.evil.example:8080"), false),
        (&default, LOOPBACK, Some("localhost.evil.example"), false),
        (&default, LOOPBACK, Some("127.0.0.2:8080"), false),
        (&default, LOOPBACK, Some("127.0.0.1.evil.example"), false),
        (&default, LOOPBACK, Some("not a host"), false),
        // A wildcard or a public address: any host, unless flags say.
        (&default, "0.0.0.0:8080", Some("rebind.evil.example"), true),
        (&default, "[::]:8080", Some("tasks.example.com"), true),
        (&default, "192.0.2.10:8080", Some("tasks.example.com"), true),
        // Flags: those hosts, and the loopback names.
        (
            &flagged,
            "0.0.0.0:8080",
            Some("tasks.example.com:443"),
            true,
        ),
        (&flagged, "0.0.0.0:8080", Some("TASKS.example.com"), true),
        (&flagged, "0.0.0.0:8080", Some("[2001:db8::7]:8080"), true),
        (&flagged, "0.0.0.0:8080", Some("localhost"), true),
        (&flagged, LOOPBACK, Some("127.0.0.1:8080"), true),
        (&flagged, "0.0.0.0:8080", Some("rebind.evil.example"), false),
        (&flagged, "0.0.0.0:8080", Some("192.0.2.10"), false),
        (&flagged, LOOPBACK, Some("sub.tasks.example.com"), false),
        (&any, LOOPBACK, Some("rebind.evil.example"), true),
    ];
    for &(h, local, host, served) in cases {
        let (status, code) = health_via(h, local, host).await;
        if served {
            assert_eq!(status, 200, "{local} {host:?}: {code:?}");
        } else {
            assert_eq!(
                (status, code.as_deref()),
                (421, Some("misdirected_request")),
                "{local} {host:?}"
            );
        }
    }
    // Without a recorded connection (a caller of `handle`), the listen
    // address is unknown: any host.
    let reply = default
        .call("GET", "/healthz", &[("host", "rebind.evil.example")], b"")
        .await;
    assert_eq!(reply.status, 200);
}

/// (peer and listen address, method, path, headers, refused)
type OriginCase<'a> = (
    (&'a str, &'a str),
    &'a str,
    String,
    Vec<(&'a str, &'a str)>,
    bool,
);

#[tokio::test]
async fn state_changes_from_another_origin_are_403() {
    let h = harness(HttpConfig {
        trusted_proxies: vec!["10.0.0.0/8".parse().unwrap()],
        ..HttpConfig::default()
    })
    .await;
    let pending = h.seed("pending", None).await;
    let direct = ("127.0.0.1:40000", LOOPBACK);
    let proxied = ("10.0.0.1:40000", LOOPBACK);
    let evil = "https://evil.example";
    // (connection, method, path, headers, refused)
    let cases: Vec<OriginCase> = vec![
        // The case: a cross-site form (text/plain, no preflight).
        (
            direct,
            "POST",
            "/destinations/127.0.0.1:9/pause".into(),
            vec![("origin", evil), ("content-type", "text/plain")],
            true,
        ),
        (
            direct,
            "POST",
            "/destinations/127.0.0.1:9/resume".into(),
            vec![("origin", evil)],
            true,
        ),
        (
            direct,
            "POST",
            format!("/tasks/{pending}/cancel"),
            vec![("origin", evil)],
            true,
        ),
        (
            direct,
            "POST",
            format!("/tasks/{pending}/retry"),
            vec![("origin", evil)],
            true,
        ),
        (
            direct,
            "DELETE",
            format!("/tasks/{pending}"),
            vec![("origin", evil)],
            true,
        ),
        (
            direct,
            "PUT",
            "/destinations/127.0.0.1:9".into(),
            vec![("origin", evil)],
            true,
        ),
        (
            direct,
            "POST",
            "/tasks".into(),
            vec![("origin", evil), ("content-type", "application/json")],
            true,
        ),
        (
            direct,
            "POST",
            "/tasks/bulk".into(),
            vec![("origin", evil)],
            true,
        ),
        (
            direct,
            "POST",
            "/ui/login".into(),
            vec![("origin", evil)],
            true,
        ),
        (
            direct,
            "POST",
            "/ui/logout".into(),
            vec![("origin", evil)],
            true,
        ),
        (
            direct,
            "OPTIONS",
            "/tasks".into(),
            vec![("origin", evil)],
            true,
        ),
        // Not this server's origin: another port, scheme or host, `null`.
        (
            direct,
            "POST",
            "/tasks/bulk".into(),
            vec![("origin", "http://127.0.0.1")],
            true,
        ),
        (
            direct,
            "POST",
            "/tasks/bulk".into(),
            vec![("origin", "https://127.0.0.1:8080")],
            true,
        ),
        (
            direct,
            "POST",
            "/tasks/bulk".into(),
            vec![("origin", "http://localhost:8080")],
            true,
        ),
        (
            direct,
            "POST",
            "/tasks/bulk".into(),
            vec![("origin", "null")],
            true,
        ),
        (
            direct,
            "POST",
            "/tasks/bulk".into(),
            vec![("origin", "http://127.0.0.1:8080/x")],
            true,
        ),
        // A proxy's word on https counts only from a trusted proxy.
        (
            direct,
            "POST",
            "/tasks/bulk".into(),
            vec![
                ("origin", "https://127.0.0.1:8080"),
                ("x-forwarded-proto", "https"),
            ],
            true,
        ),
        (
            proxied,
            "POST",
            "/tasks/bulk".into(),
            vec![
                ("origin", "http://127.0.0.1:8080"),
                ("x-forwarded-proto", "https"),
            ],
            true,
        ),
        // Reads are never refused for their origin.
        (
            direct,
            "GET",
            format!("/tasks/{pending}"),
            vec![("origin", evil)],
            false,
        ),
        (
            direct,
            "GET",
            "/healthz".into(),
            vec![("origin", "null")],
            false,
        ),
        // Same origin (the dashboard's own fetches), or none (the CLI, curl).
        (
            direct,
            "POST",
            "/tasks/bulk".into(),
            vec![("origin", "http://127.0.0.1:8080")],
            false,
        ),
        (
            direct,
            "POST",
            "/tasks/bulk".into(),
            vec![("origin", "HTTP://127.0.0.1:8080")],
            false,
        ),
        (direct, "POST", "/tasks/bulk".into(), vec![], false),
        // Behind a trusted proxy: its scheme and forwarded host.
        (
            proxied,
            "POST",
            "/tasks/bulk".into(),
            vec![
                ("origin", "https://127.0.0.1:8080"),
                ("x-forwarded-proto", "https"),
            ],
            false,
        ),
        (
            proxied,
            "POST",
            "/tasks/bulk".into(),
            vec![
                ("origin", "https://tasks.example.com"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-host", "tasks.example.com"),
            ],
            false,
        ),
        (
            proxied,
            "POST",
            "/tasks/bulk".into(),
            vec![
                ("origin", "https://tasks.example.com:443"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-host", "tasks.example.com"),
            ],
            false,
        ),
    ];
    for (connection, method, path, mut headers, refused) in cases {
        headers.push(("host", "127.0.0.1:8080"));
        let reply = h
            .call_via(Some(connection), method, &path, &headers, b"")
            .await;
        let code = reply.error_code();
        if refused && path.starts_with("/ui/") {
            // A person at a browser gets a page that says what to set.
            assert_eq!(reply.status, 403, "{method} {path} {headers:?}");
            assert_eq!(
                reply.header("content-type"),
                Some("text/html; charset=utf-8")
            );
            let page = String::from_utf8_lossy(&reply.body);
            assert!(page.contains("403 cross_origin"), "{page}");
        } else if refused {
            assert_eq!(
                (reply.status, code.as_deref()),
                (403, Some("cross_origin")),
                "{method} {path} {headers:?}"
            );
        } else {
            assert_ne!(
                code.as_deref(),
                Some("cross_origin"),
                "{method} {path} {headers:?}"
            );
            assert!(reply.status < 500, "{method} {path} {headers:?}: {reply:?}");
        }
    }
    // Nothing the refused requests asked for happened.
    let task = h.call("GET", &format!("/tasks/{pending}"), &[], b"").await;
    assert_eq!(task.json()["state"], "pending");
    let destination = h.call("GET", "/destinations/127.0.0.1:9", &[], b"").await;
    assert_eq!(destination.json()["paused"], false, "{destination:?}");
}

/// A request without a Host but with an Origin cannot be shown to be
/// same-origin: refused when it changes state.
#[tokio::test]
async fn an_origin_without_a_host_is_refused() {
    let h = harness(HttpConfig::default()).await;
    let reply = h
        .call_via(
            Some(("127.0.0.1:40000", LOOPBACK)),
            "POST",
            "/tasks/bulk",
            &[("origin", "http://127.0.0.1:8080")],
            b"",
        )
        .await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.error_code().as_deref(), Some("cross_origin"));
}
