//! Flow keys on PostgreSQL: the `flow_keys` rows (each tenant's keys'
//! settings and token bucket, schema step 23), their counts read from
//! `tasks`, and the claim's key level: a destination's (and tenant's) take
//! shared between its due keys within each key's room
//! ([`tc_model::flow_key::KeyRoom`]), on every node together.
//!
//! A claim locks the row of each key with settings it meets
//! (`FOR UPDATE SKIP LOCKED`): under the lock its running tasks are
//! counted and its bucket charged, so the cap and the rate hold across
//! nodes; a key another claim holds gives nothing this claim (never
//! waited for, so claims meeting keys in different orders cannot
//! deadlock). Tasks without a key are stored with `''`, one more key.

use std::collections::BTreeMap;
use std::time::Duration;

use deadpool_postgres::{GenericClient, Transaction};
use tc_model::cluster::Bucket;
use tc_model::flow_key::{
    FLOW_KEYS_LIMIT, FlowKey, FlowKeySettings, FlowKeyUpdate, KeyRef, KeyRoom, KeyState, NO_KEY,
};
use tc_model::store::StoreError;
use tc_model::tenant::stored_tenant;
use tc_model::{Task, Timestamp};

use crate::error::db;
use crate::rows::{millis, task_columns};
use crate::write_ops::claim_tail;

fn settings_of(row: &tokio_postgres::Row) -> Result<FlowKeySettings, StoreError> {
    let cap: Option<i32> = row.try_get("max_in_flight").map_err(db)?;
    let burst: Option<i32> = row.try_get("burst").map_err(db)?;
    Ok(FlowKeySettings {
        max_in_flight: cap.and_then(|c| u32::try_from(c).ok()),
        rate_per_s: row.try_get("rate_per_s").map_err(db)?,
        burst: burst.and_then(|b| u32::try_from(b).ok()),
    })
}

async fn read_settings(
    client: &impl GenericClient,
    key: &KeyRef,
) -> Result<Option<FlowKeySettings>, StoreError> {
    let stmt = client
        .prepare_cached(
            "SELECT max_in_flight, rate_per_s, burst FROM flow_keys \
             WHERE tenant = $1 AND key = $2",
        )
        .await
        .map_err(db)?;
    match client
        .query_opt(&stmt, &[&key.tenant, &key.key])
        .await
        .map_err(db)?
    {
        Some(row) => Ok(Some(settings_of(&row)?)),
        None => Ok(None),
    }
}

async fn with_counts(
    client: &impl GenericClient,
    key: &KeyRef,
    settings: FlowKeySettings,
) -> Result<FlowKey, StoreError> {
    let stmt = client
        .prepare_cached(
            "SELECT \
               (SELECT count(*) FROM queue WHERE state = 'running' AND flow_key <> '' \
                  AND tenant = $1 AND flow_key = $2), \
               (SELECT count(*) FROM queue WHERE state = 'pending' AND flow_key <> '' \
                  AND tenant = $1 AND flow_key = $2)",
        )
        .await
        .map_err(db)?;
    let row = client
        .query_one(&stmt, &[&key.tenant, &key.key])
        .await
        .map_err(db)?;
    let in_flight: i64 = row.try_get(0).map_err(db)?;
    let pending: i64 = row.try_get(1).map_err(db)?;
    Ok(FlowKey {
        key: key.key.clone(),
        settings,
        in_flight: in_flight.unsigned_abs(),
        pending: pending.unsigned_abs(),
    })
}

fn wide(n: Option<u32>) -> Option<i32> {
    n.map(|n| i32::try_from(n).unwrap_or(i32::MAX))
}

/// The port's `put_flow_key`.
pub(crate) async fn put(
    tx: &Transaction<'_>,
    key: &KeyRef,
    update: &FlowKeyUpdate,
    now: Timestamp,
) -> Result<FlowKey, StoreError> {
    let lock = tx
        .prepare_cached(
            "INSERT INTO flow_keys (tenant, key, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (tenant, key) DO UPDATE SET updated_at = $3",
        )
        .await
        .map_err(db)?;
    tx.execute(&lock, &[&key.tenant, &key.key, &now.as_millis()])
        .await
        .map_err(db)?;
    let old = read_settings(tx, key).await?.unwrap_or_default();
    let new = update.apply(&old);
    let write = tx
        .prepare_cached(
            "UPDATE flow_keys SET max_in_flight = $3, rate_per_s = $4, burst = $5 \
             WHERE tenant = $1 AND key = $2",
        )
        .await
        .map_err(db)?;
    tx.execute(
        &write,
        &[
            &key.tenant,
            &key.key,
            &wide(new.max_in_flight),
            &new.rate_per_s,
            &wide(new.burst),
        ],
    )
    .await
    .map_err(db)?;
    with_counts(tx, key, new).await
}

/// The port's `flow_key`.
pub(crate) async fn get(client: &impl GenericClient, key: &KeyRef) -> Result<FlowKey, StoreError> {
    let settings = read_settings(client, key).await?;
    let found = with_counts(client, key, settings.unwrap_or_default()).await?;
    if settings.is_none() && found.in_flight == 0 && found.pending == 0 {
        let stmt = client
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM tasks WHERE flow_key <> '' \
                   AND tenant = $1 AND flow_key = $2)",
            )
            .await
            .map_err(db)?;
        let any: bool = client
            .query_one(&stmt, &[&key.tenant, &key.key])
            .await
            .map_err(db)?
            .try_get(0)
            .map_err(db)?;
        if !any {
            return Err(StoreError::NotFound);
        }
    }
    Ok(found)
}

/// The port's `flow_keys`.
pub(crate) async fn list(
    client: &impl GenericClient,
    tenant: Option<&str>,
) -> Result<Vec<FlowKey>, StoreError> {
    let tenant = stored_tenant(tenant);
    let stmt = client
        .prepare_cached(
            "SELECT key, max_in_flight, rate_per_s, burst FROM flow_keys \
             WHERE tenant = $1 ORDER BY key LIMIT $2",
        )
        .await
        .map_err(db)?;
    let limit = FLOW_KEYS_LIMIT as i64;
    let rows = client.query(&stmt, &[&tenant, &limit]).await.map_err(db)?;
    let mut keys = Vec::with_capacity(rows.len());
    for row in &rows {
        let key: String = row.try_get(0).map_err(db)?;
        let at = KeyRef::new(Some(tenant), &key);
        keys.push(with_counts(client, &at, settings_of(row)?).await?);
    }
    Ok(keys)
}

/// The port's `delete_flow_key`.
pub(crate) async fn delete(tx: &Transaction<'_>, key: &KeyRef) -> Result<(), StoreError> {
    let stmt = tx
        .prepare_cached("DELETE FROM flow_keys WHERE tenant = $1 AND key = $2")
        .await
        .map_err(db)?;
    if tx
        .execute(&stmt, &[&key.tenant, &key.key])
        .await
        .map_err(db)?
        == 0
    {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

/// The claim statement of one key's due tasks (`$5` tenant, `$6` key;
/// `''`: the tasks without one), ordered by `$order`.
macro_rules! claim_key_sql {
    ($order:literal) => {
        concat!(
            "WITH due AS ( \
                 SELECT q.pos, q.next_run_at FROM queue q JOIN tasks t ON t.pos = q.pos \
                 WHERE q.state = 'pending' AND q.destination = $4 AND q.tenant = $5 \
                   AND q.flow_key = $6 AND q.next_run_at <= tc_now_ms($1) \
                   AND t.state = 'pending' \
                 ORDER BY ",
            $order,
            " LIMIT $2 FOR UPDATE OF t SKIP LOCKED",
            claim_tail!()
        )
    };
}

/// The due keys of destination `$2` and tenant `$3` at `$1`: `''` first
/// when tasks without a key are due (one seek in `queue_due_unkeyed`,
/// schema step 26), then each key with a due task, one seek per key in
/// `queue_due_by_key` (a skip scan).
pub(crate) const DUE_KEYS: &str = "WITH RECURSIVE keyed AS ( \
         (SELECT flow_key FROM queue \
          WHERE state = 'pending' AND flow_key <> '' AND destination = $2 \
            AND tenant = $3 AND next_run_at <= tc_now_ms($1) \
          ORDER BY flow_key LIMIT 1) \
         UNION ALL \
         SELECT (SELECT t.flow_key FROM queue t \
                 WHERE t.state = 'pending' AND t.flow_key <> '' \
                   AND t.destination = $2 AND t.tenant = $3 \
                   AND t.flow_key > keyed.flow_key \
                   AND t.next_run_at <= tc_now_ms($1) \
                 ORDER BY t.flow_key LIMIT 1) \
         FROM keyed WHERE keyed.flow_key IS NOT NULL \
     ) \
     SELECT '' WHERE ( \
         SELECT 1 FROM queue \
         WHERE state = 'pending' AND destination = $2 AND tenant = $3 \
           AND flow_key = '' AND next_run_at <= tc_now_ms($1) \
         ORDER BY next_run_at LIMIT 1) IS NOT NULL \
     UNION ALL \
     SELECT flow_key FROM keyed WHERE flow_key IS NOT NULL";

/// The claim's key level: the room of every key met, and each key's
/// running tasks (every node's) with this claim's takes.
pub(crate) struct Keyed {
    /// Made when the claim first meets a keyed destination (it reads the
    /// database's time once).
    room: Option<KeyRoom>,
    /// The keys the worker holds ([`tc_model::destination::ClaimGate::held_keys`]).
    held: std::collections::BTreeSet<KeyRef>,
    load: BTreeMap<KeyRef, usize>,
    now: Option<i64>,
    aging: Duration,
}

impl Keyed {
    pub(crate) fn new(
        now: Option<i64>,
        aging: Duration,
        held: std::collections::BTreeSet<KeyRef>,
    ) -> Keyed {
        Keyed {
            held,
            room: None,
            load: BTreeMap::new(),
            now,
            aging,
        }
    }

    /// The caller's time, when the store runs on it.
    pub(crate) fn now(&self) -> Option<i64> {
        self.now
    }

    /// Whether `destination` (`tenant`'s tasks there, when given) has due
    /// keyed tasks: else the claim takes as it did before keys.
    pub(crate) async fn in_play(
        &self,
        tx: &Transaction<'_>,
        destination: &str,
        tenant: Option<&str>,
    ) -> Result<bool, StoreError> {
        let stmt = tx
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM queue \
                 WHERE state = 'pending' AND flow_key <> '' AND destination = $2 \
                   AND ($3::text IS NULL OR tenant = $3) AND next_run_at <= tc_now_ms($1))",
            )
            .await
            .map_err(db)?;
        tx.query_one(&stmt, &[&self.now, &destination, &tenant])
            .await
            .map_err(db)?
            .try_get(0)
            .map_err(db)
    }

    async fn due_keys(
        &self,
        tx: &Transaction<'_>,
        destination: &str,
        tenant: &str,
    ) -> Result<Vec<String>, StoreError> {
        let stmt = tx.prepare_cached(DUE_KEYS).await.map_err(db)?;
        tx.query(&stmt, &[&self.now, &destination, &tenant])
            .await
            .map_err(db)?
            .iter()
            .map(|row| row.try_get(0).map_err(db))
            .collect()
    }

    /// Reads (and locks) `key`'s state when the claim first meets it.
    async fn meet(&mut self, tx: &Transaction<'_>, key: &KeyRef) -> Result<usize, StoreError> {
        if let Some(load) = self.load.get(key) {
            return Ok(*load);
        }
        let count = tx
            .prepare_cached(
                "SELECT count(*) FROM queue WHERE state = 'running' \
                   AND tenant = $1 AND flow_key = $2",
            )
            .await
            .map_err(db)?;
        if key.key != NO_KEY {
            let lock = tx
                .prepare_cached(
                    "SELECT max_in_flight, rate_per_s, burst, tokens, refilled_at, \
                            (SELECT count(*) FROM queue WHERE state = 'running' \
                               AND flow_key <> '' AND tenant = $1 AND flow_key = $2) AS running \
                     FROM flow_keys WHERE tenant = $1 AND key = $2 FOR UPDATE SKIP LOCKED",
                )
                .await
                .map_err(db)?;
            let state = match tx
                .query_opt(&lock, &[&key.tenant, &key.key])
                .await
                .map_err(db)?
            {
                Some(row) => {
                    let tokens: Option<f64> = row.try_get("tokens").map_err(db)?;
                    let at: Option<i64> = row.try_get("refilled_at").map_err(db)?;
                    let running: i64 = row.try_get("running").map_err(db)?;
                    KeyState {
                        settings: settings_of(&row)?,
                        running: running.unsigned_abs(),
                        bucket: tokens.zip(at).map(|(tokens, at)| Bucket {
                            tokens,
                            at: Timestamp::from_millis(at),
                        }),
                        held: false,
                    }
                }
                // No settings (no bound), or held by another claim.
                None => KeyState {
                    held: read_settings(tx, key).await?.is_some(),
                    ..KeyState::default()
                },
            };
            self.room_mut(tx).await?.learn(key.clone(), state);
            let load = usize::try_from(state.running).unwrap_or(usize::MAX);
            self.load.insert(key.clone(), load);
            return Ok(load);
        }
        let running: i64 = tx
            .query_one(&count, &[&key.tenant, &key.key])
            .await
            .map_err(db)?
            .try_get(0)
            .map_err(db)?;
        let load = usize::try_from(running.unsigned_abs()).unwrap_or(usize::MAX);
        self.load.insert(key.clone(), load);
        Ok(load)
    }

    async fn room_mut(&mut self, tx: &Transaction<'_>) -> Result<&mut KeyRoom, StoreError> {
        if self.room.is_none() {
            let now = crate::cluster::db_now(tx, self.now).await?;
            self.room = Some(KeyRoom::new(Timestamp::from_millis(now)).holding(&self.held));
        }
        self.room
            .as_mut()
            .ok_or_else(|| StoreError::Unavailable("no key room".into()))
    }

    /// Claims up to `want` due tasks of `tenant` (as stored) in
    /// `destination`, shared between its due keys ([`KeyRoom::plan`]).
    pub(crate) async fn claim(
        &mut self,
        tx: &Transaction<'_>,
        destination: &str,
        tenant: &str,
        want: usize,
        lease: Duration,
    ) -> Result<Vec<Task>, StoreError> {
        let due = self.due_keys(tx, destination, tenant).await?;
        let mut load = BTreeMap::new();
        for key in &due {
            let at = KeyRef {
                tenant: tenant.to_owned(),
                key: key.clone(),
            };
            load.insert(key.clone(), self.meet(tx, &at).await?);
        }
        let mut share = self.room_mut(tx).await?.plan(want, tenant, due, &load);
        let by_key = tx
            .prepare_cached(claim_key_sql!(
                "q.next_run_at - q.priority::bigint * $7, q.pos"
            ))
            .await
            .map_err(db)?;
        let mut got = Vec::new();
        while let Some((key, wanted)) = share.next_take() {
            let limit = i64::try_from(wanted).unwrap_or(i64::MAX);
            let rows = tx
                .query(
                    &by_key,
                    &[
                        &self.now,
                        &limit,
                        &millis(lease),
                        &destination,
                        &tenant,
                        &key,
                        &millis(self.aging),
                    ],
                )
                .await
                .map_err(db)?;
            let tasks = crate::write_ops::claimed_tasks(&rows)?;
            share.taken(tasks.len());
            let at = KeyRef {
                tenant: tenant.to_owned(),
                key,
            };
            self.room_mut(tx).await?.taken(&at, tasks.len());
            *self.load.entry(at).or_default() += tasks.len();
            got.extend(tasks);
        }
        Ok(got)
    }

    /// Writes back the buckets of the rated keys this claim met (their
    /// rows locked since).
    pub(crate) async fn charge(&self, tx: &Transaction<'_>) -> Result<(), StoreError> {
        let Some(room) = &self.room else {
            return Ok(());
        };
        for (key, bucket) in room.buckets() {
            let stmt = tx
                .prepare_cached(
                    "UPDATE flow_keys SET tokens = $3, refilled_at = $4 \
                     WHERE tenant = $1 AND key = $2",
                )
                .await
                .map_err(db)?;
            tx.execute(
                &stmt,
                &[
                    &key.tenant,
                    &key.key,
                    &bucket.tokens,
                    &bucket.at.as_millis(),
                ],
            )
            .await
            .map_err(db)?;
        }
        Ok(())
    }
}
