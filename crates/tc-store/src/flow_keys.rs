//! Flow keys on SQLite: the `flow_keys` rows (each tenant's keys'
//! settings and token bucket), their counts read from `tasks`, and the
//! claim's key level: a destination's (and tenant's) take shared between
//! its due keys within each key's room ([`tc_model::flow_key::KeyRoom`]).
//!
//! Tasks without a key are stored with `''` and are one more key. The key
//! level costs a claim nothing while the destination has no due keyed task
//! (one seek in the partial index `tasks_due_by_key`, schema step 26).

use std::collections::BTreeMap;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use tc_model::Timestamp;
use tc_model::cluster::Bucket;
use tc_model::flow_key::{
    FLOW_KEYS_LIMIT, FlowKey, FlowKeySettings, FlowKeyUpdate, KeyRef, KeyRoom, KeyState, NO_KEY,
};
use tc_model::store::StoreError;
use tc_model::tenant::stored_tenant;

use crate::rows::db;

/// A key's settings and bucket.
const SETTINGS: &str = "SELECT max_in_flight, rate_per_s, burst, tokens, refilled_at \
     FROM flow_keys WHERE tenant = ?1 AND key = ?2";

/// A key's running and pending tasks.
const COUNTS: &str = "SELECT \
     (SELECT count(*) FROM tasks INDEXED BY tasks_running_by_key \
      WHERE state = 'running' AND flow_key <> '' AND tenant = ?1 AND flow_key = ?2), \
     (SELECT count(*) FROM tasks INDEXED BY tasks_due_by_key \
      WHERE state = 'pending' AND flow_key <> '' AND tenant = ?1 AND flow_key = ?2)";

fn read_settings(
    conn: &Connection,
    key: &KeyRef,
) -> Result<Option<(FlowKeySettings, Option<Bucket>)>, StoreError> {
    conn.prepare_cached(SETTINGS)
        .map_err(db)?
        .query_row(params![key.tenant, key.key], |row| {
            let tokens: Option<f64> = row.get(3)?;
            let at: Option<i64> = row.get(4)?;
            Ok((
                FlowKeySettings {
                    max_in_flight: row.get(0)?,
                    rate_per_s: row.get(1)?,
                    burst: row.get(2)?,
                },
                tokens.zip(at).map(|(tokens, at)| Bucket {
                    tokens,
                    at: Timestamp::from_millis(at),
                }),
            ))
        })
        .optional()
        .map_err(db)
}

fn with_counts(
    conn: &Connection,
    key: &KeyRef,
    settings: FlowKeySettings,
) -> Result<FlowKey, StoreError> {
    let (in_flight, pending): (i64, i64) = conn
        .prepare_cached(COUNTS)
        .map_err(db)?
        .query_row(params![key.tenant, key.key], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .map_err(db)?;
    Ok(FlowKey {
        key: key.key.clone(),
        settings,
        in_flight: in_flight.unsigned_abs(),
        pending: pending.unsigned_abs(),
    })
}

/// The port's `put_flow_key`.
pub(crate) fn put(
    conn: &Connection,
    key: &KeyRef,
    update: &FlowKeyUpdate,
    now: Timestamp,
) -> Result<FlowKey, StoreError> {
    let old = read_settings(conn, key)?
        .map(|(s, _)| s)
        .unwrap_or_default();
    let new = update.apply(&old);
    conn.prepare_cached(
        "INSERT INTO flow_keys (tenant, key, max_in_flight, rate_per_s, burst, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
         ON CONFLICT (tenant, key) DO UPDATE SET max_in_flight = ?3, rate_per_s = ?4, \
             burst = ?5, updated_at = ?6",
    )
    .map_err(db)?
    .execute(params![
        key.tenant,
        key.key,
        new.max_in_flight,
        new.rate_per_s,
        new.burst,
        now.as_millis()
    ])
    .map_err(db)?;
    with_counts(conn, key, new)
}

/// The port's `flow_key`.
pub(crate) fn get(conn: &Connection, key: &KeyRef) -> Result<FlowKey, StoreError> {
    let settings = read_settings(conn, key)?;
    let found = with_counts(conn, key, settings.map(|(s, _)| s).unwrap_or_default())?;
    if settings.is_none() && found.in_flight == 0 && found.pending == 0 {
        let any: bool = conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM tasks WHERE tenant = ?1 AND flow_key = ?2)",
            )
            .map_err(db)?
            .query_row(params![key.tenant, key.key], |row| row.get(0))
            .map_err(db)?;
        if !any {
            return Err(StoreError::NotFound);
        }
    }
    Ok(found)
}

/// The port's `flow_keys`.
pub(crate) fn list(conn: &Connection, tenant: Option<&str>) -> Result<Vec<FlowKey>, StoreError> {
    let tenant = stored_tenant(tenant);
    let keys: Vec<(String, FlowKeySettings)> = conn
        .prepare_cached(
            "SELECT key, max_in_flight, rate_per_s, burst FROM flow_keys \
             WHERE tenant = ?1 ORDER BY key LIMIT ?2",
        )
        .map_err(db)?
        .query_map(params![tenant, FLOW_KEYS_LIMIT as i64], |row| {
            Ok((
                row.get(0)?,
                FlowKeySettings {
                    max_in_flight: row.get(1)?,
                    rate_per_s: row.get(2)?,
                    burst: row.get(3)?,
                },
            ))
        })
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    keys.into_iter()
        .map(|(key, settings)| with_counts(conn, &KeyRef::new(Some(tenant), &key), settings))
        .collect()
}

/// The port's `delete_flow_key`.
pub(crate) fn delete(conn: &Connection, key: &KeyRef) -> Result<(), StoreError> {
    let gone = conn
        .prepare_cached("DELETE FROM flow_keys WHERE tenant = ?1 AND key = ?2")
        .map_err(db)?
        .execute(params![key.tenant, key.key])
        .map_err(db)?;
    if gone == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

/// Whether `destination` (of `tenant`, when given) has due keyed tasks.
const HAS_KEYED: &str = "SELECT EXISTS (SELECT 1 FROM tasks INDEXED BY tasks_due_by_key \
     WHERE state = 'pending' AND flow_key <> '' AND destination = ?1 \
       AND (?3 IS NULL OR tenant = ?3) AND next_run_at <= ?2)";

/// Whether `destination` (`tenant`'s tasks there, when given) has keyed
/// tasks due at `now`.
pub(crate) fn keyed_due(
    conn: &Connection,
    destination: &str,
    tenant: Option<&str>,
    now: Timestamp,
) -> Result<bool, StoreError> {
    conn.prepare_cached(HAS_KEYED)
        .map_err(db)?
        .query_row(params![destination, now.as_millis(), tenant], |row| {
            row.get(0)
        })
        .map_err(db)
}

/// The first key after `?3` with a pending task of `?1` and tenant `?2`,
/// and whether its earliest is due: one seek per key.
const NEXT_KEY: &str = "SELECT flow_key, next_run_at <= ?4 FROM tasks INDEXED BY tasks_due_by_key \
     WHERE state = 'pending' AND flow_key <> '' AND destination = ?1 AND tenant = ?2 \
       AND flow_key > ?3 \
     ORDER BY flow_key, next_run_at LIMIT 1";

/// Whether the key `?3` (`''`: the tasks without one) of `?1`/`?2` has due
/// tasks of priority above 0.
const KEY_PRIORITIZED: &str = "SELECT EXISTS (SELECT 1 FROM tasks INDEXED BY tasks_prioritized \
     WHERE state = 'pending' AND priority > 0 AND destination = ?1 AND next_run_at <= ?4 \
       AND tenant = ?2 AND flow_key = ?3)";

/// Due tasks of a key in index order (no priorities among them).
pub(crate) const DUE_OF_KEY: &str = "SELECT seq, state FROM tasks INDEXED BY tasks_due_by_key \
     WHERE state = 'pending' AND flow_key <> '' AND destination = ?1 AND tenant = ?2 \
       AND flow_key = ?3 AND next_run_at <= ?4 \
     ORDER BY next_run_at, seq LIMIT ?5";

/// Due tasks without a key (`?3`, always `''`, is not read), in due
/// order: a seek in their own index (schema step 28), however many keyed
/// tasks are due beside them.
pub(crate) const DUE_UNKEYED: &str = "SELECT seq, state FROM tasks INDEXED BY tasks_due_unkeyed \
     WHERE state = 'pending' AND flow_key = '' AND destination = ?1 AND tenant = ?2 \
       AND next_run_at <= ?4 \
     ORDER BY next_run_at, seq LIMIT ?5";

/// Due tasks of a key by the priority key, aging `?6` ms a level.
const DUE_OF_KEY_BY_PRIORITY: &str = "SELECT seq, state FROM tasks INDEXED BY tasks_due_by_key \
     WHERE state = 'pending' AND flow_key <> '' AND destination = ?1 AND tenant = ?2 \
       AND flow_key = ?3 AND next_run_at <= ?4 \
     ORDER BY next_run_at - priority * ?6, seq LIMIT ?5";

/// Due tasks without a key by the priority key, aging `?6` ms a level.
const DUE_UNKEYED_BY_PRIORITY: &str = "SELECT seq, state FROM tasks INDEXED BY tasks_due_unkeyed \
     WHERE state = 'pending' AND flow_key = '' AND destination = ?1 AND tenant = ?2 \
       AND next_run_at <= ?4 \
     ORDER BY next_run_at - priority * ?6, seq LIMIT ?5";

/// The claim's key level: the room of every key met, and each key's
/// running tasks (every node's) with this claim's takes.
pub(crate) struct Keyed {
    room: KeyRoom,
    load: BTreeMap<KeyRef, usize>,
    now: Timestamp,
    aging: Duration,
}

impl Keyed {
    pub(crate) fn new(
        now: Timestamp,
        aging: Duration,
        held: &std::collections::BTreeSet<KeyRef>,
    ) -> Keyed {
        Keyed {
            room: KeyRoom::new(now).holding(held),
            load: BTreeMap::new(),
            now,
            aging,
        }
    }

    /// Whether `destination` (`tenant`'s tasks there, when given) has due
    /// keyed tasks: else the claim takes as it did before keys.
    pub(crate) fn in_play(
        &self,
        conn: &Connection,
        destination: &str,
        tenant: Option<&str>,
    ) -> Result<bool, StoreError> {
        keyed_due(conn, destination, tenant, self.now)
    }

    fn due_keys(
        &self,
        conn: &Connection,
        destination: &str,
        tenant: &str,
    ) -> Result<Vec<String>, StoreError> {
        let mut due = Vec::new();
        if !self.due(conn, destination, tenant, NO_KEY, 1)?.is_empty() {
            due.push(NO_KEY.to_owned());
        }
        let mut next = conn.prepare_cached(NEXT_KEY).map_err(db)?;
        let mut after = String::new();
        loop {
            let found: Option<(String, bool)> = next
                .query_row(
                    params![destination, tenant, after, self.now.as_millis()],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()
                .map_err(db)?;
            let Some((key, is_due)) = found else {
                return Ok(due);
            };
            if is_due {
                due.push(key.clone());
            }
            after = key;
        }
    }

    fn due(
        &self,
        conn: &Connection,
        destination: &str,
        tenant: &str,
        key: &str,
        limit: usize,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let now = self.now.as_millis();
        let prioritized: bool = conn
            .prepare_cached(KEY_PRIORITIZED)
            .map_err(db)?
            .query_row(params![destination, tenant, key, now], |row| row.get(0))
            .map_err(db)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let read = |row: &rusqlite::Row<'_>| Ok((row.get(0)?, row.get(1)?));
        let found = if prioritized {
            let aging = i64::try_from(self.aging.as_millis()).unwrap_or(i64::MAX);
            let sql = if key == NO_KEY {
                DUE_UNKEYED_BY_PRIORITY
            } else {
                DUE_OF_KEY_BY_PRIORITY
            };
            conn.prepare_cached(sql)
                .map_err(db)?
                .query_map(params![destination, tenant, key, now, limit, aging], read)
                .map_err(db)?
                .collect::<rusqlite::Result<_>>()
        } else {
            let sql = if key == NO_KEY {
                DUE_UNKEYED
            } else {
                DUE_OF_KEY
            };
            conn.prepare_cached(sql)
                .map_err(db)?
                .query_map(params![destination, tenant, key, now, limit], read)
                .map_err(db)?
                .collect::<rusqlite::Result<_>>()
        };
        found.map_err(db)
    }

    /// Reads `key`'s state when the claim first meets it.
    fn meet(&mut self, conn: &Connection, key: &KeyRef) -> Result<usize, StoreError> {
        if let Some(load) = self.load.get(key) {
            return Ok(*load);
        }
        let running: i64 = if key.key == NO_KEY {
            conn.prepare_cached(
                "SELECT count(*) FROM tasks INDEXED BY tasks_leased \
                 WHERE state = 'running' AND tenant = ?1 AND flow_key = ''",
            )
            .map_err(db)?
            .query_row(params![key.tenant], |row| row.get(0))
            .map_err(db)?
        } else {
            conn.prepare_cached(
                "SELECT count(*) FROM tasks INDEXED BY tasks_running_by_key \
                 WHERE state = 'running' AND flow_key <> '' AND tenant = ?1 AND flow_key = ?2",
            )
            .map_err(db)?
            .query_row(params![key.tenant, key.key], |row| row.get(0))
            .map_err(db)?
        };
        let running = running.unsigned_abs();
        if key.key != NO_KEY {
            let (settings, bucket) = read_settings(conn, key)?.unwrap_or_default();
            self.room.learn(
                key.clone(),
                KeyState {
                    settings,
                    running,
                    bucket,
                    held: false,
                },
            );
        }
        let load = usize::try_from(running).unwrap_or(usize::MAX);
        self.load.insert(key.clone(), load);
        Ok(load)
    }

    /// Up to `want` due tasks of `tenant` (as stored) in `destination`,
    /// shared between its due keys ([`KeyRoom::plan`]), each key's in
    /// claim order; their seqs and states, to be claimed.
    pub(crate) fn take(
        &mut self,
        conn: &Connection,
        destination: &str,
        tenant: &str,
        want: usize,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let due = self.due_keys(conn, destination, tenant)?;
        let mut load = BTreeMap::new();
        for key in &due {
            let at = KeyRef {
                tenant: tenant.to_owned(),
                key: key.clone(),
            };
            load.insert(key.clone(), self.meet(conn, &at)?);
        }
        let mut share = self.room.plan(want, tenant, due, &load);
        let mut got = Vec::new();
        // The tasks of each key this take has read: they stay due until
        // the caller claims them, after the take, so a key the share meets
        // again reads past them. (A later take of the same destination in
        // this claim finds them claimed: it counts afresh.)
        let mut taken: BTreeMap<String, usize> = BTreeMap::new();
        while let Some((key, wanted)) = share.next_take() {
            let already = taken.get(&key).copied().unwrap_or(0);
            let tasks: Vec<(i64, String)> = self
                .due(conn, destination, tenant, &key, wanted + already)?
                .into_iter()
                .skip(already)
                .collect();
            *taken.entry(key.clone()).or_default() += tasks.len();
            share.taken(tasks.len());
            let at = KeyRef {
                tenant: tenant.to_owned(),
                key,
            };
            self.room.taken(&at, tasks.len());
            *self.load.entry(at).or_default() += tasks.len();
            got.extend(tasks);
        }
        Ok(got)
    }

    /// Writes back the buckets of the rated keys this claim met.
    pub(crate) fn charge(&self, conn: &Connection) -> Result<(), StoreError> {
        for (key, bucket) in self.room.buckets() {
            conn.prepare_cached(
                "UPDATE flow_keys SET tokens = ?3, refilled_at = ?4 WHERE tenant = ?1 AND key = ?2",
            )
            .map_err(db)?
            .execute(params![
                key.tenant,
                key.key,
                bucket.tokens,
                bucket.at.as_millis()
            ])
            .map_err(db)?;
        }
        Ok(())
    }
}
