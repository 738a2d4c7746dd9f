//! Test fixtures: the reference in-memory store (tc-testkit; its
//! `set_unavailable` hook fails every call as a full disk would), a fake worker control,
//! and a one-call request helper.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use prometheus_client::registry::Registry;
use serde_json::Value;
use tc_http::{App, Control, HttpConfig};
use tc_model::store::{Completion, Guarded, StoreError};
use tc_model::store::{Tasks, Work};
use tc_model::tenant::Scope;
use tc_model::{Task, TaskId, Timestamp};
use tc_testkit::ClaimDue;
use tc_testkit::memory_store::MemoryStore;

/// The fixed "now" of the fake control: 2026-01-02T03:04:05.678Z.
pub(crate) const NOW: Timestamp = Timestamp::from_millis(1_767_323_045_678);
pub(crate) const NOW_TEXT: &str = "2026-01-02T03:04:05.678Z";

/// The worker's side as the HTTP layer sees it: cancel goes straight to the
/// store, wakes are counted, the clock stands still.
pub(crate) struct FakeControl {
    store: Arc<MemoryStore>,
    wakes: Arc<AtomicUsize>,
    changes: tokio::sync::broadcast::Sender<(TaskId, tc_model::State)>,
    interrupted: Arc<std::sync::Mutex<Vec<TaskId>>>,
}

impl Control for FakeControl {
    fn task_submitted(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }

    async fn cancel(&self, id: TaskId, scope: Scope) -> Result<Task, StoreError> {
        let task = self.store.cancel(id, scope, NOW).await?;
        let _ = self.changes.send((id, task.state));
        Ok(task)
    }

    fn canceled_in_store(&self, id: TaskId) {
        self.interrupted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(id);
    }

    fn now(&self) -> Timestamp {
        NOW
    }

    fn changes(&self) -> tokio::sync::broadcast::Receiver<(TaskId, tc_model::State)> {
        self.changes.subscribe()
    }

    fn destinations_changed(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
    fn schedules_changed(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }

    fn destination_state(&self, _: &str) -> tc_http::DestinationRuntime {
        tc_http::DestinationRuntime::default()
    }
}

pub(crate) type TestApp = App<MemoryStore, FakeControl>;

pub(crate) struct Harness {
    pub(crate) app: Arc<TestApp>,
    /// The fake worker's change announcements (to count who listens).
    pub(crate) changes: tokio::sync::broadcast::Sender<(TaskId, tc_model::State)>,
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) wakes: Arc<AtomicUsize>,
    /// The running tasks a bulk cancel asked the worker to interrupt.
    pub(crate) interrupted: Arc<std::sync::Mutex<Vec<TaskId>>>,
}

pub(crate) async fn harness(config: HttpConfig) -> Harness {
    harness_with_registry(config, Registry::default()).await
}

/// [`harness`] with metrics others registered (as the worker does).
pub(crate) async fn harness_with_registry(config: HttpConfig, registry: Registry) -> Harness {
    let store = Arc::new(MemoryStore::new());
    let wakes = Arc::new(AtomicUsize::new(0));
    let interrupted = Arc::default();
    let changes = tokio::sync::broadcast::channel(64).0;
    let control = FakeControl {
        store: Arc::clone(&store),
        wakes: Arc::clone(&wakes),
        changes: changes.clone(),
        interrupted: Arc::clone(&interrupted),
    };
    let app = Arc::new(App::new(Arc::clone(&store), control, config, registry));
    Harness {
        app,
        changes,
        store,
        wakes,
        interrupted,
    }
}

/// What a handler answered.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The error code of a JSON error body.
    pub(crate) fn error_code(&self) -> Option<String> {
        let v: Value = serde_json::from_slice(&self.body).ok()?;
        v["error"]["code"].as_str().map(str::to_owned)
    }
}

impl Harness {
    /// Sends one request through [`tc_http::handle`], no socket involved.
    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        self.call_via(None, method, path, headers, body).await
    }

    /// [`Harness::call`] as if it came on a connection from `peer` to
    /// `local` (what the server records for every request).
    pub(crate) async fn call_via(
        &self,
        connection: Option<(&str, &str)>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        let mut builder = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        if let Some((peer, local)) = connection {
            builder = builder.extension(tc_http::ConnectionInfo {
                peer: peer.parse().unwrap(),
                local: local.parse().unwrap(),
            });
        }
        let request = builder
            .body(Full::new(Bytes::copy_from_slice(body)))
            .unwrap();
        let response = tc_http::handle(&self.app, request).await;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            headers,
            body,
        }
    }

    /// `POST /tasks` with a JSON body.
    pub(crate) async fn submit(&self, body: &Value) -> Reply {
        self.call(
            "POST",
            "/tasks",
            &[("content-type", "application/json")],
            body.to_string().as_bytes(),
        )
        .await
    }

    /// The value of an unlabelled gauge or counter in `GET /metrics`.
    pub(crate) async fn metric(&self, name: &str) -> i64 {
        let text = self.call("GET", "/metrics", &[], b"").await.body;
        let text = String::from_utf8_lossy(&text);
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    }

    pub(crate) fn set_store_down(&self, down: bool) {
        self.store.set_unavailable(down);
    }

    pub(crate) fn wakes(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }

    /// Submits a task and drives it through the store to `outcome`:
    /// `None` leaves it pending.
    pub(crate) async fn seed(&self, key: &str, outcome: Option<Completion>) -> TaskId {
        let reply = self
            .submit(&serde_json::json!({
                "url": "http://127.0.0.1:9/hook",
                "idempotency_key": key,
                "json": {"key": key},
                "max_attempts": 1,
            }))
            .await;
        assert_eq!(reply.status, 201, "{reply:?}");
        let id: TaskId = reply.json()["id"].as_str().unwrap().parse().unwrap();
        if let Some(outcome) = outcome {
            let started = Timestamp::from_millis(NOW.as_millis() + 1000);
            let claimed = self
                .store
                .claim_due(
                    1,
                    started,
                    Duration::from_secs(30),
                    tc_model::destination::ClaimGate::default(),
                )
                .await
                .unwrap();
            assert_eq!(claimed.len(), 1, "exactly the seeded task is due");
            assert_eq!(claimed[0].id, id);
            let finished = Timestamp::from_millis(started.as_millis() + 250);
            let guarded = self.store.complete(id, 1, outcome, finished).await.unwrap();
            assert!(matches!(guarded, Guarded::Applied(_)), "{guarded:?}");
        }
        id
    }
}
