//! Destinations on PostgreSQL: the settings table, the claim's walk over
//! the destinations with due tasks (schema step 11; the claim itself is
//! write_ops.rs's `claim`, as on SQLite), and the counts the API shows
//! (from the count totals and deltas of step 9).
//!
//! A cap (`max_in_flight`) holds across nodes: a claim that may take tasks
//! of a capped destination first locks that destination's settings row
//! (all of them in name order, so two claims never wait on each other in a
//! cycle), then counts its running tasks, which every other claim of it has
//! committed by then.

use std::collections::HashMap;

use deadpool_postgres::{GenericClient, Transaction};
use tc_model::auth::DestinationAuth;
use tc_model::claim::Rotation;
use tc_model::destination::{
    DESTINATIONS_LIMIT, Destination, DestinationSettings, DestinationUpdate, SharedWith,
};
use tc_model::signing::SigningSecrets;
use tc_model::store::StoreError;
use tc_model::{Headers, Timestamp};
use tokio_postgres::Row;

use crate::error::db;
use crate::secrets;
use tc_seal::Sealer;

const SETTINGS_COLUMNS: &str = "destination, max_in_flight, rate_per_s, burst, paused, headers, \
     signing_secrets, share_with_tenants, auth, client_cert, client_key, ca_certs";

fn settings_from_row(
    row: &Row,
    sealer: &Sealer,
) -> Result<(String, DestinationSettings), StoreError> {
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
            headers: Headers::from_stored(
                secrets::open(sealer, row.try_get(5).map_err(db)?)?.as_deref(),
            )
            .map_err(|_| corrupt("headers"))?,
            signing_secrets: SigningSecrets::from_stored(
                secrets::open(sealer, row.try_get(6).map_err(db)?)?.as_deref(),
            )
            .map_err(|_| corrupt("signing_secrets"))?,
            share_with_tenants: SharedWith::from_stored(row.try_get(7).map_err(db)?)
                .map_err(|_| corrupt("share_with_tenants"))?,
            auth: DestinationAuth::from_stored(
                secrets::open(sealer, row.try_get(8).map_err(db)?)?.as_deref(),
            )
            .map_err(|_| corrupt("auth"))?,
            client_tls: tc_model::client_tls::client_tls_from_stored(
                row.try_get(9).map_err(db)?,
                secrets::open(sealer, row.try_get(10).map_err(db)?)?,
            )
            .map_err(|_| corrupt("client_cert"))?,
            ca_certs: row.try_get(11).map_err(db)?,
        },
    ))
}

pub(crate) async fn settings_where(
    client: &impl GenericClient,
    condition: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    sealer: &Sealer,
) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
    let sql = format!("SELECT {SETTINGS_COLUMNS} FROM destinations WHERE {condition}");
    let stmt = client.prepare_cached(&sql).await.map_err(db)?;
    client
        .query(&stmt, params)
        .await
        .map_err(db)?
        .iter()
        .map(|row| settings_from_row(row, sealer))
        .collect()
}

/// The settings a claim must apply itself, by name: the limits alone (a
/// claim never reads, nor opens, a secret) of the destinations whose
/// settings limit claims ([`DestinationSettings::limits_claims`], the rule
/// in tc-model; the rows without a limit are read and dropped here).
pub(crate) async fn claim_limits(
    tx: &Transaction<'_>,
) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
    let stmt = tx
        .prepare_cached("SELECT destination, max_in_flight, paused FROM destinations")
        .await
        .map_err(db)?;
    tx.query(&stmt, &[])
        .await
        .map_err(db)?
        .iter()
        .map(|row| {
            let cap: Option<i32> = row.try_get(1).map_err(db)?;
            let settings = DestinationSettings {
                max_in_flight: cap.and_then(|c| u32::try_from(c).ok()),
                paused: row.try_get(2).map_err(db)?,
                ..DestinationSettings::default()
            };
            Ok((row.try_get(0).map_err(db)?, settings))
        })
        .filter(|row| {
            row.as_ref()
                .map_or(true, |(_, settings): &(String, DestinationSettings)| {
                    settings.limits_claims()
                })
        })
        .collect()
}

/// Every settings row.
pub(crate) async fn all_settings(
    client: &impl GenericClient,
    sealer: &Sealer,
) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
    settings_where(client, "true ORDER BY destination", &[], sealer).await
}

/// The advisory lock's first key for folding due marks ("TCdw"); the
/// second is the schema's name hashed.
const FOLD_MARKS_KEY: i32 = 0x5443_6477;

/// The most marks one claim folds.
const FOLD_MARKS_LIMIT: i64 = 10_000;

/// How many ready destinations one read of the walk fetches.
const WALK_PAGE: i64 = 64;

/// Folds the due marks appended so far into `pending_destinations`
/// (schema step 11), unless another claim is folding now (a ready row, or
/// one whose time is already as early, is left unwritten); then marks
/// ready the destinations whose earliest due time came, skipping rows
/// another claim holds.
pub(crate) async fn fold_and_promote(
    tx: &Transaction<'_>,
    now: Option<i64>,
) -> Result<(), StoreError> {
    let fold = tx
        .prepare_cached(
            "WITH ours AS ( \
                 SELECT pg_try_advisory_xact_lock($1, hashtext(current_schema())) AS ours \
             ), gone AS ( \
                 DELETE FROM due_marks \
                 WHERE (SELECT ours FROM ours) \
                   AND ctid = ANY (ARRAY(SELECT ctid FROM due_marks LIMIT $2)) \
                 RETURNING destination, due_at \
             ) \
             INSERT INTO pending_destinations AS p (destination, next_due) \
             SELECT destination, min(due_at) FROM gone GROUP BY destination ORDER BY destination \
             ON CONFLICT (destination) DO UPDATE SET next_due = excluded.next_due \
                 WHERE NOT p.ready AND excluded.next_due < p.next_due",
        )
        .await
        .map_err(db)?;
    let promote = tx
        .prepare_cached(
            "UPDATE pending_destinations SET ready = true \
             WHERE destination IN ( \
                 SELECT destination FROM pending_destinations \
                 WHERE NOT ready AND next_due <= tc_now_ms($1) \
                 FOR UPDATE SKIP LOCKED)",
        )
        .await
        .map_err(db)?;
    // Sent together, run in order: the promotion sees what the fold wrote.
    let (fold_params, promote_params) =
        ([&FOLD_MARKS_KEY as _, &FOLD_MARKS_LIMIT as _], [&now as _]);
    tokio::try_join!(
        tx.execute(&fold, &fold_params),
        tx.execute(&promote, &promote_params),
    )
    .map_err(db)?;
    Ok(())
}

/// Up to [`WALK_PAGE`] ready destinations after `after` (from the start
/// with `None`), in name order.
async fn ready_after(tx: &Transaction<'_>, after: Option<&str>) -> Result<Vec<String>, StoreError> {
    // Two statements, not `$1 IS NULL OR …`: a generic plan of that cannot
    // seek the index.
    let rows = match after {
        Some(after) => {
            let stmt = tx
                .prepare_cached(
                    "SELECT destination FROM pending_destinations \
                     WHERE ready AND destination > $1 ORDER BY destination LIMIT $2",
                )
                .await
                .map_err(db)?;
            tx.query(&stmt, &[&after, &WALK_PAGE]).await.map_err(db)?
        }
        None => {
            let stmt = tx
                .prepare_cached(
                    "SELECT destination FROM pending_destinations \
                     WHERE ready ORDER BY destination LIMIT $1",
                )
                .await
                .map_err(db)?;
            tx.query(&stmt, &[&WALK_PAGE]).await.map_err(db)?
        }
    };
    rows.iter().map(|row| row.try_get(0).map_err(db)).collect()
}

/// Walks the ready destinations in rotation order after `after`
/// (wrapping around), calling `visit` on each until it says enough.
pub(crate) async fn walk_ready(
    tx: &Transaction<'_>,
    after: Option<&str>,
    mut visit: impl FnMut(&str) -> bool,
) -> Result<(), StoreError> {
    let mut rotation = Rotation::new(after);
    while !rotation.is_done() {
        let page = ready_after(tx, rotation.page_start()).await?;
        let full = page.len() == usize::try_from(WALK_PAGE).unwrap_or(usize::MAX);
        rotation.feed(page, full, &mut visit);
    }
    Ok(())
}

/// [`settle`]'s reset of the destinations that `$held` (a test of
/// `destination` against `$1`) names, `$2` the caller's now.
macro_rules! settle_sql {
    ($held:literal) => {
        concat!(
            "WITH held AS ( \
                 SELECT destination FROM pending_destinations WHERE ",
            $held,
            " ORDER BY destination FOR UPDATE SKIP LOCKED \
             ), due AS ( \
                 SELECT h.destination, \
                        (SELECT t.next_run_at FROM queue t \
                         WHERE t.state = 'pending' AND t.destination = h.destination \
                         ORDER BY t.next_run_at LIMIT 1) AS at \
                 FROM held h \
             ), gone AS ( \
                 DELETE FROM pending_destinations p USING due \
                 WHERE p.destination = due.destination AND due.at IS NULL \
             ) \
             UPDATE pending_destinations p \
             SET next_due = due.at, ready = p.ready AND due.at <= tc_now_ms($2) \
             FROM due WHERE p.destination = due.destination AND due.at IS NOT NULL \
               AND CASE WHEN p.ready THEN due.at > tc_now_ms($2) \
                        ELSE due.at <> p.next_due END"
        )
    };
}

/// [`settle`]'s reset of one destination, `$1`.
pub(crate) const SETTLE_ONE: &str = settle_sql!("destination = $1");

/// [`settle`]'s reset of the destinations in the array `$1`.
pub(crate) const SETTLE_MANY: &str = settle_sql!("destination = ANY($1)");

/// Sets again the earliest due time of each of `names` from its pending
/// tasks (in name order; rows another claim holds are skipped, that claim
/// sets them): a destination left with none goes, one whose time has not
/// come leaves the ready set. A row that stays ready, or whose time did
/// not move, is not written: a ready row's `next_due` is read by nothing
/// (the fold leaves it too), and each new version of a row whose indexed
/// `next_due` changed wrote two index entries, on most claims. Then
/// answers the earliest due time of a destination not ready (or of a mark
/// not folded yet) and the store's clock, for
/// [`tc_model::claim::Claim::resume_after`].
pub(crate) async fn settle(
    tx: &Transaction<'_>,
    names: &[String],
    now: Option<i64>,
) -> Result<(Option<i64>, i64), StoreError> {
    // One destination (most claims) has a statement of its own, whose
    // plan does not depend on its arguments, so the connection keeps one
    // generic plan; with an array of names PostgreSQL planned the
    // statement anew on every call (a custom plan for the array's length),
    // which cost more than running it.
    let (sql, one) = match names {
        [one] => (SETTLE_ONE, Some(one)),
        _ => (SETTLE_MANY, None),
    };
    let reset = tx.prepare_cached(sql).await.map_err(db)?;
    let earliest = tx
        .prepare_cached(
            "SELECT least( \
                 (SELECT min(next_due) FROM pending_destinations WHERE NOT ready), \
                 (SELECT min(due_at) FROM due_marks)), \
                 tc_now_ms($1)",
        )
        .await
        .map_err(db)?;
    // Sent together, run in order: the earliest due time sees the reset.
    let reset = async {
        if names.is_empty() {
            return Ok(0);
        }
        match one {
            Some(name) => tx.execute(&reset, &[name, &now]).await,
            None => tx.execute(&reset, &[&names, &now]).await,
        }
    };
    let now_param: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&now];
    let (_, row) = tokio::try_join!(reset, tx.query_one(&earliest, &now_param)).map_err(db)?;
    Ok((row.try_get(0).map_err(db)?, row.try_get(1).map_err(db)?))
}

/// The pending and running counts of `names`: their folded totals plus
/// the deltas not folded yet (schema step 9), in one snapshot, so a count
/// costs what changed, never the destinations' backlogs.
async fn counts_of(
    client: &impl GenericClient,
    names: &[String],
) -> Result<HashMap<String, (u64, u64)>, StoreError> {
    let stmt = client
        .prepare_cached(
            "SELECT destination, \
                    coalesce(sum(n) FILTER (WHERE state = 'pending'), 0)::bigint, \
                    coalesce(sum(n) FILTER (WHERE state = 'running'), 0)::bigint \
             FROM ( \
                 SELECT state, destination, n FROM task_count_totals \
                 WHERE destination = ANY($1) \
                 UNION ALL \
                 SELECT state, destination, n FROM task_count_deltas \
                 WHERE destination = ANY($1) \
             ) counted GROUP BY destination",
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
    sealer: &Sealer,
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
        all_settings(client, sealer).await?.into_iter().collect();
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
    sealer: &Sealer,
) -> Result<Destination, StoreError> {
    let settings: HashMap<String, DestinationSettings> =
        settings_where(client, "destination = $1", &[&name], sealer)
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
    sealer: &Sealer,
) -> Result<Destination, StoreError> {
    let current = settings_where(tx, "destination = $1 FOR UPDATE", &[&name], sealer)
        .await?
        .pop()
        .map(|(_, s)| s)
        .unwrap_or_default();
    let settings = update.apply(&current);
    let stmt = tx
        .prepare_cached(
            "INSERT INTO destinations (destination, max_in_flight, rate_per_s, burst, paused, \
                                       updated_at, headers, signing_secrets, \
                                       share_with_tenants, auth, client_cert, client_key, ca_certs) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             ON CONFLICT (destination) DO UPDATE SET max_in_flight = excluded.max_in_flight, \
                 rate_per_s = excluded.rate_per_s, burst = excluded.burst, \
                 paused = excluded.paused, updated_at = excluded.updated_at, \
                 headers = excluded.headers, signing_secrets = excluded.signing_secrets, \
                 share_with_tenants = excluded.share_with_tenants, auth = excluded.auth, \
                 client_cert = excluded.client_cert, client_key = excluded.client_key, \
                 ca_certs = excluded.ca_certs",
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
            &secrets::seal(sealer, settings.headers.to_stored())?,
            &secrets::seal(sealer, settings.signing_secrets.to_stored())?,
            &settings.share_with_tenants.to_stored(),
            &secrets::seal(
                sealer,
                settings.auth.as_ref().map(DestinationAuth::to_stored),
            )?,
            &settings.client_tls.as_ref().map(|t| t.cert.to_stored()),
            &secrets::seal(
                sealer,
                settings.client_tls.as_ref().map(|t| t.key.pem().to_owned()),
            )?,
            &settings.ca_certs,
        ],
    )
    .await
    .map_err(db)?;
    let mut described = describe(tx, vec![name.clone()], HashMap::from([(name, settings)])).await?;
    described.pop().ok_or(StoreError::NotFound)
}

/// The server's key called `name`, `candidate` inserted first when none is
/// stored: one statement, so nodes asking at once all read the one key
/// that won the insert.
pub(crate) async fn server_key(
    client: &impl GenericClient,
    sealer: &Sealer,
    name: &str,
    candidate: &str,
) -> Result<String, StoreError> {
    let candidate = secrets::seal(sealer, Some(candidate.to_owned()))?;
    let stmt = client
        .prepare_cached(
            "WITH put AS (INSERT INTO server_keys (name, value) VALUES ($1, $2) \
                          ON CONFLICT (name) DO NOTHING RETURNING value) \
             SELECT value FROM put UNION ALL SELECT value FROM server_keys WHERE name = $1",
        )
        .await
        .map_err(db)?;
    let row = client
        .query_one(&stmt, &[&name, &candidate])
        .await
        .map_err(db)?;
    let stored: String = row.try_get(0).map_err(db)?;
    secrets::open(sealer, Some(stored))?.ok_or(StoreError::NotFound)
}
