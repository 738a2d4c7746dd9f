//! The application: routes and their handlers, as plain async functions over
//! a request, so that every contract row can be tested without a socket.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, LOCATION};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Body;
use prometheus_client::registry::Registry;
use serde::Serialize;
use tc_model::TaskId;
use tc_model::store::{BulkAction, ListQuery, Page, TaskStore};

use crate::auth::authorized;
use crate::body::{BodyLimits, RequestBody};
use crate::config::HttpConfig;
use crate::control::Control;
use crate::destinations;
use crate::dto::{CancelView, TaskView, parse_submit};
use crate::error::ApiError;
use crate::metrics::{HttpMetrics, SubmitResult};
use crate::query::parse_list_query;

/// Everything a request needs: the store, the worker's control port, the
/// config and the metrics registry. Share it behind an `Arc`.
pub struct App<S, C> {
    store: Arc<S>,
    control: C,
    /// The requests waiting for a task to end.
    waiters: Arc<crate::waiters::Waiters>,
    /// One permit per byte of request bodies being read at once.
    body_budget: Arc<tokio::sync::Semaphore>,
    config: HttpConfig,
    registry: Registry,
    metrics: HttpMetrics,
    /// The dashboard's sessions, activity ring and sources.
    ui: crate::ui::Ui,
    /// The allowed hosts.
    site: crate::site::Site,
    /// What `POST /admin/backup` copies through, if anything.
    backups: Option<Arc<dyn crate::backup::Backups>>,
}

impl<S: TaskStore, C: Control> App<S, C> {
    /// Builds the application. `registry` may already hold other components'
    /// metrics (the worker's); the HTTP layer adds its own, and `GET /metrics`
    /// serves them all.
    pub fn new(store: Arc<S>, control: C, config: HttpConfig, mut registry: Registry) -> Self {
        let metrics = HttpMetrics::register(&mut registry);
        App {
            store,
            control,
            waiters: crate::waiters::Waiters::new(&config, metrics.waiters.clone()),
            body_budget: Arc::new(tokio::sync::Semaphore::new(
                config
                    .max_body_bytes_in_flight
                    .max(config.max_body_bytes)
                    .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
            )),
            site: crate::site::Site::new(&config),
            config,
            registry,
            metrics,
            ui: crate::ui::Ui::default(),
            backups: None,
        }
    }

    /// Gives `POST /admin/backup` a way to copy the database; without one
    /// it answers `409 backup_unsupported`.
    pub fn with_backups(mut self, backups: Arc<dyn crate::backup::Backups>) -> Self {
        self.backups = Some(backups);
        self
    }

    /// Hands the dashboard what it shows beyond the store: the worker's
    /// concurrency. (The destinations come from the store and the [`Control`]
    /// port, as `GET /destinations` reads them.)
    pub fn with_dashboard(mut self, sources: crate::ui::DashboardSources) -> Self {
        self.ui.sources = sources;
        self
    }

    /// The dashboard's per-second activity ring: the submit path feeds it
    /// here; whoever runs the worker feeds it attempt endings
    /// ([`crate::Activity::attempt_ended`]).
    pub fn activity(&self) -> Arc<crate::Activity> {
        Arc::clone(&self.ui.activity)
    }

    pub(crate) fn store(&self) -> &S {
        &self.store
    }

    pub(crate) fn control(&self) -> &C {
        &self.control
    }

    pub(crate) fn ui(&self) -> &crate::ui::Ui {
        &self.ui
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    pub(crate) fn metrics(&self) -> &HttpMetrics {
        &self.metrics
    }

    pub(crate) fn site(&self) -> &crate::site::Site {
        &self.site
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &HttpConfig {
        &self.config
    }
}

/// One route the API serves: what the router matches and the OpenAPI document
/// must describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The HTTP method.
    pub method: &'static str,
    /// The path template; `{id}` stands for a task id.
    pub path: &'static str,
    /// Whether a configured API token is required.
    pub needs_token: bool,
    endpoint: Endpoint,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Submit,
    Batch,
    Bulk,
    List,
    Get,
    Result,
    Cancel,
    Retry,
    Delete,
    Destinations,
    Destination,
    UpdateDestination,
    PauseDestination,
    ResumeDestination,
    Health,
    Metrics,
    Backup,
}

const fn route(method: &'static str, path: &'static str, endpoint: Endpoint) -> Route {
    // Every /tasks route is behind the token; health and metrics stay open
    // for probes and scrapers.
    let needs_token = !matches!(endpoint, Endpoint::Health | Endpoint::Metrics);
    Route {
        method,
        path,
        needs_token,
        endpoint,
    }
}

/// Every route the router serves. The router matches against this table, so
/// it is the one truth the OpenAPI test checks against.
pub const ROUTES: &[Route] = &[
    route("POST", "/tasks", Endpoint::Submit),
    route("POST", "/tasks/batch", Endpoint::Batch),
    route("POST", "/tasks/bulk", Endpoint::Bulk),
    route("GET", "/tasks", Endpoint::List),
    route("GET", "/tasks/{id}", Endpoint::Get),
    route("GET", "/tasks/{id}/result", Endpoint::Result),
    route("POST", "/tasks/{id}/cancel", Endpoint::Cancel),
    route("POST", "/tasks/{id}/retry", Endpoint::Retry),
    route("DELETE", "/tasks/{id}", Endpoint::Delete),
    route("GET", "/destinations", Endpoint::Destinations),
    route("GET", "/destinations/{destination}", Endpoint::Destination),
    route(
        "PUT",
        "/destinations/{destination}",
        Endpoint::UpdateDestination,
    ),
    route(
        "POST",
        "/destinations/{destination}/pause",
        Endpoint::PauseDestination,
    ),
    route(
        "POST",
        "/destinations/{destination}/resume",
        Endpoint::ResumeDestination,
    ),
    route("GET", "/healthz", Endpoint::Health),
    route("GET", "/metrics", Endpoint::Metrics),
    route("POST", "/admin/backup", Endpoint::Backup),
];

/// The metrics label for requests that matched no route.
pub(crate) const UNMATCHED: &str = "unmatched";

/// Whether `path` fits `template`; returns the `{id}` segment if it has one.
fn match_template<'p>(template: &str, path: &'p str) -> Option<Option<&'p str>> {
    let mut id = None;
    let mut want = template.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return Some(id),
            (Some(w), Some(segment)) if w.starts_with('{') && !segment.is_empty() => {
                id = Some(segment);
            }
            (Some(w), Some(g)) if w == g => {}
            _ => return None,
        }
    }
}

enum Matched<'p> {
    Found(&'static Route, Option<&'p str>),
    WrongMethod { allow: String, needs_token: bool },
    NotFound,
}

fn find<'p>(method: &Method, path: &'p str) -> Matched<'p> {
    let mut allow: Vec<&str> = Vec::new();
    let mut needs_token = false;
    for r in ROUTES {
        if let Some(id) = match_template(r.path, path) {
            if r.method == method.as_str() {
                return Matched::Found(r, id);
            }
            allow.push(r.method);
            needs_token |= r.needs_token;
        }
    }
    if allow.is_empty() {
        Matched::NotFound
    } else {
        allow.sort_unstable();
        allow.dedup();
        Matched::WrongMethod {
            allow: allow.join(", "),
            needs_token,
        }
    }
}

/// Answers one request: routing, auth, the handler, and the request body's
/// bounds (read with a limit, the rest drained so a plain client gets the
/// answer). Never panics and never answers 5xx for a malformed request.
pub async fn handle<S, C, B>(app: &App<S, C>, req: Request<B>) -> Response<Full<Bytes>>
where
    S: TaskStore,
    C: Control,
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let (parts, body) = req.into_parts();
    let (max_bytes, budget) = body_bounds(app, &parts);
    let limits = BodyLimits {
        max_bytes,
        read_timeout: app.config.body_read_timeout,
        drain_max_bytes: app.config.drain_max_bytes,
        drain_timeout: app.config.drain_timeout,
    };
    let mut body = RequestBody::new(body, &parts.headers, limits).with_budget(budget);
    let (label, result) = route_request(app, &parts, &mut body).await;
    let mut response = result.unwrap_or_else(ApiError::into_response);
    if !body.finish().await {
        response
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    let status = response.status().as_u16();
    app.metrics.answered(label, status);
    tracing::debug!(method = %parts.method, path = parts.uri.path(), status, "request");
    response
}

pub(crate) type Answer = Result<Response<Full<Bytes>>, ApiError>;

/// The most bytes a request's body may have, and the budget it reserves
/// them from. A batch carries many tasks: its own, larger bound. The
/// dashboard's forms (login, logout) are small and reachable without any
/// credential: their own small bound and budget, so that they can neither
/// send large bodies nor wait on the budget the API's requests use.
fn body_bounds<S, C>(app: &App<S, C>, parts: &Parts) -> (usize, Arc<tokio::sync::Semaphore>) {
    let path = parts.uri.path();
    if crate::ui::is_ui_path(path) {
        (crate::ui::FORM_MAX_BYTES, Arc::clone(&app.ui.form_budget))
    } else if parts.method == Method::POST && path == "/tasks/batch" {
        (
            app.config.max_batch_body_bytes,
            Arc::clone(&app.body_budget),
        )
    } else {
        (app.config.max_body_bytes, Arc::clone(&app.body_budget))
    }
}

async fn route_request<S, C, B>(
    app: &App<S, C>,
    parts: &Parts,
    body: &mut RequestBody<B>,
) -> (&'static str, Answer)
where
    S: TaskStore,
    C: Control,
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    // Before any route: a request refused here was never served.
    let client = crate::client::client_of(parts, &app.config.trusted_proxies);
    if let Err(e) = app.site.check(parts, &client) {
        return (UNMATCHED, Err(e));
    }
    let path = parts.uri.path();
    if crate::ui::is_ui_path(path) {
        return ("/ui", Ok(crate::ui::route(app, parts, body).await));
    }
    let (route, id) = match find(&parts.method, path) {
        Matched::NotFound => {
            return (
                UNMATCHED,
                Err(ApiError::NotFound(format!("no route for {path}"))),
            );
        }
        Matched::WrongMethod { allow, needs_token } => {
            // Unauthenticated clients learn nothing about /tasks, not even
            // which methods it has.
            let answer = match check_token(app, parts, needs_token) {
                Err(e) => Err(e),
                Ok(()) => Err(ApiError::MethodNotAllowed { allow }),
            };
            return (UNMATCHED, answer);
        }
        Matched::Found(route, id) => (route, id),
    };
    if let Err(e) = check_token(app, parts, route.needs_token) {
        return (route.path, Err(e));
    }
    (
        route.path,
        dispatch(app, route.endpoint, id, parts, body).await,
    )
}

async fn dispatch<S, C, B>(
    app: &App<S, C>,
    endpoint: Endpoint,
    id: Option<&str>,
    parts: &Parts,
    body: &mut RequestBody<B>,
) -> Answer
where
    S: TaskStore,
    C: Control,
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    match endpoint {
        Endpoint::Submit => submit(app, parts, body).await,
        Endpoint::Batch => batch(app, parts, body).await,
        Endpoint::Bulk => bulk(app, parts, body).await,
        Endpoint::List => list(app, parts).await,
        Endpoint::Get => get(app, task_id(id)?, parts).await,
        Endpoint::Result => result(app, task_id(id)?).await,
        Endpoint::Cancel => cancel(app, task_id(id)?).await,
        Endpoint::Retry => retry(app, task_id(id)?, parts, body).await,
        Endpoint::Delete => delete(app, task_id(id)?).await,
        Endpoint::Destinations => {
            let list = destinations::list_of(app.store.as_ref(), &app.control).await?;
            json(StatusCode::OK, &list)
        }
        Endpoint::Destination => {
            let name = destinations::destination_name(id)?;
            let view = destinations::view_of(app.store.as_ref(), &app.control, name).await?;
            json(StatusCode::OK, &view)
        }
        Endpoint::UpdateDestination => {
            let name = destinations::destination_name(id)?;
            check_json_content_type(parts)?;
            let update = destinations::parse_update(&body.read_all().await?)?;
            let view = destinations::update(app.store.as_ref(), &app.control, name, update).await?;
            json(StatusCode::OK, &view)
        }
        Endpoint::PauseDestination | Endpoint::ResumeDestination => {
            let name = destinations::destination_name(id)?;
            let update = tc_model::destination::DestinationUpdate {
                paused: Some(endpoint == Endpoint::PauseDestination),
                ..Default::default()
            };
            let view = destinations::update(app.store.as_ref(), &app.control, name, update).await?;
            json(StatusCode::OK, &view)
        }
        Endpoint::Health => crate::admin::health(app).await,
        Endpoint::Metrics => crate::admin::metrics(app).await,
        Endpoint::Backup => {
            check_json_content_type(parts)?;
            let body = body.read_all().await?;
            crate::backup::handle(
                app.backups.as_deref(),
                app.config.api_token.is_some(),
                &body,
            )
            .await
        }
    }
}

fn check_token<S, C>(app: &App<S, C>, parts: &Parts, needs_token: bool) -> Result<(), ApiError> {
    match &app.config.api_token {
        // The dashboard's session cookie (with its CSRF token for writes)
        // stands in for the bearer token.
        Some(token)
            if needs_token
                && !authorized(&parts.headers, token)
                && !app.ui.sessions.authorizes(&parts.method, &parts.headers) =>
        {
            Err(ApiError::Unauthorized)
        }
        _ => Ok(()),
    }
}

/// A malformed id names no task: 404, like an unknown one.
fn task_id(segment: Option<&str>) -> Result<TaskId, ApiError> {
    segment
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ApiError::NotFound("no task with this id".into()))
}

pub(crate) fn json<T: Serialize>(status: StatusCode, value: &T) -> Answer {
    let bytes =
        serde_json::to_vec(value).map_err(|e| ApiError::Internal(format!("encoding JSON: {e}")))?;
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

async fn submit<S, C, B>(app: &App<S, C>, parts: &Parts, body: &mut RequestBody<B>) -> Answer
where
    S: TaskStore,
    C: Control,
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let answer = try_submit(app, parts, body).await;
    let result = match &answer {
        Ok((_, true)) => SubmitResult::Created,
        Ok((_, false)) => SubmitResult::Existing,
        Err(ApiError::IdempotencyConflict(_)) => SubmitResult::Conflict,
        Err(e) if e.status().is_server_error() => SubmitResult::Error,
        Err(_) => SubmitResult::Invalid,
    };
    app.metrics.submitted(result);
    answer.map(|(response, _)| response)
}

/// The response and whether it created a task.
async fn try_submit<S, C, B>(
    app: &App<S, C>,
    parts: &Parts,
    body: &mut RequestBody<B>,
) -> Result<(Response<Full<Bytes>>, bool), ApiError>
where
    S: TaskStore,
    C: Control,
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    check_json_content_type(parts)?;
    let bytes = body.read_all().await?;
    let new = parse_submit(&bytes, &app.config, app.control.now())?;
    check_url_allowed(new.url(), &app.config.allow_url_prefixes)?;
    let submitted = app.store.submit(new, app.control.now()).await?;
    let task = &submitted.task;
    if submitted.created {
        app.control.task_submitted();
        app.ui
            .activity
            .record(crate::ui::Event::Submitted, 1, app.control.now());
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
async fn batch<S, C, B>(app: &App<S, C>, parts: &Parts, body: &mut RequestBody<B>) -> Answer
where
    S: TaskStore,
    C: Control,
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    check_json_content_type(parts)?;
    let bytes = body.read_all().await?;
    let items = crate::dto::parse_batch(&bytes)?;
    let now = app.control.now();
    // For each item, the index of its valid task, or why it was refused.
    let mut parsed: Vec<Result<usize, ApiError>> = Vec::with_capacity(items.len());
    let mut valid = Vec::with_capacity(items.len());
    for item in &items {
        let task = parse_submit(item.get().as_bytes(), &app.config, now).and_then(|task| {
            check_url_allowed(task.url(), &app.config.allow_url_prefixes)?;
            Ok(task)
        });
        parsed.push(task.map(|task| {
            valid.push(task);
            valid.len() - 1
        }));
    }
    let stored = if valid.is_empty() {
        Vec::new()
    } else {
        app.store.submit_many(valid, now).await?
    };
    let mut created = 0usize;
    let mut results = Vec::with_capacity(parsed.len());
    for item in parsed {
        let outcome = item.and_then(|i| match stored.get(i) {
            Some(Ok(submitted)) => Ok(submitted),
            Some(Err(e)) => Err(ApiError::from(e.clone())),
            None => Err(ApiError::Internal(
                "a batch item has no store answer".into(),
            )),
        });
        let result = match &outcome {
            Ok(s) if s.created => SubmitResult::Created,
            Ok(_) => SubmitResult::Existing,
            Err(ApiError::IdempotencyConflict(_)) => SubmitResult::Conflict,
            Err(e) if e.status().is_server_error() => SubmitResult::Error,
            Err(_) => SubmitResult::Invalid,
        };
        app.metrics.submitted(result);
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
        app.control.task_submitted();
        app.ui
            .activity
            .record(crate::ui::Event::Submitted, created as u64, now);
    }
    tracing::info!(tasks = results.len(), created, "tasks_submitted");
    json(StatusCode::OK, &crate::dto::BatchView { results })
}

/// `application/json`, any case, parameters (`; charset=utf-8`) allowed.
fn check_json_content_type(parts: &Parts) -> Result<(), ApiError> {
    let given = parts.headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes);
    let essence = given.map(|v| {
        v.split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii()
    });
    match essence {
        Some(e) if e.eq_ignore_ascii_case(b"application/json") => Ok(()),
        Some(_) => Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type must be application/json, got {:?}",
            String::from_utf8_lossy(given.unwrap_or_default())
        ))),
        None => Err(ApiError::UnsupportedMediaType(
            "Content-Type must be application/json, got none".into(),
        )),
    }
}

/// A prefix matches the normalised url at a path-segment boundary (see
/// [`tc_model::is_under_prefix`]), never as mere text: `https://b.test/hooks`
/// admits `/hooks/1`, not `/hooksx`.
fn check_url_allowed(url: &str, prefixes: &[String]) -> Result<(), ApiError> {
    if prefixes.is_empty() || prefixes.iter().any(|p| tc_model::is_under_prefix(url, p)) {
        Ok(())
    } else {
        Err(ApiError::UrlNotAllowed(
            "url: not under any allowed prefix of this server".into(),
        ))
    }
}

/// `GET /tasks/{id}[?wait_ms=N]`: the task; with `wait_ms`, as soon as it
/// is terminal or after N ms, whichever comes first. A waiting request holds
/// a place among the waiters (waiters.rs), never a store connection: it
/// sleeps until its own task changes, then reads it again.
async fn get<S: TaskStore, C: Control>(app: &App<S, C>, id: TaskId, parts: &Parts) -> Answer {
    let wait = crate::query::parse_wait(parts.uri.query())?;
    let task = app.store.get(id).await?;
    if wait.is_zero() || task.state.is_terminal() {
        return json(StatusCode::OK, &TaskView::new(&task));
    }
    let client = crate::client::client_of(parts, &app.config.trusted_proxies).addr;
    let waiter = app.waiters.wait_for(&app.control, id, client)?;
    let deadline = tokio::time::Instant::now() + wait;
    // Read again now that the waiter is in place: an end between the first
    // read and here cannot be missed.
    let mut task = app.store.get(id).await?;
    while !task.state.is_terminal() {
        let changed = tokio::time::timeout_at(deadline, waiter.changed()).await;
        task = app.store.get(id).await?;
        if changed.is_err() {
            break;
        }
    }
    json(StatusCode::OK, &TaskView::new(&task))
}

async fn result<S: TaskStore, C>(app: &App<S, C>, id: TaskId) -> Answer {
    let task = app.store.get(id).await?;
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

async fn cancel<S, C: Control>(app: &App<S, C>, id: TaskId) -> Answer {
    let task = app.control.cancel(id).await?;
    json(StatusCode::OK, &CancelView::new(task.id, task.state))
}

/// `POST /tasks/{id}/retry`: a failed or canceled task runs again, after an
/// optional delay, with a fresh budget of tries.
async fn retry<S, C, B>(
    app: &App<S, C>,
    id: TaskId,
    parts: &Parts,
    body: &mut RequestBody<B>,
) -> Answer
where
    S: TaskStore,
    C: Control,
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let bytes = body.read_all().await?;
    if !bytes.iter().all(u8::is_ascii_whitespace) {
        check_json_content_type(parts)?;
    }
    let delay = crate::dto::parse_retry(&bytes)?;
    let now = app.control.now();
    let task = app.store.retry(id, now.saturating_add(delay), now).await?;
    tracing::info!(task_id = %task.id, delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), "task_retried");
    app.control.task_submitted();
    json(StatusCode::OK, &TaskView::new(&task))
}

/// `POST /tasks/bulk`: retry, cancel or delete every task a filter covers
/// (the tasks that existed when the call started), or count them.
async fn bulk<S, C, B>(app: &App<S, C>, parts: &Parts, body: &mut RequestBody<B>) -> Answer
where
    S: TaskStore,
    C: Control,
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    check_json_content_type(parts)?;
    let bytes = body.read_all().await?;
    let request = crate::dto::parse_bulk(&bytes)?;
    let now = app.control.now();
    let outcome = app
        .store
        .bulk(request.action, request.filter, request.dry_run, now)
        .await?;
    for id in &outcome.canceled_running {
        app.control.canceled_in_store(*id);
    }
    if request.action == BulkAction::Cancel && outcome.applied > 0 {
        // The store wrote these cancels, not the worker: nothing announced
        // them, so every waiter reads its task again.
        app.waiters.wake_all();
    }
    if request.action == BulkAction::Retry && outcome.applied > 0 {
        app.control.task_submitted();
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
async fn delete<S: TaskStore, C>(app: &App<S, C>, id: TaskId) -> Answer {
    app.store.delete(id).await?;
    tracing::info!(task_id = %id, "task_deleted");
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

/// The most downstream result bytes one page of a listing carries: a page of
/// 500 tasks with 1 MiB results each would otherwise be a response of half a
/// gigabyte, built in memory.
const PAGE_RESULT_BUDGET: usize = 8 * 1024 * 1024;

async fn list<S: TaskStore, C>(app: &App<S, C>, parts: &Parts) -> Answer {
    let query = ListQuery {
        max_result_bytes: Some(PAGE_RESULT_BUDGET),
        ..parse_list_query(parts.uri.query())?
    };
    let page = app.store.list(query).await?;
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
    fn templates_match_whole_segments() {
        let cases: &[(&str, &str, Option<Option<&str>>)] = &[
            ("/tasks", "/tasks", Some(None)),
            ("/tasks", "/tasks/", None),
            ("/tasks", "/task", None),
            ("/tasks", "/tasksx", None),
            ("/tasks/{id}", "/tasks/abc", Some(Some("abc"))),
            ("/tasks/{id}", "/tasks/", None),
            ("/tasks/{id}", "/tasks/abc/", None),
            ("/tasks/{id}/cancel", "/tasks/abc/cancel", Some(Some("abc"))),
            ("/tasks/{id}/cancel", "/tasks/abc/result", None),
            ("/tasks/{id}/cancel", "/tasks//cancel", None),
            ("/healthz", "/healthz", Some(None)),
            ("/healthz", "//healthz", None),
        ];
        for &(template, path, expected) in cases {
            assert_eq!(
                match_template(template, path),
                expected,
                "{template} {path}"
            );
        }
    }

    #[test]
    fn wrong_methods_list_the_allowed_ones() {
        let allow = |method: Method, path: &str| match find(&method, path) {
            Matched::WrongMethod { allow, .. } => Some(allow),
            _ => None,
        };
        assert_eq!(
            allow(Method::DELETE, "/tasks").as_deref(),
            Some("GET, POST")
        );
        assert_eq!(
            allow(Method::PUT, "/tasks/x").as_deref(),
            Some("DELETE, GET")
        );
        assert_eq!(
            allow(Method::GET, "/tasks/x/cancel").as_deref(),
            Some("POST")
        );
        assert_eq!(allow(Method::HEAD, "/healthz").as_deref(), Some("GET"));
        assert!(matches!(find(&Method::GET, "/nope"), Matched::NotFound));
        assert!(matches!(
            find(&Method::GET, "/tasks/x"),
            Matched::Found(_, Some("x"))
        ));
    }

    #[test]
    fn every_route_is_reachable_and_unique() {
        for r in ROUTES {
            let path = r.path.replace("{id}", "some-id");
            let method = Method::from_bytes(r.method.as_bytes()).unwrap();
            match find(&method, &path) {
                Matched::Found(found, _) => assert_eq!(found, r),
                _ => panic!("{} {} is not routed", r.method, r.path),
            }
        }
    }

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
