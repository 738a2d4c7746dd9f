//! Topics and subscriptions on SQLite: the tables of schema step
//! 24, a subscription's signing secrets sealed at rest. Events, publish and
//! replay are in [`crate::events`]. Synchronous functions on a connection,
//! like the other operations.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, params};
use tc_model::signing::SigningSecrets;
use tc_model::store::StoreError;
use tc_model::tenant::{stored_tenant, tenant_from_stored};
use tc_model::topic::{
    EventTypes, MAX_SUBSCRIPTIONS, Subscription, SubscriptionSpec, SubscriptionUpdate, Topic,
    TopicRef, TopicSpec,
};
use tc_model::{Headers, Timestamp};
use tc_seal::Sealer;

use crate::rows::db;
use crate::secrets;

fn corrupt(what: &str) -> StoreError {
    StoreError::Unavailable(format!("corrupt row in topics: bad {what}"))
}

const TOPIC_COLUMNS: &str = "t.tenant, t.name, t.description, t.callback_url, \
    t.disable_after_s, t.created_at, t.updated_at, \
    (SELECT count(*) FROM subscriptions s WHERE s.tenant = t.tenant AND s.topic = t.name)";

fn topic_of(row: &Row<'_>) -> rusqlite::Result<Topic> {
    let disable_after_s: i64 = row.get(4)?;
    let count: i64 = row.get(7)?;
    Ok(Topic {
        at: TopicRef {
            tenant: tenant_from_stored(row.get(0)?),
            name: row.get(1)?,
        },
        spec: TopicSpec {
            description: row.get(2)?,
            callback_url: row.get(3)?,
            disable_after: Duration::from_secs(disable_after_s.unsigned_abs()),
        },
        subscriptions: count.unsigned_abs(),
        created_at: Timestamp::from_millis(row.get(5)?),
        updated_at: Timestamp::from_millis(row.get(6)?),
    })
}

/// Creates the topic or replaces its settings; answers whether it created.
pub(crate) fn put(
    conn: &Connection,
    at: &TopicRef,
    spec: &TopicSpec,
    now: Timestamp,
) -> Result<(Topic, bool), StoreError> {
    let tenant = stored_tenant(at.tenant.as_deref());
    let existed = find(conn, at)?.is_some();
    conn.prepare_cached(
        "INSERT INTO topics (tenant, name, description, callback_url, disable_after_s, \
                             created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) \
         ON CONFLICT (tenant, name) DO UPDATE SET description = excluded.description, \
             callback_url = excluded.callback_url, \
             disable_after_s = excluded.disable_after_s, updated_at = excluded.updated_at",
    )
    .map_err(db)?
    .execute(params![
        tenant,
        at.name,
        spec.description,
        spec.callback_url,
        i64::try_from(spec.disable_after.as_secs()).unwrap_or(i64::MAX),
        now.as_millis(),
    ])
    .map_err(db)?;
    Ok((one(conn, at)?, !existed))
}

fn find(conn: &Connection, at: &TopicRef) -> Result<Option<Topic>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {TOPIC_COLUMNS} FROM topics t WHERE t.tenant = ?1 AND t.name = ?2"
    ))
    .map_err(db)?
    .query_row(
        params![stored_tenant(at.tenant.as_deref()), at.name],
        topic_of,
    )
    .optional()
    .map_err(db)
}

/// The topic `at`, or [`StoreError::NotFound`].
pub(crate) fn one(conn: &Connection, at: &TopicRef) -> Result<Topic, StoreError> {
    find(conn, at)?.ok_or(StoreError::NotFound)
}

/// Every topic of `tenant`, in name order.
pub(crate) fn all(conn: &Connection, tenant: Option<&str>) -> Result<Vec<Topic>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {TOPIC_COLUMNS} FROM topics t WHERE t.tenant = ?1 ORDER BY t.name"
    ))
    .map_err(db)?
    .query_map([stored_tenant(tenant)], topic_of)
    .map_err(db)?
    .collect::<rusqlite::Result<_>>()
    .map_err(db)
}

/// Deletes a topic without subscriptions, with its events.
pub(crate) fn delete(conn: &Connection, at: &TopicRef) -> Result<(), StoreError> {
    let topic = one(conn, at)?;
    if topic.subscriptions > 0 {
        return Err(StoreError::NotEmpty);
    }
    let tenant = stored_tenant(at.tenant.as_deref());
    conn.execute(
        "DELETE FROM event_tasks WHERE event_id IN \
         (SELECT id FROM events WHERE tenant = ?1 AND topic = ?2)",
        params![tenant, at.name],
    )
    .map_err(db)?;
    conn.execute(
        "DELETE FROM events WHERE tenant = ?1 AND topic = ?2",
        params![tenant, at.name],
    )
    .map_err(db)?;
    conn.execute(
        "DELETE FROM topics WHERE tenant = ?1 AND name = ?2",
        params![tenant, at.name],
    )
    .map_err(db)?;
    Ok(())
}

const SUB_COLUMNS: &str = "id, tenant, topic, url, event_types, headers, signing_secrets, \
    enabled, failing_since, disabled_reason, created_at, updated_at";

/// A subscription row as read, its texts not yet parsed or opened.
struct RawSub {
    id: String,
    tenant: String,
    topic: String,
    url: String,
    event_types: Option<String>,
    headers: Option<String>,
    secrets: Option<String>,
    enabled: i64,
    failing_since: Option<i64>,
    disabled_reason: Option<String>,
    created_at: i64,
    updated_at: i64,
}

fn raw_sub(row: &Row<'_>) -> rusqlite::Result<RawSub> {
    Ok(RawSub {
        id: row.get(0)?,
        tenant: row.get(1)?,
        topic: row.get(2)?,
        url: row.get(3)?,
        event_types: row.get(4)?,
        headers: row.get(5)?,
        secrets: row.get(6)?,
        enabled: row.get(7)?,
        failing_since: row.get(8)?,
        disabled_reason: row.get(9)?,
        created_at: row.get(10)?,
        updated_at: row.get(11)?,
    })
}

fn sub_of(sealer: &Sealer, r: RawSub) -> Result<Subscription, StoreError> {
    let secrets = secrets::open(sealer, r.secrets)?;
    Ok(Subscription {
        id: r.id,
        topic: TopicRef {
            tenant: tenant_from_stored(r.tenant),
            name: r.topic,
        },
        spec: SubscriptionSpec {
            url: r.url,
            event_types: EventTypes::from_stored(r.event_types.as_deref())
                .map_err(|_| corrupt("event_types"))?,
            headers: Headers::from_stored(r.headers.as_deref()).map_err(|_| corrupt("headers"))?,
            signing_secrets: SigningSecrets::from_stored(secrets.as_deref())
                .map_err(|_| corrupt("signing_secrets"))?,
            enabled: r.enabled != 0,
        },
        failing_since: r.failing_since.map(Timestamp::from_millis),
        disabled_reason: r.disabled_reason,
        created_at: Timestamp::from_millis(r.created_at),
        updated_at: Timestamp::from_millis(r.updated_at),
    })
}

/// Every subscription of the topic `at`, oldest first (the topic must be).
pub(crate) fn subscriptions(
    conn: &Connection,
    sealer: &Sealer,
    at: &TopicRef,
) -> Result<Vec<Subscription>, StoreError> {
    one(conn, at)?;
    let rows = conn
        .prepare_cached(&format!(
            "SELECT {SUB_COLUMNS} FROM subscriptions WHERE tenant = ?1 AND topic = ?2 \
             ORDER BY created_at, id"
        ))
        .map_err(db)?
        .query_map(
            params![stored_tenant(at.tenant.as_deref()), at.name],
            raw_sub,
        )
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;
    rows.into_iter().map(|r| sub_of(sealer, r)).collect()
}

/// The signing secrets of every subscription that has some, by id.
pub(crate) fn all_secrets(
    conn: &Connection,
    sealer: &Sealer,
) -> Result<Vec<(String, SigningSecrets)>, StoreError> {
    let rows = conn
        .prepare_cached(
            "SELECT id, signing_secrets FROM subscriptions WHERE signing_secrets IS NOT NULL",
        )
        .map_err(db)?
        .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get(1)?)))
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;
    let mut all = Vec::with_capacity(rows.len());
    for (id, sealed) in rows {
        let text = secrets::open(sealer, sealed)?;
        let secrets =
            SigningSecrets::from_stored(text.as_deref()).map_err(|_| corrupt("signing_secrets"))?;
        if !secrets.is_empty() {
            all.push((id, secrets));
        }
    }
    Ok(all)
}

/// The subscription `id` of the topic `at`, or [`StoreError::NotFound`].
pub(crate) fn subscription(
    conn: &Connection,
    sealer: &Sealer,
    at: &TopicRef,
    id: &str,
) -> Result<Subscription, StoreError> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {SUB_COLUMNS} FROM subscriptions WHERE id = ?1 AND tenant = ?2 AND topic = ?3"
        ))
        .map_err(db)?
        .query_row(
            params![id, stored_tenant(at.tenant.as_deref()), at.name],
            raw_sub,
        )
        .optional()
        .map_err(db)?
        .ok_or(StoreError::NotFound)?;
    sub_of(sealer, row)
}

/// The subscription `id` of any topic, or [`StoreError::NotFound`].
pub(crate) fn by_id(
    conn: &Connection,
    sealer: &Sealer,
    id: &str,
) -> Result<Subscription, StoreError> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {SUB_COLUMNS} FROM subscriptions WHERE id = ?1"
        ))
        .map_err(db)?
        .query_row([id], raw_sub)
        .optional()
        .map_err(db)?
        .ok_or(StoreError::NotFound)?;
    sub_of(sealer, row)
}

/// Writes `sub` whole (a new row, or over the row of its id).
pub(crate) fn write_sub(
    conn: &Connection,
    sealer: &Sealer,
    sub: &Subscription,
) -> Result<(), StoreError> {
    conn.prepare_cached(&format!(
        "INSERT OR REPLACE INTO subscriptions ({SUB_COLUMNS}) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
    ))
    .map_err(db)?
    .execute(params![
        sub.id,
        stored_tenant(sub.topic.tenant.as_deref()),
        sub.topic.name,
        sub.spec.url,
        sub.spec.event_types.to_stored(),
        sub.spec.headers.to_stored(),
        secrets::seal(sealer, sub.spec.signing_secrets.to_stored())?,
        i64::from(sub.spec.enabled),
        sub.failing_since.map(Timestamp::as_millis),
        sub.disabled_reason,
        sub.created_at.as_millis(),
        sub.updated_at.as_millis(),
    ])
    .map_err(db)?;
    Ok(())
}

/// Stores a new subscription on the topic `at`.
pub(crate) fn create_subscription(
    conn: &Connection,
    sealer: &Sealer,
    at: TopicRef,
    id: String,
    spec: SubscriptionSpec,
    now: Timestamp,
) -> Result<Subscription, StoreError> {
    let topic = one(conn, &at)?;
    if topic.subscriptions >= MAX_SUBSCRIPTIONS as u64 {
        return Err(StoreError::NotEmpty);
    }
    let taken: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM subscriptions WHERE id = ?1)")
        .map_err(db)?
        .query_row([&id], |row| row.get(0))
        .map_err(db)?;
    if taken {
        return Err(StoreError::Exists);
    }
    let sub = Subscription::created(id, at, spec, now);
    write_sub(conn, sealer, &sub)?;
    Ok(sub)
}

/// Applies `update` to the subscription `id` of the topic `at`.
pub(crate) fn update_subscription(
    conn: &Connection,
    sealer: &Sealer,
    at: &TopicRef,
    id: &str,
    update: SubscriptionUpdate,
    now: Timestamp,
) -> Result<Subscription, StoreError> {
    let sub = subscription(conn, sealer, at, id)?.updated(update, now);
    write_sub(conn, sealer, &sub)?;
    Ok(sub)
}

/// Deletes the subscription `id` of the topic `at`.
pub(crate) fn delete_subscription(
    conn: &Connection,
    at: &TopicRef,
    id: &str,
) -> Result<(), StoreError> {
    let deleted = conn
        .execute(
            "DELETE FROM subscriptions WHERE id = ?1 AND tenant = ?2 AND topic = ?3",
            params![id, stored_tenant(at.tenant.as_deref()), at.name],
        )
        .map_err(db)?;
    if deleted == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}
