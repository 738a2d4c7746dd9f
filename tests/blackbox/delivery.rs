//! What the worker in the real binary does with real downstream answers.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support;

/// Submits one task to `path` with these extra fields and waits until it is
/// terminal: the final view and every request the downstream got for it.
async fn run_one(
    s: &mut support::Setup,
    path: &str,
    key: &str,
    extra: Value,
) -> (Value, Vec<support::downstream::Received>) {
    let mut task = json!({"url": s.down.url(path), "idempotency_key": key, "json": {"k": key}});
    if let (Some(task), Some(extra)) = (task.as_object_mut(), extra.as_object()) {
        task.extend(extra.clone());
    }
    let reply = s.api.post_json("/tasks", &task).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let view = s.api.wait_terminal(&reply.id()).await;
    let requests = s
        .down
        .requests()
        .into_iter()
        .filter(|r| r.key() == key)
        .collect();
    (view, requests)
}

fn attempt_headers(requests: &[support::downstream::Received]) -> Vec<String> {
    requests
        .iter()
        .map(|r| r.header("x-task-attempt").unwrap_or("-").to_owned())
        .collect()
}

#[tokio::test]
async fn a_5xx_is_retried_with_the_same_key_until_success() {
    let mut s = support::start().await;
    let (view, requests) = run_one(&mut s, "/flaky/2", "flaky", json!({"max_attempts": 3})).await;
    assert_eq!(view["state"], "success", "{view}");
    assert_eq!(view["attempt"], 3);
    let attempts = view["attempts"].as_array().unwrap();
    let statuses: Vec<&Value> = attempts.iter().map(|a| &a["http_status"]).collect();
    assert_eq!(statuses, [&json!(503), &json!(503), &json!(200)]);
    assert_eq!(attempts[0]["error"], "http_503");
    assert_eq!(attempt_headers(&requests), ["1", "2", "3"]);
    assert!(requests.iter().all(|r| r.key() == "flaky"));
}

#[tokio::test]
async fn a_5xx_on_every_try_fails_after_max_attempts() {
    let mut s = support::start().await;
    let (view, requests) = run_one(
        &mut s,
        "/status/503",
        "always-503",
        json!({"max_attempts": 2}),
    )
    .await;
    assert_eq!(view["state"], "failed", "{view}");
    assert_eq!(view["attempt"], 2);
    assert_eq!(view["http_status"], 503);
    assert_eq!(view["error"], "http_503");
    assert_eq!(requests.len(), 2);
}

#[tokio::test]
async fn a_4xx_fails_after_one_call() {
    let mut s = support::start().await;
    for (path, key) in [
        ("/status/400", "k400"),
        ("/status/404", "k404"),
        ("/status/422", "k422"),
    ] {
        let (view, requests) = run_one(&mut s, path, key, json!({"max_attempts": 5})).await;
        assert_eq!(view["state"], "failed", "{path}: {view}");
        assert_eq!(view["attempt"], 1, "{path}");
        assert_eq!(requests.len(), 1, "{path}: a 4xx is never retried");
    }
}

#[tokio::test]
async fn a_429_waits_for_its_retry_after() {
    let mut s = support::start().await;
    let (view, requests) = run_one(&mut s, "/retry-after/1", "polite", json!({})).await;
    assert_eq!(view["state"], "success", "{view}");
    assert_eq!(view["attempts"][0]["http_status"], 429);
    assert_eq!(requests.len(), 2);
    // The backoff is 20 ms; only Retry-After: 1 explains a wait of a second.
    let gap = requests[1].at.duration_since(requests[0].at);
    assert!(gap >= Duration::from_millis(900), "retried after {gap:?}");
}

#[tokio::test]
async fn a_reset_connection_is_retried() {
    let mut s = support::start().await;
    let (view, requests) = run_one(&mut s, "/reset/1", "reset", json!({})).await;
    assert_eq!(view["state"], "success", "{view}");
    assert_eq!(view["attempt"], 2);
    assert_eq!(view["attempts"][0]["http_status"], Value::Null);
    assert!(view["attempts"][0]["error"].is_string(), "{view}");
    assert_eq!(requests.len(), 2);
}

#[tokio::test]
async fn a_timeout_is_retried_and_each_timed_out_call_is_closed() {
    let mut s = support::start().await;
    let (view, requests) = run_one(
        &mut s,
        "/slow",
        "too-slow",
        json!({"timeout_ms": 150, "max_attempts": 2}),
    )
    .await;
    assert_eq!(view["state"], "failed", "{view}");
    assert_eq!(view["error"], "timeout");
    assert_eq!(requests.len(), 2);
    s.down.closed_while_held("too-slow", 2).await;
}

#[tokio::test]
async fn a_hundred_concurrent_submits_of_one_key_make_one_task_and_one_call() {
    let s = support::start().await;
    let task = json!({"url": s.down.url("/ok"), "idempotency_key": "herd", "json": {"n": 1}});
    let mut submits = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let (api, task) = (s.api.clone(), task.clone());
        submits.spawn(async move {
            let reply = api.post_json("/tasks", &task).await;
            (reply.status, reply.id())
        });
    }
    let mut created = 0;
    let mut ids = std::collections::BTreeSet::new();
    while let Some(joined) = submits.join_next().await {
        let (status, id) = joined.unwrap();
        match status {
            201 => created += 1,
            200 => {}
            other => panic!("submit answered {other}"),
        }
        ids.insert(id);
    }
    assert_eq!(created, 1, "exactly one submit created the task");
    assert_eq!(ids.len(), 1, "every submit saw the same task");
    let id = ids.into_iter().next().unwrap();
    assert_eq!(s.api.wait_terminal(&id).await["state"], "success");
    // Terminal: no further call can happen, so the count is final.
    assert_eq!(s.down.calls_with_key("herd"), 1);
    let list = s.api.get("/tasks").await.json();
    assert_eq!(list["tasks"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_submit_wakes_the_worker_without_waiting_for_the_poll() {
    // With a one-hour poll interval, only the submit's wake-up can start the
    // call before the test's 30 s guard.
    let mut s = support::start_with(|c, _| {
        c.flag("--poll-interval-ms", "3600000");
    })
    .await;
    for key in ["wake-1", "wake-2"] {
        let id = s.api.submit_new(&s.down.url("/ok"), key).await;
        s.down.request_with_key(key).await;
        assert_eq!(s.api.wait_terminal(&id).await["state"], "success");
    }
}

#[tokio::test]
async fn no_more_calls_in_flight_than_the_concurrency() {
    let mut s = support::start_with(|c, _| {
        c.flag("--concurrency", "2");
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            s.api
                .submit_new(&s.down.url("/gate"), &format!("gated-{i}"))
                .await,
        );
    }
    s.down.requests_arrived(2).await;
    // Both permits are held by calls the gate keeps open: nothing else can
    // be claimed, so the counts are stable.
    let running = s.api.get("/tasks?state=running").await.json();
    let pending = s.api.get("/tasks?state=pending").await.json();
    assert_eq!(running["tasks"].as_array().unwrap().len(), 2);
    assert_eq!(pending["tasks"].as_array().unwrap().len(), 3);
    let metrics = s.api.get("/metrics").await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(text.contains("taskcenter_calls_in_flight 2"), "{text}");

    s.down.open_gate();
    for id in &ids {
        assert_eq!(s.api.wait_terminal(id).await["state"], "success");
    }
    assert_eq!(s.down.requests().len(), 5);
}
