//! A real SQLite file that runs out of room (a page cap stands in for a full
//! disk, so no root is needed): submits answer 503 and leave nothing behind,
//! calls already made keep their outcomes until there is room again, and no
//! downstream call is made twice.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use tc_downstream::fake::{FakeDownstream, Reply, Script, Step};
use tc_model::State;
use tc_model::store::Tasks;
use tc_store::{SqliteStore, StoreConfig};
use tc_worker::{Clock, Worker, WorkerConfig, WorkerMetrics};

use crate::worker_for_http::WorkerPort;
use tc_model::tenant::Scope;

const TASKS: usize = 8;

async fn post(
    app: &tc_http::App<SqliteStore, WorkerPort<SqliteStore>>,
    path: &str,
    body: String,
) -> (u16, serde_json::Value) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = tc_http::handle(app, req).await;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

fn submit_body(key: &str, filler: usize) -> String {
    format!(
        r#"{{"url":"http://downstream.test/report","json":{{"pad":"{}"}},"idempotency_key":"{key}"}}"#,
        "x".repeat(filler)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_submits_and_loses_no_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        SqliteStore::open(dir.path().join("full.db"), StoreConfig::default())
            .await
            .unwrap(),
    );
    let script = Script::new();
    // Every call waits at the gate, then answers with a large body whose
    // outcome write needs new pages.
    let big = Reply {
        body: format!("{{\"report\":\"{}\"}}", "r".repeat(200_000)).into(),
        ..Reply::status(200)
    };
    script.plan("/report", (0..TASKS).map(|_| Step::Gate(big.clone())));
    let worker = Worker::spawn(
        Arc::clone(&store),
        Arc::new(FakeDownstream::new(Arc::clone(&script))),
        WorkerConfig {
            concurrency: TASKS,
            ..WorkerConfig::default()
        },
        Clock::system(),
        WorkerMetrics::default(),
    );
    let mut events = worker.control().subscribe();
    let app = tc_http::App::new(
        Arc::clone(&store),
        WorkerPort(worker.control()),
        tc_http::HttpConfig::default(),
        prometheus_client::registry::Registry::default(),
    );

    let mut ids = Vec::new();
    for n in 0..TASKS {
        let (status, task) = post(&app, "/tasks", submit_body(&format!("k{n}"), 10)).await;
        assert_eq!(status, 201, "{task}");
        ids.push(task["id"].as_str().unwrap().to_owned());
    }
    tokio::time::timeout(Duration::from_secs(30), script.wait_calls(TASKS))
        .await
        .unwrap();

    // The disk is full from here on: not one more page.
    let pages = store.page_count().await.unwrap();
    assert_eq!(store.set_max_pages(Some(pages)).await.unwrap(), pages);
    script.open_gate();

    // Submits with large bodies cannot fit: a clear 503, never a 5xx of
    // another kind, and nothing written.
    let mut refused = 0;
    for n in 0..20 {
        let (status, answer) =
            post(&app, "/tasks", submit_body(&format!("full{n}"), 100_000)).await;
        match status {
            503 => {
                assert_eq!(answer["error"]["code"], "unavailable", "{answer}");
                refused += 1;
            }
            other => panic!("submit on a full disk answered {other}: {answer}"),
        }
    }
    assert_eq!(refused, 20);
    let counts = store.count_by_state().await.unwrap();
    assert_eq!(
        counts.iter().map(|(_, n)| n).sum::<u64>(),
        TASKS as u64,
        "a refused submit left a row: {counts:?}"
    );
    // The answered calls could not be written: their tasks stay running
    // under their leases, the answers held by the worker.
    for id in &ids {
        let task = store.get(id.parse().unwrap(), Scope::Admin).await.unwrap();
        assert_eq!(task.state, State::Running, "{id} while the disk is full");
    }

    // Room again: every outcome lands, and nobody was called twice.
    store.set_max_pages(None).await.unwrap();
    let mut done = std::collections::HashSet::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while done.len() < TASKS {
            let ended = events.recv().await.unwrap();
            if ended.state.is_terminal() {
                done.insert(ended.task_id.to_string());
            }
        }
    })
    .await
    .unwrap();
    worker.shutdown().await.unwrap();
    assert_eq!(script.all_calls().len(), TASKS, "a call was made twice");
    for id in &ids {
        let task = store.get(id.parse().unwrap(), Scope::Admin).await.unwrap();
        assert_eq!(task.state, State::Success, "{id}");
        assert_eq!(task.attempt, 1, "{id}");
        assert_eq!(
            task.result.as_deref().map(<[u8]>::len),
            Some(big.body.len()),
            "{id}: result kept"
        );
    }
    let (status, _) = post(&app, "/tasks", submit_body("after", 100_000)).await;
    assert_eq!(status, 201, "submits work again");
}
