//! Destinations through the real binary: two downstreams on two
//! loopback hosts (127.0.0.1 and 127.0.0.2, so two destinations that differ
//! by host), one that never answers with thousands of tasks queued and one
//! that answers at once; the caps, pause and resume, and settings kept
//! across a restart, all over HTTP.
//!
//! The server is another process, so its state is observable only through
//! its API: waits poll it, bounded in rounds and time ([`poll`]).

use std::net::IpAddr;
use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use crate::support::{self, Api, Downstream};

/// The second loopback host: on Linux the whole 127.0.0.0/8 is loopback.
const OTHER_HOST: [u8; 4] = [127, 0, 0, 2];
/// The longest any wait of this file may take before it fails.
const PATIENCE: Duration = Duration::from_secs(120);
/// Tasks per `POST /tasks/batch` (the API's maximum).
const BATCH: usize = 1000;

fn other_host() -> IpAddr {
    OTHER_HOST.into()
}

fn path_of(destination: &str) -> String {
    format!("/destinations/{destination}")
}

/// `GET /destinations/{destination}`, expecting it to exist.
async fn destination(api: &Api, name: &str) -> Value {
    let reply = api.get(&path_of(name)).await;
    assert_eq!(reply.status, 200, "GET {name}: {:?}", reply.body);
    reply.json()
}

/// The settings part of a destination's view: what must survive a restart.
fn settings(view: &Value) -> Value {
    json!({
        "max_in_flight": view["max_in_flight"],
        "rate_per_s": view["rate_per_s"],
        "burst": view["burst"],
        "paused": view["paused"],
    })
}

fn count(view: &Value, field: &str) -> u64 {
    view[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} is not a count: {view}"))
}

/// Submits `n` tasks to `url` (keys `{prefix}-{i}`) through
/// `POST /tasks/batch`, expecting every one to be new.
async fn submit_many(api: &Api, url: &str, prefix: &str, n: usize, timeout_ms: u64) {
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    for chunk in keys.chunks(BATCH) {
        let tasks: Vec<Value> = chunk
            .iter()
            .map(|key| {
                json!({"url": url, "idempotency_key": key, "json": {"key": key},
                       "timeout_ms": timeout_ms})
            })
            .collect();
        let reply = api
            .post_json("/tasks/batch", &json!({ "tasks": tasks }))
            .await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        let results = reply.json()["results"].as_array().cloned().unwrap();
        assert_eq!(results.len(), chunk.len());
        for result in &results {
            assert_eq!(result["status"], 201, "{result}");
        }
    }
}

/// [`support::poll`] every 50 ms for at most [`PATIENCE`].
async fn poll<T>(what: &str, probe: impl AsyncFnMut() -> Result<T, String>) -> T {
    support::poll(what, PATIENCE, Duration::from_millis(50), probe).await
}

#[tokio::test]
async fn a_hanging_destination_holds_its_cap_while_every_task_of_another_finishes() {
    const CAP: u64 = 3;
    const HANGING: usize = 3_000;
    const INSTANT: usize = 500;
    // Sixteen slots: without the cap, the hanging backlog (submitted first)
    // would take every one of them and keep it.
    let mut s = support::start_with(|c, _| {
        c.flag("--concurrency", "16");
    })
    .await;
    let mut hanging = Downstream::start_on(other_host()).await;
    let (slow, fast) = (hanging.destination(), s.down.destination());
    assert_ne!(slow, fast);
    assert!(slow.starts_with("127.0.0.2:"), "{slow}");

    // The cap first: a destination needs no task to have settings.
    let capped = s
        .api
        .put_json(&path_of(&slow), &json!({"max_in_flight": CAP}))
        .await;
    assert_eq!(capped.status, 200, "{:?}", capped.body);
    let capped = capped.json();
    assert_eq!(capped["destination"], slow.as_str());
    assert_eq!(capped["max_in_flight"], CAP);
    assert_eq!(
        (count(&capped, "pending"), count(&capped, "in_flight")),
        (0, 0)
    );

    // The backlog first, then the instant tasks behind it. The hanging
    // calls never time out within the test (the longest timeout allowed).
    submit_many(&s.api, &hanging.url("/slow"), "hang", HANGING, 600_000).await;
    submit_many(&s.api, &s.down.url("/ok"), "fast", INSTANT, 5_000).await;

    // Until every instant task is done, every look at the list shows the
    // hanging destination within its cap.
    let mut looks = 0u32;
    poll("every instant task finished", async || {
        let list = s.api.get("/destinations").await;
        assert_eq!(list.status, 200);
        let list = list.json();
        let find = |name: &str| {
            list["destinations"]
                .as_array()
                .and_then(|all| all.iter().find(|d| d["destination"] == name).cloned())
                .unwrap_or_else(|| panic!("{name} missing from {list}"))
        };
        let (held, quick) = (find(&slow), find(&fast));
        looks += 1;
        assert!(count(&held, "in_flight") <= CAP, "over the cap: {held}");
        assert!(
            count(&held, "pending") >= HANGING as u64 - CAP,
            "the backlog shrank though no call ended: {held}"
        );
        if count(&quick, "pending") + count(&quick, "in_flight") == 0 {
            Ok(())
        } else {
            Err(quick.to_string())
        }
    })
    .await;
    assert!(looks >= 1);

    let done = s.api.list_all(&format!("destination={fast}")).await;
    assert_eq!(done.len(), INSTANT);
    for task in &done {
        assert_eq!(task["state"], "success", "{task}");
    }
    assert!(s.down.requests().len() >= INSTANT);

    // The hanging destination holds exactly its cap: CAP calls arrived and
    // hang, nothing else was called, the rest waits.
    hanging.requests_arrived(CAP as usize).await;
    let held = poll("the cap filled", async || {
        let view = destination(&s.api, &slow).await;
        if count(&view, "in_flight") == CAP {
            Ok(view)
        } else {
            Err(view.to_string())
        }
    })
    .await;
    assert_eq!(count(&held, "pending"), HANGING as u64 - CAP, "{held}");
    assert_eq!(held["breaker"], "closed", "{held}");
    assert_eq!(hanging.requests().len(), CAP as usize);
    assert_eq!(hanging.peak_in_flight(), CAP as usize);

    // More settings on both, then a restart on the same database.
    let tuned = s
        .api
        .put_json(&path_of(&slow), &json!({"rate_per_s": 2.5, "burst": 7}))
        .await;
    assert_eq!(tuned.status, 200, "{:?}", tuned.body);
    let paused = s
        .api
        .send(Method::POST, &format!("{}/pause", path_of(&fast)), &[], "")
        .await;
    assert_eq!(paused.status, 200, "{:?}", paused.body);
    let before = [
        settings(&destination(&s.api, &slow).await),
        settings(&destination(&s.api, &fast).await),
    ];
    assert_eq!(
        before[0],
        json!({"max_in_flight": CAP, "rate_per_s": 2.5, "burst": 7, "paused": false})
    );
    assert_eq!(
        before[1],
        json!({"max_in_flight": null, "rate_per_s": null, "burst": null, "paused": true})
    );

    s.server.terminate();
    let status = s.server.wait_exit().await;
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
    // The drain closed the held calls; the downstream holds none now.
    hanging.abandoned(CAP as usize).await;
    s.restart().await;

    let after = [
        settings(&destination(&s.api, &slow).await),
        settings(&destination(&s.api, &fast).await),
    ];
    assert_eq!(after, before, "settings changed across the restart");
    // The restarted worker holds the same cap: CAP new calls, no more.
    hanging.requests_arrived(2 * CAP as usize).await;
    let held = poll("the cap filled again", async || {
        let view = destination(&s.api, &slow).await;
        assert!(count(&view, "in_flight") <= CAP, "over the cap: {view}");
        if count(&view, "in_flight") == CAP {
            Ok(view)
        } else {
            Err(view.to_string())
        }
    })
    .await;
    assert_eq!(count(&held, "pending"), HANGING as u64 - CAP, "{held}");
    assert_eq!(hanging.requests().len(), 2 * CAP as usize);
    assert_eq!(hanging.peak_in_flight(), CAP as usize);
}

#[tokio::test]
async fn pause_holds_a_destination_and_resume_lets_its_tasks_run() {
    let s = support::start().await;
    let other = Downstream::start_on(other_host()).await;
    let name = s.down.destination();
    let pause = format!("{}/pause", path_of(&name));
    let resume = format!("{}/resume", path_of(&name));

    let paused = s.api.send(Method::POST, &pause, &[], "").await;
    assert_eq!(paused.status, 200, "{:?}", paused.body);
    assert_eq!(paused.json()["paused"], true);
    let held = s.api.submit_new(&s.down.url("/ok"), "held").await;
    // A task for another host, submitted after the held one: once it has
    // finished, the worker has had its chance to claim the held one.
    let passed = s.api.submit_new(&other.url("/ok"), "passes").await;
    assert_eq!(s.api.wait_terminal(&passed).await["state"], "success");

    let task = s.api.task(&held).await;
    assert_eq!(task["state"], "pending", "{task}");
    assert_eq!(task["attempt"], 0, "a held task uses no attempt: {task}");
    assert_eq!(task["destination"], name.as_str());
    assert_eq!(s.down.calls_with_key("held"), 0);
    let view = destination(&s.api, &name).await;
    assert_eq!(view["paused"], true, "{view}");
    assert_eq!((count(&view, "pending"), count(&view, "in_flight")), (1, 0));

    let resumed = s.api.send(Method::POST, &resume, &[], "").await;
    assert_eq!(resumed.status, 200, "{:?}", resumed.body);
    assert_eq!(resumed.json()["paused"], false);
    let task = s.api.wait_terminal(&held).await;
    assert_eq!(task["state"], "success", "{task}");
    assert_eq!(task["attempt"], 1, "{task}");
    assert_eq!(s.down.calls_with_key("held"), 1);
    let view = destination(&s.api, &name).await;
    assert_eq!(
        (view["paused"].clone(), count(&view, "pending")),
        (json!(false), 0)
    );
}

#[tokio::test]
async fn unknown_destinations_are_404_and_bad_settings_400_naming_the_field() {
    let s = support::start().await;
    let list = s.api.get("/destinations").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.json(), json!({"destinations": []}));

    let unknown = "nowhere.test:443";
    let reply = s.api.get(&path_of(unknown)).await;
    assert_eq!(reply.status, 404, "{:?}", reply.body);
    assert_eq!(reply.error_code(), "not_found");

    // (path, body, the field the message starts with)
    let refused: &[(&str, &str, &str)] = &[
        (unknown, r#"{"max_in_flight": 0}"#, "max_in_flight"),
        (unknown, r#"{"max_in_flight": 10001}"#, "max_in_flight"),
        (unknown, r#"{"max_in_flight": "4"}"#, "max_in_flight"),
        (unknown, r#"{"rate_per_s": 0}"#, "rate_per_s"),
        (unknown, r#"{"rate_per_s": -2}"#, "rate_per_s"),
        (unknown, r#"{"burst": 0}"#, "burst"),
        (unknown, r#"{"paused": "yes"}"#, "paused"),
        (unknown, r#"{"paused": true, "colour": "blue"}"#, "colour"),
        (unknown, "[]", "body"),
        ("no-port", r#"{"paused": true}"#, "destination"),
        ("host:99999", r#"{"paused": true}"#, "destination"),
    ];
    for (name, body, field) in refused {
        let reply = s
            .api
            .send(
                Method::PUT,
                &path_of(name),
                &[("content-type", "application/json")],
                *body,
            )
            .await;
        assert_eq!(reply.status, 400, "{name} {body}: {:?}", reply.body);
        assert_eq!(reply.error_code(), "invalid_request", "{name} {body}");
        let message = reply.error_message();
        assert!(message.starts_with(field), "{name} {body}: {message}");
    }
    // Nothing refused was written: the destination is still unknown.
    assert_eq!(s.api.get(&path_of(unknown)).await.status, 404);
    assert_eq!(
        s.api.get("/destinations").await.json()["destinations"],
        json!([])
    );
}

#[tokio::test]
async fn with_a_token_the_destination_routes_need_it() {
    let s = support::start_with(|c, _| {
        c.flag("--api-token", "s3cret");
    })
    .await;
    let name = "api.example.com:443";
    let routes = [
        (Method::GET, "/destinations".to_owned()),
        (Method::GET, path_of(name)),
        (Method::PUT, path_of(name)),
        (Method::POST, format!("{}/pause", path_of(name))),
        (Method::POST, format!("{}/resume", path_of(name))),
    ];
    for client in [s.api.clone(), s.api.with_token("wrong")] {
        client
            .expect_unauthorized(&routes, r#"{"paused": true}"#)
            .await;
    }
    let authorized = s.api.with_token("s3cret");
    // Nothing was paused by the refused calls.
    assert_eq!(authorized.get(&path_of(name)).await.status, 404);
    let reply = authorized
        .put_json(&path_of(name), &json!({"max_in_flight": 2}))
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(destination(&authorized, name).await["max_in_flight"], 2);
}
