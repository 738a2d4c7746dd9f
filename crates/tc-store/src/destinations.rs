//! Destinations on SQLite: the settings table, the walk over the
//! destinations with due tasks that a claim rotates over, and the counts
//! the API shows (both from `destination_tasks`, kept by triggers; see
//! schema step 12). Synchronous functions on a connection, like the
//! other operations.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, Row, params};
use tc_model::auth::DestinationAuth;
use tc_model::claim::Rotation;
use tc_model::destination::{
    DESTINATIONS_LIMIT, Destination, DestinationSettings, DestinationUpdate, SharedWith,
};
use tc_model::signing::SigningSecrets;
use tc_model::store::StoreError;
use tc_model::{Headers, Timestamp};

use crate::rows::db;
use crate::secrets;
use tc_seal::Sealer;

/// Marks `ready` the destinations whose earliest due time came by `?1`:
/// through `destination_tasks_waiting`, so it meets only those.
pub(crate) const PROMOTE_DUE: &str = "UPDATE destination_tasks INDEXED BY destination_tasks_waiting \
     SET ready = 1 WHERE ready = 0 AND next_due <= ?1";

/// Up to `?2` ready destinations after `?1`, in name order.
pub(crate) const READY_AFTER: &str = "SELECT destination \
     FROM destination_tasks INDEXED BY destination_tasks_ready \
     WHERE ready = 1 AND destination > ?1 ORDER BY destination LIMIT ?2";

/// [`READY_AFTER`] from the start.
pub(crate) const READY_FIRST: &str = "SELECT destination \
     FROM destination_tasks INDEXED BY destination_tasks_ready \
     WHERE ready = 1 ORDER BY destination LIMIT ?1";

/// The earliest due time of a destination not ready: when a task that is
/// not due now will be.
pub(crate) const NEXT_WAITING: &str = "SELECT min(next_due) \
     FROM destination_tasks INDEXED BY destination_tasks_waiting \
     WHERE ready = 0 AND next_due IS NOT NULL";

/// A destination's due tasks, oldest due first.
pub(crate) const DUE_OF: &str = "SELECT seq, state FROM tasks INDEXED BY tasks_due_by_destination \
     WHERE state = 'pending' AND destination = ?1 AND next_run_at <= ?2 \
     ORDER BY next_run_at, seq LIMIT ?3";

const SETTINGS_COLUMNS: &str = "destination, max_in_flight, rate_per_s, burst, paused, headers, \
     signing_secrets, share_with_tenants, auth, client_cert, client_key, ca_certs";

fn settings_from_row(
    row: &Row<'_>,
    sealer: &Sealer,
) -> rusqlite::Result<(String, DestinationSettings)> {
    let cap: Option<i64> = row.get(1)?;
    let burst: Option<i64> = row.get(3)?;
    let corrupt = |column: usize, e: &dyn std::error::Error| {
        rusqlite::Error::FromSqlConversionFailure(
            column,
            rusqlite::types::Type::Text,
            e.to_string().into(),
        )
    };
    let opened = |column: usize| -> rusqlite::Result<Option<String>> {
        secrets::open(sealer, row.get(column)?).map_err(|e| corrupt(column, &e))
    };
    let headers = opened(5)?;
    let secrets = opened(6)?;
    let shared: Option<String> = row.get(7)?;
    let auth: Option<String> = opened(8)?;
    let cert: Option<String> = row.get(9)?;
    let client_tls = tc_model::client_tls::client_tls_from_stored(cert.as_deref(), opened(10)?)
        .map_err(|e| corrupt(9, &e))?;
    Ok((
        row.get(0)?,
        DestinationSettings {
            max_in_flight: cap.and_then(|c| u32::try_from(c).ok()),
            rate_per_s: row.get(2)?,
            burst: burst.and_then(|b| u32::try_from(b).ok()),
            paused: row.get::<_, i64>(4)? != 0,
            headers: Headers::from_stored(headers.as_deref()).map_err(|e| corrupt(5, &e))?,
            signing_secrets: SigningSecrets::from_stored(secrets.as_deref())
                .map_err(|e| corrupt(6, &e))?,
            share_with_tenants: SharedWith::from_stored(shared.as_deref())
                .map_err(|e| corrupt(7, &e))?,
            auth: DestinationAuth::from_stored(auth.as_deref()).map_err(|e| corrupt(8, &e))?,
            client_tls,
            ca_certs: row.get(11)?,
        },
    ))
}

/// Every settings row.
pub(crate) fn all_settings(
    conn: &Connection,
    sealer: &Sealer,
) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {SETTINGS_COLUMNS} FROM destinations ORDER BY destination"
    ))
    .map_err(db)?
    .query_map([], |row| settings_from_row(row, sealer))
    .map_err(db)?
    .collect::<rusqlite::Result<_>>()
    .map_err(db)
}

/// The settings a claim must apply itself, by name: the limits alone (a
/// claim never reads, nor opens, a secret) of the destinations whose
/// settings limit claims ([`DestinationSettings::limits_claims`], the rule
/// in tc-model; the rows without a limit are read and dropped here).
pub(crate) fn claim_limits(
    conn: &Connection,
) -> Result<HashMap<String, DestinationSettings>, StoreError> {
    let all: Vec<(String, DestinationSettings)> = conn
        .prepare_cached("SELECT destination, max_in_flight, paused FROM destinations")
        .map_err(db)?
        .query_map([], |row| {
            let cap: Option<i64> = row.get(1)?;
            let settings = DestinationSettings {
                max_in_flight: cap.and_then(|c| u32::try_from(c).ok()),
                paused: row.get::<_, i64>(2)? != 0,
                ..DestinationSettings::default()
            };
            Ok((row.get(0)?, settings))
        })
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    Ok(all
        .into_iter()
        .filter(|(_, settings)| settings.limits_claims())
        .collect())
}

/// Running tasks by destination: through the partial index of running
/// rows, so it costs what is in flight, not what is stored.
pub(crate) fn running_by_destination(
    conn: &Connection,
) -> Result<HashMap<String, u64>, StoreError> {
    conn.prepare_cached(
        "SELECT destination, COUNT(*) FROM tasks INDEXED BY tasks_leased \
         WHERE state = 'running' GROUP BY destination",
    )
    .map_err(db)?
    .query_map([], |row| {
        Ok((row.get(0)?, row.get::<_, i64>(1)?.unsigned_abs()))
    })
    .map_err(db)?
    .collect::<rusqlite::Result<_>>()
    .map_err(db)
}

/// How many ready destinations one read of the walk fetches.
const WALK_PAGE: i64 = 64;

/// Up to [`WALK_PAGE`] ready destinations after `after` (from the start
/// with `None`), in name order.
fn ready_after(conn: &Connection, after: Option<&str>) -> Result<Vec<String>, StoreError> {
    let name = |row: &Row<'_>| row.get(0);
    match after {
        Some(after) => conn
            .prepare_cached(READY_AFTER)
            .map_err(db)?
            .query_map(params![after, WALK_PAGE], name)
            .map_err(db)?
            .collect::<rusqlite::Result<_>>(),
        None => conn
            .prepare_cached(READY_FIRST)
            .map_err(db)?
            .query_map(params![WALK_PAGE], name)
            .map_err(db)?
            .collect::<rusqlite::Result<_>>(),
    }
    .map_err(db)
}

/// Walks the destinations with due tasks in rotation order after `after`
/// (wrapping around), calling `visit` on each until it says the walk has
/// enough: first the ones whose earliest due time came by `now` join the
/// ready set (a seek per destination that became due), then the ready set
/// is read in name order. Destinations whose tasks are all later are never
/// met, however many there are.
pub(crate) fn walk_due(
    conn: &Connection,
    now: Timestamp,
    after: Option<&str>,
    mut visit: impl FnMut(&str) -> bool,
) -> Result<(), StoreError> {
    conn.prepare_cached(PROMOTE_DUE)
        .map_err(db)?
        .execute(params![now.as_millis()])
        .map_err(db)?;
    let mut rotation = Rotation::new(after);
    while !rotation.is_done() {
        let page = ready_after(conn, rotation.page_start())?;
        let full = page.len() == usize::try_from(WALK_PAGE).unwrap_or(usize::MAX);
        rotation.feed(page, full, &mut visit);
    }
    Ok(())
}

/// When the earliest pending task that is not due at the last walk will
/// be due.
pub(crate) fn next_waiting(conn: &Connection) -> Result<Option<Timestamp>, StoreError> {
    conn.prepare_cached(NEXT_WAITING)
        .map_err(db)?
        .query_row([], |row| row.get::<_, Option<i64>>(0))
        .map_err(db)
        .map(|at| at.map(Timestamp::from_millis))
}

/// Up to `limit` due pending tasks of `destination`, oldest due first.
pub(crate) fn due_of(
    conn: &Connection,
    destination: &str,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<(i64, String)>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    conn.prepare_cached(DUE_OF)
        .map_err(db)?
        .query_map(params![destination, now.as_millis(), limit], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)
}

fn settings_of(
    conn: &Connection,
    name: &str,
    sealer: &Sealer,
) -> Result<Option<DestinationSettings>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {SETTINGS_COLUMNS} FROM destinations WHERE destination = ?1"
    ))
    .map_err(db)?
    .query_row(params![name], |row| settings_from_row(row, sealer))
    .optional()
    .map_err(db)
    .map(|found| found.map(|(_, s)| s))
}

fn has_tasks(conn: &Connection, name: &str) -> Result<bool, StoreError> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM tasks INDEXED BY tasks_by_destination WHERE destination = ?1)",
    )
    .map_err(db)?
    .query_row(params![name], |row| row.get(0))
    .map_err(db)
}

/// A destination's pending and running tasks: one row, whatever its backlog.
pub(crate) const COUNTS_OF: &str =
    "SELECT pending, running FROM destination_tasks WHERE destination = ?1";

/// A destination's pending and running tasks, from its row in
/// `destination_tasks` (none: no such tasks).
fn counts_of(conn: &Connection, name: &str) -> Result<(u64, u64), StoreError> {
    let counts: Option<(i64, i64)> = conn
        .prepare_cached(COUNTS_OF)
        .map_err(db)?
        .query_row(params![name], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
        .map_err(db)?;
    let (pending, running) = counts.unwrap_or((0, 0));
    Ok((pending.unsigned_abs(), running.unsigned_abs()))
}

fn described(
    conn: &Connection,
    name: &str,
    settings: Option<DestinationSettings>,
) -> Result<Destination, StoreError> {
    let (pending, running) = counts_of(conn, name)?;
    Ok(Destination {
        name: name.to_owned(),
        settings: settings.unwrap_or_default(),
        pending,
        running,
    })
}

/// One destination, or `NotFound` with neither tasks nor settings.
pub(crate) fn destination(
    conn: &Connection,
    name: &str,
    sealer: &Sealer,
) -> Result<Destination, StoreError> {
    let settings = settings_of(conn, name, sealer)?;
    if settings.is_none() && !has_tasks(conn, name)? {
        return Err(StoreError::NotFound);
    }
    described(conn, name, settings)
}

/// Every destination with tasks or settings, in name order: the distinct
/// names by skipping through `tasks_by_destination` (one seek each),
/// merged with the settings rows.
pub(crate) fn destinations(
    conn: &Connection,
    sealer: &Sealer,
) -> Result<Vec<Destination>, StoreError> {
    let mut names: Vec<String> = Vec::new();
    let mut next = conn
        .prepare_cached(
            "SELECT destination FROM tasks INDEXED BY tasks_by_destination \
             WHERE destination > ?1 ORDER BY destination LIMIT 1",
        )
        .map_err(db)?;
    let mut cursor = String::new();
    while names.len() < DESTINATIONS_LIMIT {
        let found: Option<String> = next
            .query_row(params![cursor], |row| row.get(0))
            .optional()
            .map_err(db)?;
        let Some(name) = found else { break };
        cursor.clone_from(&name);
        names.push(name);
    }
    let mut settings: HashMap<String, DestinationSettings> =
        all_settings(conn, sealer)?.into_iter().collect();
    names.extend(settings.keys().cloned());
    names.sort_unstable();
    names.dedup();
    names.truncate(DESTINATIONS_LIMIT);
    names
        .iter()
        .map(|name| described(conn, name, settings.remove(name)))
        .collect()
}

/// Applies `update` to the settings of `name` (a row is written even when
/// the result is the defaults: the operator named it) and returns it.
pub(crate) fn update(
    conn: &Connection,
    name: &str,
    update: &DestinationUpdate,
    now: Timestamp,
    sealer: &Sealer,
) -> Result<Destination, StoreError> {
    let settings = update.apply(&settings_of(conn, name, sealer)?.unwrap_or_default());
    conn.prepare_cached(
        "INSERT INTO destinations (destination, max_in_flight, rate_per_s, burst, paused, updated_at, \
                                   headers, signing_secrets, share_with_tenants, auth, \
                                   client_cert, client_key, ca_certs) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) \
         ON CONFLICT (destination) DO UPDATE SET max_in_flight = excluded.max_in_flight, \
             rate_per_s = excluded.rate_per_s, burst = excluded.burst, \
             paused = excluded.paused, updated_at = excluded.updated_at, \
             headers = excluded.headers, signing_secrets = excluded.signing_secrets, \
             share_with_tenants = excluded.share_with_tenants, auth = excluded.auth, \
             client_cert = excluded.client_cert, client_key = excluded.client_key, \
             ca_certs = excluded.ca_certs",
    )
    .map_err(db)?
    .execute(params![
        name,
        settings.max_in_flight,
        settings.rate_per_s,
        settings.burst,
        i64::from(settings.paused),
        now.as_millis(),
        secrets::seal(sealer, settings.headers.to_stored())?,
        secrets::seal(sealer, settings.signing_secrets.to_stored())?,
        settings.share_with_tenants.to_stored(),
        secrets::seal(sealer, settings.auth.as_ref().map(DestinationAuth::to_stored))?,
        settings.client_tls.as_ref().map(|t| t.cert.to_stored()),
        secrets::seal(
            sealer,
            settings.client_tls.as_ref().map(|t| t.key.pem().to_owned())
        )?,
        settings.ca_certs,
    ])
    .map_err(db)?;
    described(conn, name, Some(settings))
}

/// The server's key called `name`, `candidate` inserted first when none is
/// stored (the first writer's is kept); sealed at rest as every secret.
pub(crate) fn server_key(
    conn: &Connection,
    sealer: &Sealer,
    name: &str,
    candidate: &str,
) -> Result<String, StoreError> {
    let candidate = secrets::seal(sealer, Some(candidate.to_owned()))?;
    conn.prepare_cached(
        "INSERT INTO server_keys (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
    )
    .map_err(db)?
    .execute(params![name, candidate])
    .map_err(db)?;
    let stored: String = conn
        .prepare_cached("SELECT value FROM server_keys WHERE name = ?1")
        .map_err(db)?
        .query_row(params![name], |row| row.get(0))
        .map_err(db)?;
    secrets::open(sealer, Some(stored))?.ok_or(StoreError::NotFound)
}
