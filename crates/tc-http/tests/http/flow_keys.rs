//! Flow keys through the handler: a key's settings set, read, listed and
//! removed (a field left out kept, `null` cleared), each tenant's keys its
//! own and managed with its key, a task's `flow_key` on submit, in its
//! view and as a listing filter, and every refusal naming its field.

use serde_json::{Value, json};

use crate::tenants::{ADMIN, admin_harness, call, tenant_with_key};

#[tokio::test]
async fn a_flow_key_is_set_read_listed_and_removed() {
    let h = admin_harness().await;
    let put = call(
        &h,
        ADMIN,
        "PUT",
        "/flow-keys/acct%201",
        &json!({"max_in_flight": 3, "rate_per_s": 2.5}),
    )
    .await;
    assert_eq!(put.status, 200, "{put:?}");
    assert_eq!(
        put.json(),
        json!({"key": "acct 1", "max_in_flight": 3, "rate_per_s": 2.5, "burst": null,
               "in_flight": 0, "pending": 0})
    );
    // Left out: kept; null: cleared.
    let put = call(
        &h,
        ADMIN,
        "PUT",
        "/flow-keys/acct%201",
        &json!({"rate_per_s": null, "burst": 9}),
    )
    .await;
    assert_eq!(
        (
            put.json()["max_in_flight"].clone(),
            put.json()["rate_per_s"].clone(),
            put.json()["burst"].clone()
        ),
        (json!(3), Value::Null, json!(9))
    );
    let submitted = call(
        &h,
        ADMIN,
        "POST",
        "/tasks",
        &json!({"url": "http://127.0.0.1:9/x", "idempotency_key": "k1", "flow_key": "acct 1"}),
    )
    .await;
    assert_eq!(submitted.status, 201, "{submitted:?}");
    assert_eq!(submitted.json()["flow_key"], "acct 1");
    let got = call(&h, ADMIN, "GET", "/flow-keys/acct%201", &Value::Null).await;
    assert_eq!(got.json()["pending"], 1, "{got:?}");
    let listed = call(&h, ADMIN, "GET", "/tasks?flow_key=acct%201", &Value::Null).await;
    assert_eq!(
        listed.json()["tasks"].as_array().map(Vec::len),
        Some(1),
        "{listed:?}"
    );
    let all = call(&h, ADMIN, "GET", "/flow-keys", &Value::Null).await;
    assert_eq!(all.json()["flow_keys"][0]["key"], "acct 1", "{all:?}");
    let gone = call(&h, ADMIN, "DELETE", "/flow-keys/acct%201", &Value::Null).await;
    assert_eq!(gone.status, 204, "{gone:?}");
    let again = call(&h, ADMIN, "DELETE", "/flow-keys/acct%201", &Value::Null).await;
    assert_eq!(again.status, 404, "{again:?}");
    // Its task keeps it: the key reads with no settings.
    let read = call(&h, ADMIN, "GET", "/flow-keys/acct%201", &Value::Null).await;
    assert_eq!(
        (read.status, read.json()["max_in_flight"].clone()),
        (200, Value::Null)
    );
    let none = call(&h, ADMIN, "GET", "/flow-keys/nobody", &Value::Null).await;
    assert_eq!(none.status, 404, "{none:?}");
}

#[tokio::test]
async fn a_tenant_manages_its_own_flow_keys() {
    let h = admin_harness().await;
    let key = tenant_with_key(&h, "acme", json!({})).await;
    let mine = call(
        &h,
        &key,
        "PUT",
        "/flow-keys/k",
        &json!({"max_in_flight": 2}),
    )
    .await;
    assert_eq!(mine.status, 200, "{mine:?}");
    // The admin's key of the same name is another key.
    let admin = call(&h, ADMIN, "GET", "/flow-keys/k", &Value::Null).await;
    assert_eq!(admin.status, 404, "{admin:?}");
    let theirs = call(&h, &key, "GET", "/flow-keys", &Value::Null).await;
    assert_eq!(
        theirs.json()["flow_keys"][0]["max_in_flight"],
        2,
        "{theirs:?}"
    );
    let admins = call(&h, ADMIN, "GET", "/flow-keys", &Value::Null).await;
    assert_eq!(admins.json()["flow_keys"], json!([]), "{admins:?}");
}

#[tokio::test]
async fn bad_flow_keys_and_settings_are_refused_naming_the_field() {
    let h = admin_harness().await;
    let long = "k".repeat(129);
    let check = |method: &'static str, path: String, body: Value, field: &'static str| {
        let h = &h;
        async move {
            let reply = call(h, ADMIN, method, &path, &body).await;
            assert_eq!(reply.status, 400, "{method} {path} {body}: {reply:?}");
            let message = reply.json()["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(
                message.starts_with(field),
                "{method} {path} {body}: {message}"
            );
        }
    };
    check(
        "PUT",
        "/flow-keys/k".into(),
        json!({"max_in_flight": 0}),
        "max_in_flight",
    )
    .await;
    check(
        "PUT",
        "/flow-keys/k".into(),
        json!({"max_in_flight": 10_001}),
        "max_in_flight",
    )
    .await;
    check(
        "PUT",
        "/flow-keys/k".into(),
        json!({"rate_per_s": 0}),
        "rate_per_s",
    )
    .await;
    check(
        "PUT",
        "/flow-keys/k".into(),
        json!({"rate_per_s": "x"}),
        "rate_per_s",
    )
    .await;
    check(
        "PUT",
        "/flow-keys/k".into(),
        json!({"burst": 1_000_001}),
        "burst",
    )
    .await;
    check("PUT", "/flow-keys/k".into(), json!({"other": 1}), "other").await;
    check("PUT", format!("/flow-keys/{long}"), json!({}), "key").await;
    check("GET", "/flow-keys/%09".into(), Value::Null, "key").await;
    check("GET", "/flow-keys/%zz".into(), Value::Null, "key").await;
    check("GET", "/tasks?flow_key=%09".into(), Value::Null, "flow_key").await;
    check(
        "POST",
        "/tasks".into(),
        json!({"url": "http://127.0.0.1:9/x", "idempotency_key": "k", "flow_key": ""}),
        "flow_key",
    )
    .await;
    check(
        "POST",
        "/tasks".into(),
        json!({"url": "http://127.0.0.1:9/x", "idempotency_key": "k", "flow_key": 7}),
        "flow_key",
    )
    .await;
    check(
        "POST",
        "/tasks/bulk".into(),
        json!({"action": "cancel", "filter": {"flow_key": long}}),
        "filter.flow_key",
    )
    .await;
}
