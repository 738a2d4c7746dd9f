//! Auto-disable on SQLite: a try's end recorded for its
//! subscription ([`tc_model::topic::Subscription::after_try`]) and, when
//! that disables it, its pending tasks canceled and the notice to its
//! topic's `callback_url` submitted, all in the writer's one command.

use rusqlite::{Connection, params};
use tc_model::store::StoreError;
use tc_model::topic::DISABLED_REASON;
use tc_model::topic::health::{HealthChange, disabled_notice};
use tc_model::{TaskId, Timestamp};
use tc_seal::Sealer;

use crate::rows::db;
use crate::topics;
use crate::write_ops::SubmitRow;

/// [`tc_model::store::Topics::subscription_try_ended`].
pub(crate) fn try_ended(
    conn: &Connection,
    sealer: &Sealer,
    id: &str,
    ok: bool,
    now: Timestamp,
    callback_bytes: usize,
) -> Result<HealthChange, StoreError> {
    let mut sub = topics::by_id(conn, sealer, id)?;
    let topic = topics::one(conn, &sub.topic)?;
    let change = sub.after_try(ok, now, topic.spec.disable_after);
    if change == HealthChange::None {
        return Ok(change);
    }
    topics::write_sub(conn, sealer, &sub)?;
    if change == HealthChange::Disabled {
        let pending: Vec<Vec<u8>> = conn
            .prepare_cached("SELECT id FROM tasks WHERE subscription = ?1 AND state = 'pending'")
            .map_err(db)?
            .query_map([id], |row| row.get(0))
            .map_err(db)?
            .collect::<rusqlite::Result<_>>()
            .map_err(db)?;
        for bytes in pending {
            let Ok(task) = <[u8; 16]>::try_from(bytes.as_slice()) else {
                return Err(StoreError::Unavailable(
                    "corrupt row in tasks: bad id".to_owned(),
                ));
            };
            let task = TaskId::from_bytes(task);
            crate::write_ops::cancel(
                conn,
                &task,
                &tc_model::tenant::Scope::Admin,
                now,
                callback_bytes,
            )?;
            conn.prepare_cached("UPDATE tasks SET error = ?2 WHERE id = ?1")
                .map_err(db)?
                .execute(params![task.as_bytes(), DISABLED_REASON])
                .map_err(db)?;
        }
        if let Some(notice) = disabled_notice(&topic, &sub, now) {
            let tasks = [notice];
            let rows: Vec<SubmitRow> = tasks.iter().map(SubmitRow::of).collect();
            for made in crate::batch_submit::submit_all(conn, &tasks, &rows, now)? {
                made?;
            }
        }
    }
    Ok(change)
}
