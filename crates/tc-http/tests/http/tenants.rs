//! Tenants through the handler: the `/tenants` routes and their
//! refusals, two tenants' keys kept apart on every task route, the admin's
//! routes refused to a key, the quotas' 429s alone and in a batch, and a
//! revoked key refused at once.

use serde_json::{Value, json};
use tc_http::HttpConfig;
use tc_model::store::Tenants;

use crate::support::{Harness, Reply, harness};

pub(crate) const ADMIN: &str = "admin-secret";

pub(crate) async fn admin_harness() -> Harness {
    harness(HttpConfig {
        api_token: Some(ADMIN.into()),
        ..HttpConfig::default()
    })
    .await
}

/// One request with `credential` as its bearer token (and a JSON body when
/// `body` is not null).
pub(crate) async fn call(
    h: &Harness,
    credential: &str,
    method: &str,
    path: &str,
    body: &Value,
) -> Reply {
    let auth = format!("Bearer {credential}");
    let mut headers = vec![("authorization", auth.as_str())];
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        headers.push(("content-type", "application/json"));
        body.to_string().into_bytes()
    };
    h.call(method, path, &headers, &bytes).await
}

/// Makes tenant `name` with `settings` and one key; returns the key.
pub(crate) async fn tenant_with_key(h: &Harness, name: &str, settings: Value) -> String {
    tenant_with_key_and_id(h, name, settings).await.0
}

/// Makes tenant `name` with `settings` and one key; returns the key and
/// its id.
pub(crate) async fn tenant_with_key_and_id(
    h: &Harness,
    name: &str,
    settings: Value,
) -> (String, String) {
    let mut body = settings;
    body["name"] = json!(name);
    let created = call(h, ADMIN, "POST", "/tenants", &body).await;
    assert_eq!(created.status, 201, "{created:?}");
    let key = call(
        h,
        ADMIN,
        "POST",
        &format!("/tenants/{name}/keys"),
        &Value::Null,
    )
    .await;
    assert_eq!(key.status, 201, "{key:?}");
    let key = key.json();
    (
        key["key"].as_str().unwrap().to_owned(),
        key["id"].as_str().unwrap().to_owned(),
    )
}

pub(crate) fn task(key: &str) -> Value {
    json!({"url": "http://127.0.0.1:9/hook", "json": {"n": 1}, "idempotency_key": key})
}

/// A refusal's status, code and the start of its message.
fn check_refusal(reply: &Reply, status: u16, code: &str, message_start: &str) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert_eq!(reply.error_code().as_deref(), Some(code), "{reply:?}");
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with(message_start),
        "{message:?} should start with {message_start:?}"
    );
}

#[tokio::test]
async fn a_tenant_is_created_read_changed_and_deleted() {
    let h = admin_harness().await;
    let created = call(
        &h,
        ADMIN,
        "POST",
        "/tenants",
        &json!({"name": "acme", "weight": 3, "max_pending": 10}),
    )
    .await;
    assert_eq!(created.status, 201, "{created:?}");
    let view = created.json();
    assert_eq!(view["name"], "acme");
    assert_eq!(view["weight"], 3);
    assert_eq!(view["max_pending"], 10);
    assert_eq!(view["submit_rate_per_s"], Value::Null);
    assert_eq!(view["submit_burst"], Value::Null);
    assert_eq!(view["pending"], 0);
    assert_eq!(view["keys"], json!([]));

    let cases: &[(Value, u16, &str, &str)] = &[
        (json!({"name": "acme"}), 409, "tenant_exists", "name: "),
        (json!({"name": "Acme"}), 400, "invalid_request", "name: "),
        (
            json!({"weight": 2}),
            400,
            "invalid_request",
            "name: required",
        ),
        (
            json!({"name": "b", "weight": 0}),
            400,
            "invalid_request",
            "weight: ",
        ),
        (
            json!({"name": "b", "colour": 1}),
            400,
            "invalid_request",
            "colour: ",
        ),
        (
            json!({"name": "b", "submit_rate_per_s": -1}),
            400,
            "invalid_request",
            "submit_rate_per_s: ",
        ),
    ];
    for (body, status, code, start) in cases {
        let reply = call(&h, ADMIN, "POST", "/tenants", body).await;
        check_refusal(&reply, *status, code, start);
    }

    let key = call(&h, ADMIN, "POST", "/tenants/acme/keys", &json!({})).await;
    assert_eq!(key.status, 201, "{key:?}");
    let made = key.json();
    let secret = made["key"].as_str().unwrap().to_owned();
    assert!(
        secret.starts_with("tck_") && secret.len() >= 4 + 43,
        "{secret}"
    );
    let id = made["id"].as_str().unwrap().to_owned();
    let with_field = call(&h, ADMIN, "POST", "/tenants/acme/keys", &json!({"x": 1})).await;
    check_refusal(&with_field, 400, "invalid_request", "x: ");
    let no_tenant = call(&h, ADMIN, "POST", "/tenants/nope/keys", &Value::Null).await;
    check_refusal(&no_tenant, 404, "not_found", "");

    // The key is listed by id, never shown again.
    let one = call(&h, ADMIN, "GET", "/tenants/acme", &Value::Null).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["keys"][0]["id"], id.as_str());
    assert_eq!(one.json()["keys"][0]["last_used_at"], Value::Null);
    let list = call(&h, ADMIN, "GET", "/tenants", &Value::Null).await;
    for reply in [&one, &list] {
        let text = String::from_utf8_lossy(&reply.body);
        assert!(!text.contains(&secret) && !text.contains("tck_"), "{text}");
    }
    assert_eq!(list.json()["tenants"][0]["name"], "acme");

    // A change names what it changes; null clears.
    let changed = call(
        &h,
        ADMIN,
        "PUT",
        "/tenants/acme",
        &json!({"max_pending": null, "submit_rate_per_s": 2.5}),
    )
    .await;
    assert_eq!(changed.status, 200, "{changed:?}");
    assert_eq!(changed.json()["max_pending"], Value::Null);
    assert_eq!(changed.json()["submit_rate_per_s"], 2.5);
    assert_eq!(changed.json()["weight"], 3);
    let unknown = call(&h, ADMIN, "PUT", "/tenants/acme", &json!({"pending": 1})).await;
    check_refusal(&unknown, 400, "invalid_request", "pending: ");
    let renamed = call(&h, ADMIN, "PUT", "/tenants/acme", &json!({"name": "b"})).await;
    check_refusal(&renamed, 400, "invalid_request", "name: ");
    let missing = call(&h, ADMIN, "PUT", "/tenants/nope", &json!({"weight": 2})).await;
    check_refusal(&missing, 404, "not_found", "");

    // Not while it has tasks; then gone with its keys.
    let submitted = call(&h, &secret, "POST", "/tasks", &task("k1")).await;
    assert_eq!(submitted.status, 201, "{submitted:?}");
    let busy = call(&h, ADMIN, "DELETE", "/tenants/acme", &Value::Null).await;
    check_refusal(
        &busy,
        409,
        "tenant_not_empty",
        "tenant \"acme\" still has tasks",
    );
    let id_of = submitted.json()["id"].as_str().unwrap().to_owned();
    let canceled = call(
        &h,
        ADMIN,
        "POST",
        &format!("/tasks/{id_of}/cancel"),
        &Value::Null,
    )
    .await;
    assert_eq!(canceled.status, 200);
    let deleted = call(
        &h,
        ADMIN,
        "DELETE",
        &format!("/tasks/{id_of}"),
        &Value::Null,
    )
    .await;
    assert_eq!(deleted.status, 204);
    let gone = call(&h, ADMIN, "DELETE", "/tenants/acme", &Value::Null).await;
    assert_eq!(gone.status, 204, "{gone:?}");
    let after = call(&h, ADMIN, "GET", "/tenants/acme", &Value::Null).await;
    check_refusal(&after, 404, "not_found", "");
    let key_after = call(&h, &secret, "GET", "/tasks", &Value::Null).await;
    assert_eq!(key_after.status, 401, "the tenant's keys went with it");
}

#[tokio::test]
async fn a_tenant_s_key_reaches_only_its_own_tasks() {
    let h = admin_harness().await;
    let a = tenant_with_key(&h, "a", json!({})).await;
    let b = tenant_with_key(&h, "b", json!({})).await;
    let mine = call(&h, &a, "POST", "/tasks", &task("same-key")).await;
    assert_eq!(mine.status, 201, "{mine:?}");
    assert_eq!(mine.json()["tenant"], "a");
    let id = mine.json()["id"].as_str().unwrap().to_owned();
    // Idempotency keys are per tenant: b's same key is its own task.
    let theirs = call(&h, &b, "POST", "/tasks", &task("same-key")).await;
    assert_eq!(theirs.status, 201, "{theirs:?}");
    assert_ne!(theirs.json()["id"], mine.json()["id"]);
    assert_eq!(theirs.json()["tenant"], "b");
    let admins = call(&h, ADMIN, "POST", "/tasks", &task("same-key")).await;
    assert_eq!(admins.status, 201);
    assert_eq!(admins.json()["tenant"], Value::Null);
    let admin_id = admins.json()["id"].as_str().unwrap().to_owned();

    // Another tenant's id (or the admin's task) is unknown to b, on every
    // route that takes one.
    for target in [&id, &admin_id] {
        for (method, path) in [
            ("GET", format!("/tasks/{target}")),
            ("GET", format!("/tasks/{target}?wait_ms=1000")),
            ("GET", format!("/tasks/{target}/result")),
            ("POST", format!("/tasks/{target}/cancel")),
            ("POST", format!("/tasks/{target}/retry")),
            ("DELETE", format!("/tasks/{target}")),
        ] {
            let reply = call(&h, &b, method, &path, &Value::Null).await;
            assert_eq!(reply.status, 404, "{method} {path}: {reply:?}");
            assert_eq!(reply.error_code().as_deref(), Some("not_found"));
        }
    }
    // Nothing happened to a's task; a and the admin see it.
    let seen = call(&h, &a, "GET", &format!("/tasks/{id}"), &Value::Null).await;
    assert_eq!(seen.status, 200);
    assert_eq!(seen.json()["state"], "pending");
    let by_admin = call(&h, ADMIN, "GET", &format!("/tasks/{id}"), &Value::Null).await;
    assert_eq!(by_admin.json()["tenant"], "a");

    // Listings: each its own, whatever filter it gives; the admin all, or
    // one tenant's.
    let ids = |reply: Reply| -> Vec<String> {
        reply.json()["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        ids(call(&h, &a, "GET", "/tasks", &Value::Null).await),
        [id.as_str()]
    );
    assert_eq!(
        ids(call(&h, &a, "GET", "/tasks?tenant=b", &Value::Null).await),
        [id.as_str()]
    );
    assert_eq!(
        ids(call(&h, ADMIN, "GET", "/tasks", &Value::Null).await).len(),
        3
    );
    assert_eq!(
        ids(call(&h, ADMIN, "GET", "/tasks?tenant=a", &Value::Null).await),
        [id.as_str()]
    );
    let bad = call(&h, ADMIN, "GET", "/tasks?tenant=A%20B", &Value::Null).await;
    check_refusal(&bad, 400, "invalid_request", "tenant: ");

    // Bulk: b's cancel-everything reaches only b's task.
    let count = |reply: Reply| reply.json()["matched"].as_u64().unwrap();
    let dry = json!({"action": "cancel", "filter": {}, "dry_run": true});
    assert_eq!(count(call(&h, &b, "POST", "/tasks/bulk", &dry).await), 1);
    assert_eq!(count(call(&h, ADMIN, "POST", "/tasks/bulk", &dry).await), 3);
    let admin_a = json!({"action": "cancel", "filter": {"tenant": "a"}, "dry_run": true});
    assert_eq!(
        count(call(&h, ADMIN, "POST", "/tasks/bulk", &admin_a).await),
        1
    );
    let all = json!({"action": "cancel", "filter": {"tenant": "a"}});
    assert_eq!(count(call(&h, &b, "POST", "/tasks/bulk", &all).await), 1);
    let still = call(&h, &a, "GET", &format!("/tasks/{id}"), &Value::Null).await;
    assert_eq!(
        still.json()["state"],
        "pending",
        "b's bulk cancel left a's task"
    );

    // a acts on its own.
    let canceled = call(&h, &a, "POST", &format!("/tasks/{id}/cancel"), &Value::Null).await;
    assert_eq!(canceled.status, 200, "{canceled:?}");
    let retried = call(&h, &a, "POST", &format!("/tasks/{id}/retry"), &Value::Null).await;
    assert_eq!(retried.status, 200, "{retried:?}");
}

#[tokio::test]
async fn the_admin_s_routes_are_refused_to_a_key() {
    let h = admin_harness().await;
    let a = tenant_with_key(&h, "a", json!({})).await;
    let routes: &[(&str, &str, Value)] = &[
        ("GET", "/destinations", Value::Null),
        ("GET", "/destinations/127.0.0.1:9", Value::Null),
        ("PUT", "/destinations/127.0.0.1:9", json!({"paused": true})),
        ("POST", "/destinations/127.0.0.1:9/pause", Value::Null),
        ("POST", "/destinations/127.0.0.1:9/resume", Value::Null),
        ("GET", "/schedules", Value::Null),
        ("POST", "/schedules", json!({})),
        ("GET", "/tenants", Value::Null),
        ("GET", "/tenants/a", Value::Null),
        ("POST", "/tenants", json!({"name": "c"})),
        ("PUT", "/tenants/a", json!({"weight": 1000})),
        ("DELETE", "/tenants/a", Value::Null),
        ("POST", "/tenants/a/keys", Value::Null),
        (
            "DELETE",
            "/tenants/a/keys/key_0000000000000000",
            Value::Null,
        ),
        ("POST", "/admin/backup", json!({"to": "/tmp/x.db"})),
    ];
    for (method, path, body) in routes {
        let reply = call(&h, &a, method, path, body).await;
        assert_eq!(reply.status, 403, "{method} {path}: {reply:?}");
        assert_eq!(
            reply.error_code().as_deref(),
            Some("forbidden"),
            "{method} {path}"
        );
    }
    // The probes stay open; the tenant is untouched.
    assert_eq!(
        call(&h, &a, "GET", "/healthz", &Value::Null).await.status,
        200
    );
    let tenant = call(&h, ADMIN, "GET", "/tenants/a", &Value::Null).await;
    assert_eq!(tenant.json()["weight"], 1);
}

#[tokio::test]
async fn quotas_answer_429_naming_the_limit_alone_and_per_batch_item() {
    let h = admin_harness().await;
    let pending = tenant_with_key(&h, "p", json!({"max_pending": 2})).await;
    for k in ["p1", "p2"] {
        assert_eq!(
            call(&h, &pending, "POST", "/tasks", &task(k)).await.status,
            201
        );
    }
    let over = call(&h, &pending, "POST", "/tasks", &task("p3")).await;
    check_refusal(&over, 429, "quota_exceeded", "max_pending: ");
    assert_eq!(over.header("retry-after"), Some("1"));
    // The same key again adds nothing: 200 over the limit.
    let again = call(&h, &pending, "POST", "/tasks", &task("p1")).await;
    assert_eq!(again.status, 200, "{again:?}");
    // A batch: the existing key answers 200, the new ones 429 each.
    let batch = json!({"tasks": [task("p1"), task("p4"), task("p5")]});
    let answered = call(&h, &pending, "POST", "/tasks/batch", &batch).await;
    assert_eq!(answered.status, 200, "{answered:?}");
    let statuses: Vec<u64> = answered.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [200, 429, 429]);
    assert_eq!(
        answered.json()["results"][1]["error"]["code"],
        "quota_exceeded"
    );

    // A rate: the burst, then 429 until a token comes (the clock stands
    // still here, so none comes).
    let rated = tenant_with_key(
        &h,
        "r",
        json!({"submit_rate_per_s": 0.5, "submit_burst": 2}),
    )
    .await;
    let first = call(&h, &rated, "POST", "/tasks", &task("r1")).await;
    assert_eq!(first.status, 201);
    let batch = json!({"tasks": [task("r2"), task("r3"), task("r4")]});
    let answered = call(&h, &rated, "POST", "/tasks/batch", &batch).await;
    let results = answered.json()["results"].clone();
    assert_eq!(results[0]["status"], 201, "{results}");
    assert_eq!(results[1]["status"], 429, "{results}");
    assert_eq!(results[2]["status"], 429, "{results}");
    let message = results[1]["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("submit_rate_per_s: "), "{message}");
    let over = call(&h, &rated, "POST", "/tasks", &task("r5")).await;
    check_refusal(&over, 429, "quota_exceeded", "submit_rate_per_s: ");
    assert_eq!(over.header("retry-after"), Some("2"));
    // Only r1 and r2 were committed.
    let listed = call(&h, &rated, "GET", "/tasks", &Value::Null).await;
    assert_eq!(listed.json()["tasks"].as_array().unwrap().len(), 2);
    // The admin has no quota.
    for k in ["x1", "x2", "x3"] {
        assert_eq!(
            call(&h, ADMIN, "POST", "/tasks", &task(k)).await.status,
            201
        );
    }

    // The admin's to read: it names every tenant.
    let metrics = call(&h, ADMIN, "GET", "/metrics", &Value::Null).await;
    let text = String::from_utf8_lossy(&metrics.body);
    for line in [
        r#"taskcenter_quota_rejections_total{tenant="p",limit="max_pending"} 3"#,
        r#"taskcenter_quota_rejections_total{tenant="r",limit="submit_rate_per_s"} 3"#,
        r#"taskcenter_tenant_pending{tenant="p"} 2"#,
        r#"taskcenter_tenant_pending{tenant="r"} 2"#,
        r#"taskcenter_tenant_in_flight{tenant="p"} 0"#,
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    assert!(!text.contains("tck_"), "no key in the metrics");
}

#[tokio::test]
async fn a_revoked_key_is_refused_at_once() {
    let h = admin_harness().await;
    let a = tenant_with_key(&h, "a", json!({})).await;
    let second = call(&h, ADMIN, "POST", "/tenants/a/keys", &Value::Null).await;
    let second_key = second.json()["key"].as_str().unwrap().to_owned();
    let second_id = second.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        call(&h, &second_key, "GET", "/tasks", &Value::Null)
            .await
            .status,
        200
    );
    let revoked = call(
        &h,
        ADMIN,
        "DELETE",
        &format!("/tenants/a/keys/{second_id}"),
        &Value::Null,
    )
    .await;
    assert_eq!(revoked.status, 204, "{revoked:?}");
    let refused = call(&h, &second_key, "GET", "/tasks", &Value::Null).await;
    check_refusal(
        &refused,
        401,
        "unauthorized",
        "Authorization: the credential was not accepted",
    );
    // The other key works still; an unknown key is 401, refused with the
    // same words as a revoked one; revoking twice 404.
    assert_eq!(
        call(&h, &a, "GET", "/tasks", &Value::Null).await.status,
        200
    );
    let made_up = format!("tck_{}", "A".repeat(43));
    let unknown = call(&h, &made_up, "GET", "/tasks", &Value::Null).await;
    assert_eq!(unknown.status, 401);
    assert_eq!(unknown.json()["error"], refused.json()["error"]);
    let twice = call(
        &h,
        ADMIN,
        "DELETE",
        &format!("/tenants/a/keys/{second_id}"),
        &Value::Null,
    )
    .await;
    check_refusal(&twice, 404, "not_found", "");
    // The remaining key's use was recorded.
    let tenant = call(&h, ADMIN, "GET", "/tenants/a", &Value::Null).await;
    let keys = tenant.json()["keys"].clone();
    assert_eq!(keys.as_array().unwrap().len(), 1, "{keys}");
    assert_eq!(keys[0]["last_used_at"], crate::support::NOW_TEXT);
}

/// Without `--api-token` every request without a
/// credential is the admin, so a tenant's key would keep nothing apart from
/// anonymous callers: tenants and keys are not made there.
#[tokio::test]
async fn without_an_admin_token_tenants_and_keys_are_refused() {
    let h = harness(HttpConfig::default()).await;
    let json = [("content-type", "application/json")];
    let created = h.call("POST", "/tenants", &json, br#"{"name":"a"}"#).await;
    check_refusal(&created, 403, "tenants_need_token", "POST /tenants: ");
    let listed = h.call("GET", "/tenants", &[], b"").await;
    assert_eq!(listed.json()["tenants"], json!([]), "{listed:?}");
    // A tenant already in the store (a server refuses to start so): no key.
    h.store
        .create_tenant("b".into(), Default::default(), crate::support::NOW)
        .await
        .unwrap();
    let key = h.call("POST", "/tenants/b/keys", &[], b"").await;
    check_refusal(&key, 403, "tenants_need_token", "POST /tenants/b/keys: ");
    // With a token both are the admin's as before.
    let h = admin_harness().await;
    let created = call(&h, ADMIN, "POST", "/tenants", &json!({"name": "a"})).await;
    assert_eq!(created.status, 201, "{created:?}");
}

#[tokio::test]
async fn without_an_admin_token_a_key_is_still_scoped() {
    let h = harness(HttpConfig::default()).await;
    // No token: a request without a credential is the admin, as before.
    // The tenant and its key were made before (a server refuses to start
    // so; the handler still keeps the key's scope).
    h.store
        .create_tenant("a".into(), Default::default(), crate::support::NOW)
        .await
        .unwrap();
    let key = tc_model::tenant::key::key_text(&[7; tc_model::tenant::key::SECRET_BYTES]);
    h.store
        .create_api_key(
            "a".into(),
            "key_0000000000000001".into(),
            tc_model::tenant::key::KeyHash::of(&key),
            crate::support::NOW,
        )
        .await
        .unwrap();
    let admins = h
        .call(
            "POST",
            "/tasks",
            &[("content-type", "application/json")],
            task("k").to_string().as_bytes(),
        )
        .await;
    let id = admins.json()["id"].as_str().unwrap().to_owned();
    let reply = call(&h, &key, "GET", &format!("/tasks/{id}"), &Value::Null).await;
    assert_eq!(reply.status, 404);
    let reply = call(&h, &key, "GET", "/destinations", &Value::Null).await;
    assert_eq!(reply.status, 403);
}

/// A tenant's signing secrets are write-only: taken on create
/// and update, shown as a count by every view, never repeated (not even in
/// a refusal); each change wakes the worker. A destination shows whom it
/// shares its headers and secrets with, and refuses a list that is not
/// tenant names or `["*"]` alone.
#[tokio::test]
async fn signing_secrets_are_write_only_and_destinations_name_whom_they_share_with() {
    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let h = admin_harness().await;
    let shows_no_secret = |reply: &Reply| {
        let text = String::from_utf8_lossy(&reply.body).into_owned();
        // The key's base64: a refusal may say what a secret looks like.
        assert!(!text.contains(&SECRET[6..]), "{text}");
    };
    let wakes = h.wakes();
    let created = call(
        &h,
        ADMIN,
        "POST",
        "/tenants",
        &json!({"name": "acme", "signing_secrets": [SECRET]}),
    )
    .await;
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(created.json()["signing_secrets"], 1);
    shows_no_secret(&created);
    assert!(h.wakes() > wakes, "a new tenant's secrets wake the worker");
    for path in ["/tenants/acme", "/tenants"] {
        let read = call(&h, ADMIN, "GET", path, &Value::Null).await;
        assert_eq!(read.status, 200, "{read:?}");
        let view = read.json();
        let view = view.get("tenants").map_or(&view, |list| &list[0]);
        assert_eq!(view["signing_secrets"], 1, "{path}");
        shows_no_secret(&read);
    }
    let wakes = h.wakes();
    let cleared = call(
        &h,
        ADMIN,
        "PUT",
        "/tenants/acme",
        &json!({"signing_secrets": null}),
    )
    .await;
    assert_eq!(cleared.json()["signing_secrets"], 0, "{cleared:?}");
    assert!(h.wakes() > wakes, "a changed tenant wakes the worker");
    let bad = format!("{SECRET}x");
    let refused = call(
        &h,
        ADMIN,
        "PUT",
        "/tenants/acme",
        &json!({"signing_secrets": [bad]}),
    )
    .await;
    check_refusal(&refused, 400, "invalid_request", "signing_secrets: ");
    shows_no_secret(&refused);

    let shared = call(
        &h,
        ADMIN,
        "PUT",
        "/destinations/127.0.0.1:9",
        &json!({"share_with_tenants": ["zeta", "acme"]}),
    )
    .await;
    assert_eq!(shared.status, 200, "{shared:?}");
    assert_eq!(shared.json()["share_with_tenants"], json!(["acme", "zeta"]));
    for (list, start) in [
        (json!(["*", "acme"]), "share_with_tenants: "),
        (json!(["Acme"]), "share_with_tenants: "),
        (json!("acme"), "share_with_tenants: "),
    ] {
        let refused = call(
            &h,
            ADMIN,
            "PUT",
            "/destinations/127.0.0.1:9",
            &json!({ "share_with_tenants": list }),
        )
        .await;
        check_refusal(&refused, 400, "invalid_request", start);
    }
    let read = call(&h, ADMIN, "GET", "/destinations/127.0.0.1:9", &Value::Null).await;
    assert_eq!(read.json()["share_with_tenants"], json!(["acme", "zeta"]));
}

/// The issue's reproduction: a tenant whose submit bucket
/// is empty is deleted and made again, here and on another node (straight
/// in the shared store, at a later time); a change of its rate settings
/// likewise. Each time the first submit passes: the new tenant, or the new
/// rate, starts with a full bucket.
#[tokio::test]
async fn a_deleted_or_changed_tenant_starts_with_a_full_bucket() {
    let h = admin_harness().await;
    // One token, and the next in 1000 s: the clock stands still here.
    let rate = json!({"submit_rate_per_s": 0.001, "submit_burst": 1});
    let key = tenant_with_key(&h, "r", rate.clone()).await;

    // Empties the bucket (the task is then canceled and deleted, so that
    // the tenant may go) and checks that it is empty.
    async fn empty_bucket(h: &Harness, key: &str, n: &str) {
        let made = call(h, key, "POST", "/tasks", &task(n)).await;
        assert_eq!(made.status, 201, "{made:?}");
        let over = call(h, key, "POST", "/tasks", &task(&format!("{n}-over"))).await;
        check_refusal(&over, 429, "quota_exceeded", "submit_rate_per_s: ");
        let id = made.json()["id"].as_str().unwrap().to_owned();
        let canceled = call(
            h,
            ADMIN,
            "POST",
            &format!("/tasks/{id}/cancel"),
            &Value::Null,
        )
        .await;
        assert_eq!(canceled.status, 200, "{canceled:?}");
        let deleted = call(h, ADMIN, "DELETE", &format!("/tasks/{id}"), &Value::Null).await;
        assert_eq!(deleted.status, 204, "{deleted:?}");
    }

    // Deleted and made again through this node.
    empty_bucket(&h, &key, "a").await;
    let deleted = call(&h, ADMIN, "DELETE", "/tenants/r", &Value::Null).await;
    assert_eq!(deleted.status, 204, "{deleted:?}");
    let key = tenant_with_key(&h, "r", rate.clone()).await;
    let first = call(&h, &key, "POST", "/tasks", &task("b")).await;
    assert_eq!(
        first.status, 201,
        "a re-created tenant's first submit: {first:?}"
    );
    let over = call(&h, &key, "POST", "/tasks", &task("b-over")).await;
    check_refusal(&over, 429, "quota_exceeded", "submit_rate_per_s: ");

    // Deleted and made again by another node: this node is never told,
    // the tenant it finds has another creation time.
    let id = first.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        call(
            &h,
            ADMIN,
            "POST",
            &format!("/tasks/{id}/cancel"),
            &Value::Null
        )
        .await
        .status,
        200
    );
    assert_eq!(
        call(&h, ADMIN, "DELETE", &format!("/tasks/{id}"), &Value::Null)
            .await
            .status,
        204
    );
    h.store.delete_tenant("r".into()).await.unwrap();
    let settings = tc_model::tenant::TenantUpdate {
        submit_rate_per_s: Some(Some(0.001)),
        submit_burst: Some(Some(1)),
        ..Default::default()
    };
    let later = tc_model::Timestamp::from_millis(crate::support::NOW.as_millis() + 1);
    h.store
        .create_tenant("r".into(), settings, later)
        .await
        .unwrap();
    let key = call(&h, ADMIN, "POST", "/tenants/r/keys", &Value::Null)
        .await
        .json()["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let first = call(&h, &key, "POST", "/tasks", &task("c")).await;
    assert_eq!(first.status, 201, "re-created on another node: {first:?}");

    // Its rate settings changed (here, and on another node): a full
    // bucket under the new ones. A change of another setting keeps it.
    let over = call(&h, &key, "POST", "/tasks", &task("c-over")).await;
    check_refusal(&over, 429, "quota_exceeded", "submit_rate_per_s: ");
    let weight = call(&h, ADMIN, "PUT", "/tenants/r", &json!({"weight": 3})).await;
    assert_eq!(weight.status, 200, "{weight:?}");
    let still = call(&h, &key, "POST", "/tasks", &task("c-over")).await;
    check_refusal(&still, 429, "quota_exceeded", "submit_rate_per_s: ");
    let changed = call(&h, ADMIN, "PUT", "/tenants/r", &json!({"submit_burst": 2})).await;
    assert_eq!(changed.status, 200, "{changed:?}");
    for n in ["d1", "d2"] {
        let made = call(&h, &key, "POST", "/tasks", &task(n)).await;
        assert_eq!(made.status, 201, "after the rate changed: {made:?}");
    }
    let over = call(&h, &key, "POST", "/tasks", &task("d3")).await;
    check_refusal(&over, 429, "quota_exceeded", "submit_rate_per_s: ");
    let elsewhere = tc_model::tenant::TenantUpdate {
        submit_rate_per_s: Some(Some(0.002)),
        ..Default::default()
    };
    h.store
        .update_tenant("r".into(), elsewhere, later)
        .await
        .unwrap();
    let made = call(&h, &key, "POST", "/tasks", &task("d3")).await;
    assert_eq!(
        made.status, 201,
        "after another node changed the rate: {made:?}"
    );
}
