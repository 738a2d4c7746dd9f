//! Operating tasks after the fact: retry a failed or canceled task, delete a
//! finished one.

use http::Method;
use serde_json::json;

use crate::support::{self, Api};

async fn retry(api: &Api, id: &str, body: &str) -> crate::support::api::Reply {
    let headers: &[(&str, &str)] = if body.is_empty() {
        &[]
    } else {
        &[("content-type", "application/json")]
    };
    api.send(
        Method::POST,
        &format!("/tasks/{id}/retry"),
        headers,
        body.to_owned(),
    )
    .await
}

async fn delete(api: &Api, id: &str) -> crate::support::api::Reply {
    api.send(Method::DELETE, &format!("/tasks/{id}"), &[], "")
        .await
}

#[tokio::test]
async fn a_failed_task_retried_by_hand_runs_again_with_a_fresh_budget() {
    let s = support::start().await;
    // One try allowed, and the first call of the key answers 503.
    let reply = s
        .api
        .post_json(
            "/tasks",
            &json!({"url": s.down.url("/flaky/1"), "idempotency_key": "again", "max_attempts": 1}),
        )
        .await;
    assert_eq!(reply.status, 201);
    let id = reply.id();
    let failed = s.api.wait_terminal(&id).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["error"], "http_503", "{failed}");

    let reopened = retry(&s.api, &id, "").await;
    assert_eq!(reopened.status, 200, "{:?}", reopened.json());
    let view = reopened.json();
    assert_eq!(view["state"], "pending", "{view}");
    assert!(
        view["error"].is_null() && view["http_status"].is_null(),
        "{view}"
    );

    let done = s.api.wait_terminal(&id).await;
    assert_eq!(done["state"], "success", "{done}");
    assert_eq!(done["attempt"], 2, "attempt numbers go on: {done}");
    assert_eq!(done["attempts"].as_array().map(Vec::len), Some(2), "{done}");
    assert_eq!(s.down.calls_with_key("again"), 2);

    // A succeeded task is not retried; an unknown one is not found.
    let refused = retry(&s.api, &id, "").await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.error_code(), "task_not_retryable");
    let unknown = retry(&s.api, "0190b8d0-0000-7000-8000-000000000000", "").await;
    assert_eq!(unknown.status, 404);
}

#[tokio::test]
async fn a_canceled_task_retried_with_a_delay_waits_for_it() {
    let mut s = support::start().await;
    let id = s.api.submit_new(&s.down.url("/gate"), "later").await;
    s.down.request_with_key("later").await;
    // Running: neither retried nor deleted.
    let refused = retry(&s.api, &id, "").await;
    assert_eq!(refused.status, 409, "{:?}", refused.json());
    assert_eq!(refused.error_code(), "task_not_retryable");
    let refused = delete(&s.api, &id).await;
    assert_eq!(refused.status, 409, "{:?}", refused.json());
    assert_eq!(refused.error_code(), "task_not_terminal");

    assert_eq!(s.api.cancel(&id).await.status, 200);
    let bad = retry(&s.api, &id, r#"{"delay_ms": -5}"#).await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.error_code(), "invalid_request");
    let reply = retry(&s.api, &id, r#"{"delay_ms": 3600000}"#).await;
    assert_eq!(reply.status, 200, "{:?}", reply.json());
    let view = reply.json();
    assert_eq!(view["state"], "pending", "{view}");
    // Pending and due in an hour: not deletable, and not called meanwhile.
    let refused = delete(&s.api, &id).await;
    assert_eq!(refused.error_code(), "task_not_terminal");
    assert_eq!(s.api.cancel(&id).await.status, 200);
    assert_eq!(s.down.calls_with_key("later"), 1);
}

#[tokio::test]
async fn deleting_a_finished_task_frees_its_key() {
    let s = support::start().await;
    let id = s.api.submit_new(&s.down.url("/ok"), "gone").await;
    assert_eq!(s.api.wait_terminal(&id).await["state"], "success");

    let reply = delete(&s.api, &id).await;
    assert_eq!(reply.status, 204);
    assert!(reply.body.is_empty());
    assert_eq!(s.api.get(&format!("/tasks/{id}")).await.status, 404);
    assert_eq!(s.api.get(&format!("/tasks/{id}/result")).await.status, 404);
    assert_eq!(delete(&s.api, &id).await.status, 404);

    // The key is free: another payload under it is a new task, not a 409.
    let again = s
        .api
        .submit(&s.down.url("/ok"), "gone", json!({"second": true}))
        .await;
    assert_eq!(again.status, 201, "{:?}", again.json());
    assert_ne!(again.id(), id);
}

#[tokio::test]
async fn a_delayed_task_waits_pending_until_its_time() {
    let s = support::start().await;
    let submitted = tokio::time::Instant::now();
    let reply = s
        .api
        .post_json(
            "/tasks",
            &json!({"url": s.down.url("/ok"), "idempotency_key": "soon", "delay_ms": 700}),
        )
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.json());
    let id = reply.id();
    let view = reply.json();
    assert_eq!(view["state"], "pending");
    assert!(view["run_at"].is_string(), "{view}");
    // The same request again is the same task.
    let again = s
        .api
        .post_json(
            "/tasks",
            &json!({"url": s.down.url("/ok"), "idempotency_key": "soon", "delay_ms": 700}),
        )
        .await;
    assert_eq!((again.status, again.id()), (200, id.clone()));
    let done = s.api.wait_terminal(&id).await;
    assert_eq!(done["state"], "success", "{done}");
    let call = s
        .down
        .requests()
        .into_iter()
        .find(|r| r.key() == "soon")
        .unwrap();
    assert!(
        call.at.duration_since(submitted) >= std::time::Duration::from_millis(700),
        "called {:?} after the submit",
        call.at.duration_since(submitted)
    );

    // Far ahead: pending, cancelable at once; both fields at once: refused.
    let far = s
        .api
        .post_json(
            "/tasks",
            &json!({"url": s.down.url("/ok"), "idempotency_key": "next-year", "run_at": "2099-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(
        far.status,
        400,
        "more than 365 days ahead: {:?}",
        far.json()
    );
    assert_eq!(far.error_code(), "invalid_request");
    let both = s
        .api
        .post_json(
            "/tasks",
            &json!({"url": s.down.url("/ok"), "idempotency_key": "both", "run_at": "2030-01-01T00:00:00Z", "delay_ms": 5}),
        )
        .await;
    assert_eq!(both.status, 400);
    let hour = s
        .api
        .post_json(
            "/tasks",
            &json!({"url": s.down.url("/ok"), "idempotency_key": "in-an-hour", "delay_ms": 3_600_000}),
        )
        .await;
    assert_eq!(hour.status, 201);
    let canceled = s.api.cancel(&hour.id()).await;
    assert_eq!(canceled.json()["state"], "canceled");
    assert_eq!(s.down.calls_with_key("in-an-hour"), 0);
}

#[tokio::test]
async fn a_batch_submit_commits_every_valid_task_and_each_runs() {
    let s = support::start().await;
    let mut tasks: Vec<serde_json::Value> = (0..50)
        .map(|i| json!({"url": s.down.url("/ok"), "idempotency_key": format!("batch-{i}"), "json": {"i": i}}))
        .collect();
    tasks.push(json!({"url": "ftp://nowhere/x", "idempotency_key": "bad"}));
    tasks.push(json!({"url": s.down.url("/ok"), "idempotency_key": "batch-0", "json": {"i": 0}}));
    tasks.push(
        json!({"url": s.down.url("/ok"), "idempotency_key": "batch-1", "json": {"other": 1}}),
    );
    let reply = s
        .api
        .post_json("/tasks/batch", &json!({ "tasks": tasks }))
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.json());
    let results = reply.json()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 53);
    let statuses: Vec<u64> = results
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert!(statuses[..50].iter().all(|&st| st == 201), "{statuses:?}");
    assert_eq!(&statuses[50..], [400, 200, 409]);
    assert_eq!(results[51]["task"]["id"], results[0]["task"]["id"]);
    for result in &results[..50] {
        let id = result["task"]["id"].as_str().unwrap();
        assert_eq!(s.api.wait_terminal(id).await["state"], "success");
    }
    for i in 0..50 {
        assert_eq!(s.down.calls_with_key(&format!("batch-{i}")), 1);
    }
    let empty = s.api.post_json("/tasks/batch", &json!({"tasks": []})).await;
    assert_eq!(empty.status, 400);
    assert_eq!(empty.error_code(), "invalid_request");
}

#[tokio::test]
async fn a_waiting_get_answers_as_soon_as_the_task_is_done() {
    let mut s = support::start().await;
    let id = s.api.submit_new(&s.down.url("/gate"), "waited").await;
    s.down.request_with_key("waited").await;
    let api = s.api.clone();
    let path = format!("/tasks/{id}?wait_ms=30000");
    let waiting = tokio::spawn(async move { api.get(&path).await });
    // Whether the request reads the task before or after the gate opens, it
    // must answer success well within its 30 s.
    s.down.open_gate();
    let reply = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
        .await
        .expect("a waiting request answers once the task is done, not at its deadline")
        .unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["state"], "success", "{:?}", reply.json());

    let bad = s.api.get(&format!("/tasks/{id}?wait_ms=60001")).await;
    assert_eq!(bad.status, 400);
}

#[tokio::test]
async fn retention_deletes_finished_tasks_past_their_state_s_time_and_keeps_the_rest() {
    let mut s = support::start_with(|c, _| {
        c.flag("--retain-success", "1s")
            .flag("--retain-failed", "forever")
            .flag("--retain-canceled", "forever");
    })
    .await;
    let done = s.api.submit_new(&s.down.url("/ok"), "short-lived").await;
    assert_eq!(s.api.wait_terminal(&done).await["state"], "success");
    let failed = s
        .api
        .submit_new(&s.down.url("/status/400"), "kept-failure")
        .await;
    assert_eq!(s.api.wait_terminal(&failed).await["state"], "failed");

    let pruned = s
        .server
        .logged_where(
            |v| v["message"] == "tasks_pruned" && v["success"] == 1,
            "tasks_pruned",
        )
        .await;
    assert_eq!(pruned["failed"], 0, "{pruned}");
    assert_eq!(s.api.get(&format!("/tasks/{done}")).await.status, 404);
    assert_eq!(s.api.task(&failed).await["state"], "failed");
    let metrics = String::from_utf8(s.api.get("/metrics").await.body.to_vec()).unwrap();
    assert!(
        metrics.contains(r#"taskcenter_pruned_total{state="success"} 1"#),
        "{metrics}"
    );
    // The key is free again.
    let again = s
        .api
        .submit(&s.down.url("/ok"), "short-lived", json!({"n": 2}))
        .await;
    assert_eq!(again.status, 201);
}
