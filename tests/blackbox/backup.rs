//! Online backup of a running server's SQLite file, through `POST
//! /admin/backup` and `tc-server backup`, while submits and completions
//! flow: the copy holds every task acknowledged before the backup began
//! (finished ones finished), none acknowledged after it answered, passes
//! `PRAGMA integrity_check`, and a server starts on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::Method;
use serde_json::{Value, json};

use crate::support::{self, Api};

const TOKEN: &str = "backup-token";

/// Submits tasks to `/ok` until `stop` (bounded), returning their ids in the
/// order they were acknowledged.
async fn submit_until(api: Api, url: String, stop: Arc<AtomicBool>, prefix: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..20_000 {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        ids.push(api.submit_new(&url, &format!("{prefix}-{i}")).await);
    }
    ids
}

async fn backup(api: &Api, to: &str) -> support::api::Reply {
    api.post_json("/admin/backup", &json!({ "to": to })).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_holds_what_was_acknowledged_before_it_and_serves() {
    let setup = support::start_with(|c, _| {
        c.flag("--api-token", TOKEN).flag("--concurrency", "4");
    })
    .await;
    let api = setup.api.with_token(TOKEN);
    let url = setup.down.url("/ok");
    // Some finished tasks before the backup: they must be finished in it.
    let mut finished = Vec::new();
    for i in 0..20 {
        finished.push(api.submit_new(&url, &format!("early-{i}")).await);
    }
    for id in &finished {
        assert_eq!(api.wait_terminal(id).await["state"], "success");
    }

    // Load: submits (and the worker's completions) flow during the backup.
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(submit_until(
        api.clone(),
        url.clone(),
        Arc::clone(&stop),
        "during",
    ));
    let mut before = Vec::new();
    for i in 0..50 {
        before.push(api.submit_new(&url, &format!("before-{i}")).await);
    }
    let out = tempfile::tempdir().unwrap();
    let copy = out.path().join("t.db");
    let reply = backup(&api, copy.to_str().unwrap()).await;
    assert_eq!(reply.status, 200, "{}", reply.json());
    let mut after = Vec::new();
    for i in 0..20 {
        after.push(api.submit_new(&url, &format!("after-{i}")).await);
    }
    stop.store(true, Ordering::SeqCst);
    let during = load.await.unwrap();
    assert!(!during.is_empty());

    let made = reply.json();
    assert_eq!(made["path"], copy.to_str().unwrap());
    assert_eq!(
        made["bytes"].as_u64(),
        Some(std::fs::metadata(&copy).unwrap().len())
    );
    assert!(made["consistent_as_of"].as_str().unwrap().ends_with('Z'));
    let tasks = made["tasks"].as_u64().unwrap();

    // The same copy through the command line, while the server still runs.
    let cli_copy = out.path().join("cli.db");
    let run = std::process::Command::new(support::bin::tc_server())
        .args(["backup", "--json", "--db"])
        .arg(setup.config.db())
        .arg("--to")
        .arg(&cli_copy)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let line: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert!(line["tasks"].as_u64().unwrap() >= tasks + after.len() as u64);

    for file in [&copy, &cli_copy] {
        let raw = rusqlite::Connection::open(file).unwrap();
        let integrity: String = raw
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        assert_eq!(integrity, "ok", "{}", file.display());
    }

    // A server on the copy: everything acknowledged before, nothing after.
    let copied = support::Setup::on(out.path(), |c| {
        c.flag("--api-token", TOKEN);
    })
    .await;
    let on_copy = copied.api.with_token(TOKEN);
    for id in &finished {
        assert_eq!(on_copy.task(id).await["state"], "success", "{id}");
    }
    for id in &before {
        let reply = on_copy.get(&format!("/tasks/{id}")).await;
        assert_eq!(reply.status, 200, "{id} acknowledged before the backup");
    }
    for id in &after {
        let reply = on_copy.get(&format!("/tasks/{id}")).await;
        assert_eq!(
            reply.status, 404,
            "{id} acknowledged after the backup answered"
        );
    }
    let all = on_copy.list_all("").await;
    assert_eq!(all.len() as u64, tasks);
    let acknowledged_by_then = finished.len() + before.len() + during.len();
    assert!(
        all.len() <= acknowledged_by_then,
        "{} > {acknowledged_by_then}",
        all.len()
    );
}

#[tokio::test]
async fn bad_backup_requests_are_refused_with_a_clear_error() {
    let setup = support::start_with(|c, _| {
        c.flag("--api-token", TOKEN);
    })
    .await;
    let api = setup.api.with_token(TOKEN);
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("old.db");
    std::fs::write(&existing, b"yesterday").unwrap();
    let check = |reply: support::api::Reply, status: u16, code: &str, starts: &str| {
        assert_eq!(reply.status, status, "{}", reply.json());
        assert_eq!(reply.error_code(), code);
        assert!(
            reply.error_message().starts_with(starts),
            "{}",
            reply.error_message()
        );
    };
    check(
        backup(&api, "copy.db").await,
        400,
        "invalid_request",
        "to: must be an absolute path",
    );
    check(
        api.post_json("/admin/backup", &json!({})).await,
        400,
        "invalid_request",
        "to: required",
    );
    let missing_dir = dir.path().join("nope/copy.db");
    check(
        backup(&api, missing_dir.to_str().unwrap()).await,
        400,
        "invalid_request",
        "to: ",
    );
    check(
        backup(&api, existing.to_str().unwrap()).await,
        409,
        "backup_target_exists",
        "to: ",
    );
    assert_eq!(std::fs::read(&existing).unwrap(), b"yesterday");
    let anonymous = setup
        .api
        .send(
            Method::POST,
            "/admin/backup",
            &[("content-type", "application/json")],
            r#"{"to":"/tmp/x.db"}"#,
        )
        .await;
    assert_eq!(anonymous.status, 401);

    // Without a token the route writes no file for anyone.
    let open = support::start().await;
    let target = dir.path().join("open.db");
    check(
        backup(&open.api, target.to_str().unwrap()).await,
        403,
        "backup_needs_token",
        "POST /admin/backup",
    );
    assert!(!target.exists());
}

/// A file's permission bits.
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The database, its `-wal` and `-shm`, and every backup
/// hold destination headers and signing secrets, so they are created for
/// the owner alone (0600), whatever the umask lets through; an existing
/// file's mode is left as it is, with a warning at start when others may
/// read it.
#[tokio::test]
async fn the_database_and_its_backups_are_the_owner_s_alone() {
    let mut setup = support::start_with(|c, _| {
        c.flag("--api-token", TOKEN);
    })
    .await;
    let api = setup.api.with_token(TOKEN);
    api.submit_new(&setup.down.url("/ok"), "k").await;
    let db = setup.config.db().to_owned();
    let sidecar = |suffix: &str| {
        let mut name = db.clone().into_os_string();
        name.push(suffix);
        std::path::PathBuf::from(name)
    };
    for file in [db.clone(), sidecar("-wal"), sidecar("-shm")] {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    let out = tempfile::tempdir().unwrap();
    let copy = out.path().join("api.db");
    let reply = backup(&api, copy.to_str().unwrap()).await;
    assert_eq!(reply.status, 200, "{}", reply.json());
    assert_eq!(mode(&copy), 0o600, "POST /admin/backup");
    let cli_copy = out.path().join("cli.db");
    let run = std::process::Command::new(support::bin::tc_server())
        .args(["backup", "--db"])
        .arg(&db)
        .arg("--to")
        .arg(&cli_copy)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(mode(&cli_copy), 0o600, "tc-server backup");
    assert!(
        !setup
            .server
            .seen_logs()
            .iter()
            .any(|l| l["message"] == "store_file_readable_by_others"),
        "a file of 0600 is not warned about"
    );

    // A file others may read, made so by its owner: kept, and warned about.
    setup.server.terminate();
    setup.server.wait_exit().await;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let mut again = setup.config.start().await;
    let warned = again.logged("store_file_readable_by_others").await;
    assert_eq!(warned["level"], "WARN", "{warned}");
    assert_eq!(warned["path"], db.to_str().unwrap(), "{warned}");
    assert_eq!(warned["mode"], "644", "{warned}");
    assert_eq!(mode(&db), 0o644);
}
