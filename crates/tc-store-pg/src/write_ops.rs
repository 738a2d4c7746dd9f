//! The store's writes as SQL, in the rooms SQLite's adapter uses: submit,
//! claim, heartbeat, cancel, retry, release, recovery, delete, prune and
//! bulk. Every write is one transaction (or one statement, which
//! PostgreSQL runs as one), and answers only after COMMIT returned.
//!
//! Times: `$1` of every statement that stamps a time is the caller's `now`
//! in [`crate::PgClock::Caller`] mode and NULL in database mode, read
//! through `tc_now_ms($1)` (schema.rs). Times the caller computed (a
//! retry's due time) arrive as delays from its `now`, so in database mode
//! they are added to the database's clock.

use std::collections::HashMap;
use std::time::Duration;

use deadpool_postgres::{Client, GenericClient, Transaction};
use tc_model::claim::ClaimWalk;
use tc_model::destination::{ClaimGate, DestinationSettings, FairShare};
use tc_model::store::{BulkAction, Guarded, LeaseLost, StoreError, Submitted, TaskFilter};
use tc_model::{NewTask, State, Task, TaskId, transit};

use crate::destinations::{fold_and_promote, settings_where, settle, walk_ready};
use crate::error::db;
use crate::filter::FilterSql;
use crate::read_ops;
use crate::rows::{self, millis, nanos, parse_state, task_columns};

const CANCELED: &str = "canceled";
const INTERRUPTED: &str = "interrupted";

/// What a submit found.
pub(crate) enum Inserted {
    /// This call created the task.
    Created(Task),
    /// The key was taken by this task (payload not yet compared).
    Existing(Task),
}

/// Each submit's answer from what its insert found, in order: the task it
/// created, the same work found again under its key, or another work under
/// it (a conflict); and whether any task was created.
pub(crate) fn answers(
    tasks: &[NewTask],
    inserted: Vec<Inserted>,
) -> (Vec<Result<Submitted, StoreError>>, bool) {
    let mut created = false;
    let answers = tasks
        .iter()
        .zip(inserted)
        .map(|(task, inserted)| match inserted {
            Inserted::Created(task) => {
                created = true;
                Ok(Submitted {
                    task,
                    created: true,
                })
            }
            Inserted::Existing(existing) if task.same_work_as(&existing) => Ok(Submitted {
                task: existing,
                created: false,
            }),
            Inserted::Existing(_) => Err(StoreError::IdempotencyConflict),
        })
        .collect();
    (answers, created)
}

/// The most items one insert statement of a batch carries.
pub(crate) const BATCH_CHUNK: usize = 1000;

/// Inserts a batch's tasks, or finds the ones that hold their keys, and
/// answers item by item, in order: the first item with a new key creates
/// its task, a later item with that key finds it, as single submits in
/// order would. No subtransaction per item: one `INSERT … SELECT FROM
/// unnest(…) ON CONFLICT DO NOTHING` per chunk of [`BATCH_CHUNK`] items,
/// the items sorted by key across the whole batch, so concurrent batches
/// take their keys in one order and never wait on each other in a cycle.
/// Positions follow the items' order within the transaction (`$2`), so a
/// listing shows them as submitted. Then one read for every key that was
/// taken. All of it in `client`'s transaction, or one statement when one
/// chunk holds the batch.
pub(crate) async fn submit_batch<C: GenericClient>(
    client: &C,
    tasks: &[NewTask],
    now_ms: tc_model::Timestamp,
    now: Option<i64>,
) -> Result<Vec<Inserted>, StoreError> {
    if tasks.len() >= 65_536 {
        return Err(StoreError::Unavailable(
            "a batch holds at most 65535 tasks".into(),
        ));
    }
    let insert = client
        .prepare_cached(concat!(
            "INSERT INTO tasks (pos, id, idempotency_key, state, url, body, max_attempts, \
                                timeout_ns, attempt, created_at, updated_at, next_run_at, \
                                schedule_at, schedule_delay_ms, destination, method, headers, \
                                trace_context) \
             SELECT tc_task_pos(r.within), r.id, r.key, 'pending', r.url, r.body, r.max_attempts, \
                    r.timeout_ns, 0, tc_now_ms($1), tc_now_ms($1), \
                    greatest(coalesce(r.schedule_at, tc_now_ms($1)), tc_now_ms($1)) \
                        + coalesce(r.delay_ms, 0), \
                    r.schedule_at, r.delay_ms, r.destination, r.method, r.headers, \
                    r.trace_context \
             FROM unnest($2::bigint[], $3::bytea[], $4::text[], $5::text[], $6::bytea[], \
                         $7::integer[], $8::bigint[], $9::bigint[], $10::bigint[], $11::text[], \
                         $12::text[], $13::text[], $14::text[]) \
                  AS r(within, id, key, url, body, max_attempts, timeout_ns, schedule_at, \
                       delay_ms, destination, method, headers, trace_context) \
             ORDER BY r.key, r.within \
             ON CONFLICT (idempotency_key) DO NOTHING \
             RETURNING ",
            task_columns!()
        ))
        .await
        .map_err(db)?;
    let by_keys = client
        .prepare_cached(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE idempotency_key = ANY($1)"
        ))
        .await
        .map_err(db)?;
    // The items by key (then by their place), as the statements lock them.
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    order.sort_by(|&a, &b| {
        tasks[a]
            .idempotency_key()
            .cmp(tasks[b].idempotency_key())
            .then(a.cmp(&b))
    });
    let mut answers: Vec<Option<Inserted>> = (0..tasks.len()).map(|_| None).collect();
    // Two rounds: a key found taken whose task then vanished (deleted in
    // between) is inserted once more rather than reported as an error.
    for _ in 0..2 {
        let mut created: HashMap<String, Task> = HashMap::new();
        for chunk in order.chunks(BATCH_CHUNK) {
            let columns = BatchColumns::of(tasks, chunk, now_ms)?;
            let rows = client
                .query(
                    &insert,
                    &[
                        &now,
                        &columns.within,
                        &columns.ids,
                        &columns.keys,
                        &columns.urls,
                        &columns.bodies,
                        &columns.max_attempts,
                        &columns.timeouts,
                        &columns.schedule_at,
                        &columns.delay_ms,
                        &columns.destinations,
                        &columns.methods,
                        &columns.headers,
                        &columns.trace_contexts,
                    ],
                )
                .await
                .map_err(db)?;
            for row in &rows {
                let task = rows::task_from_row(row)?.task;
                created.insert(task.idempotency_key.clone(), task);
            }
        }
        // The first item of each created key made it (the rows went in by
        // key, then place); the later ones find it.
        let mut made: HashMap<&str, Task> = HashMap::new();
        let mut taken: Vec<&str> = Vec::new();
        for &i in &order {
            let key = tasks[i].idempotency_key();
            if let Some(task) = created.remove(key) {
                made.insert(key, task.clone());
                answers[i] = Some(Inserted::Created(task));
            } else if let Some(task) = made.get(key) {
                answers[i] = Some(Inserted::Existing(task.clone()));
            } else {
                taken.push(key);
            }
        }
        taken.dedup();
        let mut found: HashMap<String, Task> = HashMap::new();
        if !taken.is_empty() {
            let mut existing: Vec<Task> = client
                .query(&by_keys, &[&taken])
                .await
                .map_err(db)?
                .iter()
                .map(|row| rows::task_from_row(row).map(|s| s.task))
                .collect::<Result<_, _>>()?;
            read_ops::fill_attempts(client, &mut existing).await?;
            found = existing
                .into_iter()
                .map(|t| (t.idempotency_key.clone(), t))
                .collect();
        }
        let mut missing = Vec::new();
        for &i in &order {
            if answers[i].is_none() {
                match found.get(tasks[i].idempotency_key()) {
                    Some(task) => answers[i] = Some(Inserted::Existing(task.clone())),
                    None => missing.push(i),
                }
            }
        }
        if missing.is_empty() {
            return Ok(answers.into_iter().flatten().collect());
        }
        order = missing;
    }
    Err(StoreError::Unavailable(
        "idempotency key taken and released twice during one batch".into(),
    ))
}

/// A chunk of a batch as one array per column, for `unnest`.
struct BatchColumns<'a> {
    within: Vec<i64>,
    ids: Vec<Vec<u8>>,
    keys: Vec<&'a str>,
    urls: Vec<&'a str>,
    bodies: Vec<&'a [u8]>,
    max_attempts: Vec<i32>,
    timeouts: Vec<i64>,
    schedule_at: Vec<Option<i64>>,
    delay_ms: Vec<Option<i64>>,
    destinations: Vec<String>,
    methods: Vec<&'static str>,
    headers: Vec<Option<String>>,
    trace_contexts: Vec<Option<String>>,
}

impl<'a> BatchColumns<'a> {
    fn of(
        tasks: &'a [NewTask],
        chunk: &[usize],
        now_ms: tc_model::Timestamp,
    ) -> Result<BatchColumns<'a>, StoreError> {
        let mut columns = BatchColumns {
            within: Vec::with_capacity(chunk.len()),
            ids: Vec::with_capacity(chunk.len()),
            keys: Vec::with_capacity(chunk.len()),
            urls: Vec::with_capacity(chunk.len()),
            bodies: Vec::with_capacity(chunk.len()),
            max_attempts: Vec::with_capacity(chunk.len()),
            timeouts: Vec::with_capacity(chunk.len()),
            schedule_at: Vec::with_capacity(chunk.len()),
            delay_ms: Vec::with_capacity(chunk.len()),
            destinations: Vec::with_capacity(chunk.len()),
            methods: Vec::with_capacity(chunk.len()),
            headers: Vec::with_capacity(chunk.len()),
            trace_contexts: Vec::with_capacity(chunk.len()),
        };
        for &i in chunk {
            let task = &tasks[i];
            // As in `submit`: the id's time is the node's own now, its
            // random bits from fastrand.
            let mut random = [0; 10];
            fastrand::fill(&mut random);
            let (schedule_at, delay_ms) = task.schedule().to_parts();
            columns.within.push(i64::try_from(i).unwrap_or(i64::MAX));
            columns
                .ids
                .push(TaskId::new(now_ms, random).as_bytes().to_vec());
            columns.keys.push(task.idempotency_key());
            columns.urls.push(task.url());
            columns.bodies.push(task.body());
            columns.max_attempts.push(
                i32::try_from(task.max_attempts())
                    .map_err(|_| StoreError::Unavailable("max_attempts beyond i32".into()))?,
            );
            columns.timeouts.push(nanos(task.timeout()));
            columns.schedule_at.push(schedule_at);
            columns.delay_ms.push(delay_ms);
            columns
                .destinations
                .push(tc_model::destination_of(task.url()));
            columns.methods.push(task.method().as_str());
            columns.headers.push(task.headers().to_stored());
            columns
                .trace_contexts
                .push(task.trace().map(tc_model::TraceContext::to_stored));
        }
        Ok(columns)
    }
}

/// What the claim answers, before its due time is put on the caller's
/// clock.
pub(crate) struct Claimed {
    pub(crate) tasks: Vec<Task>,
    pub(crate) cursor: Option<String>,
    /// The earliest due time not yet come, and the store's clock when read.
    pub(crate) resume_after: (Option<i64>, i64),
}

/// The claim: see the port's `claim`.
pub(crate) async fn claim(
    tx: &Transaction<'_>,
    n: usize,
    now: Option<i64>,
    lease: Duration,
    gate: &ClaimGate,
) -> Result<Claimed, StoreError> {
    // The settings read and the fold are sent together (tokio-postgres
    // pipelines queries polled at once; the server runs them in order):
    // one round trip instead of three, since the claim loop is serial and
    // a drain is bound by its round trips.
    let (limits, ()) = tokio::try_join!(
        settings_where(tx, "paused OR max_in_flight IS NOT NULL", &[]),
        fold_and_promote(tx, now),
    )?;
    let limits: HashMap<String, DestinationSettings> = limits.into_iter().collect();
    // A capped destination's room is known only once its row is locked
    // (below): the walk meets it without counting it towards enough.
    let is_capped = |name: &str| {
        limits
            .get(name)
            .is_some_and(|s| !s.paused && s.max_in_flight.is_some())
            && gate.allowance(name) != Some(0)
    };
    let mut walk = ClaimWalk::new(n, gate);
    walk_ready(tx, gate.after.as_deref(), |name| {
        if is_capped(name) {
            walk.visit_unsure(name);
            false
        } else {
            walk.visit(name, gate.claim_allowance(name, limits.get(name), 0))
        }
    })
    .await?;
    let (candidates, cursor) = walk.finish();
    let capped: Vec<&str> = candidates
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| is_capped(name))
        .collect();
    let mut running: HashMap<String, u64> = HashMap::new();
    if !capped.is_empty() {
        let lock = tx
            .prepare_cached(
                "SELECT destination FROM destinations WHERE destination = ANY($1) \
                 ORDER BY destination FOR UPDATE",
            )
            .await
            .map_err(db)?;
        tx.query(&lock, &[&capped]).await.map_err(db)?;
        let count = tx
            .prepare_cached(
                "SELECT destination, count(*) FROM tasks \
                 WHERE state = 'running' AND destination = ANY($1) GROUP BY destination",
            )
            .await
            .map_err(db)?;
        for row in tx.query(&count, &[&capped]).await.map_err(db)? {
            let busy: i64 = row.try_get(1).map_err(db)?;
            running.insert(row.try_get(0).map_err(db)?, busy.unsigned_abs());
        }
    }
    let candidates = candidates
        .into_iter()
        .map(|(name, allowed)| {
            if is_capped(&name) {
                let busy = running.get(&name).copied().unwrap_or(0);
                let allowed = gate.claim_allowance(&name, limits.get(&name), busy);
                (name, allowed)
            } else {
                (name, allowed)
            }
        })
        .collect();
    let mut plan = FairShare::new(n, candidates, &gate.in_flight);
    let mut claimed = Vec::with_capacity(n);
    let mut asked: Vec<String> = Vec::new();
    while let Some((destination, want)) = plan.next_take() {
        let got = claim_of(tx, &destination, want, now, lease).await?;
        plan.taken(got.len());
        claimed.extend(got);
        asked.push(destination);
    }
    asked.sort_unstable();
    asked.dedup();
    let resume_after = settle(tx, &asked, now).await?;
    Ok(Claimed {
        tasks: claimed,
        cursor,
        resume_after,
    })
}

/// Moves up to `n` due pending tasks of `destination`, oldest due first,
/// to running. Rows another claimer has locked are skipped, not waited for.
pub(crate) async fn claim_of(
    tx: &Transaction<'_>,
    destination: &str,
    n: usize,
    now: Option<i64>,
    lease: Duration,
) -> Result<Vec<Task>, StoreError> {
    transit(State::Pending, State::Running)?;
    let stmt = tx
        .prepare_cached(concat!(
            "WITH due AS ( \
                 SELECT pos, next_run_at FROM tasks \
                 WHERE state = 'pending' AND destination = $4 \
                   AND next_run_at <= tc_now_ms($1) \
                 ORDER BY next_run_at, pos LIMIT $2 \
                 FOR UPDATE SKIP LOCKED \
             ), claimed AS ( \
                 UPDATE tasks t SET state = 'running', attempt = t.attempt + 1, \
                                    started_at = tc_now_ms($1), \
                                    lease_until = tc_now_ms($1) + $3, \
                                    next_run_at = NULL, updated_at = tc_now_ms($1) \
                 FROM due WHERE t.pos = due.pos \
                 RETURNING due.next_run_at AS was_due, ",
            "t.pos, t.id, t.state, t.url, t.body, t.idempotency_key, t.attempt, \
             t.max_attempts, t.timeout_ns, t.http_status, t.result, t.result_content_type, \
             t.error, t.created_at, t.updated_at, t.started_at, t.finished_at, \
             t.next_run_at, t.lease_until, t.attempts_before_retry, t.schedule_at, \
             t.schedule_delay_ms, t.destination, t.method, t.headers, t.trace_context \
             ), opened AS ( \
                 INSERT INTO attempts (task_id, n, started_at) \
                 SELECT id, attempt, started_at FROM claimed \
             ) \
             SELECT ",
            task_columns!(),
            ", was_due FROM claimed ORDER BY was_due, pos"
        ))
        .await
        .map_err(db)?;
    let limit = i64::try_from(n).unwrap_or(i64::MAX);
    let found = tx
        .query(&stmt, &[&now, &limit, &millis(lease), &destination])
        .await
        .map_err(db)?;
    // Without their histories: the port's claim carries none.
    found
        .iter()
        .map(|row| rows::task_from_row(row).map(|s| s.task))
        .collect()
}

/// Extends the lease of each `(id, attempt)` still running with that very
/// attempt, `RETURNING` the pairs it extended; the others are read back in
/// one more statement (a fresh snapshot: their states as they are now). So
/// a tick is one statement, two when leases were lost, however many pairs.
pub(crate) async fn heartbeat(
    client: &Client,
    running: &[(TaskId, u32)],
    now: Option<i64>,
    lease: Duration,
) -> Result<Vec<LeaseLost>, StoreError> {
    let mut running = running.to_vec();
    running.sort_unstable();
    running.dedup();
    let ids: Vec<&[u8]> = running
        .iter()
        .map(|(id, _)| id.as_bytes().as_slice())
        .collect();
    let attempts: Vec<i32> = running
        .iter()
        .map(|(_, n)| i32::try_from(*n).unwrap_or(i32::MAX))
        .collect();
    let stmt = client
        .prepare_cached(
            // Never shortens a lease: a late heartbeat must not hand a task to
            // recovery earlier than the lease it already had.
            "UPDATE tasks t SET lease_until = greatest(coalesce(t.lease_until, tc_now_ms($1) + $4), \
                                                       tc_now_ms($1) + $4) \
             FROM unnest($2::bytea[], $3::integer[]) AS r(id, attempt) \
             WHERE t.id = r.id AND t.attempt = r.attempt AND t.state = 'running' \
             RETURNING t.id, t.attempt",
        )
        .await
        .map_err(db)?;
    let mut extended = std::collections::HashSet::with_capacity(running.len());
    for row in client
        .query(&stmt, &[&now, &ids, &attempts, &millis(lease)])
        .await
        .map_err(db)?
    {
        let attempt: i32 = row.try_get(1).map_err(db)?;
        extended.insert((
            rows::parse_id(row.try_get(0).map_err(db)?)?,
            u32::try_from(attempt).unwrap_or(0),
        ));
    }
    let lost: Vec<(TaskId, u32)> = running
        .into_iter()
        .filter(|pair| !extended.contains(pair))
        .collect();
    if lost.is_empty() {
        return Ok(Vec::new());
    }
    let stmt = client
        .prepare_cached("SELECT id, state FROM tasks WHERE id = ANY($1)")
        .await
        .map_err(db)?;
    let lost_ids: Vec<&[u8]> = lost
        .iter()
        .map(|(id, _)| id.as_bytes().as_slice())
        .collect();
    let mut states = HashMap::with_capacity(lost.len());
    for row in client.query(&stmt, &[&lost_ids]).await.map_err(db)? {
        let state: String = row.try_get(1).map_err(db)?;
        states.insert(
            rows::parse_id(row.try_get(0).map_err(db)?)?,
            parse_state(&state)?,
        );
    }
    Ok(lost
        .into_iter()
        .map(|(id, attempt)| LeaseLost {
            id,
            attempt,
            state: states.get(&id).copied(),
        })
        .collect())
}

/// The fields a guarded write checks, read under a row lock.
struct Head {
    pos: i64,
    state: State,
    attempt: u32,
}

/// Locks the task's row and reads its head; an unknown id is
/// [`StoreError::NotFound`].
async fn lock_head(tx: &Transaction<'_>, id: &TaskId) -> Result<Head, StoreError> {
    let stmt = tx
        .prepare_cached("SELECT pos, state, attempt FROM tasks WHERE id = $1 FOR UPDATE")
        .await
        .map_err(db)?;
    let row = tx
        .query_opt(&stmt, &[&id.as_bytes().as_slice()])
        .await
        .map_err(db)?
        .ok_or(StoreError::NotFound)?;
    let state: String = row.try_get(1).map_err(db)?;
    let attempt: i32 = row.try_get(2).map_err(db)?;
    Ok(Head {
        pos: row.try_get(0).map_err(db)?,
        state: parse_state(&state)?,
        attempt: u32::try_from(attempt)
            .map_err(|_| StoreError::Unavailable("corrupt row in tasks: bad attempt".into()))?,
    })
}

/// The head if the task is running with `attempt`, else the `Lost` answer.
async fn guard(
    tx: &Transaction<'_>,
    id: &TaskId,
    attempt: u32,
) -> Result<Result<Head, Guarded>, StoreError> {
    let head = lock_head(tx, id).await?;
    if head.state == State::Running && head.attempt == attempt {
        Ok(Ok(head))
    } else {
        Ok(Err(Guarded::Lost(head.state)))
    }
}

/// What a cancel did.
pub(crate) struct Canceled {
    /// The task after the cancel.
    pub(crate) task: Task,
    /// Whether a try was running (somewhere) when it was canceled.
    pub(crate) was_running: bool,
}

/// Pending or running → canceled; a terminal task is returned unchanged. A
/// running task's cancel is announced on `channel` in the same transaction,
/// so every node hears of it once it is committed.
pub(crate) async fn cancel(
    tx: &Transaction<'_>,
    id: &TaskId,
    now: Option<i64>,
    channel: &str,
) -> Result<Canceled, StoreError> {
    let head = lock_head(tx, id).await?;
    if head.state.is_terminal() {
        return Ok(Canceled {
            task: load_pos(tx, head.pos).await?,
            was_running: false,
        });
    }
    transit(head.state, State::Canceled)?;
    let stmt = tx
        .prepare_cached(
            "UPDATE tasks SET state = 'canceled', finished_at = tc_now_ms($1), \
                              updated_at = tc_now_ms($1), lease_until = NULL, next_run_at = NULL, \
                              error = CASE WHEN state = 'running' THEN $3 ELSE error END \
             WHERE pos = $2",
        )
        .await
        .map_err(db)?;
    tx.execute(&stmt, &[&now, &head.pos, &CANCELED])
        .await
        .map_err(db)?;
    let was_running = head.state == State::Running;
    if was_running {
        close_attempt(tx, id, head.attempt, now, None, Some(CANCELED)).await?;
        let notify = tx
            .prepare_cached("SELECT pg_notify($1, $2)")
            .await
            .map_err(db)?;
        tx.execute(&notify, &[&channel, &id.to_string()])
            .await
            .map_err(db)?;
    }
    Ok(Canceled {
        task: load_pos(tx, head.pos).await?,
        was_running,
    })
}

/// Deletes a finished task with its history; its key is free again.
pub(crate) async fn delete(tx: &Transaction<'_>, id: &TaskId) -> Result<(), StoreError> {
    let head = lock_head(tx, id).await?;
    if !head.state.is_terminal() {
        return Err(StoreError::NotTerminal(head.state));
    }
    let attempts = tx
        .prepare_cached("DELETE FROM attempts WHERE task_id = $1")
        .await
        .map_err(db)?;
    tx.execute(&attempts, &[&id.as_bytes().as_slice()])
        .await
        .map_err(db)?;
    let task = tx
        .prepare_cached("DELETE FROM tasks WHERE pos = $1")
        .await
        .map_err(db)?;
    tx.execute(&task, &[&head.pos]).await.map_err(db)?;
    Ok(())
}

/// Deletes up to `limit` tasks in terminal `state` finished more than
/// `older_than_ms` before now (the store's clock), with their attempts.
/// Rows another transaction holds are skipped, not waited for.
pub(crate) async fn prune(
    tx: &Transaction<'_>,
    state: State,
    older_than_ms: i64,
    now: Option<i64>,
    limit: i64,
) -> Result<usize, StoreError> {
    if !state.is_terminal() || limit <= 0 {
        return Ok(0);
    }
    let stmt = tx
        .prepare_cached(
            "WITH doomed AS ( \
                 SELECT pos, id FROM tasks \
                 WHERE state = $2 AND finished_at < tc_now_ms($1) - $3 \
                 ORDER BY pos LIMIT $4 FOR UPDATE SKIP LOCKED \
             ), gone AS ( \
                 DELETE FROM attempts WHERE task_id IN (SELECT id FROM doomed) \
             ) \
             DELETE FROM tasks WHERE pos IN (SELECT pos FROM doomed)",
        )
        .await
        .map_err(db)?;
    let deleted = tx
        .execute(&stmt, &[&now, &state.as_str(), &older_than_ms, &limit])
        .await
        .map_err(db)?;
    Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
}

/// Failed or canceled → pending, due `delay_ms` after now, with a fresh
/// budget of tries (the tries so far become `attempts_before_retry`).
pub(crate) async fn retry(
    tx: &Transaction<'_>,
    id: &TaskId,
    delay_ms: i64,
    now: Option<i64>,
) -> Result<Task, StoreError> {
    let head = lock_head(tx, id).await?;
    tc_model::retry_by_hand(head.state).map_err(|e| StoreError::NotRetryable(e.from))?;
    let stmt = tx
        .prepare_cached(
            "UPDATE tasks SET state = 'pending', attempts_before_retry = attempt, error = NULL, \
                              http_status = NULL, result = NULL, result_content_type = NULL, \
                              finished_at = NULL, lease_until = NULL, \
                              next_run_at = tc_now_ms($1) + $3, updated_at = tc_now_ms($1) \
             WHERE pos = $2",
        )
        .await
        .map_err(db)?;
    tx.execute(&stmt, &[&now, &head.pos, &delay_ms])
        .await
        .map_err(db)?;
    load_pos(tx, head.pos).await
}

/// Running → pending without using up the attempt, if still on `attempt`.
pub(crate) async fn release(
    tx: &Transaction<'_>,
    id: &TaskId,
    attempt: u32,
    now: Option<i64>,
) -> Result<Guarded, StoreError> {
    let head = match guard(tx, id, attempt).await? {
        Ok(head) => head,
        Err(lost) => return Ok(lost),
    };
    let to = transit(head.state, State::Pending)?;
    let stmt = tx
        .prepare_cached(
            "UPDATE tasks SET state = 'pending', attempt = attempt - 1, \
                              next_run_at = tc_now_ms($1), lease_until = NULL, error = $3, \
                              updated_at = tc_now_ms($1) \
             WHERE pos = $2",
        )
        .await
        .map_err(db)?;
    tx.execute(&stmt, &[&now, &head.pos, &INTERRUPTED])
        .await
        .map_err(db)?;
    // The history keeps the interrupted try; the next claim reuses its n.
    close_attempt(tx, id, attempt, now, None, Some(INTERRUPTED)).await?;
    Ok(Guarded::Applied(to))
}

/// Running tasks whose lease ended before now → pending, or → failed when no
/// attempt is left, with their open tries closed; one statement. Rows locked
/// by a write in progress (a completion racing the recovery) are skipped:
/// that write decides them.
pub(crate) async fn recover_expired(
    client: &Client,
    now: Option<i64>,
) -> Result<usize, StoreError> {
    transit(State::Running, State::Pending)?;
    transit(State::Running, State::Failed)?;
    let stmt = client
        .prepare_cached(
            "WITH expired AS ( \
                 SELECT pos, attempt < max_attempts + attempts_before_retry AS again FROM tasks \
                 WHERE state = 'running' AND lease_until < tc_now_ms($1) \
                 FOR UPDATE SKIP LOCKED \
             ), moved AS ( \
                 UPDATE tasks t SET \
                     state = CASE WHEN e.again THEN 'pending' ELSE 'failed' END, \
                     next_run_at = CASE WHEN e.again THEN tc_now_ms($1) END, \
                     finished_at = CASE WHEN e.again THEN NULL ELSE tc_now_ms($1) END, \
                     lease_until = NULL, error = $2, updated_at = tc_now_ms($1) \
                 FROM expired e WHERE t.pos = e.pos \
                 RETURNING t.id, t.attempt \
             ), closed AS ( \
                 UPDATE attempts a SET finished_at = tc_now_ms($1), error = $2, \
                                       duration_ms = greatest(tc_now_ms($1) - a.started_at, 0) \
                 FROM moved m \
                 WHERE a.task_id = m.id AND a.n = m.attempt AND a.finished_at IS NULL \
             ) \
             SELECT count(*) FROM moved",
        )
        .await
        .map_err(db)?;
    let moved: i64 = client
        .query_one(&stmt, &[&now, &INTERRUPTED])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)?;
    Ok(usize::try_from(moved).unwrap_or(0))
}

/// Closes the open history row of try `n`.
async fn close_attempt(
    tx: &Transaction<'_>,
    id: &TaskId,
    n: u32,
    now: Option<i64>,
    http_status: Option<u16>,
    error: Option<&str>,
) -> Result<(), StoreError> {
    let stmt = tx
        .prepare_cached(
            "UPDATE attempts SET finished_at = tc_now_ms($1), http_status = $4, error = $5, \
                                 duration_ms = greatest(tc_now_ms($1) - started_at, 0) \
             WHERE task_id = $2 AND n = $3 AND finished_at IS NULL",
        )
        .await
        .map_err(db)?;
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    let status = http_status.map(i32::from);
    tx.execute(
        &stmt,
        &[&now, &id.as_bytes().as_slice(), &n, &status, &error],
    )
    .await
    .map_err(db)?;
    Ok(())
}

/// The task at `pos` with its history.
async fn load_pos(tx: &Transaction<'_>, pos: i64) -> Result<Task, StoreError> {
    let stmt = tx
        .prepare_cached(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE pos = $1"
        ))
        .await
        .map_err(db)?;
    let row = tx
        .query_opt(&stmt, &[&pos])
        .await
        .map_err(db)?
        .ok_or_else(|| StoreError::Unavailable(format!("task at pos {pos} vanished")))?;
    let task = rows::task_from_row(&row)?.task;
    let mut task = [task];
    read_ops::fill_attempts(tx, &mut task).await?;
    let [task] = task;
    Ok(task)
}

/// A bulk action's horizon: the snapshot of the transactions that had
/// committed when it started. A task is covered only if the transaction
/// that inserted it (its position's upper bits) is visible in it.
pub(crate) async fn bulk_snapshot(client: &Client) -> Result<String, StoreError> {
    let stmt = client
        .prepare_cached("SELECT pg_current_snapshot()::text")
        .await
        .map_err(db)?;
    client
        .query_one(&stmt, &[])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)
}

/// The covered tasks of one bulk step: up to `n` after `after`, inserted
/// by transactions visible in `snapshot`.
pub(crate) async fn bulk_covered(
    tx: &Transaction<'_>,
    filter: &TaskFilter,
    snapshot: &str,
    after: i64,
    n: i64,
) -> Result<Vec<(i64, TaskId)>, StoreError> {
    let filter = FilterSql::new(filter, 4);
    let stmt = tx
        .prepare_cached(&format!(
            "SELECT pos, id FROM tasks \
             WHERE {driving} AND {rest} AND pos > $1 \
             AND pg_visible_in_snapshot((pos / 65536)::text::xid8, $2::text::pg_snapshot) \
             ORDER BY pos LIMIT $3",
            driving = filter.driving,
            rest = filter.rest,
        ))
        .await
        .map_err(db)?;
    let rows = tx
        .query(&stmt, &filter.params(&[&after, &snapshot, &n]))
        .await
        .map_err(db)?;
    rows.iter()
        .map(|row| {
            let id: Vec<u8> = row.try_get(1).map_err(db)?;
            Ok((row.try_get(0).map_err(db)?, rows::parse_id(id)?))
        })
        .collect()
}

/// What one bulk step changed.
pub(crate) struct BulkApplied {
    /// How many tasks it changed.
    pub(crate) applied: u64,
    /// The tasks it canceled while they were running.
    pub(crate) canceled_running: Vec<TaskId>,
}

/// Applies `action` to the tasks at `positions` still in a state it applies
/// to (read again under the row locks: a worker may have moved them since
/// the scan), in one statement. Rows are locked in position order, so two
/// bulk steps never wait on each other in a cycle, and a single write waits
/// at most for this statement, and only on a task it changes. A running
/// task's cancel is announced on `channel`, as a single cancel's is.
pub(crate) async fn bulk_apply(
    tx: &Transaction<'_>,
    action: BulkAction,
    positions: &[i64],
    now: Option<i64>,
    channel: &str,
) -> Result<BulkApplied, StoreError> {
    let from: Vec<State> = State::ALL
        .into_iter()
        .filter(|s| action.applies_to(*s))
        .collect();
    let names: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
    match action {
        BulkAction::Retry => {
            for state in &from {
                tc_model::retry_by_hand(*state).map_err(|e| StoreError::NotRetryable(e.from))?;
            }
            let stmt = tx
                .prepare_cached(
                    "WITH locked AS ( \
                         SELECT pos FROM tasks WHERE pos = ANY($2) AND state = ANY($3) \
                         ORDER BY pos FOR UPDATE \
                     ) \
                     UPDATE tasks t SET state = 'pending', attempts_before_retry = t.attempt, \
                                        error = NULL, http_status = NULL, result = NULL, \
                                        result_content_type = NULL, finished_at = NULL, \
                                        lease_until = NULL, next_run_at = tc_now_ms($1), \
                                        updated_at = tc_now_ms($1) \
                     FROM locked WHERE t.pos = locked.pos",
                )
                .await
                .map_err(db)?;
            let applied = tx
                .execute(&stmt, &[&now, &positions, &names])
                .await
                .map_err(db)?;
            Ok(BulkApplied {
                applied,
                canceled_running: Vec::new(),
            })
        }
        BulkAction::Cancel => {
            for state in &from {
                transit(*state, State::Canceled)?;
            }
            let stmt = tx
                .prepare_cached(
                    "WITH locked AS ( \
                         SELECT pos, state AS was, attempt FROM tasks \
                         WHERE pos = ANY($2) AND state = ANY($3) ORDER BY pos FOR UPDATE \
                     ), moved AS ( \
                         UPDATE tasks t SET state = 'canceled', finished_at = tc_now_ms($1), \
                                            updated_at = tc_now_ms($1), lease_until = NULL, \
                                            next_run_at = NULL, \
                                            error = CASE WHEN l.was = 'running' THEN $4 \
                                                         ELSE t.error END \
                         FROM locked l WHERE t.pos = l.pos \
                         RETURNING t.id, l.was, l.attempt \
                     ), closed AS ( \
                         UPDATE attempts a SET finished_at = tc_now_ms($1), error = $4, \
                                               duration_ms = greatest(tc_now_ms($1) - a.started_at, 0) \
                         FROM moved m \
                         WHERE m.was = 'running' AND a.task_id = m.id AND a.n = m.attempt \
                           AND a.finished_at IS NULL \
                     ) \
                     SELECT id, was = 'running' FROM moved",
                )
                .await
                .map_err(db)?;
            let rows = tx
                .query(&stmt, &[&now, &positions, &names, &CANCELED])
                .await
                .map_err(db)?;
            let mut canceled_running = Vec::new();
            for row in &rows {
                if row.try_get::<_, bool>(1).map_err(db)? {
                    canceled_running.push(rows::parse_id(row.try_get(0).map_err(db)?)?);
                }
            }
            if !canceled_running.is_empty() {
                let notify = tx
                    .prepare_cached("SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id")
                    .await
                    .map_err(db)?;
                let ids: Vec<String> = canceled_running.iter().map(TaskId::to_string).collect();
                tx.execute(&notify, &[&channel, &ids]).await.map_err(db)?;
            }
            Ok(BulkApplied {
                applied: rows.len() as u64,
                canceled_running,
            })
        }
        BulkAction::Delete => {
            let stmt = tx
                .prepare_cached(
                    "WITH locked AS ( \
                         SELECT pos, id FROM tasks WHERE pos = ANY($1) AND state = ANY($2) \
                         ORDER BY pos FOR UPDATE \
                     ), gone AS ( \
                         DELETE FROM attempts a USING locked WHERE a.task_id = locked.id \
                     ) \
                     DELETE FROM tasks t USING locked WHERE t.pos = locked.pos",
                )
                .await
                .map_err(db)?;
            let applied = tx.execute(&stmt, &[&positions, &names]).await.map_err(db)?;
            Ok(BulkApplied {
                applied,
                canceled_running: Vec::new(),
            })
        }
    }
}
