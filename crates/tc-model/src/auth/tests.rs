//! The `auth` rules, table-tested: what is refused (naming the field),
//! what a view shows (never a secret), the stored text's round trip, the
//! Basic header, the token request and answer, a JWT's claims.

use serde_json::{Value, json};

use super::*;

/// Reads `input` as an update's `auth`: the refused field, or the view.
fn check(input: Value, want: Result<Value, &str>) {
    let got = DestinationAuth::from_json(&input)
        .map(|a| a.map(|a| a.view()).unwrap_or(Value::Null))
        .map_err(|e| e.field);
    assert_eq!(got, want, "{input}");
}

#[test]
fn updates_are_read_or_refused_naming_the_field() {
    let oauth = |extra: Value| {
        let mut v = json!({"type": "oauth2_client_credentials",
            "token_url": "https://idp.example/token", "client_id": "id", "client_secret": "s3cret"});
        if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
            m.extend(e);
        }
        v
    };
    check(Value::Null, Ok(Value::Null));
    check(
        json!({"type": "basic", "username": "u", "password": "p"}),
        Ok(json!({"type": "basic", "username": "u"})),
    );
    check(
        json!({"type": "basic", "username": "a:b", "password": "p"}),
        Err("auth.username"),
    );
    check(
        json!({"type": "basic", "username": "u"}),
        Err("auth.password"),
    );
    check(
        json!({"type": "basic", "username": "u", "password": 3}),
        Err("auth.password"),
    );
    check(
        json!({"type": "basic", "username": "u", "password": "p", "x": 1}),
        Err("auth"),
    );
    check(json!({"type": "digest"}), Err("auth.type"));
    check(json!({"username": "u"}), Err("auth.type"));
    check(json!("basic"), Err("auth"));
    check(
        oauth(json!({"scope": "a b", "audience": "api"})),
        Ok(
            json!({"type": "oauth2_client_credentials", "token_url": "https://idp.example/token",
            "client_id": "id", "scope": "a b", "audience": "api", "auth_method": "client_secret_basic"}),
        ),
    );
    check(
        oauth(json!({"token_url": "ftp://x/y"})),
        Err("auth.token_url"),
    );
    check(oauth(json!({"token_url": "/token"})), Err("auth.token_url"));
    check(oauth(json!({"client_id": ""})), Err("auth.client_id"));
    check(
        oauth(json!({"client_secret": null})),
        Err("auth.client_secret"),
    );
    check(
        oauth(json!({"auth_method": "private_key_jwt"})),
        Err("auth.auth_method"),
    );
    check(oauth(json!({"scope": "a\nb"})), Err("auth.scope"));
    check(
        json!({"type": "jwt", "audience": "https://svc.example"}),
        Ok(json!({"type": "jwt", "audience": "https://svc.example", "lifetime_s": 300})),
    );
    check(
        json!({"type": "jwt", "audience": "a", "lifetime_s": 3600}),
        Ok(json!({"type": "jwt", "audience": "a", "lifetime_s": 3600})),
    );
    for lifetime in [json!(59), json!(3601), json!(-1), json!(1.5), json!("300")] {
        check(
            json!({"type": "jwt", "audience": "a", "lifetime_s": lifetime}),
            Err("auth.lifetime_s"),
        );
    }
    check(json!({"type": "jwt"}), Err("auth.audience"));
}

#[test]
fn messages_start_with_the_field() {
    let e = DestinationAuth::from_json(&json!({"type": "oauth2_client_credentials",
        "token_url": "nope", "client_id": "i", "client_secret": "s"}))
    .unwrap_err();
    assert!(e.to_string().starts_with("auth.token_url: "), "{e}");
}

#[test]
fn secrets_are_stored_but_never_shown() {
    let rows = [
        json!({"type": "basic", "username": "u", "password": "pw-SECRET"}),
        json!({"type": "oauth2_client_credentials", "token_url": "http://127.0.0.1:9/t",
            "client_id": "i", "client_secret": "cs-SECRET", "auth_method": "client_secret_post"}),
        json!({"type": "jwt", "audience": "a", "lifetime_s": 60}),
    ];
    for row in rows {
        let auth = DestinationAuth::from_json(&row).unwrap().unwrap();
        let stored = auth.to_stored();
        let back = DestinationAuth::from_stored(Some(&stored)).unwrap();
        assert_eq!(back.as_ref(), Some(&auth), "{row}");
        assert!(!auth.view().to_string().contains("SECRET"), "{row}");
        assert!(!format!("{auth:?}").contains("SECRET"), "{row}");
    }
    assert_eq!(DestinationAuth::from_stored(None), Ok(None));
    assert_eq!(DestinationAuth::from_stored(Some("{")), Err(CorruptAuth));
}

#[test]
fn basic_header_is_rfc_7617() {
    let auth = DestinationAuth::from_json(
        &json!({"type": "basic", "username": "Aladdin", "password": "open sesame"}),
    )
    .unwrap();
    let Some(DestinationAuth::Basic(basic)) = auth else {
        panic!("basic")
    };
    assert_eq!(basic.header_value(), "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
}

fn grant(method: &str) -> ClientCredentials {
    let auth = DestinationAuth::from_json(&json!({"type": "oauth2_client_credentials",
        "token_url": "http://127.0.0.1:9/t", "client_id": "my id", "client_secret": "s&p",
        "scope": "a b", "audience": "api", "auth_method": method}))
    .unwrap();
    match auth {
        Some(DestinationAuth::OAuth2(c)) => c,
        other => panic!("{other:?}"),
    }
}

#[test]
fn token_requests_follow_rfc_6749() {
    let (headers, body) = grant("client_secret_basic").token_request();
    assert_eq!(body, "grant_type=client_credentials&scope=a+b&audience=api");
    // "my+id:s%26p", each form-encoded first (§2.3.1).
    let basic = base64::engine::general_purpose::STANDARD.encode("my+id:s%26p");
    assert!(headers.contains(&("authorization", format!("Basic {basic}"))));
    assert!(headers.contains(&("content-type", "application/x-www-form-urlencoded".into())));
    let (headers, body) = grant("client_secret_post").token_request();
    assert_eq!(
        body,
        "grant_type=client_credentials&scope=a+b&audience=api&client_id=my+id&client_secret=s%26p"
    );
    assert!(headers.iter().all(|(n, _)| *n != "authorization"));
}

/// A token answer's body, and the token and `expires_in` read from it
/// (`Err`: refused).
type TokenRow<'a> = (&'a str, Result<(&'a str, Option<u64>), ()>);

#[test]
fn token_answers_are_read() {
    let rows: &[TokenRow] = &[
        (
            r#"{"access_token":"t1","token_type":"Bearer","expires_in":3600}"#,
            Ok(("t1", Some(3600))),
        ),
        (
            r#"{"access_token":"t2","expires_in":"120"}"#,
            Ok(("t2", Some(120))),
        ),
        (r#"{"access_token":"t3"}"#, Ok(("t3", None))),
        (r#"{"access_token":""}"#, Err(())),
        (r#"{"access_token":"a b"}"#, Err(())),
        (r#"{"error":"invalid_client"}"#, Err(())),
        ("not json", Err(())),
    ];
    for (body, want) in rows {
        let got = AccessToken::parse(body.as_bytes())
            .map(|t| (t.token.clone(), t.expires_in.map(|d| d.as_secs())))
            .map_err(|_| ());
        let want = want.map(|(t, e)| (t.to_owned(), e));
        assert_eq!(got, want, "{body}");
    }
    let keep = |s: Option<u64>| {
        AccessToken {
            token: "t".into(),
            expires_in: s.map(Duration::from_secs),
        }
        .keep_for()
    };
    assert_eq!(keep(Some(3600)), Duration::from_secs(3570));
    assert_eq!(keep(Some(10)), Duration::ZERO);
    assert_eq!(keep(None), Duration::from_secs(3570));
}

#[test]
fn jwt_claims_name_the_call() {
    let jwt = JwtAuth {
        audience: "https://svc".into(),
        lifetime_s: 300,
    };
    let call = |tenant| JwtCall {
        issuer: "https://tc.example",
        tenant,
        task_id: "0190",
        attempt: 2,
        now_s: 1000,
    };
    let claims: Value = serde_json::from_str(&jwt.claims(&call(Some("acme")))).unwrap();
    assert_eq!(
        claims,
        json!({"iss": "https://tc.example", "sub": "acme", "aud": "https://svc",
            "iat": 1000, "exp": 1300, "jti": "0190:2"})
    );
    let claims: Value = serde_json::from_str(&jwt.claims(&call(None))).unwrap();
    assert_eq!(claims["sub"], "taskcenter");
}
