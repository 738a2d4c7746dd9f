//! The contract for what a call sends beyond its url and body: a task's
//! method and headers, a destination's default headers and signing
//! secrets and whom it shares them with, kept by every store as written.

use tc_model::destination::{ClaimGate, DestinationSettings, DestinationUpdate, SharedWith};
use tc_model::signing::SigningSecrets;
use tc_model::store::{StoreError, TaskStore};
use tc_model::{Headers, Method, NewTask, State};

use super::Verdict;
use super::check::{
    DEST_A, DEST_B, Step, URL_A, at, claim, create, get, list_all, set, settings_read_back,
    task_for,
};

fn headers(list: &[(&str, &str)]) -> Headers {
    Headers::parse(list.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))).unwrap()
}

/// Two secrets of 24 and 32 bytes.
fn secrets(n: usize) -> SigningSecrets {
    let all = [
        "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
        "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
    ];
    SigningSecrets::parse(&all[..n]).unwrap()
}

fn put_with_headers(key: &str) -> NewTask {
    task_for(URL_A, key)
        .with_method(Method::Put)
        .unwrap()
        .with_headers(headers(&[
            ("Authorization", "Bearer t"),
            ("X-Tenant", "acme"),
        ]))
}

/// A task's method and headers are kept as submitted and read back by
/// `get`, a listing and a claim; an idempotent resubmit must repeat both
/// (another method or other headers is a conflict); a `GET` keeps its
/// empty body; a task submitted without them is a `POST` with none.
pub async fn tasks_keep_their_method_and_headers<S: TaskStore>(store: S) -> Verdict {
    let put = put_with_headers("put-1");
    let created = create(&store, put.clone(), at(0)).await?;
    let read = get(&store, created.id).await?;
    ensure_eq!(
        (read.method, &read.headers),
        (Method::Put, put.headers()),
        "get"
    );
    let plain = create(&store, task_for(URL_A, "post-1"), at(1)).await?;
    let read_plain = get(&store, plain.id).await?;
    ensure_eq!(
        (read_plain.method, read_plain.headers.len()),
        (Method::Post, 0),
        "a task submitted without them"
    );
    let get_task = NewTask::new(
        URL_A.to_owned(),
        Vec::new(),
        "get-1".to_owned(),
        1,
        std::time::Duration::from_secs(1),
        &tc_model::Limits::default(),
    )
    .and_then(|t| t.with_method(Method::Get))
    .unwrap();
    let got = create(&store, get_task, at(2)).await?;
    let read_get = get(&store, got.id).await?;
    ensure_eq!(
        (read_get.method, read_get.body.len()),
        (Method::Get, 0),
        "a GET"
    );

    let listed = list_all(&store, Some(State::Pending)).await?;
    let in_list = listed.iter().find(|t| t.id == created.id);
    ensure_eq!(
        in_list.map(|t| (t.method, &t.headers)),
        Some((Method::Put, put.headers())),
        "the listing"
    );

    let again = store
        .submit(put.clone(), at(3))
        .await
        .step("resubmit with the same method and headers")?;
    ensure!(
        !again.created && again.task.id == created.id,
        "a resubmit that repeats them gets the task: {again:?}"
    );
    let other_headers = put.clone().with_headers(headers(&[("x-tenant", "other")]));
    ensure_eq!(
        store.submit(other_headers, at(4)).await.map(|s| s.task.id),
        Err(StoreError::IdempotencyConflict {
            fields: vec!["headers"]
        }),
        "a resubmit with other headers"
    );
    let as_post = task_for(URL_A, "put-1").with_headers(put.headers().clone());
    ensure_eq!(
        store.submit(as_post, at(5)).await.map(|s| s.task.id),
        Err(StoreError::IdempotencyConflict {
            fields: vec!["method"]
        }),
        "a resubmit with another method"
    );
    let batch = store
        .submit_many(vec![put_with_headers("put-2")], at(6))
        .await
        .step("submit_many")?;
    let batched = match batch.as_slice() {
        [Ok(submitted)] => get(&store, submitted.task.id).await?,
        other => return Err(format!("submit_many answered {other:?}")),
    };
    ensure_eq!(
        (batched.method, &batched.headers),
        (Method::Put, put.headers()),
        "a task submitted in a batch"
    );

    let claimed = claim(&store, 10, at(10), ClaimGate::default()).await?;
    let mine = claimed.iter().find(|t| t.id == created.id);
    ensure_eq!(
        mine.map(|t| (t.method, &t.headers)),
        Some((Method::Put, put.headers())),
        "the claimed task, what the worker sends ({} claimed)",
        claimed.len()
    );
    Ok(())
}

/// A destination's headers and signing secrets are kept as written and
/// read back by every call; an update that names neither keeps both; each
/// is replaced or cleared (empty) on its own; a destination with only
/// headers has settings (it is listed) without limiting claims.
pub async fn destinations_keep_their_headers_and_signing_secrets<S: TaskStore>(
    store: S,
) -> Verdict {
    let auth = headers(&[("authorization", "Bearer d"), ("x-region", "eu")]);
    let both = DestinationSettings {
        headers: auth.clone(),
        signing_secrets: secrets(2),
        ..DestinationSettings::default()
    };
    let written = set(
        &store,
        DEST_B,
        DestinationUpdate {
            headers: Some(auth.clone()),
            signing_secrets: Some(secrets(2)),
            ..DestinationUpdate::default()
        },
        at(0),
    )
    .await?;
    ensure_eq!(&written.settings, &both, "update_destination's answer");
    settings_read_back(&store, DEST_B, &both).await?;

    let steps: [(&str, DestinationUpdate, DestinationSettings); 4] = [
        (
            "a cap named: headers and secrets kept",
            DestinationUpdate {
                max_in_flight: Some(Some(3)),
                ..DestinationUpdate::default()
            },
            DestinationSettings {
                max_in_flight: Some(3),
                ..both.clone()
            },
        ),
        (
            "one secret: the other is gone, headers kept",
            DestinationUpdate {
                signing_secrets: Some(secrets(1)),
                ..DestinationUpdate::default()
            },
            DestinationSettings {
                max_in_flight: Some(3),
                signing_secrets: secrets(1),
                ..both.clone()
            },
        ),
        (
            "headers cleared, the secret kept",
            DestinationUpdate {
                headers: Some(Headers::default()),
                max_in_flight: Some(None),
                ..DestinationUpdate::default()
            },
            DestinationSettings {
                signing_secrets: secrets(1),
                ..DestinationSettings::default()
            },
        ),
        (
            "secrets cleared: the defaults",
            DestinationUpdate {
                signing_secrets: Some(SigningSecrets::default()),
                ..DestinationUpdate::default()
            },
            DestinationSettings::default(),
        ),
    ];
    for (n, (what, update, want)) in steps.into_iter().enumerate() {
        let written = set(&store, DEST_B, update, at(10 + n as i64)).await?;
        ensure_eq!(&written.settings, &want, "{what}: update's answer");
        settings_read_back(&store, DEST_B, &want)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
    }

    // Headers alone: listed with them, and its tasks are claimed as usual.
    let only_headers = DestinationSettings {
        headers: auth.clone(),
        ..DestinationSettings::default()
    };
    set(
        &store,
        DEST_A,
        DestinationUpdate {
            headers: Some(auth),
            ..DestinationUpdate::default()
        },
        at(20),
    )
    .await?;
    settings_read_back(&store, DEST_A, &only_headers).await?;
    let task = create(&store, task_for(URL_A, "with-headers"), at(21)).await?;
    let claimed = claim(&store, 1, at(22), ClaimGate::default()).await?;
    ensure_eq!(
        claimed.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![task.id],
        "a destination with headers only holds nothing back"
    );
    Ok(())
}

/// Whom a destination shares its headers and secrets with is
/// kept as written (names sorted, or `*`) and read back by every call; an
/// update that does not name it keeps it; it is replaced or cleared
/// (empty) on its own, leaving the headers and secrets as they are.
pub async fn destinations_keep_whom_they_share_with<S: TaskStore>(store: S) -> Verdict {
    let shared = |names: &[&str]| SharedWith::parse(names).map_err(|e| format!("fixture: {e}"));
    let auth = headers(&[("authorization", "Bearer d")]);
    let written = set(
        &store,
        DEST_B,
        DestinationUpdate {
            headers: Some(auth.clone()),
            signing_secrets: Some(secrets(1)),
            share_with_tenants: Some(shared(&["t", "a"])?),
            ..DestinationUpdate::default()
        },
        at(0),
    )
    .await?;
    let first = DestinationSettings {
        headers: auth,
        signing_secrets: secrets(1),
        share_with_tenants: shared(&["a", "t"])?,
        ..DestinationSettings::default()
    };
    ensure_eq!(&written.settings, &first, "update_destination's answer");
    settings_read_back(&store, DEST_B, &first).await?;
    let steps: [(&str, DestinationUpdate, DestinationSettings); 3] = [
        (
            "a cap named: the list kept",
            DestinationUpdate {
                max_in_flight: Some(Some(3)),
                ..DestinationUpdate::default()
            },
            DestinationSettings {
                max_in_flight: Some(3),
                ..first.clone()
            },
        ),
        (
            "every tenant",
            DestinationUpdate {
                share_with_tenants: Some(shared(&["*"])?),
                max_in_flight: Some(None),
                ..DestinationUpdate::default()
            },
            DestinationSettings {
                share_with_tenants: shared(&["*"])?,
                ..first.clone()
            },
        ),
        (
            "cleared: shared with no one, headers and secret kept",
            DestinationUpdate {
                share_with_tenants: Some(SharedWith::default()),
                ..DestinationUpdate::default()
            },
            DestinationSettings {
                share_with_tenants: SharedWith::default(),
                ..first.clone()
            },
        ),
    ];
    for (n, (what, update, want)) in steps.into_iter().enumerate() {
        let written = set(&store, DEST_B, update, at(10 + n as i64)).await?;
        ensure_eq!(&written.settings, &want, "{what}: update's answer");
        settings_read_back(&store, DEST_B, &want)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(())
}
