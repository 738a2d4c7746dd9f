//! The store property test (proptest): arbitrary sequences of operations,
//! applied to SqliteStore and to the reference MemoryStore (tc-testkit), must
//! give the same answers step by step. A failing sequence is shrunk to a
//! short one and printed; bounded in cases and steps.

use std::time::Duration;

use proptest::prelude::*;
use tc_model::store::{
    Completion, Cursor, Guarded, ListQuery, Page, StoreError, TaskFilter, TaskStore,
};
use tc_model::tenant::Scope;
use tc_model::{Limits, NewTask, State, Task, TaskId, Timestamp};
use tc_store::{SqliteStore, StoreConfig};
use tc_testkit::ClaimDue;
use tc_testkit::memory_store::MemoryStore;

const CASES: u32 = 24;
const MAX_STEPS: usize = 120;

/// One operation. A task is named by an index into the tasks submitted so
/// far (taken modulo their number; a stranger while there are none).
#[derive(Debug, Clone)]
enum Op {
    Submit {
        key: u8,
        variant: u8,
        delay_ms: Option<u64>,
    },
    SubmitMany(Vec<(u8, u8)>),
    Get(usize),
    Claim(usize),
    Heartbeat(Vec<(usize, i64)>),
    Complete {
        task: usize,
        attempt_shift: i64,
        outcome: u8,
    },
    Cancel(usize),
    Release {
        task: usize,
        attempt_shift: i64,
    },
    Recover,
    Delete(usize),
    Retry {
        task: usize,
        delay_ms: u64,
    },
    Prune {
        state: State,
        older_than_ms: u64,
        limit: usize,
    },
    List {
        state: Option<State>,
        limit: usize,
        after: Option<i64>,
    },
    Count,
    NextDue,
    Tick(u64),
}

fn any_state() -> impl Strategy<Value = State> {
    prop::sample::select(State::ALL.to_vec())
}

/// Weighted towards claims and completions, where the guards are.
fn any_op() -> impl Strategy<Value = Op> {
    let task = 0usize..8;
    prop_oneof![
        2 => (0u8..8, 0u8..2, prop::option::of(0u64..2_000))
            .prop_map(|(key, variant, delay_ms)| Op::Submit { key, variant, delay_ms }),
        1 => prop::collection::vec((0u8..8, 0u8..2), 1..4).prop_map(Op::SubmitMany),
        1 => task.clone().prop_map(Op::Get),
        3 => (0usize..4).prop_map(Op::Claim),
        1 => prop::collection::vec((task.clone(), -1i64..=0), 0..3).prop_map(Op::Heartbeat),
        4 => (task.clone(), -1i64..=0, 0u8..5).prop_map(|(task, attempt_shift, outcome)| {
            Op::Complete { task, attempt_shift, outcome }
        }),
        1 => task.clone().prop_map(Op::Cancel),
        1 => (task.clone(), -1i64..=0)
            .prop_map(|(task, attempt_shift)| Op::Release { task, attempt_shift }),
        1 => Just(Op::Recover),
        1 => task.clone().prop_map(Op::Delete),
        1 => (task, 0u64..1_000).prop_map(|(task, delay_ms)| Op::Retry { task, delay_ms }),
        1 => (any_state(), 0u64..3_000, 0usize..3)
            .prop_map(|(state, older_than_ms, limit)| Op::Prune { state, older_than_ms, limit }),
        1 => (prop::option::of(any_state()), 0usize..4, prop::option::of(0i64..8))
            .prop_map(|(state, limit, after)| Op::List { state, limit, after }),
        1 => Just(Op::Count),
        1 => Just(Op::NextDue),
        2 => (0u64..3_000).prop_map(Op::Tick),
    ]
}

fn new_task(key: u8, variant: u8) -> NewTask {
    NewTask::new(
        format!("http://downstream.test/{variant}"),
        b"{}".to_vec(),
        format!("key-{key}"),
        3,
        Duration::from_secs(1),
        &Limits::default(),
    )
    .unwrap()
}

/// One store under test and the ids it gave, in submit order.
struct Side<S> {
    store: S,
    ids: Vec<TaskId>,
}

impl<S: TaskStore> Side<S> {
    /// The id of the `i`th submitted task (modulo their number), or a
    /// stranger when none exists.
    fn id(&self, i: usize) -> TaskId {
        if self.ids.is_empty() {
            return TaskId::new(Timestamp::from_millis(0), [0xaa; 10]);
        }
        self.ids[i % self.ids.len()]
    }

    /// The task's current attempt shifted by `shift` (a stale attempt at -1).
    async fn attempt(&self, i: usize, shift: i64) -> u32 {
        let attempt = match self.store.get(self.id(i), Scope::Admin).await {
            Ok(task) => i64::from(task.attempt),
            Err(_) => 1,
        };
        u32::try_from(attempt + shift).unwrap_or(0)
    }

    /// Applies `op` at `now`; the answer is rendered with ids as indexes so
    /// that the two stores' answers compare.
    async fn apply(&mut self, op: &Op, now: Timestamp) -> String {
        let lease = Duration::from_secs(2);
        match op {
            Op::Submit {
                key,
                variant,
                delay_ms,
            } => {
                let mut new = new_task(*key, *variant);
                if let Some(ms) = delay_ms {
                    new = new
                        .with_first_run(tc_model::FirstRun::After(Duration::from_millis(*ms)))
                        .unwrap();
                }
                let got = self.store.submit(new, now).await;
                if let Ok(submitted) = &got
                    && submitted.created
                {
                    self.ids.push(submitted.task.id);
                }
                self.render(got.map(|s| (self.show(&s.task), s.created)))
            }
            Op::SubmitMany(items) => {
                let tasks = items.iter().map(|(k, v)| new_task(*k, *v)).collect();
                let got = self.store.submit_many(tasks, now).await;
                if let Ok(results) = &got {
                    for submitted in results.iter().flatten() {
                        if submitted.created {
                            self.ids.push(submitted.task.id);
                        }
                    }
                }
                let shown = got.map(|results| {
                    results
                        .iter()
                        .map(|r| {
                            format!("{:?}", r.as_ref().map(|s| (self.show(&s.task), s.created)))
                        })
                        .collect::<Vec<_>>()
                });
                self.render(shown)
            }
            Op::Get(i) => {
                let got = self.store.get(self.id(*i), Scope::Admin).await;
                self.render(got.map(|t| self.show(&t)))
            }
            Op::Delete(i) => {
                let id = self.id(*i);
                self.render(self.store.delete(id, Scope::Admin).await)
            }
            Op::Retry { task, delay_ms } => {
                let run_at = now.saturating_add(Duration::from_millis(*delay_ms));
                let got = self.store.retry(self.id(*task), run_at, now, None).await;
                self.render(got.map(|t| self.show(&t)))
            }
            Op::Prune {
                state,
                older_than_ms,
                limit,
            } => {
                let older_than = Duration::from_millis(*older_than_ms);
                self.render(self.store.prune(*state, older_than, now, *limit).await)
            }
            Op::Claim(n) => {
                let got = self
                    .store
                    .claim_due(*n, now, lease, tc_model::destination::ClaimGate::default())
                    .await;
                self.render(got.map(|ts| self.show_all(&ts)))
            }
            Op::Heartbeat(pairs) => {
                let mut running = Vec::new();
                for (i, shift) in pairs {
                    running.push((self.id(*i), self.attempt(*i, *shift).await));
                }
                // Shorter than a claim's lease: a heartbeat must never shorten one.
                let lease = Duration::from_millis(500);
                let lost = self.store.heartbeat(running, now, lease).await;
                // The leases not extended, by task number: ids differ per side.
                self.render(lost.map(|lost| {
                    let mut shown: Vec<_> = lost
                        .iter()
                        .map(|l| {
                            let index = self.ids.iter().position(|id| *id == l.id);
                            (index, l.attempt, l.state)
                        })
                        .collect();
                    shown.sort();
                    shown
                }))
            }
            Op::Complete {
                task,
                attempt_shift,
                outcome,
            } => {
                let attempt = self.attempt(*task, *attempt_shift).await;
                let outcome = match outcome {
                    0 => Completion::Success {
                        http_status: 200,
                        result: b"{\"ok\":true}".to_vec(),
                        content_type: Some("application/json".into()),
                    },
                    1 => Completion::Retry {
                        next_run_at: now.saturating_add(Duration::from_millis(500)),
                        reason: "http_503".into(),
                        http_status: Some(503),
                    },
                    2 => Completion::Retry {
                        next_run_at: now,
                        reason: "timeout".into(),
                        http_status: None,
                    },
                    3 => Completion::Failed {
                        reason: "http_400".into(),
                        http_status: Some(400),
                    },
                    _ => Completion::Failed {
                        reason: "timeout".into(),
                        http_status: None,
                    },
                };
                let got = self
                    .store
                    .complete(self.id(*task), attempt, outcome, now)
                    .await;
                self.render(got.map(|g| self.show_guarded(&g)))
            }
            Op::Cancel(i) => {
                let got = self.store.cancel(self.id(*i), Scope::Admin, now).await;
                self.render(got.map(|t| self.show(&t)))
            }
            Op::Release {
                task,
                attempt_shift,
            } => {
                let attempt = self.attempt(*task, *attempt_shift).await;
                let got = self.store.release(self.id(*task), attempt, now).await;
                self.render(got.map(|g| self.show_guarded(&g)))
            }
            Op::Recover => self.render(self.store.recover_expired(now).await),
            Op::List {
                state,
                limit,
                after,
            } => {
                let got = self
                    .store
                    .list(
                        ListQuery {
                            filter: TaskFilter::state(*state),
                            limit: *limit,
                            after: after.map(Cursor::from_position),
                            max_result_bytes: None,
                            ..ListQuery::default()
                        },
                        Scope::Admin,
                    )
                    .await;
                self.render(got.map(|Page { tasks, next }| (self.show_all(&tasks), next)))
            }
            Op::Count => {
                let got = self.store.count_by_state().await;
                self.render(got.map(|c| c.iter().collect::<Vec<_>>()))
            }
            Op::NextDue => self.render(self.store.next_due().await),
            Op::Tick(_) => String::new(),
        }
    }

    fn show(&self, task: &Task) -> String {
        let index = self.ids.iter().position(|id| *id == task.id);
        let mut task = task.clone();
        task.id = TaskId::new(Timestamp::from_millis(0), [0; 10]);
        format!("#{index:?} {task:?}")
    }

    fn show_all(&self, tasks: &[Task]) -> Vec<String> {
        tasks.iter().map(|t| self.show(t)).collect()
    }

    fn show_guarded(&self, guarded: &Guarded) -> String {
        match guarded {
            Guarded::Applied(state) => format!("applied {state}"),
            Guarded::Lost(state) => format!("lost {state}"),
        }
    }

    fn render<T: std::fmt::Debug>(&self, got: Result<T, StoreError>) -> String {
        format!("{got:?}")
    }
}

async fn check(ops: Vec<Op>) -> Result<(), String> {
    let mut sqlite = Side {
        store: SqliteStore::open_in_memory(StoreConfig::default())
            .await
            .unwrap(),
        ids: Vec::new(),
    };
    let mut model = Side {
        store: MemoryStore::new(),
        ids: Vec::new(),
    };
    let mut now = Timestamp::from_millis(1_767_323_045_678);
    let mut verdict = Ok(());
    for (step, op) in ops.iter().enumerate() {
        if let Op::Tick(ms) = op {
            now = now.saturating_add(Duration::from_millis(*ms));
        }
        let want = model.apply(op, now).await;
        let got = sqlite.apply(op, now).await;
        if got != want {
            verdict = Err(format!(
                "step {step} ({op:?}): SqliteStore answered\n  {got}\nthe model\n  {want}"
            ));
            break;
        }
    }
    sqlite.store.close().await;
    verdict
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: CASES,
        // Each case opens a database: shrinking is bounded too.
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    })]

    #[test]
    fn sqlite_answers_like_the_in_memory_model(
        ops in prop::collection::vec(any_op(), 1..MAX_STEPS)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let verdict = runtime.block_on(check(ops));
        prop_assert!(verdict.is_ok(), "{}", verdict.unwrap_err());
    }
}
