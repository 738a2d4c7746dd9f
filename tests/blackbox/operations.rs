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

async fn bulk(api: &Api, body: serde_json::Value) -> crate::support::api::Reply {
    api.post_json("/tasks/bulk", &body).await
}

fn listed_ids(reply: &crate::support::api::Reply) -> Vec<String> {
    reply.json()["tasks"]
        .as_array()
        .map(|tasks| {
            tasks
                .iter()
                .filter_map(|t| t["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn filters_find_the_failures_and_bulk_actions_sweep_them() {
    let mut s = support::start().await;
    // Six tasks fail at once with a 400, two with a 503 after their one
    // try; one is held in flight, one succeeds.
    let mut bad = Vec::new();
    for i in 0..6 {
        let reply = s
            .api
            .post_json(
                "/tasks",
                &json!({"url": s.down.url("/status/400"), "idempotency_key": format!("bad-{i}")}),
            )
            .await;
        assert_eq!(reply.status, 201);
        bad.push(reply.id());
    }
    let mut busy = Vec::new();
    for i in 0..2 {
        let reply = s
            .api
            .post_json(
                "/tasks",
                &json!({"url": s.down.url("/status/503"), "idempotency_key": format!("busy-{i}"),
                        "max_attempts": 1}),
            )
            .await;
        busy.push(reply.id());
    }
    let good = s.api.submit_new(&s.down.url("/ok"), "good").await;
    let held = s.api.submit_new(&s.down.url("/slow"), "held").await;
    for id in bad.iter().chain(&busy).chain([&good]) {
        s.api.wait_terminal(id).await;
    }
    s.down.request_with_key("held").await;

    // Finding them.
    let failed_400 = s
        .api
        .get("/tasks?state=failed&error=http_400&limit=500")
        .await;
    assert_eq!(failed_400.status, 200, "{:?}", failed_400.json());
    assert_eq!(listed_ids(&failed_400), bad);
    let by_error = s.api.get("/tasks?error=http_503").await;
    assert_eq!(listed_ids(&by_error), busy);
    let by_key = s.api.get("/tasks?idempotency_key=good").await;
    assert_eq!(listed_ids(&by_key), vec![good.clone()]);
    let none_yet = s
        .api
        .get("/tasks?created_before=2000-01-01T00:00:00Z")
        .await;
    assert_eq!(listed_ids(&none_yet).len(), 0);
    let created = s.api.task(&good).await["created_at"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_default();
    let since = s
        .api
        .get(&format!("/tasks?created_after={created}&state=success"))
        .await;
    assert_eq!(listed_ids(&since), vec![good.clone()]);
    let destination = s.down.url("").trim_start_matches("http://").to_owned();
    assert_eq!(s.api.task(&good).await["destination"], destination.as_str());
    let here = s
        .api
        .get(&format!(
            "/tasks?destination={destination}&state=failed&limit=500"
        ))
        .await;
    assert_eq!(listed_ids(&here).len(), 8);
    let elsewhere = s.api.get("/tasks?destination=example.com:443").await;
    assert_eq!(listed_ids(&elsewhere).len(), 0);
    let refused = s.api.get("/tasks?created_after=noon").await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.error_code(), "invalid_request");

    // A dry run counts and changes nothing.
    let dry = bulk(
        &s.api,
        json!({"action": "retry", "filter": {"state": "failed"}, "dry_run": true}),
    )
    .await;
    assert_eq!(dry.status, 200, "{:?}", dry.json());
    assert_eq!(dry.json()["matched"], 8);
    assert_eq!(dry.json()["applied"], 0);
    assert_eq!(dry.json()["sample"].as_array().map(Vec::len), Some(8));
    assert_eq!(s.api.task(&bad[0]).await["state"], "failed");

    // Retry of the 503s: they run again (and fail again, once each).
    let retried = bulk(
        &s.api,
        json!({"action": "retry", "filter": {"error": "http_503"}}),
    )
    .await;
    assert_eq!(retried.json()["applied"], 2, "{:?}", retried.json());
    for id in &busy {
        let done = s.api.wait_terminal(id).await;
        assert_eq!(done["attempt"], 2, "{done}");
    }

    // Cancel of everything live drops the held call.
    let canceled = bulk(&s.api, json!({"action": "cancel", "filter": {}})).await;
    assert_eq!(canceled.json()["matched"], 10, "{:?}", canceled.json());
    assert_eq!(canceled.json()["applied"], 1);
    s.down.closed_while_held("held", 1).await;
    assert_eq!(s.api.task(&held).await["state"], "canceled");

    // Delete of the 400s; the rest stay.
    let deleted = bulk(
        &s.api,
        json!({"action": "delete", "filter": {"state": "failed", "error": "http_400"}}),
    )
    .await;
    assert_eq!(deleted.json()["applied"], 6, "{:?}", deleted.json());
    let gone = s.api.get(&format!("/tasks/{}", bad[0])).await;
    assert_eq!(gone.status, 404);
    let left = s.api.get("/tasks?limit=500").await;
    assert_eq!(listed_ids(&left).len(), 4);

    let bad_filter = bulk(
        &s.api,
        json!({"action": "delete", "filter": {"colour": "red"}}),
    )
    .await;
    assert_eq!(bad_filter.status, 400);
    assert!(bad_filter.error_message().contains("filter.colour"));
}
