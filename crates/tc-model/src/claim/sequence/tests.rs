//! The share-out driven by a store of counts: which takes it asks for, in
//! which order, for which lanes.

use std::collections::BTreeMap;

use super::*;
use crate::tenant::NO_TENANT;

/// Due tasks by destination, then tenant: (without a key, with a key).
type Due = BTreeMap<String, BTreeMap<String, (usize, usize)>>;

/// A store of due counts answering the sequence's asks; the takes it was
/// asked for, as `destination lane want→got`.
fn drive(n: usize, candidates: &[&str], gate: &ClaimGate, mut due: Due) -> Vec<String> {
    let candidates = candidates.iter().map(|d| (d.to_string(), None)).collect();
    let mut sequence = ClaimSequence::new(n, candidates, gate);
    let mut log = Vec::new();
    let mut asks = 0;
    while let Some(ask) = sequence.next_ask() {
        asks += 1;
        assert!(asks < 1000, "the sequence keeps asking: {ask:?}");
        match ask {
            Ask::DueTenants { destination } => {
                let tenants = due.get(&destination).into_iter().flatten();
                let due = tenants
                    .filter(|(_, (plain, keyed))| plain + keyed > 0)
                    .map(|(tenant, _)| tenant.clone())
                    .collect();
                sequence.due_tenants(due);
            }
            Ask::KeysInPlay {
                destination,
                tenant,
            } => {
                let tenants = due.get(&destination).into_iter().flatten();
                let keyed = tenants
                    .filter(|(t, _)| tenant.as_ref().is_none_or(|want| want == *t))
                    .any(|(_, (_, keyed))| *keyed > 0);
                sequence.keys_in_play(keyed);
            }
            Ask::Take(take) => {
                let got = take_from(&mut due, &take);
                let lane = match &take.lane {
                    Lane::Any => "any".to_owned(),
                    Lane::Tenant(t) => format!("tenant:{t}"),
                    Lane::Keys(t) => format!("keys:{t}"),
                };
                log.push(format!("{} {lane} {}→{got}", take.destination, take.want));
                sequence.took(got);
            }
        }
    }
    log
}

/// Takes up to `take.want` of the lane's due tasks (tenants in name order,
/// unkeyed before keyed): how many.
fn take_from(due: &mut Due, take: &Take) -> usize {
    let lanes = due.entry(take.destination.clone()).or_default();
    let mut got = 0;
    for (tenant, (plain, keyed)) in lanes.iter_mut() {
        let fits = match &take.lane {
            Lane::Any => true,
            Lane::Tenant(t) | Lane::Keys(t) => t == tenant,
        };
        if !fits {
            continue;
        }
        for count in [plain, keyed] {
            let n = (take.want - got).min(*count);
            *count -= n;
            got += n;
        }
    }
    got
}

fn check(n: usize, candidates: &[&str], gate: &ClaimGate, due: Due, want: &[&str]) {
    let got = drive(n, candidates, gate, due);
    assert_eq!(got, want, "claim of {n} over {candidates:?}");
}

fn due(rows: &[(&str, &str, usize, usize)]) -> Due {
    let mut due = Due::new();
    for &(destination, tenant, plain, keyed) in rows {
        due.entry(destination.to_owned())
            .or_default()
            .insert(tenant.to_owned(), (plain, keyed));
    }
    due
}

fn with_tenants(weights: &[(&str, u32)]) -> ClaimGate {
    ClaimGate {
        tenants: Some(TenantGate {
            weights: weights.iter().map(|(t, w)| (t.to_string(), *w)).collect(),
            in_flight: BTreeMap::new(),
        }),
        ..ClaimGate::default()
    }
}

#[test]
fn without_tenants_or_keys_each_destination_gives_its_oldest() {
    let blind = ClaimGate::default();
    let two = due(&[("a", NO_TENANT, 5, 0), ("b", NO_TENANT, 1, 0)]);
    // "b" gives its one task; the slot it leaves goes back to "a".
    check(
        4,
        &["a", "b"],
        &blind,
        two,
        &["a any 2→2", "b any 2→1", "a any 1→1"],
    );
    check(0, &["a"], &blind, due(&[("a", NO_TENANT, 5, 0)]), &[]);
    check(3, &[], &blind, Due::new(), &[]);
}

#[test]
fn without_tenants_keyed_tasks_are_shared_tenant_by_tenant() {
    let blind = ClaimGate::default();
    // Keys in play: each due tenant's keys in turn, until the take is full.
    let keyed = due(&[("a", NO_TENANT, 1, 2), ("a", "left", 0, 4)]);
    check(
        5,
        &["a"],
        &blind,
        keyed,
        &["a keys: 5→3", "a keys:left 2→2"],
    );
    // Full after the first tenant: the next is not asked.
    let full = due(&[("a", NO_TENANT, 0, 4), ("a", "left", 0, 4)]);
    check(3, &["a"], &blind, full, &["a keys: 3→3"]);
}

#[test]
fn tenants_share_by_weight_and_keys_per_lane() {
    let gate = with_tenants(&[("big", 3)]);
    let rows = due(&[("a", "big", 9, 0), ("a", "small", 0, 9)]);
    // 4 slots, weights 3 and 1; "small" has keyed tasks due, "big" none.
    let mut got = drive(4, &["a"], &gate, rows);
    got.sort();
    assert_eq!(got, ["a keys:small 1→1", "a tenant:big 3→3"]);
}

#[test]
fn a_tenant_s_takes_in_one_destination_count_in_the_next() {
    // "x" holds two slots of this claim from "a": in "b" the two free
    // slots go to "y".
    let gate = with_tenants(&[]);
    let rows = due(&[("a", "x", 9, 0), ("b", "x", 9, 0), ("b", "y", 9, 0)]);
    let got = drive(4, &["a", "b"], &gate, rows);
    assert_eq!(got, ["a tenant:x 2→2", "b tenant:y 2→2"]);
}

#[test]
fn an_answer_to_another_question_changes_nothing() {
    let gate = ClaimGate::default();
    let mut sequence = ClaimSequence::new(1, vec![("a".into(), None)], &gate);
    let first = sequence.next_ask();
    assert!(matches!(first, Some(Ask::KeysInPlay { .. })), "{first:?}");
    sequence.took(1);
    sequence.due_tenants(vec!["x".into()]);
    assert_eq!(sequence.next_ask(), first, "asked again, the same ask");
    sequence.keys_in_play(false);
    let take = Take {
        destination: "a".into(),
        lane: Lane::Any,
        want: 1,
    };
    assert_eq!(sequence.next_ask(), Some(Ask::Take(take)));
    sequence.took(1);
    assert_eq!(sequence.next_ask(), None);
}
