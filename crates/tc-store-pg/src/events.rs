//! Publishing on PostgreSQL: an event and the tasks it makes in
//! one transaction (the tasks through the batch submit's
//! `INSERT … SELECT FROM unnest(…)`, what each made in one more such
//! insert); the event read back with its deliveries; replays.

use std::time::Duration;

use deadpool_postgres::{GenericClient, Transaction};
use tc_model::store::StoreError;
use tc_model::tenant::stored_tenant;
use tc_model::topic::event::{Event, NewEvent, Published};
use tc_model::topic::{Delivery, MAX_REPLAY, TopicRef};
use tc_model::{FirstRun, NewTask, TaskId, Timestamp};
use tc_seal::Sealer;
use tokio_postgres::Row;

use crate::error::db;
use crate::topics;
use crate::write_ops;

const EVENT_COLUMNS: &str = "id, event_type, body, idempotency_key, max_attempts, timeout_ns, \
    schedule_at, schedule_delay_ms, created_at";

fn corrupt(what: &str) -> StoreError {
    StoreError::Unavailable(format!("corrupt row in events: bad {what}"))
}

fn event_of(at: &TopicRef, row: &Row) -> Result<Event, StoreError> {
    let timeout_ns: i64 = row.try_get(5).map_err(db)?;
    let max_attempts: i32 = row.try_get(4).map_err(db)?;
    let first_run = FirstRun::from_parts(row.try_get(6).map_err(db)?, row.try_get(7).map_err(db)?)
        .ok_or_else(|| corrupt("first_run"))?;
    Ok(Event {
        id: row.try_get(0).map_err(db)?,
        topic: at.clone(),
        event_type: row.try_get(1).map_err(db)?,
        body: row.try_get(2).map_err(db)?,
        idempotency_key: row.try_get(3).map_err(db)?,
        max_attempts: u32::try_from(max_attempts).map_err(|_| corrupt("max_attempts"))?,
        timeout: Duration::from_nanos(timeout_ns.unsigned_abs()),
        first_run,
        created_at: Timestamp::from_millis(row.try_get(8).map_err(db)?),
        tasks: Vec::new(),
    })
}

/// The event of the topic `at` whose `column` (`id` or `idempotency_key`)
/// is `value`, with its deliveries, if there is one.
async fn find(
    client: &impl GenericClient,
    at: &TopicRef,
    column: &str,
    value: &str,
) -> Result<Option<Event>, StoreError> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE tenant = $1 AND topic = $2 AND {column} = $3"
            ),
            &[&stored_tenant(at.tenant.as_deref()), &at.name, &value],
        )
        .await
        .map_err(db)?;
    let Some(row) = row else {
        return Ok(None);
    };
    let mut event = event_of(at, &row)?;
    event.tasks = deliveries(client, &event.id).await?;
    Ok(Some(event))
}

/// What the event `id` made, with each task's state now, in the order made
/// (a task deleted since is left out).
async fn deliveries(client: &impl GenericClient, id: &str) -> Result<Vec<Delivery>, StoreError> {
    let rows = client
        .query(
            "SELECT e.subscription, e.task_id, t.state FROM event_tasks e \
             JOIN tasks t ON t.id = e.task_id WHERE e.event_id = $1 ORDER BY e.seq",
            &[&id],
        )
        .await
        .map_err(db)?;
    rows.iter()
        .map(|row| {
            let id: Vec<u8> = row.try_get(1).map_err(db)?;
            let id = <[u8; 16]>::try_from(id.as_slice()).map_err(|_| corrupt("task_id"))?;
            let state: String = row.try_get(2).map_err(db)?;
            Ok(Delivery {
                subscription: row.try_get(0).map_err(db)?,
                task_id: TaskId::from_bytes(id),
                state: state.parse().map_err(|_| corrupt("state"))?,
            })
        })
        .collect()
}

/// The event `id` of the topic `at`, or [`StoreError::NotFound`].
pub(crate) async fn event(
    client: &impl GenericClient,
    at: &TopicRef,
    id: &str,
) -> Result<Event, StoreError> {
    find(client, at, "id", id)
        .await?
        .ok_or(StoreError::NotFound)
}

/// Submits every task as one batch in `tx` (a refusal of any fails the
/// whole transaction), `subs[i]` being the subscription of `tasks[i]`.
/// Must come before any other write of `tx`: a transaction inserts tasks
/// first (schema step 8's insert marker). Answers the deliveries and
/// whether a task was created.
async fn submit_all_or_none(
    tx: &Transaction<'_>,
    subs: &[&str],
    tasks: &[NewTask],
    now: Timestamp,
    stamp: Option<i64>,
) -> Result<(Vec<Delivery>, bool), StoreError> {
    let inserted = write_ops::submit_batch(tx, tasks, now, stamp).await?;
    let (answers, created) = write_ops::answers(tasks, inserted);
    let mut out = Vec::with_capacity(tasks.len());
    for (subscription, answer) in subs.iter().zip(answers) {
        let task = answer?.task;
        out.push(Delivery {
            subscription: (*subscription).to_owned(),
            task_id: task.id,
            state: task.state,
        });
    }
    Ok((out, created))
}

/// Records what events made: `events[i]` and `ns[i]` for `deliveries[i]`
/// (a row already there, a concurrent replay's, is kept).
async fn record(
    tx: &Transaction<'_>,
    events: &[&str],
    ns: &[i32],
    deliveries: &[Delivery],
) -> Result<(), StoreError> {
    let subs: Vec<&str> = deliveries.iter().map(|d| d.subscription.as_str()).collect();
    let ids: Vec<&[u8]> = deliveries
        .iter()
        .map(|d| d.task_id.as_bytes().as_slice())
        .collect();
    tx.execute(
        "INSERT INTO event_tasks (event_id, subscription, n, task_id) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::bytea[]) \
         ON CONFLICT (event_id, subscription, n) DO NOTHING",
        &[&events, &subs, &ns, &ids],
    )
    .await
    .map_err(db)?;
    Ok(())
}

/// Publishes `new` as `id` in `tx` ([`tc_model::store::Topics::publish`]);
/// also answers whether a task was created.
pub(crate) async fn publish(
    tx: &Transaction<'_>,
    sealer: &Sealer,
    new: &NewEvent,
    id: String,
    now: Timestamp,
    stamp: Option<i64>,
) -> Result<(Published, bool), StoreError> {
    let at = new.topic();
    if let Some(known) = same_key(tx, new).await? {
        return Ok((known, false));
    }
    let subs = topics::subscriptions(tx, sealer, at).await?;
    let taking: Vec<_> = subs.iter().filter(|s| s.takes(new.event_type())).collect();
    let tasks: Vec<NewTask> = taking.iter().map(|s| new.task_for(&id, s)).collect();
    let sub_ids: Vec<&str> = taking.iter().map(|s| s.id.as_str()).collect();
    let (deliveries, created) = submit_all_or_none(tx, &sub_ids, &tasks, now, stamp).await?;
    if !insert_event(tx, new, &id, now).await? {
        // A concurrent publish of the key committed first; its tasks are
        // the ones this one found under their keys.
        let known = same_key(tx, new).await?;
        return known.map(|p| (p, false)).ok_or_else(|| {
            StoreError::Unavailable("the event's key conflicted, but no event has it".to_owned())
        });
    }
    let events = vec![id.as_str(); deliveries.len()];
    record(tx, &events, &vec![0; deliveries.len()], &deliveries).await?;
    let mut event = new.stored(id, now);
    event.tasks = deliveries;
    let published = Published {
        event,
        created: true,
    };
    Ok((published, created))
}

/// Inserts the event row; `false` when its key is taken.
async fn insert_event(
    tx: &Transaction<'_>,
    new: &NewEvent,
    id: &str,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let at = new.topic();
    let (schedule_at, schedule_delay_ms) = new.first_run().to_parts();
    let inserted = tx
        .execute(
            &format!(
                "INSERT INTO events (tenant, topic, {EVENT_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (tenant, topic, idempotency_key) DO NOTHING"
            ),
            &[
                &stored_tenant(at.tenant.as_deref()),
                &at.name,
                &id,
                &new.event_type(),
                &new.body(),
                &new.idempotency_key(),
                &i32::try_from(new.max_attempts()).unwrap_or(i32::MAX),
                &i64::try_from(new.timeout().as_nanos()).unwrap_or(i64::MAX),
                &schedule_at,
                &schedule_delay_ms,
                &now.as_millis(),
            ],
        )
        .await
        .map_err(db)?;
    Ok(inserted == 1)
}

/// The stored event with `new`'s key, if any, as a repeat's answer (or its
/// conflict).
async fn same_key(
    client: &impl GenericClient,
    new: &NewEvent,
) -> Result<Option<Published>, StoreError> {
    let Some(known) = find(
        client,
        new.topic(),
        "idempotency_key",
        new.idempotency_key(),
    )
    .await?
    else {
        return Ok(None);
    };
    let fields = new.differing_fields(&known);
    if !fields.is_empty() {
        return Err(StoreError::IdempotencyConflict { fields });
    }
    Ok(Some(Published {
        event: known,
        created: false,
    }))
}

/// Replays to the subscription `id` of the topic `at` the events since
/// `since` its types match ([`tc_model::store::Topics::replay`]): every
/// task in one batch, then what each event made. Two replays at once may
/// number theirs alike: both then answer the same tasks.
pub(crate) async fn replay(
    tx: &Transaction<'_>,
    sealer: &Sealer,
    at: &TopicRef,
    id: &str,
    since: Timestamp,
    stamp: (Timestamp, Option<i64>),
) -> Result<(Vec<Delivery>, bool), StoreError> {
    let sub = topics::subscription(tx, sealer, at, id, false).await?;
    let rows = tx
        .query(
            &format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE tenant = $1 AND topic = $2 \
                 AND created_at >= $3 ORDER BY created_at, pos"
            ),
            &[
                &stored_tenant(at.tenant.as_deref()),
                &at.name,
                &since.as_millis(),
            ],
        )
        .await
        .map_err(db)?;
    let mut events = Vec::new();
    for row in &rows {
        let event = event_of(at, row)?;
        if sub.spec.event_types.matches(&event.event_type) && events.len() < MAX_REPLAY {
            events.push(event);
        }
    }
    let mut ns = Vec::with_capacity(events.len());
    for event in &events {
        let earlier: i64 = tx
            .query_one(
                "SELECT count(*) FROM event_tasks \
                 WHERE event_id = $1 AND subscription = $2 AND n > 0",
                &[&event.id, &sub.id],
            )
            .await
            .map_err(db)?
            .try_get(0)
            .map_err(db)?;
        ns.push(i32::try_from(earlier + 1).unwrap_or(i32::MAX));
    }
    let tasks: Vec<NewTask> = events
        .iter()
        .zip(&ns)
        .map(|(e, n)| e.replay_task(&sub, n.unsigned_abs()))
        .collect();
    let subs = vec![sub.id.as_str(); tasks.len()];
    let (deliveries, created) = submit_all_or_none(tx, &subs, &tasks, stamp.0, stamp.1).await?;
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    record(tx, &ids, &ns, &deliveries).await?;
    Ok((deliveries, created))
}
