//! Requests waiting for a task to end (`GET /tasks/{id}?wait_ms=`).
//!
//! One listener per server takes every change the worker announces and
//! wakes only the waiters of the task that changed (a map from task id to
//! its waiters): a completion costs one map lookup however many requests
//! wait for other tasks, and an idle waiter costs nothing but its entry.
//! When the listener may have missed changes (it lagged behind, or a bulk
//! cancel wrote its cancels in the store without the worker), every waiter
//! is woken to read its task again.
//!
//! Waiters are bounded twice: in all (`max_waiters`, and never more than
//! the connection limit less a 64th of it, at least one: 1008 of 1024, so
//! that connections held by waiters always leave room for other requests,
//! `/healthz` among them),
//! past which a request is answered 503; and per client address
//! (`max_waiters_per_client`), past which it is answered
//! `429 too_many_waiters`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use prometheus_client::metrics::gauge::Gauge;
use tc_model::TaskId;
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use crate::config::HttpConfig;
use crate::error::ApiError;
use crate::worker_port::Control;

/// Every waiting request of one server.
#[derive(Debug)]
pub(crate) struct Waiters {
    registry: Mutex<Registry>,
    /// The most waiters in all.
    capacity: usize,
    /// The most waiters of one client address.
    per_client: usize,
    /// `taskcenter_http_waiters`.
    gauge: Gauge,
    /// The task that hands the worker's changes to the waiters.
    listener: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug, Default)]
struct Registry {
    /// Each task's waiters, by their key.
    by_task: HashMap<TaskId, Vec<(u64, Arc<Notify>)>>,
    by_client: HashMap<IpAddr, usize>,
    total: usize,
    next_key: u64,
}

/// One waiting request's place; it leaves when dropped.
#[derive(Debug)]
pub(crate) struct Waiter {
    waiters: Arc<Waiters>,
    id: TaskId,
    key: u64,
    client: Option<IpAddr>,
    notify: Arc<Notify>,
}

impl Waiters {
    pub(crate) fn new(config: &HttpConfig, gauge: Gauge) -> Arc<Waiters> {
        let connections = config.max_connections.max(1);
        let beside_others = connections - (connections / 64).max(1);
        Arc::new(Waiters {
            registry: Mutex::default(),
            capacity: config.max_waiters.min(beside_others).max(1),
            per_client: config.max_waiters_per_client.max(1),
            gauge,
            listener: Mutex::new(None),
        })
    }

    /// A place to wait for `id` to change, for a request from `client`
    /// (`None`: unknown, bounded only in all); 503 when every place is
    /// taken, 429 when the client's are.
    pub(crate) fn wait_for<C: Control>(
        self: &Arc<Self>,
        control: &C,
        id: TaskId,
        client: Option<IpAddr>,
    ) -> Result<Waiter, ApiError> {
        // Listening before the place is taken: a change announced after the
        // caller's next read of the task reaches it.
        self.listen(control);
        let notify = Arc::new(Notify::new());
        let mut registry = self.lock();
        if registry.total >= self.capacity {
            return Err(ApiError::Unavailable(format!(
                "too many requests waiting for tasks (at most {})",
                self.capacity
            )));
        }
        if let Some(client) = client {
            let count = registry.by_client.entry(client).or_default();
            if *count >= self.per_client {
                return Err(ApiError::TooManyWaiters(format!(
                    "wait_ms: this client already has {} requests waiting \
                     (--max-waiters-per-client)",
                    self.per_client
                )));
            }
            *count += 1;
        }
        registry.total += 1;
        registry.next_key += 1;
        let key = registry.next_key;
        registry
            .by_task
            .entry(id)
            .or_default()
            .push((key, Arc::clone(&notify)));
        drop(registry);
        self.gauge.inc();
        Ok(Waiter {
            waiters: Arc::clone(self),
            id,
            key,
            client,
            notify,
        })
    }

    /// Wakes the waiters of `id`.
    pub(crate) fn task_changed(&self, id: TaskId) {
        if let Some(waiting) = self.lock().by_task.get(&id) {
            for (_, notify) in waiting {
                notify.notify_one();
            }
        }
    }

    /// Wakes every waiter, to read its task again.
    pub(crate) fn wake_all(&self) {
        for waiting in self.lock().by_task.values() {
            for (_, notify) in waiting {
                notify.notify_one();
            }
        }
    }

    /// Starts the listener if none runs (the first waiter, or after the
    /// worker's announcements ended).
    fn listen<C: Control>(self: &Arc<Self>, control: &C) {
        let mut listener = self.listener.lock().unwrap_or_else(PoisonError::into_inner);
        if listener.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let changes = control.changes();
        *listener = Some(tokio::spawn(forward(changes, Arc::downgrade(self))));
    }

    fn leave(&self, waiter: &Waiter) {
        let mut registry = self.lock();
        if let Some(waiting) = registry.by_task.get_mut(&waiter.id) {
            waiting.retain(|(key, _)| *key != waiter.key);
            if waiting.is_empty() {
                registry.by_task.remove(&waiter.id);
            }
        }
        if let Some(client) = waiter.client
            && let Some(count) = registry.by_client.get_mut(&client)
        {
            *count -= 1;
            if *count == 0 {
                registry.by_client.remove(&client);
            }
        }
        registry.total -= 1;
        drop(registry);
        self.gauge.dec();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        // Inserts and removes that cannot panic half-way.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Waiters {
    fn drop(&mut self) {
        if let Some(listener) = self
            .listener
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            listener.abort();
        }
    }
}

/// Hands each terminal state to the waiters of its task, until the worker's
/// announcements end or the waiters are gone.
async fn forward(
    mut changes: tokio::sync::broadcast::Receiver<(TaskId, tc_model::State)>,
    waiters: Weak<Waiters>,
) {
    loop {
        let change = changes.recv().await;
        let Some(waiters) = waiters.upgrade() else {
            return;
        };
        match change {
            Ok((id, state)) if state.is_terminal() => waiters.task_changed(id),
            Ok(_) => {}
            // Missed some: everyone reads their task again.
            Err(RecvError::Lagged(_)) => waiters.wake_all(),
            Err(RecvError::Closed) => {
                waiters.wake_all();
                return;
            }
        }
    }
}

impl Waiter {
    /// Returns when the task may have changed (at once if it did since the
    /// last call).
    pub(crate) async fn changed(&self) {
        self.notify.notified().await;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.waiters.leave(self);
    }
}
