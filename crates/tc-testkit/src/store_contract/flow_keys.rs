//! The contract of flow keys: a task's key is kept, read back and filtered
//! on, and is part of the idempotency payload; a key's settings are kept
//! field by field (left out: kept, `null`: cleared), each tenant's its own,
//! with the key's running and pending counts; a claim keeps within a key's
//! `max_in_flight` across destinations and its rate, and shares a
//! destination between its due keys so that one key's backlog cannot hold
//! another's tasks.

use tc_model::destination::ClaimGate;
use tc_model::flow_key::{FlowKeySettings, FlowKeyUpdate};
use tc_model::store::{ListQuery, StoreError, TaskFilter, TaskStore};
use tc_model::tenant::{TenantGate, TenantUpdate};

use super::Verdict;
use super::check::{Step, URL, URL_B, at, claim, create, get, new_task, task_for};
use tc_model::tenant::Scope;

fn keyed(url: &str, key: &str, flow_key: &str) -> tc_model::NewTask {
    task_for(url, key)
        .with_flow_key(Some(flow_key.to_owned()))
        .expect("a valid key")
}

async fn put<S: TaskStore>(
    store: &S,
    tenant: Option<&str>,
    key: &str,
    update: FlowKeyUpdate,
) -> Result<tc_model::flow_key::FlowKey, String> {
    store
        .put_flow_key(tenant.map(str::to_owned), key.to_owned(), update, at(0))
        .await
        .step("put_flow_key")
}

/// Settings, counts, listing, deletion, tenants, the task's field.
pub async fn flow_keys_are_kept_field_by_field_and_each_tenant_s_own<S: TaskStore>(
    store: S,
) -> Verdict {
    let task = create(&store, keyed(URL, "k1", "acct 1"), at(0)).await?;
    ensure_eq!(task.flow_key.as_deref(), Some("acct 1"), "as submitted");
    let back = get(&store, task.id).await?;
    ensure_eq!(back.flow_key.as_deref(), Some("acct 1"), "read back");
    create(&store, new_task("k2"), at(0)).await?;
    // The key is part of the payload.
    let other = store
        .submit(keyed(URL, "k1", "acct 2"), at(0))
        .await
        .map(|s| s.created);
    ensure!(
        matches!(other, Err(StoreError::IdempotencyConflict { ref fields }) if fields.contains(&"flow_key")),
        "another key under k1: {other:?}"
    );
    let listed = store
        .list(
            ListQuery {
                filter: TaskFilter {
                    flow_key: Some("acct 1".into()),
                    ..TaskFilter::default()
                },
                ..ListQuery::default()
            },
            Scope::Admin,
        )
        .await
        .step("list flow_key=")?;
    ensure_eq!(listed.tasks.len(), 1, "flow_key= lists its task");
    // A key with tasks and no settings reads with the defaults.
    let read = store
        .flow_key(None, "acct 1".into())
        .await
        .step("flow_key")?;
    ensure_eq!(
        (read.settings, read.pending, read.in_flight),
        (FlowKeySettings::default(), 1, 0),
        "a key of tasks alone"
    );
    let unknown = store.flow_key(None, "nobody".into()).await;
    ensure!(matches!(unknown, Err(StoreError::NotFound)), "{unknown:?}");
    let set = put(
        &store,
        None,
        "acct 1",
        FlowKeyUpdate {
            max_in_flight: Some(Some(3)),
            rate_per_s: Some(Some(2.5)),
            burst: Some(Some(7)),
        },
    )
    .await?;
    let want = FlowKeySettings {
        max_in_flight: Some(3),
        rate_per_s: Some(2.5),
        burst: Some(7),
    };
    ensure_eq!(set.settings, want, "put answers the settings");
    // Left out: kept; null: cleared.
    let set = put(
        &store,
        None,
        "acct 1",
        FlowKeyUpdate {
            burst: Some(None),
            ..FlowKeyUpdate::default()
        },
    )
    .await?;
    let want = FlowKeySettings {
        burst: None,
        ..want
    };
    ensure_eq!(set.settings, want, "burst cleared, the rest kept");
    ensure_eq!((set.pending, set.in_flight), (1, 0), "its counts");
    // Another tenant's key of the same name is another key.
    store
        .create_tenant("t1".into(), TenantUpdate::default(), at(0))
        .await
        .step("create_tenant")?;
    let theirs = put(
        &store,
        Some("t1"),
        "acct 1",
        FlowKeyUpdate {
            max_in_flight: Some(Some(9)),
            ..FlowKeyUpdate::default()
        },
    )
    .await?;
    ensure_eq!(
        theirs.pending,
        0,
        "t1's acct 1 has none of the admin's tasks"
    );
    let mine = store.flow_keys(None).await.step("flow_keys")?;
    ensure_eq!(
        mine.iter()
            .map(|k| (k.key.as_str(), k.settings))
            .collect::<Vec<_>>(),
        vec![("acct 1", want)],
        "the admin's keys"
    );
    let t1 = store
        .flow_keys(Some("t1".into()))
        .await
        .step("flow_keys t1")?;
    ensure_eq!(t1.len(), 1, "t1's keys");
    ensure_eq!(t1[0].settings.max_in_flight, Some(9), "t1's own settings");
    store
        .delete_flow_key(Some("t1".into()), "acct 1".into())
        .await
        .step("delete_flow_key")?;
    let again = store
        .delete_flow_key(Some("t1".into()), "acct 1".into())
        .await;
    ensure!(matches!(again, Err(StoreError::NotFound)), "{again:?}");
    ensure_eq!(
        store
            .flow_key(None, "acct 1".into())
            .await
            .step("flow_key")?
            .settings,
        want,
        "the admin's key stays"
    );
    Ok(())
}

/// A key's `max_in_flight` holds across destinations, counted from the
/// store's running tasks; tasks of other keys and of none go on.
pub async fn a_flow_key_caps_its_running_tasks_across_destinations<S: TaskStore>(
    store: S,
) -> Verdict {
    put(
        &store,
        None,
        "k",
        FlowKeyUpdate {
            max_in_flight: Some(Some(2)),
            ..FlowKeyUpdate::default()
        },
    )
    .await?;
    for i in 0..3 {
        create(&store, keyed(URL, &format!("a{i}"), "k"), at(0)).await?;
        create(&store, keyed(URL_B, &format!("b{i}"), "k"), at(0)).await?;
    }
    create(&store, new_task("free"), at(0)).await?;
    create(&store, keyed(URL_B, "other", "k2"), at(0)).await?;
    let got = claim(&store, 20, at(1), ClaimGate::default()).await?;
    let of_k = got
        .iter()
        .filter(|t| t.flow_key.as_deref() == Some("k"))
        .count();
    ensure_eq!((of_k, got.len()), (2, 4), "k's cap, the others all");
    let key = store.flow_key(None, "k".into()).await.step("flow_key")?;
    ensure_eq!((key.in_flight, key.pending), (2, 4), "k's counts");
    // Again, with the tenant share on: still at the cap.
    let gate = ClaimGate {
        tenants: Some(TenantGate::default()),
        ..ClaimGate::default()
    };
    let more = claim(&store, 20, at(2), gate).await?;
    ensure_eq!(more.len(), 0, "nothing past k's cap");
    Ok(())
}

/// A key's rate: a bucket of `burst`, refilled at `rate_per_s`, shared by
/// every claim.
pub async fn a_flow_key_s_rate_bounds_its_claims<S: TaskStore>(store: S) -> Verdict {
    put(
        &store,
        None,
        "slow",
        FlowKeyUpdate {
            rate_per_s: Some(Some(1.0)),
            burst: Some(Some(2)),
            ..FlowKeyUpdate::default()
        },
    )
    .await?;
    for i in 0..6 {
        create(&store, keyed(URL, &format!("s{i}"), "slow"), at(0)).await?;
    }
    let first = claim(&store, 10, at(1), ClaimGate::default()).await?;
    ensure_eq!(first.len(), 2, "the burst");
    let soon = claim(&store, 10, at(200), ClaimGate::default()).await?;
    ensure_eq!(soon.len(), 0, "no token yet");
    let later = claim(&store, 10, at(1_300), ClaimGate::default()).await?;
    ensure_eq!(later.len(), 1, "one token a second");
    Ok(())
}

/// Inside one destination each key (and the tasks without one) gets its
/// share: key A's older backlog does not hold B's tasks or the unkeyed one.
pub async fn a_flow_key_s_backlog_cannot_hold_another_key_s_tasks<S: TaskStore>(
    store: S,
) -> Verdict {
    for i in 0..30 {
        create(&store, keyed(URL, &format!("a{i}"), "A"), at(0)).await?;
    }
    create(&store, keyed(URL, "b0", "B"), at(10)).await?;
    create(&store, new_task("none"), at(10)).await?;
    for tenants in [None, Some(TenantGate::default())] {
        let gate = ClaimGate {
            tenants,
            ..ClaimGate::default()
        };
        let got = claim(&store, 3, at(20), gate).await?;
        let mut keys: Vec<&str> = got
            .iter()
            .map(|t| t.flow_key.as_deref().unwrap_or("-"))
            .collect();
        keys.sort_unstable();
        if got.iter().any(|t| t.flow_key.as_deref() == Some("B")) {
            ensure_eq!(keys, vec!["-", "A", "B"], "one of each key");
        } else {
            ensure_eq!(keys, vec!["A", "A", "A"], "the rest: A's");
        }
    }
    Ok(())
}

/// Two keys with several due tasks each share one claim's slots: every
/// claimed task once, two of each key. (The rows after this one reach a
/// key met twice in one claim.)
pub async fn a_key_met_twice_in_one_claim_gives_its_next_tasks<S: TaskStore>(store: S) -> Verdict {
    for i in 0..3 {
        create(&store, keyed(URL, &format!("a{i}"), "A"), at(0)).await?;
        create(&store, keyed(URL, &format!("b{i}"), "B"), at(0)).await?;
    }
    let got = claim(&store, 4, at(10), ClaimGate::default()).await?;
    let mut ids: Vec<_> = got.iter().map(|t| t.id).collect();
    ids.sort_unstable();
    ids.dedup();
    ensure_eq!(ids.len(), 4, "four different tasks claimed");
    let mut keys: Vec<&str> = got
        .iter()
        .map(|t| t.flow_key.as_deref().unwrap_or("-"))
        .collect();
    keys.sort_unstable();
    ensure_eq!(keys, vec!["A", "A", "B", "B"], "two of each key");
    Ok(())
}

/// A key met a second time within one destination's take: `B` has one due
/// task, so the slot it leaves goes back to `A` in a second round of the
/// same take (`A`'s first two tasks read but not yet claimed): `A` gives
/// its third, each task once.
pub async fn a_key_met_again_in_one_take_reads_past_what_it_gave<S: TaskStore>(
    store: S,
) -> Verdict {
    let mut a = Vec::new();
    for i in 0..5 {
        a.push(
            create(&store, keyed(URL, &format!("a{i}"), "A"), at(0))
                .await?
                .id,
        );
    }
    let b = create(&store, keyed(URL, "b0", "B"), at(0)).await?.id;
    let got = claim(&store, 4, at(10), ClaimGate::default()).await?;
    let mut ids: Vec<_> = got.iter().map(|t| t.id).collect();
    ids.sort_unstable();
    let mut want = vec![a[0], a[1], a[2], b];
    want.sort_unstable();
    ensure_eq!(ids, want, "A's three oldest and B's one");
    Ok(())
}

/// A keyed destination met a second time in one claim by the share
/// between destinations (another destination had fewer due tasks than its
/// slots): the first take's tasks are claimed by then, so the second take
/// gives the key's next due tasks, neither skipping nor repeating any.
pub async fn a_keyed_destination_met_again_in_one_claim_gives_its_next_tasks<S: TaskStore>(
    store: S,
) -> Verdict {
    let mut a = Vec::new();
    for i in 0..3 {
        a.push(
            create(&store, keyed(URL, &format!("a{i}"), "A"), at(0))
                .await?
                .id,
        );
    }
    let other = create(&store, task_for(URL_B, "other"), at(0)).await?.id;
    let got = claim(&store, 4, at(10), ClaimGate::default()).await?;
    let mut ids: Vec<_> = got.iter().map(|t| t.id).collect();
    ids.sort_unstable();
    let mut want = a.clone();
    want.push(other);
    want.sort_unstable();
    ensure_eq!(ids, want, "every due task, once");
    Ok(())
}
