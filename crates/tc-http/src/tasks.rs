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
use tc_model::store::{BulkAction, ListQuery, Page, StoreError, TaskStore};
use tc_model::tenant::Scope;
use tc_model::tenant::quota::QuotaLimit;
use tc_model::{Task, TaskId, TraceContext};

use crate::app::App;
use crate::auth::Caller;
use crate::control::Control;
use crate::dto::{CancelView, TaskView, parse_submit};
use crate::error::ApiError;
use crate::metrics::SubmitResult;
use crate::query::parse_list_query;
use crate::reply::{Answer, json};

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
        let task = parse_submit(item.get().as_bytes(), config, now).and_then(|task| {
            check_urls_allowed(&task, &config.allow_url_prefixes)?;
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

/// `new` as the caller's: its tenant, under the tenant's pending limit.
fn for_caller(new: tc_model::NewTask, caller: &Caller) -> tc_model::NewTask {
    match caller.scope.tenant() {
        Some(tenant) => new.with_tenant(Some(tenant.to_owned()), caller.settings.max_pending),
        None => new,
    }
}

/// One submit's token from the caller's bucket on this node (the admin
/// has no rate).
fn take_submit_token<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
) -> Result<(), ApiError> {
    let Some(tenant) = caller.scope.tenant() else {
        return Ok(());
    };
    let owner = crate::quota::BucketOwner {
        name: tenant,
        created_at: caller.created_at,
        settings: &caller.settings,
    };
    app.buckets()
        .take(owner, app.control().now())
        .inspect_err(|_| app.metrics().quota_rejected(tenant, QuotaLimit::SubmitRate))
}

/// A store error of the caller's submit, counted when it is the tenant's
/// `max_pending`.
fn quota_refusal<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    e: StoreError,
) -> ApiError {
    if let (StoreError::QuotaExceeded { .. }, Some(tenant)) = (&e, caller.scope.tenant()) {
        app.metrics().quota_rejected(tenant, QuotaLimit::MaxPending);
    }
    ApiError::from(e)
}

/// The task `id` if `scope` sees it; another tenant's task is as unknown
/// as a task that never was.
pub(crate) async fn visible<S: TaskStore, C: Control>(
    app: &App<S, C>,
    scope: &Scope,
    id: TaskId,
) -> Result<Task, ApiError> {
    let task = app.store().get(id).await?;
    if scope.sees(&task) {
        Ok(task)
    } else {
        Err(ApiError::from(StoreError::NotFound))
    }
}

/// For a tenant's request, that `id` is its task before acting on it by
/// id (a task's tenant never changes, so the check holds for the act).
/// The admin's path is as before: no extra read.
async fn check_owner<S: TaskStore, C: Control>(
    app: &App<S, C>,
    scope: &Scope,
    id: TaskId,
) -> Result<(), ApiError> {
    if scope.is_admin() {
        return Ok(());
    }
    visible(app, scope, id).await.map(drop)
}

/// A prefix matches the normalised url at a path-segment boundary (see
/// [`tc_model::is_under_prefix`]), never as mere text: `https://b.test/hooks`
/// admits `/hooks/1`, not `/hooksx`.
fn check_url_allowed(url: &str, prefixes: &[String]) -> Result<(), ApiError> {
    check_allowed("url", url, prefixes)
}

/// Both urls a task calls, its own and its callback's, under the
/// allow-list; a refusal names the field.
pub(crate) fn check_urls_allowed(
    task: &tc_model::NewTask,
    prefixes: &[String],
) -> Result<(), ApiError> {
    check_url_allowed(task.url(), prefixes)?;
    match task.callback() {
        Some(callback) => check_allowed("callback_url", callback.url(), prefixes),
        None => Ok(()),
    }
}

fn check_allowed(field: &str, url: &str, prefixes: &[String]) -> Result<(), ApiError> {
    if prefixes.is_empty() || prefixes.iter().any(|p| tc_model::is_under_prefix(url, p)) {
        Ok(())
    } else {
        Err(ApiError::UrlNotAllowed(format!(
            "{field}: not under any allowed prefix of this server"
        )))
    }
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
    let task = visible(app, scope, id).await?;
    if wait.is_zero() || task.state.is_terminal() {
        return json(StatusCode::OK, &TaskView::new(&task));
    }
    let client = crate::client::client_of(parts, &app.config().trusted_proxies).addr;
    let waiter = app.waiters().wait_for(app.control(), id, client)?;
    let deadline = tokio::time::Instant::now() + wait;
    // Read again now that the waiter is in place: an end between the first
    // read and here cannot be missed.
    let mut task = app.store().get(id).await?;
    while !task.state.is_terminal() {
        let changed = tokio::time::timeout_at(deadline, waiter.changed()).await;
        task = app.store().get(id).await?;
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
    let task = visible(app, scope, id).await?;
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
    check_owner(app, scope, id).await?;
    let task = app.control().cancel(id).await?;
    json(StatusCode::OK, &CancelView::new(task.id, task.state))
}

/// `POST /tasks/{id}/retry`: a failed or canceled task runs again, after an
/// optional delay, with a fresh budget of tries.
pub(crate) async fn retry<S: TaskStore, C: Control>(
    app: &App<S, C>,
    scope: &Scope,
    id: TaskId,
    bytes: &[u8],
) -> Answer {
    let delay = crate::dto::parse_retry(bytes)?;
    check_owner(app, scope, id).await?;
    let now = app.control().now();
    let task = app
        .store()
        .retry(id, now.saturating_add(delay), now)
        .await?;
    tracing::info!(task_id = %task.id, delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), "task_retried");
    app.control().task_submitted();
    json(StatusCode::OK, &TaskView::new(&task))
}

/// `POST /tasks/bulk`: retry, cancel or delete every task a filter covers
/// (the tasks that existed when the call started), or count them.
pub(crate) async fn bulk<S: TaskStore, C: Control>(
    app: &App<S, C>,
    scope: &Scope,
    bytes: &[u8],
) -> Answer {
    let mut request = crate::dto::parse_bulk(bytes)?;
    request.filter = request.filter.within(scope);
    let now = app.control().now();
    let outcome = app
        .store()
        .bulk(request.action, request.filter, request.dry_run, now)
        .await?;
    for id in &outcome.canceled_running {
        app.control().canceled_in_store(*id);
    }
    if request.action == BulkAction::Cancel && outcome.applied > 0 {
        // The store wrote these cancels, not the worker: nothing announced
        // them, so every waiter reads its task again.
        app.waiters().wake_all();
    }
    // A retry makes tasks due; a cancel may make callback tasks, due now.
    if request.action != BulkAction::Delete && outcome.applied > 0 {
        app.control().task_submitted();
    }
    tracing::info!(
        action = request.action.as_str(),
        dry_run = request.dry_run,
        matched = outcome.matched,
        applied = outcome.applied,
        "tasks_bulk"
    );
    json(StatusCode::OK, &crate::dto::BulkView::new(&outcome))
}

/// `DELETE /tasks/{id}`: a finished task, its history and result are gone.
pub(crate) async fn delete<S: TaskStore, C: Control>(
    app: &App<S, C>,
    scope: &Scope,
    id: TaskId,
) -> Answer {
    check_owner(app, scope, id).await?;
    app.store().delete(id).await?;
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
    let mut query = ListQuery {
        max_result_bytes: Some(PAGE_RESULT_BUDGET),
        ..parse_list_query(parts.uri.query())?
    };
    query.filter = std::mem::take(&mut query.filter).within(scope);
    let page = app.store().list(query).await?;
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
