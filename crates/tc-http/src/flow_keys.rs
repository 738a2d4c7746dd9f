//! The flow key routes: `PUT`, `GET` and `DELETE /flow-keys/{key}` and
//! `GET /flow-keys`, each over the caller's own keys (the admin's, or a
//! tenant's key's tenant's: another tenant's key of the same name is
//! another key). The rules are tc-model's ([`tc_model::flow_key`]); this
//! reads the JSON and writes the view.

use std::collections::BTreeMap;

use http::StatusCode;
use serde::Serialize;
use serde_json::Value;
use tc_model::flow_key::{FlowKey, FlowKeyUpdate, check_key};
use tc_model::store::TaskStore;

use crate::app::App;
use crate::auth::Caller;
use crate::error::{About, ApiError};
use crate::reply::{Answer, json, no_content};
use crate::worker_port::Control;

/// A key as the API shows it.
#[derive(Debug, Serialize)]
pub(crate) struct FlowKeyView {
    key: String,
    max_in_flight: Option<u32>,
    rate_per_s: Option<f64>,
    burst: Option<u32>,
    /// Its running tasks, on every node.
    in_flight: u64,
    /// Its pending tasks (due or not).
    pending: u64,
}

impl From<FlowKey> for FlowKeyView {
    fn from(k: FlowKey) -> FlowKeyView {
        FlowKeyView {
            key: k.key,
            max_in_flight: k.settings.max_in_flight,
            rate_per_s: k.settings.rate_per_s,
            burst: k.settings.burst,
            in_flight: k.in_flight,
            pending: k.pending,
        }
    }
}

#[derive(Debug, Serialize)]
struct FlowKeyList {
    flow_keys: Vec<FlowKeyView>,
}

/// The `{key}` path segment, percent-decoded (a key may hold a space or a
/// `/`), checked as a key.
pub(crate) fn key_name(segment: Option<&str>) -> Result<String, ApiError> {
    let raw = segment.unwrap_or_default();
    let key = crate::destinations::percent_decode(raw)
        .ok_or_else(|| ApiError::InvalidRequest("key: bad percent-encoding".into()))?;
    check_key("key", &key).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    Ok(key)
}

/// Reads a `PUT /flow-keys/{key}` body: any of `max_in_flight`,
/// `rate_per_s` and `burst`; a field left out is kept, `null` clears it.
pub(crate) fn parse_update(bytes: &[u8]) -> Result<FlowKeyUpdate, ApiError> {
    let invalid = ApiError::InvalidRequest;
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(invalid("body: must be a JSON object".into()));
    }
    let fields: BTreeMap<String, Value> =
        serde_json::from_slice(bytes).map_err(|e| invalid(format!("body: not valid JSON: {e}")))?;
    let mut update = FlowKeyUpdate::default();
    for (field, value) in fields {
        match field.as_str() {
            "max_in_flight" => {
                update.max_in_flight = Some(crate::destinations::nullable_u32(&field, &value, 1)?);
            }
            "burst" => update.burst = Some(crate::destinations::nullable_u32(&field, &value, 1)?),
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
            other => {
                return Err(crate::error::unknown_field(
                    other,
                    &["max_in_flight", "rate_per_s", "burst"],
                ));
            }
        }
    }
    update.validate().map_err(|e| invalid(e.to_string()))?;
    Ok(update)
}

fn tenant_of(caller: &Caller) -> Option<String> {
    caller.scope.tenant().map(str::to_owned)
}

/// `PUT /flow-keys/{key}`: the settings changed, the key's view.
pub(crate) async fn put<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    key: String,
    update: FlowKeyUpdate,
) -> Answer {
    let now = app.control().now();
    let found = app
        .store()
        .put_flow_key(tenant_of(caller), key.clone(), update, now)
        .await
        .map_err(|e| ApiError::from_store(e, About::FlowKey(&key)))?;
    json(StatusCode::OK, &FlowKeyView::from(found))
}

/// `GET /flow-keys/{key}`.
pub(crate) async fn get<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    key: String,
) -> Answer {
    let found = app
        .store()
        .flow_key(tenant_of(caller), key.clone())
        .await
        .map_err(|e| ApiError::from_store(e, About::FlowKey(&key)))?;
    json(StatusCode::OK, &FlowKeyView::from(found))
}

/// `GET /flow-keys`: the caller's keys with settings, in name order.
pub(crate) async fn list<S: TaskStore, C: Control>(app: &App<S, C>, caller: &Caller) -> Answer {
    let keys = app.store().flow_keys(tenant_of(caller)).await?;
    let flow_keys = keys.into_iter().map(FlowKeyView::from).collect();
    json(StatusCode::OK, &FlowKeyList { flow_keys })
}

/// `DELETE /flow-keys/{key}`: its settings removed (its tasks stay).
pub(crate) async fn delete<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    key: String,
) -> Answer {
    app.store()
        .delete_flow_key(tenant_of(caller), key.clone())
        .await
        .map_err(|e| ApiError::from_store(e, About::FlowKey(&key)))?;
    no_content()
}
