//! Writes made for a tenant through the handler: a key revoked,
//! or its tenant deleted, while a request's body is still arriving writes
//! nothing (401), and the name made again inherits no task; retries, by
//! the tenant or the admin, alone or in bulk, count against the tenant's
//! `max_pending` and submit rate as submits do.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::support::{Harness, Reply};
use crate::tenants::{ADMIN, admin_harness, call, task, tenant_with_key_and_id as tenant_with_key};

/// A request body that arrives only when the test sends it, and says when
/// the handler first waits for it (by then the caller was resolved).
struct HeldBody {
    bytes: Option<oneshot::Receiver<Bytes>>,
    waiting: Option<oneshot::Sender<()>>,
}

impl Body for HeldBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(waiting) = self.waiting.take() {
            let _ = waiting.send(());
        }
        let Some(bytes) = self.bytes.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(bytes).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(sent) => {
                self.bytes = None;
                Poll::Ready(sent.ok().map(|b| Ok(Frame::data(b))))
            }
        }
    }
}

/// Sends `method path` with `key` and `body`, whose bytes the handler gets
/// only after `meanwhile` ran (started once the handler waits for them).
async fn with_held_body(
    h: &Harness,
    key: &str,
    method: &str,
    path: &str,
    body: &Value,
    meanwhile: impl AsyncFnOnce(),
) -> Reply {
    let bytes = Bytes::from(body.to_string());
    let (send, held) = oneshot::channel();
    let (waiting, waits) = oneshot::channel();
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .header("content-length", bytes.len())
        .body(HeldBody {
            bytes: Some(held),
            waiting: Some(waiting),
        })
        .unwrap();
    let app = std::sync::Arc::clone(&h.app);
    let answer = tokio::spawn(async move { tc_http::handle(&app, request).await });
    waits.await.unwrap();
    meanwhile().await;
    send.send(bytes).unwrap();
    let response = answer.await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body,
    }
}

/// The admin's listing of `tenant`'s tasks.
async fn tasks_of(h: &Harness, tenant: &str) -> Vec<Value> {
    let listed = call(
        h,
        ADMIN,
        "GET",
        &format!("/tasks?tenant={tenant}"),
        &Value::Null,
    )
    .await;
    assert_eq!(listed.status, 200, "{listed:?}");
    listed.json()["tasks"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_key_revoked_while_its_body_is_held_writes_nothing() {
    let h = admin_harness().await;
    let (key, key_id) = tenant_with_key(&h, "t", json!({})).await;
    let revoke = async || {
        let path = format!("/tenants/t/keys/{key_id}");
        let revoked = call(&h, ADMIN, "DELETE", &path, &Value::Null).await;
        assert_eq!(revoked.status, 204, "{revoked:?}");
    };
    let refused = with_held_body(&h, &key, "POST", "/tasks", &task("held-1"), revoke).await;
    assert_eq!(refused.status, 401, "{refused:?}");
    assert_eq!(refused.error_code().as_deref(), Some("unauthorized"));
    assert!(tasks_of(&h, "t").await.is_empty(), "a task was written");
}

#[tokio::test]
async fn a_tenant_deleted_while_a_body_is_held_gets_no_task_and_its_name_starts_empty() {
    let h = admin_harness().await;
    let (key, _) = tenant_with_key(&h, "t", json!({})).await;
    let delete = async || {
        let deleted = call(&h, ADMIN, "DELETE", "/tenants/t", &Value::Null).await;
        assert_eq!(deleted.status, 204, "{deleted:?}");
    };
    let refused = with_held_body(&h, &key, "POST", "/tasks", &task("held-1"), delete).await;
    assert_eq!(refused.status, 401, "{refused:?}");
    // Made again, with a limit of one: nothing of the old name counts.
    let (again, _) = tenant_with_key(&h, "t", json!({"max_pending": 1})).await;
    assert!(
        tasks_of(&h, "t").await.is_empty(),
        "the name inherited a task"
    );
    let first = call(&h, &again, "POST", "/tasks", &task("new-1")).await;
    assert_eq!(first.status, 201, "{first:?}");
}

#[tokio::test]
async fn a_bulk_action_whose_key_is_revoked_while_its_body_is_held_applies_nothing() {
    let h = admin_harness().await;
    let (key, key_id) = tenant_with_key(&h, "t", json!({})).await;
    for k in ["b1", "b2", "b3"] {
        assert_eq!(call(&h, &key, "POST", "/tasks", &task(k)).await.status, 201);
    }
    let revoke = async || {
        let path = format!("/tenants/t/keys/{key_id}");
        assert_eq!(
            call(&h, ADMIN, "DELETE", &path, &Value::Null).await.status,
            204
        );
    };
    let bulk = json!({"action": "cancel", "filter": {}});
    let refused = with_held_body(&h, &key, "POST", "/tasks/bulk", &bulk, revoke).await;
    assert_eq!(refused.status, 401, "{refused:?}");
    let states: Vec<Value> = tasks_of(&h, "t")
        .await
        .iter()
        .map(|t| t["state"].clone())
        .collect();
    assert_eq!(states, ["pending", "pending", "pending"]);
}

/// Cancels every task of the tenant with `key` (they become retryable).
async fn cancel_all(h: &Harness, key: &str) {
    let canceled = call(
        h,
        key,
        "POST",
        "/tasks/bulk",
        &json!({"action": "cancel", "filter": {}}),
    )
    .await;
    assert_eq!(canceled.status, 200, "{canceled:?}");
}

#[tokio::test]
async fn retries_count_against_max_pending_alone_and_in_bulk() {
    let h = admin_harness().await;
    let (key, _) = tenant_with_key(&h, "t", json!({"max_pending": 2})).await;
    let mut ids = Vec::new();
    for round in 0..4 {
        let made = call(&h, &key, "POST", "/tasks", &task(&format!("m{round}"))).await;
        assert_eq!(made.status, 201, "{made:?}");
        ids.push(made.json()["id"].as_str().unwrap().to_owned());
        cancel_all(&h, &key).await;
    }
    for id in &ids[..2] {
        let retried = call(
            &h,
            &key,
            "POST",
            &format!("/tasks/{id}/retry"),
            &Value::Null,
        )
        .await;
        assert_eq!(retried.status, 200, "{retried:?}");
    }
    for credential in [key.as_str(), ADMIN] {
        let path = format!("/tasks/{}/retry", ids[2]);
        let over = call(&h, credential, "POST", &path, &Value::Null).await;
        assert_eq!(over.status, 429, "{over:?}");
        assert_eq!(over.error_code().as_deref(), Some("quota_exceeded"));
        assert_eq!(over.header("retry-after"), Some("1"));
    }
    let bulk = json!({"action": "retry", "filter": {}});
    for credential in [key.as_str(), ADMIN] {
        let answered = call(&h, credential, "POST", "/tasks/bulk", &bulk).await;
        assert_eq!(answered.status, 200, "{answered:?}");
        assert_eq!(answered.json()["applied"], 0, "{answered:?}");
        assert_eq!(answered.json()["refused_quota"], 2, "{answered:?}");
    }
    let pending = tasks_of(&h, "t")
        .await
        .iter()
        .filter(|t| t["state"] == "pending")
        .count();
    assert_eq!(pending, 2, "the tenant's pending tasks");
}

#[tokio::test]
async fn retries_take_the_submit_rate_s_tokens() {
    let h = admin_harness().await;
    // A burst of 3 and a rate so slow that no token comes back (the
    // harness's clock stands still).
    let settings = json!({"submit_rate_per_s": 0.001, "submit_burst": 3});
    let (key, _) = tenant_with_key(&h, "t", settings).await;
    let mut ids = Vec::new();
    for k in ["s1", "s2"] {
        let made = call(&h, &key, "POST", "/tasks", &task(k)).await;
        ids.push(made.json()["id"].as_str().unwrap().to_owned());
    }
    cancel_all(&h, &key).await;
    // One token left: one retry, then 429 for the next, by anyone.
    let path = |id: &str| format!("/tasks/{id}/retry");
    assert_eq!(
        call(&h, &key, "POST", &path(&ids[0]), &Value::Null)
            .await
            .status,
        200
    );
    for credential in [key.as_str(), ADMIN] {
        let over = call(&h, credential, "POST", &path(&ids[1]), &Value::Null).await;
        assert_eq!(over.status, 429, "{over:?}");
        let message = over.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.starts_with("submit_rate_per_s: "), "{message}");
    }
    let bulk = call(
        &h,
        ADMIN,
        "POST",
        "/tasks/bulk",
        &json!({"action": "retry", "filter": {}}),
    )
    .await;
    assert_eq!(bulk.status, 200, "{bulk:?}");
    assert_eq!(
        (
            bulk.json()["applied"].clone(),
            bulk.json()["refused_quota"].clone()
        ),
        (json!(0), json!(1)),
        "{bulk:?}"
    );
}
