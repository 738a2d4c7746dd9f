//! The probes' routes, `GET /healthz` and `GET /metrics`, and the admin
//! listener (`--admin-listen`) that serves them alone. The main listener
//! serves both too; the admin listener has its own small connection limit
//! ([`crate::HttpConfig::admin_max_connections`]), so a load balancer's
//! probes and Prometheus' scrapes are answered however many API clients
//! hold the main listener's connections. It serves nothing else: a probe
//! port exposed to a monitoring network exposes no task.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use tc_model::store::TaskStore;

use crate::app::App;
use crate::control::Control;
use crate::error::ApiError;
use crate::metrics::UNMATCHED;
use crate::reply::{Answer, json};

/// How long `/healthz` waits for the store's round trip before it calls the
/// store unavailable: a probe must answer even while the writer is stuck.
const HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The OpenMetrics text format, which Prometheus scrapes.
const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Answers one request on the admin listener: the host rule as on the
/// main listener, then `/healthz` or `/metrics`, else 404. The body, if
/// any, is never read (hyper closes a connection left with one).
pub(crate) async fn handle_admin<S, C, B>(app: &App<S, C>, req: Request<B>) -> Response<Full<Bytes>>
where
    S: TaskStore,
    C: Control,
{
    let (parts, _body) = req.into_parts();
    let client = crate::client::client_of(&parts, &app.config().trusted_proxies);
    let path = parts.uri.path();
    let (label, answer) = match app.site().check(&parts, &client) {
        Err(e) => (UNMATCHED, Err(e)),
        Ok(()) => match (&parts.method, path) {
            (&Method::GET, "/healthz") => ("/healthz", health(app).await),
            (&Method::GET, "/metrics") => ("/metrics", metrics(app).await),
            (_, "/healthz" | "/metrics") => (
                UNMATCHED,
                Err(ApiError::MethodNotAllowed {
                    allow: "GET".into(),
                }),
            ),
            _ => (
                UNMATCHED,
                Err(ApiError::NotFound(format!(
                    "no route for {path} here: the admin listener serves /healthz and /metrics"
                ))),
            ),
        },
    };
    let response = answer.unwrap_or_else(ApiError::into_response);
    app.metrics().answered(label, response.status().as_u16());
    response
}

/// `200 {"status":"ok"}` only while the store answers a write round trip;
/// otherwise `503 {"status":"unavailable","reason":...}`.
pub(crate) async fn health<S: TaskStore, C: Control>(app: &App<S, C>) -> Answer {
    let reason = match tokio::time::timeout(HEALTH_TIMEOUT, app.store().health()).await {
        Ok(Ok(())) => return json(StatusCode::OK, &serde_json::json!({ "status": "ok" })),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!(
            "the store did not answer within {} ms",
            HEALTH_TIMEOUT.as_millis()
        ),
    };
    tracing::warn!(%reason, "health_unavailable");
    let mut response = json(
        StatusCode::SERVICE_UNAVAILABLE,
        &serde_json::json!({ "status": "unavailable", "reason": reason }),
    )?;
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    Ok(response)
}

/// Every registered metric, the task counts read from the store now.
pub(crate) async fn metrics<S: TaskStore, C: Control>(app: &App<S, C>) -> Answer {
    let counts = app.store().count_by_state().await?;
    app.metrics().set_task_counts(&counts);
    // The task counts are the scrape's point; the tenants' gauges are
    // left as they were when the store cannot list tenants now.
    match app.store().tenants().await {
        Ok(tenants) => app.metrics().set_tenants(&tenants),
        Err(e) => tracing::warn!(error = %e, "metrics_tenants_unread"),
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, app.registry())
        .map_err(|e| ApiError::Internal(format!("encoding metrics: {e}")))?;
    let mut response = Response::new(Full::new(Bytes::from(text)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
    Ok(response)
}
