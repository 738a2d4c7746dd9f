//! Tenants on PostgreSQL: the `tenants` and `api_keys` tables of
//! schema step 14. A tenant's settings are tc-model's
//! [`TenantSettings`], its keys only their SHA-256 (a key's row goes with
//! its tenant). Counts of a tenant's tasks read `queue_unfinished_by_tenant`;
//! a tenant is deleted only while `tasks_by_tenant` finds none of its tasks.

use std::collections::{BTreeMap, HashMap};

use deadpool_postgres::{GenericClient, Transaction};
use tc_model::Timestamp;
use tc_model::store::StoreError;
use tc_model::stored::{CorruptColumn, TenantRow};
use tc_model::tenant::key::{ApiKey, KeyHash, KeyOwner};
use tc_model::tenant::{Tenant, TenantDetail, TenantSettings, TenantUpdate};
use tokio_postgres::Row;

use crate::error::db;
use crate::secrets;
use tc_seal::Sealer;

/// The tenant columns [`tenant_of`] reads, from column `at` on.
const COLUMNS: &str = "name, weight, max_pending, submit_rate_per_s, submit_burst, created_at, \
     updated_at, signing_secrets";

/// The same columns of the tenant aliased `t`.
const T_COLUMNS: &str = "t.name, t.weight, t.max_pending, t.submit_rate_per_s, t.submit_burst, \
     t.created_at, t.updated_at, t.signing_secrets";

fn corrupt(what: &str) -> StoreError {
    StoreError::Unavailable(format!("corrupt row in tenants: bad {what}"))
}

/// A tenant from the [`COLUMNS`] of `row` starting at column `at`; tc-model's
/// [`TenantRow`] checks the values.
fn tenant_of(row: &Row, at: usize, sealer: &Sealer) -> Result<Tenant, StoreError> {
    let weight: i32 = row.try_get(at + 1).map_err(db)?;
    let burst: Option<i32> = row.try_get(at + 4).map_err(db)?;
    TenantRow {
        name: row.try_get(at).map_err(db)?,
        weight: weight.into(),
        max_pending: row.try_get(at + 2).map_err(db)?,
        submit_rate_per_s: row.try_get(at + 3).map_err(db)?,
        submit_burst: burst.map(i64::from),
        created_at: row.try_get(at + 5).map_err(db)?,
        updated_at: row.try_get(at + 6).map_err(db)?,
        signing_secrets: secrets::open(sealer, row.try_get(at + 7).map_err(db)?)?,
    }
    .into_tenant()
    .map_err(|CorruptColumn(what)| corrupt(what))
}

/// The settings as the columns hold them (weight, max_pending, rate,
/// burst); values beyond the columns' range (never valid settings) are
/// refused by the table's checks.
fn columns_of(settings: &TenantSettings) -> (i32, Option<i64>, Option<f64>, Option<i32>) {
    (
        i32::try_from(settings.weight).unwrap_or(i32::MAX),
        settings
            .max_pending
            .map(|m| i64::try_from(m).unwrap_or(i64::MAX)),
        settings.submit_rate_per_s,
        settings
            .submit_burst
            .map(|b| i32::try_from(b).unwrap_or(i32::MAX)),
    )
}

/// A new tenant with the defaults and `update` applied, or
/// [`StoreError::Exists`].
pub(crate) async fn create(
    client: &impl GenericClient,
    name: &str,
    update: &TenantUpdate,
    now: Timestamp,
    sealer: &Sealer,
) -> Result<Tenant, StoreError> {
    let settings = update.apply(&TenantSettings::default());
    let (weight, max_pending, rate, burst) = columns_of(&settings);
    let stmt = client
        .prepare_cached(&format!(
            "INSERT INTO tenants ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $6, $7) \
             ON CONFLICT (name) DO NOTHING RETURNING {COLUMNS}"
        ))
        .await
        .map_err(db)?;
    let row = client
        .query_opt(
            &stmt,
            &[
                &name,
                &weight,
                &max_pending,
                &rate,
                &burst,
                &now.as_millis(),
                &secrets::seal(sealer, settings.signing_secrets.to_stored())?,
            ],
        )
        .await
        .map_err(db)?
        .ok_or(StoreError::Exists)?;
    tenant_of(&row, 0, sealer)
}

/// Applies `update` to the tenant `name` (its row locked meanwhile), or
/// [`StoreError::NotFound`].
pub(crate) async fn update(
    tx: &Transaction<'_>,
    name: &str,
    update: &TenantUpdate,
    now: Timestamp,
    sealer: &Sealer,
) -> Result<Tenant, StoreError> {
    let lock = tx
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tenants WHERE name = $1 FOR UPDATE"
        ))
        .await
        .map_err(db)?;
    let row = tx
        .query_opt(&lock, &[&name])
        .await
        .map_err(db)?
        .ok_or(StoreError::NotFound)?;
    let before = tenant_of(&row, 0, sealer)?;
    let settings = update.apply(&before.settings);
    let (weight, max_pending, rate, burst) = columns_of(&settings);
    let stmt = tx
        .prepare_cached(&format!(
            "UPDATE tenants SET weight = $2, max_pending = $3, submit_rate_per_s = $4, \
                                submit_burst = $5, updated_at = $6, signing_secrets = $7 \
             WHERE name = $1 RETURNING {COLUMNS}"
        ))
        .await
        .map_err(db)?;
    let row = tx
        .query_one(
            &stmt,
            &[
                &name,
                &weight,
                &max_pending,
                &rate,
                &burst,
                &now.as_millis(),
                &secrets::seal(sealer, settings.signing_secrets.to_stored())?,
            ],
        )
        .await
        .map_err(db)?;
    tenant_of(&row, 0, sealer)
}

/// Deletes the tenant `name` and its keys: [`StoreError::NotFound`]
/// without it, [`StoreError::NotEmpty`] while any task is its. The
/// tenant's lock comes first (`write_ops::lock_tenants`): a submit made
/// with one of its keys has then either committed its task, which the
/// check below sees, or will find its key gone. Its row is locked next, so
/// two deletes (or a delete and an update) take turns.
pub(crate) async fn delete(tx: &Transaction<'_>, name: &str) -> Result<(), StoreError> {
    crate::write_ops::lock_tenants(tx, &[name]).await?;
    let lock = tx
        .prepare_cached("SELECT 1 FROM tenants WHERE name = $1 FOR UPDATE")
        .await
        .map_err(db)?;
    if tx.query_opt(&lock, &[&name]).await.map_err(db)?.is_none() {
        return Err(StoreError::NotFound);
    }
    let any = tx
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM tasks WHERE tenant = $1 AND tenant <> '')")
        .await
        .map_err(db)?;
    let has_tasks: bool = tx
        .query_one(&any, &[&name])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)?;
    if has_tasks {
        return Err(StoreError::NotEmpty);
    }
    // Its keys go with it (`ON DELETE CASCADE`).
    let stmt = tx
        .prepare_cached("DELETE FROM tenants WHERE name = $1")
        .await
        .map_err(db)?;
    tx.execute(&stmt, &[&name]).await.map_err(db)?;
    Ok(())
}

/// Every tenant in name order with its counts and keys (`name`: only that
/// one), read in the caller's snapshot: three statements whatever the
/// number of tenants.
pub(crate) async fn details(
    client: &impl GenericClient,
    name: Option<&str>,
    sealer: &Sealer,
) -> Result<Vec<TenantDetail>, StoreError> {
    let tenants = client
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tenants WHERE $1::text IS NULL OR name = $1 ORDER BY name"
        ))
        .await
        .map_err(db)?;
    let counts = client
        .prepare_cached(
            "SELECT tenant, state, count(*) FROM queue \
             WHERE tenant <> '' \
               AND ($1::text IS NULL OR tenant = $1) \
             GROUP BY tenant, state",
        )
        .await
        .map_err(db)?;
    let keys = client
        .prepare_cached(
            "SELECT tenant, id, created_at, last_used_at FROM api_keys \
             WHERE $1::text IS NULL OR tenant = $1 ORDER BY tenant, created_at, id",
        )
        .await
        .map_err(db)?;
    let (tenants, counts, keys) = tokio::try_join!(
        async { client.query(&tenants, &[&name]).await.map_err(db) },
        async { client.query(&counts, &[&name]).await.map_err(db) },
        async { client.query(&keys, &[&name]).await.map_err(db) },
    )?;
    let mut tally: HashMap<String, (u64, u64)> = HashMap::new();
    for row in &counts {
        let state: String = row.try_get(1).map_err(db)?;
        let n: i64 = row.try_get(2).map_err(db)?;
        let entry = tally.entry(row.try_get(0).map_err(db)?).or_default();
        match state.as_str() {
            "pending" => entry.0 = n.unsigned_abs(),
            _ => entry.1 = n.unsigned_abs(),
        }
    }
    let mut by_tenant: HashMap<String, Vec<ApiKey>> = HashMap::new();
    for row in &keys {
        by_tenant
            .entry(row.try_get(0).map_err(db)?)
            .or_default()
            .push(ApiKey {
                id: row.try_get(1).map_err(db)?,
                created_at: Timestamp::from_millis(row.try_get(2).map_err(db)?),
                last_used_at: row
                    .try_get::<_, Option<i64>>(3)
                    .map_err(db)?
                    .map(Timestamp::from_millis),
            });
    }
    tenants
        .iter()
        .map(|row| {
            let tenant = tenant_of(row, 0, sealer)?;
            let (pending, running) = tally.get(&tenant.name).copied().unwrap_or_default();
            let keys = by_tenant.remove(&tenant.name).unwrap_or_default();
            Ok(TenantDetail {
                tenant,
                pending,
                running,
                keys,
            })
        })
        .collect()
}

/// Every tenant's settings by name: one plain read of the `tenants` table,
/// no count and no key (the worker reads it every second on every node).
pub(crate) async fn settings(
    client: &impl GenericClient,
    sealer: &Sealer,
) -> Result<BTreeMap<String, TenantSettings>, StoreError> {
    let statement = client
        .prepare_cached(&format!("SELECT {COLUMNS} FROM tenants"))
        .await
        .map_err(db)?;
    let rows = client.query(&statement, &[]).await.map_err(db)?;
    rows.iter()
        .map(|row| tenant_of(row, 0, sealer).map(|t| (t.name, t.settings)))
        .collect()
}

/// Stores a new key of `tenant`, or [`StoreError::NotFound`] without the
/// tenant; a key whose id or hash is taken already is [`StoreError::Exists`].
pub(crate) async fn create_key(
    client: &impl GenericClient,
    tenant: &str,
    id: &str,
    hash: &KeyHash,
    now: Timestamp,
) -> Result<ApiKey, StoreError> {
    let stmt = client
        .prepare_cached(
            "INSERT INTO api_keys (id, tenant, hash, created_at) \
             SELECT $1, name, $3, $4 FROM tenants WHERE name = $2 \
             ON CONFLICT DO NOTHING RETURNING id",
        )
        .await
        .map_err(db)?;
    let inserted = client
        .query_opt(&stmt, &[&id, &tenant, &hash.0.as_slice(), &now.as_millis()])
        .await
        .map_err(db)?;
    if inserted.is_some() {
        return Ok(ApiKey {
            id: id.to_owned(),
            created_at: now,
            last_used_at: None,
        });
    }
    // Nothing inserted: no such tenant, or the id or hash was taken.
    let exists = client
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM tenants WHERE name = $1)")
        .await
        .map_err(db)?;
    let found: bool = client
        .query_one(&exists, &[&tenant])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)?;
    Err(if found {
        StoreError::Exists
    } else {
        StoreError::NotFound
    })
}

/// Deletes the key `id` of `tenant`, or [`StoreError::NotFound`] when that
/// tenant has no such key. Under the tenant's lock
/// (`write_ops::lock_tenants`, held until the caller's transaction ends): a
/// write made with the key has committed before, or finds it gone.
pub(crate) async fn revoke_key(
    client: &impl GenericClient,
    tenant: &str,
    id: &str,
) -> Result<(), StoreError> {
    crate::write_ops::lock_tenants(client, &[tenant]).await?;
    let stmt = client
        .prepare_cached("DELETE FROM api_keys WHERE id = $1 AND tenant = $2")
        .await
        .map_err(db)?;
    match client.execute(&stmt, &[&id, &tenant]).await.map_err(db)? {
        0 => Err(StoreError::NotFound),
        _ => Ok(()),
    }
}

/// The key stored with `hash` and its tenant as stored now, in one
/// statement.
pub(crate) async fn key_owner(
    client: &impl GenericClient,
    hash: &KeyHash,
    sealer: &Sealer,
) -> Result<Option<KeyOwner>, StoreError> {
    let stmt = client
        .prepare_cached(&format!(
            "SELECT k.id, k.hash, {T_COLUMNS} FROM api_keys k \
             JOIN tenants t ON t.name = k.tenant WHERE k.hash = $1"
        ))
        .await
        .map_err(db)?;
    let Some(row) = client
        .query_opt(&stmt, &[&hash.0.as_slice()])
        .await
        .map_err(db)?
    else {
        return Ok(None);
    };
    let stored: Vec<u8> = row.try_get(1).map_err(db)?;
    let stored = <[u8; 32]>::try_from(stored.as_slice())
        .map_err(|_| StoreError::Unavailable("corrupt row in api_keys: bad hash".into()))?;
    Ok(Some(KeyOwner {
        key_id: row.try_get(0).map_err(db)?,
        hash: KeyHash(stored),
        tenant: tenant_of(&row, 2, sealer)?,
    }))
}

/// Records a use of the key `id` at `at`, never moving `last_used_at`
/// backwards (a guarded UPDATE: nodes writing in any order leave the
/// latest). An unknown key is no error: it may have been revoked since.
pub(crate) async fn touch_key(
    client: &impl GenericClient,
    id: &str,
    at: Timestamp,
) -> Result<(), StoreError> {
    let stmt = client
        .prepare_cached(
            "UPDATE api_keys SET last_used_at = $2 \
             WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)",
        )
        .await
        .map_err(db)?;
    client
        .execute(&stmt, &[&id, &at.as_millis()])
        .await
        .map_err(db)?;
    Ok(())
}
