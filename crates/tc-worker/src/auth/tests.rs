//! The auth layer against the in-process fake on a paused clock: the
//! Basic header, the token fetched once and shared, kept until 30 s before
//! it runs out, a `401` to a kept token answered by one repeat with a fresh
//! one, and a failing token endpoint as `auth_failed` without a secret.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tc_downstream::fake::{FakeDownstream, Reply, Script, Step};
use tc_downstream::{Delivery, DownError, JwtKeys, Method};
use tc_model::auth::DestinationAuth;

use super::*;

const TOKEN_URL: &str = "http://127.0.0.1:9/token";

fn delivery() -> Delivery {
    Delivery {
        method: Method::Post,
        url: "http://127.0.0.1:9/hook".into(),
        headers: vec![("authorization".into(), "Bearer task's own".into())],
        body: "{}".into(),
        timeout: Duration::from_secs(5),
        client_tls: None,
    }
}

fn call() -> CallOf<'static> {
    CallOf {
        destination: "127.0.0.1:9",
        tenant: None,
        task_id: "t1",
        attempt: 1,
        now_s: 1_000,
    }
}

fn auth(value: serde_json::Value) -> DestinationAuth {
    DestinationAuth::from_json(&value).unwrap().unwrap()
}

fn oauth(method: &str) -> DestinationAuth {
    auth(
        json!({"type": "oauth2_client_credentials", "token_url": TOKEN_URL,
        "client_id": "id", "client_secret": "very-SECRET", "scope": "send",
        "auth_method": method}),
    )
}

fn token(name: &str, expires_in: u64) -> Step {
    Step::Reply(Reply::json(
        200,
        format!(r#"{{"access_token":"{name}","token_type":"Bearer","expires_in":{expires_in}}}"#),
    ))
}

/// The `Authorization` each call to the hook carried.
fn hook_auth(script: &Script) -> Vec<String> {
    script
        .calls("/hook")
        .iter()
        .map(|c| c.header("authorization").unwrap_or("").to_owned())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn basic_replaces_any_other_authorization() {
    let script = Script::new();
    let fake = FakeDownstream::new(Arc::clone(&script));
    let basic = auth(json!({"type": "basic", "username": "Aladdin", "password": "open sesame"}));
    let answer = CallAuth::default()
        .send(&fake, Some(&basic), delivery(), &call())
        .await;
    assert_eq!(answer.map(|r| r.status), Ok(200));
    assert_eq!(hook_auth(&script), ["Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="]);
    let calls = script.calls("/hook");
    assert_eq!(
        calls[0]
            .headers
            .iter()
            .filter(|(n, _)| n == "authorization")
            .count(),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_token_is_fetched_once_shared_and_renewed_30_s_before_it_expires() {
    let script = Script::new();
    script.plan("/token", [token("tok1", 120), token("tok2", 120)]);
    let fake = FakeDownstream::new(Arc::clone(&script));
    let layer = CallAuth::default();
    let grant = oauth("client_secret_basic");
    let one = call();
    let (a, b) = tokio::join!(
        layer.send(&fake, Some(&grant), delivery(), &one),
        layer.send(&fake, Some(&grant), delivery(), &one),
    );
    assert_eq!(
        (a.map(|r| r.status), b.map(|r| r.status)),
        (Ok(200), Ok(200))
    );
    tokio::time::advance(Duration::from_secs(89)).await;
    layer
        .send(&fake, Some(&grant), delivery(), &call())
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(2)).await;
    layer
        .send(&fake, Some(&grant), delivery(), &call())
        .await
        .unwrap();
    assert_eq!(
        hook_auth(&script),
        ["Bearer tok1", "Bearer tok1", "Bearer tok1", "Bearer tok2"]
    );
    let requests = script.calls("/token");
    assert_eq!(requests.len(), 2, "one fetch for the three calls in 90 s");
    let first = &requests[0];
    assert_eq!(first.method, "POST");
    assert_eq!(&first.body[..], b"grant_type=client_credentials&scope=send");
    assert_eq!(
        first.header("authorization"),
        Some("Basic aWQ6dmVyeS1TRUNSRVQ=")
    );
    assert_eq!(
        first.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
}

#[tokio::test(start_paused = true)]
async fn client_secret_post_sends_the_secret_in_the_form() {
    let script = Script::new();
    script.plan("/token", [token("tok1", 3600)]);
    let fake = FakeDownstream::new(Arc::clone(&script));
    let grant = oauth("client_secret_post");
    CallAuth::default()
        .send(&fake, Some(&grant), delivery(), &call())
        .await
        .unwrap();
    let request = &script.calls("/token")[0];
    assert_eq!(request.header("authorization"), None);
    assert_eq!(
        &request.body[..],
        b"grant_type=client_credentials&scope=send&client_id=id&client_secret=very-SECRET"
    );
}

#[tokio::test(start_paused = true)]
async fn a_401_to_a_kept_token_is_repeated_once_with_a_fresh_one() {
    let script = Script::new();
    script.plan(
        "/token",
        [
            token("tok1", 3600),
            token("tok2", 3600),
            token("tok3", 3600),
        ],
    );
    script.plan(
        "/hook",
        [
            Step::Reply(Reply::status(200)),
            Step::Reply(Reply::status(401)),
            Step::Reply(Reply::status(200)),
            // A fresh token refused: no second repeat.
            Step::Reply(Reply::status(401)),
            Step::Reply(Reply::status(401)),
        ],
    );
    let fake = FakeDownstream::new(Arc::clone(&script));
    let layer = CallAuth::default();
    let grant = oauth("client_secret_basic");
    let status = |r: Result<DownResponse, DownError>| r.map(|r| r.status);
    assert_eq!(
        status(layer.send(&fake, Some(&grant), delivery(), &call()).await),
        Ok(200)
    );
    assert_eq!(
        status(layer.send(&fake, Some(&grant), delivery(), &call()).await),
        Ok(200)
    );
    assert_eq!(
        hook_auth(&script),
        ["Bearer tok1", "Bearer tok1", "Bearer tok2"]
    );
    // tok2 is kept: refused, it is dropped and tok3 is refused too: 401.
    assert_eq!(
        status(layer.send(&fake, Some(&grant), delivery(), &call()).await),
        Ok(401)
    );
    assert_eq!(script.calls("/hook").len(), 5);
    assert_eq!(script.calls("/token").len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_failing_token_endpoint_is_auth_failed_naming_its_status() {
    let rows: &[(Step, &str)] = &[
        (
            Step::Reply(Reply::status(503)),
            "token endpoint answered 503",
        ),
        (
            Step::Reply(Reply::json(200, "{}")),
            "token endpoint answered 200, but",
        ),
        (Step::Reset, "token endpoint unreachable"),
    ];
    for (step, want) in rows {
        let script = Script::new();
        script.plan("/token", [step.clone()]);
        let fake = FakeDownstream::new(Arc::clone(&script));
        let grant = oauth("client_secret_post");
        let answer = CallAuth::default()
            .send(&fake, Some(&grant), delivery(), &call())
            .await;
        let Err(DownError::AuthFailed(message)) = answer else {
            panic!("{want}: {answer:?}");
        };
        assert!(message.starts_with(want), "{message}");
        assert!(!message.contains("SECRET"), "{message}");
        assert!(
            script.calls("/hook").is_empty(),
            "{want}: the call is not made"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_jwt_names_the_call_and_needs_an_issuer() {
    let script = Script::new();
    let fake = FakeDownstream::new(Arc::clone(&script));
    let jwt = auth(json!({"type": "jwt", "audience": "https://svc.example"}));
    let answer = CallAuth::default()
        .send(&fake, Some(&jwt), delivery(), &call())
        .await;
    assert!(
        matches!(answer, Err(DownError::AuthFailed(_))),
        "{answer:?}"
    );
    let keys = JwtKeys::from_pems(&[JwtKeys::generate_pem().unwrap()]).unwrap();
    let layer = CallAuth::new(Some(JwtSigner {
        issuer: "https://tc.example".into(),
        keys: Arc::new(keys),
    }));
    let call = CallOf {
        tenant: Some("acme"),
        attempt: 3,
        ..call()
    };
    layer
        .send(&fake, Some(&jwt), delivery(), &call)
        .await
        .unwrap();
    let header = hook_auth(&script).pop().unwrap();
    let token = header.strip_prefix("Bearer ").unwrap();
    let payload = token.split('.').nth(1).unwrap();
    use base64::Engine as _;
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        claims,
        json!({"iss": "https://tc.example", "sub": "acme", "aud": "https://svc.example",
            "iat": 1000, "exp": 1300, "jti": "t1:3"})
    );
}
