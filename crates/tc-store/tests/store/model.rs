//! The store property test: random sequences of operations, applied to
//! SqliteStore and to the reference MemoryStore (tc-testkit), must give the
//! same answers step by step. Seeded, so a failure repeats; bounded in steps.

use std::time::Duration;

use tc_model::store::{Completion, Cursor, Guarded, ListQuery, Page, StoreError, TaskStore};
use tc_model::{Limits, NewTask, State, Task, TaskId, Timestamp};
use tc_store::{SqliteStore, StoreConfig};
use tc_testkit::memory_store::MemoryStore;

const SEEDS: u64 = 24;
const STEPS: usize = 120;

/// One operation, with task references as indexes into the submitted tasks.
#[derive(Debug, Clone)]
enum Op {
    Submit {
        key: u8,
        variant: u8,
    },
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
    List {
        state: Option<State>,
        limit: usize,
        after: Option<i64>,
    },
    Count,
    NextDue,
    Tick(u64),
}

fn random_op(rng: &mut fastrand::Rng, known: usize) -> Op {
    let task = |rng: &mut fastrand::Rng| rng.usize(..known.max(1));
    // Weighted towards claims and completions, where the guards are.
    match rng.u8(..16) {
        0 => Op::Submit {
            key: rng.u8(..8),
            variant: rng.u8(..2),
        },
        1 => Op::Get(task(rng)),
        2..=4 => Op::Claim(rng.usize(..4)),
        5 => Op::Heartbeat(
            (0..rng.usize(..3))
                .map(|_| (task(rng), rng.i64(-1..=0)))
                .collect(),
        ),
        6..=9 => Op::Complete {
            task: task(rng),
            attempt_shift: rng.i64(-1..=0),
            outcome: rng.u8(..5),
        },
        10 => Op::Cancel(task(rng)),
        11 => Op::Release {
            task: task(rng),
            attempt_shift: rng.i64(-1..=0),
        },
        12 => Op::Recover,
        13 => Op::List {
            state: rng
                .choice([None, Some(State::Pending), Some(State::Running)])
                .flatten(),
            limit: rng.usize(..4),
            after: rng.bool().then(|| rng.i64(0..8)),
        },
        14 => match rng.u8(..2) {
            0 => Op::Count,
            _ => Op::NextDue,
        },
        _ => Op::Tick(rng.u64(0..3_000)),
    }
}

/// One store under test and the ids it gave, in submit order.
struct Side<S> {
    store: S,
    ids: Vec<TaskId>,
}

impl<S: TaskStore> Side<S> {
    /// The id of the `i`th submitted task, or a stranger when none exists.
    fn id(&self, i: usize) -> TaskId {
        self.ids
            .get(i)
            .copied()
            .unwrap_or_else(|| TaskId::new(Timestamp::from_millis(0), [0xaa; 10]))
    }

    /// The task's current attempt shifted by `shift` (a stale attempt at -1).
    async fn attempt(&self, i: usize, shift: i64) -> u32 {
        let attempt = match self.store.get(self.id(i)).await {
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
            Op::Submit { key, variant } => {
                let new = NewTask::new(
                    format!("http://downstream.test/{variant}"),
                    b"{}".to_vec(),
                    format!("key-{key}"),
                    3,
                    Duration::from_secs(1),
                    &Limits::default(),
                )
                .unwrap();
                let got = self.store.submit(new, now).await;
                if let Ok(submitted) = &got
                    && submitted.created
                {
                    self.ids.push(submitted.task.id);
                }
                self.render(got.map(|s| (self.show(&s.task), s.created)))
            }
            Op::Get(i) => {
                let got = self.store.get(self.id(*i)).await;
                self.render(got.map(|t| self.show(&t)))
            }
            Op::Claim(n) => {
                let got = self.store.claim_due(*n, now, lease).await;
                self.render(got.map(|ts| self.show_all(&ts)))
            }
            Op::Heartbeat(pairs) => {
                let mut running = Vec::new();
                for (i, shift) in pairs {
                    running.push((self.id(*i), self.attempt(*i, *shift).await));
                }
                // Shorter than a claim's lease: a heartbeat must never shorten one.
                let lease = Duration::from_millis(500);
                self.render(self.store.heartbeat(running, now, lease).await)
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
                let got = self.store.cancel(self.id(*i), now).await;
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
                    .list(ListQuery {
                        state: *state,
                        limit: *limit,
                        after: after.map(Cursor::from_position),
                        max_result_bytes: None,
                    })
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
            Guarded::Applied(task) => format!("applied {}", self.show(task)),
            Guarded::Lost(state) => format!("lost {state}"),
        }
    }

    fn render<T: std::fmt::Debug>(&self, got: Result<T, StoreError>) -> String {
        format!("{got:?}")
    }
}

async fn check(seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
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
    let mut done = Vec::new();
    for step in 0..STEPS {
        let op = random_op(&mut rng, model.ids.len());
        if let Op::Tick(ms) = op {
            now = now.saturating_add(Duration::from_millis(ms));
        }
        let want = model.apply(&op, now).await;
        let got = sqlite.apply(&op, now).await;
        done.push(op);
        assert_eq!(
            got, want,
            "seed {seed}, step {step}: SqliteStore and the model disagree after {done:#?}"
        );
    }
    sqlite.store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_answers_like_the_in_memory_model() {
    for seed in 0..SEEDS {
        check(seed).await;
    }
}
