//! Destinations on PostgreSQL: the settings table, the claim's rotation
//! over the destinations with due tasks, and the counts the API shows.
//!
//! A cap (`max_in_flight`) holds across nodes: a claim that may take tasks
//! of a capped destination first locks that destination's settings row
//! (all of them in name order, so two claims never wait on each other in a
//! cycle), then counts its running tasks, which every other claim of it has
//! committed by then.

use std::collections::HashMap;
use std::time::Duration;

use deadpool_postgres::{GenericClient, Transaction};
use tc_model::destination::{
    CLAIM_VISIT_LIMIT, ClaimGate, DESTINATIONS_LIMIT, Destination, DestinationSettings,
    DestinationUpdate, FairShare,
};
use tc_model::signing::SigningSecrets;
use tc_model::store::StoreError;
use tc_model::{Headers, Task, Timestamp};
use tokio_postgres::Row;

use crate::error::db;
use crate::ops;

const SETTINGS_COLUMNS: &str =
    "destination, max_in_flight, rate_per_s, burst, paused, headers, signing_secrets";

fn settings_from_row(row: &Row) -> Result<(String, DestinationSettings), StoreError> {
    let cap: Option<i32> = row.try_get(1).map_err(db)?;
    let burst: Option<i32> = row.try_get(3).map_err(db)?;
    let corrupt =
        |what: &str| StoreError::Unavailable(format!("corrupt row in destinations: bad {what}"));
    Ok((
        row.try_get(0).map_err(db)?,
        DestinationSettings {
            max_in_flight: cap.and_then(|c| u32::try_from(c).ok()),
            rate_per_s: row.try_get(2).map_err(db)?,
            burst: burst.and_then(|b| u32::try_from(b).ok()),
            paused: row.try_get(4).map_err(db)?,
            headers: Headers::from_stored(row.try_get(5).map_err(db)?)
                .map_err(|_| corrupt("headers"))?,
            signing_secrets: SigningSecrets::from_stored(row.try_get(6).map_err(db)?)
                .map_err(|_| corrupt("signing_secrets"))?,
        },
    ))
}

async fn settings_where(
    client: &impl GenericClient,
    condition: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
    let sql = format!("SELECT {SETTINGS_COLUMNS} FROM destinations WHERE {condition}");
    let stmt = client.prepare_cached(&sql).await.map_err(db)?;
    client
        .query(&stmt, params)
        .await
        .map_err(db)?
        .iter()
        .map(settings_from_row)
        .collect()
}

/// Every settings row.
pub(crate) async fn all_settings(
    client: &impl GenericClient,
) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
    settings_where(client, "true ORDER BY destination", &[]).await
}

/// The first destination with a pending task after `after` (from the start
/// with `None`), and its earliest due time compared with the clock: one
/// seek in `tasks_due_by_destination`.
async fn next_pending(
    tx: &Transaction<'_>,
    after: Option<&str>,
    now: Option<i64>,
) -> Result<Option<(String, bool)>, StoreError> {
    // Two statements, not `$1 IS NULL OR …`: a generic plan of that cannot
    // seek the index.
    let row = match after {
        Some(after) => {
            let stmt = tx
                .prepare_cached(
                    "SELECT destination, next_run_at <= tc_now_ms($2) FROM tasks \
                     WHERE state = 'pending' AND destination > $1 \
                     ORDER BY destination, next_run_at, pos LIMIT 1",
                )
                .await
                .map_err(db)?;
            tx.query_opt(&stmt, &[&after, &now]).await.map_err(db)?
        }
        None => {
            let stmt = tx
                .prepare_cached(
                    "SELECT destination, next_run_at <= tc_now_ms($1) FROM tasks \
                     WHERE state = 'pending' \
                     ORDER BY destination, next_run_at, pos LIMIT 1",
                )
                .await
                .map_err(db)?;
            tx.query_opt(&stmt, &[&now]).await.map_err(db)?
        }
    };
    match row {
        Some(row) => {
            let due: Option<bool> = row.try_get(1).map_err(db)?;
            Ok(Some((row.try_get(0).map_err(db)?, due.unwrap_or(false))))
        }
        None => Ok(None),
    }
}

/// The destinations with due tasks, in rotation order after `after`
/// (wrapping), visiting at most [`CLAIM_VISIT_LIMIT`] with pending tasks
/// and stopping once `enough` says so of one found.
async fn due_destinations(
    tx: &Transaction<'_>,
    after: Option<&str>,
    now: Option<i64>,
    mut enough: impl FnMut(&str) -> bool,
) -> Result<Vec<String>, StoreError> {
    let mut found = Vec::new();
    let mut cursor: Option<String> = after.map(str::to_owned);
    let mut wrapped = after.is_none();
    for _ in 0..CLAIM_VISIT_LIMIT {
        let (name, due) = match next_pending(tx, cursor.as_deref(), now).await? {
            Some((name, _)) if wrapped && after.is_some_and(|a| name.as_str() > a) => break,
            Some(next) => next,
            None if !wrapped => {
                wrapped = true;
                cursor = None;
                continue;
            }
            None => break,
        };
        cursor = Some(name.clone());
        if due {
            let stop = enough(&name);
            found.push(name);
            if stop {
                break;
            }
        }
    }
    Ok(found)
}

/// The claim: see the port's `claim_due`.
pub(crate) async fn claim_due(
    tx: &Transaction<'_>,
    n: usize,
    now: Option<i64>,
    lease: Duration,
    gate: &ClaimGate,
) -> Result<Vec<Task>, StoreError> {
    let limits: HashMap<String, DestinationSettings> =
        settings_where(tx, "paused OR max_in_flight IS NOT NULL", &[])
            .await?
            .into_iter()
            .collect();
    // A destination that may be allowed nothing must not count towards
    // "enough", or one at the front of the rotation would stop the claim
    // short of every other host: look one further for each destination
    // held by the gate, paused, or capped (whether a capped one is at its
    // cap is known only once its row is locked, below). Nor may one with
    // calls in flight on this node: a destination met later with none
    // would be served before it (FairShare), so look on until n without.
    let may_hold = gate.held.len() + limits.len();
    let mut idle = 0usize;
    let names = due_destinations(tx, gate.after.as_deref(), now, |name| {
        if gate.in_flight(name) == 0 {
            idle += 1;
        }
        idle >= n.saturating_add(may_hold)
    })
    .await?;
    let capped: Vec<&str> = names
        .iter()
        .filter(|name| {
            limits
                .get(*name)
                .is_some_and(|s| !s.paused && s.max_in_flight.is_some())
                && gate.allowance(name) != Some(0)
        })
        .map(String::as_str)
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
    let candidates = names
        .into_iter()
        .map(|name| {
            let busy = running.get(&name).copied().unwrap_or(0);
            let allowed = gate.claim_allowance(&name, limits.get(&name), busy);
            (name, allowed)
        })
        .collect();
    let mut plan = FairShare::new(n, candidates, &gate.in_flight);
    let mut claimed = Vec::with_capacity(n);
    while let Some((destination, want)) = plan.next_take() {
        let got = ops::claim_of(tx, &destination, want, now, lease).await?;
        plan.taken(got.len());
        claimed.extend(got);
    }
    Ok(claimed)
}

async fn counts_of(
    client: &impl GenericClient,
    names: &[String],
) -> Result<HashMap<String, (u64, u64)>, StoreError> {
    let stmt = client
        .prepare_cached(
            "SELECT destination, count(*) FILTER (WHERE state = 'pending'), \
                    count(*) FILTER (WHERE state = 'running') \
             FROM tasks WHERE state IN ('pending', 'running') AND destination = ANY($1) \
             GROUP BY destination",
        )
        .await
        .map_err(db)?;
    let mut counts = HashMap::new();
    for row in client.query(&stmt, &[&names]).await.map_err(db)? {
        let pending: i64 = row.try_get(1).map_err(db)?;
        let running: i64 = row.try_get(2).map_err(db)?;
        counts.insert(
            row.try_get(0).map_err(db)?,
            (pending.unsigned_abs(), running.unsigned_abs()),
        );
    }
    Ok(counts)
}

async fn describe(
    client: &impl GenericClient,
    names: Vec<String>,
    mut settings: HashMap<String, DestinationSettings>,
) -> Result<Vec<Destination>, StoreError> {
    let counts = counts_of(client, &names).await?;
    Ok(names
        .into_iter()
        .map(|name| {
            let (pending, running) = counts.get(&name).copied().unwrap_or((0, 0));
            Destination {
                settings: settings.remove(&name).unwrap_or_default(),
                name,
                pending,
                running,
            }
        })
        .collect())
}

/// Every destination with tasks or settings, in name order: the distinct
/// names by a recursive skip through `tasks_by_destination` (one seek
/// each), merged with the settings rows.
pub(crate) async fn destinations(
    client: &impl GenericClient,
) -> Result<Vec<Destination>, StoreError> {
    let stmt = client
        .prepare_cached(
            "WITH RECURSIVE walk(destination, n) AS ( \
                 (SELECT destination, 1 FROM tasks ORDER BY destination LIMIT 1) \
                 UNION ALL \
                 SELECT (SELECT t.destination FROM tasks t WHERE t.destination > w.destination \
                         ORDER BY t.destination LIMIT 1), w.n + 1 \
                 FROM walk w WHERE w.destination IS NOT NULL AND w.n < $1 \
             ) SELECT destination FROM walk WHERE destination IS NOT NULL",
        )
        .await
        .map_err(db)?;
    let limit = i32::try_from(DESTINATIONS_LIMIT).unwrap_or(i32::MAX);
    let mut names: Vec<String> = client
        .query(&stmt, &[&limit])
        .await
        .map_err(db)?
        .iter()
        .map(|row| row.try_get(0).map_err(db))
        .collect::<Result<_, _>>()?;
    let settings: HashMap<String, DestinationSettings> =
        all_settings(client).await?.into_iter().collect();
    names.extend(settings.keys().cloned());
    names.sort_unstable();
    names.dedup();
    names.truncate(DESTINATIONS_LIMIT);
    describe(client, names, settings).await
}

/// One destination, or `NotFound` with neither tasks nor settings.
pub(crate) async fn destination(
    client: &impl GenericClient,
    name: String,
) -> Result<Destination, StoreError> {
    let settings: HashMap<String, DestinationSettings> =
        settings_where(client, "destination = $1", &[&name])
            .await?
            .into_iter()
            .collect();
    if settings.is_empty() {
        let stmt = client
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM tasks WHERE destination = $1)")
            .await
            .map_err(db)?;
        let exists: bool = client
            .query_one(&stmt, &[&name])
            .await
            .map_err(db)?
            .try_get(0)
            .map_err(db)?;
        if !exists {
            return Err(StoreError::NotFound);
        }
    }
    let mut described = describe(client, vec![name], settings).await?;
    described.pop().ok_or(StoreError::NotFound)
}

/// Applies `update` to the settings of `name` in one transaction (the row
/// locked while read and written) and returns the destination.
pub(crate) async fn update(
    tx: &Transaction<'_>,
    name: String,
    update: &DestinationUpdate,
    now: Timestamp,
) -> Result<Destination, StoreError> {
    let current = settings_where(tx, "destination = $1 FOR UPDATE", &[&name])
        .await?
        .pop()
        .map(|(_, s)| s)
        .unwrap_or_default();
    let settings = update.apply(&current);
    let stmt = tx
        .prepare_cached(
            "INSERT INTO destinations (destination, max_in_flight, rate_per_s, burst, paused, \
                                       updated_at, headers, signing_secrets) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (destination) DO UPDATE SET max_in_flight = excluded.max_in_flight, \
                 rate_per_s = excluded.rate_per_s, burst = excluded.burst, \
                 paused = excluded.paused, updated_at = excluded.updated_at, \
                 headers = excluded.headers, signing_secrets = excluded.signing_secrets",
        )
        .await
        .map_err(db)?;
    let cap = settings.max_in_flight.and_then(|c| i32::try_from(c).ok());
    let burst = settings.burst.and_then(|b| i32::try_from(b).ok());
    tx.execute(
        &stmt,
        &[
            &name,
            &cap,
            &settings.rate_per_s,
            &burst,
            &settings.paused,
            &now.as_millis(),
            &settings.headers.to_stored(),
            &settings.signing_secrets.to_stored(),
        ],
    )
    .await
    .map_err(db)?;
    let mut described = describe(tx, vec![name.clone()], HashMap::from([(name, settings)])).await?;
    described.pop().ok_or(StoreError::NotFound)
}
