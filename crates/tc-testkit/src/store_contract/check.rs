//! What every scenario is written with: the checking macros, the times
//! and urls they use, and helpers that build tasks in a state through the
//! port alone. Declared first in the contract, so its macros reach every
//! topic's module.

use std::time::Duration;

use crate::ClaimDue;
use tc_model::destination::{ClaimGate, Destination, DestinationSettings, DestinationUpdate};
use tc_model::store::{
    Completion, Cursor, Guarded, LeaseLost, ListQuery, Page, StoreError, Submitted, TaskFilter,
    TaskStore,
};
use tc_model::tenant::Scope;
use tc_model::{AttemptRecord, Limits, NewTask, State, Task, TaskId, Timestamp};

/// A heartbeat's answer for a lease it did not extend.
pub(super) fn lost(id: TaskId, attempt: u32, state: Option<State>) -> LeaseLost {
    LeaseLost { id, attempt, state }
}

/// Fails the scenario with a message and the line, unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!("line {}: {}", line!(), format!($($msg)+)));
        }
    };
}

/// Fails the scenario unless the two values are equal, showing both.
macro_rules! ensure_eq {
    ($got:expr, $want:expr, $($msg:tt)+) => {{
        let (got, want) = (&$got, &$want);
        if got != want {
            return Err(format!(
                "line {}: {}\n   got: {:?}\n  want: {:?}",
                line!(),
                format!($($msg)+),
                got,
                want
            ));
        }
    }};
}

/// Turns a store error into the scenario's failure message.
pub(super) trait Step<T> {
    fn step(self, what: &str) -> Result<T, String>;
}

impl<T> Step<T> for Result<T, StoreError> {
    fn step(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: unexpected error: {e}"))
    }
}

pub(super) const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

pub(super) const LEASE: Duration = Duration::from_secs(30);

pub(super) const URL: &str = "http://127.0.0.1:9/hook";

/// `ms` milliseconds after the scenarios' epoch.
pub(super) fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(T0.as_millis() + ms)
}

pub(super) fn new_task(key: &str) -> NewTask {
    task_for(URL, key)
}

pub(super) fn task_with(
    key: &str,
    url: &str,
    body: &[u8],
    max_attempts: u32,
    timeout_ms: u64,
) -> NewTask {
    NewTask::new(
        url.to_owned(),
        body.to_vec(),
        key.to_owned(),
        max_attempts,
        Duration::from_millis(timeout_ms),
        &Limits::default(),
    )
    .unwrap()
}

/// Submits a task that must be new.
pub(super) async fn create<S: TaskStore>(
    store: &S,
    task: NewTask,
    now: Timestamp,
) -> Result<Task, String> {
    let key = task.idempotency_key().to_owned();
    let Submitted { task, created } = store.submit(task, now).await.step("submit")?;
    ensure!(created, "submit of new key {key:?} said created = false");
    Ok(task)
}

/// Claims at `now` and checks that exactly the task `id` came back.
pub(super) async fn claim_only<S: TaskStore>(
    store: &S,
    id: TaskId,
    now: Timestamp,
    lease: Duration,
) -> Result<Task, String> {
    let mut claimed = store
        .claim_due(10, now, lease, tc_model::destination::ClaimGate::default())
        .await
        .step("claim_due")?;
    let ids: Vec<TaskId> = claimed.iter().map(|t| t.id).collect();
    ensure_eq!(
        ids,
        vec![id],
        "claim_due at {now:?} should claim just this task"
    );
    with_history(store, claimed.remove(0)).await
}

/// A claimed task with its history read back: a claim carries none, and is
/// otherwise the stored task.
pub(super) async fn with_history<S: TaskStore>(store: &S, claimed: Task) -> Result<Task, String> {
    ensure!(
        claimed.attempts.is_empty(),
        "a claimed task carries no history, got {:?}",
        claimed.attempts
    );
    let stored = get(store, claimed.id).await?;
    ensure_eq!(
        Task {
            attempts: Vec::new(),
            ..stored.clone()
        },
        claimed,
        "the claimed task is the stored one"
    );
    Ok(stored)
}

pub(super) async fn get<S: TaskStore>(store: &S, id: TaskId) -> Result<Task, String> {
    store.get(id, Scope::Admin).await.step("get")
}

/// The task after a guarded write that must have applied: the write's
/// answer is the state it reached, and the stored task must be in it.
pub(super) async fn applied<S: TaskStore>(
    store: &S,
    id: TaskId,
    result: Guarded,
    what: &str,
) -> Result<Task, String> {
    match result {
        Guarded::Applied(state) => {
            let task = get(store, id).await?;
            ensure_eq!(task.state, state, "{what}: the state it answered");
            Ok(task)
        }
        Guarded::Lost(state) => Err(format!("{what}: lost (task is {state}), should apply")),
    }
}

pub(super) fn open_try(n: u32, started_at: Timestamp) -> AttemptRecord {
    AttemptRecord {
        n,
        started_at,
        finished_at: None,
        http_status: None,
        error: None,
        duration_ms: None,
    }
}

pub(super) fn closed_try(
    n: u32,
    started_at: Timestamp,
    finished_at: Timestamp,
    http_status: Option<u16>,
    error: Option<&str>,
) -> AttemptRecord {
    AttemptRecord {
        n,
        started_at,
        finished_at: Some(finished_at),
        http_status,
        error: error.map(str::to_owned),
        duration_ms: Some(finished_at.duration_since(started_at).as_millis() as u64),
    }
}

pub(super) fn success(http_status: u16) -> Completion {
    Completion::Success {
        http_status,
        result: b"{\"ok\":true}".to_vec(),
        content_type: Some("application/json".to_owned()),
    }
}

pub(super) fn retry(next_run_at: Timestamp, reason: &str, http_status: Option<u16>) -> Completion {
    Completion::Retry {
        next_run_at,
        reason: reason.to_owned(),
        http_status,
    }
}

pub(super) fn failed(reason: &str, http_status: Option<u16>) -> Completion {
    Completion::Failed {
        reason: reason.to_owned(),
        http_status,
    }
}

pub(super) fn ids(tasks: &[Task]) -> Vec<TaskId> {
    tasks.iter().map(|t| t.id).collect()
}

pub(super) async fn list_all<S: TaskStore>(
    store: &S,
    state: Option<State>,
) -> Result<Vec<Task>, String> {
    let page = store
        .list(
            ListQuery {
                filter: TaskFilter::state(state),
                limit: 100_000,
                after: None,
                max_result_bytes: None,
                ..ListQuery::default()
            },
            Scope::Admin,
        )
        .await
        .step("list")?;
    ensure!(
        page.next.is_none(),
        "a listing of everything has a next page"
    );
    Ok(page.tasks)
}

/// Pages through a listing, `limit` at a time, checking each page's size.
pub(super) async fn pages<S: TaskStore>(
    store: &S,
    state: Option<State>,
    limit: usize,
) -> Result<Vec<Vec<Task>>, String> {
    let mut pages = Vec::new();
    let mut after = None;
    for _ in 0..10_000 {
        let Page { tasks, next } = store
            .list(
                ListQuery {
                    filter: TaskFilter::state(state),
                    limit,
                    after,
                    max_result_bytes: None,
                    ..ListQuery::default()
                },
                Scope::Admin,
            )
            .await
            .step("list")?;
        ensure!(
            tasks.len() <= limit,
            "page of {} over limit {limit}",
            tasks.len()
        );
        pages.push(tasks);
        match next {
            // Cursors travel as text through the API; they must survive it.
            Some(cursor) => after = Some(cursor.to_string().parse::<Cursor>().unwrap()),
            None => return Ok(pages),
        }
    }
    Err("listing did not end after 10000 pages".to_owned())
}

/// Builds a task in `state` through the port alone, at times after `now`.
/// Pending tasks are made due far in the future, so later claims skip them.
pub(super) async fn task_in<S: TaskStore>(
    store: &S,
    key: &str,
    state: State,
    now: Timestamp,
) -> Result<Task, String> {
    let far = Timestamp::from_millis(now.as_millis() + 1_000_000_000);
    match state {
        State::Pending => create(store, new_task(key), far).await,
        State::Running => {
            let task = create(store, new_task(key), now).await?;
            claim_only(store, task.id, now, LEASE).await
        }
        State::Success | State::Failed => {
            let task = create(store, new_task(key), now).await?;
            let task = claim_only(store, task.id, now, LEASE).await?;
            let outcome = if state == State::Success {
                success(200)
            } else {
                failed("http_400", Some(400))
            };
            let done = store
                .complete(task.id, task.attempt, outcome, now)
                .await
                .step("complete")?;
            applied(store, task.id, done, "complete").await
        }
        State::Canceled => {
            let task = create(store, new_task(key), now).await?;
            store
                .cancel(task.id, Scope::Admin, now)
                .await
                .step("cancel")
        }
    }
}

/// Two hosts' urls and their destinations (`host:port`).
pub(super) const URL_A: &str = "http://a.example:8001/hook";

pub(super) const DEST_A: &str = "a.example:8001";

pub(super) const URL_B: &str = "http://b.example:8002/hook";

pub(super) const DEST_B: &str = "b.example:8002";

/// A task for `url` with the key `key`.
pub(super) fn task_for(url: &str, key: &str) -> NewTask {
    task_with(
        key,
        url,
        format!("{{\"key\":\"{key}\"}}").as_bytes(),
        3,
        5_000,
    )
}

/// Submits `n` tasks for `url` at `now` (keys `{prefix}-0`, ...), oldest
/// first, through `submit_many` in chunks.
pub(super) async fn create_many<S: TaskStore>(
    store: &S,
    url: &str,
    prefix: &str,
    n: usize,
    now: Timestamp,
) -> Result<Vec<TaskId>, String> {
    let all: Vec<NewTask> = (0..n)
        .map(|i| task_for(url, &format!("{prefix}-{i}")))
        .collect();
    let mut ids = Vec::with_capacity(n);
    for chunk in all.chunks(500) {
        for result in store
            .submit_many(chunk.to_vec(), now)
            .await
            .step("submit_many")?
        {
            ids.push(result.map_err(|e| format!("submit: {e}"))?.task.id);
        }
    }
    Ok(ids)
}

pub(super) async fn set<S: TaskStore>(
    store: &S,
    name: &str,
    update: DestinationUpdate,
    now: Timestamp,
) -> Result<Destination, String> {
    store
        .update_destination(name.to_owned(), update, now)
        .await
        .step("update_destination")
}

pub(super) async fn claim<S: TaskStore>(
    store: &S,
    n: usize,
    now: Timestamp,
    gate: ClaimGate,
) -> Result<Vec<Task>, String> {
    store.claim_due(n, now, LEASE, gate).await.step("claim_due")
}

/// Checks every way of reading a destination's settings back: the one
/// destination, the list, and the worker's settings list.
pub(super) async fn settings_read_back<S: TaskStore>(
    store: &S,
    name: &str,
    want: &DestinationSettings,
) -> Result<(), String> {
    let one = store
        .destination(name.to_owned())
        .await
        .step("destination")?;
    ensure_eq!(&one.settings, want, "destination({name}).settings");
    let listed = store.destinations().await.step("destinations")?;
    let in_list = listed.iter().find(|d| d.name == name).map(|d| &d.settings);
    ensure_eq!(in_list, Some(want), "{name} in destinations()");
    let settings = store
        .destination_settings()
        .await
        .step("destination_settings")?;
    let in_settings = settings.iter().find(|(n, _)| n == name).map(|(_, s)| s);
    ensure_eq!(in_settings, Some(want), "{name} in destination_settings()");
    Ok(())
}
