//! Publishing on SQLite: an event and the tasks it makes, in
//! the one command (so one transaction) of the writer thread; the event
//! read back with its deliveries; replays. The tasks go in through the
//! batch submit's multi-row insert ([`crate::batch_submit::submit_all`]).

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, params};
use tc_model::store::StoreError;
use tc_model::tenant::stored_tenant;
use tc_model::topic::event::{Event, NewEvent, Published};
use tc_model::topic::{Delivery, MAX_REPLAY, TopicRef};
use tc_model::{FirstRun, NewTask, State, TaskId, Timestamp};
use tc_seal::Sealer;

use crate::rows::{db, nanos, parse_state};
use crate::topics;
use crate::write_ops::{Made, SubmitRow};

const EVENT_COLUMNS: &str = "id, event_type, body, idempotency_key, max_attempts, timeout_ns, \
    schedule_at, schedule_delay_ms, created_at";

fn event_of(at: &TopicRef, row: &Row<'_>) -> rusqlite::Result<Result<Event, StoreError>> {
    let timeout_ns: i64 = row.get(5)?;
    let Some(first_run) = FirstRun::from_parts(row.get(6)?, row.get(7)?) else {
        return Ok(Err(StoreError::Unavailable(
            "corrupt row in events: bad first_run".to_owned(),
        )));
    };
    Ok(Ok(Event {
        id: row.get(0)?,
        topic: at.clone(),
        event_type: row.get(1)?,
        body: row.get(2)?,
        idempotency_key: row.get(3)?,
        max_attempts: row.get(4)?,
        timeout: Duration::from_nanos(timeout_ns.unsigned_abs()),
        first_run,
        created_at: Timestamp::from_millis(row.get(8)?),
        tasks: Vec::new(),
    }))
}

/// The event of the topic `at` found by `column` (`id` or
/// `idempotency_key`) with its deliveries, if there is one.
fn find(
    conn: &Connection,
    at: &TopicRef,
    column: &str,
    value: &str,
) -> Result<Option<Event>, StoreError> {
    let found = conn
        .prepare_cached(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE tenant = ?1 AND topic = ?2 AND {column} = ?3"
        ))
        .map_err(db)?
        .query_row(
            params![stored_tenant(at.tenant.as_deref()), at.name, value],
            |row| event_of(at, row),
        )
        .optional()
        .map_err(db)?
        .transpose()?;
    let Some(mut event) = found else {
        return Ok(None);
    };
    event.tasks = deliveries(conn, &event.id)?;
    Ok(Some(event))
}

/// What the event `id` made, with each task's state now, in the order made
/// (a task deleted since is left out).
fn deliveries(conn: &Connection, id: &str) -> Result<Vec<Delivery>, StoreError> {
    let rows: Vec<(String, Vec<u8>, String)> = conn
        .prepare_cached(
            "SELECT e.subscription, e.task_id, t.state FROM event_tasks e \
             JOIN tasks t ON t.id = e.task_id WHERE e.event_id = ?1 ORDER BY e.rowid",
        )
        .map_err(db)?
        .query_map([id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    rows.into_iter()
        .map(|(subscription, id, state)| {
            let id = <[u8; 16]>::try_from(id.as_slice()).map_err(|_| {
                StoreError::Unavailable("corrupt row in event_tasks: bad task_id".to_owned())
            })?;
            Ok(Delivery {
                subscription,
                task_id: TaskId::from_bytes(id),
                state: parse_state(&state)?,
            })
        })
        .collect()
}

/// The event `id` of the topic `at`, or [`StoreError::NotFound`].
pub(crate) fn event(conn: &Connection, at: &TopicRef, id: &str) -> Result<Event, StoreError> {
    find(conn, at, "id", id)?.ok_or(StoreError::NotFound)
}

/// Submits every task as one batch (the caller's command is one savepoint:
/// a refusal of any task undoes them all) and records what each made for
/// `event_id`: (subscription, n) per task, in order.
fn submit_all_or_none(
    conn: &Connection,
    event_id: &str,
    made: &[(String, u32)],
    tasks: &[NewTask],
    now: Timestamp,
) -> Result<Vec<Delivery>, StoreError> {
    if let Some(acting) = tasks.first().and_then(NewTask::acting) {
        crate::write_ops::check_acting(conn, &acting)?;
    }
    let rows: Vec<SubmitRow> = tasks.iter().map(SubmitRow::of).collect();
    let answers = crate::batch_submit::submit_all(conn, tasks, &rows, now)?;
    let mut out = Vec::with_capacity(tasks.len());
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO event_tasks (event_id, subscription, n, task_id) VALUES (?1, ?2, ?3, ?4)",
        )
        .map_err(db)?;
    for ((subscription, n), answer) in made.iter().zip(answers) {
        let (id, state) = match answer? {
            Made::Created(id) => (id, State::Pending),
            Made::Known(task) => (task.id, task.state),
        };
        insert
            .execute(params![event_id, subscription, n, id.as_bytes()])
            .map_err(db)?;
        out.push(Delivery {
            subscription: subscription.clone(),
            task_id: id,
            state,
        });
    }
    Ok(out)
}

/// Publishes `new` as `id` ([`tc_model::store::Topics::publish`]).
pub(crate) fn publish(
    conn: &Connection,
    sealer: &Sealer,
    new: &NewEvent,
    id: String,
    now: Timestamp,
) -> Result<Published, StoreError> {
    let at = new.topic();
    if let Some(known) = find(conn, at, "idempotency_key", new.idempotency_key())? {
        let fields = new.differing_fields(&known);
        if !fields.is_empty() {
            return Err(StoreError::IdempotencyConflict { fields });
        }
        return Ok(Published {
            event: known,
            created: false,
        });
    }
    let subs = topics::subscriptions(conn, sealer, at)?;
    let taking: Vec<_> = subs.iter().filter(|s| s.takes(new.event_type())).collect();
    let tasks: Vec<NewTask> = taking.iter().map(|s| new.task_for(&id, s)).collect();
    let made: Vec<(String, u32)> = taking.iter().map(|s| (s.id.clone(), 0)).collect();
    let (schedule_at, schedule_delay_ms) = new.first_run().to_parts();
    conn.prepare_cached(&format!(
        "INSERT INTO events (tenant, topic, {EVENT_COLUMNS}) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
    ))
    .map_err(db)?
    .execute(params![
        stored_tenant(at.tenant.as_deref()),
        at.name,
        id,
        new.event_type(),
        new.body(),
        new.idempotency_key(),
        new.max_attempts(),
        nanos(new.timeout()),
        schedule_at,
        schedule_delay_ms,
        now.as_millis(),
    ])
    .map_err(db)?;
    let deliveries = submit_all_or_none(conn, &id, &made, &tasks, now)?;
    let mut event = new.stored(id, now);
    event.tasks = deliveries;
    Ok(Published {
        event,
        created: true,
    })
}

/// Replays to the subscription `id` of the topic `at` the events since
/// `since` its types match ([`tc_model::store::Topics::replay`]).
pub(crate) fn replay(
    conn: &Connection,
    sealer: &Sealer,
    at: &TopicRef,
    id: &str,
    since: Timestamp,
    now: Timestamp,
) -> Result<Vec<Delivery>, StoreError> {
    let sub = topics::subscription(conn, sealer, at, id)?;
    let candidates: Vec<(String, String)> = conn
        .prepare_cached(
            "SELECT id, event_type FROM events WHERE tenant = ?1 AND topic = ?2 \
             AND created_at >= ?3 ORDER BY created_at, rowid",
        )
        .map_err(db)?
        .query_map(
            params![
                stored_tenant(at.tenant.as_deref()),
                at.name,
                since.as_millis()
            ],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    let mut out = Vec::new();
    for (event_id, _) in candidates
        .iter()
        .filter(|(_, kind)| sub.spec.event_types.matches(kind))
        .take(MAX_REPLAY)
    {
        let event = event(conn, at, event_id)?;
        let earlier: u32 = conn
            .prepare_cached(
                "SELECT count(*) FROM event_tasks WHERE event_id = ?1 AND subscription = ?2 AND n > 0",
            )
            .map_err(db)?
            .query_row(params![event_id, sub.id], |row| row.get(0))
            .map_err(db)?;
        let n = earlier + 1;
        let task = event.replay_task(&sub, n);
        out.extend(submit_all_or_none(
            conn,
            event_id,
            &[(sub.id.clone(), n)],
            &[task],
            now,
        )?);
    }
    Ok(out)
}
