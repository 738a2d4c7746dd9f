//! `tc-server tenant …`: create, list, get, set, delete, and `tenant key
//! create|revoke`. The admin token's commands (a tenant's key gets 403).
//! `tenant key create` prints the key alone on stdout (its id on stderr),
//! so that `KEY=$(tc-server tenant key create acme)` keeps it: the server
//! never shows it again.

use std::time::Duration;

use http::Method;
use serde_json::{Map, Value};

use super::args::{Setting, TenantSettingsArgs};
use super::error::ClientError;
use super::format::{Cell, Table, sanitize};
use super::http::{Api, escape};
use super::output::{Out, note};
use super::view::{field, text};

fn path(name: &str) -> String {
    format!("/tenants/{}", escape(name))
}

/// The settings given as the API's fields, `none` as null.
fn settings(args: &TenantSettingsArgs) -> Map<String, Value> {
    fn setting<T: Into<Value>>(value: Setting<T>) -> Value {
        match value {
            Setting::To(v) => v.into(),
            Setting::Clear => Value::Null,
        }
    }
    let mut body = Map::new();
    if let Some(weight) = args.weight {
        body.insert("weight".into(), weight.into());
    }
    if let Some(max) = args.max_pending {
        body.insert("max_pending".into(), setting(max));
    }
    if let Some(rate) = args.submit_rate_per_s {
        body.insert("submit_rate_per_s".into(), setting(rate));
    }
    if let Some(burst) = args.submit_burst {
        body.insert("submit_burst".into(), setting(burst));
    }
    if args.clear_signing {
        body.insert("signing_secrets".into(), Value::Null);
    } else if !args.signing_secrets.is_empty() {
        body.insert(
            "signing_secrets".into(),
            args.signing_secrets.clone().into(),
        );
    }
    body
}

/// `POST /tenants`'s body.
fn create_body(args: &TenantSettingsArgs) -> String {
    let mut body = settings(args);
    body.insert("name".into(), args.name.clone().into());
    Value::Object(body).to_string()
}

/// `PUT /tenants/{name}`'s body: at least one setting.
fn set_body(args: &TenantSettingsArgs) -> Result<String, ClientError> {
    let body = settings(args);
    if body.is_empty() {
        return Err(ClientError::Usage(
            "give at least one of --weight, --max-pending, --submit-rate-per-s, --submit-burst, \
             --signing-secret, --clear-signing"
                .into(),
        ));
    }
    Ok(Value::Object(body).to_string())
}

/// `tenant create`.
pub(crate) async fn create(
    api: &Api,
    out: &Out,
    args: &TenantSettingsArgs,
) -> Result<(), ClientError> {
    let answer = api
        .json(Method::POST, "/tenants", Some(create_body(args)))
        .await?;
    show(out, &answer)
}

/// `tenant set`.
pub(crate) async fn set(
    api: &Api,
    out: &Out,
    args: &TenantSettingsArgs,
) -> Result<(), ClientError> {
    let answer = api
        .json(Method::PUT, &path(&args.name), Some(set_body(args)?))
        .await?;
    show(out, &answer)
}

/// `tenant list`.
pub(crate) async fn list(api: &Api, out: &Out) -> Result<(), ClientError> {
    let answer = api.json(Method::GET, "/tenants", None).await?;
    let tenants = field(&answer, "tenants")
        .as_array()
        .ok_or_else(|| ClientError::Protocol(format!("a tenant list without tenants: {answer}")))?;
    if out.json {
        for t in tenants {
            out.json_line(t)?;
        }
        return Ok(());
    }
    if tenants.is_empty() {
        note("no tenants");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = tenants
        .iter()
        .map(|t| {
            vec![
                Cell::new(&text(field(t, "name"))),
                Cell::new(&text(field(t, "weight"))),
                Cell::new(&text(field(t, "max_pending"))),
                Cell::new(&text(field(t, "submit_rate_per_s"))),
                Cell::new(&text(field(t, "submit_burst"))),
                Cell::new(&text(field(t, "signing_secrets"))),
                Cell::new(&text(field(t, "pending"))),
                Cell::new(&text(field(t, "running"))),
                Cell::new(&field(t, "keys").as_array().map_or(0, Vec::len).to_string()),
            ]
        })
        .collect();
    out.text(
        &Table::new(&[
            "NAME",
            "WEIGHT",
            "MAX PENDING",
            "RATE/S",
            "BURST",
            "SECRETS",
            "PENDING",
            "RUNNING",
            "KEYS",
        ])
        .render(&rows, out.colour),
    )
}

/// `tenant get`.
pub(crate) async fn get(api: &Api, out: &Out, name: &str) -> Result<(), ClientError> {
    let answer = api.json(Method::GET, &path(name), None).await?;
    show(out, &answer)
}

/// `tenant delete`.
pub(crate) async fn delete(api: &Api, out: &Out, name: &str) -> Result<(), ClientError> {
    api.send(Method::DELETE, &path(name), None, Duration::ZERO)
        .await?;
    if out.json {
        return Ok(());
    }
    out.text(&format!("tenant {} deleted\n", sanitize(name)))
}

/// `tenant key create`: the key on stdout, alone (or the API's JSON).
pub(crate) async fn create_key(api: &Api, out: &Out, name: &str) -> Result<(), ClientError> {
    let answer = api
        .json(Method::POST, &format!("{}/keys", path(name)), None)
        .await?;
    if out.json {
        return out.json_line(&answer);
    }
    let key = field(&answer, "key")
        .as_str()
        .ok_or_else(|| ClientError::Protocol("a key answer without its key".into()))?;
    note(&format!(
        "key {} made for tenant {}: shown this once, keep it now",
        sanitize(&text(field(&answer, "id"))),
        sanitize(name)
    ));
    out.text(&format!("{}\n", sanitize(key)))
}

/// `tenant key revoke`.
pub(crate) async fn revoke_key(
    api: &Api,
    out: &Out,
    name: &str,
    id: &str,
) -> Result<(), ClientError> {
    let path = format!("{}/keys/{}", path(name), escape(id));
    api.send(Method::DELETE, &path, None, Duration::ZERO)
        .await?;
    if out.json {
        return Ok(());
    }
    out.text(&format!(
        "key {} of tenant {} revoked\n",
        sanitize(id),
        sanitize(name)
    ))
}

fn show(out: &Out, t: &Value) -> Result<(), ClientError> {
    if out.json {
        return out.json_line(t);
    }
    let line = |label: &str, value: String| vec![Cell::new(label), Cell::new(&value)];
    let keys: Vec<String> = field(t, "keys")
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|k| {
            format!(
                "{} (made {}, last used {})",
                text(field(k, "id")),
                text(field(k, "created_at")),
                text(field(k, "last_used_at"))
            )
        })
        .collect();
    let mut rows = vec![
        line("name", text(field(t, "name"))),
        line("weight", text(field(t, "weight"))),
        line("max pending", text(field(t, "max_pending"))),
        line("submit rate/s", text(field(t, "submit_rate_per_s"))),
        line("submit burst", text(field(t, "submit_burst"))),
        // How many, never one: the API shows only the count.
        line("signing secrets", text(field(t, "signing_secrets"))),
        line("pending", text(field(t, "pending"))),
        line("running", text(field(t, "running"))),
        line("created", text(field(t, "created_at"))),
        line("updated", text(field(t, "updated_at"))),
    ];
    if keys.is_empty() {
        rows.push(line("keys", "-".into()));
    }
    for (i, key) in keys.into_iter().enumerate() {
        rows.push(line(if i == 0 { "keys" } else { "" }, key));
    }
    out.text(&Table::plain().render(&rows, out.colour))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::args::Output;

    fn args(
        weight: Option<u32>,
        max_pending: Option<Setting<u64>>,
        rate: Option<Setting<f64>>,
    ) -> TenantSettingsArgs {
        TenantSettingsArgs {
            name: "acme".into(),
            weight,
            max_pending,
            submit_rate_per_s: rate,
            submit_burst: None,
            signing_secrets: Vec::new(),
            clear_signing: false,
            output: Output::default(),
        }
    }

    fn check(body: &str, want: Value) {
        assert_eq!(serde_json::from_str::<Value>(body).unwrap(), want, "{body}");
    }

    #[test]
    fn bodies_carry_the_flags_given_none_as_null() {
        use serde_json::json;
        check(
            &create_body(&args(None, None, None)),
            json!({"name": "acme"}),
        );
        check(
            &create_body(&args(
                Some(3),
                Some(Setting::To(10)),
                Some(Setting::To(2.5)),
            )),
            json!({"name": "acme", "weight": 3, "max_pending": 10, "submit_rate_per_s": 2.5}),
        );
        check(
            &set_body(&args(None, Some(Setting::Clear), Some(Setting::Clear))).unwrap(),
            json!({"max_pending": null, "submit_rate_per_s": null}),
        );
        assert!(matches!(
            set_body(&args(None, None, None)),
            Err(ClientError::Usage(_))
        ));
        let mut two = args(None, None, None);
        two.signing_secrets = vec!["whsec_a".into(), "whsec_b".into()];
        check(
            &set_body(&two).unwrap(),
            json!({"signing_secrets": ["whsec_a", "whsec_b"]}),
        );
        let mut cleared = args(None, None, None);
        cleared.clear_signing = true;
        check(
            &set_body(&cleared).unwrap(),
            json!({"signing_secrets": null}),
        );
    }
}
