//! The contract of priorities: a task's priority is kept, read back
//! and filtered on; within a destination due tasks are claimed higher
//! priority first, a task counting one level higher for each aging period
//! it waited since it was due, the oldest due first within a level.

use std::time::Duration;

use tc_model::destination::ClaimGate;
use tc_model::store::{ListQuery, TaskFilter, TaskStore};
use tc_model::tenant::TenantGate;

use super::Verdict;
use super::check::{Step, at, claim, create, get, new_task};
use tc_model::tenant::Scope;

/// Each task: its key, priority and when it was submitted (due then).
const TASKS: [(&str, u8, i64); 5] = [
    ("old-low", 0, -600_000),
    ("urgent", 9, 0),
    ("middle", 5, 0),
    ("low", 0, 0),
    ("middle-later", 5, 1),
];

/// Claimed one at a time at 0 with an aging of a minute: `old-low` waited
/// ten minutes (ten levels, above 9), `urgent` next, then the two of
/// priority 5 oldest first, then `low`. With tenants defined (the claim's
/// tenant share) the order within the tenant is the same.
pub async fn claims_take_higher_priorities_first_and_age_the_rest<S: TaskStore>(
    store: S,
) -> Verdict {
    for (key, priority, submitted) in TASKS {
        let new = new_task(key)
            .with_priority(priority)
            .map_err(|e| e.to_string())?;
        let task = create(&store, new, at(submitted)).await?;
        ensure_eq!(task.priority, priority, "{key} as submitted");
        ensure_eq!(
            get(&store, task.id).await?.priority,
            priority,
            "{key} read back"
        );
    }
    let listed = store
        .list(
            ListQuery {
                filter: TaskFilter {
                    priority: Some(5),
                    ..TaskFilter::default()
                },
                ..ListQuery::default()
            },
            Scope::Admin,
        )
        .await
        .step("list priority=5")?;
    let keys: Vec<&str> = listed
        .tasks
        .iter()
        .map(|t| t.idempotency_key.as_str())
        .collect();
    ensure_eq!(keys, vec!["middle", "middle-later"], "priority=5 lists");
    let mut order = Vec::new();
    for round in 0..TASKS.len() {
        let gate = ClaimGate {
            priority_aging: Some(Duration::from_secs(60)),
            // Every other claim with the tenant share on: one tenant
            // (none), the same order.
            tenants: (round % 2 == 1).then(TenantGate::default),
            ..ClaimGate::default()
        };
        let got = claim(&store, 1, at(1), gate).await?;
        ensure_eq!(got.len(), 1, "one task each claim");
        order.push(got[0].idempotency_key.clone());
    }
    ensure_eq!(
        order,
        vec!["old-low", "urgent", "middle", "middle-later", "low"],
        "claim order"
    );
    Ok(())
}
