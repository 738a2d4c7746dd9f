//! Outbound calls through the real binary: a task PUTs to an
//! endpoint that wants a bearer token set on its destination, and the
//! receiver verifies the Standard Webhooks signature of every try, retries
//! included, with the Standard Webhooks project's own Rust library
//! (`standardwebhooks`: its own HMAC and base64 crates, nothing of ours),
//! during a rotation (two secrets, either verifies), and refuses a tampered
//! body. The server's own `--signing-secret` signs a destination without
//! secrets. Then no secret and no credential shows anywhere: the API's
//! views, the dashboard, `/metrics`, and every line the server logged.
//!
//! The receiver is tc-downstream's fake served on loopback, with a rule of
//! this file: it answers 401 to a call that lacks the token or whose
//! signature does not verify, so a wrong call fails its task for good.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use standardwebhooks::Webhook;
use tc_downstream::fake::{Call, FakeServer, Reply, Script, Step};

use crate::support::{self, Api};

/// The destination's secrets: the old one (24 bytes, the Standard Webhooks
/// libraries' test secret) and the new one (32 bytes), both active while
/// the destination rotates.
const OLD: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const NEW: &str = "whsec_b3V0Ym91bmQtbmV3LXNlY3JldC0zMi1ieXRlcyEhISE=";
/// The server's own secret (`--signing-secret`), for destinations without.
const SERVER: &str = "whsec_c2VydmVyLXdpZGUtc2VjcmV0LTI0Ynl0";
/// A tenant's own secret.
const TENANT: &str = "whsec_dGVuYW50LW93bi1zZWNyZXQtMjQtYnl0ZXMh";
/// The bearer token the receiver wants, set on the destination.
const TOKEN: &str = "Bearer dest-t0ken-s3cr3t";
/// A credential the task sends itself (a view shows it redacted).
const TASK_KEY: &str = "task-k3y-s3cr3t";

/// What the receiver found in one call.
#[derive(Debug, Clone)]
struct Checked {
    path: String,
    method: String,
    attempt: Option<u32>,
    id: Option<String>,
    authorized: bool,
    /// Which secrets verify the call as sent.
    verified_by: Vec<&'static str>,
    /// Whether some secret verified the call with its body changed.
    tampered_verified: bool,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// The receiver: verifies each call with every secret it knows.
struct Receiver {
    server: FakeServer,
    checked: Arc<Mutex<Vec<Checked>>>,
}

fn header_map(call: &Call) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in &call.headers {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

/// The secrets that verify `body` sent with `headers`.
fn verifying(body: &[u8], headers: &HeaderMap) -> Vec<&'static str> {
    [OLD, NEW, SERVER, TENANT]
        .into_iter()
        .filter(|secret| Webhook::new(secret).unwrap().verify(body, headers).is_ok())
        .collect()
}

impl Receiver {
    /// Serves on `ip`. A call to `/protected/...` must carry [`TOKEN`] and
    /// verify with `OLD` or `NEW`; one to `/open/...` must verify with
    /// `SERVER`; one to `/any/...` is taken as it comes (the test judges
    /// what it carried). `/flaky/N` in the path answers 503 to a key's
    /// first N calls, then 200.
    async fn start(ip: IpAddr) -> Receiver {
        let checked = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&checked);
        let script = Script::with_rule(move |call: &Call, earlier: usize| {
            let headers = header_map(call);
            let mut tampered = call.body.to_vec();
            tampered.extend_from_slice(b" ");
            let verified_by = verifying(&call.body, &headers);
            let tampered_verified = !verifying(&tampered, &headers).is_empty();
            let authorized = call.header("authorization") == Some(TOKEN);
            let path = call.path.clone();
            record.lock().unwrap().push(Checked {
                path: path.clone(),
                method: call.method.clone(),
                attempt: call.attempt,
                id: call.header("webhook-id").map(str::to_owned),
                authorized,
                verified_by: verified_by.clone(),
                tampered_verified,
                content_type: call.header("content-type").map(str::to_owned),
                body: call.body.to_vec(),
            });
            let accepted = if path.starts_with("/any/") {
                true
            } else if path.starts_with("/protected/") {
                authorized && (verified_by.contains(&OLD) || verified_by.contains(&NEW))
            } else {
                verified_by.contains(&SERVER)
            };
            if !accepted {
                return Step::Reply(Reply::json(401, r#"{"error":"unauthorized"}"#));
            }
            let flaky: usize = path
                .split('/')
                .skip_while(|s| *s != "flaky")
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if earlier < flaky {
                Step::Reply(Reply::status(503))
            } else {
                Step::Reply(Reply::json(200, r#"{"ok":true}"#))
            }
        });
        let server = FakeServer::start_on(script, ip).await.unwrap();
        Receiver { server, checked }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    fn destination(&self) -> String {
        self.server.addr().to_string()
    }

    fn checked(&self) -> Vec<Checked> {
        self.checked.lock().unwrap().clone()
    }
}

fn header_pairs(headers: &[(&str, &str)]) -> Value {
    headers
        .iter()
        .map(|(n, v)| ((*n).to_owned(), Value::from(*v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Submits a task with `method`, `headers` and `json` (none: left out).
async fn submit(
    api: &Api,
    url: &str,
    key: &str,
    method: &str,
    headers: &[(&str, &str)],
    payload: Option<Value>,
) -> Value {
    let mut task = json!({
        "url": url, "idempotency_key": key, "method": method,
        "headers": header_pairs(headers), "max_attempts": 5,
    });
    if let Some(payload) = payload {
        task["json"] = payload;
    }
    let reply = api.post_json("/tasks", &task).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    reply.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_calls_verify_with_a_standard_library_and_no_secret_shows_anywhere() {
    let protected = Receiver::start([127, 0, 0, 1].into()).await;
    let open = Receiver::start([127, 0, 0, 2].into()).await;
    let mut s = support::start_with(|config, _| {
        config.flag("--signing-secret", SERVER);
    })
    .await;

    // The bearer token and two secrets (a rotation) on the protected
    // destination: the answer names the header and counts the secrets.
    let reply = s
        .api
        .put_json(
            &format!("/destinations/{}", protected.destination()),
            &json!({"headers": {"Authorization": TOKEN}, "signing_secrets": [OLD, NEW]}),
        )
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.json()["header_names"], json!(["authorization"]));
    assert_eq!(reply.json()["signing_secrets"], 2);

    // A PUT that fails twice with 503 before it is taken: three tries,
    // each verified. A GET to the open destination, signed by the server.
    let put = submit(
        &s.api,
        &protected.url("/protected/flaky/2/orders/7"),
        "put-1",
        "PUT",
        &[("X-Tenant", "acme"), ("X-Api-Key", TASK_KEY)],
        Some(json!({"amount": 42, "note": "x y"})),
    )
    .await;
    assert_eq!(put["method"], "PUT");
    assert_eq!(
        put["headers"],
        json!({"x-api-key": "[redacted]", "x-tenant": "acme"})
    );
    let get = submit(
        &s.api,
        &open.url("/open/items/7"),
        "get-1",
        "GET",
        &[],
        None,
    )
    .await;
    let (put_id, get_id) = (put["id"].as_str().unwrap(), get["id"].as_str().unwrap());
    let put_done = s.api.wait_terminal(put_id).await;
    let get_done = s.api.wait_terminal(get_id).await;
    assert_eq!(
        (&put_done["state"], &put_done["attempt"]),
        (&json!("success"), &json!(3)),
        "{put_done}"
    );
    assert_eq!(get_done["state"], "success", "{get_done}");

    let calls = protected.checked();
    assert_eq!(calls.len(), 3, "{calls:#?}");
    for (n, call) in (1..).zip(&calls) {
        assert_eq!(call.path, "/protected/flaky/2/orders/7", "try {n}");
        assert_eq!(call.method, "PUT", "try {n}");
        assert_eq!(call.attempt, Some(n), "try {n}");
        assert_eq!(
            call.id.as_deref(),
            Some(put_id),
            "try {n}: webhook-id is the task id"
        );
        assert!(call.authorized, "try {n}: the destination's bearer token");
        assert_eq!(
            call.verified_by,
            [OLD, NEW],
            "try {n}: a receiver holding either secret verifies; the server's own does not"
        );
        assert!(
            !call.tampered_verified,
            "try {n}: a tampered body is refused"
        );
        assert_eq!(call.body, br#"{"amount":42,"note":"x y"}"#, "try {n}");
        assert_eq!(call.content_type.as_deref(), Some("application/json"));
    }
    let calls = open.checked();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0].method, "GET");
    assert_eq!(calls[0].verified_by, [SERVER]);
    assert!(!calls[0].tampered_verified);
    assert!(calls[0].body.is_empty() && calls[0].content_type.is_none());
    assert!(
        !calls[0].authorized,
        "the other destination's token stays there"
    );

    // Rotation done: the new secret alone. The next call verifies with it
    // only, and with no token the protected endpoint refuses it (401 is
    // not retried).
    let reply = s
        .api
        .put_json(
            &format!("/destinations/{}", protected.destination()),
            &json!({"signing_secrets": [NEW], "headers": null}),
        )
        .await;
    assert_eq!(
        (
            &reply.json()["header_names"],
            &reply.json()["signing_secrets"]
        ),
        (&json!([]), &json!(1))
    );
    let after = submit(
        &s.api,
        &protected.url("/protected/after"),
        "after-1",
        "POST",
        &[],
        None,
    )
    .await;
    let done = s.api.wait_terminal(after["id"].as_str().unwrap()).await;
    assert_eq!(
        (&done["state"], &done["error"]),
        (&json!("failed"), &json!("http_401"))
    );
    let last = protected.checked().pop().unwrap();
    assert_eq!(last.verified_by, [NEW]);
    assert!(!last.authorized);
    assert_eq!(last.body, b"{}", "a POST without json sends {{}}");

    // Nothing shows a secret or a credential: the views, the dashboard,
    // the metrics...
    let mut shown = Vec::new();
    for path in [
        format!("/tasks/{put_id}"),
        format!("/tasks/{get_id}"),
        "/tasks".to_owned(),
        "/destinations".to_owned(),
        format!("/destinations/{}", protected.destination()),
        "/metrics".to_owned(),
        "/ui/".to_owned(),
        "/ui/fragment/overview".to_owned(),
        format!("/ui/tasks/{put_id}"),
        "/ui/tasks".to_owned(),
    ] {
        let reply = s.api.get(&path).await;
        assert_eq!(reply.status, 200, "{path}");
        shown.push((path, String::from_utf8_lossy(&reply.body).into_owned()));
    }
    // ...nor any line the server logged, to its exit.
    s.server.terminate();
    s.server.wait_exit().await;
    let logs: String = s
        .server
        .seen_logs()
        .iter()
        .map(|line| format!("{line}\n"))
        .collect();
    assert!(logs.contains("task_start"), "the logs were read: {logs}");
    shown.push(("the log lines".to_owned(), logs));
    shown.push(("stderr".to_owned(), s.server.stderr()));
    let secrets = [
        OLD,
        NEW,
        SERVER,
        &OLD[6..],
        &NEW[6..],
        &SERVER[6..],
        "t0ken-s3cr3t",
        TASK_KEY,
        "v1,",
    ];
    for (what, text) in &shown {
        for secret in secrets {
            assert!(!text.contains(secret), "{what} shows {secret:?}:\n{text}");
        }
    }
}

/// The server refuses a `--signing-secret` that is not one, without
/// repeating it; `TC_SIGNING_SECRET` is the same setting.
#[tokio::test]
async fn a_bad_signing_secret_stops_the_start_without_being_repeated() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = support::Config::new(dir.path());
    config.flag("--signing-secret", "whsec_not-a-s3cr3t");
    let (status, stderr) = config.run_to_exit().await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--signing-secret"), "{stderr}");
    assert!(!stderr.contains("s3cr3t"), "{stderr}");

    let db = dir.path().join("env.db");
    let env = support::Config::env_only(
        &db,
        &[
            ("TC_LISTEN", "127.0.0.1:0"),
            ("TC_DB", db.to_str().unwrap()),
            ("TC_SIGNING_SECRET", &format!("{OLD},{NEW},{SERVER}")),
        ],
    );
    let (status, stderr) = env.run_to_exit().await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--signing-secret: at most 2"), "{stderr}");
    assert!(!stderr.contains(&OLD[6..]), "{stderr}");
}

/// A tenant's task carries only credentials lent to it. With the
/// server's own secret set and a destination holding a bearer token and a
/// secret: a tenant's task is signed with the tenant's own secret and gets
/// no token, another tenant's (no secret of its own) is neither signed nor
/// given the token, even to a destination without settings (never the
/// server's secret); once the destination shares with the first tenant,
/// that one's tasks get the token and the destination's signature, the
/// other's still nothing; shared with `*`, every tenant's. The admin's
/// tasks are as before. No view shows the tenant's secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_s_task_carries_only_its_own_or_lent_credentials() {
    const ADMIN: &str = "admin-s3cret";
    let protected = Receiver::start([127, 0, 0, 1].into()).await;
    let open = Receiver::start([127, 0, 0, 2].into()).await;
    let s = support::start_with(|config, _| {
        config.flag("--signing-secret", SERVER);
        config.flag("--api-token", ADMIN);
    })
    .await;
    let admin = s.api.with_token(ADMIN);
    let destination = format!("/destinations/{}", protected.destination());
    let reply = admin
        .put_json(
            &destination,
            &json!({"headers": {"Authorization": TOKEN}, "signing_secrets": [OLD]}),
        )
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.json()["share_with_tenants"], json!([]));
    let mut keys = Vec::new();
    for (name, secrets) in [("acme", json!([TENANT])), ("beta", json!(null))] {
        let made = admin
            .post_json(
                "/tenants",
                &json!({"name": name, "signing_secrets": secrets}),
            )
            .await;
        assert_eq!(made.status, 201, "{:?}", made.body);
        let text = String::from_utf8_lossy(&made.body).into_owned();
        assert!(!text.contains(&TENANT[6..]), "{text}");
        let key = admin
            .send(
                http::Method::POST,
                &format!("/tenants/{name}/keys"),
                &[],
                "",
            )
            .await;
        assert_eq!(key.status, 201, "{:?}", key.body);
        keys.push(admin.with_token(key.json()["key"].as_str().unwrap()));
    }
    let (acme, beta) = (&keys[0], &keys[1]);
    let read = admin.get("/tenants/acme").await;
    assert_eq!(read.json()["signing_secrets"], 1, "{:?}", read.body);
    assert!(!String::from_utf8_lossy(&read.body).contains(&TENANT[6..]));

    // What the call to `url` by `api` carried: the token?, who signed it.
    let call = async |api: &Api, receiver: &Receiver, path: &str| {
        let task = submit(api, &receiver.url(path), path, "POST", &[], Some(json!({}))).await;
        let done = api.wait_terminal(task["id"].as_str().unwrap()).await;
        assert_eq!(done["state"], "success", "{path}: {done}");
        let calls: Vec<Checked> = receiver
            .checked()
            .into_iter()
            .filter(|c| c.path == path)
            .collect();
        assert_eq!(calls.len(), 1, "{path}: {calls:#?}");
        (calls[0].authorized, calls[0].verified_by.clone())
    };
    let none: Vec<&str> = Vec::new();
    assert_eq!(
        call(acme, &protected, "/any/acme-1").await,
        (false, vec![TENANT])
    );
    assert_eq!(
        call(beta, &protected, "/any/beta-1").await,
        (false, none.clone())
    );
    assert_eq!(
        call(beta, &open, "/any/beta-open").await,
        (false, none.clone())
    );
    assert_eq!(
        call(&admin, &open, "/any/admin-open").await,
        (false, vec![SERVER])
    );
    assert_eq!(
        call(&admin, &protected, "/any/admin-1").await,
        (true, vec![OLD])
    );

    let shared = admin
        .put_json(&destination, &json!({"share_with_tenants": ["acme"]}))
        .await;
    assert_eq!(shared.json()["share_with_tenants"], json!(["acme"]));
    assert_eq!(
        call(acme, &protected, "/any/acme-2").await,
        (true, vec![OLD])
    );
    assert_eq!(
        call(beta, &protected, "/any/beta-2").await,
        (false, none.clone())
    );
    let all = admin
        .put_json(&destination, &json!({"share_with_tenants": ["*"]}))
        .await;
    assert_eq!(all.json()["share_with_tenants"], json!(["*"]));
    assert_eq!(
        call(beta, &protected, "/any/beta-3").await,
        (true, vec![OLD])
    );
}
