//! Tenants on SQLite (issue 29): the `tenants` and `api_keys` tables of
//! schema step 16, and the claim's share of one destination's take between
//! its tenants. Synchronous functions on a connection, like the other
//! operations.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, Row, params};
use tc_model::Timestamp;
use tc_model::store::StoreError;
use tc_model::stored::{CorruptColumn, TenantRow};
use tc_model::tenant::key::{ApiKey, KeyHash, KeyOwner};
use tc_model::tenant::quota::{Admission, RetryQuota};
use tc_model::tenant::{
    Acting, NO_TENANT, Tenant, TenantDetail, TenantGate, TenantSettings, TenantUpdate,
};

use crate::rows::db;
use crate::secrets;
use tc_seal::Sealer;

const COLUMNS: &str = "name, weight, max_pending, submit_rate_per_s, submit_burst, \
     created_at, updated_at, signing_secrets";

fn corrupt(what: &str) -> StoreError {
    StoreError::Unavailable(format!("corrupt row in tenants: bad {what}"))
}

/// A row's columns as read; tc-model's [`TenantRow`] checks them (outside
/// rusqlite's closure, so that a corrupt row is a [`StoreError`]).
fn raw(row: &Row<'_>) -> rusqlite::Result<TenantRow> {
    Ok(TenantRow {
        name: row.get(0)?,
        weight: row.get(1)?,
        max_pending: row.get(2)?,
        submit_rate_per_s: row.get(3)?,
        submit_burst: row.get(4)?,
        created_at: row.get(5)?,
        updated_at: row.get(6)?,
        signing_secrets: row.get(7)?,
    })
}

fn tenant_of(mut r: TenantRow, sealer: &Sealer) -> Result<Tenant, StoreError> {
    r.signing_secrets = secrets::open(sealer, r.signing_secrets)?;
    r.into_tenant().map_err(|CorruptColumn(what)| corrupt(what))
}

fn load(conn: &Connection, name: &str, sealer: &Sealer) -> Result<Option<Tenant>, StoreError> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM tenants WHERE name = ?1"))
        .map_err(db)?
        .query_row([name], raw)
        .optional()
        .map_err(db)?
        .map(|r| tenant_of(r, sealer))
        .transpose()
}

/// Whether the tenant `name` exists (its secrets left sealed).
fn exists(conn: &Connection, name: &str) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM tenants WHERE name = ?1)")
        .map_err(db)?
        .query_row([name], |row| row.get(0))
        .map_err(db)
}

/// A stored count or limit as SQLite's integer.
fn int(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// Inserts `tenant`'s row (`OR IGNORE`: a taken name writes nothing) or
/// updates it (`UPDATE`): every column but the name; answers the rows
/// written.
fn write(
    conn: &Connection,
    tenant: &Tenant,
    insert: bool,
    sealer: &Sealer,
) -> Result<usize, StoreError> {
    let s = &tenant.settings;
    let sql = if insert {
        "INSERT OR IGNORE INTO tenants (name, weight, max_pending, submit_rate_per_s, \
                                        submit_burst, created_at, updated_at, signing_secrets) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
    } else {
        "UPDATE tenants SET weight = ?2, max_pending = ?3, submit_rate_per_s = ?4, \
                            submit_burst = ?5, created_at = ?6, updated_at = ?7, \
                            signing_secrets = ?8 \
         WHERE name = ?1"
    };
    conn.prepare_cached(sql)
        .map_err(db)?
        .execute(params![
            tenant.name,
            s.weight,
            s.max_pending.map(int),
            s.submit_rate_per_s,
            s.submit_burst,
            tenant.created_at.as_millis(),
            tenant.updated_at.as_millis(),
            secrets::seal(sealer, s.signing_secrets.to_stored())?,
        ])
        .map_err(db)
}

/// A new tenant with the defaults and `settings` applied, or
/// [`StoreError::Exists`].
pub(crate) fn create(
    conn: &Connection,
    name: &str,
    settings: &TenantUpdate,
    now: Timestamp,
    sealer: &Sealer,
) -> Result<Tenant, StoreError> {
    let tenant = Tenant {
        name: name.to_owned(),
        settings: settings.apply(&TenantSettings::default()),
        created_at: now,
        updated_at: now,
    };
    // A taken name writes nothing and is told by the count.
    match write(conn, &tenant, true, sealer)? {
        0 => Err(StoreError::Exists),
        _ => Ok(tenant),
    }
}

/// `update` applied to the tenant `name`, or [`StoreError::NotFound`].
pub(crate) fn update(
    conn: &Connection,
    name: &str,
    update: &TenantUpdate,
    now: Timestamp,
    sealer: &Sealer,
) -> Result<Tenant, StoreError> {
    let old = load(conn, name, sealer)?.ok_or(StoreError::NotFound)?;
    let new = Tenant {
        settings: update.apply(&old.settings),
        updated_at: now,
        ..old
    };
    write(conn, &new, false, sealer)?;
    Ok(new)
}

/// Deletes the tenant `name` and its keys, unless a task is its.
pub(crate) fn delete(conn: &Connection, name: &str) -> Result<(), StoreError> {
    if !exists(conn, name)? {
        return Err(StoreError::NotFound);
    }
    let has_tasks: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM tasks INDEXED BY tasks_by_tenant \
                            WHERE tenant = ?1 AND tenant <> '')",
        )
        .map_err(db)?
        .query_row([name], |row| row.get(0))
        .map_err(db)?;
    if has_tasks {
        return Err(StoreError::NotEmpty);
    }
    conn.prepare_cached("DELETE FROM api_keys WHERE tenant = ?1")
        .map_err(db)?
        .execute([name])
        .map_err(db)?;
    conn.prepare_cached("DELETE FROM tenants WHERE name = ?1")
        .map_err(db)?
        .execute([name])
        .map_err(db)?;
    Ok(())
}

/// A tenant's tasks in `state` (`'pending'` or `'running'`), by a seek in
/// `tasks_open_by_tenant`.
const COUNT_IN_STATE: &str = "SELECT count(*) FROM tasks INDEXED BY tasks_open_by_tenant \
     WHERE tenant = ?1 AND tenant <> '' AND state = ?2";

fn detail(conn: &Connection, tenant: Tenant) -> Result<TenantDetail, StoreError> {
    let mut count = conn.prepare_cached(COUNT_IN_STATE).map_err(db)?;
    let mut in_state = |state: &str| -> Result<u64, StoreError> {
        let n: i64 = count
            .query_row(params![tenant.name, state], |row| row.get(0))
            .map_err(db)?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    let pending = in_state("pending")?;
    let running = in_state("running")?;
    let keys = conn
        .prepare_cached(
            "SELECT id, created_at, last_used_at FROM api_keys WHERE tenant = ?1 \
             ORDER BY created_at, seq",
        )
        .map_err(db)?
        .query_map([&tenant.name], |row| {
            Ok(ApiKey {
                id: row.get(0)?,
                created_at: Timestamp::from_millis(row.get(1)?),
                last_used_at: row.get::<_, Option<i64>>(2)?.map(Timestamp::from_millis),
            })
        })
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    Ok(TenantDetail {
        tenant,
        pending,
        running,
        keys,
    })
}

/// Every tenant in name order, with its counts and keys.
pub(crate) fn all(conn: &mut Connection, sealer: &Sealer) -> Result<Vec<TenantDetail>, StoreError> {
    // One snapshot for the list and every count.
    let tx = conn.transaction().map_err(db)?;
    let tenants: Vec<TenantRow> = tx
        .prepare_cached(&format!("SELECT {COLUMNS} FROM tenants ORDER BY name"))
        .map_err(db)?
        .query_map([], raw)
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    let details = tenants
        .into_iter()
        .map(|r| detail(&tx, tenant_of(r, sealer)?))
        .collect();
    tx.finish().map_err(db)?;
    details
}

/// Every tenant's settings by name: one read of the `tenants` table, no
/// count and no key (the worker reads it every second).
pub(crate) fn settings(
    conn: &mut Connection,
    sealer: &Sealer,
) -> Result<BTreeMap<String, TenantSettings>, StoreError> {
    let rows: Vec<TenantRow> = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM tenants"))
        .map_err(db)?
        .query_map([], raw)
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    rows.into_iter()
        .map(|r| tenant_of(r, sealer).map(|t| (t.name, t.settings)))
        .collect()
}

/// The tenant `name` with its counts and keys, or [`StoreError::NotFound`].
pub(crate) fn one(
    conn: &mut Connection,
    name: &str,
    sealer: &Sealer,
) -> Result<TenantDetail, StoreError> {
    let tx = conn.transaction().map_err(db)?;
    let found = load(&tx, name, sealer)?.ok_or(StoreError::NotFound)?;
    let detail = detail(&tx, found);
    tx.finish().map_err(db)?;
    detail
}

/// Stores a new key of `tenant`: [`StoreError::NotFound`] without such a
/// tenant, [`StoreError::Exists`] when the id or the hash is taken (both
/// are random: a caller's bug).
pub(crate) fn create_key(
    conn: &Connection,
    tenant: &str,
    id: &str,
    hash: &KeyHash,
    now: Timestamp,
) -> Result<ApiKey, StoreError> {
    if !exists(conn, tenant)? {
        return Err(StoreError::NotFound);
    }
    let made = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO api_keys (id, tenant, hash, created_at) VALUES (?1, ?2, ?3, ?4)",
        )
        .map_err(db)?
        .execute(params![id, tenant, hash.0.as_slice(), now.as_millis()])
        .map_err(db)?;
    if made == 0 {
        return Err(StoreError::Exists);
    }
    Ok(ApiKey {
        id: id.to_owned(),
        created_at: now,
        last_used_at: None,
    })
}

/// Deletes the key `id` of `tenant`, or [`StoreError::NotFound`].
pub(crate) fn revoke_key(conn: &Connection, tenant: &str, id: &str) -> Result<(), StoreError> {
    let gone = conn
        .prepare_cached("DELETE FROM api_keys WHERE tenant = ?1 AND id = ?2")
        .map_err(db)?
        .execute([tenant, id])
        .map_err(db)?;
    if gone == 0 {
        Err(StoreError::NotFound)
    } else {
        Ok(())
    }
}

/// The key whose hash is `hash`, with its tenant as stored now.
pub(crate) fn key_owner(
    conn: &mut Connection,
    hash: &KeyHash,
    sealer: &Sealer,
) -> Result<Option<KeyOwner>, StoreError> {
    let tx = conn.transaction().map_err(db)?;
    let found: Option<(String, Vec<u8>, String)> = tx
        .prepare_cached("SELECT id, hash, tenant FROM api_keys WHERE hash = ?1")
        .map_err(db)?
        .query_row([hash.0.as_slice()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()
        .map_err(db)?;
    let Some((key_id, stored, tenant)) = found else {
        tx.finish().map_err(db)?;
        return Ok(None);
    };
    let stored = KeyHash(
        <[u8; 32]>::try_from(stored.as_slice())
            .map_err(|_| StoreError::Unavailable("corrupt row in api_keys: bad hash".into()))?,
    );
    let tenant = load(&tx, &tenant, sealer)?
        .ok_or_else(|| StoreError::Unavailable(format!("key {key_id} has no tenant")))?;
    tx.finish().map_err(db)?;
    Ok(Some(KeyOwner {
        key_id,
        hash: stored,
        tenant,
    }))
}

/// Records a use of the key `id` at `at`: a guarded UPDATE that never moves
/// `last_used_at` backwards (nodes write in any order).
pub(crate) fn touch_key(conn: &Connection, id: &str, at: Timestamp) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE api_keys SET last_used_at = ?2 \
         WHERE id = ?1 AND (last_used_at IS NULL OR last_used_at < ?2)",
    )
    .map_err(db)?
    .execute(params![id, at.as_millis()])
    .map_err(db)?;
    Ok(())
}

/// [`StoreError::CredentialGone`] unless `acting`'s key is live: a
/// tenant's delete revokes its keys in the same transaction, so a live key
/// is a live tenant. The single writer runs this check and the write it
/// guards with no revoke or delete in between.
pub(crate) fn check_acting(conn: &Connection, acting: &Acting) -> Result<(), StoreError> {
    let live: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = ?1 AND tenant = ?2)")
        .map_err(db)?
        .query_row(params![acting.key_id, acting.tenant], |row| row.get(0))
        .map_err(db)?;
    if live {
        Ok(())
    } else {
        Err(StoreError::CredentialGone)
    }
}

/// Whether `quota` admits one more retry of a task of `tenant` (as stored,
/// `''` for none): its `max_pending` and its open tasks are read once per
/// transaction, the count bounded by the limit.
pub(crate) fn admit_retry(
    conn: &Connection,
    tenant: &str,
    quota: &mut RetryQuota,
) -> Result<Admission, StoreError> {
    if !quota.knows(tenant) {
        let limit: Option<i64> = conn
            .prepare_cached("SELECT max_pending FROM tenants WHERE name = ?1")
            .map_err(db)?
            .query_row([tenant], |row| row.get(0))
            .optional()
            .map_err(db)?
            .flatten();
        let limit = limit.and_then(|l| u64::try_from(l).ok());
        let open = match limit {
            Some(limit) => crate::write_ops::open_tasks_of(conn, tenant, limit)?,
            None => 0,
        };
        quota.learn(tenant, limit, open);
    }
    Ok(quota.admit(tenant))
}

/// The first tenant after `after` (in name order) with a pending task in
/// a destination, and whether its earliest is due: one seek in
/// `tasks_due_by_tenant`, whose entries run by tenant then due time.
pub(crate) const NEXT_TENANT: &str = "SELECT tenant, next_run_at <= ?3 \
     FROM tasks INDEXED BY tasks_due_by_tenant \
     WHERE state = 'pending' AND tenant <> '' AND destination = ?1 AND tenant > ?2 \
     ORDER BY tenant, next_run_at LIMIT 1";

/// A tenant's due tasks in a destination, oldest due first: a named
/// tenant's or, with `''` ([`NO_TENANT`]), the tasks without one. Since
/// schema step 18 the index holds every pending task, so the tasks without
/// a tenant are one seek away however many of a tenant's due tasks come
/// before them (before, they were found by walking the destination's due
/// order past the tenants' tasks, a walk that had to be bounded and so
/// starved them behind a long backlog).
pub(crate) const DUE_OF_TENANT: &str = "SELECT seq, state FROM tasks INDEXED BY tasks_due_by_tenant \
     WHERE state = 'pending' AND destination = ?1 AND tenant = ?2 AND next_run_at <= ?3 \
     ORDER BY next_run_at, seq LIMIT ?4";

pub(crate) fn due_of(
    conn: &Connection,
    destination: &str,
    tenant: &str,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<(i64, String)>, StoreError> {
    conn.prepare_cached(DUE_OF_TENANT)
        .map_err(db)?
        .query_map(
            params![destination, tenant, now.as_millis(), int(limit)],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)
}

/// The tenants with due tasks in `destination`, in name order
/// ([`NO_TENANT`], first, for the tasks without one).
fn due_tenants(
    conn: &Connection,
    destination: &str,
    now: Timestamp,
) -> Result<Vec<String>, StoreError> {
    let mut due = Vec::new();
    if !due_of(conn, destination, NO_TENANT, now, 1)?.is_empty() {
        due.push(NO_TENANT.to_owned());
    }
    let mut next = conn.prepare_cached(NEXT_TENANT).map_err(db)?;
    let mut after = String::new();
    loop {
        let found: Option<(String, bool)> = next
            .query_row(params![destination, after, now.as_millis()], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()
            .map_err(db)?;
        let Some((tenant, is_due)) = found else {
            return Ok(due);
        };
        if is_due {
            due.push(tenant.clone());
        }
        after = tenant;
    }
}

/// One destination's take of up to `want` due tasks shared between its
/// tenants by `gate` ([`TenantGate::plan`]), each tenant's oldest due
/// first; `load` is the node's calls in flight by tenant with this claim's
/// takes so far, and gets this take's added. `claim_one` claims the task at
/// a seq (in the state read) and keeps it; `aging` orders each tenant's
/// due tasks by priority ([`crate::priority::due_of`]). Answers how many
/// were taken.
#[allow(clippy::too_many_arguments)]
pub(crate) fn take_shared(
    conn: &Connection,
    gate: &TenantGate,
    destination: &str,
    want: usize,
    now: Timestamp,
    aging: std::time::Duration,
    load: &mut BTreeMap<String, usize>,
    mut claim_one: impl FnMut(i64, &str) -> Result<(), StoreError>,
) -> Result<usize, StoreError> {
    let due = due_tenants(conn, destination, now)?;
    let mut share = gate.plan(want, due, load);
    let mut took = 0;
    while let Some((tenant, wanted)) = share.next_take() {
        let tasks = crate::priority::due_of(conn, destination, Some(&tenant), now, wanted, aging)?;
        share.taken(tasks.len());
        took += tasks.len();
        *load.entry(tenant).or_default() += tasks.len();
        for (seq, state) in tasks {
            claim_one(seq, &state)?;
        }
    }
    Ok(took)
}
