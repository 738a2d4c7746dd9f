//! A due task is claimed however many other destinations wait, through the real
//! binary: one task to the downstream succeeds
//! (the worker's rotation now starts after its host), then 5,000 other
//! hosts named after it get tasks that cannot run now (300 paused, the rest
//! delayed an hour), then a new task to the downstream must succeed at
//! once. Before, a claim visited at most 256 destinations, counting the
//! waiting ones, and only moved its rotation when it claimed something: the
//! new task stayed pending for good.

use serde_json::{Value, json};

use crate::support;

/// Waiting destinations, and how many of them are paused.
const WAITING: usize = 5_000;
const PAUSED: usize = 300;
/// Tasks per `POST /tasks/batch` (the API's maximum).
const BATCH: usize = 1000;

/// A waiting host's url: sorts after `127.0.0.1:…`, never called.
fn waiting_url(i: usize) -> String {
    format!("http://zz-wait-{i:05}.invalid/never")
}

#[tokio::test]
async fn a_due_task_is_claimed_past_thousands_of_waiting_destinations() {
    let s = support::start().await;
    let first = s.api.submit_new(&s.down.url("/ok"), "first").await;
    let done = s.api.wait_terminal(&first).await;
    assert_eq!(done["state"], "success", "{done}");

    for i in 0..PAUSED {
        let name = format!("zz-wait-{i:05}.invalid:80");
        let reply = s
            .api
            .put_json(&format!("/destinations/{name}"), &json!({"paused": true}))
            .await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
    }
    let tasks: Vec<Value> = (0..WAITING)
        .map(|i| {
            let mut task = json!({"url": waiting_url(i), "idempotency_key": format!("wait-{i}"),
                                  "json": {}});
            if i >= PAUSED {
                task["delay_ms"] = json!(3_600_000);
            }
            task
        })
        .collect();
    for chunk in tasks.chunks(BATCH) {
        let reply = s
            .api
            .post_json("/tasks/batch", &json!({ "tasks": chunk }))
            .await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        for result in reply.json()["results"].as_array().cloned().unwrap() {
            assert_eq!(result["status"], 201, "{result}");
        }
    }

    let due = s.api.submit_new(&s.down.url("/ok"), "due").await;
    let done = s.api.wait_terminal(&due).await;
    assert_eq!(done["state"], "success", "{done}");
    assert_eq!(done["attempt"], 1, "{done}");
    let keys: Vec<String> = s
        .down
        .requests()
        .iter()
        .map(|r| r.key().to_owned())
        .collect();
    assert_eq!(
        keys,
        ["first", "due"],
        "only the downstream's two tasks are called"
    );
}
