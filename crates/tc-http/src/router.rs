//! The edge of the API: the route table, and [`handle`], which answers one
//! request: the host rule, the dashboard or a route, its credential, its
//! path parameter and its body, read here once, then the resource's handler
//! (tasks.rs, destinations.rs, schedules.rs, admin.rs) over plain values.
//!
//! A new route is a row of [`ROUTES`], an [`Endpoint`], and its arm in
//! `dispatch`; docs/openapi.yaml describes it (the OpenAPI test checks the
//! two agree).

use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Body;
use tc_model::TaskId;
use tc_model::store::TaskStore;

use crate::app::App;
use crate::auth::Caller;
use crate::body::{AnyBody, BodyLimits, RequestBody, any_body};
use crate::destinations;
use crate::error::ApiError;
use crate::metrics::UNMATCHED;
use crate::reply::{Answer, json};
use crate::schedules;
use crate::tasks;
use crate::tenants;
use crate::topics;
use crate::worker_port::Control;

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
    CreateSchedule,
    Schedules,
    Schedule,
    ReplaceSchedule,
    DeleteSchedule,
    PauseSchedule,
    ResumeSchedule,
    TriggerSchedule,
    CreateTenant,
    Tenants,
    Tenant,
    UpdateTenant,
    DeleteTenant,
    CreateKey,
    RevokeKey,
    PutTopic,
    Topics,
    Topic,
    DeleteTopic,
    Subscribe,
    Subscriptions,
    Subscription,
    PatchSubscription,
    Unsubscribe,
    Replay,
    Publish,
    Event,
    Health,
    Metrics,
    Backup,
    Jwks,
    OpenIdConfiguration,
}

impl Endpoint {
    /// Whether a tenant's key may call it: the task routes and the topic
    /// routes (a tenant's topics are its own). Every other route manages
    /// the server (destinations, schedules, tenants, backups): the admin's.
    fn tenant_may_call(self) -> bool {
        matches!(
            self,
            Endpoint::Submit
                | Endpoint::Batch
                | Endpoint::Bulk
                | Endpoint::List
                | Endpoint::Get
                | Endpoint::Result
                | Endpoint::Cancel
                | Endpoint::Retry
                | Endpoint::Delete
                | Endpoint::PutTopic
                | Endpoint::Topics
                | Endpoint::Topic
                | Endpoint::DeleteTopic
                | Endpoint::Subscribe
                | Endpoint::Subscriptions
                | Endpoint::Subscription
                | Endpoint::PatchSubscription
                | Endpoint::Unsubscribe
                | Endpoint::Replay
                | Endpoint::Publish
                | Endpoint::Event
        )
    }
}

impl Route {
    /// Whether only the admin credential may call it: a tenant's key gets
    /// 403 `forbidden` (the routes that manage the server).
    pub fn admin_only(&self) -> bool {
        self.needs_token && !self.endpoint.tenant_may_call()
    }
}

const fn route(method: &'static str, path: &'static str, endpoint: Endpoint) -> Route {
    // Every route but health is behind the token: probes stay open. Metrics
    // name every tenant, so a scrape on this listener takes the admin token
    // (unless `metrics_public`); the admin listener serves them without one.
    // The JWT keys are public: a receiver fetches them without a credential.
    let needs_token = !matches!(
        endpoint,
        Endpoint::Health | Endpoint::Jwks | Endpoint::OpenIdConfiguration
    );
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
    route("POST", "/schedules", Endpoint::CreateSchedule),
    route("GET", "/schedules", Endpoint::Schedules),
    route("GET", "/schedules/{name}", Endpoint::Schedule),
    route("PUT", "/schedules/{name}", Endpoint::ReplaceSchedule),
    route("DELETE", "/schedules/{name}", Endpoint::DeleteSchedule),
    route("POST", "/schedules/{name}/pause", Endpoint::PauseSchedule),
    route("POST", "/schedules/{name}/resume", Endpoint::ResumeSchedule),
    route(
        "POST",
        "/schedules/{name}/trigger",
        Endpoint::TriggerSchedule,
    ),
    route("POST", "/tenants", Endpoint::CreateTenant),
    route("GET", "/tenants", Endpoint::Tenants),
    route("GET", "/tenants/{name}", Endpoint::Tenant),
    route("PUT", "/tenants/{name}", Endpoint::UpdateTenant),
    route("DELETE", "/tenants/{name}", Endpoint::DeleteTenant),
    route("POST", "/tenants/{name}/keys", Endpoint::CreateKey),
    route("DELETE", "/tenants/{name}/keys/{id}", Endpoint::RevokeKey),
    route("PUT", "/topics/{name}", Endpoint::PutTopic),
    route("GET", "/topics", Endpoint::Topics),
    route("GET", "/topics/{name}", Endpoint::Topic),
    route("DELETE", "/topics/{name}", Endpoint::DeleteTopic),
    route("POST", "/topics/{name}/subscriptions", Endpoint::Subscribe),
    route(
        "GET",
        "/topics/{name}/subscriptions",
        Endpoint::Subscriptions,
    ),
    route(
        "GET",
        "/topics/{name}/subscriptions/{id}",
        Endpoint::Subscription,
    ),
    route(
        "PATCH",
        "/topics/{name}/subscriptions/{id}",
        Endpoint::PatchSubscription,
    ),
    route(
        "DELETE",
        "/topics/{name}/subscriptions/{id}",
        Endpoint::Unsubscribe,
    ),
    route(
        "POST",
        "/topics/{name}/subscriptions/{id}/replay",
        Endpoint::Replay,
    ),
    route("POST", "/topics/{name}/events", Endpoint::Publish),
    route("GET", "/topics/{name}/events/{id}", Endpoint::Event),
    route("GET", "/healthz", Endpoint::Health),
    route("GET", "/metrics", Endpoint::Metrics),
    route("POST", "/admin/backup", Endpoint::Backup),
    route("GET", "/.well-known/jwks.json", Endpoint::Jwks),
    route(
        "GET",
        "/.well-known/openid-configuration",
        Endpoint::OpenIdConfiguration,
    ),
];

/// A matched path's parameters: the last `{...}` segment, and the one
/// before it when the template has two (`/tenants/{name}/keys/{id}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Params<'p> {
    parent: Option<&'p str>,
    last: Option<&'p str>,
}

/// Whether `path` fits `template`; returns its parameter segments.
fn match_template<'p>(template: &str, path: &'p str) -> Option<Params<'p>> {
    let mut params = Params::default();
    let mut want = template.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return Some(params),
            (Some(w), Some(segment)) if w.starts_with('{') && !segment.is_empty() => {
                params.parent = params.last.replace(segment);
            }
            (Some(w), Some(g)) if w == g => {}
            _ => return None,
        }
    }
}

enum Matched<'p> {
    Found(&'static Route, Params<'p>),
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
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display,
{
    let (mut parts, body) = req.into_parts();
    let trace = crate::trace::RequestTrace::start(app.tracer(), &mut parts);
    let (max_bytes, budget) = body_bounds(app, &parts);
    let limits = BodyLimits {
        max_bytes,
        read_timeout: app.config().body_read_timeout,
        drain_max_bytes: app.config().drain_max_bytes,
        drain_timeout: app.config().drain_timeout,
    };
    let mut body = RequestBody::new(any_body(body), &parts.headers, limits).with_budget(budget);
    let (label, result) = route_request(app, &parts, &mut body).await;
    let mut response = result.unwrap_or_else(ApiError::into_response);
    if !body.finish().await {
        response
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    let status = response.status().as_u16();
    app.metrics().answered(label, status);
    trace.end(&parts.method, (label != UNMATCHED).then_some(label), status);
    tracing::debug!(method = %parts.method, path = parts.uri.path(), status, "request");
    response
}

/// The most bytes a request's body may have, and the budget it reserves
/// them from. A batch carries many tasks: its own, larger bound. The
/// dashboard's forms (login, logout) are small and reachable without any
/// credential: their own small bound and budget, so that they can neither
/// send large bodies nor wait on the budget the API's requests use.
fn body_bounds<S: TaskStore, C: Control>(
    app: &App<S, C>,
    parts: &Parts,
) -> (usize, Arc<tokio::sync::Semaphore>) {
    let path = parts.uri.path();
    if crate::ui::is_ui_path(path) {
        (crate::ui::FORM_MAX_BYTES, Arc::clone(&app.ui().form_budget))
    } else if parts.method == Method::POST && path == "/tasks/batch" {
        (app.config().max_batch_body_bytes, app.body_budget())
    } else {
        (app.config().max_body_bytes, app.body_budget())
    }
}

/// Whether `route` takes the token on this server: as the table says,
/// except `/metrics` under `--metrics-public`.
fn needs_token<S: TaskStore, C: Control>(app: &App<S, C>, route: &Route) -> bool {
    route.needs_token && !(route.endpoint == Endpoint::Metrics && app.config().metrics_public)
}

async fn route_request<S: TaskStore, C: Control>(
    app: &App<S, C>,
    parts: &Parts,
    body: &mut RequestBody<AnyBody>,
) -> (&'static str, Answer) {
    // Before any route: a request refused here was never served.
    let client = crate::client_address::client_of(parts, &app.config().trusted_proxies);
    let path = parts.uri.path();
    if let Err(e) = app.site().check(parts, &client) {
        if crate::ui::is_ui_path(path) {
            // A person at a browser: a page that says what to set.
            if crate::ui::is_asset_read(parts) {
                return (
                    "/ui",
                    Ok(crate::ui::route(&app.dashboard(), parts, body).await),
                );
            }
            return (UNMATCHED, Ok(crate::ui::refused(&e)));
        }
        return (UNMATCHED, Err(e));
    }
    if crate::ui::is_ui_path(path) {
        return (
            "/ui",
            Ok(crate::ui::route(&app.dashboard(), parts, body).await),
        );
    }
    let (route, params) = match find(&parts.method, path) {
        Matched::NotFound => {
            return (
                UNMATCHED,
                Err(ApiError::NotFound(format!("no route for {path}"))),
            );
        }
        Matched::WrongMethod { allow, needs_token } => {
            // Unauthenticated clients learn nothing about /tasks, not even
            // which methods it has.
            let needs_token = needs_token && !(path == "/metrics" && app.config().metrics_public);
            let answer = match crate::auth::caller(app, parts, needs_token).await {
                Err(e) => Err(e),
                Ok(_) => Err(ApiError::MethodNotAllowed { allow }),
            };
            return (UNMATCHED, answer);
        }
        Matched::Found(route, params) => (route, params),
    };
    let caller = match crate::auth::caller(app, parts, needs_token(app, route)).await {
        Ok(caller) => caller,
        Err(e) => return (route.path, Err(e)),
    };
    if !caller.scope.is_admin() && !route.endpoint.tenant_may_call() {
        return (
            route.path,
            Err(ApiError::Forbidden(format!(
                "{} {} is for the admin credential, not a tenant's key",
                route.method, route.path
            ))),
        );
    }
    (
        route.path,
        dispatch(app, &caller, route.endpoint, params, parts, body).await,
    )
}

/// Each endpoint's path parameter and body, in the order the API checks
/// them (the parameter, the Content-Type, then the body), and its handler.
async fn dispatch<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    endpoint: Endpoint,
    params: Params<'_>,
    parts: &Parts,
    body: &mut RequestBody<AnyBody>,
) -> Answer {
    let segment = params.last;
    let scope = &caller.scope;
    match endpoint {
        // A refused body counts as a refused submit: read inside its count.
        Endpoint::Submit => {
            let trace = crate::trace::task_context(parts);
            tasks::submit(app, caller, json_body(parts, body).await, trace).await
        }
        Endpoint::Batch => {
            let trace = crate::trace::task_context(parts);
            tasks::batch(app, caller, &json_body(parts, body).await?, trace).await
        }
        Endpoint::Bulk => tasks::bulk(app, caller, &json_body(parts, body).await?).await,
        Endpoint::List => tasks::list(app, scope, parts).await,
        Endpoint::Get => tasks::get(app, scope, task_id(segment)?, parts).await,
        Endpoint::Result => tasks::result(app, scope, task_id(segment)?).await,
        Endpoint::Cancel => tasks::cancel(app, scope, task_id(segment)?).await,
        Endpoint::Retry => {
            let id = task_id(segment)?;
            tasks::retry(app, caller, id, &optional_json_body(parts, body).await?).await
        }
        Endpoint::Delete => tasks::delete(app, scope, task_id(segment)?).await,
        Endpoint::Destinations => {
            let list = destinations::list_of(app.store(), app.control()).await?;
            json(StatusCode::OK, &list)
        }
        Endpoint::Destination => {
            let name = destinations::destination_name(segment)?;
            let view = destinations::view_of(app.store(), app.control(), name).await?;
            json(StatusCode::OK, &view)
        }
        Endpoint::UpdateDestination => {
            let name = destinations::destination_name(segment)?;
            let update =
                destinations::parse_update(&json_body(parts, body).await?, app.tls_check())?;
            destinations::check_auth(&update, app.config())?;
            let view = destinations::update(app.store(), app.control(), name, update).await?;
            json(StatusCode::OK, &view)
        }
        Endpoint::PauseDestination | Endpoint::ResumeDestination => {
            let name = destinations::destination_name(segment)?;
            let update = tc_model::destination::DestinationUpdate {
                paused: Some(endpoint == Endpoint::PauseDestination),
                ..Default::default()
            };
            let view = destinations::update(app.store(), app.control(), name, update).await?;
            json(StatusCode::OK, &view)
        }
        Endpoint::CreateSchedule => schedules::create(app, &json_body(parts, body).await?).await,
        Endpoint::Schedules => schedules::list(app).await,
        Endpoint::Schedule => schedules::get(app, schedules::schedule_name(segment)?).await,
        Endpoint::ReplaceSchedule => {
            let name = schedules::schedule_name(segment)?;
            let bytes = json_body(parts, body).await?;
            let now = app.control().now();
            let change = schedules::parse_spec(&bytes, app.config(), now, Some(&name))
                .map(|spec| tc_model::schedule::ScheduleChange::Replace(Box::new(spec)));
            schedules::change(app, name, change).await
        }
        Endpoint::DeleteSchedule => {
            schedules::delete(app, schedules::schedule_name(segment)?).await
        }
        Endpoint::PauseSchedule | Endpoint::ResumeSchedule => {
            let name = schedules::schedule_name(segment)?;
            let paused = endpoint == Endpoint::PauseSchedule;
            let change = Ok(tc_model::schedule::ScheduleChange::Paused(paused));
            schedules::change(app, name, change).await
        }
        Endpoint::TriggerSchedule => {
            schedules::trigger(app, schedules::schedule_name(segment)?).await
        }
        Endpoint::CreateTenant => tenants::create(app, &json_body(parts, body).await?).await,
        Endpoint::Tenants => tenants::list(app).await,
        Endpoint::Tenant => tenants::get(app, tenants::tenant_name(segment)?).await,
        Endpoint::UpdateTenant => {
            let name = tenants::tenant_name(segment)?;
            tenants::update(app, name, &json_body(parts, body).await?).await
        }
        Endpoint::DeleteTenant => tenants::delete(app, tenants::tenant_name(segment)?).await,
        Endpoint::CreateKey => {
            let name = tenants::tenant_name(segment)?;
            tenants::create_key(app, name, &optional_json_body(parts, body).await?).await
        }
        Endpoint::RevokeKey => {
            let name = tenants::tenant_name(params.parent)?;
            tenants::revoke_key(app, name, segment.unwrap_or_default()).await
        }
        Endpoint::PutTopic
        | Endpoint::Topics
        | Endpoint::Topic
        | Endpoint::DeleteTopic
        | Endpoint::Subscribe
        | Endpoint::Subscriptions
        | Endpoint::Subscription
        | Endpoint::PatchSubscription
        | Endpoint::Unsubscribe
        | Endpoint::Replay
        | Endpoint::Publish
        | Endpoint::Event => topic_route(app, caller, endpoint, params, parts, body).await,
        Endpoint::Health => crate::admin::health(app).await,
        Endpoint::Metrics => crate::admin::metrics(app, &parts.headers).await,
        Endpoint::Backup => {
            let body = json_body(parts, body).await?;
            crate::backup::handle(app.backups(), app.config().api_token.is_some(), &body).await
        }
        Endpoint::Jwks => crate::well_known::jwks(app.config()),
        Endpoint::OpenIdConfiguration => crate::well_known::openid_configuration(app.config()),
    }
}

/// The `/topics` routes (topics.rs): the topic is the caller's, its name
/// checked first, then the body.
async fn topic_route<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    endpoint: Endpoint,
    params: Params<'_>,
    parts: &Parts,
    body: &mut RequestBody<AnyBody>,
) -> Answer {
    let (name, id) = match params.parent {
        Some(parent) => (Some(parent), params.last.unwrap_or_default()),
        None => (params.last, ""),
    };
    if endpoint == Endpoint::PutTopic {
        let bytes = optional_json_body(parts, body).await?;
        return topics::put(app, caller, name, &bytes).await;
    }
    if endpoint == Endpoint::Topics {
        return topics::list(app, caller).await;
    }
    let at = topics::topic_at(caller, name)?;
    match endpoint {
        Endpoint::Topic => topics::get(app, at).await,
        Endpoint::DeleteTopic => topics::delete(app, at).await,
        Endpoint::Subscribe => topics::subscribe(app, at, &json_body(parts, body).await?).await,
        Endpoint::Subscriptions => topics::subscriptions(app, at).await,
        Endpoint::Subscription => topics::subscription(app, at, id).await,
        Endpoint::PatchSubscription => {
            topics::patch(app, at, id, &json_body(parts, body).await?).await
        }
        Endpoint::Unsubscribe => topics::unsubscribe(app, at, id).await,
        Endpoint::Replay => {
            topics::replay(app, caller, at, id, &json_body(parts, body).await?).await
        }
        Endpoint::Publish => topics::publish(app, caller, at, &json_body(parts, body).await?).await,
        _ => topics::event(app, at, id).await,
    }
}

/// A malformed id names no task: 404, like an unknown one.
fn task_id(segment: Option<&str>) -> Result<TaskId, ApiError> {
    segment
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ApiError::NotFound("no task with this id".into()))
}

/// A JSON body: the Content-Type first (a wrong one is refused unread),
/// then the bytes.
async fn json_body(parts: &Parts, body: &mut RequestBody<AnyBody>) -> Result<Bytes, ApiError> {
    check_json_content_type(parts)?;
    body.read_all().await
}

/// A body that may be empty (or only white space); anything else is JSON.
async fn optional_json_body(
    parts: &Parts,
    body: &mut RequestBody<AnyBody>,
) -> Result<Bytes, ApiError> {
    let bytes = body.read_all().await?;
    if !bytes.iter().all(u8::is_ascii_whitespace) {
        check_json_content_type(parts)?;
    }
    Ok(bytes)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_whole_segments() {
        type Expected<'a> = Option<(Option<&'a str>, Option<&'a str>)>;
        let cases: &[(&str, &str, Expected)] = &[
            ("/tasks", "/tasks", Some((None, None))),
            ("/tasks", "/tasks/", None),
            ("/tasks", "/task", None),
            ("/tasks", "/tasksx", None),
            ("/tasks/{id}", "/tasks/abc", Some((None, Some("abc")))),
            ("/tasks/{id}", "/tasks/", None),
            ("/tasks/{id}", "/tasks/abc/", None),
            (
                "/tasks/{id}/cancel",
                "/tasks/abc/cancel",
                Some((None, Some("abc"))),
            ),
            ("/tasks/{id}/cancel", "/tasks/abc/result", None),
            ("/tasks/{id}/cancel", "/tasks//cancel", None),
            (
                "/tenants/{name}/keys/{id}",
                "/tenants/a/keys/k",
                Some((Some("a"), Some("k"))),
            ),
            ("/tenants/{name}/keys/{id}", "/tenants/a/keys/", None),
            ("/healthz", "/healthz", Some((None, None))),
            ("/healthz", "//healthz", None),
        ];
        for &(template, path, expected) in cases {
            assert_eq!(
                match_template(template, path).map(|p| (p.parent, p.last)),
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
            Matched::Found(
                _,
                Params {
                    last: Some("x"),
                    ..
                }
            )
        ));
    }

    #[test]
    fn every_route_is_reachable_and_unique() {
        for r in ROUTES {
            let path = r
                .path
                .replace("{id}", "some-id")
                .replace("{name}", "n")
                .replace("{destination}", "d:1");
            let method = Method::from_bytes(r.method.as_bytes()).unwrap();
            match find(&method, &path) {
                Matched::Found(found, _) => assert_eq!(found, r),
                _ => panic!("{} {} is not routed", r.method, r.path),
            }
        }
    }
}
