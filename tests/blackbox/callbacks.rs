//! Callbacks end to end: a task with a `callback_url` on the
//! loopback sink succeeds; the sink then receives the callback task's POST
//! with the task's view as JSON (its result cut to
//! `--callback-result-bytes`), keyed `callback:{id}`; the callback is an
//! ordinary task with `callback_of`, and the parent's view names it. A
//! cancel not asked for makes none; one asked for does.

use serde_json::{Value, json};

use crate::support;

#[tokio::test]
async fn a_task_that_ends_posts_its_view_to_its_callback_url() {
    let mut s = support::start_with(|config, _| {
        config.flag("--callback-result-bytes", "8");
    })
    .await;
    let reply = s
        .api
        .post_json(
            "/tasks",
            &json!({
                "url": s.down.url("/ok"),
                "idempotency_key": "parent",
                "json": {"say": "hello, callbacks"},
                "max_attempts": 4,
                "timeout_ms": 3000,
                "callback_url": s.down.url("/ok?callback"),
            }),
        )
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let created = reply.json();
    assert_eq!(created["callback_url"], s.down.url("/ok?callback"));
    assert_eq!(created["callback_on"], json!(["success", "failed"]));
    assert_eq!(created["callback_task_id"], Value::Null);
    let parent_id = reply.id();

    let key = format!("callback:{parent_id}");
    let received = s.down.request_with_key(&key).await;
    let body: Value = serde_json::from_slice(&received.body).unwrap();
    assert_eq!(body["id"], parent_id);
    assert_eq!(body["state"], "success");
    // The echoed body is `{"say":"hello, callbacks"}`: cut to 8 bytes.
    assert_eq!(body["result"], r#"{"say":""#);
    assert_eq!(body["result_truncated"], true);
    assert_eq!(
        received.header("content-type"),
        Some("application/json"),
        "a callback is JSON"
    );

    let parent = s.api.wait_terminal(&parent_id).await;
    let callback_id = parent["callback_task_id"]
        .as_str()
        .expect("the parent names its callback")
        .to_owned();
    assert_eq!(body["callback_task_id"], callback_id.as_str());
    assert_eq!(received.header("x-task-id"), Some(callback_id.as_str()));
    let callback = s.api.wait_terminal(&callback_id).await;
    assert_eq!(callback["state"], "success");
    assert_eq!(callback["callback_of"], parent_id.as_str());
    assert_eq!(callback["idempotency_key"], key.as_str());
    assert_eq!(callback["max_attempts"], 4);
    assert_eq!(callback["callback_url"], Value::Null);
    assert_eq!(
        s.down.calls_with_key(&key),
        1,
        "one end, one callback, called once"
    );
}

#[tokio::test]
async fn a_cancel_makes_a_callback_only_when_asked_for() {
    let mut s = support::start().await;
    let submit = async |key: &str, on: Value| {
        let reply = s
            .api
            .post_json(
                "/tasks",
                &json!({
                    "url": s.down.url("/ok"),
                    "idempotency_key": key,
                    "delay_ms": 3_600_000,
                    "callback_url": s.down.url("/ok?canceled"),
                    "callback_on": on,
                }),
            )
            .await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        reply.id()
    };
    let quiet = submit("quiet", json!(["success"])).await;
    let loud = submit("loud", json!(["canceled"])).await;
    for id in [&quiet, &loud] {
        let reply = s
            .api
            .send(
                http::Method::POST,
                &format!("/tasks/{id}/cancel"),
                &[],
                bytes::Bytes::new(),
            )
            .await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
    }
    let received = s.down.request_with_key(&format!("callback:{loud}")).await;
    let body: Value = serde_json::from_slice(&received.body).unwrap();
    assert_eq!(
        (body["id"].as_str(), body["state"].as_str()),
        (Some(loud.as_str()), Some("canceled"))
    );
    assert_eq!(body["result_truncated"], false);
    // A callback is made with the end or never: none was made for quiet.
    let quiet_view = s.api.task(&quiet).await;
    assert_eq!(quiet_view["state"], "canceled");
    assert_eq!(quiet_view["callback_task_id"], Value::Null);
    let listed = s
        .api
        .get(&format!("/tasks?idempotency_key=callback:{quiet}"))
        .await
        .json();
    assert_eq!(listed["tasks"], json!([]), "{listed}");
}

#[tokio::test]
async fn a_callback_url_outside_the_allow_list_is_refused_naming_it() {
    let s = support::start_with(|config, down| {
        config.flag("--allow-url-prefix", &down.url("/ok"));
    })
    .await;
    let reply = s
        .api
        .post_json(
            "/tasks",
            &json!({
                "url": s.down.url("/ok"),
                "idempotency_key": "outside",
                "callback_url": "http://127.0.0.1:9/elsewhere",
            }),
        )
        .await;
    assert_eq!(reply.status, 403, "{:?}", reply.body);
    assert!(
        reply.error_message().starts_with("callback_url: "),
        "{}",
        reply.error_message()
    );
    let reply = s
        .api
        .post_json(
            "/tasks",
            &json!({
                "url": s.down.url("/ok"),
                "idempotency_key": "bad-on",
                "callback_url": s.down.url("/ok"),
                "callback_on": ["pending"],
            }),
        )
        .await;
    assert_eq!(reply.status, 400, "{:?}", reply.body);
    assert!(reply.error_message().starts_with("callback_on: "));
}
