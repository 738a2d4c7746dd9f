//! The `/tenants` routes, the admin credential's only: tenants
//! (name, weight, quotas) and their API keys. A key's secret is in exactly
//! one answer, its creation's `201`; the store keeps its SHA-256, and no
//! view, log line or metric carries it after that.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;
use serde_json::Value;
use tc_model::store::{StoreError, TaskStore};
use tc_model::tenant::key::{ApiKey, KeyHash, SECRET_BYTES, key_id, key_text};
use tc_model::tenant::{Tenant, TenantDetail, TenantUpdate, check_name};

use crate::app::App;
use crate::call_fields::parse_signing_secrets;
use crate::dto::rfc3339;
use crate::error::{About, ApiError, json_type};
use crate::reply::{Answer, json};
use crate::worker_port::Control;

/// A key as views show it: never its secret nor its hash.
#[derive(Debug, Serialize)]
struct KeyView<'a> {
    id: &'a str,
    created_at: String,
    last_used_at: Option<String>,
}

impl<'a> KeyView<'a> {
    fn new(key: &'a ApiKey) -> Self {
        KeyView {
            id: &key.id,
            created_at: rfc3339(key.created_at),
            last_used_at: key.last_used_at.map(rfc3339),
        }
    }
}

/// A tenant as the API shows it: its settings, its task counts and its
/// keys.
#[derive(Debug, Serialize)]
pub(crate) struct TenantView<'a> {
    name: &'a str,
    weight: u32,
    max_pending: Option<u64>,
    submit_rate_per_s: Option<f64>,
    submit_burst: Option<u32>,
    /// How many signing secrets it has; never the secrets.
    signing_secrets: usize,
    /// Its pending tasks (due or not).
    pending: u64,
    /// Its running tasks, on every node.
    running: u64,
    keys: Vec<KeyView<'a>>,
    created_at: String,
    updated_at: String,
}

impl<'a> TenantView<'a> {
    pub(crate) fn new(d: &'a TenantDetail) -> Self {
        let s = &d.tenant.settings;
        TenantView {
            name: &d.tenant.name,
            weight: s.weight,
            max_pending: s.max_pending,
            submit_rate_per_s: s.submit_rate_per_s,
            submit_burst: s.submit_burst,
            signing_secrets: s.signing_secrets.len(),
            pending: d.pending,
            running: d.running,
            keys: d.keys.iter().map(KeyView::new).collect(),
            created_at: rfc3339(d.tenant.created_at),
            updated_at: rfc3339(d.tenant.updated_at),
        }
    }
}

/// The list's envelope.
#[derive(Debug, Serialize)]
struct TenantList<'a> {
    tenants: Vec<TenantView<'a>>,
}

/// The one answer that shows a key.
#[derive(Debug, Serialize)]
pub(crate) struct NewKeyView<'a> {
    id: &'a str,
    key: &'a str,
    created_at: String,
}

/// The `{name}` path segment: one that is not a valid name names no
/// tenant.
pub(crate) fn tenant_name(segment: Option<&str>) -> Result<String, ApiError> {
    let name = segment.unwrap_or_default();
    match check_name(name) {
        Ok(()) => Ok(name.to_owned()),
        Err(_) => Err(not_found(name)),
    }
}

fn not_found(name: &str) -> ApiError {
    ApiError::from_store(StoreError::NotFound, About::Tenant(name))
}

/// A store error about the tenant `name`.
fn store_error(name: &str, e: StoreError) -> ApiError {
    ApiError::from_store(e, About::Tenant(name))
}

/// The settings fields of a tenant body.
pub(crate) const SETTINGS: [&str; 5] = [
    "weight",
    "max_pending",
    "submit_rate_per_s",
    "submit_burst",
    "signing_secrets",
];

/// A JSON object's members, or 400.
fn object(bytes: &[u8]) -> Result<BTreeMap<String, Value>, ApiError> {
    let invalid = ApiError::InvalidRequest;
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(members)) => Ok(members.into_iter().collect()),
        Ok(_) => Err(invalid("body: must be a JSON object".into())),
        Err(e) => Err(invalid(format!("body: not valid JSON: {e}"))),
    }
}

/// A whole number in `0..=max`, named `field` in the refusal.
fn whole(field: &str, value: &Value, max: u64) -> Result<u64, ApiError> {
    value.as_u64().filter(|n| *n <= max).ok_or_else(|| {
        ApiError::InvalidRequest(match value {
            Value::Number(n) => format!("{field}: must be a whole number up to {max}, got {n}"),
            other => format!("{field}: must be a whole number, got {}", json_type(other)),
        })
    })
}

/// `value` or null, as a nullable setting.
fn nullable<T>(
    value: &Value,
    parse: impl FnOnce(&Value) -> Result<T, ApiError>,
) -> Result<Option<T>, ApiError> {
    match value {
        Value::Null => Ok(None),
        v => parse(v).map(Some),
    }
}

/// The settings in `fields` (the others refused as unknown, naming
/// them), checked: every refusal's message starts with its field.
fn parse_update(fields: &BTreeMap<String, Value>) -> Result<TenantUpdate, ApiError> {
    let invalid = ApiError::InvalidRequest;
    let mut update = TenantUpdate::default();
    for (field, value) in fields {
        match field.as_str() {
            "weight" => {
                let w = whole(field, value, u64::from(u32::MAX))?;
                update.weight = Some(u32::try_from(w).unwrap_or(u32::MAX));
            }
            "max_pending" => {
                update.max_pending = Some(nullable(value, |v| whole(field, v, u64::MAX))?);
            }
            "submit_rate_per_s" => {
                update.submit_rate_per_s = Some(nullable(value, |v| {
                    v.as_f64().ok_or_else(|| {
                        invalid(format!(
                            "submit_rate_per_s: must be a number or null, got {}",
                            json_type(v)
                        ))
                    })
                })?);
            }
            "submit_burst" => {
                update.submit_burst = Some(nullable(value, |v| {
                    let b = whole(field, v, u64::from(u32::MAX))?;
                    Ok(u32::try_from(b).unwrap_or(u32::MAX))
                })?);
            }
            "signing_secrets" => {
                update.signing_secrets = Some(parse_signing_secrets(value)?);
            }
            // The name is the path's and never changes: not a setting.
            "name" => {
                return Err(invalid(
                    "name: not a setting (a tenant is named by its path, and not renamed)".into(),
                ));
            }
            other => return Err(crate::error::unknown_field(other, &SETTINGS)),
        }
    }
    update
        .validate()
        .map_err(|e| invalid(format!("{}: {}", e.field, e.message)))?;
    Ok(update)
}

/// `POST /tenants`: `{"name", "weight"?, "max_pending"?,
/// "submit_rate_per_s"?, "submit_burst"?, "signing_secrets"?}` -> 201.
pub(crate) async fn create<S: TaskStore, C: Control>(app: &App<S, C>, bytes: &[u8]) -> Answer {
    need_token(app, "POST /tenants")?;
    let invalid = ApiError::InvalidRequest;
    let mut fields = object(bytes)?;
    let name = match fields.remove("name") {
        Some(Value::String(name)) => name,
        Some(other) => {
            return Err(invalid(format!(
                "name: must be a string, got {}",
                json_type(&other)
            )));
        }
        None => return Err(invalid("name: required".into())),
    };
    check_name(&name).map_err(|e| invalid(format!("name: {}", e.message)))?;
    let update = parse_update(&fields)?;
    let now = app.control().now();
    let tenant = app
        .store()
        .create_tenant(name.clone(), update, now)
        .await
        .map_err(|e| store_error(&name, e))?;
    // How many secrets, never one.
    tracing::info!(
        tenant = %name,
        signing_secrets = tenant.settings.signing_secrets.len(),
        "tenant_created"
    );
    app.control().tenants_changed();
    let detail = TenantDetail {
        tenant,
        pending: 0,
        running: 0,
        keys: Vec::new(),
    };
    json(StatusCode::CREATED, &TenantView::new(&detail))
}

/// `GET /tenants`: every tenant, in name order.
pub(crate) async fn list<S: TaskStore, C: Control>(app: &App<S, C>) -> Answer {
    let tenants = app.store().tenants().await?;
    let views = tenants.iter().map(TenantView::new).collect();
    json(StatusCode::OK, &TenantList { tenants: views })
}

/// `GET /tenants/{name}`.
pub(crate) async fn get<S: TaskStore, C: Control>(app: &App<S, C>, name: String) -> Answer {
    let detail = app
        .store()
        .tenant(name.clone())
        .await
        .map_err(|e| store_error(&name, e))?;
    json(StatusCode::OK, &TenantView::new(&detail))
}

/// `PUT /tenants/{name}`: the settings given change, the others stay; a
/// nullable one given as null is cleared.
pub(crate) async fn update<S: TaskStore, C: Control>(
    app: &App<S, C>,
    name: String,
    bytes: &[u8],
) -> Answer {
    let update = parse_update(&object(bytes)?)?;
    let now = app.control().now();
    let Tenant { settings, .. } = app
        .store()
        .update_tenant(name.clone(), update, now)
        .await
        .map_err(|e| store_error(&name, e))?;
    tracing::info!(
        tenant = %name,
        signing_secrets = settings.signing_secrets.len(),
        "tenant_changed"
    );
    app.control().tenants_changed();
    get(app, name).await
}

/// `DELETE /tenants/{name}`: only without tasks; its keys go with it.
pub(crate) async fn delete<S: TaskStore, C: Control>(app: &App<S, C>, name: String) -> Answer {
    app.store()
        .delete_tenant(name.clone())
        .await
        .map_err(|e| store_error(&name, e))?;
    // Another node's bucket goes when it finds the tenant's new creation
    // time (see `quota`); this node's goes now.
    app.buckets().forget(&name);
    tracing::info!(tenant = %name, "tenant_deleted");
    app.control().tenants_changed();
    no_content()
}

/// `403 tenants_need_token` on a server without `--api-token`: there a
/// request without a credential is the admin, so a tenant's key would keep
/// its tasks apart from nobody.
fn need_token<S: TaskStore, C: Control>(app: &App<S, C>, route: &str) -> Result<(), ApiError> {
    if app.config().api_token.is_some() {
        return Ok(());
    }
    Err(ApiError::TenantsNeedToken(format!(
        "{route}: tenants need the server's --api-token (without it a request without a \
         credential is the admin, and a tenant's key keeps nothing apart): start the server \
         with --api-token"
    )))
}

/// Random bytes from the OS, or 503.
pub(crate) fn random<const N: usize>() -> Result<[u8; N], ApiError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApiError::Unavailable(format!("no entropy for a key: {e}")))?;
    Ok(bytes)
}

/// `POST /tenants/{name}/keys` (no body, or `{}`) -> 201 with the key, the
/// only time it is shown.
pub(crate) async fn create_key<S: TaskStore, C: Control>(
    app: &App<S, C>,
    name: String,
    bytes: &[u8],
) -> Answer {
    need_token(app, &format!("POST /tenants/{name}/keys"))?;
    if !bytes.iter().all(u8::is_ascii_whitespace)
        && let Some(field) = object(bytes)?.keys().next()
    {
        return Err(ApiError::InvalidRequest(format!(
            "{field}: unknown field (the body is empty or {{}})"
        )));
    }
    let key = key_text(&random::<SECRET_BYTES>()?);
    let id = key_id(&random::<8>()?);
    let now = app.control().now();
    let stored = app
        .store()
        .create_api_key(name.clone(), id, KeyHash::of(&key), now)
        .await
        .map_err(|e| store_error(&name, e))?;
    // The id only: the key itself is in the answer and nowhere else.
    tracing::info!(tenant = %name, key_id = %stored.id, "api_key_created");
    json(
        StatusCode::CREATED,
        &NewKeyView {
            id: &stored.id,
            key: &key,
            created_at: rfc3339(stored.created_at),
        },
    )
}

/// `DELETE /tenants/{name}/keys/{id}`: the key stops working at once, on
/// every node (each request looks its key up in the store).
pub(crate) async fn revoke_key<S: TaskStore, C: Control>(
    app: &App<S, C>,
    name: String,
    id: &str,
) -> Answer {
    app.store()
        .revoke_api_key(name.clone(), id.to_owned())
        .await
        .map_err(|e| ApiError::from_store(e, About::Key { tenant: &name, id }))?;
    tracing::info!(tenant = %name, key_id = %id, "api_key_revoked");
    no_content()
}

fn no_content() -> Answer {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A settings body and the field its refusal names (`None`: accepted).
    fn check(body: Value, refused: Option<&str>) {
        let fields = match body {
            Value::Object(m) => m.into_iter().collect(),
            _ => unreachable!("bodies here are objects"),
        };
        let got = parse_update(&fields);
        match (got, refused) {
            (Ok(_), None) => {}
            (Err(ApiError::InvalidRequest(m)), Some(field)) => {
                assert!(m.starts_with(&format!("{field}: ")), "{m}")
            }
            (got, want) => panic!("{fields:?}: {got:?}, expected {want:?}"),
        }
    }

    #[test]
    fn settings_bodies() {
        use serde_json::json;
        check(json!({}), None);
        check(json!({"weight": 5, "max_pending": null}), None);
        check(json!({"submit_rate_per_s": 2.5, "submit_burst": 10}), None);
        check(json!({"name": "a", "weight": 2}), Some("name"));
        check(json!({"weight": 0}), Some("weight"));
        check(json!({"weight": 1001}), Some("weight"));
        check(json!({"weight": 1.5}), Some("weight"));
        check(json!({"weight": null}), Some("weight"));
        check(json!({"max_pending": 0}), Some("max_pending"));
        check(json!({"max_pending": -1}), Some("max_pending"));
        check(json!({"submit_rate_per_s": 0}), Some("submit_rate_per_s"));
        check(json!({"submit_rate_per_s": "1"}), Some("submit_rate_per_s"));
        check(json!({"submit_burst": 0}), Some("submit_burst"));
        check(json!({"pending": 3}), Some("pending"));
        check(
            json!({"signing_secrets": ["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"]}),
            None,
        );
        check(json!({"signing_secrets": null}), None);
        check(json!({"signing_secrets": []}), None);
        check(
            json!({"signing_secrets": ["secret"]}),
            Some("signing_secrets"),
        );
        check(
            json!({"signing_secrets": "whsec_x"}),
            Some("signing_secrets"),
        );
    }
}
