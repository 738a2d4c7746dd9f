//! The task resource: submit (alone and in batches), read, wait, list,
//! cancel, retry, delete and bulk actions. Each handler takes what the
//! router parsed and read (an id, the body's bytes) and the caller's
//! [`Scope`], and answers. A tenant's key reaches only its own tasks:
//! another's id answers 404 as an unknown one does, listings and bulk
//! actions are narrowed to its tasks, and its submits carry its tenant
//! under its quotas.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, LOCATION};
use http::request::Parts;
use http::{Response, StatusCode};
use http_body_util::Full;
use tc_model::store::{BulkAction, BulkRequest, ListQuery, Page, StoreError, TaskStore};
use tc_model::tenant::Scope;
use tc_model::tenant::quota::{QuotaLimit, RetryQuota};
use tc_model::{NewTask, Task, TaskId, TraceContext};

use crate::app::App;
use crate::auth::Caller;
use crate::dto::{CancelView, TaskView, parse_submit};
use crate::error::ApiError;
use crate::metrics::SubmitResult;
use crate::query::parse_list_query;
use crate::reply::{Answer, json};
use crate::worker_port::Control;

/// `POST /tasks`: one task, created or found again by its idempotency key;
/// `body` is what the router read (or why it could not).
pub(crate) async fn submit<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    body: Result<Bytes, ApiError>,
    trace: TraceContext,
) -> Answer {
    let answer = match body {
        Ok(bytes) => try_submit(app, caller, &bytes, trace).await,
        Err(e) => Err(e),
    };
    let created = answer.as_ref().map(|(_, created)| *created);
    app.metrics().submitted(SubmitResult::of(created));
    answer.map(|(response, _)| response)
}

/// The response and whether it created a task.
async fn try_submit<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    bytes: &[u8],
    trace: TraceContext,
) -> Result<(Response<Full<Bytes>>, bool), ApiError> {
    let config = app.config();
    let control = app.control();
    let new = parse_submit(bytes, config, control.now())?.with_trace(trace);
    check_urls_allowed(&new, &config.allow_url_prefixes)?;
    check_own_authorization(app, &new).await?;
    take_submit_token(app, caller)?;
    let new = for_caller(new, caller);
    let submitted = app
        .store()
        .submit(new, control.now())
        .await
        .map_err(|e| quota_refusal(app, caller, e))?;
    let task = &submitted.task;
    if submitted.created {
        control.task_submitted();
        app.ui()
            .activity
            .record(crate::ui::Event::Submitted, 1, control.now());
        let (origin, path) = tc_model::origin_and_path(&task.url);
        tracing::info!(task_id = %task.id, origin, path, "task_submitted");
        let mut response = json(StatusCode::CREATED, &TaskView::new(task))?;
        let location = HeaderValue::try_from(format!("/tasks/{}", task.id))
            .map_err(|e| ApiError::Internal(format!("Location header: {e}")))?;
        response.headers_mut().insert(LOCATION, location);
        Ok((response, true))
    } else {
        Ok((json(StatusCode::OK, &TaskView::new(task))?, false))
    }
}

/// A task's own `Authorization` and its destination's `auth` cannot both
/// apply: such a task is refused, naming
/// `headers.authorization`. The destination is read only for a task that
/// carries the header.
async fn check_own_authorization<S: TaskStore, C: Control>(
    app: &App<S, C>,
    task: &NewTask,
) -> Result<(), ApiError> {
    if task.headers().get("authorization").is_none() {
        return Ok(());
    }
    let name = tc_model::destination_of(task.url());
    match app.store().destination(name).await {
        Ok(d) if d.settings.auth.is_some() => Err(ApiError::InvalidRequest(format!(
            "headers.authorization: the destination {} has its own auth, which sets Authorization; \
             leave the header out",
            d.name
        ))),
        Ok(_) | Err(StoreError::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `POST /tasks/batch`: up to 1000 submits committed in one transaction;
/// each item answers as its own submit would, in order, and an invalid item
/// fails alone.
/// Every item is stored in the request's one trace.
pub(crate) async fn batch<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    bytes: &[u8],
    trace: TraceContext,
) -> Answer {
    let config = app.config();
    let items = crate::dto::parse_batch(bytes)?;
    let now = app.control().now();
    // For each item, the index of its valid task, or why it was refused.
    let mut parsed: Vec<Result<usize, ApiError>> = Vec::with_capacity(items.len());
    let mut valid = Vec::with_capacity(items.len());
    for item in &items {
        let mut task = parse_submit(item.get().as_bytes(), config, now).and_then(|task| {
            check_urls_allowed(&task, &config.allow_url_prefixes)?;
            Ok(task)
        });
        if let Ok(valid) = &task
            && let Err(e) = check_own_authorization(app, valid).await
        {
            task = Err(e);
        }
        let task = task.and_then(|task| {
            // Item by item: those past the rate answer 429, the rest go on.
            take_submit_token(app, caller)?;
            Ok(for_caller(task.with_trace(trace.clone()), caller))
        });
        parsed.push(task.map(|task| {
            valid.push(task);
            valid.len() - 1
        }));
    }
    let stored = if valid.is_empty() {
        Vec::new()
    } else {
        app.store().submit_many(valid, now).await?
    };
    let mut created = 0usize;
    let mut results = Vec::with_capacity(parsed.len());
    for item in parsed {
        let outcome = item.and_then(|i| match stored.get(i) {
            Some(Ok(submitted)) => Ok(submitted),
            Some(Err(e)) => Err(quota_refusal(app, caller, e.clone())),
            None => Err(ApiError::Internal(
                "a batch item has no store answer".into(),
            )),
        });
        let created_it = outcome.as_ref().map(|s| s.created);
        app.metrics().submitted(SubmitResult::of(created_it));
        results.push(match outcome {
            Ok(submitted) => {
                created += usize::from(submitted.created);
                crate::dto::BatchItem::Task {
                    status: if submitted.created { 201 } else { 200 },
                    task: Box::new(TaskView::new(&submitted.task)),
                }
            }
            Err(e) => crate::dto::BatchItem::Refused {
                status: e.status().as_u16(),
                error: crate::dto::ErrorView {
                    code: e.code(),
                    message: e.message(),
                },
            },
        });
    }
    if created > 0 {
        app.control().task_submitted();
        app.ui()
            .activity
            .record(crate::ui::Event::Submitted, created as u64, now);
    }
    tracing::info!(tasks = results.len(), created, "tasks_submitted");
    json(StatusCode::OK, &crate::dto::BatchView { results })
}

/// `new` as the caller's: its tenant, under the tenant's pending limit,
/// made with its key (the store refuses it once the key is gone).
fn for_caller(new: tc_model::NewTask, caller: &Caller) -> tc_model::NewTask {
    let new = match caller.scope.tenant() {
        Some(tenant) => new.with_tenant(Some(tenant.to_owned()), caller.settings.max_pending),
        None => new,
    };
    match &caller.key_id {
        Some(key_id) => new.with_key(key_id.clone()),
        None => new,
    }
}

/// One submit's token from the caller's bucket on this node (the admin
/// has no rate).
pub(crate) fn take_submit_token<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
) -> Result<(), ApiError> {
    let Some(tenant) = RatedTenant::of_caller(caller) else {
        return Ok(());
    };
    app.buckets()
        .take(tenant.owner(), app.control().now())
        .inspect_err(|_| {
            app.metrics()
                .quota_rejected(&tenant.name, QuotaLimit::SubmitRate)
        })
}

/// A store error of the caller's submit, counted when it is the tenant's
/// `max_pending`.
pub(crate) fn quota_refusal<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    e: StoreError,
) -> ApiError {
    if let (StoreError::QuotaExceeded { .. }, Some(tenant)) = (&e, caller.scope.tenant()) {
        app.metrics().quota_rejected(tenant, QuotaLimit::MaxPending);
    }
    ApiError::from(e)
}

/// A prefix matches the normalised url at a path-segment boundary (see
/// [`tc_model::is_under_prefix`]), never as mere text: `https://b.test/hooks`
/// admits `/hooks/1`, not `/hooksx`.
#[cfg(test)]
fn check_url_allowed(url: &str, prefixes: &[String]) -> Result<(), ApiError> {
    Ok(tc_model::urls_allowed(url, None, prefixes)?)
}

/// Both urls a task calls, its own and its callback's, under the
/// allow-list ([`tc_model::urls_allowed`]); a refusal names the field.
pub(crate) fn check_urls_allowed(
    task: &tc_model::NewTask,
    prefixes: &[String],
) -> Result<(), ApiError> {
    Ok(tc_model::urls_allowed(
        task.url(),
        task.callback().map(|c| c.url()),
        prefixes,
    )?)
}

/// Whether the allow-list still admits both urls a stored task calls (a
/// task stored before the list was narrowed may not be).
fn stored_urls_allowed(task: &Task, prefixes: &[String]) -> Result<(), ApiError> {
    Ok(tc_model::urls_allowed(
        &task.url,
        task.callback.as_ref().map(|c| c.url()),
        prefixes,
    )?)
}

/// `GET /tasks/{id}[?wait_ms=N]`: the task; with `wait_ms`, as soon as it
/// is terminal or after N ms, whichever comes first. A waiting request holds
/// a place among the waiters (waiters.rs), never a store connection: it
/// sleeps until its own task changes, then reads it again.
pub(crate) async fn get<S: TaskStore, C: Control>(
    app: &App<S, C>,
    scope: &Scope,
    id: TaskId,
    parts: &Parts,
) -> Answer {
    let wait = crate::query::parse_wait(parts.uri.query())?;
    let task = app.store().get(id, scope.clone()).await?;
    if wait.is_zero() || task.state.is_terminal() {
        return json(StatusCode::OK, &TaskView::new(&task));
    }
    let client = crate::edge::client_address::client_of(parts, &app.config().trusted_proxies).addr;
    let waiter = app.waiters().wait_for(app.control(), id, client)?;
    let deadline = tokio::time::Instant::now() + wait;
    // Read again now that the waiter is in place: an end between the first
    // read and here cannot be missed.
    let mut task = app.store().get(id, scope.clone()).await?;
    while !task.state.is_terminal() {
        let changed = tokio::time::timeout_at(deadline, waiter.changed()).await;
        task = app.store().get(id, scope.clone()).await?;
        if changed.is_err() {
            break;
        }
    }
    json(StatusCode::OK, &TaskView::new(&task))
}

pub(crate) async fn result<S: TaskStore, C: Control>(
    app: &App<S, C>,
    scope: &Scope,
    id: TaskId,
) -> Answer {
    let task = app.store().get(id, scope.clone()).await?;
    let Some(bytes) = task.result else {
        return Err(ApiError::NotFound(format!(
            "task has no result (state {})",
            task.state
        )));
    };
    let content_type = task
        .result_content_type
        .as_deref()
        .and_then(|ct| HeaderValue::from_str(ct).ok())
        .unwrap_or_else(|| HeaderValue::from_static("application/octet-stream"));
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, content_type);
    // The bytes are the downstream's, not ours: a browser must not guess a
    // more dangerous type than the one declared.
    headers.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // A text/html result opened in a browser must not run scripts or reach
    // cookies on the API's origin: sandbox gives it a unique opaque origin.
    headers.insert(
        http::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox"),
    );
    Ok(response)
}

pub(crate) async fn cancel<S: TaskStore, C: Control>(
    app: &App<S, C>,
    scope: &Scope,
    id: TaskId,
) -> Answer {
    let task = app.control().cancel(id, scope.clone()).await?;
    json(StatusCode::OK, &CancelView::new(task.id, task.state))
}

/// `POST /tasks/{id}/retry`: a failed or canceled task runs again, after an
/// optional delay, with a fresh budget of tries. A tenant's task is
/// pending again as if submitted: the retry takes a token of its tenant's
/// submit rate (whoever asks, the tenant or the admin) and the store counts
/// it against the tenant's `max_pending`.
pub(crate) async fn retry<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    id: TaskId,
    bytes: &[u8],
) -> Answer {
    let delay = crate::dto::parse_retry(bytes)?;
    let prefixes = &app.config().allow_url_prefixes;
    // The task is read when the allow-list must judge its urls (a task
    // stored before the list was narrowed calls nothing outside it again;
    // a task's urls never change), and for the admin, whose retry of a
    // tenant's task answers to that tenant's rate.
    let stored = if !prefixes.is_empty() || caller.scope.is_admin() {
        let task = app.store().get(id, caller.scope.clone()).await?;
        stored_urls_allowed(&task, prefixes)?;
        Some(task)
    } else {
        None
    };
    let tenant = match caller.scope.tenant() {
        Some(_) => RatedTenant::of_caller(caller),
        None => match stored.and_then(|task| task.tenant) {
            Some(name) => stored_tenant(app, name).await?,
            None => None,
        },
    };
    if let Some(tenant) = &tenant {
        app.buckets()
            .take(tenant.owner(), app.control().now())
            .inspect_err(|_| {
                app.metrics()
                    .quota_rejected(&tenant.name, QuotaLimit::SubmitRate)
            })?;
    }
    let now = app.control().now();
    let task = app
        .store()
        .retry(id, now.saturating_add(delay), now, caller.acting())
        .await
        .map_err(|e| {
            if let (StoreError::QuotaExceeded { .. }, Some(tenant)) = (&e, &tenant) {
                app.metrics()
                    .quota_rejected(&tenant.name, QuotaLimit::MaxPending);
            }
            ApiError::from(e)
        })?;
    tracing::info!(task_id = %task.id, delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), "task_retried");
    app.control().task_submitted();
    json(StatusCode::OK, &TaskView::new(&task))
}

/// A tenant whose submit rate a retry answers to, as stored now.
struct RatedTenant {
    name: String,
    created_at: tc_model::Timestamp,
    settings: tc_model::tenant::TenantSettings,
}

impl RatedTenant {
    /// The calling tenant (`None` for the admin).
    fn of_caller(caller: &Caller) -> Option<RatedTenant> {
        caller.scope.tenant().map(|name| RatedTenant {
            name: name.to_owned(),
            created_at: caller.created_at,
            settings: caller.settings.clone(),
        })
    }

    fn of(tenant: tc_model::tenant::Tenant) -> RatedTenant {
        RatedTenant {
            name: tenant.name,
            created_at: tenant.created_at,
            settings: tenant.settings,
        }
    }

    fn owner(&self) -> crate::quota::BucketOwner<'_> {
        crate::quota::BucketOwner {
            name: &self.name,
            created_at: self.created_at,
            settings: &self.settings,
        }
    }
}

/// The tenant `name` as stored now; a tenant that is gone has no rate (its
/// tasks cannot exist, but a read may race its delete).
async fn stored_tenant<S: TaskStore, C: Control>(
    app: &App<S, C>,
    name: String,
) -> Result<Option<RatedTenant>, ApiError> {
    match app.store().tenant(name).await {
        Ok(detail) => Ok(Some(RatedTenant::of(detail.tenant))),
        Err(StoreError::NotFound) => Ok(None),
        Err(e) => Err(ApiError::from(e)),
    }
}

/// `POST /tasks/bulk`: retry, cancel or delete every task a filter covers
/// (the tasks that existed when the call started), or count them. A retry
/// admits each tenant's tasks up to its `max_pending` and what its submit
/// rate allows now; the rest are counted in `refused_quota`.
pub(crate) async fn bulk<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    bytes: &[u8],
) -> Answer {
    let parsed = crate::dto::parse_bulk(bytes)?;
    let now = app.control().now();
    // Each rated tenant the retry may reach, with its settings now.
    let rated = if parsed.action == BulkAction::Retry && !parsed.dry_run {
        rated_tenants(app, caller).await?
    } else {
        Vec::new()
    };
    let allowance = rated
        .iter()
        .filter_map(|tenant| {
            let n = app.buckets().allowance(tenant.owner(), now)?;
            Some((tenant.name.clone(), n))
        })
        .collect();
    let request = BulkRequest {
        dry_run: parsed.dry_run,
        acting: caller.acting(),
        quota: RetryQuota::new(allowance),
        allowed_urls: app.config().allow_url_prefixes.clone(),
        scope: caller.scope.clone(),
        ..BulkRequest::new(parsed.action, parsed.filter, now)
    };
    let outcome = app.store().bulk(request).await?;
    for tenant in &rated {
        let used = outcome
            .retried_by_tenant
            .get(&tenant.name)
            .copied()
            .unwrap_or(0);
        app.buckets().take_n(tenant.owner(), used, now);
    }
    for id in &outcome.canceled_running {
        app.control().canceled_in_store(*id);
    }
    if parsed.action == BulkAction::Cancel && outcome.applied > 0 {
        // The store wrote these cancels, not the worker: nothing announced
        // them, so every waiter reads its task again.
        app.waiters().wake_all();
    }
    // A retry makes tasks due; a cancel may make callback tasks, due now.
    if parsed.action != BulkAction::Delete && outcome.applied > 0 {
        app.control().task_submitted();
    }
    tracing::info!(
        action = parsed.action.as_str(),
        dry_run = parsed.dry_run,
        matched = outcome.matched,
        applied = outcome.applied,
        refused_quota = outcome.refused_quota,
        refused_url = outcome.refused_url,
        "tasks_bulk"
    );
    json(StatusCode::OK, &crate::dto::BulkView::new(&outcome))
}

/// The tenants with a submit rate whose tasks a bulk retry by `caller` may
/// reach, with their settings: the caller's own tenant, or for the admin
/// every tenant with a rate (read as stored now).
async fn rated_tenants<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
) -> Result<Vec<RatedTenant>, ApiError> {
    if caller.scope.tenant().is_some() {
        return Ok(RatedTenant::of_caller(caller)
            .filter(|tenant| tenant.settings.submit_rate_per_s.is_some())
            .into_iter()
            .collect());
    }
    Ok(app
        .store()
        .tenants()
        .await?
        .into_iter()
        .filter(|detail| detail.tenant.settings.submit_rate_per_s.is_some())
        .map(|detail| RatedTenant::of(detail.tenant))
        .collect())
}

/// `DELETE /tasks/{id}`: a finished task, its history and result are gone.
pub(crate) async fn delete<S: TaskStore, C: Control>(
    app: &App<S, C>,
    scope: &Scope,
    id: TaskId,
) -> Answer {
    app.store().delete(id, scope.clone()).await?;
    tracing::info!(task_id = %id, "task_deleted");
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

/// The most downstream result bytes one page of a listing carries: a page of
/// 500 tasks with 1 MiB results each would otherwise be a response of half a
/// gigabyte, built in memory.
const PAGE_RESULT_BUDGET: usize = 8 * 1024 * 1024;

pub(crate) async fn list<S: TaskStore, C: Control>(
    app: &App<S, C>,
    scope: &Scope,
    parts: &Parts,
) -> Answer {
    let query = ListQuery {
        max_result_bytes: Some(PAGE_RESULT_BUDGET),
        ..parse_list_query(parts.uri.query())?
    };
    let page = app.store().list(query, scope.clone()).await?;
    let bytes = encode_page(page)?;
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

/// The page as JSON, each task dropped as soon as it is written: the peak is
/// the encoded page plus one task, not the page twice.
pub(crate) fn encode_page(page: Page) -> Result<Vec<u8>, ApiError> {
    let encoding = |e: serde_json::Error| ApiError::Internal(format!("encoding JSON: {e}"));
    let results: usize = page
        .tasks
        .iter()
        .map(|t| t.result.as_ref().map_or(0, Vec::len))
        .sum();
    let mut out = Vec::with_capacity(results.saturating_add(page.tasks.len() * 512));
    out.extend_from_slice(b"{\"tasks\":[");
    for (i, task) in page.tasks.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &TaskView::new(&task)).map_err(encoding)?;
    }
    out.extend_from_slice(b"],\"next\":");
    serde_json::to_writer(&mut out, &page.next.map(|c| c.to_string())).map_err(encoding)?;
    out.push(b'}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_allow_list_matches_prefixes() {
        let prefixes = vec![
            "http://a.test/".to_owned(),
            "https://b.test/hooks/".to_owned(),
        ];
        assert!(check_url_allowed("http://a.test/x", &prefixes).is_ok());
        assert!(check_url_allowed("https://b.test/hooks/1", &prefixes).is_ok());
        assert!(check_url_allowed("https://b.test/other", &prefixes).is_err());
        assert!(check_url_allowed("http://a.test.evil/", &prefixes).is_err());
        assert!(check_url_allowed("https://b.test/hooksx/1", &prefixes).is_err());
        assert!(check_url_allowed("https://B.test:443/hooks/1", &prefixes).is_ok());
        assert!(check_url_allowed("http://anything/", &[]).is_ok());
    }
}
