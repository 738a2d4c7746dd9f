//! The contract for stored credentials: a destination's `auth`
//! kept whole (its secrets too, which only the worker reads) and cleared
//! by `null`, other fields left alone; the server's own key stored once,
//! the first candidate kept.

use serde_json::json;
use tc_model::auth::DestinationAuth;
use tc_model::destination::{DestinationSettings, DestinationUpdate};
use tc_model::store::{JWT_KEY, TaskStore};

use super::Verdict;
use super::check::{DEST_A, Step, at, set, settings_read_back};

fn auth(value: serde_json::Value) -> Result<DestinationAuth, String> {
    DestinationAuth::from_json(&value)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "no auth".to_owned())
}

/// Each type of `auth` is kept as written, secrets and all, and read back
/// by every read of settings; an update that leaves `auth` out keeps it;
/// `Some(None)` clears it.
pub async fn destinations_keep_their_auth<S: TaskStore>(store: S) -> Verdict {
    let kinds = [
        auth(json!({"type": "basic", "username": "u", "password": "pw"}))?,
        auth(
            json!({"type": "oauth2_client_credentials", "token_url": "https://idp.example/t",
            "client_id": "id", "client_secret": "cs", "scope": "a b", "audience": "api",
            "auth_method": "client_secret_post"}),
        )?,
        auth(json!({"type": "jwt", "audience": "https://svc.example", "lifetime_s": 600}))?,
    ];
    for (n, kind) in kinds.into_iter().enumerate() {
        let update = DestinationUpdate {
            auth: Some(Some(kind.clone())),
            ..DestinationUpdate::default()
        };
        set(&store, DEST_A, update, at(n as i64)).await?;
        let want = DestinationSettings {
            auth: Some(kind.clone()),
            paused: n == 2,
            ..DestinationSettings::default()
        };
        if n == 2 {
            let pause = DestinationUpdate {
                paused: Some(true),
                ..DestinationUpdate::default()
            };
            set(&store, DEST_A, pause, at(10)).await?;
        }
        settings_read_back(&store, DEST_A, &want).await?;
    }
    let clear = DestinationUpdate {
        auth: Some(None),
        ..DestinationUpdate::default()
    };
    set(&store, DEST_A, clear, at(20)).await?;
    let want = DestinationSettings {
        paused: true,
        ..DestinationSettings::default()
    };
    settings_read_back(&store, DEST_A, &want).await
}

/// The first candidate for a server key is stored and answered to every
/// later call, whatever it offers; another name is another key.
pub async fn a_server_key_is_stored_once<S: TaskStore>(store: S) -> Verdict {
    let first = store
        .server_key(JWT_KEY.into(), "key one".into())
        .await
        .step("server_key")?;
    ensure_eq!(first, "key one", "the first candidate is kept");
    let again = store
        .server_key(JWT_KEY.into(), "key two".into())
        .await
        .step("server_key")?;
    ensure_eq!(again, "key one", "a later candidate changes nothing");
    let other = store
        .server_key("other".into(), "key three".into())
        .await
        .step("server_key")?;
    ensure_eq!(other, "key three", "another name is another key");
    Ok(())
}
