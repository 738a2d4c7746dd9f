//! Whose credentials a try carries: a tenant's task
//! gets its destination's headers and signing secrets only when the
//! destination shares them with the tenant (`share_with_tenants`), is
//! otherwise signed with the tenant's own secrets or not at all, and never
//! with the server's own secret; a task without a tenant is sent as before.

use std::time::Duration;

use tc_downstream::fake::Call;
use tc_downstream::{Downstream, webhook_signature};
use tc_model::callback::{Callback, CallbackOn};
use tc_model::destination::{DestinationUpdate, SharedWith};
use tc_model::signing::SigningSecrets;
use tc_model::store::TaskStore;
use tc_model::tenant::TenantUpdate;
use tc_model::{Headers, Limits, NewTask, TaskId, destination_of};
use tc_worker::WorkerConfig;

use super::{Rig, stop, wait_terminal};

/// The destination's, the tenant's and the server's secrets.
const DESTINATION: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const TENANT: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const SERVER: &str = "whsec_MDEyMzQ1Njc4OWFiY2RlZmdoaWprbG1ub3Bx";

fn secrets(text: &str) -> Result<SigningSecrets, String> {
    SigningSecrets::parse(&[text]).map_err(|e| format!("fixture secret: {e}"))
}

/// What one call must carry: the destination's header or not, and whose
/// signature (`None`: unsigned).
struct Expect<'a> {
    path: &'a str,
    id: TaskId,
    destination_header: bool,
    signed_by: Option<(&'a str, &'a str)>,
}

fn check_call(call: &Call, want: &Expect) -> Result<(), String> {
    let path = want.path;
    let header = call.header("x-operator");
    let authorization = call.header("authorization");
    if want.destination_header {
        ensure!(
            header == Some("yes") && authorization == Some("Bearer operator"),
            "{path}: the destination's headers are shared here: {:?}",
            call.headers
        );
    } else {
        ensure!(
            header.is_none() && authorization.is_none(),
            "{path}: the destination's headers are not this tenant's: {:?}",
            call.headers
        );
    }
    let signature = call.header("webhook-signature");
    match want.signed_by {
        None => ensure!(
            signature.is_none() && call.header("webhook-id").is_none(),
            "{path}: unsigned, got {signature:?}"
        ),
        Some((whose, secret)) => {
            let secrets = secrets(secret)?;
            let keys: Vec<&[u8]> = secrets.iter().map(|s| s.key()).collect();
            let timestamp: i64 = call
                .header("webhook-timestamp")
                .unwrap_or("")
                .parse()
                .map_err(|_| format!("{path}: no webhook-timestamp"))?;
            let expected = webhook_signature(&keys, &want.id.to_string(), timestamp, &call.body);
            ensure!(
                signature == Some(expected.as_str()),
                "{path}: signed with the {whose}'s secret, got {signature:?}"
            );
        }
    }
    Ok(())
}

/// One task of a phase: its path, its tenant (`None`: the admin's),
/// whether it gets the destination's headers, and who signs it.
type Row<'a> = (&'a str, Option<&'a str>, bool, Option<(&'a str, &'a str)>);

/// Submits a task of `tenant` (`None`: the admin's) to `path`.
async fn submit<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
    path: &str,
    tenant: Option<&str>,
) -> Result<TaskId, String> {
    let new = NewTask::new(
        rig.url(path),
        b"{\"pay\":1}".to_vec(),
        path.to_owned(),
        1,
        Duration::from_secs(5),
        &Limits::default(),
    )
    .map_err(|e| format!("invalid task: {e}"))?
    .with_tenant(tenant.map(str::to_owned), None);
    rig.store
        .submit(new, rig.clock.now())
        .await
        .map(|s| s.task.id)
        .map_err(|e| format!("submit {path}: {e}"))
}

/// Sets the destination's share list and tells the worker.
async fn share<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
    worker: &tc_worker::Worker<S>,
    names: &[&str],
) -> Result<(), String> {
    let shared = SharedWith::parse(names).map_err(|e| format!("fixture: {e}"))?;
    rig.store
        .update_destination(
            destination_of(&rig.url("/")),
            DestinationUpdate {
                share_with_tenants: Some(shared),
                ..DestinationUpdate::default()
            },
            rig.clock.now(),
        )
        .await
        .map_err(|e| format!("update_destination: {e}"))?;
    worker.control().destinations_changed();
    Ok(())
}

/// The server has its own secret; tenant "t" has its own, "v" none.
/// Without destination settings the admin's task is signed with the
/// server's secret, "v"'s is not signed. Once the destination has headers
/// and a secret but shares them with no one, the admin's task gets both,
/// "t"'s neither (signed with its own secret), "v"'s neither (unsigned).
/// Shared with `["t"]`: "t"'s task gets both, "v"'s still neither; shared
/// with `["*"]`: "v"'s gets both. Shared with no one again, the callback
/// of a task of "t" is signed with "t"'s secret, without the headers.
pub(super) async fn a_tenant_s_task_carries_only_credentials_lent_to_it<
    S: TaskStore,
    D: Downstream,
>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let now = rig.clock.now();
    for (name, own) in [("t", Some(TENANT)), ("v", None)] {
        let settings = TenantUpdate {
            signing_secrets: own.map(secrets).transpose()?,
            ..TenantUpdate::default()
        };
        rig.store
            .create_tenant(name.to_owned(), settings, now)
            .await
            .map_err(|e| format!("create_tenant {name}: {e}"))?;
    }
    let worker = rig.spawn_worker(WorkerConfig {
        signing_secrets: secrets(SERVER)?,
        ..rig.config()
    });
    let mut events = worker.control().subscribe();
    let mut run = async |rows: &[Row]| {
        // One at a time: each wait reads the endings up to its task's.
        for (path, tenant, destination_header, signed_by) in rows {
            let want = Expect {
                path,
                id: submit(rig, path, *tenant).await?,
                destination_header: *destination_header,
                signed_by: *signed_by,
            };
            worker.control().task_submitted();
            wait_terminal(&mut events, want.id).await?;
            let calls = rig.script.calls(want.path);
            ensure!(calls.len() == 1, "{}: {} calls", want.path, calls.len());
            check_call(&calls[0], &want)?;
        }
        Ok::<(), String>(())
    };
    let server = Some(("server", SERVER));
    let destination = Some(("destination", DESTINATION));
    let tenant = Some(("tenant", TENANT));

    run(&[
        ("/bare/admin", None, false, server),
        ("/bare/v", Some("v"), false, None),
    ])
    .await?;

    rig.store
        .update_destination(
            destination_of(&rig.url("/")),
            DestinationUpdate {
                headers: Some(
                    Headers::parse([
                        ("authorization".to_owned(), "Bearer operator".to_owned()),
                        ("x-operator".to_owned(), "yes".to_owned()),
                    ])
                    .map_err(|e| format!("fixture headers: {e}"))?,
                ),
                signing_secrets: Some(secrets(DESTINATION)?),
                ..DestinationUpdate::default()
            },
            rig.clock.now(),
        )
        .await
        .map_err(|e| format!("update_destination: {e}"))?;
    worker.control().destinations_changed();
    run(&[
        ("/unshared/admin", None, true, destination),
        ("/unshared/t", Some("t"), false, tenant),
        ("/unshared/v", Some("v"), false, None),
    ])
    .await?;

    share(rig, &worker, &["t"]).await?;
    run(&[
        ("/shared-t/t", Some("t"), true, destination),
        ("/shared-t/v", Some("v"), false, None),
    ])
    .await?;

    share(rig, &worker, &["*"]).await?;
    run(&[
        ("/shared-all/v", Some("v"), true, destination),
        ("/shared-all/admin", None, true, destination),
    ])
    .await?;

    // Shared with no one again: a callback of "t"'s task is "t"'s, and is
    // sent as "t"'s tasks are.
    share(rig, &worker, &[]).await?;
    let callback = Callback::new(rig.url("/callback/t-done"), CallbackOn::default())
        .map_err(|e| format!("fixture: {e}"))?;
    let parent = NewTask::new(
        rig.url("/callback/t"),
        b"{}".to_vec(),
        "t-parent".to_owned(),
        1,
        Duration::from_secs(5),
        &Limits::default(),
    )
    .map_err(|e| format!("invalid task: {e}"))?
    .with_tenant(Some("t".to_owned()), None)
    .with_callback(callback);
    let parent = rig
        .store
        .submit(parent, rig.clock.now())
        .await
        .map_err(|e| format!("submit: {e}"))?
        .task;
    worker.control().task_submitted();
    wait_terminal(&mut events, parent.id).await?;
    let callback_id = rig
        .get(parent.id)
        .await?
        .callback_task_id
        .ok_or("the parent's end made no callback")?;
    wait_terminal(&mut events, callback_id).await?;
    let calls = rig.script.calls("/callback/t-done");
    ensure!(calls.len() == 1, "callback: {} calls", calls.len());
    check_call(
        &calls[0],
        &Expect {
            path: "/callback/t-done",
            id: callback_id,
            destination_header: false,
            signed_by: tenant,
        },
    )?;
    stop(worker).await
}
