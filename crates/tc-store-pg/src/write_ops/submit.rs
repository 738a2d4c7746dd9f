//! Submit: a batch of new tasks admitted (the tenants' quotas, under their
//! locks) and inserted in one statement, with the answers in the caller's
//! order.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;
use tc_model::store::{StoreError, Submitted};
use tc_model::tenant::Acting;
use tc_model::{NewTask, Task, TaskId};

use crate::error::db;
use crate::moves::count_moves;
use crate::read_ops;
use crate::rows::{self, nanos, task_columns};

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
pub(super) const QUOTA_LOCK_KEY: i32 = 0x5443_746E;

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
pub(super) async fn admit<C: GenericClient>(
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
    let (mut pending, mut taken) = open_counts_and_keys(client, tasks, &limits).await?;
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

/// For each limited tenant in `limits`, its open tasks counted up to its
/// limit; and which of the batch's keys of those tenants are taken already
/// (a resubmit takes no quota).
async fn open_counts_and_keys<C: GenericClient>(
    client: &C,
    tasks: &[NewTask],
    limits: &std::collections::BTreeMap<&str, u64>,
) -> Result<
    (
        HashMap<String, u64>,
        std::collections::HashSet<(String, String)>,
    ),
    StoreError,
> {
    let names: Vec<&str> = limits.keys().copied().collect();
    let caps: Vec<i64> = limits
        .values()
        .map(|&m| i64::try_from(m).unwrap_or(i64::MAX))
        .collect();
    let count = client
        .prepare_cached(
            "SELECT u.name, (SELECT count(*) FROM ( \
                 SELECT 1 FROM queue t \
                 WHERE t.tenant = u.name AND t.tenant <> '' LIMIT u.cap) AS s) \
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
    let taken: std::collections::HashSet<(String, String)> = held
        .iter()
        .map(|row| Ok((row.try_get(0).map_err(db)?, row.try_get(1).map_err(db)?)))
        .collect::<Result<_, StoreError>>()?;
    Ok((pending, taken))
}

/// A task's identity for its key: the key and its tenant as stored.
pub(super) fn ident(task: &NewTask) -> (&str, &str) {
    (
        task.idempotency_key(),
        tc_model::tenant::stored_tenant(task.tenant()),
    )
}

/// A stored task's identity for its key ([`ident`]).
pub(super) fn stored_ident(task: &Task) -> (String, String) {
    (
        task.idempotency_key.clone(),
        tc_model::tenant::stored_tenant(task.tenant.as_deref()).to_owned(),
    )
}

/// A new task id: as in `submit`, the id's time is the node's own now, its
/// random bits from fastrand (tc-model reads no entropy of its own).
pub(super) fn new_id(now_ms: tc_model::Timestamp) -> TaskId {
    let mut random = [0; 10];
    fastrand::fill(&mut random);
    TaskId::new(now_ms, random)
}

/// A batch's insert: one row per item of the `unnest`, in key order
/// ([`insert_batch`]), with the counts and due marks of the rows it made
/// ([`count_moves`]).
pub(crate) const INSERT_BATCH: &str = concat!(
    "WITH made AS ( \
     INSERT INTO tasks (pos, id, idempotency_key, state, url, body, max_attempts, \
                        timeout_ns, attempt, created_at, updated_at, next_run_at, \
                        schedule_at, schedule_delay_ms, destination, method, headers, \
                        trace_context, callback_url, callback_on, callback_of, tenant, \
                        topic, event_id, subscription, priority, flow_key) \
     SELECT tc_task_pos(r.within), r.id, r.key, 'pending', r.url, r.body, r.max_attempts, \
            r.timeout_ns, 0, tc_now_ms($1), tc_now_ms($1), \
            greatest(coalesce(r.schedule_at, tc_now_ms($1)), tc_now_ms($1)) \
                + coalesce(r.delay_ms, 0), \
            r.schedule_at, r.delay_ms, r.destination, r.method, r.headers, \
            r.trace_context, r.callback_url, r.callback_on, r.callback_of, r.tenant, \
            r.topic, r.event_id, r.subscription, r.priority, r.flow_key \
     FROM unnest($2::bigint[], $3::bytea[], $4::text[], $5::text[], $6::bytea[], \
                 $7::integer[], $8::bigint[], $9::bigint[], $10::bigint[], $11::text[], \
                 $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], \
                 $17::bytea[], $18::text[], $19::text[], $20::text[], $21::text[], $22::integer[], \
                 $23::text[]) \
          AS r(within, id, key, url, body, max_attempts, timeout_ns, schedule_at, \
               delay_ms, destination, method, headers, trace_context, callback_url, \
               callback_on, callback_of, tenant, topic, event_id, subscription, priority, \
               flow_key) \
     ORDER BY r.key, r.tenant, r.within \
     ON CONFLICT (idempotency_key, tenant) DO NOTHING \
     RETURNING ",
    task_columns!(),
    "), moves AS ( \
         SELECT pos, NULL::text AS from_state, state AS to_state, destination, \
                next_run_at AS due, tenant, flow_key, priority \
         FROM made \
     )",
    count_moves!(),
    "SELECT ",
    task_columns!(),
    " FROM made"
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
pub(super) async fn insert_batch<C: GenericClient>(
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
        let mut created = insert_chunks(client, &insert, tasks, ids, &order, now).await?;
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
        let found = read_taken(client, &by_keys, &taken).await?;
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

/// Inserts the tasks at `order` (sorted by key and tenant), a chunk at a
/// time; answers the rows made, by key and tenant (a key already taken
/// makes none).
async fn insert_chunks<C: GenericClient>(
    client: &C,
    insert: &tokio_postgres::Statement,
    tasks: &[NewTask],
    ids: &[TaskId],
    order: &[usize],
    now: Option<i64>,
) -> Result<HashMap<(String, String), Task>, StoreError> {
    let mut created = HashMap::new();
    for chunk in order.chunks(BATCH_CHUNK) {
        let columns = BatchColumns::of(tasks, ids, chunk)?;
        let rows = client
            .query(
                insert,
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
                    &columns.topics,
                    &columns.event_ids,
                    &columns.subscriptions,
                    &columns.priorities,
                    &columns.flow_keys,
                ],
            )
            .await
            .map_err(db)?;
        for row in &rows {
            let task = rows::task_from_row(row)?.task;
            created.insert(stored_ident(&task), task);
        }
    }
    Ok(created)
}

/// The stored tasks that hold the `taken` keys (each a key and a tenant),
/// with their tries, by key and tenant.
async fn read_taken<C: GenericClient>(
    client: &C,
    by_keys: &tokio_postgres::Statement,
    taken: &[(&str, &str)],
) -> Result<HashMap<(String, String), Task>, StoreError> {
    if taken.is_empty() {
        return Ok(HashMap::new());
    }
    let (keys, tenants): (Vec<&str>, Vec<&str>) = taken.iter().copied().unzip();
    let mut existing: Vec<Task> = client
        .query(by_keys, &[&keys, &tenants])
        .await
        .map_err(db)?
        .iter()
        .map(|row| rows::task_from_row(row).map(|s| s.task))
        .collect::<Result<_, _>>()?;
    read_ops::fill_attempts(client, &mut existing).await?;
    Ok(existing
        .into_iter()
        .map(|t| (stored_ident(&t), t))
        .collect())
}

/// A chunk of a batch as one array per column, for `unnest`.
pub(super) struct BatchColumns<'a> {
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
    topics: Vec<Option<&'a str>>,
    event_ids: Vec<Option<&'a str>>,
    subscriptions: Vec<Option<&'a str>>,
    priorities: Vec<i32>,
    flow_keys: Vec<&'a str>,
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
            topics: Vec::with_capacity(chunk.len()),
            event_ids: Vec::with_capacity(chunk.len()),
            subscriptions: Vec::with_capacity(chunk.len()),
            priorities: Vec::with_capacity(chunk.len()),
            flow_keys: Vec::with_capacity(chunk.len()),
        };
        for &i in chunk {
            let task = &tasks[i];
            let (schedule_at, delay_ms) = task.first_run().to_parts();
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
            let link = task.topic_link();
            columns.topics.push(link.map(|l| l.topic.as_str()));
            columns.event_ids.push(link.map(|l| l.event_id.as_str()));
            columns
                .subscriptions
                .push(link.map(|l| l.subscription.as_str()));
            columns.priorities.push(i32::from(task.priority()));
            columns
                .flow_keys
                .push(tc_model::flow_key::stored_key(task.flow_key()));
        }
        Ok(columns)
    }
}
