//! The HTTP contract, row by row, through `tc_http::handle` (no socket) over
//! a real SQLite store.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use tc_http::HttpConfig;
use tc_model::TaskId;
use tc_model::store::Completion;
use tc_model::store::Tasks;

use crate::support::{Harness, NOW_TEXT, harness};
use tc_testkit::ClaimDue;

const JSON: (&str, &str) = ("content-type", "application/json");

/// Ids of tasks in each state, for the `{…}` placeholders of the rows.
struct Fixture {
    pending: TaskId,
    success: TaskId,
    binary: TaskId,
    failed: TaskId,
    canceled: TaskId,
}

async fn fixture(h: &Harness) -> Fixture {
    // Completed tasks first: seeding claims the oldest due task.
    let success = h
        .seed(
            "success",
            Some(Completion::Success {
                http_status: 200,
                result: br#"{"ok":true}"#.to_vec(),
                content_type: Some("application/json".into()),
            }),
        )
        .await;
    let binary = h
        .seed(
            "binary",
            Some(Completion::Success {
                http_status: 201,
                result: vec![0xff, 0x00, b'a'],
                content_type: None,
            }),
        )
        .await;
    let failed = h
        .seed(
            "failed",
            Some(Completion::Failed {
                reason: "http_400".into(),
                http_status: Some(400),
            }),
        )
        .await;
    let canceled = h.seed("canceled", None).await;
    let reply = h
        .call("POST", &format!("/tasks/{canceled}/cancel"), &[], b"")
        .await;
    assert_eq!(reply.status, 200);
    let pending = h.seed("pending", None).await;
    Fixture {
        pending,
        success,
        binary,
        failed,
        canceled,
    }
}

impl Fixture {
    fn path(&self, template: &str) -> String {
        template
            .replace("{pending}", &self.pending.to_string())
            .replace("{success}", &self.success.to_string())
            .replace("{binary}", &self.binary.to_string())
            .replace("{failed}", &self.failed.to_string())
            .replace("{canceled}", &self.canceled.to_string())
            .replace(
                "{unknown}",
                &TaskId::new(tc_model::Timestamp::from_millis(0), [0xee; 10]).to_string(),
            )
    }
}

/// One request and the status (and error code) it must get.
struct Row {
    method: &'static str,
    /// With `{pending}`-style placeholders for the fixture's tasks.
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    body: String,
    status: u16,
    /// The error code for a 4xx/5xx; `None` for a success.
    code: Option<&'static str>,
    /// Text the error message must contain (the field it names).
    message: &'static str,
}

/// A request without a body that succeeds with `status`.
fn ok(method: &'static str, path: &'static str, status: u16) -> Row {
    Row {
        method,
        path,
        headers: &[],
        body: String::new(),
        status,
        code: None,
        message: "",
    }
}

/// A request without a body refused with `status` and `code`.
fn err(method: &'static str, path: &'static str, status: u16, code: &'static str) -> Row {
    Row {
        code: Some(code),
        ..ok(method, path, status)
    }
}

/// `POST /tasks` with a JSON body, answered with `status`.
fn submit(body: &str, status: u16) -> Row {
    Row {
        headers: &[JSON],
        body: body.to_owned(),
        ..ok("POST", "/tasks", status)
    }
}

/// `POST /tasks` refused with 400 whose message names `field`: a valid
/// submission with `extra` fields appended (a repeated field wins nothing).
fn invalid(extra: &str, field: &'static str) -> Row {
    Row {
        code: Some("invalid_request"),
        message: field,
        ..submit(
            &format!(r#"{{"url":"http://127.0.0.1:9/a","idempotency_key":"k"{extra}}}"#),
            400,
        )
    }
}

/// `POST /tasks` refused with `status` and `code`, the message containing `message`.
fn refused(body: &str, status: u16, code: &'static str, message: &'static str) -> Row {
    Row {
        code: Some(code),
        message,
        ..submit(body, status)
    }
}

async fn check(h: &Harness, f: &Fixture, row: &Row) {
    let path = f.path(row.path);
    let reply = h
        .call(row.method, &path, row.headers, row.body.as_bytes())
        .await;
    let what = format!("{} {path} {:?}", row.method, row.body);
    assert_eq!(reply.status, row.status, "{what}: {reply:?}");
    assert_eq!(reply.error_code().as_deref(), row.code, "{what}: {reply:?}");
    if row.code.is_some() {
        assert_eq!(
            reply.header("content-type"),
            Some("application/json"),
            "{what}"
        );
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            !message.is_empty() && message.contains(row.message),
            "{what}: message {message:?} should contain {:?}",
            row.message
        );
    }
}

/// The payload the fixture's `pending` task was submitted with.
const PENDING: &str =
    r#""url":"http://127.0.0.1:9/hook","idempotency_key":"pending","json":{"key":"pending"}"#;

fn rows() -> Vec<Row> {
    let pending = |extra: &str| format!("{{{PENDING}{extra}}}");
    vec![
        // POST /tasks: created, existing, conflict
        submit(
            r#"{"url":"http://127.0.0.1:9/a","idempotency_key":"new-1"}"#,
            201,
        ),
        submit(&pending(r#","max_attempts":1"#), 200),
        submit(
            r#"{"url":"http://127.0.0.1:9/hook","idempotency_key":"success","json":{"key":"success"},"max_attempts":1}"#,
            200,
        ),
        // The conflict names the fields that differ.
        refused(
            &pending(r#","max_attempts":2"#),
            409,
            "idempotency_conflict",
            "idempotency_key: already used for a task with other work; differs in max_attempts",
        ),
        refused(
            &pending(r#","max_attempts":1,"timeout_ms":6000"#),
            409,
            "idempotency_conflict",
            "differs in timeout_ms",
        ),
        refused(
            r#"{"url":"http://127.0.0.1:9/other","idempotency_key":"pending","json":{"key":"pending"},"max_attempts":1}"#,
            409,
            "idempotency_conflict",
            "differs in url",
        ),
        refused(
            r#"{"url":"http://127.0.0.1:9/other","idempotency_key":"pending","json":{"key":"x"},"max_attempts":1}"#,
            409,
            "idempotency_conflict",
            "differs in url, json",
        ),
        // POST /tasks: malformed
        refused(r#"{"url":"#, 400, "invalid_request", "not valid JSON"),
        refused("", 400, "invalid_request", "body"),
        refused("[1,2]", 400, "invalid_request", "object"),
        refused(r#"{"idempotency_key":"k"}"#, 400, "invalid_request", "url"),
        refused(
            r#"{"url":"http://127.0.0.1:9/a"}"#,
            400,
            "invalid_request",
            "idempotency_key",
        ),
        refused(
            r#"{"url":7,"idempotency_key":"k"}"#,
            400,
            "invalid_request",
            "url",
        ),
        refused(
            r#"{"url":"ftp://h/a","idempotency_key":"k"}"#,
            400,
            "invalid_request",
            "url",
        ),
        refused(
            r#"{"url":"/just/a/path","idempotency_key":"k"}"#,
            400,
            "invalid_request",
            "url",
        ),
        invalid(r#","retries":3"#, "retries"),
        invalid(r#","url":"http://127.0.0.1:9/b""#, "url"),
        invalid(r#","max_attempts":-1"#, "max_attempts"),
        invalid(r#","max_attempts":1.5"#, "max_attempts"),
        invalid(r#","max_attempts":101"#, "max_attempts"),
        invalid(r#","max_attempts":1e400"#, ""),
        invalid(r#","timeout_ms":0"#, "timeout_ms"),
        invalid(r#","timeout_ms":600001"#, "timeout_ms"),
        invalid(r#","timeout_ms":"5""#, "timeout_ms"),
        // POST /tasks: content type
        Row {
            headers: &[("content-type", "text/plain")],
            ..refused(
                r#"{"url":"http://127.0.0.1:9/a","idempotency_key":"k"}"#,
                415,
                "unsupported_media_type",
                "application/json",
            )
        },
        Row {
            headers: &[],
            ..refused(
                r#"{"url":"http://127.0.0.1:9/a","idempotency_key":"k"}"#,
                415,
                "unsupported_media_type",
                "",
            )
        },
        Row {
            headers: &[("content-type", "Application/JSON; charset=utf-8")],
            ..submit(
                r#"{"url":"http://127.0.0.1:9/a","idempotency_key":"new-2"}"#,
                201,
            )
        },
        // GET /tasks/{id}
        ok("GET", "/tasks/{pending}", 200),
        ok("GET", "/tasks/{success}", 200),
        ok("GET", "/tasks/{failed}", 200),
        ok("GET", "/tasks/{canceled}", 200),
        err("GET", "/tasks/{unknown}", 404, "not_found"),
        err("GET", "/tasks/not-a-task-id", 404, "not_found"),
        err("GET", "/tasks/%20", 404, "not_found"),
        // GET /tasks/{id}/result
        ok("GET", "/tasks/{success}/result", 200),
        ok("GET", "/tasks/{binary}/result", 200),
        err("GET", "/tasks/{pending}/result", 404, "not_found"),
        err("GET", "/tasks/{failed}/result", 404, "not_found"),
        err("GET", "/tasks/{unknown}/result", 404, "not_found"),
        err("GET", "/tasks/xyz/result", 404, "not_found"),
        // POST /tasks/{id}/cancel
        ok("POST", "/tasks/{success}/cancel", 200),
        ok("POST", "/tasks/{canceled}/cancel", 200),
        err("POST", "/tasks/{unknown}/cancel", 404, "not_found"),
        err("POST", "/tasks/xyz/cancel", 404, "not_found"),
        // GET /tasks
        ok("GET", "/tasks", 200),
        ok("GET", "/tasks?state=failed&limit=500", 200),
        ok("GET", "/tasks?limit=1&after=0", 200),
        err("GET", "/tasks?state=done", 400, "invalid_request"),
        err("GET", "/tasks?limit=0", 400, "invalid_request"),
        err("GET", "/tasks?limit=501", 400, "invalid_request"),
        err("GET", "/tasks?limit=ten", 400, "invalid_request"),
        err("GET", "/tasks?after=not-a-cursor", 400, "invalid_request"),
        err("GET", "/tasks?sort=id", 400, "invalid_request"),
        // health and metrics
        ok("GET", "/healthz", 200),
        ok("GET", "/metrics", 200),
        // routing
        err("GET", "/", 404, "not_found"),
        err("GET", "/task", 404, "not_found"),
        err("GET", "/tasks/", 404, "not_found"),
        err("GET", "/tasks/{pending}/cancel/now", 404, "not_found"),
        err("DELETE", "/tasks", 405, "method_not_allowed"),
        err("PUT", "/tasks/{pending}", 405, "method_not_allowed"),
        err("GET", "/tasks/{pending}/cancel", 405, "method_not_allowed"),
        err("POST", "/tasks/{pending}/result", 405, "method_not_allowed"),
        err("POST", "/healthz", 405, "method_not_allowed"),
        err("HEAD", "/metrics", 405, "method_not_allowed"),
        // POST /tasks/batch: the envelope (items are checked one by one)
        with_body(
            "POST",
            "/tasks/batch",
            r#"{"tasks":[]}"#,
            400,
            Some("invalid_request"),
            "tasks",
        ),
        with_body(
            "POST",
            "/tasks/batch",
            r#"{"tasks":{}}"#,
            400,
            Some("invalid_request"),
            "tasks",
        ),
        with_body(
            "POST",
            "/tasks/batch",
            r#"{"task":[]}"#,
            400,
            Some("invalid_request"),
            "task",
        ),
        with_body(
            "POST",
            "/tasks/batch",
            "[]",
            400,
            Some("invalid_request"),
            "body",
        ),
        with_body(
            "POST",
            "/tasks/batch",
            "{",
            400,
            Some("invalid_request"),
            "not valid JSON",
        ),
        with_body(
            "POST",
            "/tasks/batch",
            &format!(r#"{{"tasks":[{}]}}"#, vec!["{}"; 1001].join(",")),
            400,
            Some("invalid_request"),
            "1001",
        ),
        Row {
            headers: &[],
            ..with_body(
                "POST",
                "/tasks/batch",
                r#"{"tasks":[{}]}"#,
                415,
                Some("unsupported_media_type"),
                "",
            )
        },
        with_body("POST", "/tasks/batch", r#"{"tasks":[{}]}"#, 200, None, ""),
        err("GET", "/tasks/batch", 404, "not_found"),
        // GET /tasks filters
        ok("GET", "/tasks?state=failed&error=http_400", 200),
        ok("GET", "/tasks?destination=127.0.0.1:9&limit=5", 200),
        ok(
            "GET",
            "/tasks?created_after=2020-01-01T00:00:00Z&created_before=2100-01-01T00:00:00.5Z",
            200,
        ),
        ok("GET", "/tasks?idempotency_key=pending", 200),
        Row {
            message: "destination",
            ..err(
                "GET",
                "/tasks?destination=example.com",
                400,
                "invalid_request",
            )
        },
        Row {
            message: "created_after",
            ..err(
                "GET",
                "/tasks?created_after=yesterday",
                400,
                "invalid_request",
            )
        },
        Row {
            message: "created_before",
            ..err(
                "GET",
                "/tasks?created_before=1700000000",
                400,
                "invalid_request",
            )
        },
        Row {
            message: "error",
            ..err("GET", "/tasks?error=", 400, "invalid_request")
        },
        Row {
            message: "idempotency_key",
            ..err(
                "GET",
                "/tasks?idempotency_key=a&idempotency_key=b",
                400,
                "invalid_request",
            )
        },
        // POST /tasks/bulk (dry runs: they change nothing)
        with_body(
            "POST",
            "/tasks/bulk",
            r#"{"action":"retry","filter":{"state":"failed"},"dry_run":true}"#,
            200,
            None,
            "",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            r#"{"action":"delete","filter":{},"dry_run":true}"#,
            200,
            None,
            "",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            r#"{"action":"archive","filter":{}}"#,
            400,
            Some("invalid_request"),
            "action",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            r#"{"filter":{}}"#,
            400,
            Some("invalid_request"),
            "action",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            r#"{"action":"cancel"}"#,
            400,
            Some("invalid_request"),
            "filter",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            r#"{"action":"cancel","filter":[]}"#,
            400,
            Some("invalid_request"),
            "filter",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            r#"{"action":"cancel","filter":{"colour":"red"}}"#,
            400,
            Some("invalid_request"),
            "filter.colour",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            r#"{"action":"cancel","filter":{"state":"done"}}"#,
            400,
            Some("invalid_request"),
            "filter.state",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            r#"{"action":"cancel","filter":{"limit":"5"}}"#,
            400,
            Some("invalid_request"),
            "filter.limit",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            r#"{"action":"cancel","filter":{"state":1}}"#,
            400,
            Some("invalid_request"),
            "filter.state",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            r#"{"action":"cancel","filter":{},"dry_run":"yes"}"#,
            400,
            Some("invalid_request"),
            "dry_run",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            r#"{"action":"cancel","filter":{},"force":true}"#,
            400,
            Some("invalid_request"),
            "force",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            "[]",
            400,
            Some("invalid_request"),
            "body",
        ),
        with_body(
            "POST",
            "/tasks/bulk",
            "{",
            400,
            Some("invalid_request"),
            "JSON",
        ),
        Row {
            headers: &[],
            ..with_body(
                "POST",
                "/tasks/bulk",
                r#"{"action":"cancel","filter":{}}"#,
                415,
                Some("unsupported_media_type"),
                "",
            )
        },
        err("GET", "/tasks/bulk", 404, "not_found"),
        // POST /tasks/{id}/retry (these change the fixture: kept last)
        err("POST", "/tasks/{pending}/retry", 409, "task_not_retryable"),
        err("POST", "/tasks/{success}/retry", 409, "task_not_retryable"),
        err("POST", "/tasks/{unknown}/retry", 404, "not_found"),
        err("POST", "/tasks/xyz/retry", 404, "not_found"),
        with_body(
            "POST",
            "/tasks/{failed}/retry",
            r#"{"delay_ms":"soon"}"#,
            400,
            Some("invalid_request"),
            "delay_ms",
        ),
        with_body(
            "POST",
            "/tasks/{failed}/retry",
            r#"{"delay_ms":-1}"#,
            400,
            Some("invalid_request"),
            "delay_ms",
        ),
        with_body(
            "POST",
            "/tasks/{failed}/retry",
            r#"{"delay_ms":31536000001}"#,
            400,
            Some("invalid_request"),
            "delay_ms",
        ),
        with_body(
            "POST",
            "/tasks/{failed}/retry",
            r#"{"later":1}"#,
            400,
            Some("invalid_request"),
            "later",
        ),
        with_body(
            "POST",
            "/tasks/{failed}/retry",
            "[1]",
            400,
            Some("invalid_request"),
            "object",
        ),
        Row {
            headers: &[("content-type", "text/plain")],
            ..with_body(
                "POST",
                "/tasks/{failed}/retry",
                r#"{"delay_ms":1}"#,
                415,
                Some("unsupported_media_type"),
                "",
            )
        },
        with_body(
            "POST",
            "/tasks/{failed}/retry",
            r#"{"delay_ms":60000}"#,
            200,
            None,
            "",
        ),
        err("POST", "/tasks/{failed}/retry", 409, "task_not_retryable"),
        ok("POST", "/tasks/{canceled}/retry", 200),
        // DELETE /tasks/{id}
        err("DELETE", "/tasks/{pending}", 409, "task_not_terminal"),
        err("DELETE", "/tasks/{failed}", 409, "task_not_terminal"),
        err("DELETE", "/tasks/{unknown}", 404, "not_found"),
        ok("DELETE", "/tasks/{success}", 204),
        err("GET", "/tasks/{success}", 404, "not_found"),
        err("DELETE", "/tasks/{success}", 404, "not_found"),
    ]
}

/// A request with a JSON body answered with `status` (and `code`).
fn with_body(
    method: &'static str,
    path: &'static str,
    body: &str,
    status: u16,
    code: Option<&'static str>,
    message: &'static str,
) -> Row {
    Row {
        headers: &[JSON],
        body: body.to_owned(),
        code,
        message,
        ..ok(method, path, status)
    }
}

#[tokio::test]
async fn every_contract_row() {
    let h = harness(HttpConfig::default()).await;
    let f = fixture(&h).await;
    for row in rows().iter().chain(&outbound_rows()) {
        check(&h, &f, row).await;
    }
}

/// The names a task or a destination may not give: the HTTP client's and
/// taskcenter's own.
const REFUSED_HEADERS: [&str; 19] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "proxy-authorization",
    "proxy-connection",
    "idempotency-key",
    "x-task-id",
    "x-task-attempt",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "user-agent",
    "content-type",
];

/// `method`, `headers` on submit and `headers`, `signing_secrets` on a
/// destination: accepted forms, and a row for each refused header and
/// each kind of malformed value, named in the message.
fn outbound_rows() -> Vec<Row> {
    let leak = |s: String| -> &'static str { s.leak() };
    let dest = |body: String, status: u16, code: Option<&'static str>, message: &'static str| {
        with_body(
            "PUT",
            "/destinations/127.0.0.1:9",
            &body,
            status,
            code,
            message,
        )
    };
    let dest_refused =
        |body: String, message: &'static str| dest(body, 400, Some("invalid_request"), message);
    let secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let mut rows = vec![
        submit(
            r#"{"url":"http://127.0.0.1:9/a","idempotency_key":"put-1","method":"PUT","headers":{"Authorization":"Bearer t","X-Tenant":"acme"},"json":{"a":1}}"#,
            201,
        ),
        submit(
            r#"{"url":"http://127.0.0.1:9/a","idempotency_key":"get-1","method":"GET"}"#,
            201,
        ),
        submit(
            r#"{"url":"http://127.0.0.1:9/a","idempotency_key":"del-1","method":"DELETE","headers":null}"#,
            201,
        ),
        // The idempotency payload holds the method and the headers.
        refused(
            &format!(r#"{{{PENDING},"max_attempts":1,"method":"PUT"}}"#),
            409,
            "idempotency_conflict",
            "differs in method",
        ),
        refused(
            &format!(r#"{{{PENDING},"max_attempts":1,"headers":{{"x-a":"1"}}}}"#),
            409,
            "idempotency_conflict",
            "differs in headers",
        ),
        submit(
            &format!(r#"{{{PENDING},"max_attempts":1,"method":"POST","headers":{{}}}}"#),
            200,
        ),
        // method
        invalid(r#","method":"HEAD""#, "method"),
        invalid(r#","method":"post""#, "method"),
        invalid(r#","method":1"#, "method"),
        invalid(r#","method":null"#, "method"),
        invalid(r#","method":"GET","json":{}"#, "json"),
        invalid(r#","method":"GET","json":null"#, "json"),
        // headers: malformed values
        invalid(r#","headers":"x-a: 1""#, "headers"),
        invalid(r#","headers":["x-a"]"#, "headers"),
        invalid(r#","headers":{"X-A":1}"#, "headers.x-a"),
        invalid(r#","headers":{"x-a":null}"#, "headers.x-a"),
        invalid(r#","headers":{"x-a":"1\r\nx-b: 2"}"#, "headers.x-a"),
        invalid(r#","headers":{"x-a":"1\nx"}"#, "headers.x-a"),
        invalid(r#","headers":{"x-a":"1\u0000"}"#, "headers.x-a"),
        invalid(r#","headers":{"x-a":"caf\u00e9"}"#, "headers.x-a"),
        invalid(r#","headers":{"x a":"1"}"#, "headers"),
        invalid(r#","headers":{"":"1"}"#, "headers"),
        invalid(r#","headers":{"X-A":"1","x-a":"2"}"#, "headers.x-a"),
        invalid(
            leak(format!(r#","headers":{{"x-a":"{}"}}"#, "v".repeat(8190))),
            "headers",
        ),
        invalid(
            leak(format!(
                r#","headers":{{{}}}"#,
                (0..33)
                    .map(|i| format!(r#""x-{i}":"v""#))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
            "headers",
        ),
        // destinations: headers and secrets, accepted and cleared
        dest(
            format!(
                r#"{{"headers":{{"Authorization":"Bearer t"}},"signing_secrets":["{secret}","{secret}"]}}"#
            ),
            200,
            None,
            "",
        ),
        dest(
            r#"{"headers":null,"signing_secrets":null}"#.into(),
            200,
            None,
            "",
        ),
        dest(
            r#"{"headers":{},"signing_secrets":[]}"#.into(),
            200,
            None,
            "",
        ),
        // destinations: malformed
        dest_refused(r#"{"headers":"x"}"#.into(), "headers"),
        dest_refused(r#"{"headers":{"x-a":1}}"#.into(), "headers.x-a"),
        dest_refused(r#"{"headers":{"x-a":"1\r\n"}}"#.into(), "headers.x-a"),
        dest_refused(r#"{"headers":{"X-A":"1","x-a":"1"}}"#.into(), "headers.x-a"),
        dest_refused(
            format!(r#"{{"signing_secrets":["{secret}","{secret}","{secret}"]}}"#),
            "signing_secrets",
        ),
        dest_refused(
            r#"{"signing_secrets":"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"}"#.into(),
            "signing_secrets",
        ),
        dest_refused(r#"{"signing_secrets":[1]}"#.into(), "signing_secrets"),
        dest_refused(
            r#"{"signing_secrets":["C2FVsBQIhrscChlQIMV+b5sSYspob7oD"]}"#.into(),
            "signing_secrets",
        ),
        dest_refused(
            r#"{"signing_secrets":["whsec_c2hvcnQ="]}"#.into(),
            "signing_secrets",
        ),
        dest_refused(
            r#"{"signing_secrets":["whsec_not base64!"]}"#.into(),
            "signing_secrets",
        ),
        dest_refused(
            leak(format!(
                r#"{{"signing_secrets":["whsec_{}"]}}"#,
                "A".repeat(88 + 4)
            ))
            .to_owned(),
            "signing_secrets",
        ),
    ];
    for name in REFUSED_HEADERS {
        let field = leak(format!("headers.{name}"));
        rows.push(invalid(
            leak(format!(r#","headers":{{"{name}":"v"}}"#)),
            field,
        ));
        let upper = name.to_ascii_uppercase();
        rows.push(invalid(
            leak(format!(r#","headers":{{"{upper}":"v"}}"#)),
            field,
        ));
        rows.push(dest_refused(
            format!(r#"{{"headers":{{"{name}":"v"}}}}"#),
            field,
        ));
    }
    rows
}

#[tokio::test]
async fn a_batch_answers_each_task_in_order_and_fails_bad_ones_alone() {
    let h = harness(HttpConfig {
        allow_url_prefixes: vec!["http://127.0.0.1:9/".into()],
        ..HttpConfig::default()
    })
    .await;
    let first = h
        .submit(&json!({"url": "http://127.0.0.1:9/a", "idempotency_key": "seen"}))
        .await;
    assert_eq!(first.status, 201);
    let body = json!({"tasks": [
        {"url": "http://127.0.0.1:9/a", "idempotency_key": "b1"},
        {"url": "http://127.0.0.1:9/a", "idempotency_key": "seen"},
        {"url": "http://127.0.0.1:9/a", "idempotency_key": "seen", "max_attempts": 9},
        {"url": "http://127.0.0.1:9/a"},
        {"url": "http://elsewhere.test/a", "idempotency_key": "b2"},
        {"url": "http://127.0.0.1:9/a", "idempotency_key": "b3", "delay_ms": 1000},
    ]});
    let reply = h
        .call(
            "POST",
            "/tasks/batch",
            &[("content-type", "application/json")],
            body.to_string().as_bytes(),
        )
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let results = reply.json()["results"].as_array().unwrap().clone();
    let statuses: Vec<u64> = results
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [201, 200, 409, 400, 403, 201]);
    assert_eq!(results[1]["task"]["id"], first.json()["id"]);
    assert_eq!(results[2]["error"]["code"], "idempotency_conflict");
    assert!(
        results[3]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("idempotency_key")
    );
    assert_eq!(results[4]["error"]["code"], "url_not_allowed");
    assert!(results[5]["task"]["run_at"].is_string(), "{}", results[5]);
    for created in [&results[0], &results[5]] {
        let id = created["task"]["id"].as_str().unwrap();
        let got = h.call("GET", &format!("/tasks/{id}"), &[], b"").await;
        assert_eq!(got.status, 200, "a created task is stored");
    }
    assert_eq!(
        h.wakes(),
        2,
        "one wake for the single submit, one for the batch"
    );
}

#[tokio::test]
async fn a_bulk_action_answers_what_it_matched_and_applied() {
    let h = harness(HttpConfig::default()).await;
    let f = fixture(&h).await;
    let bulk = |body: &'static str| h.call("POST", "/tasks/bulk", &[JSON], body.as_bytes());
    let dry = bulk(r#"{"action":"delete","filter":{},"dry_run":true}"#).await;
    assert_eq!(dry.status, 200, "{dry:?}");
    let all = [f.success, f.binary, f.failed, f.canceled, f.pending];
    assert_eq!(
        dry.json(),
        json!({"matched": 5, "applied": 0, "refused_quota": 0, "refused_url": 0, "sample": all.map(|id| id.to_string())})
    );
    let retried =
        bulk(r#"{"action":"retry","filter":{"state":"failed","error":"http_400"}}"#).await;
    assert_eq!(
        retried.json(),
        json!({"matched": 1, "applied": 1, "refused_quota": 0, "refused_url": 0, "sample": [f.failed.to_string()]})
    );
    let view = h
        .call("GET", &format!("/tasks/{}", f.failed), &[], b"")
        .await;
    assert_eq!(view.json()["state"], "pending");
    // Retry over everything applies to the canceled task alone; the worker
    // is woken for it.
    let wakes = h.wakes.load(std::sync::atomic::Ordering::SeqCst);
    let again = bulk(r#"{"action":"retry","filter":{}}"#).await;
    assert_eq!(again.json()["matched"], 5);
    assert_eq!(again.json()["applied"], 1);
    assert!(h.wakes.load(std::sync::atomic::Ordering::SeqCst) > wakes);
    // Cancel of a running task names it to the worker, to drop its call.
    let running = h.seed("running-for-bulk", None).await;
    let claimed = h
        .store
        .claim_due(
            10,
            crate::support::NOW,
            std::time::Duration::from_secs(30),
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .unwrap();
    assert!(claimed.iter().any(|t| t.id == running), "{claimed:?}");
    let canceled = bulk(r#"{"action":"cancel","filter":{"state":"running"}}"#).await;
    assert_eq!(canceled.json()["applied"], claimed.len());
    let interrupted = h.interrupted.lock().unwrap().clone();
    assert!(interrupted.contains(&running), "{interrupted:?}");
    let deleted = bulk(r#"{"action":"delete","filter":{"state":"success"}}"#).await;
    assert_eq!(deleted.json()["applied"], 2);
    let gone = h
        .call("GET", &format!("/tasks/{}", f.success), &[], b"")
        .await;
    assert_eq!(gone.status, 404);
}

#[tokio::test]
async fn list_filters_find_the_matching_tasks() {
    let h = harness(HttpConfig::default()).await;
    let f = fixture(&h).await;
    let ids = |path: &'static str| {
        let h = &h;
        async move {
            let reply = h.call("GET", path, &[], b"").await;
            assert_eq!(reply.status, 200, "{path}: {reply:?}");
            reply.json()["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(ids("/tasks?error=http_400").await, [f.failed.to_string()]);
    assert_eq!(
        ids("/tasks?idempotency_key=canceled").await,
        [f.canceled.to_string()]
    );
    assert_eq!(
        ids("/tasks?idempotency_key=canceled&state=failed")
            .await
            .len(),
        0
    );
    assert_eq!(
        ids("/tasks?created_before=2000-01-01T00:00:00Z")
            .await
            .len(),
        0
    );
    assert_eq!(
        ids("/tasks?created_after=2000-01-01T00:00:00Z").await.len(),
        5
    );
}

#[tokio::test]
async fn wrong_method_names_the_allowed_ones() {
    let h = harness(HttpConfig::default()).await;
    let cases = [
        ("DELETE", "/tasks", "GET, POST"),
        ("PATCH", "/tasks/x", "DELETE, GET"),
        ("GET", "/tasks/x/retry", "POST"),
        ("GET", "/tasks/x/cancel", "POST"),
        ("PUT", "/tasks/x/result", "GET"),
        ("POST", "/metrics", "GET"),
    ];
    for (method, path, allow) in cases {
        let reply = h.call(method, path, &[], b"").await;
        assert_eq!(reply.status, 405, "{method} {path}");
        assert_eq!(reply.header("allow"), Some(allow), "{method} {path}");
    }
}

#[tokio::test]
async fn submit_creates_once_and_wakes_the_worker_once() {
    let h = harness(HttpConfig::default()).await;
    let body =
        json!({"url": "http://127.0.0.1:9/a", "idempotency_key": "order-1", "json": {"n": 1}});
    let first = h.submit(&body).await;
    assert_eq!(first.status, 201);
    let id = first.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        first.header("location"),
        Some(format!("/tasks/{id}").as_str())
    );
    assert_eq!(h.wakes(), 1);

    let again = h.submit(&body).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["id"], id.as_str(), "the same task");
    assert_eq!(again.header("location"), None);
    assert_eq!(h.wakes(), 1, "an existing task does not wake the worker");

    let other =
        json!({"url": "http://127.0.0.1:9/a", "idempotency_key": "order-1", "json": {"n": 2}});
    assert_eq!(h.submit(&other).await.status, 409);
    assert_eq!(h.wakes(), 1);
}

#[tokio::test]
async fn a_resubmit_may_order_keys_and_space_them_otherwise() {
    let h = harness(HttpConfig::default()).await;
    let ct = [("content-type", "application/json")];
    let submit = |json: &'static str| {
        let body =
            format!(r#"{{"url":"http://127.0.0.1:9/a","idempotency_key":"k","json":{json}}}"#);
        let h = &h;
        async move { h.call("POST", "/tasks", &ct, body.as_bytes()).await }
    };
    let first = submit(r#"{"b":1,"a":{"y":[1,2],"x":"\u00e9"}}"#).await;
    assert_eq!(first.status, 201, "{first:?}");
    let same = submit(r#"{ "a" : { "x" : "\u00e9", "y" : [ 1, 2 ] }, "b" : 1 }"#).await;
    assert_eq!(same.status, 200, "{same:?}");
    assert_eq!(same.json()["id"], first.json()["id"]);
    for other in [
        r#"{"b":1,"a":{"y":[2,1],"x":"\u00e9"}}"#,
        r#"{"b":1.0,"a":{"y":[1,2],"x":"\u00e9"}}"#,
    ] {
        assert_eq!(submit(other).await.status, 409, "{other}");
    }
}

#[tokio::test]
async fn defaults_come_from_the_config() {
    let config = HttpConfig {
        default_max_attempts: 9,
        ..HttpConfig::default()
    };
    let h = harness(config).await;
    let reply = h
        .submit(&json!({"url": "http://127.0.0.1:9/a", "idempotency_key": "d"}))
        .await;
    assert_eq!(reply.status, 201);
    assert_eq!(reply.json()["max_attempts"], 9);
}

const VIEW_FIELDS: &[&str] = &[
    "id",
    "state",
    "url",
    "method",
    "headers",
    "destination",
    "idempotency_key",
    "tenant",
    "topic",
    "event_id",
    "subscription",
    "trace_id",
    "attempt",
    "max_attempts",
    "priority",
    "flow_key",
    "http_status",
    "error",
    "result",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "run_at",
    "duration_ms",
    "callback_url",
    "callback_on",
    "callback_of",
    "callback_task_id",
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

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

#[tokio::test]
async fn task_views_have_exactly_the_documented_fields() {
    let h = harness(HttpConfig::default()).await;
    let f = fixture(&h).await;

    let pending = h
        .call("GET", &f.path("/tasks/{pending}"), &[], b"")
        .await
        .json();
    assert_eq!(keys(&pending), VIEW_FIELDS.iter().copied().collect());
    // Submitted without a traceparent: a new trace.
    let trace_id = pending["trace_id"].as_str().unwrap();
    assert!(
        trace_id.len() == 32
            && trace_id
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "{trace_id}"
    );
    let expected = json!({
        "id": f.pending.to_string(),
        "state": "pending",
        "url": "http://127.0.0.1:9/hook",
        "method": "POST",
        "headers": {},
        "destination": "127.0.0.1:9",
        "idempotency_key": "pending",
        "tenant": null,
        "topic": null,
        "event_id": null,
        "subscription": null,
        "trace_id": trace_id,
        "attempt": 0,
        "max_attempts": 1,
        "priority": 0,
        "flow_key": null,
        "http_status": null,
        "error": null,
        "result": null,
        "created_at": NOW_TEXT,
        "updated_at": NOW_TEXT,
        "started_at": null,
        "finished_at": null,
        "run_at": null,
        "duration_ms": null,
        "callback_url": null,
        "callback_on": null,
        "callback_of": null,
        "callback_task_id": null,
        "attempts": [],
    });
    assert_eq!(pending, expected);

    let success = h
        .call("GET", &f.path("/tasks/{success}"), &[], b"")
        .await
        .json();
    assert_eq!(success["state"], "success");
    assert_eq!(success["attempt"], 1);
    assert_eq!(success["http_status"], 200);
    assert_eq!(success["result"], r#"{"ok":true}"#, "the body as text");
    assert_eq!(success["started_at"], "2026-01-02T03:04:06.678Z");
    assert_eq!(success["finished_at"], "2026-01-02T03:04:06.928Z");
    assert_eq!(success["duration_ms"], 250);
    let attempts = success["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(keys(&attempts[0]), ATTEMPT_FIELDS.iter().copied().collect());
    assert_eq!(
        attempts[0],
        json!({
            "n": 1,
            "started_at": "2026-01-02T03:04:06.678Z",
            "finished_at": "2026-01-02T03:04:06.928Z",
            "http_status": 200,
            "error": null,
            "duration_ms": 250,
        })
    );

    let binary = h
        .call("GET", &f.path("/tasks/{binary}"), &[], b"")
        .await
        .json();
    assert_eq!(binary["result"], "\u{fffd}\u{0}a", "lossy UTF-8");

    let failed = h
        .call("GET", &f.path("/tasks/{failed}"), &[], b"")
        .await
        .json();
    assert_eq!(failed["state"], "failed");
    assert_eq!(failed["error"], "http_400");
    assert_eq!(failed["http_status"], 400);
    assert_eq!(failed["result"], Value::Null);
    assert_eq!(failed["attempts"][0]["error"], "http_400");
}

#[tokio::test]
async fn result_is_the_downstream_body_byte_for_byte() {
    let h = harness(HttpConfig::default()).await;
    let f = fixture(&h).await;

    let reply = h
        .call("GET", &f.path("/tasks/{success}/result"), &[], b"")
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(&reply.body[..], br#"{"ok":true}"#);
    // A text/html result must not run on the API's origin.
    assert_eq!(reply.header("content-security-policy"), Some("sandbox"));
    assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));

    let reply = h
        .call("GET", &f.path("/tasks/{binary}/result"), &[], b"")
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(&reply.body[..], &[0xff, 0x00, b'a']);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_get_answers_when_the_task_ends_or_at_its_deadline() {
    let h = harness(HttpConfig::default()).await;
    let f = fixture(&h).await;
    // Terminal already: at once.
    let started = tokio::time::Instant::now();
    let done = h
        .call("GET", &f.path("/tasks/{success}?wait_ms=60000"), &[], b"")
        .await;
    assert_eq!(
        (done.status, done.json()["state"].clone()),
        (200, json!("success"))
    );
    assert_eq!(started.elapsed(), std::time::Duration::ZERO);

    // Pending, nothing happens: the view as it is, at the deadline.
    let waited = h
        .call("GET", &f.path("/tasks/{pending}?wait_ms=2000"), &[], b"")
        .await;
    assert_eq!(waited.json()["state"], "pending");
    assert_eq!(started.elapsed(), std::time::Duration::from_millis(2000));

    // Pending, then canceled while the request waits: answered then, long
    // before its deadline (a paused clock would otherwise jump to it).
    let started = tokio::time::Instant::now();
    let (wait_path, cancel_path) = (
        f.path("/tasks/{pending}?wait_ms=60000"),
        f.path("/tasks/{pending}/cancel"),
    );
    let (waited, canceled) = tokio::join!(
        h.call("GET", &wait_path, &[], b""),
        h.call("POST", &cancel_path, &[], b""),
    );
    assert_eq!(canceled.status, 200);
    assert_eq!(waited.json()["state"], "canceled", "{:?}", waited.json());
    assert!(started.elapsed() < std::time::Duration::from_secs(60));

    for bad in [
        "wait_ms=60001",
        "wait_ms=-1",
        "wait_ms=soon",
        "wait_ms=1&wait_ms=2",
    ] {
        let reply = h
            .call(
                "GET",
                &f.path(&format!("/tasks/{{success}}?{bad}")),
                &[],
                b"",
            )
            .await;
        assert_eq!(reply.status, 400, "{bad}");
        assert_eq!(
            reply.error_code().as_deref(),
            Some("invalid_request"),
            "{bad}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn waiters_past_the_bound_are_refused_with_503() {
    let h = harness(HttpConfig {
        max_waiters: 1,
        ..HttpConfig::default()
    })
    .await;
    let f = fixture(&h).await;
    let path = f.path("/tasks/{pending}?wait_ms=1000");
    let (first, second) = tokio::join!(h.call("GET", &path, &[], b""), async {
        // The first request is waiting by the time this one runs.
        tokio::task::yield_now().await;
        h.call("GET", &path, &[], b"").await
    });
    assert_eq!(first.status, 200);
    assert_eq!(second.status, 503);
    assert_eq!(second.error_code().as_deref(), Some("unavailable"));
    // The permit came back with the answer.
    assert_eq!(h.call("GET", &path, &[], b"").await.status, 200);
}

#[tokio::test]
async fn cancel_answers_id_and_state() {
    let h = harness(HttpConfig::default()).await;
    let f = fixture(&h).await;
    let cases = [
        ("{pending}", f.pending, "canceled"),
        ("{pending}", f.pending, "canceled"),
        ("{success}", f.success, "success"),
        ("{failed}", f.failed, "failed"),
        ("{canceled}", f.canceled, "canceled"),
    ];
    for (placeholder, id, state) in cases {
        let path = f.path(&format!("/tasks/{placeholder}/cancel"));
        let reply = h.call("POST", &path, &[], b"").await;
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(
            reply.json(),
            json!({"id": id.to_string(), "state": state}),
            "{path}"
        );
    }
    let view = h
        .call("GET", &f.path("/tasks/{pending}"), &[], b"")
        .await
        .json();
    assert_eq!(view["state"], "canceled");
}

#[tokio::test]
async fn listing_pages_through_every_task_once() {
    let h = harness(HttpConfig::default()).await;
    let f = fixture(&h).await;
    let all = [f.success, f.binary, f.failed, f.canceled, f.pending];

    let mut seen = Vec::new();
    let mut path = "/tasks?limit=2".to_owned();
    for _ in 0..10 {
        let page = h.call("GET", &path, &[], b"").await.json();
        assert_eq!(keys(&page), ["next", "tasks"].into_iter().collect());
        let tasks = page["tasks"].as_array().unwrap();
        assert!(tasks.len() <= 2);
        for t in tasks {
            assert_eq!(keys(t), VIEW_FIELDS.iter().copied().collect());
            seen.push(t["id"].as_str().unwrap().to_owned());
        }
        match page["next"].as_str() {
            Some(next) => path = format!("/tasks?limit=2&after={next}"),
            None => break,
        }
    }
    let expected: Vec<String> = all.iter().map(TaskId::to_string).collect();
    assert_eq!(seen, expected, "creation order, each once");

    let page = h.call("GET", "/tasks?state=success", &[], b"").await.json();
    let ids: Vec<&str> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [f.success.to_string(), f.binary.to_string()]);
    assert_eq!(page["next"], Value::Null);
}

#[tokio::test]
async fn the_token_guards_every_route_but_health() {
    let config = HttpConfig {
        api_token: Some("s3cret".into()),
        ..HttpConfig::default()
    };
    let h = harness(config).await;
    let id = TaskId::new(tc_model::Timestamp::from_millis(0), [0xee; 10]);
    let paths = [
        ("POST", "/tasks".to_owned()),
        ("GET", "/tasks".to_owned()),
        ("GET", format!("/tasks/{id}")),
        ("GET", format!("/tasks/{id}/result")),
        ("POST", format!("/tasks/{id}/cancel")),
        ("DELETE", "/tasks".to_owned()),
    ];
    let refused: [&[(&str, &str)]; 5] = [
        &[JSON],
        &[JSON, ("authorization", "Bearer wrong")],
        &[JSON, ("authorization", "Bearer s3cret ")],
        &[JSON, ("authorization", "Basic s3cret")],
        &[JSON, ("authorization", "s3cret")],
    ];
    for (method, path) in &paths {
        for headers in refused {
            let reply = h.call(method, path, headers, b"{}").await;
            assert_eq!(reply.status, 401, "{method} {path} {headers:?}");
            assert_eq!(reply.error_code().as_deref(), Some("unauthorized"));
            assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
        }
        let reply = h
            .call(
                method,
                path,
                &[JSON, ("authorization", "Bearer s3cret")],
                b"{}",
            )
            .await;
        assert_ne!(reply.status, 401, "{method} {path} with the token");
    }
    assert_eq!(
        h.call("GET", "/healthz", &[], b"").await.status,
        200,
        "/healthz stays open"
    );
    let reply = h
        .call(
            "POST",
            "/tasks",
            &[JSON, ("authorization", "bearer s3cret")],
            br#"{"url":"http://127.0.0.1:9/a","idempotency_key":"k"}"#,
        )
        .await;
    assert_eq!(reply.status, 201, "the scheme is case-insensitive");
}

/// `/metrics` names every tenant, so with a token it is
/// the admin's on the main listener (401 without a credential, 403 for a
/// tenant's key); `metrics_public` keeps it open, as it is without a token.
/// The admin listener serves it without a credential (tests/http/socket.rs).
#[tokio::test]
async fn metrics_need_the_admin_token_unless_public() {
    let config = HttpConfig {
        api_token: Some("s3cret".into()),
        ..HttpConfig::default()
    };
    let h = harness(config.clone()).await;
    let created = h
        .call(
            "POST",
            "/tenants",
            &[JSON, ("authorization", "Bearer s3cret")],
            br#"{"name":"acme"}"#,
        )
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let key = h
        .call(
            "POST",
            "/tenants/acme/keys",
            &[("authorization", "Bearer s3cret")],
            b"",
        )
        .await
        .json()["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let tenant = format!("Bearer {key}");
    fn check(reply: &crate::support::Reply, status: u16, code: Option<&str>) {
        assert_eq!(reply.status, status, "{reply:?}");
        assert_eq!(reply.error_code().as_deref(), code, "{reply:?}");
    }
    let unauthorized = Some("unauthorized");
    check(
        &h.call("GET", "/metrics", &[], b"").await,
        401,
        unauthorized,
    );
    let wrong = [("authorization", "Bearer wrong")];
    check(
        &h.call("GET", "/metrics", &wrong, b"").await,
        401,
        unauthorized,
    );
    let with_key = [("authorization", tenant.as_str())];
    let refused = h.call("GET", "/metrics", &with_key, b"").await;
    check(&refused, 403, Some("forbidden"));
    let admin = [("authorization", "Bearer s3cret")];
    let scraped = h.call("GET", "/metrics", &admin, b"").await;
    check(&scraped, 200, None);
    assert!(String::from_utf8_lossy(&scraped.body).contains(r#"tenant="acme""#));

    let public = harness(HttpConfig {
        metrics_public: true,
        ..config
    })
    .await;
    check(&public.call("GET", "/metrics", &[], b"").await, 200, None);
    // Without a token it stays open, as every route is.
    let open = harness(HttpConfig::default()).await;
    check(&open.call("GET", "/metrics", &[], b"").await, 200, None);
}

#[tokio::test]
async fn urls_outside_the_allow_list_are_forbidden() {
    let config = HttpConfig {
        allow_url_prefixes: vec![
            "http://127.0.0.1:9/ok/".into(),
            "https://hooks.test/".into(),
        ],
        ..HttpConfig::default()
    };
    let h = harness(config).await;
    let cases = [
        ("http://127.0.0.1:9/ok/1", 201),
        ("https://hooks.test/x", 201),
        ("http://127.0.0.1:9/other", 403),
        ("http://127.0.0.1:9/ok", 403),
        ("https://hooks.test.evil/x", 403),
        ("ftp://hooks.test/", 400),
        // Dot-segments would climb out of the prefix once resolved.
        ("https://hooks.test/../admin", 400),
        ("https://hooks.test/a/%2e%2E/admin", 400),
        ("https://hooks.test/./x", 400),
        ("http://127.0.0.1:9/ok/..%2Fadmin", 400),
        // The prefix matches the normalised url, at a segment boundary.
        ("HTTPS://Hooks.Test:443/x", 201),
        ("http://127.0.0.1:9/okx/1", 403),
    ];
    for (i, (url, status)) in cases.into_iter().enumerate() {
        let reply = h
            .submit(&json!({"url": url, "idempotency_key": format!("k{i}")}))
            .await;
        assert_eq!(reply.status, status, "{url}: {reply:?}");
        match status {
            403 => assert_eq!(reply.error_code().as_deref(), Some("url_not_allowed")),
            400 => {
                assert_eq!(reply.error_code().as_deref(), Some("invalid_request"));
                let message = reply.json()["error"]["message"].as_str().map(str::to_owned);
                assert!(message.is_some_and(|m| m.starts_with("url: ")), "{reply:?}");
            }
            _ => {}
        }
    }
    assert_eq!(h.wakes(), 3);
}

#[tokio::test]
async fn an_unavailable_store_is_503_with_its_reason_and_writes_nothing() {
    let h = harness(HttpConfig::default()).await;
    let f = fixture(&h).await;
    h.set_store_down(true);
    let rows: &[(&str, String)] = &[
        ("POST", "/tasks".into()),
        ("GET", "/tasks".into()),
        ("GET", f.path("/tasks/{pending}")),
        ("GET", f.path("/tasks/{success}/result")),
        ("POST", f.path("/tasks/{pending}/cancel")),
        ("GET", "/metrics".into()),
    ];
    let body = br#"{"url":"http://127.0.0.1:9/a","idempotency_key":"while-down"}"#;
    for (method, path) in rows {
        let reply = h.call(method, path, &[JSON], body).await;
        assert_eq!(reply.status, 503, "{method} {path}");
        assert_eq!(reply.error_code().as_deref(), Some("unavailable"));
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(message.contains("database or disk is full"), "{message}");
        assert_eq!(reply.header("retry-after"), Some("1"));
    }
    // Health says so too, in its own shape, with the store's reason.
    let health = h.call("GET", "/healthz", &[], b"").await;
    assert_eq!(health.status, 503);
    assert_eq!(health.header("retry-after"), Some("1"));
    let body = health.json();
    assert_eq!(body["status"], "unavailable", "{body}");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("database or disk is full"), "{body}");
    assert_eq!(h.wakes(), 5, "only the fixture's submits woke the worker");

    h.set_store_down(false);
    let health = h.call("GET", "/healthz", &[], b"").await;
    assert_eq!(
        (health.status, health.json()),
        (200, json!({"status": "ok"}))
    );
    let all = h.call("GET", "/tasks", &[], b"").await.json();
    assert_eq!(
        all["tasks"].as_array().unwrap().len(),
        5,
        "nothing was written"
    );
    let view = h
        .call("GET", &f.path("/tasks/{pending}"), &[], b"")
        .await
        .json();
    assert_eq!(view["state"], "pending", "the cancel did not happen");
}

#[tokio::test]
async fn over_limit_bodies_are_413_before_parsing() {
    let config = HttpConfig {
        max_body_bytes: 100,
        ..HttpConfig::default()
    };
    let h = harness(config).await;
    let big = format!(
        r#"{{"url":"http://127.0.0.1:9/a","idempotency_key":"k","json":"{}"}}"#,
        "x".repeat(100)
    );
    let reply = h.call("POST", "/tasks", &[JSON], big.as_bytes()).await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.error_code().as_deref(), Some("payload_too_large"));
    assert_eq!(reply.header("connection"), Some("close"));
    // Exactly at the limit is fine.
    let frame = |n: usize| {
        format!(
            r#"{{"url":"http://127.0.0.1:9/a","idempotency_key":"k","json":"{}"}}"#,
            "x".repeat(n)
        )
    };
    let exact = frame(100 - frame(0).len());
    assert_eq!(exact.len(), 100);
    let reply = h.call("POST", "/tasks", &[JSON], exact.as_bytes()).await;
    assert_eq!(reply.status, 201, "{reply:?}");
}

#[tokio::test]
async fn metrics_show_tasks_by_state_submits_and_registered_metrics() {
    let h = harness(HttpConfig::default()).await;
    let _f = fixture(&h).await;
    h.submit(&json!({"url": "http://127.0.0.1:9/hook", "idempotency_key": "pending", "json": {"key": "pending"}, "max_attempts": 1}))
        .await;
    h.submit(&json!({"url": "http://127.0.0.1:9/hook", "idempotency_key": "pending"}))
        .await;
    h.submit(&json!({"url": 1})).await;

    let reply = h
        .call(
            "GET",
            "/metrics",
            &[("accept", "application/openmetrics-text")],
            b"",
        )
        .await;
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .header("content-type")
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{:?}",
        reply.header("content-type")
    );
    let text = String::from_utf8(reply.body.to_vec()).unwrap();
    for line in [
        r#"taskcenter_tasks{state="pending"} 1"#,
        r#"taskcenter_tasks{state="running"} 0"#,
        r#"taskcenter_tasks{state="success"} 2"#,
        r#"taskcenter_tasks{state="failed"} 1"#,
        r#"taskcenter_tasks{state="canceled"} 1"#,
        r#"taskcenter_submits_total{result="created"} 5"#,
        r#"taskcenter_submits_total{result="existing"} 1"#,
        r#"taskcenter_submits_total{result="conflict"} 1"#,
        r#"taskcenter_submits_total{result="invalid"} 1"#,
        r#"taskcenter_http_requests_total{route="/tasks",status="201"} 5"#,
        r#"taskcenter_http_requests_total{route="/tasks/{id}/cancel",status="200"} 1"#,
        "taskcenter_http_waiters 0",
        "# EOF",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[tokio::test]
async fn metrics_include_what_others_registered() {
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::registry::Registry;

    let inner = tc_testkit::memory_store::MemoryStore::new();
    let mut registry = Registry::default();
    let in_flight = Gauge::<i64>::default();
    registry.register(
        "taskcenter_calls_in_flight",
        "Downstream calls in flight",
        in_flight.clone(),
    );
    in_flight.set(3);
    let app = tc_http::App::new(
        std::sync::Arc::new(inner),
        NoControl,
        HttpConfig::default(),
        registry,
    );
    let request = http::Request::get("/metrics")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = tc_http::handle(&app, request).await;
    assert_eq!(response.status(), 200);
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(text.contains("taskcenter_calls_in_flight 3"), "{text}");
    assert!(
        text.contains(r#"taskcenter_tasks{state="pending"} 0"#),
        "{text}"
    );
}

/// A control for tests that never cancel or submit.
struct NoControl;

impl tc_http::Control for NoControl {
    fn task_submitted(&self) {}
    fn canceled_in_store(&self, _: TaskId) {}
    async fn cancel(
        &self,
        _: TaskId,
        _: tc_model::tenant::Scope,
    ) -> Result<tc_model::Task, tc_model::store::StoreError> {
        Err(tc_model::store::StoreError::NotFound)
    }
    fn now(&self) -> tc_model::Timestamp {
        tc_model::Timestamp::from_millis(0)
    }
    fn changes(&self) -> tokio::sync::broadcast::Receiver<(TaskId, tc_model::State)> {
        tokio::sync::broadcast::channel(1).1
    }
    fn destinations_changed(&self) {}
    fn schedules_changed(&self) {}
    fn destination_state(&self, _: &str) -> tc_http::DestinationRuntime {
        tc_http::DestinationRuntime::default()
    }
}

/// A deterministic stream of pseudo-random numbers (xorshift), so the same
/// inputs run every time.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next() % items.len() as u64) as usize]
    }
}

#[tokio::test]
async fn no_input_gets_a_5xx() {
    let h = harness(HttpConfig {
        max_body_bytes: 512,
        ..HttpConfig::default()
    })
    .await;
    let f = fixture(&h).await;
    let methods = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"];
    let paths = [
        "/tasks",
        "/tasks/{pending}",
        "/tasks/{success}/result",
        "/tasks/{pending}/cancel",
        "/tasks?state=pending&limit=3",
        "/tasks?limit=%FF",
        "/tasks?after=%",
        "/tasks/{unknown}",
        "/healthz",
        "/metrics",
        "/%00",
        "/tasks/../healthz",
    ];
    let fragments = [
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "\\",
        "null",
        "true",
        "-",
        "1e309",
        "0.5",
        "18446744073709551616",
        r#""url""#,
        r#""json""#,
        r#""idempotency_key""#,
        r#""max_attempts""#,
        r#""timeout_ms""#,
        r#""http://127.0.0.1:9/x""#,
        "\u{0}",
        "é",
        "\u{feff}",
        " ",
        "\n",
    ];
    let content_types = [
        "application/json",
        "text/plain",
        "",
        "application/json; charset=latin1",
    ];
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    for _ in 0..400 {
        let method = rng.pick(&methods);
        let path = f.path(rng.pick(&paths));
        let mut body = String::new();
        for _ in 0..rng.next() % 24 {
            body.push_str(rng.pick(&fragments));
        }
        if rng.next().is_multiple_of(3) {
            body = format!(
                r#"{{"url":"http://127.0.0.1:9/x","idempotency_key":"f{}","json":{body}}}"#,
                rng.next() % 5
            );
        }
        let content_type = rng.pick(&content_types);
        let headers: Vec<(&str, &str)> = if content_type.is_empty() {
            vec![]
        } else {
            vec![("content-type", content_type)]
        };
        let reply = h.call(method, &path, &headers, body.as_bytes()).await;
        assert!(reply.status < 500, "{method} {path} {body:?}: {reply:?}");
        if reply.status >= 400 {
            assert!(reply.error_code().is_some(), "{method} {path}: {reply:?}");
        }
    }
}

/// Waits (on the paused clock) until `n` requests are waiting for tasks.
async fn until_waiting(h: &Harness, n: i64) {
    for _ in 0..10_000 {
        if h.metric("taskcenter_http_waiters").await == n {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("never {n} waiters");
}

/// `GET /tasks/{id}?wait_ms=` from `peer`, as a spawned request.
fn wait_for(
    h: &Harness,
    peer: &'static str,
    id: TaskId,
    wait_ms: u64,
) -> tokio::task::JoinHandle<(u16, Option<String>, Value)> {
    let app = std::sync::Arc::clone(&h.app);
    tokio::spawn(async move {
        let request = http::Request::builder()
            .uri(format!("/tasks/{id}?wait_ms={wait_ms}"))
            .extension(tc_http::ConnectionInfo {
                peer: peer.parse().unwrap(),
                local: "127.0.0.1:8080".parse().unwrap(),
            })
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let response = tc_http::handle(&app, request).await;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        (status, retry_after, serde_json::from_slice(&body).unwrap())
    })
}

/// Idle waiters cost a completion nothing: they do not each listen to
/// every change (one listener serves them all), and a change wakes only
/// the waiters of its own task.
#[tokio::test(start_paused = true)]
async fn a_waiter_is_woken_only_by_a_change_of_its_own_task() {
    let h = harness(HttpConfig::default()).await;
    let mut ids = Vec::new();
    for i in 0..40 {
        ids.push(h.seed(&format!("idle-{i}"), None).await);
    }
    let waiters: Vec<_> = ids
        .iter()
        .map(|id| wait_for(&h, "127.0.0.1:40000", *id, 60_000))
        .collect();
    until_waiting(&h, 40).await;
    assert!(
        h.changes.receiver_count() <= 1,
        "{} listeners to every change for 40 waiters",
        h.changes.receiver_count()
    );
    let started = tokio::time::Instant::now();
    let canceled = h
        .call("POST", &format!("/tasks/{}/cancel", ids[7]), &[], b"")
        .await;
    assert_eq!(canceled.status, 200);
    until_waiting(&h, 39).await;
    let mut waiters = waiters;
    let (status, _, view) = waiters.remove(7).await.unwrap();
    assert_eq!((status, view["state"].as_str()), (200, Some("canceled")));
    assert_eq!(
        started.elapsed(),
        std::time::Duration::ZERO,
        "answered at once"
    );
    for w in &waiters {
        assert!(!w.is_finished(), "a waiter of another task answered");
    }
    for w in waiters {
        w.abort();
    }
}

/// At most `max_waiters_per_client` waiters per client address: past it
/// `429 too_many_waiters` with `Retry-After`; other addresses still wait.
#[tokio::test(start_paused = true)]
async fn waiters_per_client_address_are_bounded_with_429() {
    let h = harness(HttpConfig {
        max_waiters_per_client: 2,
        ..HttpConfig::default()
    })
    .await;
    let f = fixture(&h).await;
    let (a, b) = ("192.0.2.1:5000", "192.0.2.2:5000");
    let first = wait_for(&h, a, f.pending, 60_000);
    let second = wait_for(&h, "192.0.2.1:5001", f.pending, 60_000);
    until_waiting(&h, 2).await;
    let (status, retry_after, body) = wait_for(&h, a, f.pending, 60_000).await.unwrap();
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "too_many_waiters");
    assert_eq!(retry_after.as_deref(), Some("1"));
    // A terminal task answers at once: no waiting, no limit.
    let (status, _, _) = wait_for(&h, a, f.success, 60_000).await.unwrap();
    assert_eq!(status, 200);
    let other = wait_for(&h, b, f.pending, 60_000);
    until_waiting(&h, 3).await;
    // The task ends: every waiter answers and the address may wait again.
    h.call("POST", &f.path("/tasks/{pending}/cancel"), &[], b"")
        .await;
    for w in [first, second, other] {
        let (status, _, view) = w.await.unwrap();
        assert_eq!((status, view["state"].as_str()), (200, Some("canceled")));
    }
    until_waiting(&h, 0).await;
    let again = h.seed("again", None).await;
    let w = wait_for(&h, a, again, 1000);
    assert_eq!(w.await.unwrap().0, 200);
}

/// A bulk cancel writes the cancels in the store, not through the worker:
/// its waiters are woken all the same, not left until their deadline.
#[tokio::test(start_paused = true)]
async fn a_bulk_cancel_wakes_its_waiters() {
    let h = harness(HttpConfig::default()).await;
    let f = fixture(&h).await;
    let waiter = wait_for(&h, "127.0.0.1:40000", f.pending, 60_000);
    until_waiting(&h, 1).await;
    let started = tokio::time::Instant::now();
    let bulk = h
        .call(
            "POST",
            "/tasks/bulk",
            &[JSON],
            br#"{"action":"cancel","filter":{"state":"pending"}}"#,
        )
        .await;
    assert_eq!(bulk.json()["applied"], 1, "{bulk:?}");
    let (status, _, view) = waiter.await.unwrap();
    assert_eq!((status, view["state"].as_str()), (200, Some("canceled")));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "woken by the cancel, not by its deadline"
    );
}

/// A task view shows the method and the task's headers, credentials
/// redacted; a destination view names its headers and counts its secrets;
/// neither shows a value or a secret, nor does `/metrics`.
#[tokio::test]
async fn views_show_methods_and_header_names_never_a_credential() {
    let h = harness(HttpConfig::default()).await;
    let submitted = h
        .call(
            "POST",
            "/tasks",
            &[JSON],
            br#"{"url":"http://127.0.0.1:9/a","idempotency_key":"h-1","method":"PATCH","headers":{"Authorization":"Bearer t-s3cr3t","Cookie":"c-s3cr3t","X-Api-Key":"k-s3cr3t","X-Tenant":"acme"}}"#,
        )
        .await;
    assert_eq!(submitted.status, 201, "{submitted:?}");
    let view = submitted.json();
    assert_eq!(view["method"], "PATCH");
    assert_eq!(
        view["headers"],
        json!({
            "authorization": "[redacted]",
            "cookie": "[redacted]",
            "x-api-key": "[redacted]",
            "x-tenant": "acme",
        })
    );
    let id = view["id"].as_str().unwrap().to_owned();
    let got = h
        .call("GET", &format!("/tasks/{id}"), &[], b"")
        .await
        .json();
    assert_eq!(got["headers"], view["headers"]);

    // Batch items take them too, and a bad one fails alone.
    let batch = h
        .call(
            "POST",
            "/tasks/batch",
            &[JSON],
            br#"{"tasks":[
                {"url":"http://127.0.0.1:9/a","idempotency_key":"b-1","method":"DELETE","headers":{"X-Api-Key":"b-s3cr3t"}},
                {"url":"http://127.0.0.1:9/a","idempotency_key":"b-2","headers":{"Host":"evil"}}]}"#,
        )
        .await;
    assert_eq!(batch.status, 200, "{batch:?}");
    let results = batch.json()["results"].clone();
    assert_eq!(results[0]["status"], 201, "{results}");
    assert_eq!(results[0]["task"]["method"], "DELETE");
    assert_eq!(
        results[0]["task"]["headers"],
        json!({"x-api-key": "[redacted]"})
    );
    assert_eq!(results[1]["status"], 400, "{results}");
    assert!(
        results[1]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("headers.host: ")),
        "{results}"
    );

    let secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let body = format!(
        r#"{{"headers":{{"X-Region":"eu","Authorization":"Bearer d-s3cr3t"}},"signing_secrets":["{secret}"]}}"#
    );
    let put = h
        .call("PUT", "/destinations/127.0.0.1:9", &[JSON], body.as_bytes())
        .await;
    assert_eq!(put.status, 200, "{put:?}");
    assert_eq!(
        put.json()["header_names"],
        json!(["authorization", "x-region"])
    );
    assert_eq!(put.json()["signing_secrets"], 1);

    let mut seen = Vec::new();
    for path in [
        format!("/tasks/{id}"),
        "/tasks".to_owned(),
        "/destinations".to_owned(),
        "/destinations/127.0.0.1:9".to_owned(),
        "/metrics".to_owned(),
    ] {
        let reply = h.call("GET", &path, &[], b"").await;
        assert_eq!(reply.status, 200, "{path}");
        seen.push((path, String::from_utf8_lossy(&reply.body).into_owned()));
    }
    for (path, text) in &seen {
        for hidden in ["s3cr3t", "whsec_", "C2FVsBQ"] {
            assert!(!text.contains(hidden), "{path} shows {hidden}: {text}");
        }
    }
}

/// A submit's valid `traceparent` puts the task in the caller's trace (its
/// view shows the trace id, the store keeps the context); a missing or
/// invalid one is never an error and gives a new trace; a batch's items
/// share the request's trace.
#[tokio::test]
async fn a_submit_s_trace_context_is_kept_and_an_invalid_one_ignored() {
    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let h = harness(HttpConfig::default()).await;
    let submit = |key: &'static str, headers: Vec<(&'static str, &'static str)>| {
        let h = &h;
        async move {
            let body = format!(r#"{{"url":"http://127.0.0.1:9/hook","idempotency_key":"{key}"}}"#);
            let mut all = vec![("content-type", "application/json")];
            all.extend(headers);
            let reply = h.call("POST", "/tasks", &all, body.as_bytes()).await;
            assert_eq!(reply.status, 201, "{key}");
            reply.json()
        }
    };
    let traced = submit(
        "traced",
        vec![("traceparent", PARENT), ("tracestate", "congo=t61rcWkgMzE")],
    )
    .await;
    assert_eq!(traced["trace_id"], "0af7651916cd43dd8448eb211c80319c");
    let id: tc_model::TaskId = traced["id"].as_str().unwrap().parse().unwrap();
    let stored = h
        .store
        .get(id, tc_model::tenant::Scope::Admin)
        .await
        .unwrap()
        .trace
        .unwrap();
    assert_eq!(
        (stored.traceparent().as_str(), stored.state()),
        (PARENT, Some("congo=t61rcWkgMzE"))
    );

    let mut new_traces = Vec::new();
    for (key, headers) in [
        ("none", vec![]),
        (
            "invalid",
            vec![("traceparent", "00-zz-yy-01"), ("tracestate", "a=1")],
        ),
        (
            "zero",
            vec![(
                "traceparent",
                "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            )],
        ),
    ] {
        let view = submit(key, headers).await;
        let trace_id = view["trace_id"].as_str().unwrap().to_owned();
        assert!(
            trace_id.len() == 32 && trace_id != "0af7651916cd43dd8448eb211c80319c",
            "{key}: {trace_id}"
        );
        new_traces.push(trace_id);
    }
    new_traces.dedup();
    assert_eq!(new_traces.len(), 3, "a new trace each: {new_traces:?}");

    for (prefix, headers, expected) in [
        (
            "p",
            vec![("traceparent", PARENT)],
            Some("0af7651916cd43dd8448eb211c80319c"),
        ),
        ("q", vec![], None),
    ] {
        let batch = format!(
            r#"{{"tasks":[{{"url":"http://127.0.0.1:9/a","idempotency_key":"{prefix}1"}},{{"url":"http://127.0.0.1:9/b","idempotency_key":"{prefix}2"}}]}}"#
        );
        let mut all = vec![("content-type", "application/json")];
        all.extend(headers);
        let reply = h
            .call("POST", "/tasks/batch", &all, batch.as_bytes())
            .await
            .json();
        let ids: Vec<&str> = reply["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["task"]["trace_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), 2);
        assert_eq!(ids[0], ids[1], "one trace for the request");
        match expected {
            Some(expected) => assert_eq!(ids[0], expected),
            None => assert!(!new_traces.contains(&ids[0].to_owned()), "a new trace"),
        }
    }
}

/// Every spelling of one host names one destination. A task's
/// view shows the canonical destination and its url as given (the url is
/// sent as given); the destination routes and the `destination=` filter
/// take any spelling and mean the canonical name, so a setting made under
/// one name holds for every other.
#[tokio::test]
async fn one_destination_has_one_name_whatever_the_url_spells() {
    let h = harness(HttpConfig::default()).await;
    let check = |host: &'static str, destination: &'static str| {
        let h = &h;
        async move {
            let url = format!("http://{host}:9/hook");
            let body = json!({"url": url, "idempotency_key": format!("one-name-{host}")});
            let reply = h
                .call("POST", "/tasks", &[JSON], body.to_string().as_bytes())
                .await;
            assert_eq!(reply.status, 201, "{host}: {reply:?}");
            let view = reply.json();
            assert_eq!(view["destination"], destination, "{host}: {view}");
            assert_eq!(view["url"], url, "{host}: the url is kept as given");
        }
    };
    let loopback = [
        "127.0.0.1",
        "127.0.0.1.",
        "127.1",
        "0x7f.0.0.1",
        "2130706433",
        "0177.0.0.1",
        "[::ffff:127.0.0.1]",
    ];
    for host in loopback {
        check(host, "127.0.0.1:9").await;
    }
    check("LOCALHOST.", "localhost:9").await;

    let put = h
        .call(
            "PUT",
            "/destinations/127.1:9",
            &[JSON],
            br#"{"max_in_flight":1}"#,
        )
        .await;
    assert_eq!(put.status, 200, "{put:?}");
    assert_eq!(put.json()["destination"], "127.0.0.1:9", "{put:?}");
    for name in ["0x7f.0.0.1:9", "2130706433:9", "%5B::ffff:127.0.0.1%5D:9"] {
        let got = h
            .call("GET", &format!("/destinations/{name}"), &[], b"")
            .await;
        assert_eq!(got.status, 200, "{name}: {got:?}");
        assert_eq!(got.json()["destination"], "127.0.0.1:9", "{name}");
        assert_eq!(got.json()["max_in_flight"], 1, "{name}: {got:?}");
    }
    let paused = h
        .call("POST", "/destinations/LOCALHOST.:9/pause", &[], b"")
        .await;
    assert_eq!(paused.status, 200, "{paused:?}");
    assert_eq!(paused.json()["destination"], "localhost:9", "{paused:?}");
    let listed = h.call("GET", "/tasks?destination=127.1:9", &[], b"").await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let tasks = listed.json()["tasks"].as_array().map_or(0, Vec::len);
    assert_eq!(tasks, loopback.len(), "{listed:?}");
}

/// A task stored before the allow-list was narrowed is not
/// retried outside it. A single retry answers `403 url_not_allowed` naming
/// the field (its url or its callback's); a bulk retry retries the others
/// and counts these as `refused_url` (its dry run too); without refusals
/// `refused_url` is 0.
#[tokio::test]
async fn a_retry_outside_the_allow_list_is_refused() {
    let h = harness(HttpConfig {
        allow_url_prefixes: vec!["http://127.0.0.1:9/".into()],
        ..HttpConfig::default()
    })
    .await;
    // Stored as an older server with a wider list would have: straight
    // into the store, then canceled (a retry takes canceled tasks).
    let stored = |key: &'static str, url: &'static str, callback: Option<&'static str>| {
        let h = &h;
        async move {
            let mut new = tc_model::NewTask::new(
                url.into(),
                Vec::new(),
                key.into(),
                1,
                std::time::Duration::from_secs(5),
                &tc_model::Limits::default(),
            )
            .unwrap();
            if let Some(cb) = callback {
                let on = tc_model::callback::CallbackOn::parse(["failed"]).unwrap();
                new = new.with_callback(tc_model::callback::Callback::new(cb.into(), on).unwrap());
            }
            let id = h
                .store
                .submit(new, crate::support::NOW)
                .await
                .unwrap()
                .task
                .id;
            let canceled = h
                .call("POST", &format!("/tasks/{id}/cancel"), &[], b"")
                .await;
            assert_eq!(canceled.status, 200, "{canceled:?}");
            id
        }
    };
    let inside = stored("inside", "http://127.0.0.1:9/a", None).await;
    let outside = stored("outside", "http://10.0.0.1/a", None).await;
    let callback = stored(
        "callback",
        "http://127.0.0.1:9/a",
        Some("http://10.0.0.1/cb"),
    )
    .await;

    let check = |id: TaskId, status: u16, field: Option<&'static str>| {
        let h = &h;
        async move {
            let reply = h
                .call("POST", &format!("/tasks/{id}/retry"), &[], b"")
                .await;
            assert_eq!(reply.status, status, "{id}: {reply:?}");
            if let Some(field) = field {
                assert_eq!(reply.error_code().as_deref(), Some("url_not_allowed"));
                let message = reply.json()["error"]["message"].clone();
                assert_eq!(
                    message,
                    format!("{field}: not under any allowed prefix of this server"),
                    "{id}"
                );
            }
        }
    };
    check(outside, 403, Some("url")).await;
    check(callback, 403, Some("callback_url")).await;
    check(inside, 200, None).await;
    let canceled = h
        .call("POST", &format!("/tasks/{inside}/cancel"), &[], b"")
        .await;
    assert_eq!(canceled.status, 200, "{canceled:?}");

    let bulk = |dry_run: bool| {
        let h = &h;
        async move {
            let body = json!({"action": "retry", "filter": {}, "dry_run": dry_run});
            let reply = h
                .call("POST", "/tasks/bulk", &[JSON], body.to_string().as_bytes())
                .await;
            assert_eq!(reply.status, 200, "{reply:?}");
            let v = reply.json();
            (
                v["matched"].clone(),
                v["applied"].clone(),
                v["refused_url"].clone(),
            )
        }
    };
    // A dry run counts; it judges no url (refused_url is 0).
    assert_eq!(bulk(true).await, (json!(3), json!(0), json!(0)), "dry run");
    assert_eq!(bulk(false).await, (json!(3), json!(1), json!(2)));
    for (id, state) in [
        (inside, "pending"),
        (outside, "canceled"),
        (callback, "canceled"),
    ] {
        let got = h.call("GET", &format!("/tasks/{id}"), &[], b"").await;
        assert_eq!(got.json()["state"], state, "{id}");
    }
    // Nothing refused: the store's bulk retry as before.
    let canceled = h
        .call("POST", &format!("/tasks/{inside}/cancel"), &[], b"")
        .await;
    assert_eq!(canceled.status, 200, "{canceled:?}");
    let body = json!({"action": "retry", "filter": {"idempotency_key": "inside"}});
    let reply = h
        .call("POST", "/tasks/bulk", &[JSON], body.to_string().as_bytes())
        .await;
    assert_eq!(
        (
            reply.json()["applied"].clone(),
            reply.json()["refused_url"].clone()
        ),
        (json!(1), json!(0)),
        "{reply:?}"
    );
}

/// The allow-list judges a url's canonical host, so another
/// spelling of an allowed address is allowed and another spelling of a
/// refused one is refused.
#[tokio::test]
async fn the_allow_list_judges_the_canonical_host() {
    let h = harness(HttpConfig {
        allow_url_prefixes: vec!["http://127.0.0.1:9/".into(), "http://localhost:9/".into()],
        ..HttpConfig::default()
    })
    .await;
    let check = |url: &'static str, status: u16| {
        let h = &h;
        async move {
            let body = json!({"url": url, "idempotency_key": url});
            let reply = h
                .call("POST", "/tasks", &[JSON], body.to_string().as_bytes())
                .await;
            assert_eq!(reply.status, status, "{url}: {reply:?}");
        }
    };
    check("http://127.1:9/x", 201).await;
    check("http://2130706433:9/x", 201).await;
    check("http://[::ffff:127.0.0.1]:9/x", 201).await;
    check("http://LOCALHOST.:9/x", 201).await;
    check("http://0x7f.0.0.2:9/x", 403).await;
    check("http://127.2:9/x", 403).await;
    check("http://localhost.test:9/x", 403).await;
}
