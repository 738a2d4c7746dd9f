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
    let origin = s.down.url("");
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

#[tokio::test]
async fn a_second_server_on_the_same_file_exits_1_and_touches_nothing() {
    let mut s = support::start().await;
    let id = s.api.submit_new(&s.down.url("/ok"), "first-server").await;
    s.api.wait_terminal(&id).await;
    let (status, stderr) = s.config.run_to_exit().await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    let expected = format!(
        "database {} is in use by another tc-server (pid {})",
        s.config.db().display(),
        s.server.pid()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    // The first one still serves its tasks.
    assert_eq!(s.api.task(&id).await["state"], "success");
    // A holder killed with SIGKILL leaves no stale lock.
    s.server.kill9().await;
    s.restart().await;
    assert_eq!(s.api.task(&id).await["state"], "success");
}

#[tokio::test]
async fn healthz_is_503_while_the_store_cannot_write_and_200_again_after() {
    let s = support::start().await;
    assert_eq!(s.api.get("/healthz").await.status, 200);
    // Another writer holds the database's write lock: every write of the
    // server waits, then fails, though HTTP itself is fine.
    let blocker = rusqlite::Connection::open(s.config.db()).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let reply = s.api.get("/healthz").await;
    assert_eq!(reply.status, 503, "{:?}", reply.body);
    assert_eq!(reply.header("retry-after"), Some("1"));
    let body = reply.json();
    assert_eq!(body["status"], "unavailable", "{body}");
    assert!(
        body["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{body}"
    );
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);
    let reply = s.api.get("/healthz").await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.json(), serde_json::json!({"status": "ok"}));
}

#[tokio::test]
async fn deny_private_destinations_fails_a_loopback_call_at_once() {
    let s = support::start_with(|c, _| {
        c.env("TC_DENY_PRIVATE_DESTINATIONS", "true");
    })
    .await;
    let reply = s
        .api
        .post_json(
            "/tasks",
            &serde_json::json!({
                "url": s.down.url("/ok"), "idempotency_key": "ssrf", "max_attempts": 5
            }),
        )
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.json());
    let task = s.api.wait_terminal(&reply.id()).await;
    assert_eq!(task["state"], "failed", "{task}");
    assert_eq!(task["error"], "destination_denied", "{task}");
    assert_eq!(task["attempt"], 1, "not retried: {task}");
    assert!(
        s.down.requests().is_empty(),
        "the downstream was not called"
    );
}

/// A task whose result is about 1 MB (the downstream echoes the json).
async fn task_with_a_big_result(s: &support::Setup, key: &str) -> String {
    let big = "x".repeat(1_000_000);
    let reply = s
        .api
        .submit(&s.down.url("/ok"), key, serde_json::json!(big))
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.json());
    let id = reply.id();
    let task = s.api.wait_terminal(&id).await;
    assert_eq!(task["state"], "success", "{task}");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_cannot_lock_out_a_health_probe() {
    let s = support::start_with(|c, _| {
        c.flag("--write-timeout-ms", "1000");
    })
    .await;
    let id = task_with_a_big_result(&s, "big-result").await;
    let request = format!("GET /tasks/{id}/result HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    // 1024 clients (the default connection limit) ask for it and never read.
    let mut stuck = Vec::with_capacity(1024);
    for _ in 0..1024 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        // A small window, so that the server's writes stall early.
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(s.server.addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes())
            .await
            .unwrap();
        stuck.push(stream);
    }
    let started = std::time::Instant::now();
    let probe = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        s.api
            .try_send(Method::GET, "/healthz", &[], bytes::Bytes::new()),
    )
    .await;
    let reply = probe
        .expect("GET /healthz did not answer within 5 s")
        .expect("GET /healthz failed on the connection");
    match reply.status {
        200 => {}
        503 => assert_eq!(reply.header("retry-after"), Some("1"), "{:?}", reply.body),
        other => panic!("GET /healthz answered {other}: {:?}", reply.body),
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    drop(stuck);
}

/// A `/proc/<pid>/status` field in KiB (VmRSS, VmHWM).
fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_big_lists_stay_within_a_bounded_peak_memory() {
    let s = support::start_with(|c, _| {
        // 500 MB of bodies: fsync per commit would make the setup the test.
        c.flag("--concurrency", "16").flag("--sync", "normal");
    })
    .await;
    // 100 tasks with ~1 MB bodies and ~1 MB results: 100 MB of results,
    // twelve times the page's 8 MiB result budget. Unbudgeted, each of the
    // four lists below would build a page of all 100 (and 100 MB more if it
    // read the bodies), far past the 64 MiB the test allows them together.
    // (500 tasks made the setup, a gigabyte through a debug build, most of
    // the suite's time.)
    const TASKS: usize = 100;
    let big = "x".repeat(1_000_000);
    let mut ids = Vec::new();
    for chunk in 0..TASKS / 10 {
        let mut submits = tokio::task::JoinSet::new();
        for i in 0..10 {
            let api = s.api.clone();
            // Built as text: a 1 MB json! value per submit is slow in debug.
            let body = format!(
                r#"{{"url":"{}","idempotency_key":"big-{chunk}-{i}","json":"{big}"}}"#,
                s.down.url("/ok")
            );
            submits.spawn(async move {
                let reply = api
                    .send(
                        Method::POST,
                        "/tasks",
                        &[("content-type", "application/json")],
                        body,
                    )
                    .await;
                assert_eq!(reply.status, 201);
                reply.id()
            });
        }
        while let Some(id) = submits.join_next().await {
            ids.push(id.unwrap());
        }
    }
    for id in &ids {
        assert_eq!(s.api.wait_terminal(id).await["state"], "success");
    }
    let pid = s.server.pid();
    // Reset the high-water mark to the current RSS (Linux >= 4.0); where
    // that is refused, the mark since start is the (stricter) baseline.
    let before = match std::fs::write(format!("/proc/{pid}/clear_refs"), "5") {
        Ok(()) => proc_kib(pid, "VmRSS"),
        Err(_) => proc_kib(pid, "VmHWM"),
    };
    let mut lists = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let api = s.api.clone();
        lists.spawn(async move {
            let page = api.get("/tasks?limit=500").await;
            assert_eq!(page.status, 200);
            let page = page.json();
            let listed = page["tasks"].as_array().unwrap().len();
            assert!(
                page["next"].is_string(),
                "a budgeted page says where to go on"
            );
            listed
        });
    }
    while let Some(listed) = lists.join_next().await {
        let listed = listed.unwrap();
        assert!(
            (1..TASKS).contains(&listed),
            "{listed} of {TASKS} tasks on a budgeted page"
        );
    }
    let grown_mib = proc_kib(pid, "VmHWM").saturating_sub(before) / 1024;
    assert!(
        grown_mib < 64,
        "four concurrent lists grew the server's peak RSS by {grown_mib} MiB"
    );
}
