//! Topics through the handler: a topic's life, subscriptions
//! with write-only secrets, publishing (one task per matching enabled
//! subscription, `200` with the same tasks for a repeat, `409` for another
//! payload), the event read back, replays, tenants kept apart, and every
//! refusal with its status, code and the field its message names.

use serde_json::{Value, json};

use crate::support::Reply;
use crate::tenants::{ADMIN, admin_harness, call, tenant_with_key};

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn sub(url: &str, types: Value) -> Value {
    json!({
        "url": url,
        "event_types": types,
        "headers": {"X-Team": "billing", "Authorization": "Bearer s3cr3t"},
        "signing_secrets": [SECRET]
    })
}

fn event(kind: &str, n: u64, key: &str) -> Value {
    json!({"event_type": kind, "json": {"n": n}, "idempotency_key": key})
}

fn created(reply: &Reply) -> Value {
    assert!(matches!(reply.status, 200 | 201), "{reply:?}");
    reply.json()
}

#[tokio::test]
async fn a_topic_publishes_one_task_per_matching_subscription() {
    let h = admin_harness().await;
    let put = call(
        &h,
        ADMIN,
        "PUT",
        "/topics/billing",
        &json!({"description": "Invoices"}),
    )
    .await;
    assert_eq!(put.status, 201, "{put:?}");
    assert_eq!(put.json()["disable_after_s"], 432_000);
    let again = call(
        &h,
        ADMIN,
        "PUT",
        "/topics/billing",
        &json!({"description": "v2"}),
    )
    .await;
    assert_eq!(
        (again.status, &again.json()["description"]),
        (200, &json!("v2"))
    );

    let all = created(
        &call(
            &h,
            ADMIN,
            "POST",
            "/topics/billing/subscriptions",
            &sub("http://127.0.0.1:9/all", Value::Null),
        )
        .await,
    );
    let inv = created(
        &call(
            &h,
            ADMIN,
            "POST",
            "/topics/billing/subscriptions",
            &sub("http://127.0.0.1:9/inv", json!(["invoice.*"])),
        )
        .await,
    );
    created(
        &call(
            &h,
            ADMIN,
            "POST",
            "/topics/billing/subscriptions",
            &sub("http://127.0.0.1:9/usr", json!(["user.*"])),
        )
        .await,
    );
    assert_eq!(inv["signing_secrets"], 1);
    assert_eq!(inv["enabled"], true);
    assert_eq!(inv["event_types"], json!(["invoice.*"]));
    let listed = call(
        &h,
        ADMIN,
        "GET",
        "/topics/billing/subscriptions",
        &Value::Null,
    )
    .await;
    // A secret never reaches a view.
    let text = String::from_utf8_lossy(&listed.body);
    assert!(
        !text.contains("whsec_") && !text.contains("s3cr3t"),
        "{text}"
    );
    assert_eq!(
        listed.json()["subscriptions"].as_array().map(Vec::len),
        Some(3)
    );

    let published = call(
        &h,
        ADMIN,
        "POST",
        "/topics/billing/events",
        &event("invoice.paid", 1, "e1"),
    )
    .await;
    assert_eq!(published.status, 201, "{published:?}");
    let view = published.json();
    let subs: Vec<&str> = view["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["subscription"].as_str().unwrap())
        .collect();
    assert_eq!(
        subs,
        vec![all["id"].as_str().unwrap(), inv["id"].as_str().unwrap()]
    );
    assert_eq!(view["event_type"], "invoice.paid");
    assert_eq!(view["tasks"][0]["state"], "pending");
    let task_id = view["tasks"][0]["task_id"].as_str().unwrap().to_owned();
    let task = call(&h, ADMIN, "GET", &format!("/tasks/{task_id}"), &Value::Null)
        .await
        .json();
    assert_eq!(task["headers"]["webhook-id"], view["id"]);
    assert_eq!(task["headers"]["event-type"], "invoice.paid");
    assert_eq!(task["topic"], "billing");
    assert_eq!(task["event_id"], view["id"]);
    assert_eq!(task["subscription"], all["id"]);
    let by_event = format!("/tasks?event_id={}", view["id"].as_str().unwrap());
    let listed = call(&h, ADMIN, "GET", &by_event, &Value::Null).await.json();
    assert_eq!(
        listed["tasks"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    assert_eq!(
        task["idempotency_key"],
        format!("e1:{}", all["id"].as_str().unwrap())
    );

    let repeat = call(
        &h,
        ADMIN,
        "POST",
        "/topics/billing/events",
        &event("invoice.paid", 1, "e1"),
    )
    .await;
    assert_eq!((repeat.status, repeat.json()), (200, view.clone()));
    let conflict = call(
        &h,
        ADMIN,
        "POST",
        "/topics/billing/events",
        &event("invoice.paid", 2, "e1"),
    )
    .await;
    assert_eq!(conflict.status, 409, "{conflict:?}");
    assert_eq!(conflict.json()["error"]["code"], "idempotency_conflict");
    let id = view["id"].as_str().unwrap();
    let read = call(
        &h,
        ADMIN,
        "GET",
        &format!("/topics/billing/events/{id}"),
        &Value::Null,
    )
    .await;
    assert_eq!((read.status, read.json()), (200, view.clone()));

    let replay = call(
        &h,
        ADMIN,
        "POST",
        &format!(
            "/topics/billing/subscriptions/{}/replay",
            inv["id"].as_str().unwrap()
        ),
        &json!({"since": "2020-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(replay.status, 200, "{replay:?}");
    assert_eq!(replay.json()["tasks"].as_array().map(Vec::len), Some(1));

    let full = call(&h, ADMIN, "DELETE", "/topics/billing", &Value::Null).await;
    assert_eq!(
        (full.status, &full.json()["error"]["code"]),
        (409, &json!("topic_not_empty"))
    );
}

#[tokio::test]
async fn a_subscription_is_patched_disabled_and_deleted() {
    let h = admin_harness().await;
    call(&h, ADMIN, "PUT", "/topics/orders", &Value::Null).await;
    let s = created(
        &call(
            &h,
            ADMIN,
            "POST",
            "/topics/orders/subscriptions",
            &json!({"url": "http://127.0.0.1:9/o"}),
        )
        .await,
    );
    let path = format!("/topics/orders/subscriptions/{}", s["id"].as_str().unwrap());
    let patched = call(
        &h,
        ADMIN,
        "PATCH",
        &path,
        &json!({"enabled": false, "event_types": ["order.*"]}),
    )
    .await;
    assert_eq!(patched.status, 200, "{patched:?}");
    assert_eq!(
        (&patched.json()["enabled"], &patched.json()["event_types"]),
        (&json!(false), &json!(["order.*"]))
    );
    let published = call(
        &h,
        ADMIN,
        "POST",
        "/topics/orders/events",
        &event("order.placed", 1, "k"),
    )
    .await;
    assert_eq!(
        published.json()["tasks"],
        json!([]),
        "a disabled subscription takes no event"
    );
    let got = call(&h, ADMIN, "GET", &path, &Value::Null).await;
    assert_eq!((got.status, got.json()), (200, patched.json()));
    assert_eq!(
        call(&h, ADMIN, "DELETE", &path, &Value::Null).await.status,
        204
    );
    assert_eq!(
        call(&h, ADMIN, "GET", &path, &Value::Null).await.status,
        404
    );
    assert_eq!(
        call(&h, ADMIN, "DELETE", "/topics/orders", &Value::Null)
            .await
            .status,
        204
    );
    assert_eq!(
        call(&h, ADMIN, "GET", "/topics/orders", &Value::Null)
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn a_tenant_s_topics_are_its_own() {
    let h = admin_harness().await;
    let acme = tenant_with_key(&h, "acme", json!({})).await;
    let other = tenant_with_key(&h, "other", json!({})).await;
    assert_eq!(
        call(&h, &acme, "PUT", "/topics/orders", &Value::Null)
            .await
            .status,
        201
    );
    created(
        &call(
            &h,
            &acme,
            "POST",
            "/topics/orders/subscriptions",
            &json!({"url": "http://127.0.0.1:9/a"}),
        )
        .await,
    );
    for credential in [&other, ADMIN] {
        let seen = call(&h, credential, "GET", "/topics/orders", &Value::Null).await;
        assert_eq!(seen.status, 404, "{seen:?}");
        let listed = call(&h, credential, "GET", "/topics", &Value::Null).await;
        assert_eq!(listed.json(), json!({"topics": []}));
    }
    let published = call(
        &h,
        &acme,
        "POST",
        "/topics/orders/events",
        &event("order.placed", 1, "k"),
    )
    .await;
    assert_eq!(published.status, 201, "{published:?}");
    let task_id = published.json()["tasks"][0]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let task = call(&h, ADMIN, "GET", &format!("/tasks/{task_id}"), &Value::Null).await;
    assert_eq!(task.json()["tenant"], "acme");
    let theirs = call(
        &h,
        &other,
        "GET",
        &format!("/tasks/{task_id}"),
        &Value::Null,
    )
    .await;
    assert_eq!(theirs.status, 404);
}

#[tokio::test]
async fn bad_requests_name_their_field() {
    let h = admin_harness().await;
    call(&h, ADMIN, "PUT", "/topics/t", &Value::Null).await;
    let check = async |method: &str, path: &str, body: Value, status: u16, starts: &str| {
        let reply = call(&h, ADMIN, method, path, &body).await;
        assert_eq!(reply.status, status, "{method} {path} {body}: {reply:?}");
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.starts_with(starts),
            "{method} {path} {body}: {message}"
        );
    };
    check("PUT", "/topics/Bad", Value::Null, 400, "name:").await;
    check(
        "PUT",
        "/topics/t",
        json!({"disable_after_s": 0}),
        400,
        "disable_after_s:",
    )
    .await;
    check(
        "PUT",
        "/topics/t",
        json!({"callback_url": "ftp://x"}),
        400,
        "callback_url:",
    )
    .await;
    check("PUT", "/topics/t", json!({"colour": 1}), 400, "colour:").await;
    let subs = "/topics/t/subscriptions";
    check("POST", subs, json!({}), 400, "url:").await;
    check("POST", subs, json!({"url": "nope"}), 400, "url:").await;
    check(
        "POST",
        subs,
        json!({"url": "http://a/", "event_types": ["A"]}),
        400,
        "event_types:",
    )
    .await;
    check(
        "POST",
        subs,
        json!({"url": "http://a/", "event_types": "a"}),
        400,
        "event_types:",
    )
    .await;
    check(
        "POST",
        subs,
        json!({"url": "http://a/", "signing_secrets": ["x"]}),
        400,
        "signing_secrets:",
    )
    .await;
    check(
        "POST",
        subs,
        json!({"url": "http://a/", "enabled": "yes"}),
        400,
        "enabled:",
    )
    .await;
    check(
        "POST",
        subs,
        json!({"url": "http://a/", "headers": {"x-task-id": "1"}}),
        400,
        "headers.x-task-id:",
    )
    .await;
    check(
        "POST",
        "/topics/none/subscriptions",
        json!({"url": "http://a/"}),
        404,
        "no topic",
    )
    .await;
    let events = "/topics/t/events";
    check(
        "POST",
        events,
        json!({"json": {}, "idempotency_key": "k"}),
        400,
        "event_type:",
    )
    .await;
    check(
        "POST",
        events,
        json!({"event_type": "a.b"}),
        400,
        "idempotency_key:",
    )
    .await;
    check(
        "POST",
        events,
        json!({"event_type": "A", "idempotency_key": "k"}),
        400,
        "event_type:",
    )
    .await;
    check(
        "POST",
        events,
        json!({"event_type": "a", "idempotency_key": "k", "max_attempts": 0}),
        400,
        "max_attempts:",
    )
    .await;
    check(
        "POST",
        events,
        json!({"event_type": "a", "idempotency_key": "k", "delay_ms": -1}),
        400,
        "delay_ms:",
    )
    .await;
    check(
        "POST",
        "/topics/none/events",
        event("a", 1, "k"),
        404,
        "no topic",
    )
    .await;
    check("GET", "/topics/t/events/nope", Value::Null, 404, "no event").await;
    check(
        "POST",
        "/topics/t/subscriptions/nope/replay",
        json!({"since": "2020-01-01T00:00:00Z"}),
        404,
        "no subscription",
    )
    .await;
    check(
        "POST",
        "/topics/t/subscriptions/nope/replay",
        json!({"since": "yesterday"}),
        400,
        "since:",
    )
    .await;
    check(
        "PATCH",
        "/topics/t/subscriptions/nope",
        json!({"enabled": true}),
        404,
        "no subscription",
    )
    .await;
}
