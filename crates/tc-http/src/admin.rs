//! The probes' routes, `GET /healthz` and `GET /metrics`, and the admin
//! listener (`--admin-listen`) that serves them alone. The main listener
//! serves both too; the admin listener has its own small connection limit
//! ([`crate::HttpConfig::admin_max_connections`]), so a load balancer's
//! probes and Prometheus' scrapes are answered however many API clients
//! hold the main listener's connections. It serves nothing else: a probe
//! port exposed to a monitoring network exposes no task.
//!
//! `/metrics` speaks both text formats, chosen by `Accept` as Prometheus'
//! own client libraries choose: OpenMetrics to a scraper that names
//! `application/openmetrics-text` (Prometheus does), the Prometheus text
//! format 0.0.4 to everyone else (a plain `curl`, older scrapers, the
//! parsers that read only that format).

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use tc_model::store::TaskStore;

use crate::app::App;
use crate::error::ApiError;
use crate::metrics::UNMATCHED;
use crate::reply::{Answer, json};
use crate::worker_port::Control;

/// How long `/healthz` waits for the store's round trip before it calls the
/// store unavailable: a probe must answer even while the writer is stuck.
const HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The OpenMetrics text format, which Prometheus asks for.
const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The Prometheus text format, for every other scraper.
const PROMETHEUS_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The media type that asks for OpenMetrics.
const OPENMETRICS: &str = "application/openmetrics-text";

/// Answers one request on the admin listener: the host rule as on the
/// main listener, then `/healthz` or `/metrics`, else 404. The body, if
/// any, is never read (hyper closes a connection left with one).
pub(crate) async fn handle_admin<S, C, B>(app: &App<S, C>, req: Request<B>) -> Response<Full<Bytes>>
where
    S: TaskStore,
    C: Control,
{
    let (parts, _body) = req.into_parts();
    let client = crate::edge::client_address::client_of(&parts, &app.config().trusted_proxies);
    let path = parts.uri.path();
    let (label, answer) = match app.site().check(&parts, &client) {
        Err(e) => (UNMATCHED, Err(e)),
        Ok(()) => match (&parts.method, path) {
            (&Method::GET, "/healthz") => ("/healthz", health(app).await),
            (&Method::GET, "/metrics") => ("/metrics", metrics(app, &parts.headers).await),
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

/// Every registered metric, the task counts read from the store now, in
/// the format `headers`' `Accept` asks for ([`wants_openmetrics`]).
pub(crate) async fn metrics<S: TaskStore, C: Control>(
    app: &App<S, C>,
    headers: &http::HeaderMap,
) -> Answer {
    let counts = app.store().count_by_state().await?;
    app.metrics().set_task_counts(&counts);
    // The task counts are the scrape's point; the tenants' gauges are
    // left as they were when the store cannot list tenants now.
    match app.store().tenants().await {
        Ok(tenants) => app.metrics().set_tenants(&tenants),
        Err(e) => tracing::warn!(error = %e, "metrics_tenants_unread"),
    }
    let openmetrics = wants_openmetrics(headers);
    let mut text = String::new();
    let encoded = if openmetrics {
        prometheus_client::encoding::text::encode(&mut text, app.registry())
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut text, app.registry())
    };
    encoded.map_err(|e| ApiError::Internal(format!("encoding metrics: {e}")))?;
    let content_type = if openmetrics {
        OPENMETRICS_CONTENT_TYPE
    } else {
        PROMETHEUS_CONTENT_TYPE
    };
    let mut response = Response::new(Full::new(Bytes::from(text)));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Caches between a scraper and this server keep one answer per format.
    headers.insert(http::header::VARY, HeaderValue::from_static("Accept"));
    Ok(response)
}

/// Whether `Accept` names OpenMetrics with a weight above 0 that no
/// `text/plain` outweighs. Prometheus sends OpenMetrics first with the
/// highest weight; a client that names neither, or sends no `Accept`,
/// gets the Prometheus text format, as from Prometheus' client libraries.
fn wants_openmetrics(headers: &http::HeaderMap) -> bool {
    let mut openmetrics: Option<f32> = None;
    let mut text = 0.0_f32;
    let entries = headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    for entry in entries {
        let mut params = entry.split(';').map(str::trim);
        let media = params.next().unwrap_or_default();
        let q = params
            .filter_map(|p| p.split_once('='))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
            .map_or(1.0, |(_, v)| v.trim().parse::<f32>().unwrap_or(0.0));
        if media.eq_ignore_ascii_case(OPENMETRICS) {
            openmetrics = Some(openmetrics.map_or(q, |best| best.max(q)));
        } else if media.eq_ignore_ascii_case("text/plain") {
            text = text.max(q);
        }
    }
    openmetrics.is_some_and(|q| q > 0.0 && q >= text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `Accept` (each value one header line) and whether it gets
    /// OpenMetrics.
    fn check(accept: &[&str], openmetrics: bool) {
        let mut headers = http::HeaderMap::new();
        for value in accept {
            headers.append(http::header::ACCEPT, HeaderValue::from_str(value).unwrap());
        }
        assert_eq!(wants_openmetrics(&headers), openmetrics, "{accept:?}");
    }

    #[test]
    fn accept_chooses_the_format_as_prometheus_clients_do() {
        check(&[], false);
        check(&["*/*"], false);
        check(&["text/plain"], false);
        check(&["text/plain; version=0.0.4"], false);
        check(&["application/json"], false);
        check(&["application/openmetrics-text"], true);
        check(&["Application/OpenMetrics-Text; version=1.0.0"], true);
        // What Prometheus 2.x and 3.x send.
        check(
            &[
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            ],
            true,
        );
        check(
            &[
                "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.5,*/*;q=0.1",
            ],
            true,
        );
        // Over two header lines.
        check(&["text/plain;q=0.5", "application/openmetrics-text"], true);
        // Refused, or outweighed by text.
        check(&["application/openmetrics-text;q=0"], false);
        check(&["application/openmetrics-text;q=junk"], false);
        check(&["text/plain, application/openmetrics-text;q=0.5"], false);
        check(
            &["text/plain;q=0.5, application/openmetrics-text;q=0.5"],
            true,
        );
    }
}
