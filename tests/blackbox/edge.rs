//! The server's edges against hostile or careless input: what reaches the
//! logs and the downstream, what a second process on the same file meets,
//! health, memory and connection bounds.

use http::Method;

use crate::support;

#[tokio::test]
async fn logs_carry_the_origin_and_path_never_the_query_string() {
    let mut s = support::start().await;
    let url = format!("{}?token=s3cret-in-query", s.down.url("/ok"));
    let reply = s
        .api
        .submit(&url, "logged-query", serde_json::json!({}))
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.json());
    let id = reply.id();
    s.api.wait_terminal(&id).await;
    let origin = format!("http://{}", s.down.addr);
    for event in ["task_submitted", "task_start"] {
        let line = s
            .server
            .logged_where(
                |v| v["message"] == event && v["task_id"] == id.as_str(),
                event,
            )
            .await;
        assert_eq!(line["origin"], origin.as_str(), "{line}");
        assert_eq!(line["path"], "/ok", "{line}");
    }
    s.server.terminate();
    s.server.wait_exit().await;
    for line in s.server.seen_logs() {
        assert!(
            !line.to_string().contains("s3cret"),
            "a log line carries the query string: {line}"
        );
    }
}

#[tokio::test]
async fn the_downstream_receives_the_json_as_the_client_wrote_it() {
    let s = support::start().await;
    let json = r#"{"z":1,"a":{"$serde_json::private::Number":"1"},"n":1.50,"big":123456789012345678901234567890,"s":"\u00e9\n"}"#;
    let body = format!(
        r#"{{"url":"{}","idempotency_key":"as-sent","json": {json} }}"#,
        s.down.url("/ok")
    );
    let reply = s
        .api
        .send(
            Method::POST,
            "/tasks",
            &[("content-type", "application/json")],
            body,
        )
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.json());
    s.api.wait_terminal(&reply.id()).await;
    let received = s.down.requests();
    let got = received
        .iter()
        .find(|r| r.key() == "as-sent")
        .expect("the downstream was called");
    assert_eq!(String::from_utf8_lossy(&got.body), json);
}
