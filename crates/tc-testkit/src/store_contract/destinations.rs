//! Destinations: their settings kept field by field, when one is found,
//! and how claims honour them (pause, the in-flight cap, the rotation over
//! hosts, the least loaded first).

use tc_model::destination::{ClaimGate, Destination, DestinationSettings, DestinationUpdate};
use tc_model::store::{StoreError, TaskStore};
use tc_model::{State, Task, TaskId};

use super::Verdict;
use super::check::*;
use tc_model::tenant::Scope;

/// Settings are kept as written and read back the same by every call; an
/// update changes only the fields it names (a field left out keeps its
/// value, null clears it); destinations are listed in name order, those
/// with tasks only with the default settings and their counts.
pub async fn destination_settings_are_kept_field_by_field<S: TaskStore>(store: S) -> Verdict {
    let listed = store.destinations().await.step("destinations")?;
    ensure!(listed.is_empty(), "a fresh store lists {listed:?}");
    let all = DestinationSettings {
        max_in_flight: Some(2),
        rate_per_s: Some(5.5),
        burst: Some(10),
        paused: true,
        ..DestinationSettings::default()
    };
    let written = set(
        &store,
        DEST_B,
        DestinationUpdate {
            max_in_flight: Some(Some(2)),
            rate_per_s: Some(Some(5.5)),
            burst: Some(Some(10)),
            paused: Some(true),
            ..DestinationUpdate::default()
        },
        at(0),
    )
    .await?;
    ensure_eq!(
        written,
        Destination {
            name: DEST_B.to_owned(),
            settings: all.clone(),
            pending: 0,
            running: 0,
        },
        "update_destination's answer for a destination without tasks"
    );
    settings_read_back(&store, DEST_B, &all).await?;

    let steps: [(&str, DestinationUpdate, DestinationSettings); 4] = [
        (
            "only paused named: the rest is kept",
            DestinationUpdate {
                paused: Some(false),
                ..DestinationUpdate::default()
            },
            DestinationSettings {
                paused: false,
                ..all.clone()
            },
        ),
        (
            "nothing named: nothing changes",
            DestinationUpdate::default(),
            DestinationSettings {
                paused: false,
                ..all.clone()
            },
        ),
        (
            "cap and rate null: cleared, burst kept",
            DestinationUpdate {
                max_in_flight: Some(None),
                rate_per_s: Some(None),
                ..DestinationUpdate::default()
            },
            DestinationSettings {
                burst: Some(10),
                ..DestinationSettings::default()
            },
        ),
        (
            "burst null: every field back to its default",
            DestinationUpdate {
                burst: Some(None),
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

    // A destination with tasks and no settings: listed, with the defaults
    // and its counts, in name order before the one with settings only.
    create(&store, task_for(URL_A, "dest-a-1"), at(20)).await?;
    create(&store, task_for(URL_A, "dest-a-2"), at(21)).await?;
    claim(&store, 1, at(30), ClaimGate::default()).await?;
    let listed = store.destinations().await.step("destinations")?;
    ensure_eq!(
        listed,
        vec![
            Destination {
                name: DEST_A.to_owned(),
                settings: DestinationSettings::default(),
                pending: 1,
                running: 1,
            },
            Destination {
                name: DEST_B.to_owned(),
                settings: DestinationSettings::default(),
                pending: 0,
                running: 0,
            },
        ],
        "destinations() with one host with tasks and one with settings"
    );
    let settings = store
        .destination_settings()
        .await
        .step("destination_settings")?;
    ensure!(
        settings.iter().all(|(name, _)| name != DEST_A),
        "destination_settings() lists {DEST_A}, which never had settings: {settings:?}"
    );
    Ok(())
}

/// `destination` answers NotFound for a destination with neither tasks nor
/// settings, including one whose last task was deleted; while it has a
/// task, in any state, it is found with its counts.
pub async fn a_destination_with_neither_tasks_nor_settings_is_not_found<S: TaskStore>(
    store: S,
) -> Verdict {
    ensure_eq!(
        store.destination(DEST_A.to_owned()).await,
        Err(StoreError::NotFound),
        "a destination never seen"
    );
    let task = create(&store, task_for(URL_A, "nf"), at(0)).await?;
    counts_of(&store, DEST_A, (1, 0), "with its one task pending").await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    counts_of(&store, DEST_A, (0, 1), "with its one task running").await?;
    let done = store
        .complete(task.id, 1, success(200), at(20))
        .await
        .step("complete")?;
    applied(&store, task.id, done, "complete").await?;
    counts_of(&store, DEST_A, (0, 0), "with its one task finished").await?;
    store.delete(task.id, Scope::Admin).await.step("delete")?;
    ensure_eq!(
        store.destination(DEST_A.to_owned()).await,
        Err(StoreError::NotFound),
        "once its last task is deleted"
    );
    let listed = store.destinations().await.step("destinations")?;
    ensure!(
        listed.is_empty(),
        "destinations() after the delete: {listed:?}"
    );
    Ok(())
}

/// Checks that `destination(name)` answers, with the default settings and
/// these (pending, running) counts.
async fn counts_of<S: TaskStore>(
    store: &S,
    name: &str,
    (pending, running): (u64, u64),
    what: &str,
) -> Verdict {
    let got = store
        .destination(name.to_owned())
        .await
        .step("destination")?;
    ensure_eq!(
        got,
        Destination {
            name: name.to_owned(),
            settings: DestinationSettings::default(),
            pending,
            running,
        },
        "{name} {what}"
    );
    Ok(())
}

/// Nothing of a paused destination is claimed, whatever the claim's size;
/// its tasks stay pending with no attempt used; resumed, they are claimed.
pub async fn claim_skips_paused_destinations<S: TaskStore>(store: S) -> Verdict {
    let paused = create_many(&store, URL_A, "paused", 3, at(0)).await?;
    let free = create_many(&store, URL_B, "free", 2, at(1)).await?;
    let pause = |on: bool| DestinationUpdate {
        paused: Some(on),
        ..DestinationUpdate::default()
    };
    set(&store, DEST_A, pause(true), at(2)).await?;
    let got = claim(&store, 10, at(10), ClaimGate::default()).await?;
    ensure_eq!(ids(&got), free, "a claim of 10 takes only the other host's");
    let again = claim(&store, 10, at(11), ClaimGate::default()).await?;
    ensure_eq!(ids(&again), vec![], "a claim with only paused tasks due");
    for id in &paused {
        let task = get(&store, *id).await?;
        ensure_eq!(
            (task.state, task.attempt),
            (State::Pending, 0),
            "a paused host's task"
        );
    }
    set(&store, DEST_A, pause(false), at(12)).await?;
    let resumed = claim(&store, 10, at(13), ClaimGate::default()).await?;
    ensure_eq!(ids(&resumed), paused, "resumed, its tasks are claimed");
    Ok(())
}

/// `max_in_flight` is counted from the destination's running tasks: with a
/// cap of 2 and one running, a claim takes one more, then none until one
/// ends; a destination at its cap holds no other destination back, even
/// where the rotation meets it first and the claim is of one task.
pub async fn claim_caps_a_destination_by_its_running_tasks<S: TaskStore>(store: S) -> Verdict {
    let capped = create_many(&store, URL_A, "capped", 5, at(0)).await?;
    let free = create_many(&store, URL_B, "free", 2, at(1)).await?;
    set(
        &store,
        DEST_A,
        DestinationUpdate {
            max_in_flight: Some(Some(2)),
            ..DestinationUpdate::default()
        },
        at(2),
    )
    .await?;
    // The rotation starts at the first name, DEST_A.
    let first = claim(&store, 1, at(10), ClaimGate::default()).await?;
    ensure_eq!(ids(&first), vec![capped[0]], "a claim of one");
    let second = claim(&store, 10, at(11), ClaimGate::default()).await?;
    let of = |tasks: &[Task], dest: &str| -> Vec<TaskId> {
        tasks
            .iter()
            .filter(|t| t.destination == dest)
            .map(|t| t.id)
            .collect()
    };
    ensure_eq!(
        of(&second, DEST_A),
        vec![capped[1]],
        "cap 2 with 1 running: one more"
    );
    ensure_eq!(of(&second, DEST_B), free, "the other host, uncapped");
    let at_cap = claim(&store, 10, at(12), ClaimGate::default()).await?;
    ensure_eq!(ids(&at_cap), vec![], "at its cap, with no other host due");
    let counts = store
        .destination(DEST_A.to_owned())
        .await
        .step("destination")?;
    ensure_eq!(
        (counts.running, counts.pending),
        (2, 3),
        "running and pending of the capped host"
    );

    let late = create(&store, task_for(URL_B, "late"), at(13)).await?;
    let past_the_cap = claim(&store, 1, at(14), ClaimGate::default()).await?;
    ensure_eq!(
        ids(&past_the_cap),
        vec![late.id],
        "a claim of one while the first host in rotation is at its cap"
    );

    let done = store
        .complete(capped[0], 1, success(200), at(15))
        .await
        .step("complete")?;
    applied(&store, capped[0], done, "complete").await?;
    let freed = claim(&store, 10, at(16), ClaimGate::default()).await?;
    ensure_eq!(ids(&freed), vec![capped[2]], "one ended: one more");
    Ok(())
}

/// Claims rotate over the destinations with due tasks: with a backlog of
/// 1000 tasks on one host, older than 3 tasks on another, the first claim
/// of 8 takes the other host's 3 beside the backlog's 5 oldest; and a claim
/// starts after the gate's cursor.
pub async fn claim_rotates_so_a_backlog_does_not_delay_another_host<S: TaskStore>(
    store: S,
) -> Verdict {
    let backlog = create_many(&store, URL_A, "backlog", 1000, at(0)).await?;
    let few = create_many(&store, URL_B, "few", 3, at(1)).await?;
    let first = claim(&store, 8, at(10), ClaimGate::default()).await?;
    let mut got = ids(&first);
    got.sort();
    let mut want: Vec<TaskId> = backlog[..5].iter().chain(&few).copied().collect();
    want.sort();
    ensure_eq!(got, want, "the first claim of 8");

    let more_a = backlog[5];
    let more_b = create(&store, task_for(URL_B, "few-more"), at(11)).await?;
    let after = |dest: &str| ClaimGate {
        after: Some(dest.to_owned()),
        ..ClaimGate::default()
    };
    let from_b = claim(&store, 1, at(12), after(DEST_A)).await?;
    ensure_eq!(
        ids(&from_b),
        vec![more_b.id],
        "a claim of one after {DEST_A}"
    );
    let wrapped = claim(&store, 1, at(13), after(DEST_B)).await?;
    ensure_eq!(ids(&wrapped), vec![more_a], "a claim of one after {DEST_B}");
    Ok(())
}

/// Each claimed slot goes to the due destination with the fewest calls in
/// flight on the claiming node (the gate's `in_flight`, counting what the
/// claim already gave it), ties in rotation order: a destination first in
/// rotation but loaded waits while another has due tasks, the claim
/// looking past it; equal loads share by rotation; and a loaded destination
/// alone takes every slot left (no default cap).
pub async fn claim_serves_the_destinations_with_fewest_calls_in_flight_first<S: TaskStore>(
    store: S,
) -> Verdict {
    let a = create_many(&store, URL_A, "loaded", 10, at(0)).await?;
    let b = create_many(&store, URL_B, "idle", 10, at(1)).await?;
    // (what the step shows, claim size, in flight on this node, tasks of A
    // and of B it must take: each destination's oldest not yet claimed)
    type Step<'a> = (&'a str, usize, &'a [(&'a str, usize)], usize, usize);
    let steps: &[Step] = &[
        (
            "one slot beside A's 5 in flight: B's, though A comes first in rotation",
            1,
            &[(DEST_A, 5)],
            0,
            1,
        ),
        (
            "three slots, A at 5 and B at 0: all to B",
            3,
            &[(DEST_A, 5), (DEST_B, 0)],
            0,
            3,
        ),
        (
            "four slots, A at 5 and B at 4: B to 5, then one each by rotation, A first",
            4,
            &[(DEST_A, 5), (DEST_B, 4)],
            2,
            2,
        ),
        (
            "equal loads: shared in rotation order",
            3,
            &[(DEST_A, 7), (DEST_B, 7)],
            2,
            1,
        ),
        (
            "B's last 3 first, then the loaded A takes the rest",
            8,
            &[(DEST_A, 50)],
            5,
            3,
        ),
    ];
    let (mut next_a, mut next_b) = (0, 0);
    for (i, (what, n, in_flight, from_a, from_b)) in steps.iter().enumerate() {
        let gate = ClaimGate {
            in_flight: in_flight
                .iter()
                .map(|(dest, busy)| ((*dest).to_owned(), *busy))
                .collect(),
            ..ClaimGate::default()
        };
        let got = claim(&store, *n, at(10 + i as i64), gate).await?;
        let mut got_ids = ids(&got);
        got_ids.sort();
        let mut want: Vec<TaskId> = a[next_a..next_a + from_a]
            .iter()
            .chain(&b[next_b..next_b + from_b])
            .copied()
            .collect();
        want.sort();
        ensure_eq!(got_ids, want, "{what}");
        next_a += from_a;
        next_b += from_b;
    }
    Ok(())
}

/// A gate's first contact bounds only the destinations the claiming node
/// has not met (named nowhere in the gate): one task of a destination it
/// has never called, every due task of one it has met (in `met`, or with
/// calls in flight) and of one the gate bounds itself.
pub async fn first_contact_bounds_only_destinations_not_met<S: TaskStore>(store: S) -> Verdict {
    let url_c = "http://c.example:8003/hook";
    let a = create_many(&store, URL_A, "new", 3, at(0)).await?;
    let b = create_many(&store, URL_B, "met", 3, at(1)).await?;
    let c = create_many(&store, url_c, "calling", 3, at(2)).await?;
    let mut gate = ClaimGate {
        first_contact: Some(1),
        ..ClaimGate::default()
    };
    gate.met.insert(DEST_B.to_owned());
    gate.in_flight.insert("c.example:8003".to_owned(), 1);
    let got = claim(&store, 20, at(10), gate.clone()).await?;
    let mut got_ids = ids(&got);
    got_ids.sort();
    let mut want: Vec<TaskId> = a[..1].iter().chain(&b).chain(&c).copied().collect();
    want.sort();
    ensure_eq!(
        got_ids,
        want,
        "one of the new destination's, all of the others'"
    );
    // A bound of the gate's own wins over first contact.
    gate.at_most.insert(DEST_A.to_owned(), 2);
    let got = claim(&store, 20, at(11), gate).await?;
    ensure_eq!(
        ids(&got),
        a[1..].to_vec(),
        "the new destination's bound of 2"
    );
    Ok(())
}

/// A destination's client certificate, key and CA certificates are kept as
/// written and read back the same by every read (the
/// key included, which the store seals at rest); an update that names
/// neither keeps them, `null` clears each alone.
pub async fn a_destination_s_client_tls_is_kept_and_cleared<S: TaskStore>(store: S) -> Verdict {
    use tc_model::Timestamp;
    use tc_model::client_tls::{CertFacts, ClientCert, ClientKey, ClientTls};
    let tls = ClientTls {
        cert: ClientCert {
            pem: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
            facts: CertFacts {
                subject: "CN=taskcenter client".into(),
                not_after: Timestamp::from_millis(1_900_000_000_000),
            },
        },
        key: ClientKey::new(
            "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n".into(),
        ),
    };
    let ca = "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n".to_owned();
    let both = DestinationSettings {
        client_tls: Some(tls.clone()),
        ca_certs: Some(ca.clone()),
        ..DestinationSettings::default()
    };
    let steps: [(&str, DestinationUpdate, DestinationSettings); 4] = [
        (
            "set both",
            DestinationUpdate {
                client_tls: Some(Some(tls.clone())),
                ca_certs: Some(Some(ca.clone())),
                ..DestinationUpdate::default()
            },
            both.clone(),
        ),
        (
            "another field named: both kept",
            DestinationUpdate {
                paused: Some(false),
                ..DestinationUpdate::default()
            },
            both.clone(),
        ),
        (
            "the certificate cleared: the CA kept",
            DestinationUpdate {
                client_tls: Some(None),
                ..DestinationUpdate::default()
            },
            DestinationSettings {
                ca_certs: Some(ca.clone()),
                ..DestinationSettings::default()
            },
        ),
        (
            "the CA cleared",
            DestinationUpdate {
                ca_certs: Some(None),
                ..DestinationUpdate::default()
            },
            DestinationSettings::default(),
        ),
    ];
    for (n, (what, update, want)) in steps.into_iter().enumerate() {
        let written = set(&store, DEST_B, update, at(n as i64)).await?;
        ensure_eq!(&written.settings, &want, "{what}: update's answer");
        settings_read_back(&store, DEST_B, &want)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(())
}
