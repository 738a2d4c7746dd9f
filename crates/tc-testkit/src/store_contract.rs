//! The store contract: what every [`TaskStore`] adapter must do, written
//! against the port only, so that a new adapter is "pass this suite".
//!
//! Each scenario is a plain async function taking a fresh, empty store and
//! returning `Ok(())` or a message saying what broke. Run them all with
//! [`run_all`] and a factory making fresh stores:
//!
//! ```
//! use std::future::Future;
//!
//! use tc_model::store::TaskStore;
//! use tc_testkit::store_contract::{failures, run_all};
//!
//! /// Fails naming every broken scenario; `new_store` makes a fresh store.
//! async fn check_contract<S, Fut>(new_store: impl FnMut() -> Fut)
//! where
//!     S: TaskStore,
//!     Fut: Future<Output = S>,
//! {
//!     let reports = run_all(new_store).await;
//!     assert_eq!(failures(&reports), None);
//! }
//! ```
//!
//! or one by one through [`scenarios`] (a name and a function each), e.g. to
//! print a matrix per adapter. Scenarios pass `now` explicitly and never
//! sleep; run them on a multi-threaded runtime with the real clock (a paused
//! clock would fire the per-scenario timeout while a store waits on its own
//! threads).

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tc_model::destination::{ClaimGate, Destination, DestinationSettings, DestinationUpdate};
use tc_model::store::{
    BULK_CHUNK, BULK_SAMPLE, BulkAction, Completion, Cursor, Guarded, LeaseLost, ListQuery, Page,
    StoreError, Submitted, TaskFilter, TaskStore,
};
use tc_model::{AttemptRecord, Limits, NewTask, Schedule, State, Task, TaskId, Timestamp};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// A scenario's verdict: `Err` says what broke.
pub type Verdict = Result<(), String>;

type Run<S> = fn(S) -> Pin<Box<dyn Future<Output = Verdict> + Send>>;

/// One named scenario of the contract.
pub struct Scenario<S> {
    name: &'static str,
    run: Run<S>,
}

impl<S: TaskStore> Scenario<S> {
    /// The scenario's name (its function's name).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Runs the scenario on `store`, which must be fresh and empty.
    pub fn run(&self, store: S) -> Pin<Box<dyn Future<Output = Verdict> + Send>> {
        (self.run)(store)
    }
}

/// Every scenario of the contract, in a fixed order.
pub fn scenarios<S: TaskStore>() -> Vec<Scenario<S>> {
    macro_rules! list {
        ($($scenario:ident),* $(,)?) => {
            vec![$(Scenario::<S> {
                name: stringify!($scenario),
                run: |store| Box::pin($scenario(store)),
            }),*]
        };
    }
    list![
        submit_creates_a_pending_task,
        resubmit_returns_the_same_task_in_every_state,
        same_key_different_payload_is_a_conflict,
        concurrent_submits_of_one_key_make_one_row,
        concurrent_submits_of_distinct_keys_all_land,
        claim_takes_the_oldest_due_first,
        concurrent_claimers_never_share_a_task,
        complete_success_records_the_result,
        complete_retry_returns_to_pending_until_due,
        complete_failed_is_terminal,
        stale_attempt_write_is_lost,
        write_after_cancel_is_lost,
        write_after_recovery_is_lost,
        cancel_in_every_state,
        heartbeat_extends_only_running_leases,
        old_attempts_heartbeat_leaves_a_newer_claim_alone,
        release_keeps_the_attempt_and_the_history,
        recover_expired_requeues_or_fails,
        attempt_history_records_every_try,
        illegal_writes_change_nothing,
        list_pages_in_creation_order,
        list_pages_are_stable_while_inserting,
        list_pages_stay_within_the_result_budget_without_bodies,
        count_by_state_counts_each_state,
        next_due_is_the_earliest_pending,
        unknown_ids_are_not_found,
        health_answers_and_changes_nothing,
        delete_takes_only_finished_tasks_and_frees_the_key,
        retry_reopens_failed_and_canceled_with_a_fresh_budget,
        a_delayed_task_waits_for_its_time_and_keeps_its_schedule,
        submit_many_answers_each_item_as_submit_would,
        prune_deletes_old_finished_tasks_of_one_state_in_batches,
        list_filters_list_exactly_the_matching_tasks,
        bulk_actions_apply_to_what_their_filter_covers,
        bulk_actions_go_past_one_chunk,
        destination_settings_are_kept_field_by_field,
        a_destination_with_neither_tasks_nor_settings_is_not_found,
        claim_skips_paused_destinations,
        claim_caps_a_destination_by_its_running_tasks,
        claim_rotates_so_a_backlog_does_not_delay_another_host,
        claim_serves_the_destinations_with_fewest_calls_in_flight_first,
        tasks_keep_their_method_and_headers,
        destinations_keep_their_headers_and_signing_secrets,
        a_due_task_is_claimed_past_thousands_of_waiting_destinations,
    ]
}

/// The verdict of one scenario.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario.
    pub name: &'static str,
    /// What it found.
    pub verdict: Verdict,
    /// How long it ran.
    pub elapsed: Duration,
}

/// How long one scenario may run before it counts as hung.
pub const SCENARIO_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs every scenario, each on a fresh store from `make_store`, each in its
/// own task so that a panic or a hang fails that scenario alone.
pub async fn run_all<S, F, Fut>(mut make_store: F) -> Vec<Report>
where
    S: TaskStore,
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
{
    let mut reports = Vec::new();
    for scenario in scenarios::<S>() {
        let store = make_store().await;
        let started = Instant::now();
        let mut running = tokio::spawn(scenario.run(store));
        let verdict = match tokio::time::timeout(SCENARIO_TIMEOUT, &mut running).await {
            Ok(Ok(verdict)) => verdict,
            Ok(Err(join)) if join.is_panic() => Err(format!("panicked: {}", panic_message(join))),
            Ok(Err(join)) => Err(format!("did not finish: {join}")),
            Err(_) => {
                running.abort();
                Err(format!("did not finish within {SCENARIO_TIMEOUT:?}"))
            }
        };
        reports.push(Report {
            name: scenario.name(),
            verdict,
            elapsed: started.elapsed(),
        });
    }
    reports
}

/// Every failed scenario with its message, one per line; `None` if all passed.
pub fn failures(reports: &[Report]) -> Option<String> {
    let failed: Vec<String> = reports
        .iter()
        .filter_map(|r| r.verdict.as_ref().err().map(|e| format!("{}: {e}", r.name)))
        .collect();
    if failed.is_empty() {
        None
    } else {
        Some(format!(
            "{} of {} scenarios failed:\n{}",
            failed.len(),
            reports.len(),
            failed.join("\n")
        ))
    }
}

fn panic_message(join: tokio::task::JoinError) -> String {
    let payload = join.into_panic();
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

// ---------------------------------------------------------------------------
// Checking helpers

/// A heartbeat's answer for a lease it did not extend.
fn lost(id: TaskId, attempt: u32, state: Option<State>) -> LeaseLost {
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
trait Step<T> {
    fn step(self, what: &str) -> Result<T, String>;
}

impl<T> Step<T> for Result<T, StoreError> {
    fn step(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: unexpected error: {e}"))
    }
}

const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);
const LEASE: Duration = Duration::from_secs(30);
const URL: &str = "http://127.0.0.1:9/hook";

/// `ms` milliseconds after the scenarios' epoch.
fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(T0.as_millis() + ms)
}

fn new_task(key: &str) -> NewTask {
    task_for(URL, key)
}

fn task_with(key: &str, url: &str, body: &[u8], max_attempts: u32, timeout_ms: u64) -> NewTask {
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
async fn create<S: TaskStore>(store: &S, task: NewTask, now: Timestamp) -> Result<Task, String> {
    let key = task.idempotency_key().to_owned();
    let Submitted { task, created } = store.submit(task, now).await.step("submit")?;
    ensure!(created, "submit of new key {key:?} said created = false");
    Ok(task)
}

/// Claims at `now` and checks that exactly the task `id` came back.
async fn claim_only<S: TaskStore>(
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
async fn with_history<S: TaskStore>(store: &S, claimed: Task) -> Result<Task, String> {
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

async fn get<S: TaskStore>(store: &S, id: TaskId) -> Result<Task, String> {
    store.get(id).await.step("get")
}

/// The task after a guarded write that must have applied: the write's
/// answer is the state it reached, and the stored task must be in it.
async fn applied<S: TaskStore>(
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

fn open_try(n: u32, started_at: Timestamp) -> AttemptRecord {
    AttemptRecord {
        n,
        started_at,
        finished_at: None,
        http_status: None,
        error: None,
        duration_ms: None,
    }
}

fn closed_try(
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

fn success(http_status: u16) -> Completion {
    Completion::Success {
        http_status,
        result: b"{\"ok\":true}".to_vec(),
        content_type: Some("application/json".to_owned()),
    }
}

fn retry(next_run_at: Timestamp, reason: &str, http_status: Option<u16>) -> Completion {
    Completion::Retry {
        next_run_at,
        reason: reason.to_owned(),
        http_status,
    }
}

fn failed(reason: &str, http_status: Option<u16>) -> Completion {
    Completion::Failed {
        reason: reason.to_owned(),
        http_status,
    }
}

fn ids(tasks: &[Task]) -> Vec<TaskId> {
    tasks.iter().map(|t| t.id).collect()
}

async fn list_all<S: TaskStore>(store: &S, state: Option<State>) -> Result<Vec<Task>, String> {
    let page = store
        .list(ListQuery {
            filter: TaskFilter::state(state),
            limit: 100_000,
            after: None,
            max_result_bytes: None,
            ..ListQuery::default()
        })
        .await
        .step("list")?;
    ensure!(
        page.next.is_none(),
        "a listing of everything has a next page"
    );
    Ok(page.tasks)
}

/// Pages through a listing, `limit` at a time, checking each page's size.
async fn pages<S: TaskStore>(
    store: &S,
    state: Option<State>,
    limit: usize,
) -> Result<Vec<Vec<Task>>, String> {
    let mut pages = Vec::new();
    let mut after = None;
    for _ in 0..10_000 {
        let Page { tasks, next } = store
            .list(ListQuery {
                filter: TaskFilter::state(state),
                limit,
                after,
                max_result_bytes: None,
                ..ListQuery::default()
            })
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
async fn task_in<S: TaskStore>(
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
            store.cancel(task.id, now).await.step("cancel")
        }
    }
}

// ---------------------------------------------------------------------------
// Submit and idempotency

/// A new key makes a pending task, due now, with what was submitted.
pub async fn submit_creates_a_pending_task<S: TaskStore>(store: S) -> Verdict {
    let new = task_with("order-1", URL, b"{\"n\":1}", 4, 2_500);
    let task = create(&store, new.clone(), at(0)).await?;
    ensure_eq!(task.state, State::Pending, "state");
    ensure_eq!(task.url, new.url(), "url");
    ensure_eq!(task.body, new.body(), "body");
    ensure_eq!(task.idempotency_key, new.idempotency_key(), "key");
    ensure_eq!(task.max_attempts, 4, "max_attempts");
    ensure_eq!(task.timeout, Duration::from_millis(2_500), "timeout");
    ensure_eq!(task.attempt, 0, "attempt");
    ensure_eq!(task.created_at, at(0), "created_at");
    ensure_eq!(task.updated_at, at(0), "updated_at");
    ensure_eq!(task.next_run_at, Some(at(0)), "a new task is due at once");
    ensure_eq!(
        (task.started_at, task.finished_at, task.lease_until),
        (None, None, None),
        "times of a new task"
    );
    ensure_eq!(
        (&task.http_status, &task.result, &task.error),
        (&None, &None, &None),
        "outcome of a new task"
    );
    ensure!(task.attempts.is_empty(), "a new task has no tries");
    ensure_eq!(
        get(&store, task.id).await?,
        task,
        "get returns what submit did"
    );
    Ok(())
}

/// The same key and payload give back the existing task, whatever its
/// state; nothing new is created and nothing is requeued.
pub async fn resubmit_returns_the_same_task_in_every_state<S: TaskStore>(store: S) -> Verdict {
    let mut made = Vec::new();
    for (i, state) in State::ALL.into_iter().enumerate() {
        let key = format!("key-{state}");
        made.push(task_in(&store, &key, state, at(i as i64 * 10)).await?);
    }
    // A task waiting for a retry, too.
    let waiting = create(&store, new_task("key-retrying"), at(100)).await?;
    let waiting = claim_only(&store, waiting.id, at(100), LEASE).await?;
    let waiting_id = waiting.id;
    let waiting = store
        .complete(
            waiting.id,
            1,
            retry(at(1_000_000_000), "http_503", Some(503)),
            at(101),
        )
        .await
        .step("complete")?;
    made.push(applied(&store, waiting_id, waiting, "retry").await?);

    for before in &made {
        let again = store
            .submit(new_task(&before.idempotency_key), at(500))
            .await
            .step("resubmit")?;
        ensure!(
            !again.created,
            "resubmit of a {} task created one",
            before.state
        );
        ensure_eq!(again.task, *before, "resubmit of a {} task", before.state);
        ensure_eq!(
            get(&store, before.id).await?,
            *before,
            "stored {} task",
            before.state
        );
    }
    ensure_eq!(
        list_all(&store, None).await?.len(),
        made.len(),
        "resubmits add no rows"
    );
    let claimed = store
        .claim_due(
            100,
            at(600),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(
        claimed.is_empty(),
        "a resubmit made something due: {claimed:?}"
    );
    Ok(())
}

/// The same key with any field of the payload changed is refused, and the
/// first task stays as it was.
pub async fn same_key_different_payload_is_a_conflict<S: TaskStore>(store: S) -> Verdict {
    let original = create(&store, task_with("k", URL, b"{}", 3, 5_000), at(0)).await?;
    let variants = [
        (
            "url",
            task_with("k", "http://127.0.0.1:9/other", b"{}", 3, 5_000),
        ),
        ("body", task_with("k", URL, b"{\"x\":1}", 3, 5_000)),
        ("max_attempts", task_with("k", URL, b"{}", 4, 5_000)),
        ("timeout", task_with("k", URL, b"{}", 3, 5_001)),
    ];
    for (field, variant) in &variants {
        let got = store.submit(variant.clone(), at(10)).await;
        ensure_eq!(
            got,
            Err(StoreError::IdempotencyConflict),
            "same key, different {field}"
        );
    }
    ensure_eq!(
        get(&store, original.id).await?,
        original,
        "the original task"
    );
    // Still a conflict once the task is done.
    let task = claim_only(&store, original.id, at(20), LEASE).await?;
    store
        .complete(task.id, 1, success(200), at(30))
        .await
        .step("complete")?;
    let got = store.submit(variants[1].1.clone(), at(40)).await;
    ensure_eq!(
        got,
        Err(StoreError::IdempotencyConflict),
        "conflict after success"
    );
    ensure_eq!(list_all(&store, None).await?.len(), 1, "rows");
    Ok(())
}

/// Many concurrent submits of one key: one row, one `created`, one id.
pub async fn concurrent_submits_of_one_key_make_one_row<S: TaskStore>(store: S) -> Verdict {
    const CALLERS: usize = 200;
    let store = Arc::new(store);
    let mut callers = JoinSet::new();
    for _ in 0..CALLERS {
        let store = Arc::clone(&store);
        callers.spawn(async move { store.submit(new_task("one-key"), at(0)).await });
    }
    let mut created = 0;
    let mut seen = HashSet::new();
    while let Some(joined) = callers.join_next().await {
        let submitted = joined.unwrap().step("concurrent submit")?;
        created += usize::from(submitted.created);
        seen.insert(submitted.task.id);
    }
    ensure_eq!(created, 1, "submits that said created");
    ensure_eq!(seen.len(), 1, "distinct ids handed out");
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(counts.get(State::Pending), 1, "pending rows");
    ensure_eq!(list_all(&*store, None).await?.len(), 1, "rows listed");
    Ok(())
}

/// Many concurrent submits of distinct keys all land, each once.
pub async fn concurrent_submits_of_distinct_keys_all_land<S: TaskStore>(store: S) -> Verdict {
    const CALLERS: usize = 200;
    let store = Arc::new(store);
    let mut callers = JoinSet::new();
    for i in 0..CALLERS {
        let store = Arc::clone(&store);
        callers.spawn(async move { store.submit(new_task(&format!("key-{i}")), at(0)).await });
    }
    let mut seen = HashSet::new();
    while let Some(joined) = callers.join_next().await {
        let submitted = joined.unwrap().step("concurrent submit")?;
        ensure!(submitted.created, "a new key said created = false");
        ensure!(seen.insert(submitted.task.id), "an id was handed out twice");
    }
    let listed = list_all(&*store, None).await?;
    ensure_eq!(listed.len(), CALLERS, "rows listed");
    let listed: HashSet<TaskId> = listed.iter().map(|t| t.id).collect();
    ensure!(listed == seen, "listed ids differ from the submitted ones");
    Ok(())
}

// ---------------------------------------------------------------------------
// Claiming

/// Claims take due tasks by due time (then creation order), skip the ones
/// not yet due, and mark each running with a lease and an open try.
pub async fn claim_takes_the_oldest_due_first<S: TaskStore>(store: S) -> Verdict {
    // Created in one order, due in another.
    let a = create(&store, new_task("a"), at(30)).await?;
    let b = create(&store, new_task("b"), at(10)).await?;
    let c = create(&store, new_task("c"), at(20)).await?;
    let d = create(&store, new_task("d"), at(1_000)).await?;
    let e = create(&store, new_task("e"), at(20)).await?;

    let none = store
        .claim_due(
            0,
            at(100),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due(0, tc_model::destination::ClaimGate::default())")?;
    ensure!(
        none.is_empty(),
        "claim_due(0, tc_model::destination::ClaimGate::default()) claimed {}",
        none.len()
    );
    let first = store
        .claim_due(
            2,
            at(100),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure_eq!(ids(&first), vec![b.id, c.id], "first two by due time");
    let second = store
        .claim_due(
            10,
            at(100),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure_eq!(
        ids(&second),
        vec![e.id, a.id],
        "the rest of the due ones, ties by creation"
    );
    for task in first.iter().chain(&second) {
        let task = &with_history(&store, task.clone()).await?;
        ensure_eq!(task.state, State::Running, "claimed state");
        ensure_eq!(task.attempt, 1, "claimed attempt");
        ensure_eq!(task.started_at, Some(at(100)), "started_at");
        ensure_eq!(
            task.lease_until,
            Some(at(100).saturating_add(LEASE)),
            "lease_until"
        );
        ensure_eq!(
            task.attempts,
            vec![open_try(1, at(100))],
            "history of a claimed task"
        );
        ensure_eq!(
            get(&store, task.id).await?,
            *task,
            "claim returns the stored task"
        );
    }
    let early = store
        .claim_due(
            10,
            at(999),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(
        early.is_empty(),
        "claimed a task before it was due: {:?}",
        ids(&early)
    );
    let on_time = store
        .claim_due(
            10,
            at(1_000),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure_eq!(ids(&on_time), vec![d.id], "due exactly now is due");
    Ok(())
}

/// Concurrent claimers over many tasks: every task claimed exactly once.
pub async fn concurrent_claimers_never_share_a_task<S: TaskStore>(store: S) -> Verdict {
    const TASKS: usize = 200;
    const CLAIMERS: usize = 8;
    let mut submitted = HashSet::new();
    for i in 0..TASKS {
        submitted.insert(create(&store, new_task(&format!("t{i}")), at(0)).await?.id);
    }
    let store = Arc::new(store);
    let mut claimers = JoinSet::new();
    for _ in 0..CLAIMERS {
        let store = Arc::clone(&store);
        claimers.spawn(async move {
            let mut mine = Vec::new();
            for _ in 0..TASKS {
                let batch = store
                    .claim_due(7, at(1), LEASE, tc_model::destination::ClaimGate::default())
                    .await?;
                if batch.is_empty() {
                    break;
                }
                mine.extend(batch);
            }
            Ok::<_, StoreError>(mine)
        });
    }
    let mut claimed = HashSet::new();
    while let Some(joined) = claimers.join_next().await {
        for task in joined.unwrap().step("claim_due")? {
            ensure!(claimed.insert(task.id), "task {} claimed twice", task.id);
            ensure_eq!(task.attempt, 1, "attempt of a claimed task");
        }
    }
    ensure!(
        claimed == submitted,
        "claimed {} of {TASKS} tasks",
        claimed.len()
    );
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(counts.get(State::Running), TASKS as u64, "running");
    ensure_eq!(counts.get(State::Pending), 0, "pending");
    Ok(())
}

// ---------------------------------------------------------------------------
// Guarded writes

/// Success writes the result and closes the try with its status.
pub async fn complete_success_records_the_result<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("s"), at(0)).await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    let outcome = Completion::Success {
        http_status: 201,
        result: b"created".to_vec(),
        content_type: Some("text/plain".to_owned()),
    };
    let done = store
        .complete(task.id, 1, outcome, at(25))
        .await
        .step("complete")?;
    let done = applied(&store, task.id, done, "complete success").await?;
    ensure_eq!(done.state, State::Success, "state");
    ensure_eq!(done.http_status, Some(201), "http_status");
    ensure_eq!(done.result.as_deref(), Some(&b"created"[..]), "result");
    ensure_eq!(
        done.result_content_type.as_deref(),
        Some("text/plain"),
        "content type"
    );
    ensure_eq!(done.error, None, "error");
    ensure_eq!(done.finished_at, Some(at(25)), "finished_at");
    ensure_eq!(done.updated_at, at(25), "updated_at");
    ensure_eq!(done.lease_until, None, "lease_until");
    ensure_eq!(done.attempt, 1, "attempt");
    ensure_eq!(
        done.attempts,
        vec![closed_try(1, at(10), at(25), Some(201), None)],
        "history"
    );
    ensure_eq!(get(&store, task.id).await?, done, "stored task");
    let again = store
        .complete(task.id, 1, success(200), at(30))
        .await
        .step("complete")?;
    ensure_eq!(again, Guarded::Lost(State::Success), "a second completion");
    ensure_eq!(
        get(&store, task.id).await?,
        done,
        "stored task after a second completion"
    );
    Ok(())
}

/// Retry goes back to pending, due at the given time, keeping the attempt.
pub async fn complete_retry_returns_to_pending_until_due<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("r"), at(0)).await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    let done = store
        .complete(task.id, 1, retry(at(5_000), "http_503", Some(503)), at(20))
        .await
        .step("complete")?;
    let done = applied(&store, task.id, done, "complete retry").await?;
    ensure_eq!(done.state, State::Pending, "state");
    ensure_eq!(done.attempt, 1, "a retry keeps the attempt count");
    ensure_eq!(done.next_run_at, Some(at(5_000)), "next_run_at");
    ensure_eq!(done.error.as_deref(), Some("http_503"), "error");
    ensure_eq!(done.http_status, Some(503), "http_status");
    ensure_eq!(done.lease_until, None, "lease_until");
    ensure_eq!(done.finished_at, None, "finished_at");
    ensure_eq!(
        done.attempts,
        vec![closed_try(1, at(10), at(20), Some(503), Some("http_503"))],
        "history"
    );
    ensure_eq!(get(&store, task.id).await?, done, "stored task");
    let early = store
        .claim_due(
            10,
            at(4_999),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(early.is_empty(), "claimed before the retry was due");
    let again = claim_only(&store, task.id, at(5_000), LEASE).await?;
    ensure_eq!(again.attempt, 2, "the next try's attempt");
    ensure_eq!(again.attempts.len(), 2, "tries in the history");
    ensure_eq!(again.attempts[1], open_try(2, at(5_000)), "the new try");
    Ok(())
}

/// Failed is terminal, with the reason and status.
pub async fn complete_failed_is_terminal<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("f"), at(0)).await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    let done = store
        .complete(task.id, 1, failed("http_400", Some(400)), at(40))
        .await
        .step("complete")?;
    let done = applied(&store, task.id, done, "complete failed").await?;
    ensure_eq!(done.state, State::Failed, "state");
    ensure_eq!(done.error.as_deref(), Some("http_400"), "error");
    ensure_eq!(done.http_status, Some(400), "http_status");
    ensure_eq!(done.finished_at, Some(at(40)), "finished_at");
    ensure_eq!(done.lease_until, None, "lease_until");
    ensure_eq!(
        done.attempts,
        vec![closed_try(1, at(10), at(40), Some(400), Some("http_400"))],
        "history"
    );
    ensure_eq!(get(&store, task.id).await?, done, "stored task");
    let claimed = store
        .claim_due(
            10,
            at(1_000_000),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(claimed.is_empty(), "a failed task was claimed");
    Ok(())
}

/// A write for an attempt other than the current one changes nothing.
pub async fn stale_attempt_write_is_lost<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("stale"), at(0)).await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    store
        .complete(task.id, 1, retry(at(20), "timeout", None), at(15))
        .await
        .step("complete")?;
    let current = claim_only(&store, task.id, at(20), LEASE).await?;
    ensure_eq!(current.attempt, 2, "second try");
    for attempt in [0, 1, 3] {
        let got = store
            .complete(task.id, attempt, success(200), at(30))
            .await
            .step("complete")?;
        ensure_eq!(
            got,
            Guarded::Lost(State::Running),
            "complete with attempt {attempt}"
        );
        let got = store
            .release(task.id, attempt, at(30))
            .await
            .step("release")?;
        ensure_eq!(
            got,
            Guarded::Lost(State::Running),
            "release with attempt {attempt}"
        );
    }
    ensure_eq!(
        get(&store, task.id).await?,
        current,
        "task after stale writes"
    );
    Ok(())
}

/// A canceled task stays canceled whatever its runner writes afterwards.
pub async fn write_after_cancel_is_lost<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("c"), at(0)).await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    let canceled = store.cancel(task.id, at(15)).await.step("cancel")?;
    ensure_eq!(canceled.state, State::Canceled, "state after cancel");
    for outcome in [
        success(200),
        retry(at(100), "http_503", Some(503)),
        failed("http_400", Some(400)),
    ] {
        let got = store
            .complete(task.id, 1, outcome.clone(), at(20))
            .await
            .step("complete")?;
        ensure_eq!(
            got,
            Guarded::Lost(State::Canceled),
            "complete {outcome:?} after cancel"
        );
    }
    let got = store.release(task.id, 1, at(20)).await.step("release")?;
    ensure_eq!(got, Guarded::Lost(State::Canceled), "release after cancel");
    let beat = store
        .heartbeat(vec![(task.id, 1)], at(20), LEASE)
        .await
        .step("heartbeat")?;
    ensure_eq!(
        beat,
        vec![lost(task.id, 1, Some(State::Canceled))],
        "heartbeats extended after cancel"
    );
    ensure_eq!(
        get(&store, task.id).await?,
        canceled,
        "task after late writes"
    );
    Ok(())
}

/// After its lease expired and it was recovered, the old runner's write
/// loses, both while the task waits and once it runs again.
pub async fn write_after_recovery_is_lost<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("rec"), at(0)).await?;
    claim_only(&store, task.id, at(0), Duration::from_secs(1)).await?;
    let moved = store
        .recover_expired(at(2_000))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 1, "recovered");
    let waiting = get(&store, task.id).await?;
    ensure_eq!(waiting.state, State::Pending, "state after recovery");
    let got = store
        .complete(task.id, 1, success(200), at(2_500))
        .await
        .step("complete")?;
    ensure_eq!(
        got,
        Guarded::Lost(State::Pending),
        "old runner completes while pending"
    );
    ensure_eq!(
        get(&store, task.id).await?,
        waiting,
        "task after the lost write"
    );
    let rerun = claim_only(&store, task.id, at(3_000), LEASE).await?;
    ensure_eq!(rerun.attempt, 2, "the recovered try counted");
    let got = store
        .complete(task.id, 1, success(200), at(3_500))
        .await
        .step("complete")?;
    ensure_eq!(
        got,
        Guarded::Lost(State::Running),
        "old runner completes the new try"
    );
    ensure_eq!(
        get(&store, task.id).await?,
        rerun,
        "task after the lost write"
    );
    let got = store
        .complete(task.id, 2, success(200), at(4_000))
        .await
        .step("complete")?;
    ensure_eq!(
        applied(&store, task.id, got, "new runner").await?.state,
        State::Success,
        "new runner's write"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Cancel, heartbeat, release, recovery

/// Pending and running tasks cancel; terminal ones come back unchanged;
/// an unknown id is not found.
pub async fn cancel_in_every_state<S: TaskStore>(store: S) -> Verdict {
    let pending = create(&store, new_task("p"), at(0)).await?;
    let got = store
        .cancel(pending.id, at(5))
        .await
        .step("cancel pending")?;
    ensure_eq!(got.state, State::Canceled, "pending → canceled");
    ensure_eq!(got.finished_at, Some(at(5)), "finished_at");
    ensure_eq!(got.attempt, 0, "attempt");
    ensure!(got.attempts.is_empty(), "a never-run task has no tries");
    ensure_eq!(get(&store, pending.id).await?, got, "stored task");
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        None,
        "a canceled task is not due"
    );
    let claimed = store
        .claim_due(
            10,
            at(1_000),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(claimed.is_empty(), "a canceled task was claimed");

    let running = create(&store, new_task("r"), at(10)).await?;
    claim_only(&store, running.id, at(10), LEASE).await?;
    let got = store
        .cancel(running.id, at(25))
        .await
        .step("cancel running")?;
    ensure_eq!(got.state, State::Canceled, "running → canceled");
    ensure_eq!(got.finished_at, Some(at(25)), "finished_at");
    ensure_eq!(got.lease_until, None, "lease_until");
    ensure_eq!(
        got.attempts,
        vec![closed_try(1, at(10), at(25), None, Some("canceled"))],
        "the cut try is closed as canceled"
    );
    ensure_eq!(get(&store, running.id).await?, got, "stored task");

    for (i, state) in [State::Success, State::Failed, State::Canceled]
        .into_iter()
        .enumerate()
    {
        let before = task_in(&store, &format!("t-{state}"), state, at(100 + i as i64)).await?;
        let got = store
            .cancel(before.id, at(500))
            .await
            .step("cancel terminal")?;
        ensure_eq!(got, before, "cancel of a {state} task returns it unchanged");
        ensure_eq!(get(&store, before.id).await?, before, "stored {state} task");
    }
    let got = store
        .cancel(TaskId::new(Timestamp::from_millis(0), [0xee; 10]), at(600))
        .await;
    ensure_eq!(got, Err(StoreError::NotFound), "cancel of an unknown id");
    Ok(())
}

/// A stalled runner of attempt 1 that heartbeats after the task was
/// recovered and claimed again (attempt 2) extends nothing: the newer claim's
/// lease is its own runner's to extend.
pub async fn old_attempts_heartbeat_leaves_a_newer_claim_alone<S: TaskStore>(store: S) -> Verdict {
    let short = Duration::from_secs(1);
    let task = create(&store, new_task("stalled"), at(0)).await?;
    claim_only(&store, task.id, at(0), short).await?;
    let moved = store
        .recover_expired(at(2_000))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 1, "recovered");
    let rerun = claim_only(&store, task.id, at(2_000), short).await?;
    ensure_eq!(rerun.attempt, 2, "claimed again");
    let beat = store
        .heartbeat(vec![(task.id, 1)], at(2_500), LEASE)
        .await
        .step("heartbeat")?;
    ensure_eq!(
        beat,
        vec![lost(task.id, 1, Some(State::Running))],
        "the old attempt's heartbeat extended a lease"
    );
    ensure_eq!(
        get(&store, task.id).await?.lease_until,
        Some(at(2_000).saturating_add(short)),
        "the newer claim's lease"
    );
    let beat = store
        .heartbeat(vec![(task.id, 2)], at(2_500), LEASE)
        .await
        .step("heartbeat")?;
    ensure_eq!(beat, vec![], "the newer attempt's own heartbeat");
    Ok(())
}

/// Heartbeats extend the leases of running tasks only, and never shorten one.
pub async fn heartbeat_extends_only_running_leases<S: TaskStore>(store: S) -> Verdict {
    let short = Duration::from_secs(10);
    let a = create(&store, new_task("a"), at(0)).await?;
    let a = claim_only(&store, a.id, at(0), short).await?;
    let b = create(&store, new_task("b"), at(1)).await?;
    let b = claim_only(&store, b.id, at(1), short).await?;
    let pending = task_in(&store, "p", State::Pending, at(2)).await?;
    let done = task_in(&store, "d", State::Success, at(3)).await?;
    let gone = TaskId::new(Timestamp::from_millis(0), [0xee; 10]);
    let running = vec![
        (a.id, 1),
        (b.id, 1),
        (pending.id, 0),
        (done.id, 1),
        (gone, 1),
    ];
    let mut beat = store
        .heartbeat(running, at(5_000), LEASE)
        .await
        .step("heartbeat")?;
    beat.sort_by_key(|l| l.id);
    let mut want = vec![
        lost(pending.id, 0, Some(State::Pending)),
        lost(done.id, 1, Some(State::Success)),
        lost(gone, 1, None),
    ];
    want.sort_by_key(|l| l.id);
    ensure_eq!(
        beat,
        want,
        "the leases not extended, with their tasks' states"
    );
    for task in [&a, &b] {
        let now = get(&store, task.id).await?;
        ensure_eq!(
            now.lease_until,
            Some(at(5_000).saturating_add(LEASE)),
            "extended lease"
        );
        ensure_eq!(now.state, State::Running, "state");
    }
    ensure_eq!(
        get(&store, pending.id).await?,
        pending,
        "pending task after heartbeat"
    );
    ensure_eq!(
        get(&store, done.id).await?,
        done,
        "done task after heartbeat"
    );
    // A late, shorter heartbeat does not pull a lease in.
    store
        .heartbeat(vec![(a.id, 1)], at(6_000), Duration::from_secs(1))
        .await
        .step("heartbeat")?;
    ensure_eq!(
        get(&store, a.id).await?.lease_until,
        Some(at(5_000).saturating_add(LEASE)),
        "lease after a shorter heartbeat"
    );
    let moved = store
        .recover_expired(at(20_000))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 0, "extended leases are not expired");
    Ok(())
}

/// Release puts a running task back without using up its attempt; the
/// history keeps the interrupted try and the next claim reuses its number.
pub async fn release_keeps_the_attempt_and_the_history<S: TaskStore>(store: S) -> Verdict {
    // One attempt only: a release that used it up would leave nothing to run.
    let task = create(&store, task_with("rel", URL, b"{}", 1, 1_000), at(0)).await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    let released = store.release(task.id, 1, at(20)).await.step("release")?;
    let released = applied(&store, task.id, released, "release").await?;
    ensure_eq!(released.state, State::Pending, "state");
    ensure_eq!(released.attempt, 0, "the interrupted try is not counted");
    ensure_eq!(released.next_run_at, Some(at(20)), "due at once");
    ensure_eq!(released.lease_until, None, "lease_until");
    let interrupted = closed_try(1, at(10), at(20), None, Some("interrupted"));
    ensure_eq!(released.attempts, vec![interrupted.clone()], "history");
    ensure_eq!(get(&store, task.id).await?, released, "stored task");
    let again = store.release(task.id, 1, at(21)).await.step("release")?;
    ensure_eq!(again, Guarded::Lost(State::Pending), "a second release");

    let rerun = claim_only(&store, task.id, at(30), LEASE).await?;
    ensure_eq!(rerun.attempt, 1, "the next claim reuses the attempt");
    ensure_eq!(
        rerun.attempts,
        vec![interrupted.clone(), open_try(1, at(30))],
        "history keeps both tries"
    );
    let done = store
        .complete(task.id, 1, success(200), at(45))
        .await
        .step("complete")?;
    let done = applied(&store, task.id, done, "complete").await?;
    ensure_eq!(
        done.attempts,
        vec![interrupted, closed_try(1, at(30), at(45), Some(200), None)],
        "history after the rerun"
    );
    Ok(())
}

/// Expired leases go back to pending, or to failed `interrupted` when no
/// attempt is left; live leases (including one ending exactly now) stay.
pub async fn recover_expired_requeues_or_fails<S: TaskStore>(store: S) -> Verdict {
    let s = Duration::from_secs;
    let requeue = create(&store, task_with("requeue", URL, b"{}", 3, 1_000), at(0)).await?;
    claim_only(&store, requeue.id, at(0), s(10)).await?;
    let last = create(&store, task_with("last", URL, b"{}", 1, 1_000), at(0)).await?;
    claim_only(&store, last.id, at(0), s(10)).await?;
    let live = create(&store, new_task("live"), at(0)).await?;
    let live = claim_only(&store, live.id, at(0), s(60)).await?;
    let edge = create(&store, new_task("edge"), at(0)).await?;
    let edge = claim_only(&store, edge.id, at(0), s(20)).await?;
    let waiting = task_in(&store, "waiting", State::Pending, at(0)).await?;

    let moved = store
        .recover_expired(at(20_000))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 2, "recovered");
    let interrupted = closed_try(1, at(0), at(20_000), None, Some("interrupted"));

    let got = get(&store, requeue.id).await?;
    ensure_eq!(got.state, State::Pending, "with attempts left → pending");
    ensure_eq!(got.attempt, 1, "the recovered try counts");
    ensure_eq!(got.next_run_at, Some(at(20_000)), "due at once");
    ensure_eq!(got.lease_until, None, "lease_until");
    ensure_eq!(got.attempts, vec![interrupted.clone()], "history");

    let got = get(&store, last.id).await?;
    ensure_eq!(got.state, State::Failed, "with no attempt left → failed");
    ensure_eq!(got.error.as_deref(), Some("interrupted"), "error");
    ensure_eq!(got.finished_at, Some(at(20_000)), "finished_at");
    ensure_eq!(got.lease_until, None, "lease_until");
    ensure_eq!(got.attempts, vec![interrupted], "history");

    ensure_eq!(get(&store, live.id).await?, live, "a live lease");
    ensure_eq!(
        get(&store, edge.id).await?,
        edge,
        "a lease ending exactly now"
    );
    ensure_eq!(get(&store, waiting.id).await?, waiting, "a pending task");
    let moved = store
        .recover_expired(at(20_000))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 0, "a second recovery");
    Ok(())
}

/// Each try is a row: number, start, end, status, error, duration.
pub async fn attempt_history_records_every_try<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("h"), at(0)).await?;
    claim_only(&store, task.id, at(100), LEASE).await?;
    store
        .complete(task.id, 1, retry(at(1_000), "http_503", Some(503)), at(350))
        .await
        .step("complete")?;
    claim_only(&store, task.id, at(1_000), LEASE).await?;
    store
        .complete(task.id, 2, retry(at(3_000), "timeout", None), at(6_000))
        .await
        .step("complete")?;
    let third = claim_only(&store, task.id, at(7_000), LEASE).await?;
    ensure_eq!(
        third.http_status,
        Some(503),
        "the last answered status is kept"
    );
    let done = store
        .complete(task.id, 3, success(200), at(7_042))
        .await
        .step("complete")?;
    let done = applied(&store, task.id, done, "complete").await?;
    let want = vec![
        closed_try(1, at(100), at(350), Some(503), Some("http_503")),
        closed_try(2, at(1_000), at(6_000), None, Some("timeout")),
        closed_try(3, at(7_000), at(7_042), Some(200), None),
    ];
    ensure_eq!(done.attempts, want, "history in the completion");
    ensure_eq!(get(&store, task.id).await?.attempts, want, "history in get");
    let listed = list_all(&store, None).await?;
    ensure_eq!(
        listed.first().map(|t| &t.attempts),
        Some(&want),
        "history in list"
    );
    Ok(())
}

/// Guarded writes on tasks that are not running change nothing and say so.
pub async fn illegal_writes_change_nothing<S: TaskStore>(store: S) -> Verdict {
    let mut tasks = Vec::new();
    for (i, state) in [
        State::Pending,
        State::Success,
        State::Failed,
        State::Canceled,
    ]
    .into_iter()
    .enumerate()
    {
        tasks.push(task_in(&store, &format!("t-{state}"), state, at(i as i64 * 10)).await?);
    }
    // Pending after a retry, with an attempt on record.
    let retrying = create(&store, new_task("retrying"), at(100)).await?;
    let retrying_id = retrying.id;
    claim_only(&store, retrying.id, at(100), LEASE).await?;
    let retrying = store
        .complete(
            retrying.id,
            1,
            retry(at(1_000_000_000), "http_500", Some(500)),
            at(110),
        )
        .await
        .step("complete")?;
    tasks.push(applied(&store, retrying_id, retrying, "retry").await?);

    for before in &tasks {
        for outcome in [success(200), retry(at(200), "x", None), failed("x", None)] {
            let got = store
                .complete(before.id, before.attempt, outcome, at(300))
                .await
                .step("complete")?;
            ensure_eq!(
                got,
                Guarded::Lost(before.state),
                "complete on a {} task",
                before.state
            );
        }
        let got = store
            .release(before.id, before.attempt, at(300))
            .await
            .step("release")?;
        ensure_eq!(
            got,
            Guarded::Lost(before.state),
            "release on a {} task",
            before.state
        );
        ensure_eq!(
            get(&store, before.id).await?,
            *before,
            "{} task after refused writes",
            before.state
        );
    }
    let beat = store
        .heartbeat(
            tasks.iter().map(|t| (t.id, t.attempt)).collect(),
            at(300),
            LEASE,
        )
        .await
        .step("heartbeat")?;
    ensure_eq!(
        beat.len(),
        tasks.len(),
        "heartbeats on tasks that are not running"
    );
    for lost in &beat {
        let task = tasks.iter().find(|t| t.id == lost.id);
        ensure_eq!(
            Some((lost.attempt, lost.state)),
            task.map(|t| (t.attempt, Some(t.state))),
            "{} lost with its attempt and state",
            lost.id
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Listing and counting

/// Pages follow creation order, honour the limit and the state filter, and
/// the last page says so.
pub async fn list_pages_in_creation_order<S: TaskStore>(store: S) -> Verdict {
    let mut created = Vec::new();
    for i in 0..23 {
        created.push(
            create(&store, new_task(&format!("k{i:02}")), at(i))
                .await?
                .id,
        );
    }
    let running = store
        .claim_due(
            5,
            at(100),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure_eq!(ids(&running), created[..5].to_vec(), "claimed");
    store.cancel(created[5], at(100)).await.step("cancel")?;

    let check = |pages: Vec<Vec<Task>>, sizes: &[usize], want: &[TaskId], what: &str| {
        let got_sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
        if got_sizes != sizes {
            return Err(format!("{what}: page sizes {got_sizes:?}, want {sizes:?}"));
        }
        let got: Vec<TaskId> = pages.iter().flatten().map(|t| t.id).collect();
        if got != want {
            return Err(format!("{what}: tasks out of creation order or missing"));
        }
        Ok(pages.into_iter().flatten().collect::<Vec<Task>>())
    };
    check(
        pages(&store, None, 10).await?,
        &[10, 10, 3],
        &created,
        "all by 10",
    )?;
    check(
        pages(&store, None, 23).await?,
        &[23],
        &created,
        "all in one page",
    )?;
    check(
        pages(&store, None, 22).await?,
        &[22, 1],
        &created,
        "all by 22",
    )?;
    check(
        pages(&store, None, 1000).await?,
        &[23],
        &created,
        "a big limit",
    )?;
    let pending = check(
        pages(&store, Some(State::Pending), 5).await?,
        &[5, 5, 5, 2],
        &created[6..],
        "pending by 5",
    )?;
    ensure!(
        pending.iter().all(|t| t.state == State::Pending),
        "filter leaked other states"
    );
    check(
        pages(&store, Some(State::Running), 2).await?,
        &[2, 2, 1],
        &created[..5],
        "running by 2",
    )?;
    check(
        pages(&store, Some(State::Canceled), 5).await?,
        &[1],
        &created[5..6],
        "canceled",
    )?;
    check(
        pages(&store, Some(State::Success), 5).await?,
        &[0],
        &[],
        "success",
    )?;

    // A cursor past the end is an empty last page.
    let first = store
        .list(ListQuery {
            filter: TaskFilter::state(None),
            limit: 22,
            after: None,
            max_result_bytes: None,
            ..ListQuery::default()
        })
        .await
        .step("list")?;
    let rest = store
        .list(ListQuery {
            filter: TaskFilter::state(None),
            limit: 5,
            after: first.next,
            max_result_bytes: None,
            ..ListQuery::default()
        })
        .await
        .step("list")?;
    ensure_eq!(ids(&rest.tasks), created[22..].to_vec(), "the rest");
    ensure!(rest.next.is_none(), "the rest is the last page");
    Ok(())
}

/// Paging while other tasks are being inserted: no task skipped or repeated.
pub async fn list_pages_are_stable_while_inserting<S: TaskStore>(store: S) -> Verdict {
    const BEFORE: usize = 50;
    const DURING: usize = 200;
    const LIMIT: usize = 7;
    for i in 0..BEFORE {
        create(&store, new_task(&format!("before-{i}")), at(0)).await?;
    }
    let store = Arc::new(store);
    let (progress, mut inserted) = watch::channel(0usize);
    let inserter = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut order = Vec::with_capacity(DURING);
            for i in 0..DURING {
                let task = store
                    .submit(new_task(&format!("during-{i}")), at(1))
                    .await?;
                order.push(task.task.id);
                progress.send_replace(i + 1);
            }
            Ok::<_, StoreError>(order)
        })
    };

    let mut seen: Vec<TaskId> = Vec::new();
    let mut after = None;
    let mut finished = false;
    for _ in 0..100_000 {
        // Read before listing: if the inserter was done then, this listing
        // sees every row.
        let done = *inserted.borrow_and_update() == DURING;
        let page = store
            .list(ListQuery {
                filter: TaskFilter::state(None),
                limit: LIMIT,
                after,
                max_result_bytes: None,
                ..ListQuery::default()
            })
            .await
            .step("list")?;
        match page.next {
            Some(next) => {
                seen.extend(ids(&page.tasks));
                after = Some(next);
            }
            None if done => {
                seen.extend(ids(&page.tasks));
                finished = true;
                break;
            }
            // At the current end while rows are still coming: wait for
            // more and read this page again. An error means the inserter
            // stopped early; its own error is reported below.
            None => {
                if inserted.changed().await.is_err() && *inserted.borrow() < DURING {
                    break;
                }
            }
        }
    }
    let inserted_order = inserter.await.unwrap().step("concurrent submit")?;
    ensure!(finished, "paging did not reach the end");

    let all = ids(&list_all(&*store, None).await?);
    ensure_eq!(all.len(), BEFORE + DURING, "rows at the end");
    let unique: HashSet<TaskId> = seen.iter().copied().collect();
    ensure_eq!(unique.len(), seen.len(), "tasks repeated across pages");
    ensure!(
        seen == all,
        "paging saw {} tasks, the full listing has {}; some were skipped or reordered",
        seen.len(),
        all.len()
    );
    let during: Vec<TaskId> = seen
        .iter()
        .copied()
        .filter(|id| inserted_order.contains(id))
        .collect();
    ensure!(
        during == inserted_order,
        "tasks inserted during paging are out of creation order"
    );
    Ok(())
}

/// Counts follow every state.
pub async fn count_by_state_counts_each_state<S: TaskStore>(store: S) -> Verdict {
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure!(
        counts.iter().all(|(_, n)| n == 0),
        "an empty store counts {counts:?}"
    );
    let want = [
        (State::Pending, 3),
        (State::Running, 2),
        (State::Success, 1),
        (State::Failed, 4),
        (State::Canceled, 1),
    ];
    let mut t = 0;
    for (state, n) in want {
        for i in 0..n {
            task_in(&store, &format!("{state}-{i}"), state, at(t)).await?;
            t += 1;
        }
    }
    let counts = store.count_by_state().await.step("count_by_state")?;
    for (state, n) in want {
        ensure_eq!(counts.get(state), n, "{state} count");
    }
    Ok(())
}

/// A page ends before the task whose result would cross the budget (but
/// holds one task at least), the next page starts right after it, and
/// listed tasks carry no request body.
pub async fn list_pages_stay_within_the_result_budget_without_bodies<S: TaskStore>(
    store: S,
) -> Verdict {
    // Result sizes in creation order; `None` stays pending (no result).
    let sizes = [Some(40), None, Some(70), Some(10), Some(200), Some(5)];
    let mut ids = Vec::new();
    for (i, size) in sizes.iter().enumerate() {
        // The pending one is created "later" so that no claim takes it.
        let created = if size.is_some() {
            at(i as i64)
        } else {
            at(10_000)
        };
        let task = create(&store, new_task(&format!("b{i}")), created).await?;
        if let Some(n) = size {
            claim_only(&store, task.id, at(100 + i as i64), Duration::from_secs(60)).await?;
            let outcome = Completion::Success {
                http_status: 200,
                result: vec![b'r'; *n],
                content_type: None,
            };
            let done = store
                .complete(task.id, 1, outcome, at(200 + i as i64))
                .await
                .step("complete")?;
            applied(&store, task.id, done, "complete").await?;
        }
        ids.push(task.id);
    }
    let budget = Some(100);
    let mut got = Vec::new();
    let mut after = None;
    for _ in 0..10 {
        let page = store
            .list(ListQuery {
                filter: TaskFilter::state(None),
                limit: 10,
                after,
                max_result_bytes: budget,
                ..ListQuery::default()
            })
            .await
            .step("list")?;
        for task in &page.tasks {
            ensure!(
                task.body.is_empty(),
                "a listed task carries its body: {task:?}"
            );
        }
        got.push(page.tasks.iter().map(|t| t.id).collect::<Vec<_>>());
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    // 40+0 fit, 70 would cross; 70+10 fit, 200 would cross; 200 alone (one
    // at least), then 5.
    let want = vec![
        vec![ids[0], ids[1]],
        vec![ids[2], ids[3]],
        vec![ids[4]],
        vec![ids[5]],
    ];
    ensure_eq!(got, want, "pages under a 100-byte budget");
    // Without a budget, one page has them all.
    let all = list_all(&store, None).await?;
    ensure_eq!(all.len(), sizes.len(), "unbudgeted listing");
    ensure!(all.iter().all(|t| t.body.is_empty()), "bodies in a listing");
    Ok(())
}

/// An open store is healthy, before and after writes, and a health check
/// writes nothing.
pub async fn health_answers_and_changes_nothing<S: TaskStore>(store: S) -> Verdict {
    store.health().await.step("health on an empty store")?;
    let task = create(&store, new_task("h"), at(0)).await?;
    for _ in 0..3 {
        store.health().await.step("health")?;
    }
    ensure_eq!(
        store.get(task.id).await.step("get")?,
        task,
        "the task after health checks"
    );
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(counts.get(State::Pending), 1, "pending count");
    Ok(())
}

/// next_due is the earliest next_run_at among pending tasks only.
pub async fn next_due_is_the_earliest_pending<S: TaskStore>(store: S) -> Verdict {
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        None,
        "empty store"
    );
    let a = create(&store, new_task("a"), at(50)).await?;
    let b = create(&store, new_task("b"), at(20)).await?;
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        Some(at(20)),
        "two pending"
    );
    claim_only(&store, b.id, at(20), LEASE).await?;
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        Some(at(50)),
        "running ones do not count"
    );
    store
        .complete(b.id, 1, retry(at(30), "http_503", Some(503)), at(25))
        .await
        .step("complete")?;
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        Some(at(30)),
        "a retry's due time"
    );
    store.cancel(b.id, at(26)).await.step("cancel")?;
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        Some(at(50)),
        "after cancel"
    );
    claim_only(&store, a.id, at(50), LEASE).await?;
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        None,
        "nothing pending"
    );
    Ok(())
}

/// Operations on an id that was never stored say so.
pub async fn unknown_ids_are_not_found<S: TaskStore>(store: S) -> Verdict {
    create(&store, new_task("real"), at(0)).await?;
    let ghost = TaskId::new(Timestamp::from_millis(0), [0xee; 10]);
    ensure_eq!(store.get(ghost).await, Err(StoreError::NotFound), "get");
    ensure_eq!(
        store.cancel(ghost, at(1)).await,
        Err(StoreError::NotFound),
        "cancel"
    );
    ensure_eq!(
        store.complete(ghost, 1, success(200), at(1)).await,
        Err(StoreError::NotFound),
        "complete"
    );
    ensure_eq!(
        store.release(ghost, 1, at(1)).await,
        Err(StoreError::NotFound),
        "release"
    );
    ensure_eq!(
        store.heartbeat(vec![(ghost, 1)], at(1), LEASE).await,
        Ok(vec![lost(ghost, 1, None)]),
        "heartbeat"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Operations: delete, retry

/// A finished task is deleted with its history; its key is free again. A
/// pending or running task is refused with its state, an unknown id is not
/// found.
pub async fn delete_takes_only_finished_tasks_and_frees_the_key<S: TaskStore>(store: S) -> Verdict {
    for state in [State::Pending, State::Running] {
        let task = task_in(&store, &format!("live-{state}"), state, at(0)).await?;
        ensure_eq!(
            store.delete(task.id).await,
            Err(StoreError::NotTerminal(state)),
            "delete of a {state} task"
        );
        ensure_eq!(
            get(&store, task.id).await?,
            task,
            "{state} task after refused delete"
        );
    }
    for state in [State::Success, State::Failed, State::Canceled] {
        let key = format!("done-{state}");
        let task = task_in(&store, &key, state, at(0)).await?;
        store.delete(task.id).await.step("delete")?;
        ensure_eq!(
            store.get(task.id).await,
            Err(StoreError::NotFound),
            "get after delete"
        );
        ensure_eq!(
            store.delete(task.id).await,
            Err(StoreError::NotFound),
            "second delete"
        );
        // The key is free: the same key makes a new task, even with another payload.
        let again = task_with(&key, URL, b"{\"other\":1}", 2, 1_000);
        let fresh = create(&store, again, at(10)).await?;
        ensure!(fresh.id != task.id, "the key's new task reused the old id");
        ensure_eq!(fresh.attempts.len(), 0, "the new task's history");
    }
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(
        counts.iter().map(|(_, n)| n).sum::<u64>(),
        5,
        "tasks left after deletes: {counts:?}"
    );
    ensure_eq!(
        store.delete(TaskId::new(at(0), [7; 10])).await,
        Err(StoreError::NotFound),
        "delete of an unknown id"
    );
    Ok(())
}

/// A failed or canceled task becomes pending at `run_at` with a fresh budget:
/// attempt numbers go on, the history stays, the outcome fields are cleared.
/// Pending, running and success tasks are refused with their state.
pub async fn retry_reopens_failed_and_canceled_with_a_fresh_budget<S: TaskStore>(
    store: S,
) -> Verdict {
    for state in [State::Pending, State::Running, State::Success] {
        let task = task_in(&store, &format!("no-{state}"), state, at(0)).await?;
        ensure_eq!(
            store.retry(task.id, at(1), at(1)).await,
            Err(StoreError::NotRetryable(state)),
            "retry of a {state} task"
        );
        ensure_eq!(
            get(&store, task.id).await?,
            task,
            "{state} task after refused retry"
        );
    }
    ensure_eq!(
        store.retry(TaskId::new(at(0), [7; 10]), at(1), at(1)).await,
        Err(StoreError::NotFound),
        "retry of an unknown id"
    );

    // A task that failed on its last of 2 tries.
    let task = create(&store, task_with("twice", URL, b"{}", 2, 1_000), at(0)).await?;
    for n in 1..=2 {
        let claimed = claim_only(&store, task.id, at(n * 10), LEASE).await?;
        let outcome = if n == 1 {
            Completion::Retry {
                next_run_at: at(n * 10),
                reason: "http_503".to_owned(),
                http_status: Some(503),
            }
        } else {
            failed("http_503", Some(503))
        };
        store
            .complete(task.id, claimed.attempt, outcome, at(n * 10 + 1))
            .await
            .step("complete")?;
    }
    ensure_eq!(
        get(&store, task.id).await?.state,
        State::Failed,
        "state before retry"
    );
    let reopened = store.retry(task.id, at(500), at(100)).await.step("retry")?;
    ensure_eq!(reopened.state, State::Pending, "state after retry");
    ensure_eq!(reopened.attempt, 2, "attempt numbers go on");
    ensure_eq!(reopened.attempt_in_round(), 0, "a fresh round");
    ensure_eq!(reopened.next_run_at, Some(at(500)), "due at run_at");
    ensure_eq!(
        (
            reopened.error.clone(),
            reopened.http_status,
            reopened.result.clone(),
            reopened.finished_at
        ),
        (None, None, None, None),
        "outcome fields cleared"
    );
    ensure_eq!(reopened.attempts.len(), 2, "the history keeps every try");
    ensure_eq!(get(&store, task.id).await?, reopened, "the stored task");
    let early = store
        .claim_due(
            10,
            at(499),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(early.is_empty(), "claimed before run_at: {early:?}");
    // Two more tries: 3 may retry, 4 is the last.
    let third = claim_only(&store, task.id, at(500), LEASE).await?;
    ensure_eq!(third.attempt, 3, "the next try's number");
    ensure!(third.can_retry(), "try 3 of the new round has a successor");
    store.release(task.id, 3, at(501)).await.step("release")?;
    let moved = store
        .recover_expired(at(502))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 0, "nothing expired");
    let third = claim_only(&store, task.id, at(510), Duration::from_millis(1)).await?;
    let moved = store
        .recover_expired(at(600))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 1, "the expired try");
    ensure_eq!(
        get(&store, task.id).await?.state,
        State::Pending,
        "an expired try {} of the new round goes back to pending",
        third.attempt
    );
    let fourth = claim_only(&store, task.id, at(700), LEASE).await?;
    ensure_eq!(fourth.attempt, 4, "the last try's number");
    ensure!(!fourth.can_retry(), "try 4 is the round's last");

    // A canceled task reopens too, due at once.
    let canceled = task_in(&store, "stopped", State::Canceled, at(0)).await?;
    let again = store
        .retry(canceled.id, at(800), at(800))
        .await
        .step("retry")?;
    ensure_eq!(again.state, State::Pending, "canceled task after retry");
    ensure_eq!(again.next_run_at, Some(at(800)), "due now");
    Ok(())
}

/// A task asked to run later is pending and not due until then; its
/// schedule is kept as asked and is part of the idempotency payload.
pub async fn a_delayed_task_waits_for_its_time_and_keeps_its_schedule<S: TaskStore>(
    store: S,
) -> Verdict {
    let later = new_task("later")
        .with_schedule(Schedule::At(at(5_000)))
        .map_err(|e| format!("schedule: {e}"))?;
    let task = create(&store, later.clone(), at(0)).await?;
    ensure_eq!(task.schedule, Schedule::At(at(5_000)), "schedule");
    ensure_eq!(task.next_run_at, Some(at(5_000)), "due at run_at");
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        Some(at(5_000)),
        "next_due"
    );
    let early = store
        .claim_due(
            10,
            at(4_999),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(early.is_empty(), "claimed before its time: {early:?}");

    // The same schedule again is the same task; another is a conflict.
    let again = store.submit(later, at(100)).await.step("resubmit")?;
    ensure!(
        !again.created && again.task.id == task.id,
        "resubmit made {again:?}"
    );
    for other in [
        Schedule::Now,
        Schedule::At(at(5_001)),
        Schedule::After(Duration::from_millis(5_000)),
    ] {
        let new = new_task("later")
            .with_schedule(other)
            .map_err(|e| format!("schedule: {e}"))?;
        ensure_eq!(
            store.submit(new, at(100)).await,
            Err(StoreError::IdempotencyConflict),
            "resubmit with {other:?}"
        );
    }
    let on_time = store
        .claim_due(
            10,
            at(5_000),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure_eq!(ids(&on_time), vec![task.id], "claimed on time");

    // A delay counts from the submit and repeats as the same delay.
    let delayed = new_task("delayed")
        .with_schedule(Schedule::After(Duration::from_millis(300)))
        .map_err(|e| format!("schedule: {e}"))?;
    let task = create(&store, delayed.clone(), at(1_000)).await?;
    ensure_eq!(task.next_run_at, Some(at(1_300)), "due after its delay");
    let again = store.submit(delayed, at(2_000)).await.step("resubmit")?;
    ensure!(
        !again.created && again.task.id == task.id,
        "a later resubmit made {again:?}"
    );
    ensure_eq!(
        again.task.next_run_at,
        Some(at(1_300)),
        "the due time stays"
    );

    // A time that has passed runs at once.
    let past = new_task("past")
        .with_schedule(Schedule::At(at(10)))
        .map_err(|e| format!("schedule: {e}"))?;
    let task = create(&store, past, at(6_000)).await?;
    ensure_eq!(
        task.next_run_at,
        Some(at(6_000)),
        "a past run_at is due now"
    );
    ensure_eq!(task.schedule, Schedule::At(at(10)), "kept as asked");
    Ok(())
}

/// A batch answers item by item, in order, as single submits would: new
/// keys are created, a key seen earlier (in the store or in the batch) is
/// the same task, a different payload under it is a conflict.
pub async fn submit_many_answers_each_item_as_submit_would<S: TaskStore>(store: S) -> Verdict {
    let old = create(&store, new_task("old"), at(0)).await?;
    let batch = vec![
        new_task("a"),
        new_task("old"),
        task_with("old", URL, b"{}", 1, 1_000),
        new_task("b"),
        new_task("a"),
        task_with("a", URL, b"[]", 3, 5_000),
    ];
    let results = store.submit_many(batch, at(10)).await.step("submit_many")?;
    ensure_eq!(results.len(), 6, "one result per item");
    let created: Vec<Option<bool>> = results
        .iter()
        .map(|r| r.as_ref().ok().map(|s| s.created))
        .collect();
    ensure_eq!(
        created,
        vec![Some(true), Some(false), None, Some(true), Some(false), None],
        "created per item"
    );
    ensure_eq!(
        results[2].as_ref().err(),
        Some(&StoreError::IdempotencyConflict),
        "a different payload under an old key"
    );
    ensure_eq!(
        results[5].as_ref().err(),
        Some(&StoreError::IdempotencyConflict),
        "a different payload under a key from earlier in the batch"
    );
    let id = |i: usize| results[i].as_ref().map(|s| s.task.id).ok();
    ensure_eq!(id(1), Some(old.id), "the old key's task");
    ensure_eq!(id(4), id(0), "a key repeated in the batch is one task");
    for i in [0, 3] {
        let task = results[i].as_ref().map_err(|e| format!("item {i}: {e}"))?;
        ensure_eq!(
            get(&store, task.task.id).await?,
            task.task,
            "item {i} as stored"
        );
    }
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(counts.get(State::Pending), 3, "tasks after the batch");
    Ok(())
}

/// Retention deletes finished tasks of one state that finished before the
/// cutoff, at most `limit` at a time and oldest first; never a pending or
/// running one, never a newer one; their keys are free again.
pub async fn prune_deletes_old_finished_tasks_of_one_state_in_batches<S: TaskStore>(
    store: S,
) -> Verdict {
    let old: Vec<Task> = {
        let mut old = Vec::new();
        for n in 0..3 {
            old.push(task_in(&store, &format!("old-{n}"), State::Success, at(n)).await?);
        }
        old
    };
    let failed = task_in(&store, "old-failed", State::Failed, at(0)).await?;
    let pending = task_in(&store, "old-pending", State::Pending, at(0)).await?;
    let running = task_in(&store, "old-running", State::Running, at(0)).await?;
    let fresh = task_in(&store, "fresh", State::Success, at(5_000)).await?;
    let keep = Duration::from_secs(1);
    // At 5.5 s, finished before 4.5 s goes: the three old successes.
    let first = store
        .prune(State::Success, keep, at(5_500), 2)
        .await
        .step("prune")?;
    ensure_eq!(first, 2, "the first batch");
    ensure_eq!(
        store.get(old[0].id).await,
        Err(StoreError::NotFound),
        "oldest gone first"
    );
    ensure_eq!(
        store.get(old[1].id).await,
        Err(StoreError::NotFound),
        "second oldest gone"
    );
    ensure_eq!(
        get(&store, old[2].id).await?.state,
        State::Success,
        "left for the next batch"
    );
    let second = store
        .prune(State::Success, keep, at(5_500), 2)
        .await
        .step("prune")?;
    ensure_eq!(second, 1, "the rest");
    let third = store
        .prune(State::Success, keep, at(5_500), 2)
        .await
        .step("prune")?;
    ensure_eq!(third, 0, "nothing more");
    for (task, what) in [(&failed, "a failed task"), (&fresh, "a newer success")] {
        ensure_eq!(get(&store, task.id).await?, *task, "{what} is kept");
    }
    for state in [State::Pending, State::Running] {
        let n = store
            .prune(state, Duration::ZERO, at(1_000_000), 10)
            .await
            .step("prune")?;
        ensure_eq!(n, 0, "pruning {state} deletes nothing");
    }
    ensure_eq!(
        get(&store, pending.id).await?.state,
        State::Pending,
        "pending kept"
    );
    ensure_eq!(
        get(&store, running.id).await?.state,
        State::Running,
        "running kept"
    );
    let gone = store
        .prune(State::Failed, keep, at(5_500), 10)
        .await
        .step("prune")?;
    ensure_eq!(gone, 1, "the old failure");
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(
        (counts.get(State::Success), counts.get(State::Failed)),
        (1, 0),
        "counts after pruning"
    );
    create(&store, new_task("old-0"), at(6_000)).await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Filters and bulk actions

/// A mix of tasks to filter: every state, two error reasons, three creation
/// times. Returns them as stored, in creation order.
async fn filter_fixture<S: TaskStore>(store: &S) -> Result<Vec<Task>, String> {
    let mut tasks = Vec::new();
    for (i, state) in State::ALL.into_iter().cycle().take(15).enumerate() {
        let now = at(i as i64 * 100);
        let key = format!("f-{i}-{state}");
        let task = if state == State::Failed && i % 2 == 0 {
            let task = create(store, new_task(&key), now).await?;
            let task = claim_only(store, task.id, now, LEASE).await?;
            let done = store
                .complete(task.id, task.attempt, failed("http_503", Some(503)), now)
                .await
                .step("complete")?;
            applied(store, task.id, done, "complete").await?
        } else {
            task_in(store, &key, state, now).await?
        };
        tasks.push(task);
    }
    Ok(tasks)
}

/// Pages through a filtered listing with `limit` and `max_scan`, checking
/// each page; returns the ids in the order the pages gave them.
async fn filtered_ids<S: TaskStore>(
    store: &S,
    filter: &TaskFilter,
    limit: usize,
    max_scan: usize,
) -> Result<Vec<TaskId>, String> {
    let mut found = Vec::new();
    let mut after = None;
    for _ in 0..1_000 {
        let page = store
            .list(ListQuery {
                filter: filter.clone(),
                limit,
                after,
                max_result_bytes: None,
                max_scan,
            })
            .await
            .step("list")?;
        ensure!(page.tasks.len() <= limit, "page over limit {limit}");
        for task in &page.tasks {
            ensure!(filter.matches(task), "{filter:?} listed {task:?}");
            found.push(task.id);
        }
        match page.next {
            Some(next) => {
                ensure!(after != Some(next), "a page's cursor did not move on");
                after = Some(next);
            }
            None => return Ok(found),
        }
    }
    Err("filtered listing did not end after 1000 pages".to_owned())
}

/// Every filter, alone and combined, lists exactly the tasks it matches, in
/// creation order, across pages — also when a page's scan is bounded far
/// below the table (pages then end short, with a cursor to go on).
pub async fn list_filters_list_exactly_the_matching_tasks<S: TaskStore>(store: S) -> Verdict {
    let mut tasks = filter_fixture(&store).await?;
    for (i, url) in ["http://Other.test:8080/a", "https://other.test/b"]
        .iter()
        .enumerate()
    {
        let task = create(
            &store,
            task_with(&format!("other-{i}"), url, b"{}", 1, 1_000),
            at(50),
        )
        .await?;
        tasks.push(task);
    }
    ensure_eq!(
        tasks[15].destination,
        "other.test:8080",
        "a destination is the url's host:port, lower-cased"
    );
    ensure_eq!(tasks[16].destination, "other.test:443", "the scheme's port");
    let mut filters = vec![TaskFilter::default()];
    for state in State::ALL {
        filters.push(TaskFilter::state(Some(state)));
    }
    let error = |e: &str| Some(e.to_owned());
    filters.extend([
        TaskFilter {
            error: error("http_503"),
            ..TaskFilter::default()
        },
        TaskFilter {
            error: error("http_400"),
            state: Some(State::Failed),
            ..TaskFilter::default()
        },
        TaskFilter {
            error: error("canceled"),
            ..TaskFilter::default()
        },
        TaskFilter {
            created_after: Some(at(300)),
            created_before: Some(at(1_000)),
            ..TaskFilter::default()
        },
        TaskFilter {
            created_after: Some(at(700)),
            state: Some(State::Failed),
            ..TaskFilter::default()
        },
        TaskFilter {
            idempotency_key: Some(tasks[3].idempotency_key.clone()),
            ..TaskFilter::default()
        },
        TaskFilter {
            idempotency_key: Some(tasks[3].idempotency_key.clone()),
            state: Some(State::Pending),
            ..TaskFilter::default()
        },
        TaskFilter {
            idempotency_key: Some("no-such-key".to_owned()),
            ..TaskFilter::default()
        },
        TaskFilter {
            destination: Some("other.test:8080".to_owned()),
            ..TaskFilter::default()
        },
        TaskFilter {
            destination: Some("127.0.0.1:9".to_owned()),
            state: Some(State::Pending),
            ..TaskFilter::default()
        },
        TaskFilter {
            destination: Some("127.0.0.1:9".to_owned()),
            error: Some("http_503".to_owned()),
            created_after: Some(at(500)),
            ..TaskFilter::default()
        },
    ]);
    for filter in &filters {
        let want: Vec<TaskId> = tasks
            .iter()
            .filter(|t| filter.matches(t))
            .map(|t| t.id)
            .collect();
        for (limit, max_scan) in [(100, 10_000), (2, 10_000), (2, 3), (1, 1)] {
            let got = filtered_ids(&store, filter, limit, max_scan).await?;
            ensure_eq!(
                got,
                want,
                "{filter:?} with limit {limit}, max_scan {max_scan}"
            );
        }
    }
    // A bounded scan that finds nothing still hands out a cursor while rows
    // remain past it (pending fixtures are created a billion ms ahead).
    let rare = TaskFilter {
        created_after: Some(at(1_000_000_000_000)),
        ..TaskFilter::default()
    };
    let first = store
        .list(ListQuery {
            filter: rare,
            limit: 5,
            max_scan: 3,
            ..ListQuery::default()
        })
        .await
        .step("list")?;
    ensure!(first.tasks.is_empty(), "nothing is that new");
    ensure!(
        first.next.is_some(),
        "a bounded scan ended without a cursor"
    );
    Ok(())
}

/// A bulk action covers what its filter matches, skips the tasks it does
/// not apply to and counts only those it changed; a dry run changes
/// nothing; the sample is the first covered ids; canceled running tasks are
/// named so that their calls can be interrupted.
pub async fn bulk_actions_apply_to_what_their_filter_covers<S: TaskStore>(store: S) -> Verdict {
    let tasks = filter_fixture(&store).await?;
    let now = at(10_000);
    let of = |state: State| -> Vec<TaskId> {
        tasks
            .iter()
            .filter(|t| t.state == state)
            .map(|t| t.id)
            .collect()
    };
    let everything = TaskFilter::default();
    let dry = store
        .bulk(BulkAction::Delete, everything.clone(), true, now)
        .await
        .step("dry run")?;
    ensure_eq!(dry.matched, 15, "a dry run's matched");
    ensure_eq!(dry.applied, 0, "a dry run's applied");
    ensure_eq!(dry.sample, ids(&tasks[..BULK_SAMPLE]), "a dry run's sample");
    ensure_eq!(
        list_all(&store, None).await?.len(),
        15,
        "tasks after a dry run"
    );

    // Retry of failed tasks with one error: the others are not covered.
    let busy = TaskFilter {
        error: Some("http_503".to_owned()),
        ..TaskFilter::default()
    };
    let retried = store
        .bulk(BulkAction::Retry, busy, false, now)
        .await
        .step("bulk retry")?;
    let busy_ids: Vec<TaskId> = tasks
        .iter()
        .filter(|t| t.error.as_deref() == Some("http_503"))
        .map(|t| t.id)
        .collect();
    ensure_eq!(retried.matched, busy_ids.len() as u64, "retry matched");
    ensure_eq!(retried.applied, busy_ids.len() as u64, "retry applied");
    for id in &busy_ids {
        let task = get(&store, *id).await?;
        ensure_eq!(task.state, State::Pending, "a retried task");
        ensure_eq!(task.next_run_at, Some(now), "a retried task is due now");
    }

    // Cancel over everything: applies to pending and running only.
    let running = of(State::Running);
    let pending_now = list_all(&store, Some(State::Pending)).await?.len() as u64;
    let canceled = store
        .bulk(BulkAction::Cancel, everything.clone(), false, now)
        .await
        .step("bulk cancel")?;
    ensure_eq!(canceled.matched, 15, "cancel matched");
    ensure_eq!(
        canceled.applied,
        pending_now + running.len() as u64,
        "cancel applied"
    );
    let mut named = canceled.canceled_running.clone();
    named.sort();
    let mut want = running.clone();
    want.sort();
    ensure_eq!(named, want, "the running tasks the cancel named");
    ensure_eq!(
        list_all(&store, Some(State::Pending)).await?.len()
            + list_all(&store, Some(State::Running)).await?.len(),
        0,
        "live tasks after a cancel of everything"
    );

    // Delete of the successes: the rest stay.
    let deleted = store
        .bulk(
            BulkAction::Delete,
            TaskFilter::state(Some(State::Success)),
            false,
            now,
        )
        .await
        .step("bulk delete")?;
    ensure_eq!(deleted.applied, of(State::Success).len() as u64, "deleted");
    for id in of(State::Success) {
        ensure_eq!(
            store.get(id).await,
            Err(StoreError::NotFound),
            "a deleted task"
        );
    }
    let left = list_all(&store, None).await?.len() as u64;
    ensure_eq!(left, 15 - deleted.applied, "tasks after the delete");

    // Retry skips what it does not apply to (success is gone; canceled and
    // failed apply) and counts only what it changed.
    let again = store
        .bulk(BulkAction::Retry, everything, false, now)
        .await
        .step("bulk retry of everything")?;
    ensure_eq!(again.matched, left, "retry matched");
    ensure_eq!(
        again.applied,
        left,
        "every failed and canceled task retried"
    );
    Ok(())
}

/// A bulk action over more tasks than one transaction takes goes through
/// all of them, chunk after chunk.
pub async fn bulk_actions_go_past_one_chunk<S: TaskStore>(store: S) -> Verdict {
    let n = BULK_CHUNK + 7;
    let submitted = create_many(&store, URL, "many", n, at(0)).await?;
    let pending = TaskFilter::state(Some(State::Pending));
    let canceled = store
        .bulk(BulkAction::Cancel, pending, false, at(10))
        .await
        .step("bulk cancel")?;
    ensure_eq!(
        (canceled.matched, canceled.applied),
        (n as u64, n as u64),
        "cancel of every pending task"
    );
    ensure_eq!(canceled.sample, submitted[..BULK_SAMPLE].to_vec(), "sample");
    let retried = store
        .bulk(BulkAction::Retry, TaskFilter::default(), false, at(20))
        .await
        .step("bulk retry")?;
    ensure_eq!(retried.applied, n as u64, "retry of every canceled task");
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(
        counts.get(State::Pending),
        n as u64,
        "pending after the retry"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Destinations: settings, and how claims honour them

/// Two hosts' urls and their destinations (`host:port`).
const URL_A: &str = "http://a.example:8001/hook";
const DEST_A: &str = "a.example:8001";
const URL_B: &str = "http://b.example:8002/hook";
const DEST_B: &str = "b.example:8002";

/// A task for `url` with the key `key`.
fn task_for(url: &str, key: &str) -> NewTask {
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
async fn create_many<S: TaskStore>(
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

async fn set<S: TaskStore>(
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

async fn claim<S: TaskStore>(
    store: &S,
    n: usize,
    now: Timestamp,
    gate: ClaimGate,
) -> Result<Vec<Task>, String> {
    store.claim_due(n, now, LEASE, gate).await.step("claim_due")
}

/// Checks every way of reading a destination's settings back: the one
/// destination, the list, and the worker's settings list.
async fn settings_read_back<S: TaskStore>(
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

/// Settings are kept as written and read back the same by every call; an
/// update changes only the fields it names (a field left out keeps its
/// value, null clears it); destinations are listed in name order, those
/// with tasks only with the default settings and their counts.
pub async fn destination_settings_are_kept_field_by_field<S: TaskStore>(store: S) -> Verdict {
    let listed = store.destinations().await.step("destinations")?;
    ensure!(listed.is_empty(), "a fresh store lists {listed:?}");
    let all = DestinationSettings {
        max_in_flight: Some(2),
        rate_per_s: Some(5.5),
        burst: Some(10),
        paused: true,
        ..DestinationSettings::default()
    };
    let written = set(
        &store,
        DEST_B,
        DestinationUpdate {
            max_in_flight: Some(Some(2)),
            rate_per_s: Some(Some(5.5)),
            burst: Some(Some(10)),
            paused: Some(true),
            ..DestinationUpdate::default()
        },
        at(0),
    )
    .await?;
    ensure_eq!(
        written,
        Destination {
            name: DEST_B.to_owned(),
            settings: all.clone(),
            pending: 0,
            running: 0,
        },
        "update_destination's answer for a destination without tasks"
    );
    settings_read_back(&store, DEST_B, &all).await?;

    let steps: [(&str, DestinationUpdate, DestinationSettings); 4] = [
        (
            "only paused named: the rest is kept",
            DestinationUpdate {
                paused: Some(false),
                ..DestinationUpdate::default()
            },
            DestinationSettings {
                paused: false,
                ..all.clone()
            },
        ),
        (
            "nothing named: nothing changes",
            DestinationUpdate::default(),
            DestinationSettings {
                paused: false,
                ..all.clone()
            },
        ),
        (
            "cap and rate null: cleared, burst kept",
            DestinationUpdate {
                max_in_flight: Some(None),
                rate_per_s: Some(None),
                ..DestinationUpdate::default()
            },
            DestinationSettings {
                burst: Some(10),
                ..DestinationSettings::default()
            },
        ),
        (
            "burst null: every field back to its default",
            DestinationUpdate {
                burst: Some(None),
                ..DestinationUpdate::default()
            },
            DestinationSettings::default(),
        ),
    ];
    for (n, (what, update, want)) in steps.into_iter().enumerate() {
        let written = set(&store, DEST_B, update, at(10 + n as i64)).await?;
        ensure_eq!(&written.settings, &want, "{what}: update's answer");
        settings_read_back(&store, DEST_B, &want)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
    }

    // A destination with tasks and no settings: listed, with the defaults
    // and its counts, in name order before the one with settings only.
    create(&store, task_for(URL_A, "dest-a-1"), at(20)).await?;
    create(&store, task_for(URL_A, "dest-a-2"), at(21)).await?;
    claim(&store, 1, at(30), ClaimGate::default()).await?;
    let listed = store.destinations().await.step("destinations")?;
    ensure_eq!(
        listed,
        vec![
            Destination {
                name: DEST_A.to_owned(),
                settings: DestinationSettings::default(),
                pending: 1,
                running: 1,
            },
            Destination {
                name: DEST_B.to_owned(),
                settings: DestinationSettings::default(),
                pending: 0,
                running: 0,
            },
        ],
        "destinations() with one host with tasks and one with settings"
    );
    let settings = store
        .destination_settings()
        .await
        .step("destination_settings")?;
    ensure!(
        settings.iter().all(|(name, _)| name != DEST_A),
        "destination_settings() lists {DEST_A}, which never had settings: {settings:?}"
    );
    Ok(())
}

/// `destination` answers NotFound for a destination with neither tasks nor
/// settings, including one whose last task was deleted; while it has a
/// task, in any state, it is found with its counts.
pub async fn a_destination_with_neither_tasks_nor_settings_is_not_found<S: TaskStore>(
    store: S,
) -> Verdict {
    ensure_eq!(
        store.destination(DEST_A.to_owned()).await,
        Err(StoreError::NotFound),
        "a destination never seen"
    );
    let task = create(&store, task_for(URL_A, "nf"), at(0)).await?;
    counts_of(&store, DEST_A, (1, 0), "with its one task pending").await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    counts_of(&store, DEST_A, (0, 1), "with its one task running").await?;
    let done = store
        .complete(task.id, 1, success(200), at(20))
        .await
        .step("complete")?;
    applied(&store, task.id, done, "complete").await?;
    counts_of(&store, DEST_A, (0, 0), "with its one task finished").await?;
    store.delete(task.id).await.step("delete")?;
    ensure_eq!(
        store.destination(DEST_A.to_owned()).await,
        Err(StoreError::NotFound),
        "once its last task is deleted"
    );
    let listed = store.destinations().await.step("destinations")?;
    ensure!(
        listed.is_empty(),
        "destinations() after the delete: {listed:?}"
    );
    Ok(())
}

/// Checks that `destination(name)` answers, with the default settings and
/// these (pending, running) counts.
async fn counts_of<S: TaskStore>(
    store: &S,
    name: &str,
    (pending, running): (u64, u64),
    what: &str,
) -> Verdict {
    let got = store
        .destination(name.to_owned())
        .await
        .step("destination")?;
    ensure_eq!(
        got,
        Destination {
            name: name.to_owned(),
            settings: DestinationSettings::default(),
            pending,
            running,
        },
        "{name} {what}"
    );
    Ok(())
}

/// Nothing of a paused destination is claimed, whatever the claim's size;
/// its tasks stay pending with no attempt used; resumed, they are claimed.
pub async fn claim_skips_paused_destinations<S: TaskStore>(store: S) -> Verdict {
    let paused = create_many(&store, URL_A, "paused", 3, at(0)).await?;
    let free = create_many(&store, URL_B, "free", 2, at(1)).await?;
    let pause = |on: bool| DestinationUpdate {
        paused: Some(on),
        ..DestinationUpdate::default()
    };
    set(&store, DEST_A, pause(true), at(2)).await?;
    let got = claim(&store, 10, at(10), ClaimGate::default()).await?;
    ensure_eq!(ids(&got), free, "a claim of 10 takes only the other host's");
    let again = claim(&store, 10, at(11), ClaimGate::default()).await?;
    ensure_eq!(ids(&again), vec![], "a claim with only paused tasks due");
    for id in &paused {
        let task = get(&store, *id).await?;
        ensure_eq!(
            (task.state, task.attempt),
            (State::Pending, 0),
            "a paused host's task"
        );
    }
    set(&store, DEST_A, pause(false), at(12)).await?;
    let resumed = claim(&store, 10, at(13), ClaimGate::default()).await?;
    ensure_eq!(ids(&resumed), paused, "resumed, its tasks are claimed");
    Ok(())
}

/// `max_in_flight` is counted from the destination's running tasks: with a
/// cap of 2 and one running, a claim takes one more, then none until one
/// ends; a destination at its cap holds no other destination back, even
/// where the rotation meets it first and the claim is of one task.
pub async fn claim_caps_a_destination_by_its_running_tasks<S: TaskStore>(store: S) -> Verdict {
    let capped = create_many(&store, URL_A, "capped", 5, at(0)).await?;
    let free = create_many(&store, URL_B, "free", 2, at(1)).await?;
    set(
        &store,
        DEST_A,
        DestinationUpdate {
            max_in_flight: Some(Some(2)),
            ..DestinationUpdate::default()
        },
        at(2),
    )
    .await?;
    // The rotation starts at the first name, DEST_A.
    let first = claim(&store, 1, at(10), ClaimGate::default()).await?;
    ensure_eq!(ids(&first), vec![capped[0]], "a claim of one");
    let second = claim(&store, 10, at(11), ClaimGate::default()).await?;
    let of = |tasks: &[Task], dest: &str| -> Vec<TaskId> {
        tasks
            .iter()
            .filter(|t| t.destination == dest)
            .map(|t| t.id)
            .collect()
    };
    ensure_eq!(
        of(&second, DEST_A),
        vec![capped[1]],
        "cap 2 with 1 running: one more"
    );
    ensure_eq!(of(&second, DEST_B), free, "the other host, uncapped");
    let at_cap = claim(&store, 10, at(12), ClaimGate::default()).await?;
    ensure_eq!(ids(&at_cap), vec![], "at its cap, with no other host due");
    let counts = store
        .destination(DEST_A.to_owned())
        .await
        .step("destination")?;
    ensure_eq!(
        (counts.running, counts.pending),
        (2, 3),
        "running and pending of the capped host"
    );

    let late = create(&store, task_for(URL_B, "late"), at(13)).await?;
    let past_the_cap = claim(&store, 1, at(14), ClaimGate::default()).await?;
    ensure_eq!(
        ids(&past_the_cap),
        vec![late.id],
        "a claim of one while the first host in rotation is at its cap"
    );

    let done = store
        .complete(capped[0], 1, success(200), at(15))
        .await
        .step("complete")?;
    applied(&store, capped[0], done, "complete").await?;
    let freed = claim(&store, 10, at(16), ClaimGate::default()).await?;
    ensure_eq!(ids(&freed), vec![capped[2]], "one ended: one more");
    Ok(())
}

/// Claims rotate over the destinations with due tasks: with a backlog of
/// 1000 tasks on one host, older than 3 tasks on another, the first claim
/// of 8 takes the other host's 3 beside the backlog's 5 oldest; and a claim
/// starts after the gate's cursor.
pub async fn claim_rotates_so_a_backlog_does_not_delay_another_host<S: TaskStore>(
    store: S,
) -> Verdict {
    let backlog = create_many(&store, URL_A, "backlog", 1000, at(0)).await?;
    let few = create_many(&store, URL_B, "few", 3, at(1)).await?;
    let first = claim(&store, 8, at(10), ClaimGate::default()).await?;
    let mut got = ids(&first);
    got.sort();
    let mut want: Vec<TaskId> = backlog[..5].iter().chain(&few).copied().collect();
    want.sort();
    ensure_eq!(got, want, "the first claim of 8");

    let more_a = backlog[5];
    let more_b = create(&store, task_for(URL_B, "few-more"), at(11)).await?;
    let after = |dest: &str| ClaimGate {
        after: Some(dest.to_owned()),
        ..ClaimGate::default()
    };
    let from_b = claim(&store, 1, at(12), after(DEST_A)).await?;
    ensure_eq!(
        ids(&from_b),
        vec![more_b.id],
        "a claim of one after {DEST_A}"
    );
    let wrapped = claim(&store, 1, at(13), after(DEST_B)).await?;
    ensure_eq!(ids(&wrapped), vec![more_a], "a claim of one after {DEST_B}");
    Ok(())
}

/// Each claimed slot goes to the due destination with the fewest calls in
/// flight on the claiming node (the gate's `in_flight`, counting what the
/// claim already gave it), ties in rotation order: a destination first in
/// rotation but loaded waits while another has due tasks, the claim
/// looking past it; equal loads share by rotation; and a loaded destination
/// alone takes every slot left (no default cap).
pub async fn claim_serves_the_destinations_with_fewest_calls_in_flight_first<S: TaskStore>(
    store: S,
) -> Verdict {
    let a = create_many(&store, URL_A, "loaded", 10, at(0)).await?;
    let b = create_many(&store, URL_B, "idle", 10, at(1)).await?;
    // (what the step shows, claim size, in flight on this node, tasks of A
    // and of B it must take: each destination's oldest not yet claimed)
    type Step<'a> = (&'a str, usize, &'a [(&'a str, usize)], usize, usize);
    let steps: &[Step] = &[
        (
            "one slot beside A's 5 in flight: B's, though A comes first in rotation",
            1,
            &[(DEST_A, 5)],
            0,
            1,
        ),
        (
            "three slots, A at 5 and B at 0: all to B",
            3,
            &[(DEST_A, 5), (DEST_B, 0)],
            0,
            3,
        ),
        (
            "four slots, A at 5 and B at 4: B to 5, then one each by rotation, A first",
            4,
            &[(DEST_A, 5), (DEST_B, 4)],
            2,
            2,
        ),
        (
            "equal loads: shared in rotation order",
            3,
            &[(DEST_A, 7), (DEST_B, 7)],
            2,
            1,
        ),
        (
            "B's last 3 first, then the loaded A takes the rest",
            8,
            &[(DEST_A, 50)],
            5,
            3,
        ),
    ];
    let (mut next_a, mut next_b) = (0, 0);
    for (i, (what, n, in_flight, from_a, from_b)) in steps.iter().enumerate() {
        let gate = ClaimGate {
            in_flight: in_flight
                .iter()
                .map(|(dest, busy)| ((*dest).to_owned(), *busy))
                .collect(),
            ..ClaimGate::default()
        };
        let got = claim(&store, *n, at(10 + i as i64), gate).await?;
        let mut got_ids = ids(&got);
        got_ids.sort();
        let mut want: Vec<TaskId> = a[next_a..next_a + from_a]
            .iter()
            .chain(&b[next_b..next_b + from_b])
            .copied()
            .collect();
        want.sort();
        ensure_eq!(got_ids, want, "{what}");
        next_a += from_a;
        next_b += from_b;
    }
    Ok(())
}

// The scenarios of what a call sends (method, headers, signing secrets):
// declared after the checking macros, which they use.
mod outbound;
// The scenarios of how a claim walks the destinations with due tasks.
mod due_walk;
pub use due_walk::a_due_task_is_claimed_past_thousands_of_waiting_destinations;
pub use outbound::{
    destinations_keep_their_headers_and_signing_secrets, tasks_keep_their_method_and_headers,
};
