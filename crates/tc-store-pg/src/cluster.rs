//! Destination limits across the cluster, the rows of
//! `destination_tokens` and `destination_holds`: each call reads the rows
//! it needs under a lock, applies tc-model's rules
//! ([`tc_model::cluster`]) and writes the result back.
//!
//! Times are the database's (`tc_now_ms`) unless the store runs on the
//! caller's clock: a bucket refills by the database's clock, whichever
//! node asks, and a hold's end is stored as the database's time of the
//! same delay, and answered in the caller's time again.

use std::collections::BTreeMap;

use deadpool_postgres::{GenericClient, Transaction};
use tc_model::Timestamp;
use tc_model::cluster::{Bucket, DestinationHolds, TokenAsk, TokenGrant};
use tc_model::store::StoreError;

use crate::error::db;

/// The database's time now (the caller's, `caller`, when given).
pub(crate) async fn db_now(
    client: &impl GenericClient,
    caller: Option<i64>,
) -> Result<i64, StoreError> {
    let stmt = client
        .prepare_cached("SELECT tc_now_ms($1)")
        .await
        .map_err(db)?;
    client
        .query_one(&stmt, &[&caller])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)
}

/// Creates the buckets first met, full (their own statement, before the
/// transaction that locks them: rows inserted and then locked in one
/// transaction could deadlock with another node locking the same rows in
/// name order).
pub(crate) async fn create_buckets(
    client: &impl GenericClient,
    asks: &[TokenAsk],
    caller: Option<i64>,
) -> Result<(), StoreError> {
    let mut sizes: BTreeMap<&str, f64> = BTreeMap::new();
    for ask in asks {
        sizes.entry(&ask.destination).or_insert(ask.size.max(0.0));
    }
    let (names, sizes): (Vec<&str>, Vec<f64>) = sizes.into_iter().unzip();
    let stmt = client
        .prepare_cached(
            "INSERT INTO destination_tokens (destination, tokens, refilled_at) \
             SELECT d, s, tc_now_ms($3) FROM unnest($1::text[], $2::float8[]) AS u(d, s) \
             ON CONFLICT (destination) DO NOTHING",
        )
        .await
        .map_err(db)?;
    client
        .execute(&stmt, &[&names, &sizes, &caller])
        .await
        .map_err(db)?;
    Ok(())
}

/// Settles every ask against its bucket, the rows locked in name order.
pub(crate) async fn take_tokens(
    tx: &Transaction<'_>,
    asks: &[TokenAsk],
    caller: Option<i64>,
) -> Result<Vec<TokenGrant>, StoreError> {
    let now = Timestamp::from_millis(db_now(tx, caller).await?);
    let names: Vec<&str> = asks.iter().map(|a| a.destination.as_str()).collect();
    let stmt = tx
        .prepare_cached(
            "SELECT destination, tokens, refilled_at FROM destination_tokens \
             WHERE destination = ANY($1) ORDER BY destination FOR UPDATE",
        )
        .await
        .map_err(db)?;
    let mut buckets: BTreeMap<String, Bucket> = BTreeMap::new();
    for row in tx.query(&stmt, &[&names]).await.map_err(db)? {
        let name: String = row.try_get(0).map_err(db)?;
        let tokens: f64 = row.try_get(1).map_err(db)?;
        let at: i64 = row.try_get(2).map_err(db)?;
        let at = Timestamp::from_millis(at);
        buckets.insert(name, Bucket { tokens, at });
    }
    let grants = asks
        .iter()
        .map(|ask| {
            let bucket = buckets
                .get(&ask.destination)
                .copied()
                .unwrap_or_else(|| Bucket::full(ask.size, now));
            let (bucket, grant) = bucket.settle(ask, now);
            buckets.insert(ask.destination.clone(), bucket);
            grant
        })
        .collect();
    let mut names = Vec::with_capacity(buckets.len());
    let mut tokens = Vec::with_capacity(buckets.len());
    let mut at = Vec::with_capacity(buckets.len());
    for (name, bucket) in buckets {
        names.push(name);
        tokens.push(bucket.tokens);
        at.push(bucket.at.as_millis());
    }
    let stmt = tx
        .prepare_cached(
            "UPDATE destination_tokens t SET tokens = u.tokens, refilled_at = u.at \
             FROM unnest($1::text[], $2::float8[], $3::bigint[]) AS u(d, tokens, at) \
             WHERE t.destination = u.d",
        )
        .await
        .map_err(db)?;
    tx.execute(&stmt, &[&names, &tokens, &at])
        .await
        .map_err(db)?;
    Ok(grants)
}

/// Moves a time between the caller's clock and the database's.
#[derive(Clone, Copy)]
struct Clocks {
    /// The database's time less the caller's, in ms.
    skew: i64,
}

impl Clocks {
    fn db_time(self, t: Option<Timestamp>) -> Option<i64> {
        t.map(|t| t.as_millis().saturating_add(self.skew))
    }

    fn caller_time(self, t: Option<i64>) -> Option<Timestamp> {
        t.map(|t| Timestamp::from_millis(t.saturating_sub(self.skew)))
    }
}

fn holds_of(row: &tokio_postgres::Row, clocks: Clocks) -> Result<DestinationHolds, StoreError> {
    Ok(DestinationHolds {
        breaker_open_until: clocks.caller_time(row.try_get(1).map_err(db)?),
        backoff_until: clocks.caller_time(row.try_get(2).map_err(db)?),
        ratelimit_until: clocks.caller_time(row.try_get(3).map_err(db)?),
    })
}

/// Creates the hold rows first met, empty (before the transaction that
/// locks them, as [`create_buckets`]).
pub(crate) async fn create_holds(
    client: &impl GenericClient,
    learned: &[(String, DestinationHolds)],
) -> Result<(), StoreError> {
    let mut names: Vec<&str> = learned.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let stmt = client
        .prepare_cached(
            "INSERT INTO destination_holds (destination) SELECT unnest($1::text[]) \
             ON CONFLICT (destination) DO NOTHING",
        )
        .await
        .map_err(db)?;
    client.execute(&stmt, &[&names]).await.map_err(db)?;
    Ok(())
}

/// Merges `learned` into the rows (locked in name order), deletes the
/// ones whose holds all ended, and answers the current ones.
pub(crate) async fn share_holds(
    tx: &Transaction<'_>,
    learned: Vec<(String, DestinationHolds)>,
    caller_now: Timestamp,
    caller: Option<i64>,
) -> Result<Vec<(String, DestinationHolds)>, StoreError> {
    let db_now = db_now(tx, caller).await?;
    let clocks = Clocks {
        skew: db_now.saturating_sub(caller_now.as_millis()),
    };
    let stmt = tx
        .prepare_cached(
            "SELECT destination, breaker_open_until, backoff_until, ratelimit_until \
             FROM destination_holds ORDER BY destination FOR UPDATE",
        )
        .await
        .map_err(db)?;
    let mut all: BTreeMap<String, DestinationHolds> = BTreeMap::new();
    for row in tx.query(&stmt, &[]).await.map_err(db)? {
        all.insert(row.try_get(0).map_err(db)?, holds_of(&row, clocks)?);
    }
    let mut changed: BTreeMap<String, DestinationHolds> = BTreeMap::new();
    for (name, holds) in learned {
        let merged = all.get(&name).copied().unwrap_or_default().merge(holds);
        all.insert(name.clone(), merged);
        changed.insert(name, merged);
    }
    let ended: Vec<&str> = all
        .iter()
        .filter(|(_, h)| h.current(caller_now).is_none())
        .map(|(n, _)| n.as_str())
        .collect();
    write_holds(tx, &changed, clocks).await?;
    let stmt = tx
        .prepare_cached("DELETE FROM destination_holds WHERE destination = ANY($1)")
        .await
        .map_err(db)?;
    tx.execute(&stmt, &[&ended]).await.map_err(db)?;
    Ok(all
        .into_iter()
        .filter_map(|(name, h)| Some((name, h.current(caller_now)?)))
        .collect())
}

async fn write_holds(
    tx: &Transaction<'_>,
    changed: &BTreeMap<String, DestinationHolds>,
    clocks: Clocks,
) -> Result<(), StoreError> {
    if changed.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = changed.keys().map(String::as_str).collect();
    let column = |f: fn(&DestinationHolds) -> Option<Timestamp>| -> Vec<Option<i64>> {
        changed.values().map(|h| clocks.db_time(f(h))).collect()
    };
    let breaker = column(|h| h.breaker_open_until);
    let backoff = column(|h| h.backoff_until);
    let ratelimit = column(|h| h.ratelimit_until);
    let stmt = tx
        .prepare_cached(
            "UPDATE destination_holds h SET breaker_open_until = u.b, backoff_until = u.o, \
                 ratelimit_until = u.r \
             FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(d, b, o, r) \
             WHERE h.destination = u.d",
        )
        .await
        .map_err(db)?;
    tx.execute(&stmt, &[&names, &breaker, &backoff, &ratelimit])
        .await
        .map_err(db)?;
    Ok(())
}

/// Every destination's current holds, read without a lock.
pub(crate) async fn read_holds(
    client: &impl GenericClient,
    caller_now: Timestamp,
    caller: Option<i64>,
) -> Result<Vec<(String, DestinationHolds)>, StoreError> {
    let stmt = client
        .prepare_cached(
            "SELECT destination, breaker_open_until, backoff_until, ratelimit_until, \
                    tc_now_ms($1) FROM destination_holds ORDER BY destination",
        )
        .await
        .map_err(db)?;
    let mut current = Vec::new();
    for row in client.query(&stmt, &[&caller]).await.map_err(db)? {
        let db_now: i64 = row.try_get(4).map_err(db)?;
        let clocks = Clocks {
            skew: db_now.saturating_sub(caller_now.as_millis()),
        };
        if let Some(h) = holds_of(&row, clocks)?.current(caller_now) {
            current.push((row.try_get(0).map_err(db)?, h));
        }
    }
    Ok(current)
}
