//! The contract for how a claim finds due tasks: it walks only the
//! destinations that have due tasks, however many others wait (not yet
//! due, held by the worker, paused), and its rotation goes on where the
//! last walk stopped.

use tc_model::destination::{ClaimGate, DestinationUpdate};
use tc_model::store::TaskStore;
use tc_model::{FirstRun, NewTask, State};

use super::Verdict;
use super::check::{DEST_A, Step, URL_A, at, claim, create, get, set, task_for};
use tc_model::tenant::Scope;

/// How many destinations wait in [`a_due_task_is_claimed_past_thousands_of_waiting_destinations`].
const WAITING: usize = 5_000;
/// Of them, how many are paused and how many held by the worker's gate
/// (the rest have tasks not yet due).
const PAUSED: usize = 300;
const HELD: usize = 700;

/// The `i`th waiting destination's url and name: all sort after
/// [`DEST_A`], so a walk that starts after it meets every one of them
/// before it wraps around to it.
fn waiting(i: usize) -> (String, String) {
    let host = format!("w{i:05}.example");
    (format!("http://{host}:80/hook"), format!("{host}:80"))
}

/// An hour after the scenario's start.
const LATER_MS: i64 = 3_600_000;

/// Submits one task to each waiting destination (due an hour later for
/// those neither paused nor held), pauses the paused ones, and returns the
/// gate that holds the held ones, with the rotation after [`DEST_A`].
async fn wait_everywhere<S: TaskStore>(store: &S) -> Result<ClaimGate, String> {
    let mut gate = ClaimGate {
        after: Some(DEST_A.to_owned()),
        ..ClaimGate::default()
    };
    let tasks: Vec<NewTask> = (0..WAITING)
        .map(|i| {
            let (url, name) = waiting(i);
            let task = task_for(&url, &format!("waiting-{i}"));
            if i < PAUSED {
                Ok(task)
            } else if i < PAUSED + HELD {
                gate.held.insert(name);
                Ok(task)
            } else {
                task.with_first_run(FirstRun::At(at(LATER_MS)))
                    .map_err(|e| format!("a delayed task: {e}"))
            }
        })
        .collect::<Result<_, String>>()?;
    for chunk in tasks.chunks(1000) {
        for result in store
            .submit_many(chunk.to_vec(), at(1))
            .await
            .step("submit_many")?
        {
            result.map_err(|e| format!("submit: {e}"))?;
        }
    }
    for i in 0..PAUSED {
        let pause = DestinationUpdate {
            paused: Some(true),
            ..DestinationUpdate::default()
        };
        set(store, &waiting(i).1, pause, at(2)).await?;
    }
    Ok(gate)
}

/// One task to `a` was served (the rotation is after `a`), then 5,000
/// destinations named after it get tasks that cannot be claimed now: due
/// in an hour, paused, or held by the worker. A new task to `a` is due:
/// the next claim, even of one task, takes it (the walk wraps past every
/// waiting destination without counting them), and so does a claim for a
/// task due among the waiting ones' names. Nothing else is claimed.
pub async fn a_due_task_is_claimed_past_thousands_of_waiting_destinations<S: TaskStore>(
    store: S,
) -> Verdict {
    let first = create(&store, task_for(URL_A, "first"), at(0)).await?;
    let got = claim(&store, 1, at(0), ClaimGate::default()).await?;
    ensure_eq!(got.len(), 1, "the first task is claimed");
    ensure_eq!(got[0].id, first.id, "the first task is claimed");
    let gate = wait_everywhere(&store).await?;

    let due = create(&store, task_for(URL_A, "due"), at(3)).await?;
    let got = claim(&store, 1, at(4), gate.clone()).await?;
    ensure_eq!(
        got.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![due.id],
        "a claim of one past {WAITING} waiting destinations"
    );

    // A due task among the waiting names, on a destination of its own.
    let mid_url = format!("http://w{:05}-due.example:80/hook", WAITING / 2);
    let mid = create(&store, task_for(&mid_url, "mid"), at(5)).await?;
    let got = claim(&store, 4, at(6), gate.clone()).await?;
    ensure_eq!(
        got.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![mid.id],
        "a claim of four takes the one due task and nothing held, paused or early"
    );
    let again = claim(&store, 4, at(7), gate).await?;
    ensure_eq!(again.len(), 0, "nothing else is claimable");
    for i in [0, PAUSED, PAUSED + HELD, WAITING - 1] {
        let page = store
            .list(
                tc_model::store::ListQuery {
                    filter: tc_model::store::TaskFilter {
                        destination: Some(waiting(i).1),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                Scope::Admin,
            )
            .await
            .step("list")?;
        ensure_eq!(page.tasks.len(), 1, "waiting destination {i}'s task");
        let task = get(&store, page.tasks[0].id).await?;
        ensure_eq!(
            (task.state, task.attempt),
            (State::Pending, 0),
            "waiting destination {i}'s task"
        );
    }
    Ok(())
}
