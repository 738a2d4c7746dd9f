//! Secrets sealed at rest, through the real binary:
//! `tc-server secret-key new` prints a key; with `--secret-key-file` a
//! destination's bearer token and signing secret still reach the downstream
//! while neither the database file nor a backup holds a byte of them; a
//! server without a key that holds secrets warns at start; another key (or
//! none) refuses to start, naming the destination; a rotation opens the
//! old key's secrets and seals them again.

use base64::Engine;
use serde_json::json;

use crate::support;

const TOKEN: &str = "Bearer tok-SEALED-4b1d9e";
const TOKEN_TEXT: &str = "tok-SEALED-4b1d9e";

fn signing_secret() -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode([42u8; 24]);
    format!("whsec_{b64}")
}

/// A fresh key from the binary itself, written to `dir/name`.
async fn new_key_file(dir: &std::path::Path, name: &str) -> String {
    let out = tokio::task::spawn_blocking(|| {
        std::process::Command::new(support::bin::tc_server())
            .args(["secret-key", "new"])
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .unwrap();
    assert_eq!(bytes.len(), 32, "{text}");
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Which secrets' texts `path` holds.
fn secrets_in(path: &std::path::Path) -> Vec<&'static str> {
    let bytes = std::fs::read(path).unwrap();
    let whsec = signing_secret();
    let secret = whsec.trim_start_matches("whsec_").to_owned();
    let secret: &'static str = Box::leak(secret.into_boxed_str());
    [TOKEN_TEXT, secret]
        .into_iter()
        .filter(|s| bytes.windows(s.len()).any(|w| w == s.as_bytes()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_secrets_reach_the_downstream_and_never_the_file_or_a_backup() {
    let keys = tempfile::tempdir().unwrap();
    let first = new_key_file(keys.path(), "first.key").await;
    let mut s = support::start_with(|c, _| {
        c.flag("--secret-key-file", &first)
            .flag("--api-token", "admin");
    })
    .await;
    let api = s.api.with_token("admin");
    let destination = s.down.destination();
    let reply = api
        .put_json(
            &format!("/destinations/{destination}"),
            &json!({"headers": {"Authorization": TOKEN}, "signing_secrets": [signing_secret()]}),
        )
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    // the token opens for the call
    let id = api.submit_new(&s.down.url("/ok"), "sealed-1").await;
    assert_eq!(api.wait_terminal(&id).await["state"], "success");
    let got = s.down.requests();
    assert_eq!(got.last().unwrap().header("authorization"), Some(TOKEN));
    assert!(got.last().unwrap().header("webhook-signature").is_some());
    // a backup, then the server stops: neither file holds a secret
    let out = tempfile::tempdir().unwrap();
    let copy = out.path().join("copy.db");
    let reply = api
        .post_json("/admin/backup", &json!({ "to": copy.to_str().unwrap() }))
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    s.server.terminate();
    assert!(s.server.wait_exit().await.success());
    assert_eq!(secrets_in(s.config.db()), Vec::<&str>::new());
    assert_eq!(secrets_in(&copy), Vec::<&str>::new());

    // another key, or none: the start is refused, naming the destination
    let other = new_key_file(keys.path(), "other.key").await;
    let mut refused = s.config.clone();
    refused.flag("--secret-key-file", &other);
    let (status, stderr) = refused.run_to_exit().await;
    assert!(!status.success());
    assert!(stderr.contains(&destination), "{stderr}");
    let mut refused = s.config.clone();
    refused.unset("--secret-key-file");
    let (status, stderr) = refused.run_to_exit().await;
    assert!(!status.success());
    assert!(stderr.contains(&destination), "{stderr}");

    // rotation: the new key first, the old one listed; then the new alone
    s.config
        .flag("--secret-key-file", &format!("{other},{first}"));
    s.restart().await;
    s.server.logged("secrets_sealed").await;
    s.server.terminate();
    assert!(s.server.wait_exit().await.success());
    s.config.flag("--secret-key-file", &other);
    s.restart().await;
    let api = s.api.with_token("admin");
    let id = api.submit_new(&s.down.url("/ok"), "sealed-2").await;
    assert_eq!(api.wait_terminal(&id).await["state"], "success");
    let got = s.down.requests();
    assert_eq!(got.last().unwrap().header("authorization"), Some(TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_key_that_holds_secrets_warns_and_seals_them_once_given_one() {
    let mut s = support::start().await;
    let destination = s.down.destination();
    let reply = s
        .api
        .put_json(
            &format!("/destinations/{destination}"),
            &json!({"headers": {"Authorization": TOKEN}}),
        )
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    s.server.terminate();
    assert!(s.server.wait_exit().await.success());
    assert_eq!(secrets_in(s.config.db()), vec![TOKEN_TEXT]);
    s.restart().await;
    let warned = s.server.logged("secrets_not_sealed").await;
    assert_eq!(warned["secrets"], 1);
    s.server.terminate();
    assert!(s.server.wait_exit().await.success());
    // given a key: sealed at start, gone from the file
    let keys = tempfile::tempdir().unwrap();
    let key = new_key_file(keys.path(), "k").await;
    s.config.flag("--secret-key-file", &key);
    s.restart().await;
    s.server.logged("secrets_sealed").await;
    s.server.terminate();
    assert!(s.server.wait_exit().await.success());
    assert_eq!(secrets_in(s.config.db()), Vec::<&str>::new());
}
