//! Auto-disable on PostgreSQL: a try's end recorded for
//! its subscription ([`tc_model::topic::Subscription::after_try`]) and,
//! when that disables it, the notice to its topic's `callback_url`
//! submitted and its pending tasks canceled, in one transaction.

use deadpool_postgres::Transaction;
use tc_model::store::StoreError;
use tc_model::topic::DISABLED_REASON;
use tc_model::topic::health::{HealthChange, disabled_notice};
use tc_model::{TaskId, Timestamp};
use tc_seal::Sealer;

use crate::error::db;
use crate::{topics, write_ops};
use tc_model::tenant::Scope;

/// [`tc_model::store::Topics::subscription_try_ended`]; `stamp` as the
/// store's other writes take it, `channel` the cancel channel.
pub(crate) async fn try_ended(
    tx: &Transaction<'_>,
    sealer: &Sealer,
    id: &str,
    ok: bool,
    stamp: (Timestamp, Option<i64>),
    channel: &str,
    callback_bytes: usize,
) -> Result<HealthChange, StoreError> {
    let now = stamp.0;
    // A transaction that inserts tasks must say so before its first write
    // (schema step 8's insert marker), and locking the row is one: a look
    // first, at a subscription already failing, decides whether it may.
    let peek = topics::by_id(tx, sealer, id, false).await?;
    let may_disable = !ok && peek.spec.enabled && peek.failing_since.is_some();
    if may_disable {
        write_ops::mark_inserting(tx).await?;
    }
    let mut sub = topics::by_id(tx, sealer, id, true).await?;
    let topic = topics::one(tx, &sub.topic).await?;
    let change = sub.after_try(ok, now, topic.spec.disable_after);
    if change == HealthChange::None {
        return Ok(change);
    }
    if change == HealthChange::Disabled {
        if !may_disable {
            // Set failing between the look and the lock: so lately that it
            // cannot be due; only a clock gone backwards gets here.
            return Err(StoreError::Unavailable(
                "a subscription's failing time changed while it was read".to_owned(),
            ));
        }
        if let Some(notice) = disabled_notice(&topic, &sub, now) {
            let tasks = [notice];
            let inserted = write_ops::submit_batch(tx, &tasks, now, stamp.1).await?;
            for answer in write_ops::answers(&tasks, inserted).0 {
                answer?;
            }
        }
    }
    topics::write_sub(tx, sealer, &sub).await?;
    if change == HealthChange::Disabled {
        let rows = tx
            .query(
                "SELECT id FROM tasks WHERE subscription = $1 AND state = 'pending' \
                 AND pos = ANY (ARRAY(SELECT pos FROM queue WHERE state = 'pending'))",
                &[&id],
            )
            .await
            .map_err(db)?;
        for row in rows {
            let bytes: Vec<u8> = row.try_get(0).map_err(db)?;
            let task = <[u8; 16]>::try_from(bytes.as_slice())
                .map(TaskId::from_bytes)
                .map_err(|_| StoreError::Unavailable("corrupt row in tasks: bad id".to_owned()))?;
            write_ops::cancel(tx, &task, &Scope::Admin, stamp, channel, callback_bytes).await?;
            tx.execute(
                "UPDATE tasks SET error = $2 WHERE id = $1",
                &[&task.as_bytes().as_slice(), &DISABLED_REASON],
            )
            .await
            .map_err(db)?;
        }
    }
    Ok(change)
}
