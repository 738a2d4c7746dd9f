//! A destination's `auth` on every try, on every store: the
//! store keeps it, the worker reads it with the settings and adds it as
//! the call is made: Basic over the destination's own `Authorization`
//! header, a JWT signed for the call, an OAuth2 token fetched from the
//! token endpoint (here the same fake, at `/token`) and kept for the next
//! call; a failing token endpoint fails the try with `auth_failed`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tc_downstream::fake::{Reply, Step};
use tc_downstream::{Downstream, JwtKeys};
use tc_model::auth::DestinationAuth;
use tc_model::destination::DestinationUpdate;
use tc_model::store::TaskStore;
use tc_model::{Headers, Limits, NewTask, State, TaskId, destination_of};
use tc_worker::{JwtSigner, WorkerConfig};

use super::{Rig, stop, wait_terminal};
use tc_model::tenant::Scope;

async fn set_auth<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
    worker: &tc_worker::Worker<S>,
    auth: serde_json::Value,
) -> Result<(), String> {
    let auth = DestinationAuth::from_json(&auth).map_err(|e| format!("fixture: {e}"))?;
    let headers = Headers::parse([("authorization".to_owned(), "Bearer static".to_owned())])
        .map_err(|e| format!("fixture: {e}"))?;
    rig.store
        .update_destination(
            destination_of(&rig.url("/")),
            DestinationUpdate {
                auth: Some(auth),
                headers: Some(headers),
                ..DestinationUpdate::default()
            },
            rig.clock.now(),
        )
        .await
        .map_err(|e| format!("update_destination: {e}"))?;
    worker.control().destinations_changed();
    Ok(())
}

async fn submit<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
    path: &str,
) -> Result<TaskId, String> {
    let new = NewTask::new(
        rig.url(path),
        b"{}".to_vec(),
        path.to_owned(),
        1,
        Duration::from_secs(5),
        &Limits::default(),
    )
    .map_err(|e| format!("invalid task: {e}"))?;
    rig.store
        .submit(new, rig.clock.now())
        .await
        .map(|s| s.task.id)
        .map_err(|e| format!("submit {path}: {e}"))
}

/// Basic, then a JWT, then OAuth2 (one token for two calls), then a
/// failing token endpoint, each call checked as the fake saw it.
pub(super) async fn a_destination_s_auth_reaches_every_try<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let pem = JwtKeys::generate_pem().map_err(|e| e.to_string())?;
    let keys = JwtKeys::from_pems(&[pem]).map_err(|e| e.to_string())?;
    let worker = rig.spawn_worker(WorkerConfig {
        jwt: Some(JwtSigner {
            issuer: "https://tc.example".into(),
            keys: Arc::new(keys),
        }),
        ..rig.config()
    });
    let mut events = worker.control().subscribe();
    let mut call = async |path: &str| {
        let id = submit(rig, path).await?;
        worker.control().task_submitted();
        let ended = wait_terminal(&mut events, id).await?;
        let seen = rig.script.calls(path);
        let auth = seen
            .first()
            .and_then(|c| c.header("authorization").map(str::to_owned));
        Ok::<_, String>((ended.state, auth))
    };

    set_auth(
        rig,
        &worker,
        json!({"type": "basic", "username": "u", "password": "p"}),
    )
    .await?;
    let (state, auth) = call("/basic").await?;
    ensure!(state == State::Success, "basic: {state}");
    ensure!(auth.as_deref() == Some("Basic dTpw"), "basic: {auth:?}");

    set_auth(rig, &worker, json!({"type": "jwt", "audience": "svc"})).await?;
    let (state, auth) = call("/jwt").await?;
    let token = auth.as_deref().and_then(|a| a.strip_prefix("Bearer ey"));
    ensure!(state == State::Success, "jwt: {state}");
    ensure!(
        token.is_some_and(|t| t.split('.').count() == 3),
        "jwt: {auth:?}"
    );

    rig.script.plan(
        "/token",
        [Step::Reply(Reply::json(
            200,
            r#"{"access_token":"tok","expires_in":600}"#,
        ))],
    );
    let grant = json!({"type": "oauth2_client_credentials", "token_url": rig.url("/token"),
        "client_id": "i", "client_secret": "s"});
    set_auth(rig, &worker, grant).await?;
    for path in ["/oauth/1", "/oauth/2"] {
        let (state, auth) = call(path).await?;
        ensure!(state == State::Success, "{path}: {state}");
        ensure!(auth.as_deref() == Some("Bearer tok"), "{path}: {auth:?}");
    }
    let fetched = rig.script.calls("/token").len();
    ensure!(fetched == 1, "one token for two calls, {fetched} fetched");

    rig.script
        .plan("/broken-token", [Step::Reply(Reply::status(503))]);
    let grant = json!({"type": "oauth2_client_credentials",
        "token_url": rig.url("/broken-token"), "client_id": "i", "client_secret": "s"});
    set_auth(rig, &worker, grant).await?;
    let id = submit(rig, "/broken").await?;
    worker.control().task_submitted();
    let ended = wait_terminal(&mut events, id).await?;
    let task = rig
        .store
        .get(id, Scope::Admin)
        .await
        .map_err(|e| format!("get: {e}"))?;
    ensure!(
        ended.state == State::Failed && task.error.as_deref() == Some("auth_failed"),
        "a failing token endpoint: {} {:?}",
        ended.state,
        task.error
    );
    ensure!(
        rig.script.calls("/broken").is_empty(),
        "the call is not made"
    );
    stop(worker).await
}
