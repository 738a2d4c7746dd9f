//! The edge of the API: the route table, and [`handle`], which answers one
//! request: the host rule, the dashboard or a route, its credential, its
//! path parameter and its body, read here once, then the resource's handler
//! (tasks.rs, destinations.rs, schedules.rs, admin.rs) over plain values.
//!
//! A new route is one row of the route table (`route_table!`): its name,
//! method, path, who may call it and its handler; docs/openapi.yaml
//! describes it (the OpenAPI test checks the two agree).

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
use crate::destinations;
use crate::edge::body::{AnyBody, BodyLimits, RequestBody, any_body};
use crate::error::ApiError;
use crate::flow_keys;
use crate::metrics::UNMATCHED;
use crate::reply::{Answer, json};
use crate::schedules;
use crate::tasks;
use crate::tenants;
use crate::topics;
use crate::worker_port::Control;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Anyone, without a credential: probes and the public JWT keys.
    Open,
    /// The admin credential only: the routes that manage the server
    /// (destinations, schedules, tenants, backups, metrics). A tenant's key
    /// gets 403 `forbidden`.
    Admin,
    /// The admin or a tenant's key: the task and topic routes, each over
    /// the caller's own.
    Tenant,
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
    access: Access,
    endpoint: Endpoint,
}

impl Route {
    /// Whether only the admin credential may call it: a tenant's key gets
    /// 403 `forbidden` (the routes that manage the server).
    pub fn admin_only(&self) -> bool {
        self.access == Access::Admin
    }
}

/// One matched request as a route's handler reads it: the service, the
/// caller, the path's parameters, the request head and its unread body.
struct Call<'a, S, C> {
    app: &'a App<S, C>,
    caller: &'a Caller,
    params: Params<'a>,
    parts: &'a Parts,
    body: &'a mut RequestBody<AnyBody>,
}

impl<'a, S: TaskStore, C: Control> Call<'a, S, C> {
    /// The last path parameter.
    fn segment(&self) -> Option<&'a str> {
        self.params.last
    }

    /// The caller's scope: every task and topic route works inside it.
    fn scope(&self) -> &tc_model::tenant::Scope {
        &self.caller.scope
    }

    /// The path's task id (a malformed one names no task: 404).
    fn task_id(&self) -> Result<TaskId, ApiError> {
        task_id(self.params.last)
    }

    /// The JSON body: its Content-Type first, then its bytes.
    async fn json(&mut self) -> Result<Bytes, ApiError> {
        json_body(self.parts, self.body).await
    }

    /// A body that may be empty; anything else is JSON.
    async fn optional_json(&mut self) -> Result<Bytes, ApiError> {
        optional_json_body(self.parts, self.body).await
    }

    /// The topic a `/topics/{name}…` route names, as the caller's.
    fn topic(&self) -> Result<tc_model::topic::TopicRef, ApiError> {
        topics::topic_at(self.caller, self.params.parent.or(self.params.last))
    }

    /// The subscription or event id after the topic's name (`""`: none).
    fn topic_item(&self) -> &'a str {
        match self.params.parent {
            Some(_) => self.params.last.unwrap_or_default(),
            None => "",
        }
    }
}

/// The route table: each route one row, `Name: METHOD "/path", access =>
/// |call| handler`. The handler reads the path parameter, the Content-Type
/// and the body in that order (the order the API checks them) and answers.
/// From the rows come [`ROUTES`] (what the router matches and the OpenAPI
/// test checks) and `dispatch`.
macro_rules! route_table {
    ($(
        $endpoint:ident: $method:ident $path:literal, $access:ident => |$call:ident| $handler:expr
    ),* $(,)?) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Endpoint {
            $($endpoint,)*
        }

        /// Every route the router serves. The router matches against this
        /// table, so it is the one truth the OpenAPI test checks against.
        pub const ROUTES: &[Route] = &[
            $(Route {
                method: stringify!($method),
                path: $path,
                needs_token: !matches!(Access::$access, Access::Open),
                access: Access::$access,
                endpoint: Endpoint::$endpoint,
            },)*
        ];

        /// The matched route's handler.
        async fn dispatch<S: TaskStore, C: Control>(
            endpoint: Endpoint,
            call: Call<'_, S, C>,
        ) -> Answer {
            match endpoint {
                $(Endpoint::$endpoint => {
                    #[allow(unused_mut)]
                    let mut $call = call;
                    $handler
                })*
            }
        }
    };
}

// Every route but the probes and the public JWT keys is behind the token.
// Metrics name every tenant, so a scrape on this listener takes the admin
// token (unless `metrics_public`); the admin listener serves them without.
route_table! {
    Submit: POST "/tasks", Tenant => |c| {
        // A refused body counts as a refused submit: read inside its count.
        let trace = crate::trace::task_context(c.parts);
        tasks::submit(c.app, c.caller, c.json().await, trace).await
    },
    Batch: POST "/tasks/batch", Tenant => |c| {
        let trace = crate::trace::task_context(c.parts);
        tasks::batch(c.app, c.caller, &c.json().await?, trace).await
    },
    Bulk: POST "/tasks/bulk", Tenant => |c| tasks::bulk(c.app, c.caller, &c.json().await?).await,
    List: GET "/tasks", Tenant => |c| tasks::list(c.app, c.scope(), c.parts).await,
    Get: GET "/tasks/{id}", Tenant => |c| tasks::get(c.app, c.scope(), c.task_id()?, c.parts).await,
    Result: GET "/tasks/{id}/result", Tenant => |c| {
        tasks::result(c.app, c.scope(), c.task_id()?).await
    },
    Cancel: POST "/tasks/{id}/cancel", Tenant => |c| {
        tasks::cancel(c.app, c.scope(), c.task_id()?).await
    },
    Retry: POST "/tasks/{id}/retry", Tenant => |c| {
        let id = c.task_id()?;
        tasks::retry(c.app, c.caller, id, &c.optional_json().await?).await
    },
    Delete: DELETE "/tasks/{id}", Tenant => |c| tasks::delete(c.app, c.scope(), c.task_id()?).await,
    Destinations: GET "/destinations", Admin => |c| {
        json(StatusCode::OK, &destinations::list_of(c.app.store(), c.app.control()).await?)
    },
    Destination: GET "/destinations/{destination}", Admin => |c| {
        let name = destinations::destination_name(c.segment())?;
        json(StatusCode::OK, &destinations::view_of(c.app.store(), c.app.control(), name).await?)
    },
    UpdateDestination: PUT "/destinations/{destination}", Admin => |c| {
        let name = destinations::destination_name(c.segment())?;
        let update = destinations::parse_update(&c.json().await?, c.app.tls_check())?;
        destinations::check_auth(&update, c.app.config())?;
        update_destination(c.app, name, update).await
    },
    PauseDestination: POST "/destinations/{destination}/pause", Admin => |c| {
        pause_destination(c.app, c.segment(), true).await
    },
    ResumeDestination: POST "/destinations/{destination}/resume", Admin => |c| {
        pause_destination(c.app, c.segment(), false).await
    },
    CreateSchedule: POST "/schedules", Admin => |c| {
        schedules::create(c.app, &c.json().await?).await
    },
    Schedules: GET "/schedules", Admin => |c| schedules::list(c.app).await,
    Schedule: GET "/schedules/{name}", Admin => |c| {
        schedules::get(c.app, schedules::schedule_name(c.segment())?).await
    },
    ReplaceSchedule: PUT "/schedules/{name}", Admin => |c| {
        let name = schedules::schedule_name(c.segment())?;
        let bytes = c.json().await?;
        let now = c.app.control().now();
        let change = schedules::parse_spec(&bytes, c.app.config(), now, Some(&name))
            .map(|spec| tc_model::schedule::ScheduleChange::Replace(Box::new(spec)));
        schedules::change(c.app, name, change).await
    },
    DeleteSchedule: DELETE "/schedules/{name}", Admin => |c| {
        schedules::delete(c.app, schedules::schedule_name(c.segment())?).await
    },
    PauseSchedule: POST "/schedules/{name}/pause", Admin => |c| {
        pause_schedule(c.app, c.segment(), true).await
    },
    ResumeSchedule: POST "/schedules/{name}/resume", Admin => |c| {
        pause_schedule(c.app, c.segment(), false).await
    },
    TriggerSchedule: POST "/schedules/{name}/trigger", Admin => |c| {
        schedules::trigger(c.app, schedules::schedule_name(c.segment())?).await
    },
    CreateTenant: POST "/tenants", Admin => |c| tenants::create(c.app, &c.json().await?).await,
    Tenants: GET "/tenants", Admin => |c| tenants::list(c.app).await,
    Tenant: GET "/tenants/{name}", Admin => |c| {
        tenants::get(c.app, tenants::tenant_name(c.segment())?).await
    },
    UpdateTenant: PUT "/tenants/{name}", Admin => |c| {
        let name = tenants::tenant_name(c.segment())?;
        tenants::update(c.app, name, &c.json().await?).await
    },
    DeleteTenant: DELETE "/tenants/{name}", Admin => |c| {
        tenants::delete(c.app, tenants::tenant_name(c.segment())?).await
    },
    CreateKey: POST "/tenants/{name}/keys", Admin => |c| {
        let name = tenants::tenant_name(c.segment())?;
        tenants::create_key(c.app, name, &c.optional_json().await?).await
    },
    RevokeKey: DELETE "/tenants/{name}/keys/{id}", Admin => |c| {
        let name = tenants::tenant_name(c.params.parent)?;
        tenants::revoke_key(c.app, name, c.segment().unwrap_or_default()).await
    },
    PutTopic: PUT "/topics/{name}", Tenant => |c| {
        let bytes = c.optional_json().await?;
        topics::put(c.app, c.caller, c.segment(), &bytes).await
    },
    Topics: GET "/topics", Tenant => |c| topics::list(c.app, c.caller).await,
    Topic: GET "/topics/{name}", Tenant => |c| topics::get(c.app, c.topic()?).await,
    DeleteTopic: DELETE "/topics/{name}", Tenant => |c| topics::delete(c.app, c.topic()?).await,
    Subscribe: POST "/topics/{name}/subscriptions", Tenant => |c| {
        let at = c.topic()?;
        topics::subscribe(c.app, at, &c.json().await?).await
    },
    Subscriptions: GET "/topics/{name}/subscriptions", Tenant => |c| {
        topics::subscriptions(c.app, c.topic()?).await
    },
    Subscription: GET "/topics/{name}/subscriptions/{id}", Tenant => |c| {
        topics::subscription(c.app, c.topic()?, c.topic_item()).await
    },
    PatchSubscription: PATCH "/topics/{name}/subscriptions/{id}", Tenant => |c| {
        let at = c.topic()?;
        topics::patch(c.app, at, c.topic_item(), &c.json().await?).await
    },
    Unsubscribe: DELETE "/topics/{name}/subscriptions/{id}", Tenant => |c| {
        topics::unsubscribe(c.app, c.topic()?, c.topic_item()).await
    },
    Replay: POST "/topics/{name}/subscriptions/{id}/replay", Tenant => |c| {
        let at = c.topic()?;
        topics::replay(c.app, c.caller, at, c.topic_item(), &c.json().await?).await
    },
    Publish: POST "/topics/{name}/events", Tenant => |c| {
        let at = c.topic()?;
        topics::publish(c.app, c.caller, at, &c.json().await?).await
    },
    Event: GET "/topics/{name}/events/{id}", Tenant => |c| {
        topics::event(c.app, c.topic()?, c.topic_item()).await
    },
    PutFlowKey: PUT "/flow-keys/{key}", Tenant => |c| {
        let key = flow_keys::key_name(c.segment())?;
        let update = flow_keys::parse_update(&c.json().await?)?;
        flow_keys::put(c.app, c.caller, key, update).await
    },
    FlowKeys: GET "/flow-keys", Tenant => |c| flow_keys::list(c.app, c.caller).await,
    FlowKey: GET "/flow-keys/{key}", Tenant => |c| {
        flow_keys::get(c.app, c.caller, flow_keys::key_name(c.segment())?).await
    },
    DeleteFlowKey: DELETE "/flow-keys/{key}", Tenant => |c| {
        flow_keys::delete(c.app, c.caller, flow_keys::key_name(c.segment())?).await
    },
    Health: GET "/healthz", Open => |c| crate::admin::health(c.app).await,
    Metrics: GET "/metrics", Admin => |c| crate::admin::metrics(c.app, &c.parts.headers).await,
    Backup: POST "/admin/backup", Admin => |c| {
        let body = c.json().await?;
        crate::backup::handle(c.app.backups(), c.app.config().api_token.is_some(), &body).await
    },
    Jwks: GET "/.well-known/jwks.json", Open => |c| crate::well_known::jwks(c.app.config()),
    OpenIdConfiguration: GET "/.well-known/openid-configuration", Open => |c| {
        crate::well_known::openid_configuration(c.app.config())
    },
}

/// `PUT /destinations/{d}` and the pause and resume routes: the update,
/// then the destination's view.
async fn update_destination<S: TaskStore, C: Control>(
    app: &App<S, C>,
    name: String,
    update: tc_model::destination::DestinationUpdate,
) -> Answer {
    let view = destinations::update(app.store(), app.control(), name, update).await?;
    json(StatusCode::OK, &view)
}

async fn pause_destination<S: TaskStore, C: Control>(
    app: &App<S, C>,
    segment: Option<&str>,
    paused: bool,
) -> Answer {
    let name = destinations::destination_name(segment)?;
    let update = tc_model::destination::DestinationUpdate {
        paused: Some(paused),
        ..Default::default()
    };
    update_destination(app, name, update).await
}

async fn pause_schedule<S: TaskStore, C: Control>(
    app: &App<S, C>,
    segment: Option<&str>,
    paused: bool,
) -> Answer {
    let name = schedules::schedule_name(segment)?;
    let change = Ok(tc_model::schedule::ScheduleChange::Paused(paused));
    schedules::change(app, name, change).await
}

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
    let client = crate::edge::client_address::client_of(parts, &app.config().trusted_proxies);
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
    if !caller.scope.is_admin() && route.access != Access::Tenant {
        return (
            route.path,
            Err(ApiError::Forbidden(format!(
                "{} {} is for the admin credential, not a tenant's key",
                route.method, route.path
            ))),
        );
    }
    let call = Call {
        app,
        caller: &caller,
        params,
        parts,
        body,
    };
    (route.path, dispatch(route.endpoint, call).await)
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
