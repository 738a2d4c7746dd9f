//! Topics and subscriptions on PostgreSQL: the tables of schema
//! step 20, a subscription's signing secrets sealed at rest. Events,
//! publish and replay are in [`crate::events`].

use std::time::Duration;

use deadpool_postgres::GenericClient;
use tc_model::signing::SigningSecrets;
use tc_model::store::StoreError;
use tc_model::tenant::{stored_tenant, tenant_from_stored};
use tc_model::topic::{
    EventTypes, MAX_SUBSCRIPTIONS, Subscription, SubscriptionSpec, SubscriptionUpdate, Topic,
    TopicRef, TopicSpec,
};
use tc_model::{Headers, Timestamp};
use tc_seal::Sealer;
use tokio_postgres::Row;

use crate::error::db;
use crate::secrets;

fn corrupt(what: &str) -> StoreError {
    StoreError::Unavailable(format!("corrupt row in topics: bad {what}"))
}

const TOPIC_COLUMNS: &str = "t.tenant, t.name, t.description, t.callback_url, \
    t.disable_after_s, t.created_at, t.updated_at, \
    (SELECT count(*) FROM subscriptions s WHERE s.tenant = t.tenant AND s.topic = t.name)";

fn topic_of(row: &Row) -> Result<Topic, StoreError> {
    let disable_after_s: i64 = row.try_get(4).map_err(db)?;
    let count: i64 = row.try_get(7).map_err(db)?;
    Ok(Topic {
        at: TopicRef {
            tenant: tenant_from_stored(row.try_get(0).map_err(db)?),
            name: row.try_get(1).map_err(db)?,
        },
        spec: TopicSpec {
            description: row.try_get(2).map_err(db)?,
            callback_url: row.try_get(3).map_err(db)?,
            disable_after: Duration::from_secs(disable_after_s.unsigned_abs()),
        },
        subscriptions: count.unsigned_abs(),
        created_at: Timestamp::from_millis(row.try_get(5).map_err(db)?),
        updated_at: Timestamp::from_millis(row.try_get(6).map_err(db)?),
    })
}

/// Creates the topic or replaces its settings; answers whether it created
/// (`xmax = 0`: the row is this statement's insert).
pub(crate) async fn put(
    client: &impl GenericClient,
    at: &TopicRef,
    spec: &TopicSpec,
    now: Timestamp,
) -> Result<(Topic, bool), StoreError> {
    let row = client
        .query_one(
            "INSERT INTO topics (tenant, name, description, callback_url, disable_after_s, \
                                 created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6) \
             ON CONFLICT (tenant, name) DO UPDATE SET description = excluded.description, \
                 callback_url = excluded.callback_url, \
                 disable_after_s = excluded.disable_after_s, updated_at = excluded.updated_at \
             RETURNING (xmax = 0)",
            &[
                &stored_tenant(at.tenant.as_deref()),
                &at.name,
                &spec.description,
                &spec.callback_url,
                &i64::try_from(spec.disable_after.as_secs()).unwrap_or(i64::MAX),
                &now.as_millis(),
            ],
        )
        .await
        .map_err(db)?;
    let created: bool = row.try_get(0).map_err(db)?;
    Ok((one(client, at).await?, created))
}

/// The topic `at`, or [`StoreError::NotFound`].
pub(crate) async fn one(client: &impl GenericClient, at: &TopicRef) -> Result<Topic, StoreError> {
    let row = client
        .query_opt(
            &format!("SELECT {TOPIC_COLUMNS} FROM topics t WHERE t.tenant = $1 AND t.name = $2"),
            &[&stored_tenant(at.tenant.as_deref()), &at.name],
        )
        .await
        .map_err(db)?
        .ok_or(StoreError::NotFound)?;
    topic_of(&row)
}

/// Every topic of `tenant`, in name order.
pub(crate) async fn all(
    client: &impl GenericClient,
    tenant: Option<&str>,
) -> Result<Vec<Topic>, StoreError> {
    client
        .query(
            &format!("SELECT {TOPIC_COLUMNS} FROM topics t WHERE t.tenant = $1 ORDER BY t.name"),
            &[&stored_tenant(tenant)],
        )
        .await
        .map_err(db)?
        .iter()
        .map(topic_of)
        .collect()
}

/// Deletes a topic without subscriptions, with its events (the topic's
/// row locked first, so a subscription cannot be added meanwhile).
pub(crate) async fn delete(
    tx: &deadpool_postgres::Transaction<'_>,
    at: &TopicRef,
) -> Result<(), StoreError> {
    let tenant = stored_tenant(at.tenant.as_deref());
    tx.query_opt(
        "SELECT 1 FROM topics WHERE tenant = $1 AND name = $2 FOR UPDATE",
        &[&tenant, &at.name],
    )
    .await
    .map_err(db)?
    .ok_or(StoreError::NotFound)?;
    if one(tx, at).await?.subscriptions > 0 {
        return Err(StoreError::NotEmpty);
    }
    tx.execute(
        "DELETE FROM event_tasks WHERE event_id IN \
         (SELECT id FROM events WHERE tenant = $1 AND topic = $2)",
        &[&tenant, &at.name],
    )
    .await
    .map_err(db)?;
    for sql in [
        "DELETE FROM events WHERE tenant = $1 AND topic = $2",
        "DELETE FROM topics WHERE tenant = $1 AND name = $2",
    ] {
        tx.execute(sql, &[&tenant, &at.name]).await.map_err(db)?;
    }
    Ok(())
}

const SUB_COLUMNS: &str = "id, tenant, topic, url, event_types, headers, signing_secrets, \
    enabled, failing_since, disabled_reason, created_at, updated_at";

fn sub_of(sealer: &Sealer, row: &Row) -> Result<Subscription, StoreError> {
    let text = |i: usize| row.try_get::<_, Option<String>>(i).map_err(db);
    let secrets = secrets::open(sealer, text(6)?)?;
    Ok(Subscription {
        id: row.try_get(0).map_err(db)?,
        topic: TopicRef {
            tenant: tenant_from_stored(row.try_get(1).map_err(db)?),
            name: row.try_get(2).map_err(db)?,
        },
        spec: SubscriptionSpec {
            url: row.try_get(3).map_err(db)?,
            event_types: EventTypes::from_stored(text(4)?.as_deref())
                .map_err(|_| corrupt("event_types"))?,
            headers: Headers::from_stored(text(5)?.as_deref()).map_err(|_| corrupt("headers"))?,
            signing_secrets: SigningSecrets::from_stored(secrets.as_deref())
                .map_err(|_| corrupt("signing_secrets"))?,
            enabled: row.try_get(7).map_err(db)?,
        },
        failing_since: row
            .try_get::<_, Option<i64>>(8)
            .map_err(db)?
            .map(Timestamp::from_millis),
        disabled_reason: text(9)?,
        created_at: Timestamp::from_millis(row.try_get(10).map_err(db)?),
        updated_at: Timestamp::from_millis(row.try_get(11).map_err(db)?),
    })
}

/// Every subscription of the topic `at`, oldest first (the topic must be).
pub(crate) async fn subscriptions(
    client: &impl GenericClient,
    sealer: &Sealer,
    at: &TopicRef,
) -> Result<Vec<Subscription>, StoreError> {
    one(client, at).await?;
    client
        .query(
            &format!(
                "SELECT {SUB_COLUMNS} FROM subscriptions WHERE tenant = $1 AND topic = $2 \
                 ORDER BY created_at, id"
            ),
            &[&stored_tenant(at.tenant.as_deref()), &at.name],
        )
        .await
        .map_err(db)?
        .iter()
        .map(|row| sub_of(sealer, row))
        .collect()
}

/// The signing secrets of every subscription that has some, by id.
pub(crate) async fn all_secrets(
    client: &impl GenericClient,
    sealer: &Sealer,
) -> Result<Vec<(String, SigningSecrets)>, StoreError> {
    let rows = client
        .query(
            "SELECT id, signing_secrets FROM subscriptions WHERE signing_secrets IS NOT NULL",
            &[],
        )
        .await
        .map_err(db)?;
    let mut all = Vec::with_capacity(rows.len());
    for row in rows {
        let id: String = row.try_get(0).map_err(db)?;
        let text = secrets::open(sealer, row.try_get(1).map_err(db)?)?;
        let secrets =
            SigningSecrets::from_stored(text.as_deref()).map_err(|_| corrupt("signing_secrets"))?;
        if !secrets.is_empty() {
            all.push((id, secrets));
        }
    }
    Ok(all)
}

/// The subscription `id` of the topic `at`, or [`StoreError::NotFound`];
/// `lock`: its row locked until the transaction ends.
pub(crate) async fn subscription(
    client: &impl GenericClient,
    sealer: &Sealer,
    at: &TopicRef,
    id: &str,
    lock: bool,
) -> Result<Subscription, StoreError> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {SUB_COLUMNS} FROM subscriptions \
                 WHERE id = $1 AND tenant = $2 AND topic = $3{}",
                if lock { " FOR UPDATE" } else { "" }
            ),
            &[&id, &stored_tenant(at.tenant.as_deref()), &at.name],
        )
        .await
        .map_err(db)?
        .ok_or(StoreError::NotFound)?;
    sub_of(sealer, &row)
}

/// The subscription `id` of any topic, or [`StoreError::NotFound`];
/// `lock`: its row locked until the transaction ends.
pub(crate) async fn by_id(
    client: &impl GenericClient,
    sealer: &Sealer,
    id: &str,
    lock: bool,
) -> Result<Subscription, StoreError> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {SUB_COLUMNS} FROM subscriptions WHERE id = $1{}",
                if lock { " FOR UPDATE" } else { "" }
            ),
            &[&id],
        )
        .await
        .map_err(db)?
        .ok_or(StoreError::NotFound)?;
    sub_of(sealer, &row)
}

/// Writes `sub` whole (a new row, or over the row of its id).
pub(crate) async fn write_sub(
    client: &impl GenericClient,
    sealer: &Sealer,
    sub: &Subscription,
) -> Result<(), StoreError> {
    client
        .execute(
            &format!(
                "INSERT INTO subscriptions ({SUB_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                 ON CONFLICT (id) DO UPDATE SET url = excluded.url, \
                     event_types = excluded.event_types, headers = excluded.headers, \
                     signing_secrets = excluded.signing_secrets, enabled = excluded.enabled, \
                     failing_since = excluded.failing_since, \
                     disabled_reason = excluded.disabled_reason, updated_at = excluded.updated_at"
            ),
            &[
                &sub.id,
                &stored_tenant(sub.topic.tenant.as_deref()),
                &sub.topic.name,
                &sub.spec.url,
                &sub.spec.event_types.to_stored(),
                &sub.spec.headers.to_stored(),
                &secrets::seal(sealer, sub.spec.signing_secrets.to_stored())?,
                &sub.spec.enabled,
                &sub.failing_since.map(Timestamp::as_millis),
                &sub.disabled_reason,
                &sub.created_at.as_millis(),
                &sub.updated_at.as_millis(),
            ],
        )
        .await
        .map_err(db)?;
    Ok(())
}

/// Stores a new subscription on the topic `at` (the topic's row locked,
/// so its count holds until the insert commits).
pub(crate) async fn create_subscription(
    tx: &deadpool_postgres::Transaction<'_>,
    sealer: &Sealer,
    at: TopicRef,
    id: String,
    spec: SubscriptionSpec,
    now: Timestamp,
) -> Result<Subscription, StoreError> {
    tx.query_opt(
        "SELECT 1 FROM topics WHERE tenant = $1 AND name = $2 FOR UPDATE",
        &[&stored_tenant(at.tenant.as_deref()), &at.name],
    )
    .await
    .map_err(db)?
    .ok_or(StoreError::NotFound)?;
    if one(tx, &at).await?.subscriptions >= MAX_SUBSCRIPTIONS as u64 {
        return Err(StoreError::NotEmpty);
    }
    let taken = tx
        .query_opt("SELECT 1 FROM subscriptions WHERE id = $1", &[&id])
        .await
        .map_err(db)?;
    if taken.is_some() {
        return Err(StoreError::Exists);
    }
    let sub = Subscription::created(id, at, spec, now);
    write_sub(tx, sealer, &sub).await?;
    Ok(sub)
}

/// Applies `update` to the subscription `id` of the topic `at`, its row
/// locked meanwhile.
pub(crate) async fn update_subscription(
    tx: &deadpool_postgres::Transaction<'_>,
    sealer: &Sealer,
    at: &TopicRef,
    id: &str,
    update: SubscriptionUpdate,
    now: Timestamp,
) -> Result<Subscription, StoreError> {
    let sub = subscription(tx, sealer, at, id, true)
        .await?
        .updated(update, now);
    write_sub(tx, sealer, &sub).await?;
    Ok(sub)
}

/// Deletes the subscription `id` of the topic `at`.
pub(crate) async fn delete_subscription(
    client: &impl GenericClient,
    at: &TopicRef,
    id: &str,
) -> Result<(), StoreError> {
    let deleted = client
        .execute(
            "DELETE FROM subscriptions WHERE id = $1 AND tenant = $2 AND topic = $3",
            &[&id, &stored_tenant(at.tenant.as_deref()), &at.name],
        )
        .await
        .map_err(db)?;
    if deleted == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}
