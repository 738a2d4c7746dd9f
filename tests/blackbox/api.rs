//! The HTTP contract, row by row, against the real binary.

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support;

/// The fields every task view has.
const VIEW_FIELDS: &[&str] = &[
    "id",
    "state",
    "url",
    "destination",
    "idempotency_key",
    "attempt",
    "max_attempts",
    "http_status",
    "error",
    "result",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "run_at",
    "duration_ms",
    "attempts",
];

const ATTEMPT_FIELDS: &[&str] = &[
    "n",
    "started_at",
    "finished_at",
    "http_status",
    "error",
    "duration_ms",
];

fn assert_fields(v: &Value, fields: &[&str]) {
    let object = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"));
    for field in fields {
        assert!(object.contains_key(*field), "missing {field:?} in {v}");
    }
}

/// RFC 3339 in UTC, as `2025-01-02T03:04:05.678Z` or with `+00:00`.
fn assert_utc_time(v: &Value, what: &str) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v}"));
    let bytes = s.as_bytes();
    assert!(
        s.len() >= 20 && bytes[4] == b'-' && bytes[7] == b'-' && bytes[10] == b'T',
        "{what} is not RFC 3339: {s}"
    );
    assert!(
        s.ends_with('Z') || s.ends_with("+00:00"),
        "{what} is not UTC: {s}"
    );
}

#[tokio::test]
async fn submit_creates_a_task_the_downstream_receives_and_get_shows_it() {
    let mut s = support::start().await;
    let payload = json!({"order": 42, "items": [1, 2], "note": "ünïcode"});
    let reply = s
        .api
        .post_json(
            "/tasks",
            &json!({
                "url": s.down.url("/ok"),
                "json": payload,
                "idempotency_key": "order-42",
                "max_attempts": 2,
                "timeout_ms": 3000,
            }),
        )
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let view = reply.json();
    let id = reply.id();
    assert_eq!(
        reply.header("location"),
        Some(format!("/tasks/{id}").as_str())
    );
    assert_fields(&view, VIEW_FIELDS);
    assert_eq!(view["idempotency_key"], "order-42");
    assert_eq!(view["max_attempts"], 2);
    assert_eq!(view["url"], s.down.url("/ok"));
    assert_utc_time(&view["created_at"], "created_at");

    // The downstream gets the `json` value as its body, with the task's headers.
    let received = s.down.request_with_key("order-42").await;
    let sent: Value = serde_json::from_slice(&received.body).unwrap();
    assert_eq!(sent, payload);
    assert_eq!(received.header("content-type"), Some("application/json"));
    assert_eq!(received.header("x-task-id"), Some(id.as_str()));
    assert_eq!(received.header("x-task-attempt"), Some("1"));

    let done = s.api.wait_terminal(&id).await;
    assert_fields(&done, VIEW_FIELDS);
    assert_eq!(done["state"], "success");
    assert_eq!(done["attempt"], 1);
    assert_eq!(done["http_status"], 200);
    assert_eq!(done["error"], Value::Null);
    let result: Value = serde_json::from_str(done["result"].as_str().unwrap()).unwrap();
    assert_eq!(result, payload, "result is the downstream's body as text");
    for field in ["created_at", "updated_at", "started_at", "finished_at"] {
        assert_utc_time(&done[field], field);
    }
    assert!(done["duration_ms"].is_u64(), "{done}");
    let attempts = done["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1);
    assert_fields(&attempts[0], ATTEMPT_FIELDS);
    assert_eq!(attempts[0]["n"], 1);
    assert_eq!(attempts[0]["http_status"], 200);
    assert_utc_time(&attempts[0]["finished_at"], "attempts[0].finished_at");

    // The result route gives the downstream's bytes and Content-Type back.
    let raw = s.api.get(&format!("/tasks/{id}/result")).await;
    assert_eq!(raw.status, 200);
    assert_eq!(raw.body, received.body);
    assert_eq!(raw.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn json_defaults_to_an_empty_object_and_limits_default_from_flags() {
    let mut s = support::start_with(|c, _| {
        c.flag("--max-attempts", "7")
            .flag("--call-timeout-ms", "1234");
    })
    .await;
    let reply = s
        .api
        .post_json(
            "/tasks",
            &json!({"url": s.down.url("/ok"), "idempotency_key": "no-json"}),
        )
        .await;
    assert_eq!(reply.status, 201);
    assert_eq!(reply.json()["max_attempts"], 7);
    let received = s.down.request_with_key("no-json").await;
    assert_eq!(
        serde_json::from_slice::<Value>(&received.body).unwrap(),
        json!({})
    );
}

#[tokio::test]
async fn resubmitting_a_key_returns_the_task_or_409_for_another_payload() {
    let s = support::start().await;
    let url = s.down.url("/ok");
    let task = json!({"url": url, "json": {"a": 1}, "idempotency_key": "same", "max_attempts": 3});
    let first = s.api.post_json("/tasks", &task).await;
    assert_eq!(first.status, 201);
    let id = first.id();

    let again = s.api.post_json("/tasks", &task).await;
    assert_eq!(again.status, 200, "same key, same payload");
    assert_eq!(again.id(), id);
    s.api.wait_terminal(&id).await;
    let after_done = s.api.post_json("/tasks", &task).await;
    assert_eq!(after_done.status, 200, "in any state");
    assert_eq!(after_done.json()["state"], "success");

    let other = s.down.url("/bytes");
    for (what, changed) in [
        (
            "json",
            json!({"url": url, "json": {"a": 2}, "idempotency_key": "same", "max_attempts": 3}),
        ),
        (
            "url",
            json!({"url": other, "json": {"a": 1}, "idempotency_key": "same", "max_attempts": 3}),
        ),
        (
            "max_attempts",
            json!({"url": url, "json": {"a": 1}, "idempotency_key": "same", "max_attempts": 4}),
        ),
    ] {
        let reply = s.api.post_json("/tasks", &changed).await;
        assert_eq!(reply.status, 409, "{what} changed");
        assert_eq!(reply.error_code(), "idempotency_conflict");
    }
}

#[tokio::test]
async fn invalid_submissions_are_400_naming_the_field() {
    let s = support::start().await;
    let check = async |body: &str, field: Option<&str>| {
        let reply = s
            .api
            .send(
                Method::POST,
                "/tasks",
                &[("content-type", "application/json")],
                body.to_owned(),
            )
            .await;
        assert_eq!(reply.status, 400, "{body}: {:?}", reply.body);
        assert_eq!(reply.error_code(), "invalid_request", "{body}");
        if let Some(field) = field {
            let message = reply.error_message();
            assert!(
                message.contains(field),
                "{body}: {message:?} names no {field}"
            );
        }
    };
    check("{", None).await;
    check("", None).await;
    check("[]", None).await;
    check("\"a string\"", None).await;
    check(r#"{"idempotency_key":"k"}"#, Some("url")).await;
    check(r#"{"url":5,"idempotency_key":"k"}"#, Some("url")).await;
    check(r#"{"url":"/relative","idempotency_key":"k"}"#, Some("url")).await;
    check(r#"{"url":"ftp://h/x","idempotency_key":"k"}"#, Some("url")).await;
    check(r#"{"url":"not a url","idempotency_key":"k"}"#, Some("url")).await;
    check(r#"{"url":"http://h/"}"#, Some("idempotency_key")).await;
    check(
        r#"{"url":"http://h/","idempotency_key":""}"#,
        Some("idempotency_key"),
    )
    .await;
    check(
        r#"{"url":"http://h/","idempotency_key":7}"#,
        Some("idempotency_key"),
    )
    .await;
    for bad in ["0", "101", "-1", "1.5", "\"3\"", "null"] {
        let body = format!(r#"{{"url":"http://h/","idempotency_key":"k","max_attempts":{bad}}}"#);
        check(&body, Some("max_attempts")).await;
    }
    for bad in ["0", "600001", "\"5\"", "-5"] {
        let body = format!(r#"{{"url":"http://h/","idempotency_key":"k","timeout_ms":{bad}}}"#);
        check(&body, Some("timeout_ms")).await;
    }
    check(
        r#"{"url":"http://h/","idempotency_key":"k","surprise":1}"#,
        Some("surprise"),
    )
    .await;
    // Nothing was created by any of them.
    let list = s.api.get("/tasks").await.json();
    assert_eq!(list["tasks"], json!([]));
}

#[tokio::test]
async fn other_content_types_are_415_and_json_with_charset_is_accepted() {
    let s = support::start().await;
    let body = json!({"url": s.down.url("/ok"), "idempotency_key": "ct"}).to_string();
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let headers: Vec<(&str, &str)> = content_type
            .map(|ct| ("content-type", ct))
            .into_iter()
            .collect();
        let reply = s
            .api
            .send(Method::POST, "/tasks", &headers, body.clone())
            .await;
        assert_eq!(reply.status, 415, "{content_type:?}");
        assert_eq!(reply.error_code(), "unsupported_media_type");
    }
    let reply = s
        .api
        .send(
            Method::POST,
            "/tasks",
            &[("content-type", "application/json; charset=utf-8")],
            body,
        )
        .await;
    assert_eq!(reply.status, 201);
}

/// Writes `head` and `body` completely before reading anything, like
/// Python's http.client or curl without `Expect`, then reads the answer.
async fn plain_client(addr: std::net::SocketAddr, head: String, body: Vec<u8>) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let exchange = async {
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&body).await.unwrap();
        let mut answer = Vec::new();
        // The server may close after answering; a reset after the answer
        // arrived would still lose it, which is what this checks.
        let _ = stream.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .expect("exchange within 30 s")
}

#[tokio::test]
async fn bodies_over_the_limit_are_413_even_for_clients_that_write_everything_first() {
    let s = support::start_with(|c, _| {
        c.flag("--max-body-bytes", "4096");
    })
    .await;

    // Exactly at the limit is fine.
    let json_part = json!({"url": s.down.url("/ok"), "idempotency_key": "at-limit"}).to_string();
    let padded = format!("{json_part}{}", " ".repeat(4096 - json_part.len()));
    assert_eq!(padded.len(), 4096);
    let reply = s
        .api
        .send(
            Method::POST,
            "/tasks",
            &[("content-type", "application/json")],
            padded,
        )
        .await;
    assert_eq!(reply.status, 201);

    let over = " ".repeat(4097);
    let reply = s
        .api
        .send(
            Method::POST,
            "/tasks",
            &[("content-type", "application/json")],
            over,
        )
        .await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.error_code(), "payload_too_large");

    // A plain client with a declared length far over the limit.
    let body = vec![b' '; 512 * 1024];
    let head = format!(
        "POST /tasks HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let answer = plain_client(s.server.addr, head, body).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");
    assert!(answer.contains("payload_too_large"), "{answer}");

    // A chunked body with no Content-Length, counted while it is read.
    let mut chunked = Vec::new();
    for _ in 0..64 {
        chunked.extend_from_slice(format!("{:x}\r\n", 4096).as_bytes());
        chunked.extend_from_slice(&[b' '; 4096]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let head = "POST /tasks HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_owned();
    let answer = plain_client(s.server.addr, head, chunked).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");
}

#[tokio::test]
async fn urls_outside_the_allow_list_are_403() {
    let s = support::start_with(|c, down| {
        c.repeat("--allow-url-prefix", "http://hooks.invalid/")
            .repeat("--allow-url-prefix", &down.url("/ok"));
    })
    .await;
    let reply = s
        .api
        .submit(&s.down.url("/status/400"), "outside", json!({}))
        .await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.error_code(), "url_not_allowed");
    let reply = s
        .api
        .submit("http://hooks.invalid.evil/", "lookalike", json!({}))
        .await;
    assert_eq!(reply.status, 403);
    let reply = s.api.submit(&s.down.url("/ok"), "inside", json!({})).await;
    assert_eq!(reply.status, 201);
}

#[tokio::test]
async fn with_a_token_every_tasks_route_needs_it_and_healthz_stays_open() {
    let s = support::start_with(|c, _| {
        c.flag("--api-token", "s3cret");
    })
    .await;
    let authorized = s.api.with_token("s3cret");
    let id = authorized.submit_new(&s.down.url("/ok"), "auth").await;

    let routes: Vec<(Method, String)> = vec![
        (Method::POST, "/tasks".into()),
        (Method::GET, "/tasks".into()),
        (Method::GET, format!("/tasks/{id}")),
        (Method::GET, format!("/tasks/{id}/result")),
        (Method::POST, format!("/tasks/{id}/cancel")),
    ];
    for client in [
        s.api.clone(),
        s.api.with_token("wrong"),
        s.api.with_token("s3cret-and-more"),
    ] {
        client.expect_unauthorized(&routes, "{}").await;
    }
    assert_eq!(authorized.get("/tasks").await.status, 200);
    assert_eq!(authorized.get(&format!("/tasks/{id}")).await.status, 200);
    let health = s.api.get("/healthz").await;
    assert_eq!(health.status, 200);
}

/// With a token, `/metrics` (whose labels name every
/// tenant) takes it on the main listener; the `--admin-listen` address
/// serves it without a credential; `--metrics-public` (or
/// `TC_METRICS_PUBLIC`) keeps it open on the main listener.
#[tokio::test]
async fn with_a_token_metrics_are_the_admin_s_except_on_the_admin_listener() {
    let mut s = support::start_with(|c, _| {
        c.flag("--api-token", "s3cret")
            .flag("--admin-listen", "127.0.0.1:0");
    })
    .await;
    let refused = s.api.get("/metrics").await;
    assert_eq!(refused.status, 401);
    assert_eq!(refused.error_code(), "unauthorized");
    assert_eq!(s.api.with_token("wrong").get("/metrics").await.status, 401);
    let scraped = s.api.with_token("s3cret").get("/metrics").await;
    assert_eq!(scraped.status, 200);
    assert!(String::from_utf8_lossy(&scraped.body).contains("taskcenter_tasks"));
    let admin = s.server.logged("admin_listening").await["addr"]
        .as_str()
        .unwrap()
        .to_owned();
    let on_admin = support::Api::new(format!("http://{admin}"))
        .get("/metrics")
        .await;
    assert_eq!(on_admin.status, 200);
    assert!(String::from_utf8_lossy(&on_admin.body).contains("taskcenter_tasks"));

    for public in [
        support::start_with(|c, _| {
            c.flag("--api-token", "s3cret").switch("--metrics-public");
        })
        .await,
        support::start_with(|c, _| {
            c.flag("--api-token", "s3cret")
                .env("TC_METRICS_PUBLIC", "1");
        })
        .await,
    ] {
        assert_eq!(public.api.get("/metrics").await.status, 200);
        // Only /metrics: the task routes still take the token.
        assert_eq!(public.api.get("/tasks").await.status, 401);
    }
}

#[tokio::test]
async fn unknown_and_malformed_ids_are_404() {
    let s = support::start().await;
    let unknown = "01890a5d-ac96-774b-bcce-b302099a8057";
    for path in [
        format!("/tasks/{unknown}"),
        format!("/tasks/{unknown}/result"),
        "/tasks/not-a-uuid".to_owned(),
        "/tasks/not-a-uuid/result".to_owned(),
    ] {
        let reply = s.api.get(&path).await;
        assert_eq!(reply.status, 404, "{path}");
        assert_eq!(reply.error_code(), "not_found");
    }
    for id in [unknown, "nope"] {
        let reply = s.api.cancel(id).await;
        assert_eq!(reply.status, 404, "cancel {id}");
        assert_eq!(reply.error_code(), "not_found");
    }
}

#[tokio::test]
async fn result_is_lossless_and_404_until_there_is_one() {
    let mut s = support::start().await;
    let bin = s.api.submit_new(&s.down.url("/bytes"), "bytes").await;
    let done = s.api.wait_terminal(&bin).await;
    assert_eq!(done["state"], "success");
    assert_eq!(
        done["result"], "\u{fffd}\u{0}bin",
        "the view's text is lossy"
    );
    let raw = s.api.get(&format!("/tasks/{bin}/result")).await;
    assert_eq!(
        raw.body,
        Bytes::from_static(&[0xff, 0x00, b'b', b'i', b'n'])
    );
    assert_eq!(raw.header("content-type"), Some("application/octet-stream"));

    let held = s.api.submit_new(&s.down.url("/slow"), "held").await;
    s.down.request_with_key("held").await;
    let reply = s.api.get(&format!("/tasks/{held}/result")).await;
    assert_eq!(reply.status, 404, "running: no result yet");
    assert_eq!(reply.error_code(), "not_found");

    let failed = s.api.submit_new(&s.down.url("/status/400"), "failed").await;
    assert_eq!(s.api.wait_terminal(&failed).await["state"], "failed");
    assert_eq!(
        s.api.get(&format!("/tasks/{failed}/result")).await.status,
        404
    );
}

#[tokio::test]
async fn cancel_answers_the_state_and_leaves_terminal_tasks_alone() {
    let mut s = support::start().await;
    let done = s.api.submit_new(&s.down.url("/ok"), "done").await;
    s.api.wait_terminal(&done).await;
    let reply = s.api.cancel(&done).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json(), json!({"id": done, "state": "success"}));

    let held = s.api.submit_new(&s.down.url("/slow"), "to-cancel").await;
    s.down.request_with_key("to-cancel").await;
    for _ in 0..2 {
        let reply = s.api.cancel(&held).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.json(), json!({"id": held, "state": "canceled"}));
    }
    assert_eq!(s.api.task(&held).await["state"], "canceled");
}

#[tokio::test]
async fn list_pages_through_every_task_once_in_creation_order_and_filters_by_state() {
    let s = support::start().await;
    let mut ids = Vec::new();
    for i in 0..7 {
        let path = if i % 3 == 0 { "/status/400" } else { "/ok" };
        ids.push(
            s.api
                .submit_new(&s.down.url(path), &format!("list-{i}"))
                .await,
        );
    }
    for id in &ids {
        s.api.wait_terminal(id).await;
    }

    let mut seen = Vec::new();
    let mut path = "/tasks?limit=3".to_owned();
    for _ in 0..10 {
        let page = s.api.get(&path).await;
        assert_eq!(page.status, 200);
        let page = page.json();
        let tasks = page["tasks"].as_array().unwrap();
        assert!(tasks.len() <= 3);
        for t in tasks {
            assert_fields(t, VIEW_FIELDS);
            seen.push(t["id"].as_str().unwrap().to_owned());
        }
        match page["next"].as_str() {
            Some(next) => path = format!("/tasks?limit=3&after={next}"),
            None => {
                assert!(page["next"].is_null());
                break;
            }
        }
    }
    assert_eq!(seen, ids);

    let failed = s.api.get("/tasks?state=failed").await.json();
    let failed: Vec<&str> = failed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["state"], "failed");
            t["id"].as_str().unwrap()
        })
        .collect();
    assert_eq!(failed, [&ids[0], &ids[3], &ids[6]]);
    assert_eq!(s.api.get("/tasks?limit=500").await.status, 200);

    for bad in [
        "state=bogus",
        "limit=0",
        "limit=501",
        "limit=x",
        "limit=-1",
        "after=not-a-cursor",
    ] {
        let reply = s.api.get(&format!("/tasks?{bad}")).await;
        assert_eq!(reply.status, 400, "{bad}");
        assert_eq!(reply.error_code(), "invalid_request", "{bad}");
    }
}

#[tokio::test]
async fn healthz_and_metrics() {
    let s = support::start().await;
    let health = s.api.get("/healthz").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json(), json!({"status": "ok"}));

    let id = s.api.submit_new(&s.down.url("/ok"), "metered").await;
    s.api.wait_terminal(&id).await;
    let metrics = s.api.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    let content_type = metrics.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("text/plain")
            || content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = String::from_utf8(metrics.body.to_vec()).unwrap();
    for needle in [
        "taskcenter_tasks{state=\"success\"} 1",
        "taskcenter_submits_total{",
        "taskcenter_attempts_total{outcome=\"success\"} 1",
        "taskcenter_downstream_call_duration_seconds_bucket",
        "taskcenter_calls_in_flight",
    ] {
        assert!(text.contains(needle), "/metrics lacks {needle:?}:\n{text}");
    }
}

#[tokio::test]
async fn unknown_paths_are_404_and_wrong_methods_405_with_allow() {
    let s = support::start().await;
    for path in ["/", "/nope", "/tasks/a/b/c", "/healthz/x"] {
        let reply = s.api.get(path).await;
        assert_eq!(reply.status, 404, "{path}");
        assert_eq!(reply.error_code(), "not_found");
    }
    let id = "01890a5d-ac96-774b-bcce-b302099a8057";
    let check = async |method: Method, path: String, allowed: &[&str]| {
        let reply = s.api.send(method.clone(), &path, &[], Bytes::new()).await;
        assert_eq!(reply.status, 405, "{method} {path}");
        assert_eq!(reply.error_code(), "method_not_allowed");
        let allow = reply
            .header("allow")
            .unwrap_or_else(|| panic!("{method} {path}: no Allow"));
        for m in allowed {
            assert!(
                allow.contains(m),
                "{method} {path}: Allow {allow:?} lacks {m}"
            );
        }
    };
    check(Method::DELETE, "/tasks".into(), &["GET", "POST"]).await;
    check(Method::PUT, format!("/tasks/{id}"), &["GET"]).await;
    check(Method::POST, format!("/tasks/{id}/result"), &["GET"]).await;
    check(Method::GET, format!("/tasks/{id}/cancel"), &["POST"]).await;
    check(Method::POST, "/healthz".into(), &["GET"]).await;
    check(Method::POST, "/metrics".into(), &["GET"]).await;
}

#[tokio::test]
async fn malformed_requests_never_get_a_5xx() {
    let s = support::start().await;
    for path in [
        "/tasks/%ZZ",
        "/tasks//cancel",
        "/tasks?limit=%FF",
        "/tasks?state=",
        "/tasks?after=",
        "/tasks/%00",
        "/tasks?limit=99999999999999999999999",
    ] {
        let reply = s.api.get(path).await;
        assert!(
            (400..500).contains(&reply.status),
            "{path}: {}",
            reply.status
        );
    }
    let check_raw = async |request: &[u8]| {
        let answer = plain_client(
            s.server.addr,
            String::from_utf8_lossy(request).into_owned(),
            Vec::new(),
        )
        .await;
        // An answer, if any, is a 4xx; closing without one is fine too.
        if !answer.is_empty() {
            assert!(answer.starts_with("HTTP/1.1 4"), "{request:?}: {answer:?}");
        }
    };
    check_raw(b"GARBAGE\r\n\r\n").await;
    check_raw(b"POST /tasks HTTP/1.1\r\ncontent-length: nope\r\n\r\n").await;
    check_raw(b"POST /tasks HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 3\r\nconnection: close\r\n\r\n\xff\xfe\xfd").await;
    assert_eq!(s.api.get("/healthz").await.status, 200, "still serving");
}

/// A schedule fires on the real server at its next minute, with the
/// firing's key, and survives a restart with its firing record. Takes up
/// to a minute: fire times are whole minutes.
#[tokio::test]
async fn a_schedule_fires_at_its_minute_and_survives_a_restart() {
    let mut s = support::start().await;
    let created = s
        .api
        .post_json(
            "/schedules",
            &json!({"name": "tick", "cron": "* * * * *", "task": {"url": s.down.url("/ok")}}),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.json());
    let first = created.json()["next_runs"][0]
        .as_str()
        .unwrap()
        .replace(".000Z", "Z");
    let api = s.api.clone();
    let fired = support::poll(
        "the first firing",
        Duration::from_secs(75),
        Duration::from_millis(250),
        async || {
            let view = api.get("/schedules/tick").await.json();
            match view["last_task_id"].as_str() {
                Some(id) => Ok((id.to_owned(), view)),
                None => Err(view.to_string()),
            }
        },
    )
    .await;
    let (id, view) = fired;
    let task = s.api.wait_terminal(&id).await;
    assert_eq!(task["idempotency_key"], format!("schedule:tick:{first}"));
    assert_eq!(task["state"], "success");
    s.server.kill9().await;
    s.restart().await;
    let kept = s.api.get("/schedules/tick").await.json();
    assert_eq!(kept["last_task_id"], view["last_task_id"]);
    assert_eq!(kept["last_run_at"], view["last_run_at"]);
}
