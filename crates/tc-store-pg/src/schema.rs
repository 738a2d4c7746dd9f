//! The one place the PostgreSQL layout is written down, and how a schema is
//! judged and brought to it.
//!
//! The layout is the list [`MIGRATIONS`]: step `k` takes a schema from
//! version `k` to `k + 1`, recorded in the table `taskcenter_schema`. A
//! node migrates under a session advisory lock, so two nodes starting
//! together migrate once: the second waits for the first, then finds the
//! schema current. Each step is one transaction; a step that must fill a
//! column for every existing row does it in a [`Backfill`] after that
//! transaction, batch by batch, so nodes still on the previous version keep
//! serving. A change to the layout is a new step at the end, never an edit
//! of an old one's result.

use crate::error::OpenError;

/// The name the version table records, so that a table that merely happens
/// to be called `taskcenter_schema` is told apart from ours.
pub(crate) const APPLICATION: &str = "taskcenter";

/// The advisory lock's first key ("TCst", as SQLite's application_id); the
/// second is the schema's name hashed, so schemas migrate independently.
const LOCK_KEY: i32 = 0x5443_7374;

mod steps_from_v14;
mod steps_upto_v13;

use steps_from_v14::*;
use steps_upto_v13::*;

/// One migration step.
pub(crate) struct Step {
    /// Run in one transaction with the version's change. Its time must not
    /// grow with the number of tasks while it holds a lock that readers or
    /// writers wait for: no rewrite of every row (see `backfill`).
    schema: &'static str,
    /// Rows the step fills in after `schema` committed, in batches.
    backfill: Option<Backfill>,
}

/// Rows a step fills in, in batches, each its own short transaction, so
/// nodes that still run the previous version keep serving; the progress is
/// recorded with each batch (`taskcenter_schema.backfill_after`), so a node
/// that stops in the middle is continued by the next one that opens.
pub(crate) struct Backfill {
    /// The last position the batches must reach, read when they start (or
    /// resume): every row the step's DDL found is at or below it, and rows
    /// inserted since are written whole (the step sees to that, e.g. with
    /// a trigger), so the batches end even while nodes keep inserting.
    until: &'static str,
    /// One batch: fills at most `$2` rows after position `$1` up to `$3`
    /// and answers the last position it covered, NULL when none was left.
    batch: &'static str,
    /// Once every batch is done, in one transaction (an index over the
    /// column just filled, built once rather than updated row by row).
    finish: &'static str,
}

const fn step(schema: &'static str) -> Step {
    Step {
        schema,
        backfill: None,
    }
}

/// Every step, in order: `MIGRATIONS[k]` takes version k to k + 1.
pub(crate) const MIGRATIONS: &[Step] = &[
    step(V1_TABLES),
    step(V2_SCHEDULE),
    step(V3_POSITIONS_IN_XACT),
    step(V4_FILTER_INDEXES),
    Step {
        schema: V5_DESTINATION,
        backfill: Some(V5_FILL_DESTINATION),
    },
    step(V6_DESTINATIONS),
    step(V7_OUTBOUND),
    step(V8_INSERT_MARKER),
    step(V9_COUNT_DELTAS),
    step(V10_TRACE_CONTEXT),
    step(V11_PENDING_DESTINATIONS),
    step(V12_CALLBACKS),
    step(V13_SCHEDULES),
    step(V14_TENANTS),
    step(V15_TENANT_SECRETS),
    step(V16_SCHEDULE_ERRORS),
    step(V17_AUTH),
    step(V18_CLIENT_TLS),
    step(V19_HOT_PATH),
    step(V20_TOPICS),
    step(V21_CLUSTER_FLOW),
    step(V22_PRIORITY),
    step(V23_FLOW_KEYS),
    step(V24_COUNTED_WRITES),
    step(V25_QUEUE),
    step(V26_DUE_UNKEYED),
    step(V27_ATTEMPTS_BY_TASK),
    step(V28_TASKS_ROOM),
];

/// The version this build writes and reads.
pub(crate) const CURRENT_VERSION: i32 = MIGRATIONS.len() as i32;

/// How many rows one backfill batch fills.
const BACKFILL_BATCH: i64 = 5_000;

/// What a schema is, judged without writing to it.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// No tables: ours to set up.
    Empty,
    /// Ours, at this version; with the position a backfill of that
    /// version's step goes on after, when it is unfinished.
    Ours {
        version: i32,
        backfill_after: Option<i64>,
    },
}

/// Brings the connection's schema (its `current_schema()`) to
/// [`CURRENT_VERSION`], or refuses a foreign or newer one untouched.
///
/// Runs on a connection of its own, which holds a session advisory lock
/// for the whole migration: a second node starting now waits, then finds
/// the schema current. Each step is one transaction that also records its
/// version; a step's backfill follows it in batches. Nodes still on the
/// previous version keep serving meanwhile (nothing holds a table lock
/// for longer than a step's DDL or one batch).
pub(crate) async fn migrate(
    pg: &tokio_postgres::Config,
    tls: &crate::tls::Tls,
    target: &str,
    steps: &[Step],
) -> Result<(), OpenError> {
    let (mut client, connection) =
        pg.connect(tls.clone())
            .await
            .map_err(|e| OpenError::Postgres {
                target: target.to_owned(),
                message: format!("connect: {}", crate::error::describe(&e)),
            })?;
    let driver = tokio::spawn(connection);
    let migrated = migrate_on(&mut client, target, steps).await;
    // Closing the session releases the lock, on every path.
    drop(client);
    let _ = driver.await;
    migrated
}

async fn migrate_on(
    client: &mut tokio_postgres::Client,
    target: &str,
    steps: &[Step],
) -> Result<(), OpenError> {
    let fail = |doing: &'static str| {
        let target = target.to_owned();
        move |e: tokio_postgres::Error| OpenError::Postgres {
            target,
            message: format!("{doing}: {}", crate::error::describe(&e)),
        }
    };
    client
        .execute(
            "SELECT pg_advisory_lock($1, hashtext(current_schema()))",
            &[&LOCK_KEY],
        )
        .await
        .map_err(fail("take the migration lock"))?;
    let schema: String = client
        .query_one("SELECT current_schema()", &[])
        .await
        .map_err(fail("read current_schema"))?
        .get(0);
    let (from, mut backfill_after) = match inspect(client, target, &schema).await? {
        Found::Empty => (0, None),
        Found::Ours {
            version,
            backfill_after,
        } => (version, backfill_after),
    };
    let known = i32::try_from(steps.len()).unwrap_or(i32::MAX);
    let mut version = from;
    loop {
        if let Some(after) = backfill_after.take() {
            let at = usize::try_from(version - 1).unwrap_or(0);
            if let Some(backfill) = steps.get(at).and_then(|s| s.backfill.as_ref()) {
                run_backfill(client, target, version, backfill, after).await?;
            }
        }
        if version >= known {
            break;
        }
        let k = usize::try_from(version).unwrap_or(0);
        let step = &steps[k];
        version += 1;
        backfill_after = step.backfill.as_ref().map(|_| -1);
        apply_step(client, target, version, step, backfill_after).await?;
    }
    client
        .execute(
            "SELECT pg_advisory_unlock($1, hashtext(current_schema()))",
            &[&LOCK_KEY],
        )
        .await
        .map_err(fail("release the migration lock"))?;
    if version != from {
        tracing::info!(
            database = %target,
            schema = %schema,
            from,
            to = version,
            "store_schema_migrated"
        );
    }
    Ok(())
}

/// Runs one step in a transaction of its own, recording `version` (the
/// step's, after it) and where its backfill starts.
async fn apply_step(
    client: &mut tokio_postgres::Client,
    target: &str,
    version: i32,
    step: &Step,
    backfill_after: Option<i64>,
) -> Result<(), OpenError> {
    let mut tries = 1;
    loop {
        match try_step(client, version, step, backfill_after).await {
            Err((_, e)) if is_deadlock(&e) && tries < STEP_TRIES => {
                tries += 1;
                tokio::time::sleep(STEP_RETRY_PAUSE).await;
            }
            Err((doing, e)) => {
                return Err(OpenError::Postgres {
                    target: target.to_owned(),
                    message: format!("{doing}: {}", crate::error::describe(&e)),
                });
            }
            Ok(()) => return Ok(()),
        }
    }
}

/// How many times a step is tried when PostgreSQL ends it as a deadlock's
/// victim. A step takes its tables' locks while nodes of the previous
/// version keep writing them; a statement of theirs that locks the same
/// tables in another order (a completion whose cached plan locks `attempts`
/// before the `tasks` of its `WITH`) closes a cycle, and the server aborts
/// one side. The step's transaction then left nothing behind, and the other
/// side has gone on by the next try.
const STEP_TRIES: u32 = 5;

/// The pause before a step is tried again: the surviving side's
/// transaction is one statement of an old node's, long done by then.
const STEP_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

fn is_deadlock(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED)
}

/// One try of a step in one transaction; on failure, what it was doing.
async fn try_step(
    client: &mut tokio_postgres::Client,
    version: i32,
    step: &Step,
    backfill_after: Option<i64>,
) -> Result<(), (String, tokio_postgres::Error)> {
    let doing = |what: String| move |e| (what, e);
    let tx = client.transaction().await.map_err(doing("begin".into()))?;
    tx.batch_execute(step.schema).await.map_err(doing(format!(
        "migration step {} -> {version}",
        version - 1
    )))?;
    record(&tx, version, backfill_after)
        .await
        .map_err(doing("record the version".into()))?;
    tx.commit().await.map_err(doing("commit".into()))
}

/// Writes the version row (and the column for a backfill's progress, which
/// the first step's table lacks).
async fn record(
    tx: &tokio_postgres::Transaction<'_>,
    version: i32,
    backfill_after: Option<i64>,
) -> Result<(), tokio_postgres::Error> {
    tx.batch_execute(
        "ALTER TABLE taskcenter_schema ADD COLUMN IF NOT EXISTS backfill_after bigint; \
         DELETE FROM taskcenter_schema",
    )
    .await?;
    tx.execute(
        "INSERT INTO taskcenter_schema (application, version, backfill_after) \
         VALUES ($1, $2, $3)",
        &[&APPLICATION, &version, &backfill_after],
    )
    .await?;
    Ok(())
}

/// Runs the backfill of the step that took the schema to `version`, from
/// after position `after` to the end, one batch per transaction.
async fn run_backfill(
    client: &mut tokio_postgres::Client,
    target: &str,
    version: i32,
    backfill: &Backfill,
    mut after: i64,
) -> Result<(), OpenError> {
    let fail = |e: tokio_postgres::Error| OpenError::Postgres {
        target: target.to_owned(),
        message: format!(
            "backfill of migration step {} -> {version}: {}",
            version - 1,
            crate::error::describe(&e)
        ),
    };
    let until: Option<i64> = client
        .query_one(backfill.until, &[])
        .await
        .map_err(fail)?
        .try_get(0)
        .map_err(fail)?;
    let until = until.unwrap_or(after);
    let mut batches = 0u64;
    loop {
        let tx = client.transaction().await.map_err(fail)?;
        let last: Option<i64> = tx
            .query_one(backfill.batch, &[&after, &BACKFILL_BATCH, &until])
            .await
            .map_err(fail)?
            .try_get(0)
            .map_err(fail)?;
        match last {
            Some(last) => {
                tx.execute("UPDATE taskcenter_schema SET backfill_after = $1", &[&last])
                    .await
                    .map_err(fail)?;
                tx.commit().await.map_err(fail)?;
                after = last;
                batches += 1;
            }
            None => {
                tx.batch_execute(backfill.finish).await.map_err(fail)?;
                tx.execute("UPDATE taskcenter_schema SET backfill_after = NULL", &[])
                    .await
                    .map_err(fail)?;
                tx.commit().await.map_err(fail)?;
                tracing::info!(database = %target, version, batches, "store_schema_backfilled");
                return Ok(());
            }
        }
    }
}

/// Reads the version table and the table list of `schema`; writes nothing.
async fn inspect(
    client: &tokio_postgres::Client,
    target: &str,
    schema: &str,
) -> Result<Found, OpenError> {
    let fail = |e: tokio_postgres::Error| OpenError::Postgres {
        target: target.to_owned(),
        message: format!("read the schema: {}", crate::error::describe(&e)),
    };
    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = $1 ORDER BY table_name",
            &[&schema],
        )
        .await
        .map_err(fail)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if tables.is_empty() {
        return Ok(Found::Empty);
    }
    let foreign = |version: Option<i32>| OpenError::ForeignSchema {
        target: target.to_owned(),
        schema: schema.to_owned(),
        version,
        tables: tables
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
    };
    if !tables.iter().any(|t| t == "taskcenter_schema") {
        return Err(foreign(None));
    }
    // The progress column is read through the row's JSON: versions written
    // before it existed have none.
    let rows = client
        .query(
            "SELECT application, version, (to_jsonb(s) ->> 'backfill_after')::bigint \
             FROM taskcenter_schema s",
            &[],
        )
        .await
        .map_err(|_| foreign(None))?;
    let [row] = rows.as_slice() else {
        return Err(foreign(None));
    };
    let application: String = row.try_get(0).map_err(|_| foreign(None))?;
    let version: i32 = row.try_get(1).map_err(|_| foreign(None))?;
    if application != APPLICATION {
        return Err(foreign(Some(version)));
    }
    if version > CURRENT_VERSION {
        return Err(OpenError::NewerSchema {
            target: target.to_owned(),
            schema: schema.to_owned(),
            found: version,
            known: CURRENT_VERSION,
        });
    }
    Ok(Found::Ours {
        version,
        backfill_after: row.try_get(2).map_err(|_| foreign(Some(version)))?,
    })
}
