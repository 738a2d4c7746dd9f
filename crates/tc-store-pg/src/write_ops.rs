//! The store's writes as SQL, in the rooms SQLite's adapter uses: submit,
//! claim, heartbeat, cancel, retry, release, recovery, delete, prune and
//! bulk. Every write is one transaction (or one statement, which
//! PostgreSQL runs as one), and answers only after COMMIT returned.
//!
//! Times: `$1` of every statement that stamps a time is the caller's `now`
//! in [`crate::PgClock::Caller`] mode and NULL in database mode, read
//! through `tc_now_ms($1)` (schema.rs). Times the caller computed (a
//! retry's due time) arrive as delays from its `now`, so in database mode
//! they are added to the database's clock.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use deadpool_postgres::{Client, GenericClient, Transaction};
use tc_model::callback;
use tc_model::claim::ClaimWalk;
use tc_model::destination::{ClaimGate, DestinationSettings, FairShare};
use tc_model::store::{BulkAction, Guarded, LeaseLost, StoreError, Submitted, TaskFilter};
use tc_model::tenant::quota::{Admission, RetryQuota};
use tc_model::tenant::{Acting, TenantGate};
use tc_model::{NewTask, State, Task, TaskId, transit};

use crate::destinations::{claim_limits, fold_and_promote, settle, walk_ready};
use crate::error::db;
use crate::filter::FilterSql;
use crate::read_ops;
use crate::rows::{self, millis, nanos, parse_state, task_columns};

const CANCELED: &str = "canceled";
const INTERRUPTED: &str = "interrupted";

/// What a submit found.
pub(crate) enum Inserted {
    /// This call created the task.
    Created(Task),
    /// The key was taken by this task (payload not yet compared).
    Existing(Task),
    /// Refused: its tenant has this many tasks not yet terminal, its
    /// `max_pending` ([`admit`]).
    OverQuota(u64),
    /// Refused: the tenant's key it was made with is revoked ([`admit`]).
    CredentialGone,
}

/// Why [`admit`] refused an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its tenant's `max_pending`, reached.
    Quota(u64),
    /// Its key, revoked (or its tenant deleted).
    CredentialGone,
}

impl From<Refused> for Inserted {
    fn from(refused: Refused) -> Inserted {
        match refused {
            Refused::Quota(limit) => Inserted::OverQuota(limit),
            Refused::CredentialGone => Inserted::CredentialGone,
        }
    }
}

/// Each submit's answer from what its insert found, in order: the task it
/// created, the same work found again under its key, or another work under
/// it (a conflict); and whether any task was created.
pub(crate) fn answers(
    tasks: &[NewTask],
    inserted: Vec<Inserted>,
) -> (Vec<Result<Submitted, StoreError>>, bool) {
    let mut created = false;
    let answers = tasks
        .iter()
        .zip(inserted)
        .map(|(task, inserted)| match inserted {
            Inserted::Created(task) => {
                created = true;
                Ok(Submitted {
                    task,
                    created: true,
                })
            }
            Inserted::Existing(existing) => {
                let fields = task.differing_fields(&existing);
                if fields.is_empty() {
                    Ok(Submitted {
                        task: existing,
                        created: false,
                    })
                } else {
                    Err(StoreError::IdempotencyConflict { fields })
                }
            }
            Inserted::OverQuota(limit) => Err(StoreError::QuotaExceeded { limit }),
            Inserted::CredentialGone => Err(StoreError::CredentialGone),
        })
        .collect();
    (answers, created)
}

/// The most items one insert statement of a batch carries.
pub(crate) const BATCH_CHUNK: usize = 1000;

/// Inserts a batch's tasks, or finds the ones that hold their keys, and
/// answers item by item, in order: the first item with a new key creates
/// its task, a later item with that key finds it, as single submits in
/// order would. No subtransaction per item: one `INSERT … SELECT FROM
/// unnest(…) ON CONFLICT DO NOTHING` per chunk of [`BATCH_CHUNK`] items,
/// the items sorted by key across the whole batch, so concurrent batches
/// take their keys in one order and never wait on each other in a cycle.
/// Positions follow the items' order within the transaction (`$2`), so a
/// listing shows them as submitted. Then one read for every key that was
/// taken. All of it in `client`'s transaction, or one statement when one
/// chunk holds the batch and none of its items carries a pending limit
/// ([`takes_quota`]: then `client` must be a transaction, see [`admit`]).
pub(crate) async fn submit_batch<C: GenericClient>(
    client: &C,
    tasks: &[NewTask],
    now_ms: tc_model::Timestamp,
    now: Option<i64>,
) -> Result<Vec<Inserted>, StoreError> {
    let ids: Vec<TaskId> = tasks.iter().map(|_| new_id(now_ms)).collect();
    let refused = admit(client, tasks).await?;
    insert_batch(client, tasks, &ids, &refused, now).await
}

/// Whether a batch takes tenants' locks ([`lock_tenants`]): an item
/// carries a pending limit or is made with a tenant's key. The locks hold
/// until the transaction ends, so such a submit must run in one.
pub(crate) fn takes_quota(tasks: &[NewTask]) -> bool {
    tasks
        .iter()
        .any(|t| (t.tenant().is_some() && t.pending_limit().is_some()) || t.key_id().is_some())
}

/// The advisory lock's first key for a tenant ("TCtn"); the second is the
/// schema and tenant name hashed (a collision only makes two tenants'
/// writes take turns).
const QUOTA_LOCK_KEY: i32 = 0x5443_746E;

/// Takes the tenants' locks, in name order (so that two writers never wait
/// on each other in a cycle), held until the transaction ends. Every write
/// that must see a tenant's state unchanged until it commits takes them: a
/// limited submit or a retry before it counts the tenant's open tasks, a
/// write made with a key before it checks the key, and a key's revoke and
/// a tenant's delete before they write. So on every node a count, or a
/// key's check, holds for the write that follows it. Each check must run
/// as a statement after this one: its snapshot then holds every write
/// that took the locks before.
pub(crate) async fn lock_tenants<C: GenericClient>(
    client: &C,
    names: &[&str],
) -> Result<(), StoreError> {
    if names.is_empty() {
        return Ok(());
    }
    let mut names = names.to_vec();
    names.sort_unstable();
    names.dedup();
    let lock = client
        .prepare_cached(
            "SELECT pg_advisory_xact_lock($1, hashtext(current_schema() || '/' || name)) \
             FROM unnest($2::text[]) WITH ORDINALITY AS u(name, n) ORDER BY n",
        )
        .await
        .map_err(db)?;
    client
        .execute(&lock, &[&QUOTA_LOCK_KEY, &names])
        .await
        .map_err(db)?;
    Ok(())
}

/// Of the keys `(id, tenant)` given, those live now (read after
/// [`lock_tenants`]).
pub(crate) async fn live_keys<C: GenericClient>(
    client: &C,
    keys: &[(&str, &str)],
) -> Result<std::collections::HashSet<(String, String)>, StoreError> {
    if keys.is_empty() {
        return Ok(std::collections::HashSet::new());
    }
    let (ids, tenants): (Vec<&str>, Vec<&str>) = keys.iter().copied().unzip();
    let stmt = client
        .prepare_cached(
            "SELECT id, tenant FROM api_keys \
             WHERE (id, tenant) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
        )
        .await
        .map_err(db)?;
    client
        .query(&stmt, &[&ids, &tenants])
        .await
        .map_err(db)?
        .iter()
        .map(|row| Ok((row.try_get(0).map_err(db)?, row.try_get(1).map_err(db)?)))
        .collect()
}

/// [`StoreError::CredentialGone`] unless `acting`'s key is live, checked
/// under its tenant's lock ([`lock_tenants`], taken here).
pub(crate) async fn check_acting<C: GenericClient>(
    client: &C,
    acting: &Acting,
) -> Result<(), StoreError> {
    lock_tenants(client, &[acting.tenant.as_str()]).await?;
    let key = (acting.key_id.as_str(), acting.tenant.as_str());
    if live_keys(client, &[key]).await?.is_empty() {
        Err(StoreError::CredentialGone)
    } else {
        Ok(())
    }
}

/// The checks of a batch, before its insert: for each item, why it is
/// refused, if it is. An item made with a tenant's key whose key is not
/// live is refused ([`Refused::CredentialGone`]); an item of a tenant that
/// carries a limit is checked against its `max_pending`; nothing is read
/// for a batch without either. The tenants' locks are taken first
/// ([`lock_tenants`]), so two submits of one tenant count one after the
/// other on every node, and a key's revoke or its tenant's delete comes
/// before the check or after the commit: the limit and the key hold under
/// concurrency. A count stops at the limit (`LIMIT`), so its cost is
/// bounded by it. An item whose key its tenant already holds (stored, or
/// made by an earlier item) is answered by that task, never refused for
/// the quota; every new item counts for the later ones.
async fn admit<C: GenericClient>(
    client: &C,
    tasks: &[NewTask],
) -> Result<Vec<Option<Refused>>, StoreError> {
    let mut refused = vec![None; tasks.len()];
    // Each limited tenant with the largest limit its items carry (counting
    // up to it tells every smaller limit too).
    let mut limits: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for task in tasks {
        if let (Some(tenant), Some(limit)) = (task.tenant(), task.pending_limit()) {
            let max = limits.entry(tenant).or_insert(0);
            *max = (*max).max(limit);
        }
    }
    let keys: Vec<(&str, &str)> = tasks
        .iter()
        .filter_map(|t| {
            t.tenant()
                .zip(t.key_id())
                .map(|(tenant, key)| (key, tenant))
        })
        .collect();
    if limits.is_empty() && keys.is_empty() {
        return Ok(refused);
    }
    let mut locked: Vec<&str> = limits.keys().copied().collect();
    locked.extend(keys.iter().map(|&(_, tenant)| tenant));
    lock_tenants(client, &locked).await?;
    let live = live_keys(client, &keys).await?;
    for (i, task) in tasks.iter().enumerate() {
        if let (Some(tenant), Some(key)) = (task.tenant(), task.key_id())
            && !live.contains(&(key.to_owned(), tenant.to_owned()))
        {
            refused[i] = Some(Refused::CredentialGone);
        }
    }
    if limits.is_empty() {
        return Ok(refused);
    }
    let names: Vec<&str> = limits.keys().copied().collect();
    let caps: Vec<i64> = limits
        .values()
        .map(|&m| i64::try_from(m).unwrap_or(i64::MAX))
        .collect();
    let count = client
        .prepare_cached(
            "SELECT u.name, (SELECT count(*) FROM ( \
                 SELECT 1 FROM tasks t \
                 WHERE t.tenant = u.name AND t.tenant <> '' \
                   AND t.state IN ('pending', 'running') LIMIT u.cap) AS s) \
             FROM unnest($1::text[], $2::bigint[]) AS u(name, cap)",
        )
        .await
        .map_err(db)?;
    let held = client
        .prepare_cached(
            "SELECT idempotency_key, tenant FROM tasks \
             WHERE (idempotency_key, tenant) IN ( \
                 SELECT u.key, u.tenant FROM unnest($1::text[], $2::text[]) AS u(key, tenant))",
        )
        .await
        .map_err(db)?;
    let (keys, tenants): (Vec<&str>, Vec<&str>) = tasks
        .iter()
        .filter_map(|t| {
            t.tenant()
                .filter(|tenant| limits.contains_key(tenant))
                .map(|tenant| (t.idempotency_key(), tenant))
        })
        .unzip();
    let (counted, held) = tokio::try_join!(
        async { client.query(&count, &[&names, &caps]).await.map_err(db) },
        async { client.query(&held, &[&keys, &tenants]).await.map_err(db) },
    )?;
    let mut pending: HashMap<String, u64> = HashMap::with_capacity(counted.len());
    for row in &counted {
        let n: i64 = row.try_get(1).map_err(db)?;
        pending.insert(row.try_get(0).map_err(db)?, n.unsigned_abs());
    }
    let mut taken: std::collections::HashSet<(String, String)> = held
        .iter()
        .map(|row| Ok((row.try_get(0).map_err(db)?, row.try_get(1).map_err(db)?)))
        .collect::<Result<_, StoreError>>()?;
    for (i, task) in tasks.iter().enumerate() {
        let Some(tenant) = task.tenant().filter(|t| limits.contains_key(t)) else {
            continue;
        };
        if refused[i].is_some() {
            continue;
        }
        let ident = (task.idempotency_key().to_owned(), tenant.to_owned());
        if taken.contains(&ident) {
            continue;
        }
        let count = pending.entry(tenant.to_owned()).or_insert(0);
        if let Some(limit) = task.pending_limit()
            && *count >= limit
        {
            refused[i] = Some(Refused::Quota(limit));
            continue;
        }
        *count += 1;
        taken.insert(ident);
    }
    Ok(refused)
}

/// A task's identity for its key: the key and its tenant as stored.
fn ident(task: &NewTask) -> (&str, &str) {
    (
        task.idempotency_key(),
        tc_model::tenant::stored_tenant(task.tenant()),
    )
}

/// A stored task's identity for its key ([`ident`]).
fn stored_ident(task: &Task) -> (String, String) {
    (
        task.idempotency_key.clone(),
        tc_model::tenant::stored_tenant(task.tenant.as_deref()).to_owned(),
    )
}

/// A new task id: as in `submit`, the id's time is the node's own now, its
/// random bits from fastrand (tc-model reads no entropy of its own).
fn new_id(now_ms: tc_model::Timestamp) -> TaskId {
    let mut random = [0; 10];
    fastrand::fill(&mut random);
    TaskId::new(now_ms, random)
}

/// A batch's insert: one row per item of the `unnest`, in key order
/// ([`insert_batch`]).
pub(crate) const INSERT_BATCH: &str = concat!(
    "INSERT INTO tasks (pos, id, idempotency_key, state, url, body, max_attempts, \
                        timeout_ns, attempt, created_at, updated_at, next_run_at, \
                        schedule_at, schedule_delay_ms, destination, method, headers, \
                        trace_context, callback_url, callback_on, callback_of, tenant, \
                        priority) \
     SELECT tc_task_pos(r.within), r.id, r.key, 'pending', r.url, r.body, r.max_attempts, \
            r.timeout_ns, 0, tc_now_ms($1), tc_now_ms($1), \
            greatest(coalesce(r.schedule_at, tc_now_ms($1)), tc_now_ms($1)) \
                + coalesce(r.delay_ms, 0), \
            r.schedule_at, r.delay_ms, r.destination, r.method, r.headers, \
            r.trace_context, r.callback_url, r.callback_on, r.callback_of, r.tenant, \
            r.priority \
     FROM unnest($2::bigint[], $3::bytea[], $4::text[], $5::text[], $6::bytea[], \
                 $7::integer[], $8::bigint[], $9::bigint[], $10::bigint[], $11::text[], \
                 $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], \
                 $17::bytea[], $18::text[], $19::integer[]) \
          AS r(within, id, key, url, body, max_attempts, timeout_ns, schedule_at, \
               delay_ms, destination, method, headers, trace_context, callback_url, \
               callback_on, callback_of, tenant, priority) \
     ORDER BY r.key, r.tenant, r.within \
     ON CONFLICT (idempotency_key, tenant) DO NOTHING \
     RETURNING ",
    task_columns!()
);

/// The tasks that hold the keys a batch found taken ([`insert_batch`]).
/// `idempotency_key = ANY($1)`: an index lookup per key whatever the
/// table's statistics (the join with `unnest` alone was planned as a
/// whole-table scan while `tasks` was young).
pub(crate) const BY_KEYS: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE idempotency_key = ANY($1) AND (idempotency_key, tenant) IN ( \
         SELECT u.key, u.tenant FROM unnest($1::text[], $2::text[]) AS u(key, tenant))"
);

/// [`submit_batch`] with the id each task gets if it is new (`ids[i]` for
/// `tasks[i]`), leaving out the items [`admit`] refused (`refused[i]`;
/// empty: none).
async fn insert_batch<C: GenericClient>(
    client: &C,
    tasks: &[NewTask],
    ids: &[TaskId],
    refused: &[Option<Refused>],
    now: Option<i64>,
) -> Result<Vec<Inserted>, StoreError> {
    if tasks.len() >= 65_536 {
        return Err(StoreError::Unavailable(
            "a batch holds at most 65535 tasks".into(),
        ));
    }
    let insert = client.prepare_cached(INSERT_BATCH).await.map_err(db)?;
    let by_keys = client.prepare_cached(BY_KEYS).await.map_err(db)?;
    // The items by key and tenant (then by their place), as the statements
    // lock them; refused ones are answered already.
    let mut answers: Vec<Option<Inserted>> = (0..tasks.len())
        .map(|i| refused.get(i).copied().flatten().map(Inserted::from))
        .collect();
    let mut order: Vec<usize> = (0..tasks.len()).filter(|&i| answers[i].is_none()).collect();
    order.sort_by(|&a, &b| ident(&tasks[a]).cmp(&ident(&tasks[b])).then(a.cmp(&b)));
    // Two rounds: a key found taken whose task then vanished (deleted in
    // between) is inserted once more rather than reported as an error.
    for _ in 0..2 {
        let mut created: HashMap<(String, String), Task> = HashMap::new();
        for chunk in order.chunks(BATCH_CHUNK) {
            let columns = BatchColumns::of(tasks, ids, chunk)?;
            let rows = client
                .query(
                    &insert,
                    &[
                        &now,
                        &columns.within,
                        &columns.ids,
                        &columns.keys,
                        &columns.urls,
                        &columns.bodies,
                        &columns.max_attempts,
                        &columns.timeouts,
                        &columns.schedule_at,
                        &columns.delay_ms,
                        &columns.destinations,
                        &columns.methods,
                        &columns.headers,
                        &columns.trace_contexts,
                        &columns.callback_urls,
                        &columns.callback_ons,
                        &columns.callback_ofs,
                        &columns.tenants,
                        &columns.priorities,
                    ],
                )
                .await
                .map_err(db)?;
            for row in &rows {
                let task = rows::task_from_row(row)?.task;
                created.insert(stored_ident(&task), task);
            }
        }
        // The first item of each created key made it (the rows went in by
        // key, then place); the later ones find it.
        let mut made: HashMap<(&str, &str), Task> = HashMap::new();
        let mut taken: Vec<(&str, &str)> = Vec::new();
        for &i in &order {
            let (key, tenant) = ident(&tasks[i]);
            if let Some(task) = created.remove(&(key.to_owned(), tenant.to_owned())) {
                made.insert((key, tenant), task.clone());
                answers[i] = Some(Inserted::Created(task));
            } else if let Some(task) = made.get(&(key, tenant)) {
                answers[i] = Some(Inserted::Existing(task.clone()));
            } else {
                taken.push((key, tenant));
            }
        }
        taken.dedup();
        let mut found: HashMap<(String, String), Task> = HashMap::new();
        if !taken.is_empty() {
            let (keys, tenants): (Vec<&str>, Vec<&str>) = taken.iter().copied().unzip();
            let mut existing: Vec<Task> = client
                .query(&by_keys, &[&keys, &tenants])
                .await
                .map_err(db)?
                .iter()
                .map(|row| rows::task_from_row(row).map(|s| s.task))
                .collect::<Result<_, _>>()?;
            read_ops::fill_attempts(client, &mut existing).await?;
            found = existing
                .into_iter()
                .map(|t| (stored_ident(&t), t))
                .collect();
        }
        let mut missing = Vec::new();
        for &i in &order {
            if answers[i].is_none() {
                let (key, tenant) = ident(&tasks[i]);
                match found.get(&(key.to_owned(), tenant.to_owned())) {
                    Some(task) => answers[i] = Some(Inserted::Existing(task.clone())),
                    None => missing.push(i),
                }
            }
        }
        if missing.is_empty() {
            return Ok(answers.into_iter().flatten().collect());
        }
        order = missing;
    }
    Err(StoreError::Unavailable(
        "idempotency key taken and released twice during one batch".into(),
    ))
}

/// A chunk of a batch as one array per column, for `unnest`.
struct BatchColumns<'a> {
    within: Vec<i64>,
    ids: Vec<Vec<u8>>,
    keys: Vec<&'a str>,
    urls: Vec<&'a str>,
    bodies: Vec<&'a [u8]>,
    max_attempts: Vec<i32>,
    timeouts: Vec<i64>,
    schedule_at: Vec<Option<i64>>,
    delay_ms: Vec<Option<i64>>,
    destinations: Vec<String>,
    methods: Vec<&'static str>,
    headers: Vec<Option<String>>,
    trace_contexts: Vec<Option<String>>,
    callback_urls: Vec<Option<&'a str>>,
    callback_ons: Vec<Option<String>>,
    callback_ofs: Vec<Option<Vec<u8>>>,
    tenants: Vec<&'a str>,
    priorities: Vec<i32>,
}

impl<'a> BatchColumns<'a> {
    fn of(
        tasks: &'a [NewTask],
        ids: &[TaskId],
        chunk: &[usize],
    ) -> Result<BatchColumns<'a>, StoreError> {
        let mut columns = BatchColumns {
            within: Vec::with_capacity(chunk.len()),
            ids: Vec::with_capacity(chunk.len()),
            keys: Vec::with_capacity(chunk.len()),
            urls: Vec::with_capacity(chunk.len()),
            bodies: Vec::with_capacity(chunk.len()),
            max_attempts: Vec::with_capacity(chunk.len()),
            timeouts: Vec::with_capacity(chunk.len()),
            schedule_at: Vec::with_capacity(chunk.len()),
            delay_ms: Vec::with_capacity(chunk.len()),
            destinations: Vec::with_capacity(chunk.len()),
            methods: Vec::with_capacity(chunk.len()),
            headers: Vec::with_capacity(chunk.len()),
            trace_contexts: Vec::with_capacity(chunk.len()),
            callback_urls: Vec::with_capacity(chunk.len()),
            callback_ons: Vec::with_capacity(chunk.len()),
            callback_ofs: Vec::with_capacity(chunk.len()),
            tenants: Vec::with_capacity(chunk.len()),
            priorities: Vec::with_capacity(chunk.len()),
        };
        for &i in chunk {
            let task = &tasks[i];
            let (schedule_at, delay_ms) = task.schedule().to_parts();
            let id = ids
                .get(i)
                .ok_or_else(|| StoreError::Unavailable("a batch item has no id".into()))?;
            columns.within.push(i64::try_from(i).unwrap_or(i64::MAX));
            columns.ids.push(id.as_bytes().to_vec());
            columns.keys.push(task.idempotency_key());
            columns.urls.push(task.url());
            columns.bodies.push(task.body());
            columns.max_attempts.push(
                i32::try_from(task.max_attempts())
                    .map_err(|_| StoreError::Unavailable("max_attempts beyond i32".into()))?,
            );
            columns.timeouts.push(nanos(task.timeout()));
            columns.schedule_at.push(schedule_at);
            columns.delay_ms.push(delay_ms);
            columns
                .destinations
                .push(tc_model::destination_of(task.url()));
            columns.methods.push(task.method().as_str());
            columns.headers.push(task.headers().to_stored());
            columns
                .trace_contexts
                .push(task.trace().map(tc_model::TraceContext::to_stored));
            columns
                .callback_urls
                .push(task.callback().map(tc_model::callback::Callback::url));
            columns
                .callback_ons
                .push(task.callback().map(|c| c.on().to_stored()));
            columns
                .callback_ofs
                .push(task.callback_of().map(|id| id.as_bytes().to_vec()));
            columns
                .tenants
                .push(tc_model::tenant::stored_tenant(task.tenant()));
            columns.priorities.push(i32::from(task.priority()));
        }
        Ok(columns)
    }
}

/// What the ends of the tasks at `positions` create, after the write that
/// ended them (and counted their ends), in the same transaction (which
/// took the insert marker first, [`mark_inserting`]): each
/// one's callback, when tc-model's rule ([`callback::task_for`]) makes one,
/// inserted as a batch submit would, and its parent pointed at it. A key
/// already taken (a client's task with that key) is the callback: the
/// parent names that task. `now_ms` is the caller's now (the ids' time).
pub(crate) async fn ended<C: GenericClient>(
    client: &C,
    positions: &[i64],
    now_ms: tc_model::Timestamp,
    now: Option<i64>,
    callback_bytes: usize,
) -> Result<(), StoreError> {
    if positions.is_empty() {
        return Ok(());
    }
    let stmt = client
        .prepare_cached(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE pos = ANY($1) ORDER BY pos"
        ))
        .await
        .map_err(db)?;
    let mut parents: Vec<(i64, Task)> = Vec::with_capacity(positions.len());
    for row in client.query(&stmt, &[&positions]).await.map_err(db)? {
        let stored = rows::task_from_row(&row)?;
        parents.push((stored.pos, stored.task));
    }
    let mut tasks: Vec<Task> = parents.iter().map(|(_, t)| t.clone()).collect();
    read_ops::fill_attempts(client, &mut tasks).await?;
    let (mut made_for, mut news, mut ids) = (Vec::new(), Vec::new(), Vec::new());
    for ((pos, _), parent) in parents.iter().zip(&tasks) {
        let id = new_id(now_ms);
        if let Some(new) = callback::task_for(parent, id, callback_bytes) {
            made_for.push(*pos);
            news.push(new);
            ids.push(id);
        }
    }
    if news.is_empty() {
        return Ok(());
    }
    // Callbacks carry no pending limit: the end they report has happened.
    let inserted = insert_batch(client, &news, &ids, &[], now).await?;
    let made: Vec<Vec<u8>> = inserted
        .iter()
        .map(|i| match i {
            Inserted::Created(task) | Inserted::Existing(task) => Ok(task.id.as_bytes().to_vec()),
            Inserted::OverQuota(_) | Inserted::CredentialGone => Err(StoreError::Unavailable(
                "a callback was refused for its tenant's quota or key".into(),
            )),
        })
        .collect::<Result<_, _>>()?;
    let point = client
        .prepare_cached(
            "UPDATE tasks t SET callback_task_id = u.callback \
             FROM unnest($1::bigint[], $2::bytea[]) AS u(pos, callback) WHERE t.pos = u.pos",
        )
        .await
        .map_err(db)?;
    client
        .execute(&point, &[&made_for, &made])
        .await
        .map_err(db)?;
    Ok(())
}

/// Takes the insert marker (`tc_task_pos`, schema step 8) for a
/// transaction that may insert callbacks after it wrote other rows: it must
/// say so before its first write, so that a listing waits for it.
pub(crate) async fn mark_inserting<C: GenericClient>(client: &C) -> Result<(), StoreError> {
    let stmt = client
        .prepare_cached("SELECT tc_task_pos(0)")
        .await
        .map_err(db)?;
    client.query_one(&stmt, &[]).await.map_err(db)?;
    Ok(())
}

/// What the claim answers, before its due time is put on the caller's
/// clock.
pub(crate) struct Claimed {
    pub(crate) tasks: Vec<Task>,
    pub(crate) cursor: Option<String>,
    /// The earliest due time not yet come, and the store's clock when read.
    pub(crate) resume_after: (Option<i64>, i64),
}

/// The claim: see the port's `claim`.
pub(crate) async fn claim(
    tx: &Transaction<'_>,
    n: usize,
    now: Option<i64>,
    lease: Duration,
    gate: &ClaimGate,
) -> Result<Claimed, StoreError> {
    // The settings read and the fold are sent together (tokio-postgres
    // pipelines queries polled at once; the server runs them in order):
    // one round trip instead of three, since the claim loop is serial and
    // a drain is bound by its round trips.
    let (limits, ()) = tokio::try_join!(claim_limits(tx), fold_and_promote(tx, now),)?;
    let limits: HashMap<String, DestinationSettings> = limits.into_iter().collect();
    // A capped destination's room is known only once its row is locked
    // (below): the walk meets it without counting it towards enough.
    let is_capped = |name: &str| {
        limits
            .get(name)
            .is_some_and(|s| !s.paused && s.max_in_flight.is_some())
            && gate.allowance(name) != Some(0)
    };
    let mut walk = ClaimWalk::new(n, gate);
    walk_ready(tx, gate.after.as_deref(), |name| {
        if is_capped(name) {
            walk.visit_unsure(name);
            false
        } else {
            walk.visit(name, gate.claim_allowance(name, limits.get(name), 0))
        }
    })
    .await?;
    let (candidates, cursor) = walk.finish();
    let capped: Vec<&str> = candidates
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| is_capped(name))
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
    let candidates = candidates
        .into_iter()
        .map(|(name, allowed)| {
            if is_capped(&name) {
                let busy = running.get(&name).copied().unwrap_or(0);
                let allowed = gate.claim_allowance(&name, limits.get(&name), busy);
                (name, allowed)
            } else {
                (name, allowed)
            }
        })
        .collect();
    let mut plan = FairShare::new(n, candidates, &gate.in_flight);
    let mut claimed = Vec::with_capacity(n);
    let mut asked: Vec<String> = Vec::new();
    // The node's calls in flight by tenant, with this claim's takes added.
    let mut load = gate
        .tenants
        .as_ref()
        .map(|tenants| tenants.in_flight.clone());
    while let Some((destination, want)) = plan.next_take() {
        let got = match (&gate.tenants, &mut load) {
            (Some(tenants), Some(load)) => {
                let aging = gate.aging();
                claim_shared(tx, &destination, want, now, lease, aging, tenants, load).await?
            }
            _ => claim_of(tx, &destination, want, now, lease, gate.aging()).await?,
        };
        plan.taken(got.len());
        claimed.extend(got);
        asked.push(destination);
    }
    asked.sort_unstable();
    asked.dedup();
    let resume_after = settle(tx, &asked, now).await?;
    Ok(Claimed {
        tasks: claimed,
        cursor,
        resume_after,
    })
}

/// The claim's statement: takes up to `$2` due pending tasks of the
/// destination `$4` that also pass `$tenant` (a test of the tenant column,
/// or nothing), oldest due first. Their tries' history rows are written
/// when the tries end (schema step 19), not here.
macro_rules! claim_sql {
    ($tenant:literal) => {
        concat!(
            "WITH due AS ( \
                 SELECT pos, next_run_at FROM tasks \
                 WHERE state = 'pending' AND destination = $4 ",
            $tenant,
            " AND next_run_at <= tc_now_ms($1) \
                 ORDER BY next_run_at, pos LIMIT $2 \
                 FOR UPDATE SKIP LOCKED",
            claim_tail!()
        )
    };
}

/// What every claim statement does with its `due` rows (the positions and
/// due times it locked): moves them to running and answers them.
macro_rules! claim_tail {
    () => {
        concat!(
            "), claimed AS ( \
                 UPDATE tasks t SET state = 'running', attempt = t.attempt + 1, \
                                    started_at = tc_now_ms($1), \
                                    lease_until = tc_now_ms($1) + $3, \
                                    next_run_at = NULL, updated_at = tc_now_ms($1) \
                 FROM due WHERE t.pos = due.pos \
                 RETURNING due.next_run_at AS was_due, ",
            "t.pos, t.id, t.state, t.url, t.body, t.idempotency_key, t.attempt, \
             t.max_attempts, t.timeout_ns, t.http_status, t.result, t.result_content_type, \
             t.error, t.created_at, t.updated_at, t.started_at, t.finished_at, \
             t.next_run_at, t.lease_until, t.attempts_before_retry, t.schedule_at, \
             t.schedule_delay_ms, t.destination, t.method, t.headers, t.trace_context, \
             t.callback_url, t.callback_on, t.callback_of, t.callback_task_id, t.ends, \
             t.tenant, t.priority \
             ) \
             SELECT ",
            task_columns!(),
            ", was_due FROM claimed ORDER BY was_due, pos"
        )
    };
}
pub(crate) use claim_tail;

/// The claim's statement for tasks of any tenant ([`claim_of`]).
pub(crate) const CLAIM: &str = claim_sql!("");

/// Moves up to `n` due pending tasks of `destination`, oldest due first,
/// to running. Rows another claimer has locked are skipped, not waited for.
pub(crate) async fn claim_of(
    tx: &Transaction<'_>,
    destination: &str,
    n: usize,
    now: Option<i64>,
    lease: Duration,
    aging: Duration,
) -> Result<Vec<Task>, StoreError> {
    transit(State::Pending, State::Running)?;
    if crate::priority::has_prioritized(tx, destination, None, now).await? {
        return crate::priority::claim(tx, destination, None, n, now, lease, aging).await;
    }
    let stmt = tx.prepare_cached(CLAIM).await.map_err(db)?;
    let limit = i64::try_from(n).unwrap_or(i64::MAX);
    let found = tx
        .query(&stmt, &[&now, &limit, &millis(lease), &destination])
        .await
        .map_err(db)?;
    claimed_tasks(&found)
}

/// The claimed tasks of a claim statement's rows, without their histories
/// (the port's claim carries none).
fn claimed_tasks(found: &[tokio_postgres::Row]) -> Result<Vec<Task>, StoreError> {
    found
        .iter()
        .map(|row| rows::task_from_row(row).map(|s| s.task))
        .collect()
}

/// [`claim_of`] when tenants share the claim: `want` slots of
/// `destination` split among the tenants with due tasks there by
/// [`TenantGate::plan`], each tenant's due tasks oldest first; `load` is
/// the node's calls in flight by tenant, with every take of this claim
/// added (here too).
#[allow(clippy::too_many_arguments)]
async fn claim_shared(
    tx: &Transaction<'_>,
    destination: &str,
    want: usize,
    now: Option<i64>,
    lease: Duration,
    aging: Duration,
    gate: &TenantGate,
    load: &mut BTreeMap<String, usize>,
) -> Result<Vec<Task>, StoreError> {
    let due = due_tenants(tx, destination, now).await?;
    if due.is_empty() {
        return Ok(Vec::new());
    }
    let mut plan = gate.plan(want, due, load);
    let mut got = Vec::with_capacity(want);
    while let Some((tenant, n)) = plan.next_take() {
        let taken = claim_of_tenant(tx, destination, &tenant, n, now, lease, aging).await?;
        plan.taken(taken.len());
        *load.entry(tenant).or_default() += taken.len();
        got.extend(taken);
    }
    Ok(got)
}

/// The tenants with due tasks on `destination`, as stored (`''`,
/// [`tc_model::tenant::NO_TENANT`], for tasks without one): the named
/// ones by a skip scan of `tasks_due_by_tenant` (one index seek per
/// tenant, however deep its backlog), tasks without a tenant by
/// `tasks_due_by_destination`.
async fn due_tenants(
    tx: &Transaction<'_>,
    destination: &str,
    now: Option<i64>,
) -> Result<Vec<String>, StoreError> {
    let stmt = tx
        .prepare_cached(
            "WITH RECURSIVE named AS ( \
                 (SELECT tenant FROM tasks \
                  WHERE state = 'pending' AND tenant <> '' AND destination = $2 \
                    AND next_run_at <= tc_now_ms($1) \
                  ORDER BY tenant LIMIT 1) \
                 UNION ALL \
                 SELECT (SELECT t.tenant FROM tasks t \
                         WHERE t.state = 'pending' AND t.tenant <> '' AND t.destination = $2 \
                           AND t.tenant > named.tenant AND t.next_run_at <= tc_now_ms($1) \
                         ORDER BY t.tenant LIMIT 1) \
                 FROM named WHERE named.tenant IS NOT NULL \
             ) \
             SELECT tenant FROM named WHERE tenant IS NOT NULL \
             UNION ALL \
             SELECT '' WHERE EXISTS ( \
                 SELECT 1 FROM tasks \
                 WHERE state = 'pending' AND destination = $2 AND tenant = '' \
                   AND next_run_at <= tc_now_ms($1))",
        )
        .await
        .map_err(db)?;
    tx.query(&stmt, &[&now, &destination])
        .await
        .map_err(db)?
        .iter()
        .map(|row| row.try_get(0).map_err(db))
        .collect()
}

/// [`claim_of`] for one tenant's tasks (`''`: those without a tenant).
#[allow(clippy::too_many_arguments)]
async fn claim_of_tenant(
    tx: &Transaction<'_>,
    destination: &str,
    tenant: &str,
    n: usize,
    now: Option<i64>,
    lease: Duration,
    aging: Duration,
) -> Result<Vec<Task>, StoreError> {
    transit(State::Pending, State::Running)?;
    if crate::priority::has_prioritized(tx, destination, Some(tenant), now).await? {
        let tenant = Some(tenant);
        return crate::priority::claim(tx, destination, tenant, n, now, lease, aging).await;
    }
    let limit = i64::try_from(n).unwrap_or(i64::MAX);
    let found = if tenant.is_empty() {
        let stmt = tx
            .prepare_cached(claim_sql!("AND tenant = ''"))
            .await
            .map_err(db)?;
        tx.query(&stmt, &[&now, &limit, &millis(lease), &destination])
            .await
            .map_err(db)?
    } else {
        // `tenant <> ''` written out: the partial index's predicate, for
        // the planner (the parameter's value is not known to a generic plan).
        let stmt = tx
            .prepare_cached(claim_sql!("AND tenant = $5 AND tenant <> ''"))
            .await
            .map_err(db)?;
        tx.query(
            &stmt,
            &[&now, &limit, &millis(lease), &destination, &tenant],
        )
        .await
        .map_err(db)?
    };
    claimed_tasks(&found)
}

/// Extends the lease of each `(id, attempt)` still running with that very
/// attempt, `RETURNING` the pairs it extended; the others are read back in
/// one more statement (a fresh snapshot: their states as they are now). So
/// a tick is one statement, two when leases were lost, however many pairs.
pub(crate) async fn heartbeat(
    client: &Client,
    running: &[(TaskId, u32)],
    now: Option<i64>,
    lease: Duration,
) -> Result<Vec<LeaseLost>, StoreError> {
    let mut running = running.to_vec();
    running.sort_unstable();
    running.dedup();
    let ids: Vec<&[u8]> = running
        .iter()
        .map(|(id, _)| id.as_bytes().as_slice())
        .collect();
    let attempts: Vec<i32> = running
        .iter()
        .map(|(_, n)| i32::try_from(*n).unwrap_or(i32::MAX))
        .collect();
    let stmt = client
        .prepare_cached(
            // Never shortens a lease: a late heartbeat must not hand a task to
            // recovery earlier than the lease it already had.
            "UPDATE tasks t SET lease_until = greatest(coalesce(t.lease_until, tc_now_ms($1) + $4), \
                                                       tc_now_ms($1) + $4) \
             FROM unnest($2::bytea[], $3::integer[]) AS r(id, attempt) \
             WHERE t.id = r.id AND t.attempt = r.attempt AND t.state = 'running' \
             RETURNING t.id, t.attempt",
        )
        .await
        .map_err(db)?;
    let mut extended = std::collections::HashSet::with_capacity(running.len());
    for row in client
        .query(&stmt, &[&now, &ids, &attempts, &millis(lease)])
        .await
        .map_err(db)?
    {
        let attempt: i32 = row.try_get(1).map_err(db)?;
        extended.insert((
            rows::parse_id(row.try_get(0).map_err(db)?)?,
            u32::try_from(attempt).unwrap_or(0),
        ));
    }
    let lost: Vec<(TaskId, u32)> = running
        .into_iter()
        .filter(|pair| !extended.contains(pair))
        .collect();
    if lost.is_empty() {
        return Ok(Vec::new());
    }
    let stmt = client
        .prepare_cached("SELECT id, state FROM tasks WHERE id = ANY($1)")
        .await
        .map_err(db)?;
    let lost_ids: Vec<&[u8]> = lost
        .iter()
        .map(|(id, _)| id.as_bytes().as_slice())
        .collect();
    let mut states = HashMap::with_capacity(lost.len());
    for row in client.query(&stmt, &[&lost_ids]).await.map_err(db)? {
        let state: String = row.try_get(1).map_err(db)?;
        states.insert(
            rows::parse_id(row.try_get(0).map_err(db)?)?,
            parse_state(&state)?,
        );
    }
    Ok(lost
        .into_iter()
        .map(|(id, attempt)| LeaseLost {
            id,
            attempt,
            state: states.get(&id).copied(),
        })
        .collect())
}

/// The fields a guarded write checks, read under a row lock.
struct Head {
    pos: i64,
    state: State,
    attempt: u32,
}

/// Locks the task's row and reads its head; an unknown id is
/// [`StoreError::NotFound`].
async fn lock_head(tx: &Transaction<'_>, id: &TaskId) -> Result<Head, StoreError> {
    let stmt = tx
        .prepare_cached("SELECT pos, state, attempt FROM tasks WHERE id = $1 FOR UPDATE")
        .await
        .map_err(db)?;
    let row = tx
        .query_opt(&stmt, &[&id.as_bytes().as_slice()])
        .await
        .map_err(db)?
        .ok_or(StoreError::NotFound)?;
    let state: String = row.try_get(1).map_err(db)?;
    let attempt: i32 = row.try_get(2).map_err(db)?;
    Ok(Head {
        pos: row.try_get(0).map_err(db)?,
        state: parse_state(&state)?,
        attempt: u32::try_from(attempt)
            .map_err(|_| StoreError::Unavailable("corrupt row in tasks: bad attempt".into()))?,
    })
}

/// The head if the task is running with `attempt`, else the `Lost` answer.
async fn guard(
    tx: &Transaction<'_>,
    id: &TaskId,
    attempt: u32,
) -> Result<Result<Head, Guarded>, StoreError> {
    let head = lock_head(tx, id).await?;
    if head.state == State::Running && head.attempt == attempt {
        Ok(Ok(head))
    } else {
        Ok(Err(Guarded::Lost(head.state)))
    }
}

/// What a cancel did.
pub(crate) struct Canceled {
    /// The task after the cancel.
    pub(crate) task: Task,
    /// Whether a try was running (somewhere) when it was canceled.
    pub(crate) was_running: bool,
}

/// Pending or running → canceled; a terminal task is returned unchanged. A
/// running task's cancel is announced on `channel` in the same transaction,
/// so every node hears of it once it is committed.
pub(crate) async fn cancel(
    tx: &Transaction<'_>,
    id: &TaskId,
    (now_ms, now): (tc_model::Timestamp, Option<i64>),
    channel: &str,
    callback_bytes: usize,
) -> Result<Canceled, StoreError> {
    // A task's callback is fixed at its submit: read before any lock, so
    // that a cancel that will insert one says so before its first write.
    let asks = tx
        .prepare_cached("SELECT callback_url IS NOT NULL FROM tasks WHERE id = $1")
        .await
        .map_err(db)?;
    let asks_callback = tx
        .query_opt(&asks, &[&id.as_bytes().as_slice()])
        .await
        .map_err(db)?
        .map(|row| row.try_get::<_, bool>(0))
        .transpose()
        .map_err(db)?
        .unwrap_or(false);
    if asks_callback {
        mark_inserting(tx).await?;
    }
    let head = lock_head(tx, id).await?;
    if head.state.is_terminal() {
        return Ok(Canceled {
            task: load_pos(tx, head.pos).await?,
            was_running: false,
        });
    }
    transit(head.state, State::Canceled)?;
    let stmt = tx
        .prepare_cached(
            "UPDATE tasks SET state = 'canceled', finished_at = tc_now_ms($1), \
                              updated_at = tc_now_ms($1), lease_until = NULL, next_run_at = NULL, \
                              ends = ends + 1, \
                              error = CASE WHEN state = 'running' THEN $3 ELSE error END \
             WHERE pos = $2",
        )
        .await
        .map_err(db)?;
    tx.execute(&stmt, &[&now, &head.pos, &CANCELED])
        .await
        .map_err(db)?;
    let was_running = head.state == State::Running;
    if was_running {
        close_attempt(tx, id, head.attempt, now, None, Some(CANCELED)).await?;
        let notify = tx
            .prepare_cached("SELECT pg_notify($1, $2)")
            .await
            .map_err(db)?;
        tx.execute(&notify, &[&channel, &id.to_string()])
            .await
            .map_err(db)?;
    }
    if asks_callback {
        ended(tx, &[head.pos], now_ms, now, callback_bytes).await?;
    }
    Ok(Canceled {
        task: load_pos(tx, head.pos).await?,
        was_running,
    })
}

/// Deletes a finished task with its history; its key is free again.
pub(crate) async fn delete(tx: &Transaction<'_>, id: &TaskId) -> Result<(), StoreError> {
    let head = lock_head(tx, id).await?;
    if !head.state.is_terminal() {
        return Err(StoreError::NotTerminal(head.state));
    }
    let attempts = tx
        .prepare_cached("DELETE FROM attempts WHERE task_id = $1")
        .await
        .map_err(db)?;
    tx.execute(&attempts, &[&id.as_bytes().as_slice()])
        .await
        .map_err(db)?;
    let task = tx
        .prepare_cached("DELETE FROM tasks WHERE pos = $1")
        .await
        .map_err(db)?;
    tx.execute(&task, &[&head.pos]).await.map_err(db)?;
    Ok(())
}

/// Deletes up to `limit` tasks in terminal `state` finished more than
/// `older_than_ms` before now (the store's clock), with their attempts.
/// Rows another transaction holds are skipped, not waited for.
pub(crate) async fn prune(
    tx: &Transaction<'_>,
    state: State,
    older_than_ms: i64,
    now: Option<i64>,
    limit: i64,
) -> Result<usize, StoreError> {
    if !state.is_terminal() || limit <= 0 {
        return Ok(0);
    }
    let stmt = tx
        .prepare_cached(
            "WITH doomed AS ( \
                 SELECT pos, id FROM tasks \
                 WHERE state = $2 AND finished_at < tc_now_ms($1) - $3 \
                 ORDER BY pos LIMIT $4 FOR UPDATE SKIP LOCKED \
             ), gone AS ( \
                 DELETE FROM attempts WHERE task_id IN (SELECT id FROM doomed) \
             ) \
             DELETE FROM tasks WHERE pos IN (SELECT pos FROM doomed)",
        )
        .await
        .map_err(db)?;
    let deleted = tx
        .execute(&stmt, &[&now, &state.as_str(), &older_than_ms, &limit])
        .await
        .map_err(db)?;
    Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
}

/// Failed or canceled → pending, due `delay_ms` after now, with a fresh
/// budget of tries (the tries so far become `attempts_before_retry`); made
/// with `acting`'s key (checked live, the task its tenant's), under the
/// task's tenant's `max_pending` (counted under the tenant's lock, as a
/// submit counts).
pub(crate) async fn retry(
    tx: &Transaction<'_>,
    id: &TaskId,
    delay_ms: i64,
    now: Option<i64>,
    acting: Option<&Acting>,
) -> Result<Task, StoreError> {
    // A task's tenant never changes: read before the tenant's lock, which
    // comes before the row's (the order every writer takes them in).
    let tenant = tenant_of(tx, id).await?;
    if let Some(acting) = acting {
        if acting.tenant != tenant {
            return Err(StoreError::NotFound);
        }
        check_acting(tx, acting).await?;
    }
    if !tenant.is_empty() {
        lock_tenants(tx, &[tenant.as_str()]).await?;
    }
    let head = lock_head(tx, id).await?;
    tc_model::retry_by_hand(head.state).map_err(|e| StoreError::NotRetryable(e.from))?;
    if let Admission::OverPending(limit) =
        admit_retry(tx, &tenant, &mut RetryQuota::default()).await?
    {
        return Err(StoreError::QuotaExceeded { limit });
    }
    let stmt = tx
        .prepare_cached(
            "UPDATE tasks SET state = 'pending', attempts_before_retry = attempt, error = NULL, \
                              http_status = NULL, result = NULL, result_content_type = NULL, \
                              finished_at = NULL, lease_until = NULL, \
                              next_run_at = tc_now_ms($1) + $3, updated_at = tc_now_ms($1) \
             WHERE pos = $2",
        )
        .await
        .map_err(db)?;
    tx.execute(&stmt, &[&now, &head.pos, &delay_ms])
        .await
        .map_err(db)?;
    load_pos(tx, head.pos).await
}

/// The task's tenant as stored (`''` for none), or [`StoreError::NotFound`].
async fn tenant_of(tx: &Transaction<'_>, id: &TaskId) -> Result<String, StoreError> {
    let stmt = tx
        .prepare_cached("SELECT tenant FROM tasks WHERE id = $1")
        .await
        .map_err(db)?;
    tx.query_opt(&stmt, &[&id.as_bytes().as_slice()])
        .await
        .map_err(db)?
        .ok_or(StoreError::NotFound)?
        .try_get(0)
        .map_err(db)
}

/// Whether `quota` admits one more retry of a task of `tenant` (as stored):
/// its `max_pending` and open tasks are read once per transaction, under
/// the tenant's lock, which the caller holds ([`lock_tenants`]).
async fn admit_retry(
    tx: &Transaction<'_>,
    tenant: &str,
    quota: &mut RetryQuota,
) -> Result<Admission, StoreError> {
    if !quota.knows(tenant) {
        let limit_of = tx
            .prepare_cached("SELECT max_pending FROM tenants WHERE name = $1")
            .await
            .map_err(db)?;
        let limit: Option<i64> = tx
            .query_opt(&limit_of, &[&tenant])
            .await
            .map_err(db)?
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(db)?
            .flatten();
        let open = match limit {
            Some(cap) => {
                let count = tx
                    .prepare_cached(
                        "SELECT count(*) FROM (SELECT 1 FROM tasks \
                             WHERE tenant = $1 AND tenant <> '' \
                               AND state IN ('pending', 'running') LIMIT $2) AS s",
                    )
                    .await
                    .map_err(db)?;
                let n: i64 = tx
                    .query_one(&count, &[&tenant, &cap])
                    .await
                    .map_err(db)?
                    .try_get(0)
                    .map_err(db)?;
                n.unsigned_abs()
            }
            None => 0,
        };
        quota.learn(tenant, limit.map(i64::unsigned_abs), open);
    }
    Ok(quota.admit(tenant))
}

/// Running → pending without using up the attempt, if still on `attempt`.
pub(crate) async fn release(
    tx: &Transaction<'_>,
    id: &TaskId,
    attempt: u32,
    now: Option<i64>,
) -> Result<Guarded, StoreError> {
    let head = match guard(tx, id, attempt).await? {
        Ok(head) => head,
        Err(lost) => return Ok(lost),
    };
    let to = transit(head.state, State::Pending)?;
    let stmt = tx
        .prepare_cached(
            "UPDATE tasks SET state = 'pending', attempt = attempt - 1, \
                              next_run_at = tc_now_ms($1), lease_until = NULL, error = $3, \
                              updated_at = tc_now_ms($1) \
             WHERE pos = $2",
        )
        .await
        .map_err(db)?;
    tx.execute(&stmt, &[&now, &head.pos, &INTERRUPTED])
        .await
        .map_err(db)?;
    // The history keeps the interrupted try; the next claim reuses its n.
    close_attempt(tx, id, attempt, now, None, Some(INTERRUPTED)).await?;
    Ok(Guarded::Applied(to))
}

/// Recovery's statement ([`recover_expired`]): `$3` whether it may fail
/// tasks that ask for a callback. Running tasks are found through
/// `tasks_running_by_destination` (schema step 19 dropped the lease's own
/// index: a heartbeat then changes no indexed column); their history rows
/// by an array of ids (a join alone was planned as a scan of every row).
pub(crate) const RECOVER: &str = "WITH expired AS ( \
         SELECT pos, attempt < max_attempts + attempts_before_retry AS again FROM tasks \
         WHERE state = 'running' AND lease_until < tc_now_ms($1) \
           AND ($3 OR callback_url IS NULL \
                OR attempt < max_attempts + attempts_before_retry) \
         FOR UPDATE SKIP LOCKED \
     ), moved AS ( \
         UPDATE tasks t SET \
             state = CASE WHEN e.again THEN 'pending' ELSE 'failed' END, \
             next_run_at = CASE WHEN e.again THEN tc_now_ms($1) END, \
             finished_at = CASE WHEN e.again THEN NULL ELSE tc_now_ms($1) END, \
             lease_until = NULL, error = $2, updated_at = tc_now_ms($1), \
             ends = t.ends + CASE WHEN e.again THEN 0 ELSE 1 END \
         FROM expired e WHERE t.pos = ANY (ARRAY(SELECT pos FROM expired)) AND t.pos = e.pos \
         RETURNING t.id, t.attempt, t.pos, t.started_at, \
                   NOT e.again AND t.callback_url IS NOT NULL AS asks_callback \
     ), closed AS ( \
         UPDATE attempts a SET finished_at = tc_now_ms($1), error = $2, \
                               duration_ms = greatest(tc_now_ms($1) - a.started_at, 0) \
         FROM moved m \
         WHERE a.task_id = ANY (ARRAY(SELECT id FROM moved)) \
           AND a.task_id = m.id AND a.n = m.attempt AND a.finished_at IS NULL \
         RETURNING a.task_id \
     ), written AS ( \
         INSERT INTO attempts (task_id, n, started_at, finished_at, error, duration_ms) \
         SELECT m.id, m.attempt, coalesce(m.started_at, tc_now_ms($1)), tc_now_ms($1), $2, \
                greatest(tc_now_ms($1) - coalesce(m.started_at, tc_now_ms($1)), 0) \
         FROM moved m WHERE m.id NOT IN (SELECT task_id FROM closed) \
     ) \
     SELECT pos, asks_callback FROM moved";

/// Running tasks whose lease ended before now → pending, or → failed when no
/// attempt is left, with their open tries closed; one statement, then the
/// callbacks of those that failed (in the same transaction). Rows locked
/// by a write in progress (a completion racing the recovery) are skipped:
/// that write decides them.
pub(crate) async fn recover_expired(
    tx: &Transaction<'_>,
    (now_ms, now): (tc_model::Timestamp, Option<i64>),
    callback_bytes: usize,
) -> Result<usize, StoreError> {
    transit(State::Running, State::Pending)?;
    transit(State::Running, State::Failed)?;
    // A recovery that fails a task asking for a callback inserts one: it
    // says so before its first write. One it did not foresee (its lease ran
    // out since) is left for the next round.
    let foresee = tx
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM tasks \
                            WHERE state = 'running' AND lease_until < tc_now_ms($1) \
                              AND attempt >= max_attempts + attempts_before_retry \
                              AND callback_url IS NOT NULL)",
        )
        .await
        .map_err(db)?;
    let inserts: bool = tx
        .query_one(&foresee, &[&now])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)?;
    if inserts {
        mark_inserting(tx).await?;
    }
    let stmt = tx.prepare_cached(RECOVER).await.map_err(db)?;
    let moved = tx
        .query(&stmt, &[&now, &INTERRUPTED, &inserts])
        .await
        .map_err(db)?;
    let mut failed_with_callback = Vec::new();
    for row in &moved {
        if row.try_get::<_, bool>(1).map_err(db)? {
            failed_with_callback.push(row.try_get::<_, i64>(0).map_err(db)?);
        }
    }
    ended(tx, &failed_with_callback, now_ms, now, callback_bytes).await?;
    Ok(moved.len())
}

/// Writes the history row of try `n`, ended now (closing the open one a
/// node of the previous version opened, if any).
async fn close_attempt(
    tx: &Transaction<'_>,
    id: &TaskId,
    n: u32,
    now: Option<i64>,
    http_status: Option<u16>,
    error: Option<&str>,
) -> Result<(), StoreError> {
    // Closes the open row a node of schema 16 wrote at its claim, or
    // writes the try's only row (schema step 19), from the task's start.
    let stmt = tx
        .prepare_cached(
            "WITH closed AS ( \
                 UPDATE attempts SET finished_at = tc_now_ms($1), http_status = $4, error = $5, \
                                     duration_ms = greatest(tc_now_ms($1) - started_at, 0) \
                 WHERE task_id = $2 AND n = $3 AND finished_at IS NULL \
                 RETURNING 1 \
             ) \
             INSERT INTO attempts (task_id, n, started_at, finished_at, http_status, error, \
                                   duration_ms) \
             SELECT t.id, $3, coalesce(t.started_at, tc_now_ms($1)), tc_now_ms($1), $4, $5, \
                    greatest(tc_now_ms($1) - coalesce(t.started_at, tc_now_ms($1)), 0) \
             FROM tasks t WHERE t.id = $2 AND NOT EXISTS (SELECT 1 FROM closed)",
        )
        .await
        .map_err(db)?;
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    let status = http_status.map(i32::from);
    tx.execute(
        &stmt,
        &[&now, &id.as_bytes().as_slice(), &n, &status, &error],
    )
    .await
    .map_err(db)?;
    Ok(())
}

/// The task at `pos` with its history.
async fn load_pos(tx: &Transaction<'_>, pos: i64) -> Result<Task, StoreError> {
    let stmt = tx
        .prepare_cached(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE pos = $1"
        ))
        .await
        .map_err(db)?;
    let row = tx
        .query_opt(&stmt, &[&pos])
        .await
        .map_err(db)?
        .ok_or_else(|| StoreError::Unavailable(format!("task at pos {pos} vanished")))?;
    let task = rows::task_from_row(&row)?.task;
    let mut task = [task];
    read_ops::fill_attempts(tx, &mut task).await?;
    let [task] = task;
    Ok(task)
}

/// A bulk action's horizon: the snapshot of the transactions that had
/// committed when it started. A task is covered only if the transaction
/// that inserted it (its position's upper bits) is visible in it.
pub(crate) async fn bulk_snapshot(client: &Client) -> Result<String, StoreError> {
    let stmt = client
        .prepare_cached("SELECT pg_current_snapshot()::text")
        .await
        .map_err(db)?;
    client
        .query_one(&stmt, &[])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)
}

/// The covered tasks of one bulk step: up to `n` after `after`, inserted
/// by transactions visible in `snapshot`.
pub(crate) async fn bulk_covered(
    tx: &Transaction<'_>,
    filter: &TaskFilter,
    snapshot: &str,
    after: i64,
    n: i64,
) -> Result<Vec<(i64, TaskId)>, StoreError> {
    let filter = FilterSql::new(filter, 4);
    let stmt = tx
        .prepare_cached(&format!(
            "SELECT pos, id FROM tasks \
             WHERE {driving} AND {rest} AND pos > $1 \
             AND pg_visible_in_snapshot((pos / 65536)::text::xid8, $2::text::pg_snapshot) \
             ORDER BY pos LIMIT $3",
            driving = filter.driving,
            rest = filter.rest,
        ))
        .await
        .map_err(db)?;
    let rows = tx
        .query(&stmt, &filter.params(&[&after, &snapshot, &n]))
        .await
        .map_err(db)?;
    rows.iter()
        .map(|row| {
            let id: Vec<u8> = row.try_get(1).map_err(db)?;
            Ok((row.try_get(0).map_err(db)?, rows::parse_id(id)?))
        })
        .collect()
}

/// What one bulk step changed.
pub(crate) struct BulkApplied {
    /// How many tasks it changed.
    pub(crate) applied: u64,
    /// The tasks it canceled while they were running.
    pub(crate) canceled_running: Vec<TaskId>,
    /// A retry's tasks the allow-list no longer admits.
    pub(crate) refused_url: u64,
}

/// A bulk retry of the tasks at `positions` still in one of `states`, each
/// admitted by `quota` (its tenant's `max_pending`, counted under the
/// tenant's lock, taken before the rows' locks as every writer takes
/// them). Answers how many it retried.
async fn bulk_retry(
    tx: &Transaction<'_>,
    positions: &[i64],
    states: &[&str],
    now: Option<i64>,
    admit: &mut RetryAdmit<'_>,
) -> Result<(u64, u64), StoreError> {
    // Tenants never change: read before their locks.
    let tenants_of = tx
        .prepare_cached("SELECT DISTINCT tenant FROM tasks WHERE pos = ANY($1) AND tenant <> ''")
        .await
        .map_err(db)?;
    let tenants: Vec<String> = tx
        .query(&tenants_of, &[&positions])
        .await
        .map_err(db)?
        .iter()
        .map(|row| row.try_get(0).map_err(db))
        .collect::<Result<_, _>>()?;
    let names: Vec<&str> = tenants.iter().map(String::as_str).collect();
    lock_tenants(tx, &names).await?;
    let lock = tx
        .prepare_cached(
            "SELECT pos, tenant, url, callback_url FROM tasks \
             WHERE pos = ANY($1) AND state = ANY($2) ORDER BY pos FOR UPDATE",
        )
        .await
        .map_err(db)?;
    let mut admitted: Vec<i64> = Vec::new();
    let mut refused_url = 0;
    for row in tx.query(&lock, &[&positions, &states]).await.map_err(db)? {
        let tenant: String = row.try_get(1).map_err(db)?;
        let url: String = row.try_get(2).map_err(db)?;
        let callback_url: Option<String> = row.try_get(3).map_err(db)?;
        if tc_model::urls_allowed(&url, callback_url.as_deref(), admit.allowed_urls).is_err() {
            refused_url += 1;
            continue;
        }
        if admit_retry(tx, &tenant, admit.quota).await? == Admission::Admitted {
            admitted.push(row.try_get(0).map_err(db)?);
        }
    }
    let stmt = tx
        .prepare_cached(
            "UPDATE tasks SET state = 'pending', attempts_before_retry = attempt, \
                              error = NULL, http_status = NULL, result = NULL, \
                              result_content_type = NULL, finished_at = NULL, \
                              lease_until = NULL, next_run_at = tc_now_ms($1), \
                              updated_at = tc_now_ms($1) \
             WHERE pos = ANY($2)",
        )
        .await
        .map_err(db)?;
    let applied = tx.execute(&stmt, &[&now, &admitted]).await.map_err(db)?;
    Ok((applied, refused_url))
}

/// What a bulk retry admits: its tenants' quotas and the allow-list.
pub(crate) struct RetryAdmit<'a> {
    pub(crate) quota: &'a mut RetryQuota,
    /// The allow-list (empty: every url).
    pub(crate) allowed_urls: &'a [String],
}

/// Applies `action` to the tasks at `positions` still in a state it applies
/// to (read again under the row locks: a worker may have moved them since
/// the scan), in one statement. Rows are locked in position order, so two
/// bulk steps never wait on each other in a cycle, and a single write waits
/// at most for this statement, and only on a task it changes. A running
/// task's cancel is announced on `channel`, as a single cancel's is.
pub(crate) async fn bulk_apply(
    tx: &Transaction<'_>,
    action: BulkAction,
    positions: &[i64],
    (now_ms, now): (tc_model::Timestamp, Option<i64>),
    channel: &str,
    callback_bytes: usize,
    admit: &mut RetryAdmit<'_>,
) -> Result<BulkApplied, StoreError> {
    let from: Vec<State> = State::ALL
        .into_iter()
        .filter(|s| action.applies_to(*s))
        .collect();
    let names: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
    match action {
        BulkAction::Retry => {
            for state in &from {
                tc_model::retry_by_hand(*state).map_err(|e| StoreError::NotRetryable(e.from))?;
            }
            let (applied, refused_url) = bulk_retry(tx, positions, &names, now, admit).await?;
            Ok(BulkApplied {
                applied,
                canceled_running: Vec::new(),
                refused_url,
            })
        }
        BulkAction::Cancel => {
            for state in &from {
                transit(*state, State::Canceled)?;
            }
            // Callbacks are fixed at submit: known before the first write.
            let asks = tx
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM tasks \
                                    WHERE pos = ANY($1) AND callback_url IS NOT NULL)",
                )
                .await
                .map_err(db)?;
            let any_callback: bool = tx
                .query_one(&asks, &[&positions])
                .await
                .map_err(db)?
                .try_get(0)
                .map_err(db)?;
            if any_callback {
                mark_inserting(tx).await?;
            }
            let stmt = tx
                .prepare_cached(
                    "WITH locked AS ( \
                         SELECT pos, state AS was, attempt FROM tasks \
                         WHERE pos = ANY($2) AND state = ANY($3) ORDER BY pos FOR UPDATE \
                     ), moved AS ( \
                         UPDATE tasks t SET state = 'canceled', finished_at = tc_now_ms($1), \
                                            updated_at = tc_now_ms($1), lease_until = NULL, \
                                            next_run_at = NULL, ends = t.ends + 1, \
                                            error = CASE WHEN l.was = 'running' THEN $4 \
                                                         ELSE t.error END \
                         FROM locked l WHERE t.pos = ANY($2) AND t.pos = l.pos \
                         RETURNING t.id, l.was, l.attempt, t.pos, t.started_at, \
                                   t.callback_url IS NOT NULL AS asks_callback \
                     ), closed AS ( \
                         UPDATE attempts a SET finished_at = tc_now_ms($1), error = $4, \
                                               duration_ms = greatest(tc_now_ms($1) - a.started_at, 0) \
                         FROM moved m \
                         WHERE a.task_id = ANY (ARRAY(SELECT id FROM moved)) \
                           AND m.was = 'running' AND a.task_id = m.id AND a.n = m.attempt \
                           AND a.finished_at IS NULL \
                         RETURNING a.task_id \
                     ), written AS ( \
                         INSERT INTO attempts (task_id, n, started_at, finished_at, error, \
                                               duration_ms) \
                         SELECT m.id, m.attempt, coalesce(m.started_at, tc_now_ms($1)), \
                                tc_now_ms($1), $4, \
                                greatest(tc_now_ms($1) - coalesce(m.started_at, tc_now_ms($1)), 0) \
                         FROM moved m \
                         WHERE m.was = 'running' AND m.id NOT IN (SELECT task_id FROM closed) \
                     ) \
                     SELECT id, was = 'running', pos, asks_callback FROM moved",
                )
                .await
                .map_err(db)?;
            let rows = tx
                .query(&stmt, &[&now, &positions, &names, &CANCELED])
                .await
                .map_err(db)?;
            let mut canceled_running = Vec::new();
            let mut with_callback = Vec::new();
            for row in &rows {
                if row.try_get::<_, bool>(1).map_err(db)? {
                    canceled_running.push(rows::parse_id(row.try_get(0).map_err(db)?)?);
                }
                if row.try_get::<_, bool>(3).map_err(db)? {
                    with_callback.push(row.try_get::<_, i64>(2).map_err(db)?);
                }
            }
            ended(tx, &with_callback, now_ms, now, callback_bytes).await?;
            if !canceled_running.is_empty() {
                let notify = tx
                    .prepare_cached("SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id")
                    .await
                    .map_err(db)?;
                let ids: Vec<String> = canceled_running.iter().map(TaskId::to_string).collect();
                tx.execute(&notify, &[&channel, &ids]).await.map_err(db)?;
            }
            Ok(BulkApplied {
                applied: rows.len() as u64,
                canceled_running,
                refused_url: 0,
            })
        }
        BulkAction::Delete => {
            let stmt = tx
                .prepare_cached(
                    "WITH locked AS ( \
                         SELECT pos, id FROM tasks WHERE pos = ANY($1) AND state = ANY($2) \
                         ORDER BY pos FOR UPDATE \
                     ), gone AS ( \
                         DELETE FROM attempts a USING locked WHERE a.task_id = locked.id \
                     ) \
                     DELETE FROM tasks t USING locked WHERE t.pos = locked.pos",
                )
                .await
                .map_err(db)?;
            let applied = tx.execute(&stmt, &[&positions, &names]).await.map_err(db)?;
            Ok(BulkApplied {
                applied,
                canceled_running: Vec::new(),
                refused_url: 0,
            })
        }
    }
}
