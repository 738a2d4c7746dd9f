//! Tenants: tenants kept field by field (their signing secrets
//! too), their settings alone as the worker reads them, deleted only when they
//! have no task, idempotency keys unique per tenant, the tenant seen by
//! every read and write path, the `max_pending` quota, API keys found by
//! hash until revoked, callbacks in their parent's tenant, and the claim's
//! share of a destination between tenants by weight.

use std::collections::BTreeMap;

use tc_model::callback::{Callback, CallbackOn};
use tc_model::destination::{ClaimGate, DestinationUpdate};
use tc_model::signing::SigningSecrets;
use tc_model::store::{
    BulkAction, BulkRequest, ListQuery, Page, StoreError, TaskFilter, TaskStore,
};
use tc_model::tenant::key::{ApiKey, KeyHash, KeyOwner};
use tc_model::tenant::{Tenant, TenantDetail, TenantGate, TenantSettings, TenantUpdate};
use tc_model::{NewTask, State, Task, TaskId, Timestamp};

use super::Verdict;
use super::check::*;
use tc_model::tenant::Scope;

/// A task of `tenant` (`None`: the admin's) for `url`, under `limit`.
fn task_of(tenant: Option<&str>, url: &str, key: &str, limit: Option<u64>) -> NewTask {
    task_for(url, key).with_tenant(tenant.map(str::to_owned), limit)
}

/// Creates the tenant `name` with `update` applied to the defaults.
async fn tenant<S: TaskStore>(
    store: &S,
    name: &str,
    update: TenantUpdate,
    now: Timestamp,
) -> Result<Tenant, String> {
    store
        .create_tenant(name.to_owned(), update, now)
        .await
        .step("create_tenant")
}

/// A tenant's detail as read back, or the error.
async fn detail<S: TaskStore>(store: &S, name: &str) -> Result<TenantDetail, StoreError> {
    store.tenant(name.to_owned()).await
}

/// Submits `n` tasks of `tenant` for `url` at `now` in one batch (keys
/// `{prefix}-0`, ...), oldest first; each must be new.
async fn create_of<S: TaskStore>(
    store: &S,
    tenant: Option<&str>,
    url: &str,
    prefix: &str,
    n: usize,
    now: Timestamp,
) -> Result<Vec<TaskId>, String> {
    let batch = (0..n)
        .map(|i| task_of(tenant, url, &format!("{prefix}-{i}"), None))
        .collect();
    let mut ids = Vec::with_capacity(n);
    for result in store.submit_many(batch, now).await.step("submit_many")? {
        let submitted = result.map_err(|e| format!("submit of {prefix}: {e}"))?;
        ensure!(submitted.created, "a new key of {prefix} was not created");
        ids.push(submitted.task.id);
    }
    Ok(ids)
}

/// Every task `filter` covers, paging `limit` at a time.
async fn list_filtered<S: TaskStore>(
    store: &S,
    filter: TaskFilter,
    limit: usize,
) -> Result<Vec<Task>, String> {
    let mut all = Vec::new();
    let mut after = None;
    for _ in 0..1_000 {
        let Page { tasks, next } = store
            .list(
                ListQuery {
                    filter: filter.clone(),
                    limit,
                    after,
                    ..ListQuery::default()
                },
                Scope::Admin,
            )
            .await
            .step("list")?;
        ensure!(tasks.len() <= limit, "a page over its limit");
        all.extend(tasks);
        match next {
            Some(cursor) => after = Some(cursor),
            None => return Ok(all),
        }
    }
    Err("listing did not end after 1000 pages".to_owned())
}

/// Tenants read back as created, by name and in the list (in name order,
/// with counts and keys); a second of one name is refused; an update
/// changes only what it names; unknown names are not found; a deleted
/// tenant is gone and its name free.
pub async fn tenants_are_kept_field_by_field<S: TaskStore>(store: S) -> Verdict {
    ensure_eq!(
        store.tenants().await.step("tenants")?,
        vec![],
        "a fresh store's tenants"
    );
    let beta = tenant(
        &store,
        "beta",
        TenantUpdate {
            weight: Some(3),
            max_pending: Some(Some(10)),
            submit_rate_per_s: Some(Some(2.5)),
            submit_burst: Some(Some(7)),
            signing_secrets: Some(two_secrets()),
        },
        at(0),
    )
    .await?;
    ensure_eq!(
        beta,
        Tenant {
            name: "beta".into(),
            settings: TenantSettings {
                weight: 3,
                max_pending: Some(10),
                submit_rate_per_s: Some(2.5),
                submit_burst: Some(7),
                signing_secrets: two_secrets(),
            },
            created_at: at(0),
            updated_at: at(0),
        },
        "create's answer, every field set"
    );
    let alpha = tenant(&store, "alpha", TenantUpdate::default(), at(1)).await?;
    ensure_eq!(
        alpha.settings,
        TenantSettings::default(),
        "a tenant created with no settings has the defaults"
    );
    let again = store
        .create_tenant("beta".into(), TenantUpdate::default(), at(2))
        .await;
    ensure_eq!(
        again,
        Err(StoreError::Exists),
        "a second tenant of one name"
    );
    let plain = |tenant: &Tenant| TenantDetail {
        tenant: tenant.clone(),
        pending: 0,
        running: 0,
        keys: Vec::new(),
    };
    ensure_eq!(
        detail(&store, "beta").await,
        Ok(plain(&beta)),
        "beta read back, unchanged by the refused create"
    );
    ensure_eq!(
        store.tenants().await.step("tenants")?,
        vec![plain(&alpha), plain(&beta)],
        "the list, in name order"
    );
    let updated = store
        .update_tenant(
            "beta".into(),
            TenantUpdate {
                max_pending: Some(None),
                submit_burst: Some(None),
                signing_secrets: Some(one_secret()),
                ..TenantUpdate::default()
            },
            at(5),
        )
        .await
        .step("update_tenant")?;
    let want = Tenant {
        settings: TenantSettings {
            weight: 3,
            max_pending: None,
            submit_rate_per_s: Some(2.5),
            submit_burst: None,
            signing_secrets: one_secret(),
        },
        updated_at: at(5),
        ..beta.clone()
    };
    ensure_eq!(updated, want, "update's answer: only the named fields");
    ensure_eq!(
        detail(&store, "beta").await,
        Ok(plain(&want)),
        "the update read back"
    );
    let nope = "nope".to_owned();
    ensure_eq!(
        store
            .update_tenant(nope.clone(), TenantUpdate::default(), at(6))
            .await,
        Err(StoreError::NotFound),
        "update of an unknown tenant"
    );
    ensure_eq!(
        detail(&store, &nope).await,
        Err(StoreError::NotFound),
        "an unknown tenant"
    );
    ensure_eq!(
        store.delete_tenant(nope).await,
        Err(StoreError::NotFound),
        "delete of an unknown tenant"
    );
    store
        .delete_tenant("alpha".into())
        .await
        .step("delete_tenant")?;
    ensure_eq!(
        detail(&store, "alpha").await,
        Err(StoreError::NotFound),
        "a deleted tenant"
    );
    ensure_eq!(
        store.tenants().await.step("tenants")?,
        vec![plain(&want)],
        "the list after a delete"
    );
    let reborn = tenant(&store, "alpha", TenantUpdate::default(), at(9)).await?;
    ensure_eq!(reborn.created_at, at(9), "a deleted tenant's name is free");
    let cleared = store
        .update_tenant(
            "beta".into(),
            TenantUpdate {
                signing_secrets: Some(SigningSecrets::default()),
                ..TenantUpdate::default()
            },
            at(10),
        )
        .await
        .step("update_tenant")?;
    ensure_eq!(
        detail(&store, "beta").await.map(|d| d.tenant.settings),
        Ok(cleared.settings.clone()),
        "the secrets cleared, read back"
    );
    ensure_eq!(
        cleared.settings.signing_secrets,
        SigningSecrets::default(),
        "an empty list clears the secrets"
    );
    Ok(())
}

/// Two signing secrets, as while one is rotated.
fn two_secrets() -> SigningSecrets {
    SigningSecrets::parse(&[
        "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
        "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
    ])
    .expect("valid fixture secrets")
}

/// One signing secret.
fn one_secret() -> SigningSecrets {
    SigningSecrets::parse(&["whsec_MDEyMzQ1Njc4OWFiY2RlZmdoaWprbG1ub3Bx"])
        .expect("a valid fixture secret")
}

/// The worker's light read: each stored tenant's settings by name (its
/// weight and its signing secrets), as created and as updated (a tenant
/// with tasks and keys is there with its settings alone); a deleted tenant
/// is gone from it; none stored, it is empty.
pub async fn tenant_settings_are_each_tenant_s_own<S: TaskStore>(store: S) -> Verdict {
    let weights = |of: &[(&str, u32)]| -> BTreeMap<String, u32> {
        of.iter()
            .map(|(name, w)| ((*name).to_owned(), *w))
            .collect()
    };
    let read = async || -> Result<BTreeMap<String, TenantSettings>, String> {
        store.tenant_settings().await.step("tenant_settings")
    };
    let weights_of = |all: &BTreeMap<String, TenantSettings>| -> BTreeMap<String, u32> {
        all.iter().map(|(n, s)| (n.clone(), s.weight)).collect()
    };
    ensure_eq!(read().await?, BTreeMap::new(), "a fresh store's settings");
    let weighted = |weight: u32| TenantUpdate {
        weight: Some(weight),
        ..TenantUpdate::default()
    };
    tenant(
        &store,
        "beta",
        TenantUpdate {
            signing_secrets: Some(two_secrets()),
            ..weighted(3)
        },
        at(0),
    )
    .await?;
    tenant(&store, "alpha", TenantUpdate::default(), at(1)).await?;
    tenant(&store, "gamma", weighted(1_000), at(2)).await?;
    // Tasks and a key change nothing in the settings.
    create(&store, task_of(Some("beta"), URL, "one", None), at(3)).await?;
    store
        .create_api_key("beta".into(), "key_w1".into(), KeyHash::of("tck_w1"), at(3))
        .await
        .step("create_api_key")?;
    let default = TenantSettings::default().weight;
    let all = read().await?;
    ensure_eq!(
        weights_of(&all),
        weights(&[("alpha", default), ("beta", 3), ("gamma", 1_000)]),
        "the weights as created"
    );
    ensure_eq!(
        all.get("beta").map(|s| s.signing_secrets.clone()),
        Some(two_secrets()),
        "beta's secrets as created"
    );
    ensure_eq!(
        all.get("alpha").map(|s| s.signing_secrets.len()),
        Some(0),
        "alpha has no secrets"
    );
    store
        .update_tenant("alpha".into(), weighted(7), at(4))
        .await
        .step("update_tenant")?;
    // An update that names no weight nor secret keeps them.
    store
        .update_tenant(
            "beta".into(),
            TenantUpdate {
                max_pending: Some(Some(5)),
                ..TenantUpdate::default()
            },
            at(4),
        )
        .await
        .step("update_tenant")?;
    store
        .update_tenant(
            "gamma".into(),
            TenantUpdate {
                signing_secrets: Some(one_secret()),
                ..TenantUpdate::default()
            },
            at(4),
        )
        .await
        .step("update_tenant")?;
    let all = read().await?;
    ensure_eq!(
        weights_of(&all),
        weights(&[("alpha", 7), ("beta", 3), ("gamma", 1_000)]),
        "the weights after the updates"
    );
    ensure_eq!(
        (
            all.get("beta").map(|s| s.signing_secrets.clone()),
            all.get("gamma").map(|s| s.signing_secrets.clone())
        ),
        (Some(two_secrets()), Some(one_secret())),
        "the secrets after the updates"
    );
    store
        .delete_tenant("gamma".into())
        .await
        .step("delete_tenant")?;
    ensure_eq!(
        weights_of(&read().await?),
        weights(&[("alpha", 7), ("beta", 3)]),
        "the weights after a delete"
    );
    Ok(())
}

/// A tenant is not deleted while any of its tasks exists, terminal or not;
/// its detail counts its pending and running tasks. Once its tasks are
/// deleted, so can it be.
pub async fn a_tenant_with_tasks_cannot_be_deleted<S: TaskStore>(store: S) -> Verdict {
    tenant(&store, "a", TenantUpdate::default(), at(0)).await?;
    let first = create(&store, task_of(Some("a"), URL, "one", None), at(0)).await?;
    let second = create(&store, task_of(Some("a"), URL, "two", None), at(1_000)).await?;
    // An admin task is nobody's: it does not count for "a".
    create(&store, task_of(None, URL, "admin", None), at(1_000)).await?;
    let running = claim_only(&store, first.id, at(10), LEASE).await?;
    let counts = detail(&store, "a").await.step("tenant")?;
    ensure_eq!(
        (counts.pending, counts.running),
        (1, 1),
        "a's pending and running"
    );
    ensure_eq!(
        store.delete_tenant("a".into()).await,
        Err(StoreError::NotEmpty),
        "delete of a tenant with open tasks"
    );
    store
        .complete(running.id, running.attempt, success(200), at(20))
        .await
        .step("complete")?;
    store
        .cancel(second.id, Scope::Admin, at(20))
        .await
        .step("cancel")?;
    let counts = detail(&store, "a").await.step("tenant")?;
    ensure_eq!(
        (counts.pending, counts.running),
        (0, 0),
        "a's counts once its tasks ended"
    );
    ensure_eq!(
        store.delete_tenant("a".into()).await,
        Err(StoreError::NotEmpty),
        "delete of a tenant with finished tasks"
    );
    store.delete(first.id, Scope::Admin).await.step("delete")?;
    ensure_eq!(
        store.delete_tenant("a".into()).await,
        Err(StoreError::NotEmpty),
        "delete of a tenant with one task left"
    );
    store.delete(second.id, Scope::Admin).await.step("delete")?;
    store
        .delete_tenant("a".into())
        .await
        .step("delete_tenant of an empty tenant")?;
    ensure_eq!(
        detail(&store, "a").await,
        Err(StoreError::NotFound),
        "the deleted tenant"
    );
    Ok(())
}

/// One key in two tenants is two tasks, and the admin's a third; the same
/// key in the same tenant is the same task (by submit and by a batch), and
/// with another payload a conflict.
pub async fn idempotency_keys_are_per_tenant<S: TaskStore>(store: S) -> Verdict {
    tenant(&store, "a", TenantUpdate::default(), at(0)).await?;
    tenant(&store, "b", TenantUpdate::default(), at(0)).await?;
    let of_a = create(&store, task_of(Some("a"), URL, "k", None), at(1)).await?;
    let of_b = create(&store, task_of(Some("b"), URL, "k", None), at(2)).await?;
    let admin = create(&store, task_of(None, URL, "k", None), at(3)).await?;
    ensure!(
        of_a.id != of_b.id && of_b.id != admin.id && of_a.id != admin.id,
        "one key in three tenants must be three tasks"
    );
    for (what, task, want) in [
        ("a's", &of_a, Some("a")),
        ("b's", &of_b, Some("b")),
        ("the admin's", &admin, None),
    ] {
        ensure_eq!(task.tenant.as_deref(), want, "{what} task's tenant");
        ensure_eq!(
            get(&store, task.id).await?.tenant,
            want.map(str::to_owned),
            "{what} task's tenant read back"
        );
        let tenant = want.map(str::to_owned);
        let again = store
            .submit(task_of(want, URL, "k", None), at(10))
            .await
            .step("resubmit")?;
        ensure_eq!(
            (again.task.id, again.created),
            (task.id, false),
            "{what} resubmit"
        );
        let batch = store
            .submit_many(vec![task_of(want, URL, "k", None)], at(11))
            .await
            .step("submit_many")?;
        let batch_ids: Vec<Result<(TaskId, bool), StoreError>> = batch
            .into_iter()
            .map(|r| r.map(|s| (s.task.id, s.created)))
            .collect();
        ensure_eq!(
            batch_ids,
            vec![Ok((task.id, false))],
            "{what} batch resubmit"
        );
        let other = store.submit(task_of(want, URL_B, "k", None), at(12)).await;
        ensure_eq!(
            other.map(|s| s.task.id),
            Err(StoreError::IdempotencyConflict {
                fields: vec!["url"]
            }),
            "{what} key with another payload"
        );
        let filter = TaskFilter {
            idempotency_key: Some("k".into()),
            tenant: tenant.clone(),
            ..TaskFilter::default()
        };
        if tenant.is_some() {
            ensure_eq!(
                ids(&list_filtered(&store, filter, 10).await?),
                vec![task.id],
                "{what} task listed by its key and tenant"
            );
        }
    }
    let by_key = TaskFilter {
        idempotency_key: Some("k".into()),
        ..TaskFilter::default()
    };
    ensure_eq!(
        ids(&list_filtered(&store, by_key, 10).await?),
        vec![of_a.id, of_b.id, admin.id],
        "every task with the key, in creation order"
    );
    Ok(())
}

/// A tenant's tasks carry it on every read; a listing by tenant lists only
/// its tasks, alone or beside a state or a destination, page by page; a
/// bulk action by tenant covers only its tasks, and so counts a dry run.
pub async fn every_read_and_write_path_sees_the_tenant<S: TaskStore>(store: S) -> Verdict {
    tenant(&store, "a", TenantUpdate::default(), at(0)).await?;
    tenant(&store, "b", TenantUpdate::default(), at(0)).await?;
    // Interleaved, so a listing that ignores the tenant is seen: a's tasks
    // on both hosts, b's and the admin's between them.
    let far = at(1_000_000);
    let mut a_on_a = Vec::new();
    let mut a_on_b = Vec::new();
    // a's tasks in creation order.
    let mut a_ids = Vec::new();
    let mut b_all = Vec::new();
    let mut admin = Vec::new();
    for i in 0..4 {
        a_on_a.push(
            create(
                &store,
                task_of(Some("a"), URL_A, &format!("aa{i}"), None),
                far,
            )
            .await?,
        );
        b_all.push(
            create(
                &store,
                task_of(Some("b"), URL_A, &format!("b{i}"), None),
                far,
            )
            .await?,
        );
        a_on_b.push(
            create(
                &store,
                task_of(Some("a"), URL_B, &format!("ab{i}"), None),
                far,
            )
            .await?,
        );
        a_ids.push(a_on_a[i].id);
        a_ids.push(a_on_b[i].id);
        admin.push(create(&store, task_of(None, URL_A, &format!("x{i}"), None), far).await?);
    }
    let canceled_a = store
        .cancel(a_on_a[1].id, Scope::Admin, at(1))
        .await
        .step("cancel")?;
    ensure_eq!(canceled_a.tenant.as_deref(), Some("a"), "cancel's answer");
    store
        .cancel(b_all[2].id, Scope::Admin, at(1))
        .await
        .step("cancel")?;
    let got = get(&store, a_on_b[0].id).await?;
    ensure_eq!(got.tenant.as_deref(), Some("a"), "get shows the tenant");
    ensure_eq!(
        get(&store, admin[0].id).await?.tenant,
        None,
        "an admin task has no tenant"
    );

    let of = |tenant: &str| TaskFilter {
        tenant: Some(tenant.to_owned()),
        ..TaskFilter::default()
    };
    // (what, filter, page size, the tasks it must list in creation order)
    let cases: Vec<(&str, TaskFilter, usize, Vec<TaskId>)> = vec![
        ("tenant a, pages of 3", of("a"), 3, a_ids.clone()),
        ("tenant a, one page", of("a"), 100, a_ids.clone()),
        ("tenant b, pages of 1", of("b"), 1, ids(&b_all)),
        (
            "tenant a, canceled",
            TaskFilter {
                state: Some(State::Canceled),
                ..of("a")
            },
            2,
            vec![a_on_a[1].id],
        ),
        (
            "tenant a, pending, pages of 2",
            TaskFilter {
                state: Some(State::Pending),
                ..of("a")
            },
            2,
            a_ids
                .iter()
                .copied()
                .filter(|id| *id != a_on_a[1].id)
                .collect(),
        ),
        (
            "tenant a on host B, pages of 3",
            TaskFilter {
                destination: Some(DEST_B.to_owned()),
                ..of("a")
            },
            3,
            ids(&a_on_b),
        ),
        (
            "tenant b on host B",
            TaskFilter {
                destination: Some(DEST_B.to_owned()),
                ..of("b")
            },
            3,
            vec![],
        ),
        ("an unknown tenant", of("zz"), 10, vec![]),
    ];
    for (what, filter, limit, want) in cases {
        let listed = list_filtered(&store, filter, limit).await?;
        ensure_eq!(ids(&listed), want, "{what}");
    }

    let dry = store
        .bulk(BulkRequest::new(BulkAction::Cancel, of("b"), at(2)).counting_only())
        .await
        .step("dry run")?;
    ensure_eq!(
        (dry.matched, dry.applied, dry.sample.clone()),
        (4, 0, ids(&b_all)),
        "a dry run by tenant counts its tasks alone"
    );
    let done = store
        .bulk(BulkRequest::new(BulkAction::Cancel, of("b"), at(3)))
        .await
        .step("bulk cancel")?;
    ensure_eq!(
        (done.matched, done.applied),
        (4, 3),
        "a bulk cancel by tenant (one was canceled already)"
    );
    for task in &b_all {
        ensure_eq!(
            get(&store, task.id).await?.state,
            State::Canceled,
            "b's task after the bulk cancel"
        );
    }
    for task in a_on_a.iter().chain(&a_on_b).chain(&admin) {
        let want = if task.id == a_on_a[1].id {
            State::Canceled
        } else {
            State::Pending
        };
        ensure_eq!(
            get(&store, task.id).await?.state,
            want,
            "a task of another tenant after b's bulk cancel"
        );
    }
    Ok(())
}

/// A submit is refused once its tenant has `max_pending` tasks pending or
/// running, alone or item by item in a batch (counting the batch's own new
/// tasks), and nothing is written for it; a key the tenant already has
/// still answers with its task; finished tasks free room; other tenants
/// and the admin are not held by it.
pub async fn a_submit_past_max_pending_is_refused_and_an_existing_key_still_answers<
    S: TaskStore,
>(
    store: S,
) -> Verdict {
    tenant(&store, "a", TenantUpdate::default(), at(0)).await?;
    tenant(&store, "b", TenantUpdate::default(), at(0)).await?;
    let limited = |key: &str, limit: u64| task_of(Some("a"), URL, key, Some(limit));
    let q1 = create(&store, limited("q1", 2), at(0)).await?;
    create(&store, limited("q2", 2), at(0)).await?;
    ensure_eq!(
        store.submit(limited("q3", 2), at(1)).await,
        Err(StoreError::QuotaExceeded { limit: 2 }),
        "a third task under a limit of 2"
    );
    let again = store
        .submit(limited("q1", 2), at(1))
        .await
        .step("resubmit")?;
    ensure_eq!(
        (again.task.id, again.created),
        (q1.id, false),
        "a resubmit of an existing key at the limit"
    );
    let conflict = store
        .submit(task_of(Some("a"), URL_B, "q1", Some(2)), at(1))
        .await;
    ensure_eq!(
        conflict.map(|s| s.task.id),
        Err(StoreError::IdempotencyConflict {
            fields: vec!["url"]
        }),
        "an existing key with another payload at the limit"
    );
    create(&store, task_of(Some("b"), URL, "q3", Some(2)), at(1)).await?;
    create(&store, task_of(None, URL, "q3", None), at(1)).await?;
    let listed = list_filtered(
        &store,
        TaskFilter {
            tenant: Some("a".into()),
            ..TaskFilter::default()
        },
        10,
    )
    .await?;
    ensure_eq!(listed.len(), 2, "a's tasks after the refusal");

    store
        .cancel(q1.id, Scope::Admin, at(2))
        .await
        .step("cancel")?;
    create(&store, limited("q3", 2), at(2)).await?;

    // a has q2 and q3 open; a batch under a limit of 3.
    let batch = store
        .submit_many(
            vec![
                limited("q4", 3),
                limited("q2", 3),
                limited("q5", 3),
                limited("q1", 3),
                limited("q6", 3),
            ],
            at(3),
        )
        .await
        .step("submit_many")?;
    let answers: Vec<Result<(String, bool), StoreError>> = batch
        .into_iter()
        .map(|r| r.map(|s| (s.task.idempotency_key, s.created)))
        .collect();
    ensure_eq!(
        answers,
        vec![
            Ok(("q4".to_owned(), true)),
            Ok(("q2".to_owned(), false)),
            Err(StoreError::QuotaExceeded { limit: 3 }),
            Ok(("q1".to_owned(), false)),
            Err(StoreError::QuotaExceeded { limit: 3 }),
        ],
        "a batch's answers, item by item (q1, canceled, still answers)"
    );
    let of_a = TaskFilter {
        tenant: Some("a".into()),
        ..TaskFilter::default()
    };
    let keys: Vec<String> = list_filtered(&store, of_a.clone(), 10)
        .await?
        .into_iter()
        .map(|t| t.idempotency_key)
        .collect();
    ensure_eq!(
        keys,
        vec!["q1", "q2", "q3", "q4"],
        "a's tasks after the batch: nothing written for a refused item"
    );

    // Running tasks count as much as pending ones.
    let running = claim(&store, 100, at(10), ClaimGate::default()).await?;
    ensure!(!running.is_empty(), "the claim took nothing");
    ensure_eq!(
        store.submit(limited("q7", 3), at(11)).await,
        Err(StoreError::QuotaExceeded { limit: 3 }),
        "a submit while a's tasks run"
    );
    let one = running
        .iter()
        .find(|t| t.tenant.as_deref() == Some("a"))
        .ok_or("the claim took none of a's tasks")?;
    store
        .complete(one.id, one.attempt, success(200), at(12))
        .await
        .step("complete")?;
    create(&store, limited("q7", 3), at(13)).await?;
    Ok(())
}

/// A key is found by its hash, with its tenant as stored now, until it is
/// revoked (by its own tenant only) or its tenant deleted; a tenant's
/// detail lists its keys oldest first without secrets; a touch never
/// moves `last_used_at` backwards.
pub async fn api_keys_are_found_by_hash_until_revoked<S: TaskStore>(store: S) -> Verdict {
    let a = tenant(&store, "a", TenantUpdate::default(), at(0)).await?;
    tenant(&store, "b", TenantUpdate::default(), at(0)).await?;
    let (h1, h2, h3) = (
        KeyHash::of("tck_one"),
        KeyHash::of("tck_two"),
        KeyHash::of("tck_three"),
    );
    ensure_eq!(
        store
            .create_api_key("nope".into(), "key_00".into(), h1, at(1))
            .await,
        Err(StoreError::NotFound),
        "a key for an unknown tenant"
    );
    let k1 = store
        .create_api_key("a".into(), "key_01".into(), h1, at(1))
        .await
        .step("create_api_key")?;
    ensure_eq!(
        k1,
        ApiKey {
            id: "key_01".into(),
            created_at: at(1),
            last_used_at: None,
        },
        "create_api_key's answer"
    );
    let k2 = store
        .create_api_key("a".into(), "key_02".into(), h2, at(2))
        .await
        .step("create_api_key")?;
    store
        .create_api_key("b".into(), "key_03".into(), h3, at(3))
        .await
        .step("create_api_key")?;
    ensure_eq!(
        detail(&store, "a").await.step("tenant")?.keys,
        vec![k1.clone(), k2.clone()],
        "a's keys, oldest first"
    );
    let found = store.api_key(h1).await.step("api_key")?;
    ensure_eq!(
        found,
        Some(KeyOwner {
            key_id: "key_01".into(),
            hash: h1,
            tenant: a.clone(),
        }),
        "a key found by its hash"
    );
    ensure_eq!(
        store.api_key(KeyHash::of("tck_unknown")).await,
        Ok(None),
        "an unknown hash"
    );
    let changed = store
        .update_tenant(
            "a".into(),
            TenantUpdate {
                weight: Some(9),
                ..TenantUpdate::default()
            },
            at(4),
        )
        .await
        .step("update_tenant")?;
    ensure_eq!(
        store.api_key(h1).await.step("api_key")?.map(|o| o.tenant),
        Some(changed),
        "the key's tenant as stored now"
    );

    // (touched at, last_used_at after it)
    for (touch, want) in [(100, 100), (50, 100), (100, 100), (200, 200)] {
        store
            .touch_api_key("key_01".into(), at(touch))
            .await
            .step("touch_api_key")?;
        let keys = detail(&store, "a").await.step("tenant")?.keys;
        ensure_eq!(
            keys.first().map(|k| k.last_used_at),
            Some(Some(at(want))),
            "last_used_at after a touch at {touch}"
        );
        ensure_eq!(
            keys.get(1).map(|k| k.last_used_at),
            Some(None),
            "the other key is untouched"
        );
    }

    ensure_eq!(
        store.revoke_api_key("b".into(), "key_01".into()).await,
        Err(StoreError::NotFound),
        "a revoke of another tenant's key"
    );
    ensure!(
        store.api_key(h1).await.step("api_key")?.is_some(),
        "a key survives another tenant's revoke"
    );
    store
        .revoke_api_key("a".into(), "key_01".into())
        .await
        .step("revoke_api_key")?;
    ensure_eq!(store.api_key(h1).await, Ok(None), "a revoked key");
    ensure_eq!(
        store.revoke_api_key("a".into(), "key_01".into()).await,
        Err(StoreError::NotFound),
        "a second revoke"
    );
    ensure_eq!(
        detail(&store, "a").await.step("tenant")?.keys,
        vec![k2],
        "a's keys after the revoke"
    );

    store
        .delete_tenant("a".into())
        .await
        .step("delete_tenant")?;
    ensure_eq!(store.api_key(h2).await, Ok(None), "a deleted tenant's key");
    ensure!(
        store.api_key(h3).await.step("api_key")?.is_some(),
        "another tenant's key survives the delete"
    );
    tenant(&store, "a", TenantUpdate::default(), at(9)).await?;
    ensure_eq!(
        detail(&store, "a").await.step("tenant")?.keys,
        vec![],
        "a tenant made again has none of the old keys"
    );
    Ok(())
}

/// A tenant's task's callback is the tenant's, made even when the admin
/// holds a task with the callback's key; an admin task's callback is the
/// admin's.
pub async fn a_callback_belongs_to_its_parent_s_tenant<S: TaskStore>(store: S) -> Verdict {
    const CALLBACK_URL: &str = "http://callbacks.example:9/done";
    set(
        &store,
        "callbacks.example:9",
        DestinationUpdate {
            paused: Some(true),
            ..DestinationUpdate::default()
        },
        at(0),
    )
    .await?;
    tenant(&store, "a", TenantUpdate::default(), at(0)).await?;
    let callback = || {
        Callback::new(
            CALLBACK_URL.to_owned(),
            CallbackOn::parse(["success"]).unwrap(),
        )
        .unwrap()
    };
    for (what, owner) in [("a tenant's", Some("a")), ("the admin's", None)] {
        let parent = create(
            &store,
            task_of(owner, URL, &format!("parent-{what}"), owner.map(|_| 1))
                .with_callback(callback()),
            at(0),
        )
        .await?;
        // The admin already has a task with the key of a's callback: a's
        // callback is made in a all the same.
        let decoy = match owner {
            Some(_) => Some(
                create(
                    &store,
                    task_of(None, URL_B, &format!("callback:{}", parent.id), None),
                    at(1_000_000),
                )
                .await?
                .id,
            ),
            None => None,
        };
        let running = claim_only(&store, parent.id, at(10), LEASE).await?;
        store
            .complete(running.id, running.attempt, success(200), at(20))
            .await
            .step("complete")?;
        let parent = get(&store, parent.id).await?;
        let Some(made) = parent.callback_task_id else {
            return Err(format!("{what} parent got no callback"));
        };
        let made = get(&store, made).await?;
        ensure_eq!(
            made.callback_of,
            Some(parent.id),
            "{what} callback's parent"
        );
        ensure_eq!(made.tenant.as_deref(), owner, "{what} callback's tenant");
        ensure_eq!(
            made.idempotency_key,
            format!("callback:{}", parent.id),
            "{what} callback's key"
        );
        ensure!(
            Some(made.id) != decoy,
            "{what} callback is the admin's task with its key"
        );
    }
    Ok(())
}

/// With tenants in the claim's gate, each destination's take is shared
/// between the tenants with due tasks there by weight and by their calls
/// in flight on the node (the admin's tasks count as one more tenant, of
/// weight 1, as does a tenant the gate gives no weight), each tenant's
/// oldest first; a destination's `max_in_flight` still holds overall.
pub async fn the_claim_shares_a_destination_between_tenants_by_weight<S: TaskStore>(
    store: S,
) -> Verdict {
    for name in ["a", "b", "c"] {
        tenant(&store, name, TenantUpdate::default(), at(0)).await?;
    }
    // (what, destination cap, claim size, weights, in flight by tenant,
    //  backlog by tenant ("" the admin's), tasks it must take by tenant)
    type Case<'a> = (
        &'a str,
        Option<u32>,
        usize,
        &'a [(&'a str, u32)],
        &'a [(&'a str, usize)],
        &'a [(&'a str, usize)],
        &'a [(&'a str, usize)],
    );
    let cases: &[Case] = &[
        (
            "equal weights: an equal split",
            None,
            8,
            &[("a", 1), ("b", 1)],
            &[],
            &[("a", 10), ("b", 10)],
            &[("a", 4), ("b", 4)],
        ),
        (
            "weights 3 to 1: 6 and 2 of 8",
            None,
            8,
            &[("a", 3), ("b", 1)],
            &[],
            &[("a", 10), ("b", 10)],
            &[("a", 6), ("b", 2)],
        ),
        (
            "a with 10 in flight: b's 3 first, a the rest",
            None,
            5,
            &[],
            &[("a", 10)],
            &[("a", 10), ("b", 3)],
            &[("a", 2), ("b", 3)],
        ),
        (
            "a with 10 in flight, b with a backlog: every slot to b",
            None,
            4,
            &[],
            &[("a", 10)],
            &[("a", 10), ("b", 10)],
            &[("b", 4)],
        ),
        (
            "the destination's max_in_flight of 5 holds over both",
            Some(5),
            8,
            &[],
            &[],
            &[("a", 10), ("b", 10)],
            &[("a", 3), ("b", 2)],
        ),
        (
            "a of weight 2; c, unknown to the gate, and the admin of weight 1",
            None,
            8,
            &[("a", 2)],
            &[],
            &[("a", 10), ("c", 10), ("", 10)],
            &[("", 2), ("a", 4), ("c", 2)],
        ),
    ];
    for (i, (what, cap, n, weights, in_flight, backlog, want)) in cases.iter().enumerate() {
        // Each case on a host of its own, the earlier cases' tasks canceled.
        let host = format!("share{i}.example:80");
        let url = format!("http://{host}/hook");
        if let Some(cap) = cap {
            set(
                &store,
                &host,
                DestinationUpdate {
                    max_in_flight: Some(Some(*cap)),
                    ..DestinationUpdate::default()
                },
                at(0),
            )
            .await?;
        }
        let mut made: BTreeMap<&str, Vec<TaskId>> = BTreeMap::new();
        // Interleaved, one task of each tenant in turn, so that the oldest
        // tasks overall are not one tenant's.
        let most = backlog.iter().map(|(_, k)| *k).max().unwrap_or(0);
        for j in 0..most {
            for (owner, k) in backlog.iter() {
                if j < *k {
                    let tenant = (!owner.is_empty()).then_some(*owner);
                    let ids =
                        create_of(&store, tenant, &url, &format!("c{i}-{owner}-{j}"), 1, at(0))
                            .await?;
                    made.entry(owner).or_default().extend(ids);
                }
            }
        }
        let gate = ClaimGate {
            tenants: Some(TenantGate {
                weights: weights.iter().map(|(t, w)| ((*t).to_owned(), *w)).collect(),
                in_flight: in_flight
                    .iter()
                    .map(|(t, k)| ((*t).to_owned(), *k))
                    .collect(),
            }),
            ..ClaimGate::default()
        };
        let got = claim(&store, *n, at(10 + i as i64), gate).await?;
        let mut got_ids = ids(&got);
        got_ids.sort();
        let mut want_ids: Vec<TaskId> = want
            .iter()
            .flat_map(|(owner, k)| made.get(owner).map_or(&[][..], |v| &v[..*k]).to_vec())
            .collect();
        want_ids.sort();
        let mut by_tenant: BTreeMap<String, usize> = BTreeMap::new();
        for task in &got {
            *by_tenant
                .entry(task.tenant.clone().unwrap_or_default())
                .or_default() += 1;
        }
        let want_counts: BTreeMap<String, usize> =
            want.iter().map(|(t, k)| ((*t).to_owned(), *k)).collect();
        ensure_eq!(by_tenant, want_counts, "{what}: tasks taken by tenant");
        ensure_eq!(got_ids, want_ids, "{what}: each tenant's oldest");
        store
            .bulk(BulkRequest::new(
                BulkAction::Cancel,
                TaskFilter {
                    destination: Some(host.clone()),
                    ..TaskFilter::default()
                },
                at(20 + i as i64),
            ))
            .await
            .step("bulk cancel")?;
    }
    Ok(())
}
