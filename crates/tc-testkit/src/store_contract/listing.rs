//! Listing and bulk: pages in creation order and within a budget, counts,
//! the next due time, reads of unknown ids, health, every filter, and the
//! bulk actions over what a filter covers.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tc_model::store::{
    BULK_CHUNK, BULK_SAMPLE, BulkAction, BulkRequest, Completion, ListQuery, StoreError,
    TaskFilter, TaskStore,
};
use tc_model::{State, Task, TaskId, Timestamp};
use tokio::sync::watch;

use super::Verdict;
use super::check::*;
use crate::ClaimDue;
use tc_model::tenant::Scope;

/// Pages follow creation order, honour the limit and the state filter, and
/// the last page says so.
pub async fn list_pages_in_creation_order<S: TaskStore>(store: S) -> Verdict {
    let mut created = Vec::new();
    for i in 0..23 {
        created.push(
            create(&store, new_task(&format!("k{i:02}")), at(i))
                .await?
                .id,
        );
    }
    let running = store
        .claim_due(
            5,
            at(100),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure_eq!(ids(&running), created[..5].to_vec(), "claimed");
    store
        .cancel(created[5], Scope::Admin, at(100))
        .await
        .step("cancel")?;

    let check = |pages: Vec<Vec<Task>>, sizes: &[usize], want: &[TaskId], what: &str| {
        let got_sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
        if got_sizes != sizes {
            return Err(format!("{what}: page sizes {got_sizes:?}, want {sizes:?}"));
        }
        let got: Vec<TaskId> = pages.iter().flatten().map(|t| t.id).collect();
        if got != want {
            return Err(format!("{what}: tasks out of creation order or missing"));
        }
        Ok(pages.into_iter().flatten().collect::<Vec<Task>>())
    };
    check(
        pages(&store, None, 10).await?,
        &[10, 10, 3],
        &created,
        "all by 10",
    )?;
    check(
        pages(&store, None, 23).await?,
        &[23],
        &created,
        "all in one page",
    )?;
    check(
        pages(&store, None, 22).await?,
        &[22, 1],
        &created,
        "all by 22",
    )?;
    check(
        pages(&store, None, 1000).await?,
        &[23],
        &created,
        "a big limit",
    )?;
    let pending = check(
        pages(&store, Some(State::Pending), 5).await?,
        &[5, 5, 5, 2],
        &created[6..],
        "pending by 5",
    )?;
    ensure!(
        pending.iter().all(|t| t.state == State::Pending),
        "filter leaked other states"
    );
    check(
        pages(&store, Some(State::Running), 2).await?,
        &[2, 2, 1],
        &created[..5],
        "running by 2",
    )?;
    check(
        pages(&store, Some(State::Canceled), 5).await?,
        &[1],
        &created[5..6],
        "canceled",
    )?;
    check(
        pages(&store, Some(State::Success), 5).await?,
        &[0],
        &[],
        "success",
    )?;

    // A cursor past the end is an empty last page.
    let first = store
        .list(
            ListQuery {
                filter: TaskFilter::state(None),
                limit: 22,
                after: None,
                max_result_bytes: None,
                ..ListQuery::default()
            },
            Scope::Admin,
        )
        .await
        .step("list")?;
    let rest = store
        .list(
            ListQuery {
                filter: TaskFilter::state(None),
                limit: 5,
                after: first.next,
                max_result_bytes: None,
                ..ListQuery::default()
            },
            Scope::Admin,
        )
        .await
        .step("list")?;
    ensure_eq!(ids(&rest.tasks), created[22..].to_vec(), "the rest");
    ensure!(rest.next.is_none(), "the rest is the last page");
    Ok(())
}

/// Paging while other tasks are being inserted: no task skipped or repeated.
pub async fn list_pages_are_stable_while_inserting<S: TaskStore>(store: S) -> Verdict {
    const BEFORE: usize = 50;
    const DURING: usize = 200;
    const LIMIT: usize = 7;
    for i in 0..BEFORE {
        create(&store, new_task(&format!("before-{i}")), at(0)).await?;
    }
    let store = Arc::new(store);
    let (progress, mut inserted) = watch::channel(0usize);
    let inserter = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut order = Vec::with_capacity(DURING);
            for i in 0..DURING {
                let task = store
                    .submit(new_task(&format!("during-{i}")), at(1))
                    .await?;
                order.push(task.task.id);
                progress.send_replace(i + 1);
            }
            Ok::<_, StoreError>(order)
        })
    };

    let mut seen: Vec<TaskId> = Vec::new();
    let mut after = None;
    let mut finished = false;
    for _ in 0..100_000 {
        // Read before listing: if the inserter was done then, this listing
        // sees every row.
        let done = *inserted.borrow_and_update() == DURING;
        let page = store
            .list(
                ListQuery {
                    filter: TaskFilter::state(None),
                    limit: LIMIT,
                    after,
                    max_result_bytes: None,
                    ..ListQuery::default()
                },
                Scope::Admin,
            )
            .await
            .step("list")?;
        match page.next {
            Some(next) => {
                seen.extend(ids(&page.tasks));
                after = Some(next);
            }
            None if done => {
                seen.extend(ids(&page.tasks));
                finished = true;
                break;
            }
            // At the current end while rows are still coming: wait for
            // more and read this page again. An error means the inserter
            // stopped early; its own error is reported below.
            None => {
                if inserted.changed().await.is_err() && *inserted.borrow() < DURING {
                    break;
                }
            }
        }
    }
    let inserted_order = inserter.await.unwrap().step("concurrent submit")?;
    ensure!(finished, "paging did not reach the end");

    let all = ids(&list_all(&*store, None).await?);
    ensure_eq!(all.len(), BEFORE + DURING, "rows at the end");
    let unique: HashSet<TaskId> = seen.iter().copied().collect();
    ensure_eq!(unique.len(), seen.len(), "tasks repeated across pages");
    ensure!(
        seen == all,
        "paging saw {} tasks, the full listing has {}; some were skipped or reordered",
        seen.len(),
        all.len()
    );
    let during: Vec<TaskId> = seen
        .iter()
        .copied()
        .filter(|id| inserted_order.contains(id))
        .collect();
    ensure!(
        during == inserted_order,
        "tasks inserted during paging are out of creation order"
    );
    Ok(())
}

/// Counts follow every state.
pub async fn count_by_state_counts_each_state<S: TaskStore>(store: S) -> Verdict {
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure!(
        counts.iter().all(|(_, n)| n == 0),
        "an empty store counts {counts:?}"
    );
    let want = [
        (State::Pending, 3),
        (State::Running, 2),
        (State::Success, 1),
        (State::Failed, 4),
        (State::Canceled, 1),
    ];
    let mut t = 0;
    for (state, n) in want {
        for i in 0..n {
            task_in(&store, &format!("{state}-{i}"), state, at(t)).await?;
            t += 1;
        }
    }
    let counts = store.count_by_state().await.step("count_by_state")?;
    for (state, n) in want {
        ensure_eq!(counts.get(state), n, "{state} count");
    }
    Ok(())
}

/// A page ends before the task whose result would cross the budget (but
/// holds one task at least), the next page starts right after it, and
/// listed tasks carry no request body.
pub async fn list_pages_stay_within_the_result_budget_without_bodies<S: TaskStore>(
    store: S,
) -> Verdict {
    // Result sizes in creation order; `None` stays pending (no result).
    let sizes = [Some(40), None, Some(70), Some(10), Some(200), Some(5)];
    let mut ids = Vec::new();
    for (i, size) in sizes.iter().enumerate() {
        // The pending one is created "later" so that no claim takes it.
        let created = if size.is_some() {
            at(i as i64)
        } else {
            at(10_000)
        };
        let task = create(&store, new_task(&format!("b{i}")), created).await?;
        if let Some(n) = size {
            claim_only(&store, task.id, at(100 + i as i64), Duration::from_secs(60)).await?;
            let outcome = Completion::Success {
                http_status: 200,
                result: vec![b'r'; *n],
                content_type: None,
            };
            let done = store
                .complete(task.id, 1, outcome, at(200 + i as i64))
                .await
                .step("complete")?;
            applied(&store, task.id, done, "complete").await?;
        }
        ids.push(task.id);
    }
    let budget = Some(100);
    let mut got = Vec::new();
    let mut after = None;
    for _ in 0..10 {
        let page = store
            .list(
                ListQuery {
                    filter: TaskFilter::state(None),
                    limit: 10,
                    after,
                    max_result_bytes: budget,
                    ..ListQuery::default()
                },
                Scope::Admin,
            )
            .await
            .step("list")?;
        for task in &page.tasks {
            ensure!(
                task.body.is_empty(),
                "a listed task carries its body: {task:?}"
            );
        }
        got.push(page.tasks.iter().map(|t| t.id).collect::<Vec<_>>());
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    // 40+0 fit, 70 would cross; 70+10 fit, 200 would cross; 200 alone (one
    // at least), then 5.
    let want = vec![
        vec![ids[0], ids[1]],
        vec![ids[2], ids[3]],
        vec![ids[4]],
        vec![ids[5]],
    ];
    ensure_eq!(got, want, "pages under a 100-byte budget");
    // Without a budget, one page has them all.
    let all = list_all(&store, None).await?;
    ensure_eq!(all.len(), sizes.len(), "unbudgeted listing");
    ensure!(all.iter().all(|t| t.body.is_empty()), "bodies in a listing");
    Ok(())
}

/// An open store is healthy, before and after writes, and a health check
/// writes nothing.
pub async fn health_answers_and_changes_nothing<S: TaskStore>(store: S) -> Verdict {
    store.health().await.step("health on an empty store")?;
    let task = create(&store, new_task("h"), at(0)).await?;
    for _ in 0..3 {
        store.health().await.step("health")?;
    }
    ensure_eq!(
        store.get(task.id, Scope::Admin).await.step("get")?,
        task,
        "the task after health checks"
    );
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(counts.get(State::Pending), 1, "pending count");
    Ok(())
}

/// next_due is the earliest next_run_at among pending tasks only.
pub async fn next_due_is_the_earliest_pending<S: TaskStore>(store: S) -> Verdict {
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        None,
        "empty store"
    );
    let a = create(&store, new_task("a"), at(50)).await?;
    let b = create(&store, new_task("b"), at(20)).await?;
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        Some(at(20)),
        "two pending"
    );
    claim_only(&store, b.id, at(20), LEASE).await?;
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        Some(at(50)),
        "running ones do not count"
    );
    store
        .complete(b.id, 1, retry(at(30), "http_503", Some(503)), at(25))
        .await
        .step("complete")?;
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        Some(at(30)),
        "a retry's due time"
    );
    store
        .cancel(b.id, Scope::Admin, at(26))
        .await
        .step("cancel")?;
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        Some(at(50)),
        "after cancel"
    );
    claim_only(&store, a.id, at(50), LEASE).await?;
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        None,
        "nothing pending"
    );
    Ok(())
}

/// Operations on an id that was never stored say so.
pub async fn unknown_ids_are_not_found<S: TaskStore>(store: S) -> Verdict {
    create(&store, new_task("real"), at(0)).await?;
    let ghost = TaskId::new(Timestamp::from_millis(0), [0xee; 10]);
    ensure_eq!(
        store.get(ghost, Scope::Admin).await,
        Err(StoreError::NotFound),
        "get"
    );
    ensure_eq!(
        store.cancel(ghost, Scope::Admin, at(1)).await,
        Err(StoreError::NotFound),
        "cancel"
    );
    ensure_eq!(
        store.complete(ghost, 1, success(200), at(1)).await,
        Err(StoreError::NotFound),
        "complete"
    );
    ensure_eq!(
        store.release(ghost, 1, at(1)).await,
        Err(StoreError::NotFound),
        "release"
    );
    ensure_eq!(
        store.heartbeat(vec![(ghost, 1)], at(1), LEASE).await,
        Ok(vec![lost(ghost, 1, None)]),
        "heartbeat"
    );
    Ok(())
}

/// A mix of tasks to filter: every state, two error reasons, three creation
/// times. Returns them as stored, in creation order.
async fn filter_fixture<S: TaskStore>(store: &S) -> Result<Vec<Task>, String> {
    let mut tasks = Vec::new();
    for (i, state) in State::ALL.into_iter().cycle().take(15).enumerate() {
        let now = at(i as i64 * 100);
        let key = format!("f-{i}-{state}");
        let task = if state == State::Failed && i % 2 == 0 {
            let task = create(store, new_task(&key), now).await?;
            let task = claim_only(store, task.id, now, LEASE).await?;
            let done = store
                .complete(task.id, task.attempt, failed("http_503", Some(503)), now)
                .await
                .step("complete")?;
            applied(store, task.id, done, "complete").await?
        } else {
            task_in(store, &key, state, now).await?
        };
        tasks.push(task);
    }
    Ok(tasks)
}

/// Pages through a filtered listing with `limit` and `max_scan`, checking
/// each page; returns the ids in the order the pages gave them.
async fn filtered_ids<S: TaskStore>(
    store: &S,
    filter: &TaskFilter,
    limit: usize,
    max_scan: usize,
) -> Result<Vec<TaskId>, String> {
    let mut found = Vec::new();
    let mut after = None;
    for _ in 0..1_000 {
        let page = store
            .list(
                ListQuery {
                    filter: filter.clone(),
                    limit,
                    after,
                    max_result_bytes: None,
                    max_scan,
                },
                Scope::Admin,
            )
            .await
            .step("list")?;
        ensure!(page.tasks.len() <= limit, "page over limit {limit}");
        for task in &page.tasks {
            ensure!(filter.matches(task), "{filter:?} listed {task:?}");
            found.push(task.id);
        }
        match page.next {
            Some(next) => {
                ensure!(after != Some(next), "a page's cursor did not move on");
                after = Some(next);
            }
            None => return Ok(found),
        }
    }
    Err("filtered listing did not end after 1000 pages".to_owned())
}

/// Every filter, alone and combined, lists exactly the tasks it matches, in
/// creation order, across pages — also when a page's scan is bounded far
/// below the table (pages then end short, with a cursor to go on).
pub async fn list_filters_list_exactly_the_matching_tasks<S: TaskStore>(store: S) -> Verdict {
    let mut tasks = filter_fixture(&store).await?;
    for (i, url) in ["http://Other.test:8080/a", "https://other.test/b"]
        .iter()
        .enumerate()
    {
        let task = create(
            &store,
            task_with(&format!("other-{i}"), url, b"{}", 1, 1_000),
            at(50),
        )
        .await?;
        tasks.push(task);
    }
    ensure_eq!(
        tasks[15].destination,
        "other.test:8080",
        "a destination is the url's host:port, lower-cased"
    );
    ensure_eq!(tasks[16].destination, "other.test:443", "the scheme's port");
    let mut filters = vec![TaskFilter::default()];
    for state in State::ALL {
        filters.push(TaskFilter::state(Some(state)));
    }
    let error = |e: &str| Some(e.to_owned());
    filters.extend([
        TaskFilter {
            error: error("http_503"),
            ..TaskFilter::default()
        },
        TaskFilter {
            error: error("http_400"),
            state: Some(State::Failed),
            ..TaskFilter::default()
        },
        TaskFilter {
            error: error("canceled"),
            ..TaskFilter::default()
        },
        TaskFilter {
            created_after: Some(at(300)),
            created_before: Some(at(1_000)),
            ..TaskFilter::default()
        },
        TaskFilter {
            created_after: Some(at(700)),
            state: Some(State::Failed),
            ..TaskFilter::default()
        },
        TaskFilter {
            idempotency_key: Some(tasks[3].idempotency_key.clone()),
            ..TaskFilter::default()
        },
        TaskFilter {
            idempotency_key: Some(tasks[3].idempotency_key.clone()),
            state: Some(State::Pending),
            ..TaskFilter::default()
        },
        TaskFilter {
            idempotency_key: Some("no-such-key".to_owned()),
            ..TaskFilter::default()
        },
        // A task without an error (a pending one) beside an error filter
        // that does not drive the walk: its NULL `error` is no match, not
        // a failure.
        TaskFilter {
            idempotency_key: Some(tasks[0].idempotency_key.clone()),
            error: Some("http_503".to_owned()),
            ..TaskFilter::default()
        },
        TaskFilter {
            destination: Some("other.test:8080".to_owned()),
            ..TaskFilter::default()
        },
        TaskFilter {
            destination: Some("127.0.0.1:9".to_owned()),
            state: Some(State::Pending),
            ..TaskFilter::default()
        },
        TaskFilter {
            destination: Some("127.0.0.1:9".to_owned()),
            error: Some("http_503".to_owned()),
            created_after: Some(at(500)),
            ..TaskFilter::default()
        },
    ]);
    for filter in &filters {
        let want: Vec<TaskId> = tasks
            .iter()
            .filter(|t| filter.matches(t))
            .map(|t| t.id)
            .collect();
        for (limit, max_scan) in [(100, 10_000), (2, 10_000), (2, 3), (1, 1)] {
            let got = filtered_ids(&store, filter, limit, max_scan).await?;
            ensure_eq!(
                got,
                want,
                "{filter:?} with limit {limit}, max_scan {max_scan}"
            );
        }
    }
    // A bounded scan that finds nothing still hands out a cursor while rows
    // remain past it (pending fixtures are created a billion ms ahead).
    let rare = TaskFilter {
        created_after: Some(at(1_000_000_000_000)),
        ..TaskFilter::default()
    };
    let first = store
        .list(
            ListQuery {
                filter: rare,
                limit: 5,
                max_scan: 3,
                ..ListQuery::default()
            },
            Scope::Admin,
        )
        .await
        .step("list")?;
    ensure!(first.tasks.is_empty(), "nothing is that new");
    ensure!(
        first.next.is_some(),
        "a bounded scan ended without a cursor"
    );
    Ok(())
}

/// A bulk action covers what its filter matches, skips the tasks it does
/// not apply to and counts only those it changed; a dry run changes
/// nothing; the sample is the first covered ids; canceled running tasks are
/// named so that their calls can be interrupted.
pub async fn bulk_actions_apply_to_what_their_filter_covers<S: TaskStore>(store: S) -> Verdict {
    let tasks = filter_fixture(&store).await?;
    let now = at(10_000);
    let of = |state: State| -> Vec<TaskId> {
        tasks
            .iter()
            .filter(|t| t.state == state)
            .map(|t| t.id)
            .collect()
    };
    let everything = TaskFilter::default();
    let dry = store
        .bulk(BulkRequest::new(BulkAction::Delete, everything.clone(), now).counting_only())
        .await
        .step("dry run")?;
    ensure_eq!(dry.matched, 15, "a dry run's matched");
    ensure_eq!(dry.applied, 0, "a dry run's applied");
    ensure_eq!(dry.sample, ids(&tasks[..BULK_SAMPLE]), "a dry run's sample");
    ensure_eq!(
        list_all(&store, None).await?.len(),
        15,
        "tasks after a dry run"
    );

    // Retry of failed tasks with one error: the others are not covered.
    let busy = TaskFilter {
        error: Some("http_503".to_owned()),
        ..TaskFilter::default()
    };
    let retried = store
        .bulk(BulkRequest::new(BulkAction::Retry, busy, now))
        .await
        .step("bulk retry")?;
    let busy_ids: Vec<TaskId> = tasks
        .iter()
        .filter(|t| t.error.as_deref() == Some("http_503"))
        .map(|t| t.id)
        .collect();
    ensure_eq!(retried.matched, busy_ids.len() as u64, "retry matched");
    ensure_eq!(retried.applied, busy_ids.len() as u64, "retry applied");
    for id in &busy_ids {
        let task = get(&store, *id).await?;
        ensure_eq!(task.state, State::Pending, "a retried task");
        ensure_eq!(task.next_run_at, Some(now), "a retried task is due now");
    }

    // Cancel over everything: applies to pending and running only.
    let running = of(State::Running);
    let pending_now = list_all(&store, Some(State::Pending)).await?.len() as u64;
    let canceled = store
        .bulk(BulkRequest::new(
            BulkAction::Cancel,
            everything.clone(),
            now,
        ))
        .await
        .step("bulk cancel")?;
    ensure_eq!(canceled.matched, 15, "cancel matched");
    ensure_eq!(
        canceled.applied,
        pending_now + running.len() as u64,
        "cancel applied"
    );
    let mut named = canceled.canceled_running.clone();
    named.sort();
    let mut want = running.clone();
    want.sort();
    ensure_eq!(named, want, "the running tasks the cancel named");
    ensure_eq!(
        list_all(&store, Some(State::Pending)).await?.len()
            + list_all(&store, Some(State::Running)).await?.len(),
        0,
        "live tasks after a cancel of everything"
    );

    // Delete of the successes: the rest stay.
    let deleted = store
        .bulk(BulkRequest::new(
            BulkAction::Delete,
            TaskFilter::state(Some(State::Success)),
            now,
        ))
        .await
        .step("bulk delete")?;
    ensure_eq!(deleted.applied, of(State::Success).len() as u64, "deleted");
    for id in of(State::Success) {
        ensure_eq!(
            store.get(id, Scope::Admin).await,
            Err(StoreError::NotFound),
            "a deleted task"
        );
    }
    let left = list_all(&store, None).await?.len() as u64;
    ensure_eq!(left, 15 - deleted.applied, "tasks after the delete");

    // Retry skips what it does not apply to (success is gone; canceled and
    // failed apply) and counts only what it changed.
    let again = store
        .bulk(BulkRequest::new(BulkAction::Retry, everything, now))
        .await
        .step("bulk retry of everything")?;
    ensure_eq!(again.matched, left, "retry matched");
    ensure_eq!(
        again.applied,
        left,
        "every failed and canceled task retried"
    );
    Ok(())
}

/// A bulk action over more tasks than one transaction takes goes through
/// all of them, chunk after chunk.
pub async fn bulk_actions_go_past_one_chunk<S: TaskStore>(store: S) -> Verdict {
    let n = BULK_CHUNK + 7;
    let submitted = create_many(&store, URL, "many", n, at(0)).await?;
    let pending = TaskFilter::state(Some(State::Pending));
    let canceled = store
        .bulk(BulkRequest::new(BulkAction::Cancel, pending, at(10)))
        .await
        .step("bulk cancel")?;
    ensure_eq!(
        (canceled.matched, canceled.applied),
        (n as u64, n as u64),
        "cancel of every pending task"
    );
    ensure_eq!(canceled.sample, submitted[..BULK_SAMPLE].to_vec(), "sample");
    let retried = store
        .bulk(BulkRequest::new(
            BulkAction::Retry,
            TaskFilter::default(),
            at(20),
        ))
        .await
        .step("bulk retry")?;
    ensure_eq!(retried.applied, n as u64, "retry of every canceled task");
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(
        counts.get(State::Pending),
        n as u64,
        "pending after the retry"
    );
    Ok(())
}
