//! `tc-server destination …`: list, set, pause, resume.

use http::Method;
use serde_json::{Map, Value};

use super::args::{SetArgs, Setting};
use super::error::ClientError;
use super::format::Table;
use super::http::{Api, escape};
use super::output::{Out, note};
use super::view::{self, field};

/// `destination list`.
pub(crate) async fn list(api: &Api, out: &Out) -> Result<(), ClientError> {
    let answer = api.json(Method::GET, "/destinations", None).await?;
    let destinations = field(&answer, "destinations").as_array().ok_or_else(|| {
        ClientError::Protocol(format!("a destination list without destinations: {answer}"))
    })?;
    if out.json {
        for d in destinations {
            out.json_line(d)?;
        }
        return Ok(());
    }
    if destinations.is_empty() {
        note("no destinations: none has tasks or settings");
        return Ok(());
    }
    let rows: Vec<_> = destinations.iter().map(view::destination_row).collect();
    out.text(&Table::new(&view::DESTINATION_HEADER).render(&rows, out.colour))
}

/// `destination set`.
pub(crate) async fn set(api: &Api, out: &Out, args: &SetArgs) -> Result<(), ClientError> {
    let answer = api
        .json(
            Method::PUT,
            &path(&args.destination),
            Some(settings_body(args)?),
        )
        .await?;
    show(out, &answer)
}

/// `destination pause` (`paused`) and `destination resume`.
pub(crate) async fn pause(
    api: &Api,
    out: &Out,
    destination: &str,
    paused: bool,
) -> Result<(), ClientError> {
    let action = if paused { "pause" } else { "resume" };
    let answer = api
        .json(
            Method::POST,
            &format!("{}/{action}", path(destination)),
            None,
        )
        .await?;
    show(out, &answer)
}

fn path(destination: &str) -> String {
    format!("/destinations/{}", escape(destination))
}

fn show(out: &Out, destination: &Value) -> Result<(), ClientError> {
    if out.json {
        return out.json_line(destination);
    }
    out.text(&Table::plain().render(&view::destination_fields(destination, out.now), out.colour))
}

/// `PUT /destinations/{d}`'s body: the settings given, `none` as null.
fn settings_body(args: &SetArgs) -> Result<String, ClientError> {
    let mut body = Map::new();
    if let Some(max) = args.max_in_flight {
        body.insert("max_in_flight".into(), setting(max));
    }
    if let Some(rate) = args.rate {
        body.insert("rate_per_s".into(), setting(rate));
    }
    if let Some(burst) = args.burst {
        body.insert("burst".into(), setting(burst));
    }
    if args.clear_headers {
        body.insert("headers".into(), Value::Null);
    } else if !args.headers.is_empty() {
        body.insert("headers".into(), headers_object(&args.headers)?);
    }
    if args.clear_signing {
        body.insert("signing_secrets".into(), Value::Null);
    } else if !args.signing_secrets.is_empty() {
        body.insert(
            "signing_secrets".into(),
            args.signing_secrets.clone().into(),
        );
    }
    if args.share_with_none {
        body.insert("share_with_tenants".into(), Value::Null);
    } else if !args.share_with_tenants.is_empty() {
        body.insert(
            "share_with_tenants".into(),
            args.share_with_tenants.clone().into(),
        );
    }
    if let Some(auth) = auth_body(args)? {
        body.insert("auth".into(), auth);
    }
    tls_settings(args, &mut body)?;
    if body.is_empty() {
        return Err(ClientError::Usage(
            "give at least one of --max-in-flight, --rate, --burst, --header, --clear-headers, \
             --signing-secret, --clear-signing, --share-with-tenant, --share-with-none, \
             --auth-basic, --oauth2-token-url, --jwt-audience, --clear-auth, \
             --client-cert, --clear-client-cert, --ca-certs, --clear-ca-certs"
                .into(),
        ));
    }
    Ok(Value::Object(body).to_string())
}

/// The `auth` the flags give (at most one kind: clap's `auth_kind`);
/// `None`: leave it as it is. An error never repeats a secret.
fn auth_body(args: &SetArgs) -> Result<Option<Value>, ClientError> {
    if args.clear_auth {
        return Ok(Some(Value::Null));
    }
    if let Some(pair) = &args.auth_basic {
        let (username, password) = pair.split_once(':').ok_or_else(|| {
            ClientError::Usage("--auth-basic: give USER:PASSWORD, with a colon".into())
        })?;
        return Ok(Some(serde_json::json!({
            "type": "basic", "username": username, "password": password
        })));
    }
    if let Some(token_url) = &args.oauth2_token_url {
        let mut auth = Map::new();
        auth.insert("type".into(), "oauth2_client_credentials".into());
        auth.insert("token_url".into(), token_url.as_str().into());
        auth.insert("client_id".into(), args.oauth2_client_id.clone().into());
        auth.insert(
            "client_secret".into(),
            args.oauth2_client_secret.clone().into(),
        );
        if let Some(scope) = &args.oauth2_scope {
            auth.insert("scope".into(), scope.as_str().into());
        }
        if let Some(audience) = &args.oauth2_audience {
            auth.insert("audience".into(), audience.as_str().into());
        }
        if args.oauth2_secret_in_body {
            auth.insert("auth_method".into(), "client_secret_post".into());
        }
        return Ok(Some(Value::Object(auth)));
    }
    if let Some(audience) = &args.jwt_audience {
        let mut auth = Map::new();
        auth.insert("type".into(), "jwt".into());
        auth.insert("audience".into(), audience.as_str().into());
        if let Some(lifetime) = args.jwt_lifetime_s {
            auth.insert("lifetime_s".into(), lifetime.into());
        }
        return Ok(Some(Value::Object(auth)));
    }
    Ok(None)
}

/// `--client-cert`/`--client-key` and `--ca-certs` read from their files
/// (an error names the flag and the file, never the contents), or cleared.
fn tls_settings(args: &SetArgs, body: &mut Map<String, Value>) -> Result<(), ClientError> {
    let read = |flag: &str, path: &std::path::Path| {
        std::fs::read_to_string(path).map_err(|e| {
            ClientError::Usage(format!("{flag} {}: cannot read it: {e}", path.display()))
        })
    };
    if args.clear_client_cert {
        body.insert("client_cert".into(), Value::Null);
    } else if let (Some(cert), Some(key)) = (&args.client_cert, &args.client_key) {
        body.insert("client_cert".into(), read("--client-cert", cert)?.into());
        body.insert("client_key".into(), read("--client-key", key)?.into());
    }
    if args.clear_ca_certs {
        body.insert("ca_certs".into(), Value::Null);
    } else if let Some(path) = &args.ca_certs {
        body.insert("ca_certs".into(), read("--ca-certs", path)?.into());
    }
    Ok(())
}

/// `--header` values as the API's `headers` object; a malformed one, or a
/// name given twice (in any case), is a usage error here, as the server
/// would refuse it. An error names the header by its name or its position
/// (`--header #2`), never by its value: the value may be a credential.
pub(crate) fn headers_object(headers: &[String]) -> Result<Value, ClientError> {
    let mut object = Map::new();
    for (position, given) in headers.iter().enumerate() {
        let (name, value) = super::args::header(given)
            .map_err(|why| ClientError::Usage(format!("--header #{}: {why}", position + 1)))?;
        if object.keys().any(|n| n.eq_ignore_ascii_case(&name)) {
            return Err(ClientError::Usage(format!(
                "--header {name} is given twice"
            )));
        }
        object.insert(name, Value::from(value));
    }
    Ok(Value::Object(object))
}

fn setting<T: Into<Value>>(value: Setting<T>) -> Value {
    match value {
        Setting::To(v) => v.into(),
        Setting::Clear => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn args() -> SetArgs {
        SetArgs {
            destination: "127.0.0.1:9000".into(),
            max_in_flight: None,
            rate: None,
            burst: None,
            headers: Vec::new(),
            clear_headers: false,
            signing_secrets: Vec::new(),
            clear_signing: false,
            share_with_tenants: Vec::new(),
            share_with_none: false,
            auth_basic: None,
            oauth2_token_url: None,
            oauth2_client_id: None,
            oauth2_client_secret: None,
            oauth2_scope: None,
            oauth2_audience: None,
            oauth2_secret_in_body: false,
            jwt_audience: None,
            jwt_lifetime_s: None,
            clear_auth: false,
            client_cert: None,
            client_key: None,
            clear_client_cert: false,
            ca_certs: None,
            clear_ca_certs: false,
            output: Default::default(),
        }
    }

    #[test]
    fn settings_bodies_hold_only_what_was_given() {
        let check = |args: SetArgs, expected: Value| {
            let body: Value = serde_json::from_str(&settings_body(&args).unwrap()).unwrap();
            assert_eq!(body, expected);
        };
        let mut a = args();
        a.max_in_flight = Some(Setting::To(4));
        check(a, json!({"max_in_flight": 4}));
        let mut a = args();
        a.rate = Some(Setting::To(2.5));
        a.burst = Some(Setting::Clear);
        check(a, json!({"rate_per_s": 2.5, "burst": null}));
        assert!(matches!(settings_body(&args()), Err(ClientError::Usage(_))));
        let mut a = args();
        a.headers = vec!["Authorization: Bearer t".into()];
        a.signing_secrets = vec!["whsec_a".into(), "whsec_b".into()];
        check(
            a,
            json!({"headers": {"Authorization": "Bearer t"}, "signing_secrets": ["whsec_a", "whsec_b"]}),
        );
        let mut a = args();
        a.clear_headers = true;
        a.clear_signing = true;
        check(a, json!({"headers": null, "signing_secrets": null}));
        let mut a = args();
        a.share_with_tenants = vec!["acme".into(), "*".into()];
        check(a, json!({"share_with_tenants": ["acme", "*"]}));
        let mut a = args();
        a.share_with_none = true;
        check(a, json!({"share_with_tenants": null}));
        let mut a = args();
        a.auth_basic = Some("user:pa:ss".into());
        check(
            a,
            json!({"auth": {"type": "basic", "username": "user", "password": "pa:ss"}}),
        );
        let mut a = args();
        a.oauth2_token_url = Some("https://idp.example/token".into());
        a.oauth2_client_id = Some("id".into());
        a.oauth2_client_secret = Some("s".into());
        a.oauth2_scope = Some("a b".into());
        a.oauth2_secret_in_body = true;
        check(
            a,
            json!({"auth": {"type": "oauth2_client_credentials",
                "token_url": "https://idp.example/token", "client_id": "id", "client_secret": "s",
                "scope": "a b", "auth_method": "client_secret_post"}}),
        );
        let mut a = args();
        a.jwt_audience = Some("https://svc.example".into());
        a.jwt_lifetime_s = Some(600);
        check(
            a,
            json!({"auth": {"type": "jwt", "audience": "https://svc.example", "lifetime_s": 600}}),
        );
        let mut a = args();
        a.clear_auth = true;
        check(a, json!({"auth": null}));
        let mut a = args();
        a.auth_basic = Some("no-colon-SECRET".into());
        let refused = settings_body(&a).unwrap_err().to_string();
        assert!(!refused.contains("SECRET"), "{refused}");
    }

    #[test]
    fn a_header_error_names_its_position_never_its_value() {
        let check = |given: &[&str], expected: Result<Value, &str>| {
            let given: Vec<String> = given.iter().map(|&h| h.to_owned()).collect();
            match (headers_object(&given), expected) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{given:?}"),
                (Err(ClientError::Usage(m)), Err(want)) => {
                    assert!(m.starts_with(want), "{given:?}: {m}");
                    assert!(!m.contains("SECRET"), "{given:?}: {m}");
                }
                (got, want) => panic!("{given:?}: {got:?}, expected {want:?}"),
            }
        };
        check(
            &["A:1", "B :  two words "],
            Ok(json!({"A": "1", "B": "two words"})),
        );
        check(&["Authorization Bearer SECRET"], Err("--header #1: give"));
        check(
            &["A: 1", " : SECRET"],
            Err("--header #2: the header's name"),
        );
        check(&["A: 1", "a: SECRET"], Err("--header a is given twice"));
    }

    #[test]
    fn destination_paths_are_escaped() {
        assert_eq!(
            path("api.example.com:443"),
            "/destinations/api.example.com:443"
        );
        assert_eq!(path("[::1]:8080"), "/destinations/%5B::1%5D:8080");
    }
}
