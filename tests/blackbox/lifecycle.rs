//! The process's life: cancel, SIGTERM, SIGKILL and restart, configuration by
//! flags and environment, a database that is not ours, the demo.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support::{self, Api, Config, Downstream};

#[tokio::test]
async fn cancel_of_an_in_flight_call_closes_the_downstream_connection() {
    let mut s = support::start().await;
    let id = s.api.submit_new(&s.down.url("/slow"), "cancel-me").await;
    s.down.request_with_key("cancel-me").await;
    assert_eq!(s.api.task(&id).await["state"], "running");

    let reply = s.api.cancel(&id).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json(), json!({"id": id, "state": "canceled"}));
    s.down.closed_while_held("cancel-me", 1).await;

    let view = s.api.task(&id).await;
    assert_eq!(view["state"], "canceled");
    assert!(view["finished_at"].is_string(), "{view}");
    assert_eq!(s.down.calls_with_key("cancel-me"), 1);
}

#[tokio::test]
async fn sigterm_puts_calls_in_flight_back_and_they_finish_after_restart() {
    // A long lease: had the server left the tasks running instead of putting
    // them back, the restarted server could not touch them for a minute.
    let mut s = support::start_with(|c, _| {
        c.flag("--shutdown-grace-ms", "200")
            .flag("--lease-ms", "60000");
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let key = format!("drain-{i}");
        let reply = s
            .api
            .post_json(
                "/tasks",
                &json!({"url": s.down.url("/gate"), "idempotency_key": key, "max_attempts": 1}),
            )
            .await;
        assert_eq!(reply.status, 201);
        ids.push(reply.id());
    }
    s.down.requests_arrived(3).await;

    s.server.terminate();
    let status = s.server.wait_exit().await;
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
    let stopped = s.server.logged("shutdown_worker_stopped").await;
    assert_eq!(stopped["interrupted"], 3, "{stopped}");
    s.server.logged("shutdown_complete").await;
    for i in 0..3 {
        s.down.closed_while_held(&format!("drain-{i}"), 1).await;
    }

    s.restart().await;
    for id in &ids {
        let view = s.api.task(id).await;
        assert_eq!(view["attempts"][0]["error"], "interrupted", "{view}");
        assert!(
            matches!(view["state"].as_str(), Some("pending" | "running")),
            "{view}"
        );
    }
    s.down.open_gate();
    for id in &ids {
        let view = s.api.wait_terminal(id).await;
        // max_attempts is 1: the interrupted try did not use it up.
        assert_eq!(view["state"], "success", "{view}");
    }
}

#[tokio::test]
async fn sigint_stops_an_idle_server_with_exit_0() {
    let mut s = support::start().await;
    s.server.interrupt();
    let status = s.server.wait_exit().await;
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
}

/// 8 concurrent clients submit 300 tasks; the server is SIGKILLed once 200
/// submits have returned, with submits still on their way and the downstream
/// holding every call it gets (so all of those 200 are pending or in flight).
/// A new server on the same database must finish every task whose submit
/// returned; the rest are resubmitted (idempotently) and finish too.
#[tokio::test]
async fn sigkill_loses_no_acknowledged_task() {
    const TASKS: usize = 300;
    const KILL_AT: usize = 200;
    let mut s = support::start_with(|c, _| {
        c.flag("--lease-ms", "600").flag("--concurrency", "16");
    })
    .await;
    let url = s.down.url("/gate");
    let acked = Arc::new(std::sync::Mutex::new(BTreeMap::<String, String>::new()));
    let returned = Arc::new(AtomicUsize::new(0));
    let kill_now = Arc::new(Notify::new());
    let mut clients = tokio::task::JoinSet::new();
    for client in 0..8 {
        let (api, url, acked, returned, kill_now) = (
            s.api.clone(),
            url.clone(),
            Arc::clone(&acked),
            Arc::clone(&returned),
            Arc::clone(&kill_now),
        );
        clients.spawn(async move {
            for i in (client..TASKS).step_by(8) {
                let key = format!("crash-{i}");
                let Some(id) = try_submit(&api, &url, &key).await else {
                    return; // the server is gone
                };
                acked.lock().unwrap().insert(key, id);
                if returned.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AT {
                    kill_now.notify_one();
                }
            }
        });
    }
    tokio::time::timeout(std::time::Duration::from_secs(30), kill_now.notified())
        .await
        .expect("200 submits within 30 s");
    s.server.kill9().await;
    while let Some(joined) = clients.join_next().await {
        joined.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= KILL_AT, "{} acknowledged", acked.len());

    s.restart().await;
    s.down.open_gate();
    // Every acknowledged task exists under its id and finishes.
    for (key, id) in &acked {
        let view = s.api.wait_terminal(id).await;
        assert_eq!(view["state"], "success", "{key}: {view}");
        assert_eq!(view["idempotency_key"], key.as_str());
    }
    // The others may or may not have been stored: a resubmit finds or
    // creates them, never a second task for a key.
    for i in 0..TASKS {
        let key = format!("crash-{i}");
        if acked.contains_key(&key) {
            continue;
        }
        let reply = s.api.submit(&url, &key, json!({"key": key})).await;
        assert!(matches!(reply.status, 200 | 201), "{key}: {}", reply.status);
        assert_eq!(s.api.wait_terminal(&reply.id()).await["state"], "success");
    }
    let every = s.api.list_all("").await;
    let mut listed = BTreeSet::new();
    for t in &every {
        assert_eq!(t["state"], "success", "{t}");
        listed.insert(t["idempotency_key"].as_str().unwrap().to_owned());
    }
    assert_eq!(listed.len(), TASKS, "one task per key, none lost");

    // Every delivery carried its own task's key and id.
    let ids: BTreeMap<String, String> = every
        .iter()
        .map(|t| {
            (
                t["idempotency_key"].as_str().unwrap().to_owned(),
                t["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let requests = s.down.requests();
    assert!(requests.len() >= TASKS);
    for r in &requests {
        let key = r.key();
        assert!(
            key.starts_with("crash-"),
            "a request without its key: {:?}",
            r.headers
        );
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["key"], key, "the key belongs to this task's payload");
        assert_eq!(r.header("x-task-id"), ids.get(key).map(String::as_str));
    }
}

async fn try_submit(api: &Api, url: &str, key: &str) -> Option<String> {
    // A submit to a server that is being killed may fail any way; only a 201
    // counts as acknowledged.
    let reply = api.try_submit(url, key, json!({"key": key})).await?;
    (reply.status == 201).then(|| reply.id())
}

#[tokio::test]
async fn environment_variables_configure_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let down = Downstream::start().await;
    let db = dir.path().join("from-env.db");
    let allowed = format!("http://hooks.invalid/,{}", down.url("/ok"));
    let config = Config::env_only(
        &db,
        &[
            ("TC_LISTEN", "127.0.0.1:0"),
            ("TC_DB", db.to_str().unwrap()),
            ("TC_LOG_FORMAT", "json"),
            ("TC_API_TOKEN", "env-token"),
            ("TC_ALLOW_URL_PREFIX", &allowed),
            ("TC_MAX_ATTEMPTS", "1"),
            ("TC_CONCURRENCY", "2"),
            ("TC_SYNC", "normal"),
        ],
    );
    let server = config.start().await;
    assert!(db.is_file(), "the database is where TC_DB says");
    let api = Api::new(server.base_url());
    assert_eq!(api.get("/tasks").await.status, 401);
    let api = api.with_token("env-token");
    let refused = api
        .submit(&down.url("/status/400"), "env-1", json!({}))
        .await;
    assert_eq!(refused.status, 403);
    let reply = api.submit(&down.url("/ok"), "env-2", json!({})).await;
    assert_eq!(reply.status, 201);
    assert_eq!(
        reply.json()["max_attempts"],
        1,
        "TC_MAX_ATTEMPTS is the default"
    );
}

#[tokio::test]
async fn bad_flags_and_values_exit_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let check = async |flags: &[(&str, &str)], envs: &[(&str, &str)], named: &str| {
        let mut config = Config::env_only(&dir.path().join("never.db"), envs);
        for (flag, value) in flags {
            config.flag(flag, value);
        }
        let (status, stderr) = config.run_to_exit().await;
        assert_eq!(status.code(), Some(2), "{flags:?} {envs:?}: {stderr}");
        assert!(stderr.contains(named), "{flags:?} {envs:?}: {stderr}");
    };
    check(&[("--concurrency", "0")], &[], "--concurrency").await;
    check(&[("--max-attempts", "101")], &[], "--max-attempts").await;
    check(&[("--call-timeout-ms", "0")], &[], "--call-timeout-ms").await;
    check(&[("--listen", "not-an-address")], &[], "--listen").await;
    check(&[("--sync", "off")], &[], "--sync").await;
    check(&[("--log-format", "xml")], &[], "--log-format").await;
    check(
        &[("--backoff-base-ms", "500"), ("--backoff-cap-ms", "100")],
        &[],
        "--backoff-cap-ms",
    )
    .await;
    check(&[], &[("TC_CONCURRENCY", "0")], "--concurrency").await;
    // https:// is taken; another scheme is not.
    check(
        &[("--otlp-endpoint", "ftp://collector:4318")],
        &[],
        "--otlp-endpoint",
    )
    .await;
    check(
        &[],
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318")],
        "--otlp-traces-endpoint",
    )
    .await;
    // A malformed header list is named, its values never repeated.
    check(
        &[("--otlp-endpoint", "http://127.0.0.1:4318")],
        &[("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cret,novalue")],
        "OTEL_EXPORTER_OTLP_HEADERS: entry 2 is not key=value",
    )
    .await;
    check(
        &[],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url")],
        "--otlp-endpoint",
    )
    .await;
    check(&[("--no-such-flag", "1")], &[], "--no-such-flag").await;
    assert!(!dir.path().join("never.db").exists(), "nothing was created");
}

#[tokio::test]
async fn a_database_that_is_not_ours_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new(dir.path());
    let junk: Vec<u8> = b"these are somebody else's notes, not a database\n".repeat(200);
    std::fs::write(config.db(), &junk).unwrap();
    let (status, stderr) = config.run_to_exit().await;
    assert!(!status.success(), "started on a foreign file: {stderr}");
    assert!(
        status.signal().is_none(),
        "a clean exit, not a crash: {status:?}"
    );
    assert!(
        stderr.contains(config.db().to_str().unwrap()),
        "the error names the file: {stderr}"
    );
    assert!(stderr.contains("not an SQLite database"), "{stderr}");
    assert_eq!(
        std::fs::read(config.db()).unwrap(),
        junk,
        "the file is untouched"
    );
}

#[tokio::test]
async fn logs_are_one_json_object_per_line_with_fields_at_the_top() {
    let mut s = support::start().await;
    let id = s.api.submit_new(&s.down.url("/ok"), "logged").await;
    s.api.wait_terminal(&id).await;
    let done = s
        .server
        .logged_where(
            |v| v["message"] == "task_done" && v["task_id"] == id.as_str(),
            "task_done",
        )
        .await;
    assert_eq!(done["state"], "success", "{done}");
    s.server.terminate();
    assert_eq!(s.server.wait_exit().await.code(), Some(0));
    for line in s.server.seen_logs() {
        assert!(line.is_object(), "not a JSON object: {line}");
        for field in ["timestamp", "level", "target", "message"] {
            assert!(line.get(field).is_some(), "no {field} in {line}");
        }
        assert!(line.get("fields").is_none(), "fields are flattened: {line}");
    }
    let listening = s.server.logged("listening").await;
    assert_eq!(listening["addr"], s.server.addr.to_string());
    assert_eq!(listening["level"], "INFO");
}

#[tokio::test]
async fn text_logs_say_where_the_server_listens() {
    let mut s = support::start_with(|c, _| {
        c.flag("--log-format", "text");
    })
    .await;
    // The harness found the address in a text line; it serves there.
    assert_eq!(s.api.get("/healthz").await.status, 200);
    s.server.terminate();
    assert_eq!(s.server.wait_exit().await.code(), Some(0));
    assert!(
        s.server.seen_logs().iter().all(|l| l.is_string()),
        "text, not JSON"
    );
}

#[tokio::test]
async fn the_demo_walks_through_and_exits_0() {
    let config = Config::env_only(std::path::Path::new("unused.db"), &[]);
    let (status, stdout, stderr) = config.run_demo().await;
    assert_eq!(status.code(), Some(0), "{stdout}\n{stderr}");
    for needle in ["503", "attempt 2", "same task", "400", "canceled", "closed"] {
        assert!(
            stdout.contains(needle),
            "the demo's output lacks {needle:?}:\n{stdout}"
        );
    }
}
