//! The dashboard at `/ui/`: server-rendered HTML (maud escapes every
//! value), one stylesheet and one script compiled into the binary, charts
//! as inline SVG. Pages read the store through the same port as the JSON
//! API; the buttons are the page's JavaScript calling the JSON API with the
//! session cookie and the CSRF token.
//!
//! Routes (all `GET` but the two form posts):
//! - `/ui/` overview, `/ui/tasks` list and search, `/ui/tasks/{id}` one
//!   task, `/ui/bulk` bulk actions over a filter;
//! - `/ui/fragment/...` the live part of each page, which the script
//!   fetches every 2 s and swaps in;
//! - `/ui/login` (`GET` the form, `POST` the token), `POST /ui/logout`;
//!   the token is the admin's or a tenant's key: a tenant's session sees
//!   its own tasks (the task list, task pages, bulk actions) and none of
//!   the admin's pages (overview, schedules), as its key would;
//! - `/ui/assets/app.css`, `/ui/assets/app.js`.

pub(crate) mod activity;
pub(crate) mod auth;
mod pages;
mod throttle;

use std::sync::Arc;

use bytes::Bytes;
use http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HeaderValue, LOCATION, SET_COOKIE,
    X_CONTENT_TYPE_OPTIONS,
};
use http::request::Parts;
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use maud::Markup;
use tc_model::store::TaskStore;
use tc_model::tenant::Scope;

use prometheus_client::registry::Registry;

use crate::config::HttpConfig;
use crate::edge::body::{AnyBody, RequestBody};
use crate::worker_port::Control;

pub use activity::{Activity, Event, Series};

/// The policy every `/ui/` response carries: the page's own script, style
/// and images only (inline SVG needs none of `unsafe-inline`), fetches to
/// its own origin, never framed.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const APP_CSS: &str = include_str!("assets/app.css");
const APP_JS: &str = include_str!("assets/app.js");

/// What the overview shows beyond the store and the metrics registry,
/// handed in by whoever wires the service ([`crate::App::with_dashboard`]).
#[derive(Debug, Clone, Default)]
pub struct DashboardSources {
    /// The worker's `--concurrency`, shown beside the calls in flight.
    pub concurrency: Option<usize>,
    /// Whether the server signs calls to destinations without secrets of
    /// their own (`--signing-secret`): their rows say so.
    pub signs_by_default: bool,
}

/// The largest body a `/ui/` request may have (the login and logout forms
/// carry a token); a larger one is 413.
pub(crate) const FORM_MAX_BYTES: usize = 4 * 1024;

/// What the bodies of `/ui/` requests being read may hold together: 64
/// forms at their largest. Apart from the API's budget, so that requests
/// anyone can send without a credential cannot take what API requests need.
const FORM_BUDGET_BYTES: usize = 64 * FORM_MAX_BYTES;

/// The dashboard's state inside [`crate::App`].
#[derive(Debug)]
pub(crate) struct Ui {
    pub(crate) sessions: auth::Sessions,
    pub(crate) activity: Arc<Activity>,
    pub(crate) sources: DashboardSources,
    /// One permit per byte of `/ui/` request bodies being read.
    pub(crate) form_budget: Arc<tokio::sync::Semaphore>,
    /// Failed logins per client address.
    logins: throttle::LoginThrottle,
}

impl Default for Ui {
    fn default() -> Self {
        Ui {
            sessions: auth::Sessions::default(),
            activity: Arc::default(),
            sources: DashboardSources::default(),
            form_budget: Arc::new(tokio::sync::Semaphore::new(FORM_BUDGET_BYTES)),
            logins: throttle::LoginThrottle::default(),
        }
    }
}

/// Whether `path` belongs to the dashboard.
pub(crate) fn is_ui_path(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// What the pages show, and nothing else of the application: the store and
/// the worker's port they read, the dashboard's own state, the metrics
/// registry (the overview's figures) and the config (the token, proxies).
pub(crate) struct Source<'a, S, C> {
    pub(crate) store: &'a S,
    pub(crate) control: &'a C,
    pub(crate) ui: &'a Ui,
    pub(crate) registry: &'a Registry,
    pub(crate) config: &'a HttpConfig,
}

impl<S, C> Source<'_, S, C> {
    pub(crate) fn store(&self) -> &S {
        self.store
    }

    pub(crate) fn control(&self) -> &C {
        self.control
    }

    pub(crate) fn ui(&self) -> &Ui {
        self.ui
    }

    pub(crate) fn registry(&self) -> &Registry {
        self.registry
    }

    pub(crate) fn config(&self) -> &HttpConfig {
        self.config
    }
}

/// What every page needs to know about the request.
pub(crate) struct Ctx {
    /// The session's CSRF token, for the meta tag and the logout form.
    pub(crate) csrf: Option<String>,
    /// Whether a token protects the dashboard (then a logout is offered).
    pub(crate) auth: bool,
    /// What the session may see: the admin everything, a tenant its own
    /// tasks.
    pub(crate) scope: tc_model::tenant::Scope,
}

type Html = Response<Full<Bytes>>;

/// Answers a `/ui` request; every answer carries the security headers.
pub(crate) async fn route<S, C>(
    app: &Source<'_, S, C>,
    parts: &Parts,
    body: &mut RequestBody<AnyBody>,
) -> Html
where
    S: TaskStore,
    C: Control,
{
    secured(answer(app, parts, body).await)
}

/// A refusal of the host or origin rule ([`crate::edge::site`]) on a `/ui/`
/// path: a page saying which flags to set, with the refusal's status.
pub(crate) fn refused(e: &crate::error::ApiError) -> Html {
    secured(html(e.status(), pages::refused::page(e)))
}

/// Whether `parts` asks for one of the dashboard's assets: the same for
/// every host and naming nothing of the server, they are served whatever
/// the `Host`, so that a [`refused`] page for a misdirected host has its
/// style too.
pub(crate) fn is_asset_read(parts: &Parts) -> bool {
    matches!(parts.method, Method::GET | Method::HEAD)
        && matches!(parts.uri.path(), "/ui/assets/app.css" | "/ui/assets/app.js")
}

/// `response` with the headers every `/ui/` answer carries.
fn secured(mut response: Html) -> Html {
    let headers = response.headers_mut();
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // No Referer to other sites (a page's url carries task ids and
    // filters). Not `no-referrer`: under it a browser sends `Origin: null`
    // on the pages' own form posts, which the cross-origin rule refuses.
    headers.insert(
        http::header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        http::header::X_FRAME_OPTIONS,
        HeaderValue::from_static("DENY"),
    );
    if !headers.contains_key(CACHE_CONTROL) {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn answer<S, C>(
    app: &Source<'_, S, C>,
    parts: &Parts,
    body: &mut RequestBody<AnyBody>,
) -> Html
where
    S: TaskStore,
    C: Control,
{
    let path = parts.uri.path();
    let method = &parts.method;
    let get = *method == Method::GET || *method == Method::HEAD;
    match path {
        "/ui" => return redirect("/ui/", None),
        "/ui/assets/app.css" if get => return asset(APP_CSS, "text/css; charset=utf-8"),
        "/ui/assets/app.js" if get => {
            return asset(APP_JS, "text/javascript; charset=utf-8");
        }
        _ => {}
    }
    let token = app.config().api_token.as_deref();
    let session = app.ui().sessions.find(&parts.headers);
    if path == "/ui/login" {
        return match (token, method) {
            (None, _) => redirect("/ui/", None),
            (Some(_), m) if *m == Method::GET => html(StatusCode::OK, pages::login::page(None)),
            (Some(token), m) if *m == Method::POST => login(app, token, parts, body).await,
            _ => method_not_allowed("GET, POST"),
        };
    }
    // A tenant's session is worth what its key is now: revoked, it ends.
    let scope = match session.as_ref().and_then(|s| s.key) {
        None => Some(Scope::Admin),
        Some(hash) => match tenant_of(app, hash).await {
            Ok(tenant) => tenant.map(Scope::Tenant),
            Err(e) => return html(e.status(), pages::login::page(Some(&e.message()))),
        },
    };
    let scope = match scope {
        Some(scope) if token.is_none() || session.is_some() => scope,
        // Nothing but the login page without a session: fragments answer
        // 401 too, and the script then reloads into this page.
        _ => return html(StatusCode::UNAUTHORIZED, pages::login::page(None)),
    };
    let ctx = Ctx {
        csrf: session.as_ref().map(|s| s.csrf.clone()),
        auth: token.is_some(),
        scope,
    };
    if path == "/ui/logout" {
        if *method != Method::POST {
            return method_not_allowed("POST");
        }
        return logout(app, session, parts, body).await;
    }
    if !get {
        return method_not_allowed("GET");
    }
    let (fragment, page) = match path.strip_prefix("/ui/fragment") {
        Some(rest) => (true, rest),
        None => (false, path.strip_prefix("/ui").unwrap_or(path)),
    };
    let rendered = render_page(app, &ctx, page, parts.uri.query(), fragment).await;
    match rendered {
        Page::Rendered(rendered) => html(rendered.status, rendered.markup),
        Page::Redirect(to) => redirect(to, None),
    }
}

/// What a `GET` of a dashboard page answers.
enum Page {
    Rendered(pages::Rendered),
    /// Elsewhere: a tenant's home is its task list.
    Redirect(&'static str),
}

/// The page at `page` (the path after `/ui` or `/ui/fragment`), or the
/// fragment of it the script reloads, for `ctx`'s caller.
async fn render_page<S: TaskStore, C: Control>(
    app: &Source<'_, S, C>,
    ctx: &Ctx,
    page: &str,
    query: Option<&str>,
    fragment: bool,
) -> Page {
    let admin_page = matches!(page, "/" | "/overview" | "/schedules");
    if admin_page && !ctx.scope.is_admin() {
        // A tenant's home is its task list; the server's pages are the
        // admin's.
        if page == "/" && !fragment {
            return Page::Redirect("/ui/tasks");
        }
        let e = crate::error::ApiError::Forbidden("this page is for the admin token".into());
        return Page::Rendered(if fragment {
            pages::Rendered::error_fragment(&e)
        } else {
            pages::Rendered::error(ctx, &e, false)
        });
    }
    Page::Rendered(match page {
        "/" if !fragment => pages::overview::page(app, ctx).await,
        "/overview" if fragment => pages::overview::fragment(app).await,
        "/tasks" => pages::tasks::render(app, ctx, query, fragment).await,
        "/bulk" if !fragment => pages::bulk::page(ctx, query),
        "/schedules" if fragment => pages::schedules::fragment(app).await,
        "/schedules" => pages::schedules::page(app, ctx).await,
        "/flow-keys" if fragment => pages::flow_keys::fragment(app, ctx).await,
        "/flow-keys" => pages::flow_keys::page(app, ctx).await,
        "/topics" if fragment => pages::topics::fragment(app, ctx).await,
        "/topics" => pages::topics::page(app, ctx).await,
        _ if page.starts_with("/topics/") && !fragment => topic_page(app, ctx, page).await,
        _ => match page.strip_prefix("/tasks/") {
            Some(id) if !id.is_empty() && !id.contains('/') => {
                pages::task::render(app, ctx, id, fragment).await
            }
            _ => pages::Rendered::not_found(ctx, "No such page."),
        },
    })
}

/// `/ui/topics/{name}` and `/ui/topics/{name}/events/{id}`.
async fn topic_page<S: TaskStore, C: Control>(
    app: &Source<'_, S, C>,
    ctx: &Ctx,
    page: &str,
) -> pages::Rendered {
    let rest = page.strip_prefix("/topics/").unwrap_or_default();
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [name] if !name.is_empty() => pages::topics::topic(app, ctx, name).await,
        [name, "events", id] if !id.is_empty() => pages::topics::event(app, ctx, name, id).await,
        _ => pages::Rendered::not_found(ctx, "No such page."),
    }
}

/// `POST /ui/login` with `token=...` (a form): the right token gets a
/// session cookie and goes to the overview; a wrong one sees the form again.
/// An address with ten failures in the last minute is answered 429 without
/// its token being looked at.
async fn login<S, C>(
    app: &Source<'_, S, C>,
    token: &str,
    parts: &Parts,
    body: &mut RequestBody<AnyBody>,
) -> Html
where
    S: TaskStore,
    C: Control,
{
    let client = crate::edge::client_address::client_of(parts, &app.config().trusted_proxies);
    let throttle = &app.ui().logins;
    if let Some(wait) = throttle.held(client.addr) {
        let secs = throttle::retry_after_secs(wait);
        tracing::info!(client = ?client.addr, retry_after_s = secs, "ui_login_throttled");
        let mut r = html(
            StatusCode::TOO_MANY_REQUESTS,
            pages::login::page(Some(&format!(
                "Too many wrong tokens from this address: try again in {secs} s."
            ))),
        );
        r.headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
        return r;
    }
    let given = match body.read_all().await {
        Ok(bytes) => form_value(&bytes, "token"),
        // Too large, too slow, or no room to read it now: say so rather
        // than "wrong token".
        Err(e) => {
            tracing::info!(status = e.status().as_u16(), "ui_login_unread");
            return html(e.status(), pages::login::page(Some(&e.message())));
        }
    };
    // A tenant's key logs in as its tenant; the session keeps its hash.
    let key = match &given {
        Some(g) if tc_model::tenant::key::is_key(g) => {
            let hash = tc_model::tenant::key::KeyHash::of(g);
            match tenant_of(app, hash).await {
                Ok(Some(_)) => Some(Some(hash)),
                Ok(None) => None,
                Err(e) => return html(e.status(), pages::login::page(Some(&e.message()))),
            }
        }
        _ => None,
    };
    let key = match key {
        Some(key) => key,
        None if given
            .as_deref()
            .is_some_and(|g| auth::token_matches(g, token)) =>
        {
            None
        }
        None => {
            throttle.failed(client.addr);
            tracing::info!("ui_login_refused");
            return html(
                StatusCode::UNAUTHORIZED,
                pages::login::page(Some("That token is not right.")),
            );
        }
    };
    drop(given);
    throttle.succeeded(client.addr);
    match app.ui().sessions.create(key) {
        Ok(session) => {
            tracing::info!(tenant_key = key.is_some(), "ui_login");
            redirect("/ui/", Some(auth::set_cookie(&session, client.https)))
        }
        Err(e) => {
            tracing::error!(error = %e, "ui_login_failed");
            html(
                StatusCode::SERVICE_UNAVAILABLE,
                pages::login::page(Some("The server could not make a session; try again.")),
            )
        }
    }
}

/// The tenant whose live key hashes to `hash`, if any.
async fn tenant_of<S, C>(
    app: &Source<'_, S, C>,
    hash: tc_model::tenant::key::KeyHash,
) -> Result<Option<String>, crate::error::ApiError>
where
    S: TaskStore,
    C: Control,
{
    let owner = app.store().api_key(hash).await?;
    Ok(owner
        .filter(|o| o.hash.matches(&hash))
        .map(|o| o.tenant.name))
}

/// `POST /ui/logout` with the form's `csrf` field.
async fn logout<S, C>(
    app: &Source<'_, S, C>,
    session: Option<auth::Session>,
    parts: &Parts,
    body: &mut RequestBody<AnyBody>,
) -> Html
where
    S: TaskStore,
    C: Control,
{
    let given = match body.read_all().await {
        Ok(bytes) => form_value(&bytes, "csrf"),
        Err(_) => None,
    };
    match (session, given) {
        (Some(s), Some(g)) if auth::token_matches(&g, &s.csrf) => {
            app.ui().sessions.remove(&s.id);
            let https =
                crate::edge::client_address::client_of(parts, &app.config().trusted_proxies).https;
            redirect("/ui/login", Some(auth::clear_cookie(https)))
        }
        // Without a session there is nothing to end; a wrong CSRF token is
        // another site's form.
        (None, _) => redirect("/ui/login", None),
        (Some(_), _) => {
            let mut r = Response::new(Full::new(Bytes::from_static(
                b"CSRF token missing or wrong",
            )));
            *r.status_mut() = StatusCode::FORBIDDEN;
            r
        }
    }
}

/// The value of `name` in an `application/x-www-form-urlencoded` body.
pub(crate) fn form_value(bytes: &[u8], name: &str) -> Option<String> {
    form_pairs(std::str::from_utf8(bytes).ok()?)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

/// Every `name=value` pair of a query or form body, decoded; broken
/// escapes are left out.
pub(crate) fn form_pairs(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|pair| {
            let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((crate::query::decode(n)?, crate::query::decode(v)?))
        })
        .collect()
}

fn html(status: StatusCode, markup: Markup) -> Html {
    let mut r = Response::new(Full::new(Bytes::from(markup.into_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

fn asset(text: &'static str, content_type: &'static str) -> Html {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    let headers = r.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Compiled into the binary: they change only with it.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
    r
}

fn redirect(to: &'static str, cookie: Option<String>) -> Html {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SEE_OTHER;
    r.headers_mut()
        .insert(LOCATION, HeaderValue::from_static(to));
    if let Some(c) = cookie.and_then(|c| HeaderValue::try_from(c).ok()) {
        r.headers_mut().insert(SET_COOKIE, c);
    }
    r
}

fn method_not_allowed(allow: &'static str) -> Html {
    let mut r = Response::new(Full::new(Bytes::from_static(b"method not allowed")));
    *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    r.headers_mut()
        .insert(http::header::ALLOW, HeaderValue::from_static(allow));
    r
}

#[cfg(test)]
mod tests;
