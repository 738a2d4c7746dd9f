//! A tenant's scope inside the store: a read by id, a listing, a cancel, a
//! retry, a delete and a bulk action made in a tenant's scope reach only that tenant's
//! tasks, whatever the caller asks; another tenant's task (and the admin's
//! own) is as unknown as one that never was, and is left as it was.

use tc_model::store::{BulkAction, BulkRequest, ListQuery, StoreError, TaskFilter, TaskStore};
use tc_model::tenant::key::KeyHash;
use tc_model::tenant::{Acting, Scope, TenantUpdate};
use tc_model::{State, TaskId};

use super::Verdict;
use super::check::*;

/// The tasks of the scenarios: one of `alpha`, one of `beta`, one of no
/// tenant (the admin's), each pending.
struct Three {
    alpha: TaskId,
    beta: TaskId,
    admin: TaskId,
}

/// Creates `alpha` and `beta` (each with the key `k_` and its name) and one task each,
/// and one of no tenant.
async fn three<S: TaskStore>(store: &S) -> Result<Three, String> {
    let mut made = Vec::new();
    for tenant in ["alpha", "beta"] {
        store
            .create_tenant(tenant.to_owned(), TenantUpdate::default(), at(0))
            .await
            .step("create_tenant")?;
        store
            .create_api_key(
                tenant.to_owned(),
                format!("k_{tenant}"),
                KeyHash::of(&format!("tck_{tenant}")),
                at(0),
            )
            .await
            .step("create_api_key")?;
    }
    for (tenant, key) in [(Some("alpha"), "a"), (Some("beta"), "b"), (None, "n")] {
        let task = task_for(URL, key).with_tenant(tenant.map(str::to_owned), None);
        made.push(store.submit(task, at(1)).await.step("submit")?.task.id);
    }
    Ok(Three {
        alpha: made[0],
        beta: made[1],
        admin: made[2],
    })
}

fn tenant(name: &str) -> Scope {
    Scope::Tenant(name.to_owned())
}

/// Whether `scope` reads the task `id` by id: the task itself, or
/// [`StoreError::NotFound`] and nothing else.
async fn reads<S: TaskStore>(store: &S, scope: &Scope, id: TaskId) -> Result<bool, String> {
    match store.get(id, scope.clone()).await {
        Ok(task) => {
            ensure_eq!(task.id, id, "the task read by id");
            Ok(true)
        }
        Err(StoreError::NotFound) => Ok(false),
        Err(e) => Err(format!("get: unexpected error: {e}")),
    }
}

/// The state of `id` as the admin reads it (`None`: gone).
async fn state_of<S: TaskStore>(store: &S, id: TaskId) -> Result<Option<State>, String> {
    match store.get(id, Scope::Admin).await {
        Ok(task) => Ok(Some(task.state)),
        Err(StoreError::NotFound) => Ok(None),
        Err(e) => Err(format!("get: unexpected error: {e}")),
    }
}

/// A read by id in each scope: the admin reads every task, a tenant only
/// its own.
pub async fn a_tenant_reads_only_its_own_tasks_by_id<S: TaskStore>(store: S) -> Verdict {
    let t = three(&store).await?;
    let rows = [
        (Scope::Admin, t.alpha, true),
        (Scope::Admin, t.beta, true),
        (Scope::Admin, t.admin, true),
        (tenant("alpha"), t.alpha, true),
        (tenant("alpha"), t.beta, false),
        (tenant("alpha"), t.admin, false),
        (tenant("beta"), t.beta, true),
        (tenant("beta"), t.alpha, false),
        (tenant("nobody"), t.alpha, false),
    ];
    for (scope, id, seen) in rows {
        ensure_eq!(
            reads(&store, &scope, id).await?,
            seen,
            "{scope:?} reads {id}"
        );
    }
    Ok(())
}

/// A listing in a tenant's scope holds only that tenant's tasks, whatever
/// tenant its filter names; the admin's holds what its filter covers.
pub async fn a_tenant_lists_only_its_own_tasks<S: TaskStore>(store: S) -> Verdict {
    let t = three(&store).await?;
    let named = |tenant: Option<&str>| TaskFilter {
        tenant: tenant.map(str::to_owned),
        ..TaskFilter::default()
    };
    let rows = [
        (Scope::Admin, named(None), vec![t.alpha, t.beta, t.admin]),
        (Scope::Admin, named(Some("beta")), vec![t.beta]),
        (tenant("alpha"), named(None), vec![t.alpha]),
        (tenant("alpha"), named(Some("beta")), vec![t.alpha]),
        (
            tenant("beta"),
            TaskFilter::state(Some(State::Pending)),
            vec![t.beta],
        ),
        (tenant("nobody"), named(None), vec![]),
    ];
    for (scope, filter, want) in rows {
        let query = ListQuery {
            filter: filter.clone(),
            ..ListQuery::default()
        };
        let page = store.list(query, scope.clone()).await.step("list")?;
        ensure_eq!(ids(&page.tasks), want, "{scope:?} lists {filter:?}");
    }
    Ok(())
}

/// A cancel, a retry and a delete by id in a tenant's scope of a task that
/// is not its own are [`StoreError::NotFound`] and change nothing; of its
/// own they apply.
pub async fn a_tenant_cannot_cancel_retry_or_delete_another_s_task<S: TaskStore>(
    store: S,
) -> Verdict {
    let t = three(&store).await?;
    let alpha = tenant("alpha");
    for id in [t.beta, t.admin] {
        let canceled = store.cancel(id, alpha.clone(), at(2)).await;
        ensure!(
            matches!(canceled, Err(StoreError::NotFound)),
            "alpha's cancel of {id}: {canceled:?}"
        );
        ensure_eq!(
            state_of(&store, id).await?,
            Some(State::Pending),
            "{id} after it"
        );
    }
    // Finished by the admin, so that a retry and a delete would apply.
    for id in [t.beta, t.admin] {
        store.cancel(id, Scope::Admin, at(3)).await.step("cancel")?;
        let retried = store
            .retry(id, at(4), at(4), Some(Acting::new("alpha", "k_alpha")))
            .await;
        ensure!(
            matches!(retried, Err(StoreError::NotFound)),
            "alpha's retry of {id}: {retried:?}"
        );
        let deleted = store.delete(id, alpha.clone()).await;
        ensure!(
            matches!(deleted, Err(StoreError::NotFound)),
            "alpha's delete of {id}: {deleted:?}"
        );
        ensure_eq!(
            state_of(&store, id).await?,
            Some(State::Canceled),
            "{id} after them"
        );
    }
    // Its own: each applies.
    let own = store
        .cancel(t.alpha, alpha.clone(), at(5))
        .await
        .step("cancel")?;
    ensure_eq!(own.state, State::Canceled, "alpha's cancel of its own task");
    let own = store
        .retry(t.alpha, at(6), at(6), Some(Acting::new("alpha", "k_alpha")))
        .await
        .step("retry")?;
    ensure_eq!(own.state, State::Pending, "alpha's retry of its own task");
    store
        .cancel(t.alpha, alpha.clone(), at(7))
        .await
        .step("cancel")?;
    store.delete(t.alpha, alpha).await.step("delete")?;
    ensure_eq!(
        state_of(&store, t.alpha).await?,
        None,
        "alpha's own task after its delete"
    );
    Ok(())
}

/// A bulk action in a tenant's scope covers only that tenant's tasks,
/// whatever tenant its filter names (a dry run counts only those); the
/// admin's covers what its filter covers.
pub async fn a_tenant_s_bulk_action_covers_only_its_own_tasks<S: TaskStore>(store: S) -> Verdict {
    let t = three(&store).await?;
    let bulk = |scope: Scope, tenant: Option<&str>| BulkRequest {
        scope,
        acting: None,
        ..BulkRequest::new(
            BulkAction::Cancel,
            TaskFilter {
                tenant: tenant.map(str::to_owned),
                ..TaskFilter::default()
            },
            at(2),
        )
    };
    // Each row: the scope, the filter's tenant, how many a dry run counts.
    let counted = [
        (tenant("alpha"), None, 1),
        (tenant("alpha"), Some("beta"), 1),
        (tenant("nobody"), None, 0),
        (Scope::Admin, None, 3),
        (Scope::Admin, Some("beta"), 1),
    ];
    for (scope, named, want) in counted {
        let request = bulk(scope.clone(), named).counting_only();
        let outcome = store.bulk(request).await.step("bulk dry run")?;
        ensure_eq!(outcome.matched, want, "{scope:?} counts tenant {named:?}");
    }
    let outcome = store
        .bulk(bulk(tenant("alpha"), Some("beta")))
        .await
        .step("bulk")?;
    ensure_eq!(outcome.applied, 1, "alpha's cancel naming beta");
    for (id, want) in [
        (t.alpha, State::Canceled),
        (t.beta, State::Pending),
        (t.admin, State::Pending),
    ] {
        ensure_eq!(state_of(&store, id).await?, Some(want), "{id} after it");
    }
    Ok(())
}
