//! Test fixtures: the reference in-memory store (tc-testkit) behind a switch that makes
//! it unavailable, a fake worker control, and a one-call request helper.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use prometheus_client::registry::Registry;
use serde_json::Value;
use tc_http::{App, Control, HttpConfig};
use tc_model::store::{
    BulkOutcome, Completion, Guarded, ListQuery, Page, StateCounts, StoreError, Submitted,
    TaskStore,
};
use tc_model::{NewTask, Task, TaskId, Timestamp};
use tc_testkit::ClaimDue;
use tc_testkit::memory_store::MemoryStore;

/// The fixed "now" of the fake control: 2026-01-02T03:04:05.678Z.
pub(crate) const NOW: Timestamp = Timestamp::from_millis(1_767_323_045_678);
pub(crate) const NOW_TEXT: &str = "2026-01-02T03:04:05.678Z";

/// A store that forwards to the in-memory store, or fails every call as unavailable while
/// `down` is set (what a full disk or a held lock looks like to a caller).
pub(crate) struct Switchable {
    inner: MemoryStore,
    down: AtomicBool,
}

impl Switchable {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("database or disk is full".into()))
        } else {
            Ok(())
        }
    }
}

impl TaskStore for Switchable {
    async fn submit(&self, task: NewTask, now: Timestamp) -> Result<Submitted, StoreError> {
        self.check()?;
        self.inner.submit(task, now).await
    }
    async fn submit_many(
        &self,
        tasks: Vec<NewTask>,
        now: Timestamp,
    ) -> Result<Vec<Result<Submitted, StoreError>>, StoreError> {
        self.check()?;
        self.inner.submit_many(tasks, now).await
    }
    async fn get(&self, id: TaskId) -> Result<Task, StoreError> {
        self.check()?;
        self.inner.get(id).await
    }
    async fn list(&self, query: ListQuery) -> Result<Page, StoreError> {
        self.check()?;
        self.inner.list(query).await
    }
    async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        self.check()?;
        self.inner.count_by_state().await
    }
    async fn claim(
        &self,
        n: usize,
        now: Timestamp,
        lease: Duration,
        gate: tc_model::destination::ClaimGate,
    ) -> Result<tc_model::claim::Claim, StoreError> {
        self.check()?;
        self.inner.claim(n, now, lease, gate).await
    }
    async fn heartbeat(
        &self,
        running: Vec<(TaskId, u32)>,
        now: Timestamp,
        lease: Duration,
    ) -> Result<Vec<tc_model::store::LeaseLost>, StoreError> {
        self.check()?;
        self.inner.heartbeat(running, now, lease).await
    }
    async fn complete(
        &self,
        id: TaskId,
        attempt: u32,
        outcome: Completion,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        self.check()?;
        self.inner.complete(id, attempt, outcome, now).await
    }
    async fn cancel(&self, id: TaskId, now: Timestamp) -> Result<Task, StoreError> {
        self.check()?;
        self.inner.cancel(id, now).await
    }
    async fn release(
        &self,
        id: TaskId,
        attempt: u32,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        self.check()?;
        self.inner.release(id, attempt, now).await
    }
    async fn recover_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        self.check()?;
        self.inner.recover_expired(now).await
    }
    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.check()?;
        self.inner.next_due().await
    }
    async fn health(&self) -> Result<(), StoreError> {
        self.check()?;
        self.inner.health().await
    }
    async fn destination_settings(
        &self,
    ) -> Result<Vec<(String, tc_model::destination::DestinationSettings)>, StoreError> {
        self.check()?;
        self.inner.destination_settings().await
    }
    async fn destinations(&self) -> Result<Vec<tc_model::destination::Destination>, StoreError> {
        self.check()?;
        self.inner.destinations().await
    }
    async fn destination(
        &self,
        name: String,
    ) -> Result<tc_model::destination::Destination, StoreError> {
        self.check()?;
        self.inner.destination(name).await
    }
    async fn update_destination(
        &self,
        name: String,
        update: tc_model::destination::DestinationUpdate,
        now: Timestamp,
    ) -> Result<tc_model::destination::Destination, StoreError> {
        self.check()?;
        self.inner.update_destination(name, update, now).await
    }
    async fn create_schedule(
        &self,
        spec: tc_model::schedule::ScheduleSpec,
        now: Timestamp,
    ) -> Result<tc_model::schedule::Schedule, StoreError> {
        self.check()?;
        self.inner.create_schedule(spec, now).await
    }
    async fn update_schedule(
        &self,
        name: String,
        change: tc_model::schedule::ScheduleChange,
        now: Timestamp,
    ) -> Result<tc_model::schedule::Schedule, StoreError> {
        self.check()?;
        self.inner.update_schedule(name, change, now).await
    }
    async fn delete_schedule(&self, name: String) -> Result<(), StoreError> {
        self.check()?;
        self.inner.delete_schedule(name).await
    }
    async fn schedules(&self) -> Result<Vec<tc_model::schedule::Schedule>, StoreError> {
        self.check()?;
        self.inner.schedules().await
    }
    async fn schedule(&self, name: String) -> Result<tc_model::schedule::Schedule, StoreError> {
        self.check()?;
        self.inner.schedule(name).await
    }
    async fn record_firing(
        &self,
        name: String,
        at: Timestamp,
        task: TaskId,
    ) -> Result<bool, StoreError> {
        self.check()?;
        self.inner.record_firing(name, at, task).await
    }
    async fn record_firing_error(
        &self,
        name: String,
        error: tc_model::schedule::FiringError,
    ) -> Result<bool, StoreError> {
        self.check()?;
        self.inner.record_firing_error(name, error).await
    }
    async fn create_tenant(
        &self,
        name: String,
        settings: tc_model::tenant::TenantUpdate,
        now: Timestamp,
    ) -> Result<tc_model::tenant::Tenant, StoreError> {
        self.check()?;
        self.inner.create_tenant(name, settings, now).await
    }
    async fn update_tenant(
        &self,
        name: String,
        update: tc_model::tenant::TenantUpdate,
        now: Timestamp,
    ) -> Result<tc_model::tenant::Tenant, StoreError> {
        self.check()?;
        self.inner.update_tenant(name, update, now).await
    }
    async fn delete_tenant(&self, name: String) -> Result<(), StoreError> {
        self.check()?;
        self.inner.delete_tenant(name).await
    }
    async fn tenants(&self) -> Result<Vec<tc_model::tenant::TenantDetail>, StoreError> {
        self.check()?;
        self.inner.tenants().await
    }
    async fn tenant_settings(
        &self,
    ) -> Result<std::collections::BTreeMap<String, tc_model::tenant::TenantSettings>, StoreError>
    {
        self.check()?;
        self.inner.tenant_settings().await
    }
    async fn tenant(&self, name: String) -> Result<tc_model::tenant::TenantDetail, StoreError> {
        self.check()?;
        self.inner.tenant(name).await
    }
    async fn create_api_key(
        &self,
        tenant: String,
        id: String,
        hash: tc_model::tenant::key::KeyHash,
        now: Timestamp,
    ) -> Result<tc_model::tenant::key::ApiKey, StoreError> {
        self.check()?;
        self.inner.create_api_key(tenant, id, hash, now).await
    }
    async fn revoke_api_key(&self, tenant: String, id: String) -> Result<(), StoreError> {
        self.check()?;
        self.inner.revoke_api_key(tenant, id).await
    }
    async fn api_key(
        &self,
        hash: tc_model::tenant::key::KeyHash,
    ) -> Result<Option<tc_model::tenant::key::KeyOwner>, StoreError> {
        self.check()?;
        self.inner.api_key(hash).await
    }
    async fn touch_api_key(&self, id: String, at: Timestamp) -> Result<(), StoreError> {
        self.check()?;
        self.inner.touch_api_key(id, at).await
    }

    async fn server_key(&self, name: String, candidate: String) -> Result<String, StoreError> {
        self.check()?;
        self.inner.server_key(name, candidate).await
    }

    async fn put_topic(
        &self,
        at: tc_model::topic::TopicRef,
        spec: tc_model::topic::TopicSpec,
        now: Timestamp,
    ) -> Result<(tc_model::topic::Topic, bool), StoreError> {
        self.check()?;
        self.inner.put_topic(at, spec, now).await
    }

    async fn topics(
        &self,
        tenant: Option<String>,
    ) -> Result<Vec<tc_model::topic::Topic>, StoreError> {
        self.check()?;
        self.inner.topics(tenant).await
    }

    async fn topic(
        &self,
        at: tc_model::topic::TopicRef,
    ) -> Result<tc_model::topic::Topic, StoreError> {
        self.check()?;
        self.inner.topic(at).await
    }

    async fn delete_topic(&self, at: tc_model::topic::TopicRef) -> Result<(), StoreError> {
        self.check()?;
        self.inner.delete_topic(at).await
    }

    async fn create_subscription(
        &self,
        at: tc_model::topic::TopicRef,
        id: String,
        spec: tc_model::topic::SubscriptionSpec,
        now: Timestamp,
    ) -> Result<tc_model::topic::Subscription, StoreError> {
        self.check()?;
        self.inner.create_subscription(at, id, spec, now).await
    }

    async fn update_subscription(
        &self,
        at: tc_model::topic::TopicRef,
        id: String,
        update: tc_model::topic::SubscriptionUpdate,
        now: Timestamp,
    ) -> Result<tc_model::topic::Subscription, StoreError> {
        self.check()?;
        self.inner.update_subscription(at, id, update, now).await
    }

    async fn delete_subscription(
        &self,
        at: tc_model::topic::TopicRef,
        id: String,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.inner.delete_subscription(at, id).await
    }

    async fn subscriptions(
        &self,
        at: tc_model::topic::TopicRef,
    ) -> Result<Vec<tc_model::topic::Subscription>, StoreError> {
        self.check()?;
        self.inner.subscriptions(at).await
    }

    async fn publish(
        &self,
        event: tc_model::topic::event::NewEvent,
        id: String,
        now: Timestamp,
    ) -> Result<tc_model::topic::event::Published, StoreError> {
        self.check()?;
        self.inner.publish(event, id, now).await
    }

    async fn event(
        &self,
        at: tc_model::topic::TopicRef,
        id: String,
    ) -> Result<tc_model::topic::event::Event, StoreError> {
        self.check()?;
        self.inner.event(at, id).await
    }

    async fn replay(
        &self,
        at: tc_model::topic::TopicRef,
        id: String,
        since: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<tc_model::topic::Delivery>, StoreError> {
        self.check()?;
        self.inner.replay(at, id, since, now).await
    }

    async fn take_tokens(
        &self,
        asks: Vec<tc_model::cluster::TokenAsk>,
        now: Timestamp,
    ) -> Result<Vec<tc_model::cluster::TokenGrant>, StoreError> {
        self.check()?;
        self.inner.take_tokens(asks, now).await
    }
    async fn share_holds(
        &self,
        learned: Vec<(String, tc_model::cluster::DestinationHolds)>,
        now: Timestamp,
    ) -> Result<Vec<(String, tc_model::cluster::DestinationHolds)>, StoreError> {
        self.check()?;
        self.inner.share_holds(learned, now).await
    }
    async fn delete(&self, id: TaskId) -> Result<(), StoreError> {
        self.check()?;
        self.inner.delete(id).await
    }
    async fn prune(
        &self,
        state: tc_model::State,
        older_than: std::time::Duration,
        now: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        self.check()?;
        self.inner.prune(state, older_than, now, limit).await
    }
    async fn retry(
        &self,
        id: TaskId,
        run_at: Timestamp,
        now: Timestamp,
        acting: Option<tc_model::tenant::Acting>,
    ) -> Result<Task, StoreError> {
        self.check()?;
        self.inner.retry(id, run_at, now, acting).await
    }

    async fn bulk(&self, request: tc_model::store::BulkRequest) -> Result<BulkOutcome, StoreError> {
        self.check()?;
        self.inner.bulk(request).await
    }
}

/// The worker's side as the HTTP layer sees it: cancel goes straight to the
/// store, wakes are counted, the clock stands still.
pub(crate) struct FakeControl {
    store: Arc<Switchable>,
    wakes: Arc<AtomicUsize>,
    changes: tokio::sync::broadcast::Sender<(TaskId, tc_model::State)>,
    interrupted: Arc<std::sync::Mutex<Vec<TaskId>>>,
}

impl Control for FakeControl {
    fn task_submitted(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }

    async fn cancel(&self, id: TaskId) -> Result<Task, StoreError> {
        let task = self.store.cancel(id, NOW).await?;
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

pub(crate) type TestApp = App<Switchable, FakeControl>;

pub(crate) struct Harness {
    pub(crate) app: Arc<TestApp>,
    /// The fake worker's change announcements (to count who listens).
    pub(crate) changes: tokio::sync::broadcast::Sender<(TaskId, tc_model::State)>,
    pub(crate) store: Arc<Switchable>,
    pub(crate) wakes: Arc<AtomicUsize>,
    /// The running tasks a bulk cancel asked the worker to interrupt.
    pub(crate) interrupted: Arc<std::sync::Mutex<Vec<TaskId>>>,
}

pub(crate) async fn harness(config: HttpConfig) -> Harness {
    harness_with_registry(config, Registry::default()).await
}

/// [`harness`] with metrics others registered (as the worker does).
pub(crate) async fn harness_with_registry(config: HttpConfig, registry: Registry) -> Harness {
    let inner = MemoryStore::new();
    let store = Arc::new(Switchable {
        inner,
        down: AtomicBool::new(false),
    });
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
        self.store.down.store(down, Ordering::SeqCst);
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
