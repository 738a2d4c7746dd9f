//! Tenants against the real server on SQLite: the admin makes
//! two tenants and their keys; each key reaches only its tenant's tasks
//! (another's id is 404 on every task route, listings and bulk actions are
//! narrowed, idempotency keys are per tenant), the admin's routes are 403
//! for a key, quotas answer 429 with Retry-After, a revoked key is 401 at
//! once, and tenants and keys survive a restart.

use http::Method;
use serde_json::{Value, json};

use crate::support::{self, Api, Setup};

const ADMIN: &str = "admin-s3cret";

async fn setup() -> Setup {
    support::start_with(|c, _| {
        c.flag("--api-token", ADMIN);
    })
    .await
}

/// Makes tenant `name` with `settings` and a key: a client with that key,
/// the key's id and the key.
async fn tenant(admin: &Api, name: &str, settings: Value) -> (Api, String, String) {
    let mut body = settings;
    body["name"] = json!(name);
    let created = admin.post_json("/tenants", &body).await;
    assert_eq!(created.status, 201, "{:?}", created.json());
    let key = admin
        .send(Method::POST, &format!("/tenants/{name}/keys"), &[], "")
        .await;
    assert_eq!(key.status, 201, "{:?}", key.body);
    let made = key.json();
    let secret = made["key"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("tck_") && secret.len() >= 47, "{secret}");
    (
        admin.with_token(&secret),
        made["id"].as_str().unwrap().to_owned(),
        secret,
    )
}

fn ids(tasks: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = tasks
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn two_tenants_and_the_admin() {
    let mut s = setup().await;
    let admin = s.api.with_token(ADMIN);
    let (a, _, _) = tenant(&admin, "team-a", json!({"weight": 2})).await;
    let (b, b_key_id, b_secret) = tenant(&admin, "team-b", json!({"max_pending": 2})).await;
    let url = s.down.url("/ok");

    // Each submits under the same idempotency key: two tasks, one each.
    let a_task = a.submit(&url, "order-1", json!({"n": 1})).await;
    assert_eq!(a_task.status, 201, "{:?}", a_task.json());
    assert_eq!(a_task.json()["tenant"], "team-a");
    let b_task = b.submit(&url, "order-1", json!({"n": 2})).await;
    assert_eq!(b_task.status, 201, "{:?}", b_task.json());
    assert_eq!(b_task.json()["tenant"], "team-b");
    let admin_task = admin.submit(&url, "order-1", json!({"n": 3})).await;
    assert_eq!(admin_task.status, 201);
    assert_eq!(admin_task.json()["tenant"], Value::Null);
    let (a_id, b_id, admin_id) = (a_task.id(), b_task.id(), admin_task.id());
    // The same key and payload again: the tenant's own task, 200.
    let again = a.submit(&url, "order-1", json!({"n": 1})).await;
    assert_eq!((again.status, again.id()), (200, a_id.clone()));

    // b cannot reach a's task nor the admin's: 404 on every route.
    for target in [&a_id, &admin_id] {
        for (method, path) in [
            (Method::GET, format!("/tasks/{target}")),
            (Method::GET, format!("/tasks/{target}?wait_ms=2000")),
            (Method::GET, format!("/tasks/{target}/result")),
            (Method::POST, format!("/tasks/{target}/cancel")),
            (Method::POST, format!("/tasks/{target}/retry")),
            (Method::DELETE, format!("/tasks/{target}")),
        ] {
            let reply = b.send(method.clone(), &path, &[], "").await;
            assert_eq!(reply.status, 404, "{method} {path}: {:?}", reply.body);
            assert_eq!(reply.error_code(), "not_found");
        }
    }
    assert_eq!(a.wait_terminal(&a_id).await["state"], "success");
    assert_eq!(b.wait_terminal(&b_id).await["state"], "success");
    let result = a.get(&format!("/tasks/{a_id}/result")).await;
    assert_eq!(result.status, 200);

    // Listings: each its own; the admin everything, or one tenant's.
    assert_eq!(ids(&a.list_all("").await), [a_id.as_str()]);
    assert_eq!(ids(&a.list_all("tenant=team-b").await), [a_id.as_str()]);
    assert_eq!(ids(&b.list_all("").await), [b_id.as_str()]);
    assert_eq!(admin.list_all("").await.len(), 3);
    assert_eq!(ids(&admin.list_all("tenant=team-b").await), [b_id.as_str()]);
    let bad = admin.get("/tasks?tenant=Team%20B").await;
    assert_eq!(
        (bad.status, bad.error_code()),
        (400, "invalid_request".into())
    );
    assert!(
        bad.error_message().starts_with("tenant"),
        "{}",
        bad.error_message()
    );

    // Bulk: b's delete-everything removes b's task only.
    let deleted = b
        .post_json("/tasks/bulk", &json!({"action": "delete", "filter": {}}))
        .await;
    assert_eq!(deleted.status, 200, "{:?}", deleted.json());
    assert_eq!(deleted.json()["applied"], 1);
    assert_eq!(admin.get(&format!("/tasks/{a_id}")).await.status, 200);
    assert_eq!(admin.get(&format!("/tasks/{admin_id}")).await.status, 200);

    // The admin's routes are not a key's.
    for (method, path, body) in [
        (Method::GET, "/destinations".to_owned(), ""),
        (
            Method::GET,
            format!("/destinations/{}", s.down.destination()),
            "",
        ),
        (
            Method::PUT,
            format!("/destinations/{}", s.down.destination()),
            r#"{"paused":true}"#,
        ),
        (Method::GET, "/schedules".to_owned(), ""),
        (Method::GET, "/tenants".to_owned(), ""),
        (Method::POST, "/tenants/team-a/keys".to_owned(), ""),
        (
            Method::POST,
            "/admin/backup".to_owned(),
            r#"{"to":"/tmp/x.db"}"#,
        ),
    ] {
        let reply = a
            .send(
                method.clone(),
                &path,
                &[("content-type", "application/json")],
                body,
            )
            .await;
        assert_eq!(reply.status, 403, "{method} {path}: {:?}", reply.body);
        assert_eq!(reply.error_code(), "forbidden");
    }
    assert_eq!(admin.get("/destinations").await.status, 200);

    // b's max_pending (2): a third pending task is 429, alone and in a batch.
    let held = s.down.url("/ok");
    let pause = admin
        .put_json(
            &format!("/destinations/{}", s.down.destination()),
            &json!({"paused": true}),
        )
        .await;
    assert_eq!(pause.status, 200);
    for k in ["p1", "p2"] {
        assert_eq!(b.submit(&held, k, json!({})).await.status, 201);
    }
    let over = b.submit(&held, "p3", json!({})).await;
    assert_eq!(over.status, 429, "{:?}", over.json());
    assert_eq!(over.error_code(), "quota_exceeded");
    assert!(
        over.error_message().starts_with("max_pending"),
        "{}",
        over.error_message()
    );
    assert_eq!(over.header("retry-after"), Some("1"));
    let batch = b
        .post_json(
            "/tasks/batch",
            &json!({"tasks": [
                {"url": held, "idempotency_key": "p1", "json": {}},
                {"url": held, "idempotency_key": "p4", "json": {}},
            ]}),
        )
        .await;
    assert_eq!(batch.status, 200);
    let results = batch.json()["results"].clone();
    assert_eq!(results[0]["status"], 200, "{results}");
    assert_eq!(results[1]["status"], 429, "{results}");
    assert_eq!(results[1]["error"]["code"], "quota_exceeded");
    // The admin has no quota.
    assert_eq!(admin.submit(&held, "p3", json!({})).await.status, 201);

    let tenant_view = admin.get("/tenants/team-b").await.json();
    assert_eq!(tenant_view["pending"], 2);
    assert_eq!(tenant_view["keys"][0]["id"], b_key_id.as_str());
    assert!(!String::from_utf8_lossy(&admin.get("/tenants").await.body).contains("tck_"));
    // The admin's to read with a token set: it names every tenant.
    let metrics = String::from_utf8_lossy(&admin.get("/metrics").await.body).into_owned();
    for line in [
        r#"taskcenter_tenant_pending{tenant="team-b"} 2"#,
        r#"taskcenter_quota_rejections_total{tenant="team-b",limit="max_pending"} 2"#,
    ] {
        assert!(metrics.contains(line), "{line} not in the metrics");
    }

    // A tenant with tasks stays; its keys and settings survive a restart.
    let busy = admin.send(Method::DELETE, "/tenants/team-b", &[], "").await;
    assert_eq!(
        (busy.status, busy.error_code()),
        (409, "tenant_not_empty".into())
    );
    s.server.terminate();
    s.server.wait_exit().await;
    s.restart().await;
    let admin = s.api.with_token(ADMIN);
    let b = s.api.with_token(&b_secret);
    assert_eq!(b.list_all("").await.len(), 2, "b's tasks after the restart");
    assert_eq!(admin.get("/tenants/team-b").await.json()["max_pending"], 2);
    assert_eq!(b.submit(&held, "p5", json!({})).await.status, 429);

    // Revoked: 401 at once; the admin token still sees everything.
    let revoked = admin
        .send(
            Method::DELETE,
            &format!("/tenants/team-b/keys/{b_key_id}"),
            &[],
            "",
        )
        .await;
    assert_eq!(revoked.status, 204);
    let refused = b.get("/tasks").await;
    assert_eq!(
        (refused.status, refused.error_code()),
        (401, "unauthorized".into())
    );
    assert_eq!(admin.list_all("tenant=team-b").await.len(), 2);
}

/// Without `--api-token` a request without a credential
/// is the admin, so tenants' keys would keep nothing apart. `POST /tenants`
/// is refused there, and a server whose database holds tenants does not
/// start without a token (exit 2, saying why); once they are deleted it
/// does.
#[tokio::test]
async fn tenants_need_an_admin_token() {
    let mut s = setup().await;
    let admin = s.api.with_token(ADMIN);
    tenant(&admin, "acme", json!({})).await;
    s.server.terminate();
    s.server.wait_exit().await;
    let mut bare = s.config.clone();
    bare.unset("--api-token");
    let (status, stderr) = bare.run_to_exit().await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    for part in ["1 tenant", "--api-token"] {
        assert!(stderr.contains(part), "{part:?} not in {stderr}");
    }

    s.restart().await;
    let admin = s.api.with_token(ADMIN);
    let deleted = admin.send(Method::DELETE, "/tenants/acme", &[], "").await;
    assert_eq!(deleted.status, 204);
    s.server.terminate();
    s.server.wait_exit().await;
    let server = bare.start().await;
    let anonymous = Api::new(server.base_url());
    let refused = anonymous
        .post_json("/tenants", &json!({"name": "acme"}))
        .await;
    assert_eq!(
        (refused.status, refused.error_code()),
        (403, "tenants_need_token".into()),
        "{:?}",
        refused.json()
    );
}
