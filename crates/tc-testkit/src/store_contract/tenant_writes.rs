//! Writes made for a tenant: a write made with a tenant's key
//! ([`tc_model::tenant::Acting`]) is refused whole once the key is revoked
//! or its tenant deleted, checked inside the write itself (a request's
//! body may arrive long after its caller was resolved); a re-created
//! tenant inherits nothing; and a retry of a tenant's task counts against
//! the tenant's `max_pending` and its submit rate's allowance, as a submit
//! does, alone or in bulk. A bulk retry also leaves the tasks whose urls the
//! allow-list no longer admits, judged in the same transactions.

use std::collections::BTreeMap;

use tc_model::store::{BulkAction, BulkRequest, ListQuery, StoreError, TaskFilter, TaskStore};
use tc_model::tenant::key::KeyHash;
use tc_model::tenant::quota::RetryQuota;
use tc_model::tenant::{Acting, TenantUpdate};
use tc_model::{NewTask, State, Task};

use super::Verdict;
use super::check::*;
use tc_model::tenant::Scope;

/// `key` of `tenant`, submitted with its key `key_id`.
fn keyed(tenant: &str, key_id: &str, key: &str) -> NewTask {
    task_for(URL, key)
        .with_tenant(Some(tenant.to_owned()), None)
        .with_key(key_id.to_owned())
}

/// Creates `tenant` (defaults and `update`) with the keys `key_ids`.
async fn tenant_with_keys<S: TaskStore>(
    store: &S,
    tenant: &str,
    update: TenantUpdate,
    key_ids: &[&str],
) -> Result<(), String> {
    store
        .create_tenant(tenant.to_owned(), update, at(0))
        .await
        .step("create_tenant")?;
    for id in key_ids {
        store
            .create_api_key(
                tenant.to_owned(),
                (*id).to_owned(),
                KeyHash::of(&format!("tck_{tenant}_{id}")),
                at(0),
            )
            .await
            .step("create_api_key")?;
    }
    Ok(())
}

/// The tenant's tasks as listed.
fn of(tenant: &str) -> TaskFilter {
    TaskFilter {
        tenant: Some(tenant.to_owned()),
        ..TaskFilter::default()
    }
}

/// Every task `filter` covers (one page: these scenarios make few).
async fn listed<S: TaskStore>(store: &S, filter: TaskFilter) -> Result<Vec<Task>, String> {
    let page = store
        .list(
            ListQuery {
                filter,
                limit: 1000,
                ..ListQuery::default()
            },
            Scope::Admin,
        )
        .await
        .step("list")?;
    Ok(page.tasks)
}

/// A revoked key's submit, batch, retry and bulk action are refused and
/// write nothing (a resubmit of a key it created included); the tenant's
/// other key still writes; a key of a deleted tenant writes nothing, and
/// the name created again starts empty; a key reaches no other tenant's
/// task by id.
pub async fn a_write_made_with_a_key_gone_is_refused_whole<S: TaskStore>(store: S) -> Verdict {
    tenant_with_keys(&store, "a", TenantUpdate::default(), &["k1", "k2"]).await?;
    let first = create(&store, keyed("a", "k1", "x-1"), at(1)).await?;
    store
        .revoke_api_key("a".into(), "k1".into())
        .await
        .step("revoke")?;
    ensure_eq!(
        store.submit(keyed("a", "k1", "x-2"), at(2)).await,
        Err(StoreError::CredentialGone),
        "a submit with the revoked key"
    );
    ensure_eq!(
        store.submit(keyed("a", "k1", "x-1"), at(2)).await,
        Err(StoreError::CredentialGone),
        "a resubmit of its own task with the revoked key"
    );
    ensure_eq!(
        store
            .submit_many(
                vec![keyed("a", "k1", "x-3"), keyed("a", "k1", "x-4")],
                at(2)
            )
            .await,
        Err(StoreError::CredentialGone),
        "a batch with the revoked key"
    );
    ensure_eq!(
        listed(&store, of("a")).await?.len(),
        1,
        "a's tasks after the refusals"
    );
    store
        .cancel(first.id, Scope::Admin, at(3))
        .await
        .step("cancel")?;
    let gone = Some(Acting::new("a", "k1"));
    let live = Some(Acting::new("a", "k2"));
    ensure_eq!(
        store.retry(first.id, at(4), at(4), gone.clone()).await,
        Err(StoreError::CredentialGone),
        "a retry with the revoked key"
    );
    ensure_eq!(
        get(&store, first.id).await?.state,
        State::Canceled,
        "the task after the refused retry"
    );
    let bulk = |acting: Option<Acting>| BulkRequest {
        acting,
        ..BulkRequest::new(BulkAction::Delete, of("a"), at(5))
    };
    ensure_eq!(
        store.bulk(bulk(gone)).await,
        Err(StoreError::CredentialGone),
        "a bulk action with the revoked key"
    );
    ensure_eq!(
        get(&store, first.id).await?.state,
        State::Canceled,
        "the task after the refused bulk delete"
    );
    let retried = store
        .retry(first.id, at(6), at(6), live.clone())
        .await
        .step("retry with the live key")?;
    ensure_eq!(retried.state, State::Pending, "the live key's retry");
    create(&store, keyed("a", "k2", "x-5"), at(6)).await?;

    // A deleted tenant's keys go with it; its name comes back empty.
    tenant_with_keys(&store, "b", TenantUpdate::default(), &["kb"]).await?;
    store
        .delete_tenant("b".into())
        .await
        .step("delete_tenant")?;
    ensure_eq!(
        store.submit(keyed("b", "kb", "y-1"), at(7)).await,
        Err(StoreError::CredentialGone),
        "a submit with a deleted tenant's key"
    );
    tenant_with_keys(&store, "b", TenantUpdate::default(), &["kb2"]).await?;
    ensure_eq!(
        store.submit(keyed("b", "kb", "y-1"), at(8)).await,
        Err(StoreError::CredentialGone),
        "the old key of a name created again"
    );
    ensure!(
        listed(&store, of("b")).await?.is_empty(),
        "the name created again has tasks"
    );
    ensure_eq!(
        store
            .retry(first.id, at(9), at(9), Some(Acting::new("b", "kb2")))
            .await,
        Err(StoreError::NotFound),
        "another tenant's key retrying a's task by id"
    );
    Ok(())
}

/// With `max_pending: 2`, retries of the tenant's canceled tasks stop at
/// two open tasks: a single retry past it is refused with the limit and
/// changes nothing; a bulk retry applies up to it and counts the rest; a
/// rate's allowance bounds a bulk retry too; tasks without a tenant and
/// another tenant's are not held back.
pub async fn retries_count_against_max_pending_and_the_rate<S: TaskStore>(store: S) -> Verdict {
    let limited = TenantUpdate {
        max_pending: Some(Some(2)),
        ..TenantUpdate::default()
    };
    tenant_with_keys(&store, "t", limited, &["kt"]).await?;
    tenant_with_keys(&store, "free", TenantUpdate::default(), &[]).await?;
    let mut ids = Vec::new();
    for i in 0..4 {
        let task = create(&store, keyed("t", "kt", &format!("r-{i}")), at(1)).await?;
        ids.push(task.id);
    }
    let admin = create(&store, task_for(URL, "admin-1"), at(1)).await?;
    let free = create(
        &store,
        task_for(URL, "free-1").with_tenant(Some("free".into()), None),
        at(1),
    )
    .await?;
    for id in ids.iter().chain([&admin.id, &free.id]) {
        store
            .cancel(*id, Scope::Admin, at(2))
            .await
            .step("cancel")?;
    }
    let acting = Some(Acting::new("t", "kt"));
    for id in &ids[..2] {
        store
            .retry(*id, at(3), at(3), acting.clone())
            .await
            .step("a retry under the limit")?;
    }
    ensure_eq!(
        store.retry(ids[2], at(3), at(3), acting.clone()).await,
        Err(StoreError::QuotaExceeded { limit: 2 }),
        "a third open task under a limit of 2 (the tenant's key)"
    );
    ensure_eq!(
        store.retry(ids[2], at(3), at(3), None).await,
        Err(StoreError::QuotaExceeded { limit: 2 }),
        "a third open task under a limit of 2 (the admin)"
    );
    ensure_eq!(
        get(&store, ids[2]).await?.state,
        State::Canceled,
        "the refused retry's task"
    );
    let outcome = store
        .bulk(BulkRequest::new(
            BulkAction::Retry,
            TaskFilter::default(),
            at(4),
        ))
        .await
        .step("bulk retry at the limit")?;
    ensure_eq!(
        (outcome.matched, outcome.applied, outcome.refused_quota),
        (6, 2, 2),
        "a bulk retry of everything at t's limit: (matched, applied, refused_quota)"
    );
    ensure_eq!(
        outcome.retried_by_tenant,
        BTreeMap::from([("free".to_owned(), 1)]),
        "the retries by tenant"
    );
    ensure_eq!(
        (
            get(&store, admin.id).await?.state,
            get(&store, free.id).await?.state
        ),
        (State::Pending, State::Pending),
        "the admin's and the other tenant's tasks"
    );
    for id in &ids[..2] {
        store
            .cancel(*id, Scope::Admin, at(5))
            .await
            .step("cancel")?;
    }
    // Room for two, the rate allows one.
    let rated = BulkRequest {
        acting: acting.clone(),
        quota: RetryQuota::new(BTreeMap::from([("t".to_owned(), 1)])),
        ..BulkRequest::new(BulkAction::Retry, of("t"), at(6))
    };
    let outcome = store.bulk(rated).await.step("bulk retry under a rate")?;
    ensure_eq!(
        (outcome.applied, outcome.refused_quota),
        (1, 3),
        "a bulk retry with a rate allowance of 1: (applied, refused_quota)"
    );
    ensure_eq!(
        outcome.retried_by_tenant,
        BTreeMap::from([("t".to_owned(), 1)]),
        "the retries by tenant under the rate"
    );
    let open = listed(&store, of("t"))
        .await?
        .into_iter()
        .filter(|task| task.state == State::Pending)
        .count();
    ensure_eq!(open, 1, "t's pending tasks");
    Ok(())
}

/// A bulk retry under an allow-list retries the tasks whose url and
/// callback url it admits and counts the others in `refused_url`, leaving
/// them as they were; without a list every task is retried.
pub async fn a_bulk_retry_leaves_the_tasks_the_allow_list_no_longer_admits<S: TaskStore>(
    store: S,
) -> Verdict {
    let inside = create(&store, task_for("http://a.example:8001/hook", "in"), at(1)).await?;
    let outside = create(&store, task_for("http://b.example:8002/hook", "out"), at(1)).await?;
    let callback = task_for("http://a.example:8001/hook", "cb").with_callback(
        tc_model::callback::Callback::new(
            "http://b.example:8002/cb".into(),
            tc_model::callback::CallbackOn::default(),
        )
        .map_err(|e| format!("callback: {e}"))?,
    );
    let callback = create(&store, callback, at(1)).await?;
    for id in [inside.id, outside.id, callback.id] {
        store.cancel(id, Scope::Admin, at(2)).await.step("cancel")?;
    }
    let listed = BulkRequest {
        allowed_urls: vec!["http://a.example:8001/".to_owned()],
        ..BulkRequest::new(BulkAction::Retry, TaskFilter::default(), at(3))
    };
    let outcome = store.bulk(listed).await.step("bulk retry under a list")?;
    ensure_eq!(
        (outcome.matched, outcome.applied, outcome.refused_url),
        (3, 1, 2),
        "(matched, applied, refused_url)"
    );
    ensure_eq!(
        (
            get(&store, inside.id).await?.state,
            get(&store, outside.id).await?.state,
            get(&store, callback.id).await?.state
        ),
        (State::Pending, State::Canceled, State::Canceled),
        "the states after the bulk retry"
    );
    let outcome = store
        .bulk(BulkRequest::new(
            BulkAction::Retry,
            TaskFilter::default(),
            at(4),
        ))
        .await
        .step("bulk retry without a list")?;
    ensure_eq!(
        (outcome.applied, outcome.refused_url),
        (2, 0),
        "without a list: (applied, refused_url)"
    );
    Ok(())
}
