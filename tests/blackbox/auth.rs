//! A destination's `auth` through the real binary: HTTP Basic;
//! an OAuth2 client credentials token from a loopback token endpoint
//! (fetched once and shared, a `401` to the kept token answered by one
//! repeat with a fresh one, a failing endpoint making the try fail with
//! `auth_failed`); a JWT the receiver verifies against the server's own
//! JWK Set with the `jsonwebtoken` crate. A task's own `Authorization` is
//! refused for such a destination; a `jwt` auth without `--issuer` is
//! refused. Then no secret shows anywhere: views, the dashboard, the
//! metrics, the CLI's output, every log line.

use base64::Engine as _;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Value, json};
use tc_downstream::fake::{FakeServer, Reply, Script, Step};

use crate::support::{self, Api, cli::Cli};

const ISSUER: &str = "https://tasks.example.com";
const PASSWORD: &str = "pw-s3cr3t-basic";
const CLIENT_SECRET: &str = "cl1ent-s3cr3t";
const TOKEN_ONE: &str = "acc3ss-t0ken-one";
const TOKEN_TWO: &str = "acc3ss-t0ken-two";

fn token(name: &str) -> Step {
    Step::Reply(Reply::json(
        200,
        format!(r#"{{"access_token":"{name}","token_type":"Bearer","expires_in":3600}}"#),
    ))
}

async fn serve(script: &std::sync::Arc<Script>) -> FakeServer {
    FakeServer::start_on(std::sync::Arc::clone(script), [127, 0, 0, 1].into())
        .await
        .unwrap()
}

fn destination(server: &FakeServer) -> String {
    format!("127.0.0.1:{}", server.addr().port())
}

async fn set_auth(api: &Api, server: &FakeServer, auth: Value) -> Value {
    let reply = api
        .put_json(
            &format!("/destinations/{}", destination(server)),
            &json!({ "auth": auth }),
        )
        .await;
    assert_eq!(
        reply.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.json()["auth"].clone()
}

/// Submits a task to `url` and waits for its end.
async fn run(api: &Api, url: &str, key: &str, max_attempts: u32) -> Value {
    let reply = api
        .post_json(
            "/tasks",
            &json!({"url": url, "idempotency_key": key,
            "max_attempts": max_attempts, "json": {"n": 1}}),
        )
        .await;
    assert_eq!(
        reply.status,
        201,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
    api.wait_terminal(&reply.id()).await
}

fn authorization(script: &Script) -> Vec<String> {
    script
        .calls("/hook")
        .iter()
        .map(|c| c.header("authorization").unwrap_or("").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_oauth2_and_jwt_reach_the_receiver_and_no_secret_shows() {
    let idp = Script::new();
    idp.plan("/token", [token(TOKEN_ONE), token(TOKEN_TWO)]);
    let idp_server = serve(&idp).await;
    let down_idp = Script::with_rule(|_, _| Step::Reply(Reply::status(503)));
    let down_idp_server = serve(&down_idp).await;
    let (basic, oauth, jwt, broken) = (Script::new(), Script::new(), Script::new(), Script::new());
    // The third call with the kept token is refused once: revoked early.
    oauth.plan(
        "/hook",
        [
            Step::Reply(Reply::status(200)),
            Step::Reply(Reply::status(200)),
            Step::Reply(Reply::status(401)),
        ],
    );
    let basic_server = serve(&basic).await;
    let oauth_server = serve(&oauth).await;
    let jwt_server = serve(&jwt).await;
    let broken_server = serve(&broken).await;
    let mut s = support::start_with(|config, _| {
        config.flag("--issuer", ISSUER);
    })
    .await;

    let view = set_auth(
        &s.api,
        &basic_server,
        json!({"type": "basic", "username": "tc", "password": PASSWORD}),
    )
    .await;
    assert_eq!(view, json!({"type": "basic", "username": "tc"}));
    let view = set_auth(
        &s.api,
        &oauth_server,
        json!({"type": "oauth2_client_credentials",
        "token_url": format!("{}/token", idp_server.url()), "client_id": "tc-client",
        "client_secret": CLIENT_SECRET, "scope": "hooks.write"}),
    )
    .await;
    assert_eq!(view["type"], "oauth2_client_credentials");
    assert_eq!(view["client_id"], "tc-client");
    assert_eq!(view["scope"], "hooks.write");
    assert!(view.get("client_secret").is_none(), "{view}");
    let view = set_auth(
        &s.api,
        &jwt_server,
        json!({"type": "jwt", "audience": "https://hooks.example", "lifetime_s": 120}),
    )
    .await;
    assert_eq!(
        view,
        json!({"type": "jwt", "audience": "https://hooks.example", "lifetime_s": 120})
    );
    set_auth(
        &s.api,
        &broken_server,
        json!({"type": "oauth2_client_credentials",
        "token_url": format!("{}/token", down_idp_server.url()), "client_id": "tc-client",
        "client_secret": CLIENT_SECRET}),
    )
    .await;

    // Basic.
    let done = run(
        &s.api,
        &format!("{}/hook", basic_server.url()),
        "basic-1",
        1,
    )
    .await;
    assert_eq!(done["state"], "success", "{done}");
    let pair = base64::engine::general_purpose::STANDARD.encode(format!("tc:{PASSWORD}"));
    assert_eq!(authorization(&basic), [format!("Basic {pair}")]);

    // OAuth2: one token for two calls; the third is refused with it, the
    // call is made once more with a fresh token, in the same try.
    for n in 1..=3 {
        let url = format!("{}/hook", oauth_server.url());
        let done = run(&s.api, &url, &format!("oauth-{n}"), 1).await;
        assert_eq!(
            (&done["state"], &done["attempt"]),
            (&json!("success"), &json!(1)),
            "{done}"
        );
    }
    let one = format!("Bearer {TOKEN_ONE}");
    let two = format!("Bearer {TOKEN_TWO}");
    assert_eq!(authorization(&oauth), [one.clone(), one.clone(), one, two]);
    let requests = idp.calls("/token");
    assert_eq!(requests.len(), 2);
    assert_eq!(
        &requests[0].body[..],
        b"grant_type=client_credentials&scope=hooks.write"
    );

    // A token endpoint that fails: the try fails with auth_failed, the
    // receiver never called.
    let done = run(
        &s.api,
        &format!("{}/hook", broken_server.url()),
        "broken-1",
        1,
    )
    .await;
    assert_eq!(
        (&done["state"], &done["error"]),
        (&json!("failed"), &json!("auth_failed")),
        "{done}"
    );
    assert!(broken.calls("/hook").is_empty());

    // JWT: verified against the server's JWK Set, fetched without a
    // credential, by the jsonwebtoken crate.
    let done = run(&s.api, &format!("{}/hook", jwt_server.url()), "jwt-1", 1).await;
    assert_eq!(done["state"], "success", "{done}");
    let anonymous = Api::new(s.server.base_url());
    let discovery = anonymous.get("/.well-known/openid-configuration").await;
    assert_eq!(discovery.status, 200);
    assert_eq!(discovery.json()["issuer"], ISSUER);
    assert_eq!(
        discovery.json()["jwks_uri"],
        format!("{ISSUER}/.well-known/jwks.json")
    );
    let jwks = anonymous.get("/.well-known/jwks.json").await;
    assert_eq!(jwks.status, 200);
    let set: JwkSet = serde_json::from_slice(&jwks.body).unwrap();
    let header = authorization(&jwt).pop().unwrap();
    let token = header.strip_prefix("Bearer ").unwrap();
    let kid = jsonwebtoken::decode_header(token).unwrap().kid.unwrap();
    let key = DecodingKey::from_jwk(set.find(&kid).unwrap()).unwrap();
    let mut validation = Validation::new(Algorithm::ES256);
    validation.set_audience(&["https://hooks.example"]);
    validation.set_issuer(&[ISSUER]);
    let claims = jsonwebtoken::decode::<Value>(token, &key, &validation)
        .unwrap()
        .claims;
    assert_eq!(claims["sub"], "taskcenter");
    assert_eq!(claims["jti"], format!("{}:1", done["id"].as_str().unwrap()));
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        120
    );

    // A task's own Authorization to a destination with auth.
    let refused = s
        .api
        .post_json(
            "/tasks",
            &json!({"url": format!("{}/hook", basic_server.url()),
            "idempotency_key": "own-auth", "headers": {"Authorization": "Bearer mine"}}),
        )
        .await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.error_message().starts_with("headers.authorization"),
        "{}",
        refused.error_message()
    );

    // The CLI sets and shows an auth without repeating its secret.
    let cli = Cli::new(&s.server.base_url());
    let set = cli
        .run(&[
            "destination",
            "set",
            &destination(&broken_server),
            "--auth-basic",
            &format!("ops:{PASSWORD}"),
        ])
        .await;
    set.expect(0);
    assert!(set.out().contains("basic"), "{}", set.out());

    // Nothing shows a secret: views, the dashboard, the metrics, the CLI...
    let mut shown = vec![("the CLI".to_owned(), format!("{}{}", set.out(), set.stderr))];
    for path in [
        "/destinations".to_owned(),
        format!("/destinations/{}", destination(&oauth_server)),
        "/metrics".to_owned(),
        "/ui/fragment/overview".to_owned(),
        "/ui/".to_owned(),
    ] {
        let reply = s.api.get(&path).await;
        assert_eq!(reply.status, 200, "{path}");
        shown.push((path, String::from_utf8_lossy(&reply.body).into_owned()));
    }
    let dashboard = &shown.iter().find(|(p, _)| p == "/ui/").unwrap().1;
    assert!(
        dashboard.contains("oauth2_client_credentials"),
        "the dashboard shows the type"
    );
    assert!(
        dashboard.contains("client_id=tc-client"),
        "and the public fields"
    );
    let dashboard = &shown.iter().find(|(p, _)| p == "/ui/").unwrap().1;
    assert!(
        dashboard.contains("oauth2_client_credentials")
            && dashboard.contains("client_id=tc-client"),
        "the dashboard shows the type and the public fields"
    );
    // ...nor any line the server logged, to its exit.
    s.server.terminate();
    s.server.wait_exit().await;
    let logs: String = s
        .server
        .seen_logs()
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(logs.contains("task_start"), "the logs were read");
    shown.push(("the log lines".to_owned(), logs));
    shown.push(("stderr".to_owned(), s.server.stderr()));
    for (what, text) in &shown {
        for secret in [
            PASSWORD,
            CLIENT_SECRET,
            TOKEN_ONE,
            TOKEN_TWO,
            pair.as_str(),
            "eyJ",
        ] {
            assert!(!text.contains(secret), "{what} shows {secret:?}:\n{text}");
        }
    }
}

/// Without `--issuer` a `jwt` auth is refused, naming the field, and the
/// key documents are not found.
#[tokio::test]
async fn a_jwt_auth_needs_an_issuer() {
    let s = support::start().await;
    let reply = s
        .api
        .put_json(
            "/destinations/127.0.0.1:9",
            &json!({"auth": {"type": "jwt", "audience": "a"}}),
        )
        .await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.error_message().starts_with("auth.type"),
        "{}",
        reply.error_message()
    );
    assert_eq!(s.api.get("/.well-known/jwks.json").await.status, 404);
    assert_eq!(
        s.api.get("/.well-known/openid-configuration").await.status,
        404
    );
}
