//! Destinations on SQLite: the settings table, the walk over the
//! destinations with pending tasks that a claim rotates over, and the
//! counts the API shows. Synchronous functions on a connection, like the
//! other operations.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, Row, params};
use tc_model::destination::{
    DESTINATIONS_LIMIT, Destination, DestinationSettings, DestinationUpdate,
};
use tc_model::signing::SigningSecrets;
use tc_model::store::StoreError;
use tc_model::{Headers, Timestamp};

use crate::rows::db;

/// The first destination with a pending task after `?1`, with its earliest
/// due time. Pinned to `tasks_due_by_destination` (like every hot query:
/// the planner might prefer `tasks_by_state` and sort), and a dropped index
/// becomes a loud error.
pub(crate) const NEXT_PENDING_AFTER: &str = "SELECT destination, next_run_at \
     FROM tasks INDEXED BY tasks_due_by_destination \
     WHERE state = 'pending' AND destination > ?1 \
     ORDER BY destination, next_run_at, seq LIMIT 1";

/// [`NEXT_PENDING_AFTER`] from the start.
pub(crate) const FIRST_PENDING: &str = "SELECT destination, next_run_at \
     FROM tasks INDEXED BY tasks_due_by_destination \
     WHERE state = 'pending' ORDER BY destination, next_run_at, seq LIMIT 1";

/// A destination's due tasks, oldest due first.
pub(crate) const DUE_OF: &str = "SELECT seq, state FROM tasks INDEXED BY tasks_due_by_destination \
     WHERE state = 'pending' AND destination = ?1 AND next_run_at <= ?2 \
     ORDER BY next_run_at, seq LIMIT ?3";

const SETTINGS_COLUMNS: &str =
    "destination, max_in_flight, rate_per_s, burst, paused, headers, signing_secrets";

fn settings_from_row(row: &Row<'_>) -> rusqlite::Result<(String, DestinationSettings)> {
    let cap: Option<i64> = row.get(1)?;
    let burst: Option<i64> = row.get(3)?;
    let corrupt = |column: usize, e: &dyn std::error::Error| {
        rusqlite::Error::FromSqlConversionFailure(
            column,
            rusqlite::types::Type::Text,
            e.to_string().into(),
        )
    };
    let headers: Option<String> = row.get(5)?;
    let secrets: Option<String> = row.get(6)?;
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
        },
    ))
}

/// Every settings row.
pub(crate) fn all_settings(
    conn: &Connection,
) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {SETTINGS_COLUMNS} FROM destinations ORDER BY destination"
    ))
    .map_err(db)?
    .query_map([], settings_from_row)
    .map_err(db)?
    .collect::<rusqlite::Result<_>>()
    .map_err(db)
}

/// The settings a claim must apply itself (paused, or capped), by name.
pub(crate) fn claim_limits(
    conn: &Connection,
) -> Result<HashMap<String, DestinationSettings>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {SETTINGS_COLUMNS} FROM destinations \
         WHERE paused != 0 OR max_in_flight IS NOT NULL"
    ))
    .map_err(db)?
    .query_map([], settings_from_row)
    .map_err(db)?
    .collect::<rusqlite::Result<_>>()
    .map_err(db)
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

/// The first destination with a pending task after `after` (from the start
/// with `None`), and its earliest due time: one seek in
/// `tasks_due_by_destination`.
fn next_pending_destination(
    conn: &Connection,
    after: Option<&str>,
) -> Result<Option<(String, Option<i64>)>, StoreError> {
    let row = |row: &Row<'_>| Ok((row.get(0)?, row.get(1)?));
    match after {
        Some(after) => conn
            .prepare_cached(NEXT_PENDING_AFTER)
            .map_err(db)?
            .query_row(params![after], row),
        None => conn
            .prepare_cached(FIRST_PENDING)
            .map_err(db)?
            .query_row([], row),
    }
    .optional()
    .map_err(db)
}

/// The destinations with due tasks, in rotation order after `after`
/// (wrapping), visiting at most `visits` destinations that have pending
/// tasks; stops early once `enough` returns true for what was found.
pub(crate) fn due_destinations(
    conn: &Connection,
    now: Timestamp,
    after: Option<&str>,
    visits: usize,
    mut enough: impl FnMut(&str) -> bool,
) -> Result<Vec<String>, StoreError> {
    let mut found = Vec::new();
    let mut cursor: Option<String> = after.map(str::to_owned);
    let mut wrapped = after.is_none();
    for _ in 0..visits {
        let next = next_pending_destination(conn, cursor.as_deref())?;
        let (name, first_due) = match next {
            // Past the start point on the second lap: every one was seen.
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
        if first_due.is_some_and(|at| at <= now.as_millis()) {
            let stop = enough(&name);
            found.push(name);
            if stop {
                break;
            }
        }
    }
    Ok(found)
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

fn settings_of(conn: &Connection, name: &str) -> Result<Option<DestinationSettings>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {SETTINGS_COLUMNS} FROM destinations WHERE destination = ?1"
    ))
    .map_err(db)?
    .query_row(params![name], settings_from_row)
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

fn counts_of(conn: &Connection, name: &str) -> Result<(u64, u64), StoreError> {
    let pending: i64 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM tasks INDEXED BY tasks_due_by_destination \
             WHERE state = 'pending' AND destination = ?1",
        )
        .map_err(db)?
        .query_row(params![name], |row| row.get(0))
        .map_err(db)?;
    let running: i64 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM tasks INDEXED BY tasks_leased \
             WHERE state = 'running' AND destination = ?1",
        )
        .map_err(db)?
        .query_row(params![name], |row| row.get(0))
        .map_err(db)?;
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
pub(crate) fn destination(conn: &Connection, name: &str) -> Result<Destination, StoreError> {
    let settings = settings_of(conn, name)?;
    if settings.is_none() && !has_tasks(conn, name)? {
        return Err(StoreError::NotFound);
    }
    described(conn, name, settings)
}

/// Every destination with tasks or settings, in name order: the distinct
/// names by skipping through `tasks_by_destination` (one seek each),
/// merged with the settings rows.
pub(crate) fn destinations(conn: &Connection) -> Result<Vec<Destination>, StoreError> {
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
        all_settings(conn)?.into_iter().collect();
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
) -> Result<Destination, StoreError> {
    let settings = update.apply(&settings_of(conn, name)?.unwrap_or_default());
    conn.prepare_cached(
        "INSERT INTO destinations (destination, max_in_flight, rate_per_s, burst, paused, updated_at, \
                                   headers, signing_secrets) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (destination) DO UPDATE SET max_in_flight = excluded.max_in_flight, \
             rate_per_s = excluded.rate_per_s, burst = excluded.burst, \
             paused = excluded.paused, updated_at = excluded.updated_at, \
             headers = excluded.headers, signing_secrets = excluded.signing_secrets",
    )
    .map_err(db)?
    .execute(params![
        name,
        settings.max_in_flight,
        settings.rate_per_s,
        settings.burst,
        i64::from(settings.paused),
        now.as_millis(),
        settings.headers.to_stored(),
        settings.signing_secrets.to_stored(),
    ])
    .map_err(db)?;
    described(conn, name, Some(settings))
}
