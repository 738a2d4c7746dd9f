//! The `/schedules` routes through the handler: a schedule's life (create,
//! read, list, replace, pause, resume, trigger, delete) and every refusal
//! with its status, code and the field its message names.

use serde_json::{Value, json};
use tc_http::HttpConfig;

use crate::support::{Harness, harness};
use tc_model::store::Schedules;

const JSON: (&str, &str) = ("content-type", "application/json");

/// NOW is 2026-01-02T03:04:05.678Z: an hourly schedule's next runs.
const NEXT_HOURS: [&str; 5] = [
    "2026-01-02T04:00:00.000Z",
    "2026-01-02T05:00:00.000Z",
    "2026-01-02T06:00:00.000Z",
    "2026-01-02T07:00:00.000Z",
    "2026-01-02T08:00:00.000Z",
];

fn hourly(name: &str) -> Value {
    json!({
        "name": name,
        "cron": "@hourly",
        "task": {
            "url": "http://127.0.0.1:9/report",
            "json": {"z": 1, "a": [1.50, "x"]},
            "headers": {"Authorization": "Bearer s3cr3t", "X-Team": "ops"},
            "max_attempts": 4,
            "timeout_ms": 2500
        }
    })
}

async fn send(h: &Harness, method: &str, path: &str, body: &Value) -> crate::support::Reply {
    h.call(method, path, &[JSON], body.to_string().as_bytes())
        .await
}

#[tokio::test]
async fn a_schedule_is_created_read_changed_triggered_and_deleted() {
    let h = harness(HttpConfig::default()).await;
    let created = send(&h, "POST", "/schedules", &hourly("report")).await;
    assert_eq!(created.status, 201, "{created:?}");
    let view = created.json();
    assert_eq!(view["name"], "report");
    assert_eq!(view["cron"], "@hourly");
    assert_eq!(view["timezone"], "UTC");
    assert_eq!(view["paused"], false);
    assert_eq!(view["overlap"], "allow");
    assert_eq!(view["catch_up"], "none");
    assert_eq!(view["last_run_at"], Value::Null);
    assert_eq!(view["last_task_id"], Value::Null);
    assert_eq!(view["next_runs"], json!(NEXT_HOURS));
    assert_eq!(view["task"]["url"], "http://127.0.0.1:9/report");
    assert_eq!(view["task"]["json"], json!({"z": 1, "a": [1.50, "x"]}));
    assert_eq!(view["task"]["max_attempts"], 4);
    assert_eq!(view["task"]["timeout_ms"], 2500);
    // A credential's value never reaches a view.
    assert!(!created.body.windows(6).any(|w| w == b"s3cr3t"));
    assert_eq!(view["task"]["headers"]["x-team"], "ops");

    let got = h.call("GET", "/schedules/report", &[], b"").await;
    assert_eq!((got.status, got.json()), (200, view.clone()));
    let listed = h.call("GET", "/schedules", &[], b"").await;
    assert_eq!(listed.json(), json!({"schedules": [view]}));

    // Replace: another zone and pattern, paused, skip, latest.
    let mut changed = hourly("report");
    changed["cron"] = json!("30 2 * * MON");
    changed["timezone"] = json!("Europe/Berlin");
    changed["paused"] = json!(true);
    changed["overlap"] = json!("skip");
    changed["catch_up"] = json!("latest");
    let put = send(&h, "PUT", "/schedules/report", &changed).await;
    assert_eq!(put.status, 200, "{put:?}");
    let view = put.json();
    assert_eq!(
        (
            &view["cron"],
            &view["timezone"],
            &view["paused"],
            &view["overlap"],
            &view["catch_up"]
        ),
        (
            &json!("30 2 * * MON"),
            &json!("Europe/Berlin"),
            &json!(true),
            &json!("skip"),
            &json!("latest")
        )
    );
    // 2026-01-05 is a Monday; 02:30 in Berlin (CET) is 01:30Z.
    assert_eq!(view["next_runs"][0], "2026-01-05T01:30:00.000Z");
    // The name may be left out of a PUT.
    changed.as_object_mut().unwrap().remove("name");
    assert_eq!(
        send(&h, "PUT", "/schedules/report", &changed).await.status,
        200
    );

    let resumed = h.call("POST", "/schedules/report/resume", &[], b"").await;
    assert_eq!(
        (resumed.status, &resumed.json()["paused"]),
        (200, &json!(false))
    );
    let paused = h.call("POST", "/schedules/report/pause", &[], b"").await;
    assert_eq!(
        (paused.status, &paused.json()["paused"]),
        (200, &json!(true))
    );

    // A trigger fires now, paused or not.
    let wakes = h.wakes();
    let fired = h.call("POST", "/schedules/report/trigger", &[], b"").await;
    assert_eq!(fired.status, 200, "{fired:?}");
    let task = fired.json();
    assert_eq!(
        task["idempotency_key"],
        "schedule:report:manual:2026-01-02T03:04:05.678Z"
    );
    assert_eq!(task["url"], "http://127.0.0.1:9/report");
    assert_eq!(task["max_attempts"], 4);
    assert!(h.wakes() > wakes, "the worker is woken");
    let after = h.call("GET", "/schedules/report", &[], b"").await.json();
    assert_eq!(after["last_task_id"], task["id"]);
    assert_eq!(after["last_run_at"], "2026-01-02T03:04:05.678Z");

    // Delete: gone; its task stays.
    let deleted = h.call("DELETE", "/schedules/report", &[], b"").await;
    assert_eq!((deleted.status, deleted.body.len()), (204, 0));
    let gone = h.call("GET", "/schedules/report", &[], b"").await;
    assert_eq!(
        (gone.status, gone.error_code().as_deref()),
        (404, Some("not_found"))
    );
    let id = task["id"].as_str().unwrap();
    assert_eq!(
        h.call("GET", &format!("/tasks/{id}"), &[], b"")
            .await
            .status,
        200
    );
}

/// Sends `body` to `POST /schedules`; checks the status, the code and that
/// the message starts with `field`.
async fn check(h: &Harness, body: Value, status: u16, code: &str, field: &str) {
    let reply = send(h, "POST", "/schedules", &body).await;
    assert_eq!(reply.status, status, "{body}: {reply:?}");
    assert_eq!(reply.error_code().as_deref(), Some(code), "{body}");
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with(field),
        "{body}: {message:?} should start with {field:?}"
    );
}

fn with(field: &str, value: Value) -> Value {
    let mut body = hourly("bad");
    body[field] = value;
    body
}

fn with_task(field: &str, value: Value) -> Value {
    let mut body = hourly("bad");
    body["task"][field] = value;
    body
}

#[tokio::test]
async fn refusals_name_their_field() {
    let h = harness(HttpConfig::default()).await;
    let bad = "invalid_request";
    for cron in [
        "* * * *",
        "* * * * * *",
        "60 * * * *",
        "* * 32 * *",
        "0 0 30 2 *",
        "@reboot",
        "",
    ] {
        check(&h, with("cron", json!(cron)), 400, bad, "cron: ").await;
    }
    check(
        &h,
        with("cron", json!(5)),
        400,
        bad,
        "cron: must be a string",
    )
    .await;
    check(
        &h,
        with("timezone", json!("Mars/Olympus")),
        400,
        bad,
        "timezone: ",
    )
    .await;
    check(&h, with("overlap", json!("never")), 400, bad, "overlap: ").await;
    check(&h, with("catch_up", json!("all")), 400, bad, "catch_up: ").await;
    check(&h, with("paused", json!("yes")), 400, bad, "paused: ").await;
    check(&h, with("name", json!("a/b")), 400, bad, "name: ").await;
    check(
        &h,
        with("extra", json!(1)),
        400,
        bad,
        "extra: unknown field",
    )
    .await;
    let mut nameless = hourly("x");
    nameless.as_object_mut().unwrap().remove("name");
    check(&h, nameless, 400, bad, "name: required").await;
    let mut taskless = hourly("x");
    taskless.as_object_mut().unwrap().remove("task");
    check(&h, taskless, 400, bad, "task: required").await;
    check(&h, with("task", json!([])), 400, bad, "task: ").await;
    check(
        &h,
        with_task("idempotency_key", json!("k")),
        400,
        bad,
        "task.idempotency_key",
    )
    .await;
    check(&h, with_task("url", json!("ftp://x")), 400, bad, "task.url").await;
    check(
        &h,
        with_task("max_attempts", json!(0)),
        400,
        bad,
        "task.max_attempts",
    )
    .await;
    check(
        &h,
        with_task("timeout_ms", json!(0)),
        400,
        bad,
        "task.timeout_ms",
    )
    .await;
    check(
        &h,
        with_task("method", json!("TRACE")),
        400,
        bad,
        "task.method",
    )
    .await;
    check(
        &h,
        with_task("headers", json!({"Host": "x"})),
        400,
        bad,
        "task.headers",
    )
    .await;
    check(
        &h,
        with_task("surprise", json!(1)),
        400,
        bad,
        "task.surprise: unknown field",
    )
    .await;
    assert_eq!(
        h.call("GET", "/schedules", &[], b"").await.json(),
        json!({"schedules": []})
    );

    // A taken name.
    assert_eq!(
        send(&h, "POST", "/schedules", &hourly("taken"))
            .await
            .status,
        201
    );
    check(&h, hourly("taken"), 409, "schedule_exists", "name: ").await;
    // A PUT may not rename.
    let renamed = send(&h, "PUT", "/schedules/taken", &hourly("other")).await;
    assert_eq!(
        (renamed.status, renamed.error_code().as_deref()),
        (400, Some(bad))
    );

    // Unknown names, on every route that takes one.
    for (method, path, body) in [
        ("GET", "/schedules/nope", Value::Null),
        ("PUT", "/schedules/nope", hourly("nope")),
        ("DELETE", "/schedules/nope", Value::Null),
        ("POST", "/schedules/nope/pause", Value::Null),
        ("POST", "/schedules/nope/resume", Value::Null),
        ("POST", "/schedules/nope/trigger", Value::Null),
        ("GET", "/schedules/not%20a%20name", Value::Null),
    ] {
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let reply = h.call(method, path, &[JSON], &bytes).await;
        assert_eq!(
            (reply.status, reply.error_code().as_deref()),
            (404, Some("not_found")),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn schedules_need_the_token_and_the_allow_list_holds_for_their_tasks() {
    let h = harness(HttpConfig {
        api_token: Some("s3cret".into()),
        allow_url_prefixes: vec!["http://127.0.0.1:9/".into()],
        ..HttpConfig::default()
    })
    .await;
    for (method, path) in [
        ("POST", "/schedules"),
        ("GET", "/schedules"),
        ("GET", "/schedules/x"),
        ("PUT", "/schedules/x"),
        ("DELETE", "/schedules/x"),
        ("POST", "/schedules/x/pause"),
        ("POST", "/schedules/x/resume"),
        ("POST", "/schedules/x/trigger"),
    ] {
        let reply = h.call(method, path, &[JSON], b"{}").await;
        assert_eq!(reply.status, 401, "{method} {path}");
    }
    let auth = ("authorization", "Bearer s3cret");
    let mut outside = hourly("outside");
    outside["task"]["url"] = json!("http://10.0.0.1/x");
    let reply = h
        .call(
            "POST",
            "/schedules",
            &[JSON, auth],
            outside.to_string().as_bytes(),
        )
        .await;
    assert_eq!(
        (reply.status, reply.error_code().as_deref()),
        (403, Some("url_not_allowed"))
    );
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("task.url")
    );
    let reply = h
        .call(
            "POST",
            "/schedules",
            &[JSON, auth],
            hourly("inside").to_string().as_bytes(),
        )
        .await;
    assert_eq!(reply.status, 201, "{reply:?}");
}

/// A firing the allow-list refused is the schedule's
/// `last_error`, in its view and the list; a trigger that submits clears
/// it.
#[tokio::test]
async fn a_refused_firing_shows_as_the_schedule_s_last_error() {
    let h = harness(HttpConfig::default()).await;
    let created = send(&h, "POST", "/schedules", &hourly("report")).await;
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(created.json()["last_error"], Value::Null, "{created:?}");
    let at = tc_model::Timestamp::from_millis(crate::support::NOW.as_millis() - 5000);
    let refusal = tc_model::UrlNotAllowed { field: "url" };
    let recorded = h
        .store
        .record_firing_error(
            "report".into(),
            tc_model::schedule::FiringError::url_not_allowed(refusal, at),
        )
        .await
        .unwrap();
    assert!(recorded);
    let want = json!({
        "code": "url_not_allowed",
        "message": "url: not under any allowed prefix of this server",
        "at": "2026-01-02T03:04:00.678Z",
    });
    let one = h.call("GET", "/schedules/report", &[], b"").await;
    assert_eq!(one.json()["last_error"], want, "{one:?}");
    let list = h.call("GET", "/schedules", &[], b"").await;
    assert_eq!(list.json()["schedules"][0]["last_error"], want, "{list:?}");
    let triggered = h.call("POST", "/schedules/report/trigger", &[], b"").await;
    assert_eq!(triggered.status, 200, "{triggered:?}");
    let one = h.call("GET", "/schedules/report", &[], b"").await;
    assert_eq!(one.json()["last_error"], Value::Null, "{one:?}");
}

/// A schedule's template takes a submit's `priority` and `flow_key`: its
/// view shows them (0 and `null` when left out), each firing's task
/// carries them, and a bad one is refused naming `task.<field>`.
#[tokio::test]
async fn a_schedule_s_template_keeps_its_priority_and_flow_key() {
    let h = harness(HttpConfig::default()).await;
    let plain = send(&h, "POST", "/schedules", &hourly("plain")).await;
    assert_eq!(plain.status, 201, "{plain:?}");
    let view = plain.json();
    assert_eq!(
        (&view["task"]["priority"], &view["task"]["flow_key"]),
        (&json!(0), &Value::Null)
    );

    let mut keyed = hourly("keyed");
    keyed["task"]["priority"] = json!(7);
    keyed["task"]["flow_key"] = json!("customer-42");
    let created = send(&h, "POST", "/schedules", &keyed).await;
    assert_eq!(created.status, 201, "{created:?}");
    let view = created.json();
    assert_eq!(
        (&view["task"]["priority"], &view["task"]["flow_key"]),
        (&json!(7), &json!("customer-42"))
    );
    let fired = h.call("POST", "/schedules/keyed/trigger", &[], b"").await;
    assert_eq!(fired.status, 200, "{fired:?}");
    let task = fired.json();
    assert_eq!(
        (&task["priority"], &task["flow_key"]),
        (&json!(7), &json!("customer-42"))
    );

    for (field, value) in [
        ("priority", json!(10)),
        ("priority", json!("high")),
        ("flow_key", json!("")),
        ("flow_key", json!("tab\there")),
        ("flow_key", json!(42)),
    ] {
        let mut bad = hourly("bad");
        bad["task"][field] = value.clone();
        let refused = send(&h, "POST", "/schedules", &bad).await;
        assert_eq!(
            (refused.status, refused.error_code().as_deref()),
            (400, Some("invalid_request")),
            "{field}: {value}"
        );
        let message = refused.json()["error"]["message"].to_string();
        assert!(
            message.contains(&format!("task.{field}")),
            "{field}: {value}: {message}"
        );
    }
}
