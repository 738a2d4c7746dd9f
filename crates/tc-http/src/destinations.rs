//! The `/destinations` routes: every destination's settings, load and
//! breaker, and the operator's changes to its settings.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tc_model::auth::DestinationAuth;
use tc_model::destination::{Destination, DestinationUpdate, SharedWith, parse_destination};
use tc_model::store::TaskStore;

use crate::call_fields::{parse_headers, parse_signing_secrets};
use crate::config::HttpConfig;
use crate::dto::rfc3339;
use crate::error::{About, ApiError, json_type};
use crate::worker_port::{Control, DestinationRuntime};

/// A destination as the API shows it.
#[derive(Debug, Serialize)]
pub(crate) struct DestinationView {
    destination: String,
    max_in_flight: Option<u32>,
    rate_per_s: Option<f64>,
    burst: Option<u32>,
    paused: bool,
    /// The default headers' names, sorted; their values are never shown.
    header_names: Vec<String>,
    /// How many signing secrets it has; never the secrets.
    signing_secrets: usize,
    /// The tenants its headers and secrets are lent to (`["*"]`: all).
    share_with_tenants: Vec<String>,
    /// How its calls authenticate: the type and the non-secret fields
    /// (`null`: none).
    auth: Option<Value>,
    /// Its client certificate's subject and `not_after`; never the key.
    client_cert: Option<crate::client_tls::ClientCertView>,
    /// How many CA certificates it trusts besides the server's roots.
    ca_certs: usize,
    in_flight: u64,
    pending: u64,
    breaker: &'static str,
    backoff_until: Option<String>,
    last_error: Option<String>,
    last_status: Option<u16>,
    effective_max_in_flight: Option<u32>,
    ratelimit_remaining: Option<u64>,
    ratelimit_reset_at: Option<String>,
}

impl DestinationView {
    pub(crate) fn new(d: Destination, runtime: DestinationRuntime) -> DestinationView {
        DestinationView {
            max_in_flight: d.settings.max_in_flight,
            rate_per_s: d.settings.rate_per_s,
            // The bucket's size in effect, when a rate is set.
            burst: d
                .settings
                .burst
                .or_else(|| d.settings.bucket_size().map(|size| size as u32)),
            paused: d.settings.paused,
            header_names: d.settings.headers.names().map(str::to_owned).collect(),
            signing_secrets: d.settings.signing_secrets.len(),
            share_with_tenants: d
                .settings
                .share_with_tenants
                .names()
                .map(str::to_owned)
                .collect(),
            auth: d.settings.auth.as_ref().map(DestinationAuth::view),
            client_cert: crate::client_tls::cert_view(&d.settings),
            ca_certs: crate::client_tls::ca_count(&d.settings),
            // Running tasks as the store counts them: every node's.
            in_flight: d.running,
            pending: d.pending,
            breaker: runtime.breaker,
            backoff_until: runtime.backoff_until.map(rfc3339),
            last_error: runtime.last_error,
            last_status: runtime.last_status,
            effective_max_in_flight: runtime.effective_max_in_flight,
            ratelimit_remaining: runtime.ratelimit_remaining,
            ratelimit_reset_at: runtime.ratelimit_reset_at.map(rfc3339),
            destination: d.name,
        }
    }
}

/// The list's envelope.
#[derive(Debug, Serialize)]
pub(crate) struct DestinationList {
    destinations: Vec<DestinationView>,
}

/// The `{destination}` path segment, percent-decoded (an IPv6 host's
/// brackets may arrive encoded) and in the form tasks carry.
pub(crate) fn destination_name(segment: Option<&str>) -> Result<String, ApiError> {
    let raw = segment.unwrap_or_default();
    let decoded = percent_decode(raw)
        .ok_or_else(|| ApiError::InvalidRequest("destination: bad percent-encoding".into()))?;
    parse_destination(&decoded).map_err(|e| ApiError::InvalidRequest(e.to_string()))
}

pub(crate) fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_owned());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Parses a `PUT /destinations/{destination}` body: any of the settings,
/// nothing else. A field left out is left as it is; `null` clears a cap, a
/// rate, the headers or the secrets, or gives `burst` back its default.
pub(crate) fn parse_update(
    bytes: &[u8],
    tls_check: Option<&dyn crate::client_tls::TlsCheck>,
) -> Result<DestinationUpdate, ApiError> {
    let invalid = ApiError::InvalidRequest;
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(invalid("body: must be a JSON object".into()));
    }
    // Each value kept as its text, so `headers` can be read member by
    // member (a name given twice is refused, not silently collapsed).
    let fields: BTreeMap<String, Box<RawValue>> =
        serde_json::from_slice(bytes).map_err(|e| invalid(format!("body: not valid JSON: {e}")))?;
    let mut update = DestinationUpdate::default();
    let mut tls = crate::client_tls::TlsFields::default();
    for (field, raw) in fields {
        let value: Value = serde_json::from_str(raw.get())
            .map_err(|e| invalid(format!("body: not valid JSON: {e}")))?;
        match field.as_str() {
            "max_in_flight" => update.max_in_flight = Some(nullable_u32(&field, &value, 1)?),
            "burst" => update.burst = Some(nullable_u32(&field, &value, 1)?),
            "rate_per_s" => {
                update.rate_per_s = Some(match &value {
                    Value::Null => None,
                    Value::Number(n) => match n.as_f64() {
                        Some(rate) if rate.is_finite() && rate > 0.0 => Some(rate),
                        _ => return Err(invalid("rate_per_s: must be above 0, or null".into())),
                    },
                    _ => return Err(invalid("rate_per_s: must be a number or null".into())),
                });
            }
            "paused" => match value {
                Value::Bool(b) => update.paused = Some(b),
                _ => return Err(invalid("paused: must be a boolean".into())),
            },
            "headers" => {
                update.headers = Some(parse_headers(Some(&raw))?);
            }
            "signing_secrets" => update.signing_secrets = Some(parse_signing_secrets(&value)?),
            "share_with_tenants" => update.share_with_tenants = Some(parse_share(&value)?),
            "auth" => {
                update.auth = Some(
                    DestinationAuth::from_json(&value)
                        .map_err(|e| ApiError::InvalidRequest(e.to_string()))?,
                );
            }
            other if tls.take(other, &value)? => {}
            other => {
                return Err(crate::error::unknown_field(
                    other,
                    &[
                        "max_in_flight",
                        "rate_per_s",
                        "burst",
                        "paused",
                        "headers",
                        "signing_secrets",
                        "share_with_tenants",
                        "auth",
                        "client_cert",
                        "client_key",
                        "ca_certs",
                    ],
                ));
            }
        }
    }
    tls.apply(&mut update, tls_check)?;
    update
        .validate()
        .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    Ok(update)
}

/// The rules of an update's `auth` that depend on this server: a `jwt`
/// needs its `--issuer`; a `token_url` obeys the allow-list as a task's url
/// does (the private-address guard applies when the token is fetched).
pub(crate) fn check_auth(update: &DestinationUpdate, config: &HttpConfig) -> Result<(), ApiError> {
    match update.auth.as_ref().and_then(Option::as_ref) {
        Some(DestinationAuth::Jwt(_)) if config.issuer.is_none() => Err(ApiError::InvalidRequest(
            "auth.type: jwt needs this server's issuer (--issuer or TC_ISSUER), which is not set"
                .into(),
        )),
        Some(DestinationAuth::OAuth2(grant)) => {
            if tc_model::urls_allowed(&grant.token_url, None, &config.allow_url_prefixes).is_err() {
                return Err(tc_model::UrlNotAllowed {
                    field: "auth.token_url",
                }
                .into());
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `share_with_tenants`: a list of tenant names, or `["*"]` for every
/// tenant; `null` or `[]` for none.
fn parse_share(value: &Value) -> Result<SharedWith, ApiError> {
    let invalid =
        |message: String| ApiError::InvalidRequest(format!("share_with_tenants: {message}"));
    let items = match value {
        Value::Null => return Ok(SharedWith::default()),
        Value::Array(items) => items,
        other => {
            return Err(invalid(format!(
                "must be a list of tenant names, [\"*\"] or null, got {}",
                json_type(other)
            )));
        }
    };
    let names = items
        .iter()
        .map(Value::as_str)
        .collect::<Option<Vec<&str>>>()
        .ok_or_else(|| invalid("every entry must be a string".into()))?;
    SharedWith::parse(&names).map_err(|e| ApiError::InvalidRequest(e.to_string()))
}

pub(crate) fn nullable_u32(field: &str, value: &Value, min: u64) -> Result<Option<u32>, ApiError> {
    match value {
        Value::Null => Ok(None),
        Value::Number(n) => match crate::dto::whole_number(n) {
            Some(v) if v >= min => u32::try_from(v)
                .map(Some)
                .map_err(|_| ApiError::InvalidRequest(format!("{field}: out of range"))),
            _ => Err(ApiError::InvalidRequest(format!(
                "{field}: must be an integer of at least {min}, or null"
            ))),
        },
        _ => Err(ApiError::InvalidRequest(format!(
            "{field}: must be an integer or null"
        ))),
    }
}

/// A destination's view, 404 when it has neither tasks nor settings.
pub(crate) async fn view_of<S: TaskStore, C: Control>(
    store: &S,
    control: &C,
    name: String,
) -> Result<DestinationView, ApiError> {
    match store.destination(name).await {
        Ok(d) => {
            let holds = cluster_holds(store, control).await;
            let runtime = control
                .destination_state(&d.name)
                .with_cluster(holds.get(&d.name), control.now());
            Ok(DestinationView::new(d, runtime))
        }
        Err(e) => Err(ApiError::from_store(e, About::Destination)),
    }
}

/// Every destination's view.
pub(crate) async fn list_of<S: TaskStore, C: Control>(
    store: &S,
    control: &C,
) -> Result<DestinationList, ApiError> {
    let holds = cluster_holds(store, control).await;
    let destinations = store
        .destinations()
        .await?
        .into_iter()
        .map(|d| {
            let runtime = control
                .destination_state(&d.name)
                .with_cluster(holds.get(&d.name), control.now());
            DestinationView::new(d, runtime)
        })
        .collect();
    Ok(DestinationList { destinations })
}

/// Applies `update` and tells the worker.
pub(crate) async fn update<S: TaskStore, C: Control>(
    store: &S,
    control: &C,
    name: String,
    update: DestinationUpdate,
) -> Result<DestinationView, ApiError> {
    let updated = store
        .update_destination(name, update.clone(), control.now())
        .await?;
    tracing::info!(
        destination = %updated.name,
        max_in_flight = updated.settings.max_in_flight,
        rate_per_s = updated.settings.rate_per_s,
        burst = updated.settings.burst,
        paused = updated.settings.paused,
        headers = updated.settings.headers.len(),
        signing_secrets = updated.settings.signing_secrets.len(),
        share_with_tenants = updated.settings.share_with_tenants.names().count(),
        auth = updated.settings.auth.as_ref().map(DestinationAuth::type_name),
        client_cert = updated.settings.client_tls.is_some(),
        ca_certs = updated.settings.ca_certs.is_some(),
        "destination_updated"
    );
    control.destinations_changed();
    let holds = cluster_holds(store, control).await;
    let runtime = control
        .destination_state(&updated.name)
        .with_cluster(holds.get(&updated.name), control.now());
    Ok(DestinationView::new(updated, runtime))
}

/// The holds every node shares; none when the store
/// cannot say, and the view shows this node's alone.
pub(crate) async fn cluster_holds<S: TaskStore, C: Control>(
    store: &S,
    control: &C,
) -> std::collections::BTreeMap<String, tc_model::cluster::DestinationHolds> {
    match store.share_holds(Vec::new(), control.now()).await {
        Ok(holds) => holds.into_iter().collect(),
        Err(e) => {
            tracing::warn!(error = %e, "destination_holds_read_failed");
            std::collections::BTreeMap::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_parse_or_name_the_field() {
        // (body, Ok(update) or Err(field named in the message))
        let rows: &[(&str, Result<DestinationUpdate, &str>)] = &[
            ("{}", Ok(DestinationUpdate::default())),
            (
                r#"{"max_in_flight": 2, "paused": true}"#,
                Ok(DestinationUpdate {
                    max_in_flight: Some(Some(2)),
                    paused: Some(true),
                    ..Default::default()
                }),
            ),
            (
                r#"{"max_in_flight": null, "rate_per_s": 2.5, "burst": 3}"#,
                Ok(DestinationUpdate {
                    max_in_flight: Some(None),
                    rate_per_s: Some(Some(2.5)),
                    burst: Some(Some(3)),
                    ..Default::default()
                }),
            ),
            (r#"{"max_in_flight": 0}"#, Err("max_in_flight")),
            (r#"{"max_in_flight": 10001}"#, Err("max_in_flight")),
            (r#"{"max_in_flight": 1.5}"#, Err("max_in_flight")),
            (
                r#"{"max_in_flight": 20.0, "burst": 4925e0}"#,
                Ok(DestinationUpdate {
                    max_in_flight: Some(Some(20)),
                    burst: Some(Some(4925)),
                    ..Default::default()
                }),
            ),
            (r#"{"max_in_flight": "2"}"#, Err("max_in_flight")),
            (r#"{"rate_per_s": 0}"#, Err("rate_per_s")),
            (r#"{"rate_per_s": -1}"#, Err("rate_per_s")),
            (r#"{"burst": 0}"#, Err("burst")),
            (r#"{"burst": 1000001}"#, Err("burst")),
            (r#"{"burst": 99999999999}"#, Err("burst")),
            (r#"{"paused": "yes"}"#, Err("paused")),
            (r#"{"colour": "blue"}"#, Err("colour")),
            (
                r#"{"share_with_tenants": ["b", "a"]}"#,
                Ok(DestinationUpdate {
                    share_with_tenants: Some(SharedWith::parse(&["a", "b"]).unwrap()),
                    ..Default::default()
                }),
            ),
            (
                r#"{"share_with_tenants": null}"#,
                Ok(DestinationUpdate {
                    share_with_tenants: Some(SharedWith::default()),
                    ..Default::default()
                }),
            ),
            (
                r#"{"share_with_tenants": ["*", "a"]}"#,
                Err("share_with_tenants"),
            ),
            (
                r#"{"share_with_tenants": ["A"]}"#,
                Err("share_with_tenants"),
            ),
            (r#"{"share_with_tenants": "a"}"#, Err("share_with_tenants")),
            (r#"{"share_with_tenants": [1]}"#, Err("share_with_tenants")),
            (
                r#"{"auth": null}"#,
                Ok(DestinationUpdate {
                    auth: Some(None),
                    ..Default::default()
                }),
            ),
            (r#"{"auth": {"type": "digest"}}"#, Err("auth.type")),
            (
                r#"{"auth": {"type": "oauth2_client_credentials", "token_url": "x"}}"#,
                Err("auth.token_url"),
            ),
            (
                r#"{"auth": {"type": "jwt", "audience": "a", "lifetime_s": 30}}"#,
                Err("auth.lifetime_s"),
            ),
            ("[]", Err("body")),
            ("{", Err("body")),
        ];
        for (body, want) in rows {
            let got = parse_update(body.as_bytes(), None);
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(&got, want, "{body}"),
                (Err(ApiError::InvalidRequest(message)), Err(field)) => {
                    assert!(message.starts_with(field), "{body}: {message}");
                }
                (got, want) => panic!("{body}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn auth_needs_an_issuer_for_jwt_and_an_allowed_token_url() {
        let update = |body: &str| parse_update(body.as_bytes(), None).unwrap();
        let jwt = update(r#"{"auth": {"type": "jwt", "audience": "a"}}"#);
        let oauth = update(
            r#"{"auth": {"type": "oauth2_client_credentials", "token_url": "https://idp.example/t",
                "client_id": "i", "client_secret": "s"}}"#,
        );
        let bare = HttpConfig::default();
        let with_issuer = HttpConfig {
            issuer: Some("https://tc.example".into()),
            allow_url_prefixes: vec!["https://api.example/".into()],
            ..HttpConfig::default()
        };
        let code = |u: &DestinationUpdate, c: &HttpConfig| {
            check_auth(u, c).map_err(|e| (e.code(), e.message()))
        };
        let refused = code(&jwt, &bare).unwrap_err();
        assert_eq!(refused.0, "invalid_request");
        assert!(refused.1.contains("auth.type"), "{refused:?}");
        assert_eq!(code(&jwt, &with_issuer), Ok(()));
        assert_eq!(code(&oauth, &bare), Ok(()));
        let refused = code(&oauth, &with_issuer).unwrap_err();
        assert_eq!(refused.0, "url_not_allowed");
        assert!(refused.1.contains("auth.token_url"), "{refused:?}");
    }

    #[test]
    fn path_segments_decode_to_the_task_form() {
        let rows: &[(&str, Option<&str>)] = &[
            ("api.example.com:443", Some("api.example.com:443")),
            ("API.example.com:443", Some("api.example.com:443")),
            ("%5B::1%5D:8080", Some("[::1]:8080")),
            ("api.example.com", None),
            ("%zz:80", None),
        ];
        for (segment, want) in rows {
            assert_eq!(
                destination_name(Some(segment)).ok().as_deref(),
                *want,
                "{segment}"
            );
        }
    }
}
