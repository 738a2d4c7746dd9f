//! Phase 7 (`--store postgres`), several nodes: submit and end-to-end rates
//! of 1, 2 and 3 tc-server processes on one PostgreSQL database, beside one
//! on SQLite, with the CPU each run cost per task, split into the nodes'
//! and PostgreSQL's.
//!
//! One node of each store also queues a backlog in batch submits of 1000
//! (random UUIDv4 keys) while its destination is paused, then resumes it:
//! the batch submit rate and the drain rate, the same way on
//! SQLite and PostgreSQL.
//!
//! On this machine every node, PostgreSQL and the load generator share the
//! same cores, so more nodes cannot add CPU; the CPU per task says what a
//! core per node would give (`1 / (cpu per task)` tasks/s per core).

use std::process::Command;

use tc_store_pg::testing::TestDatabase;

use super::one_node::{BATCH, post};
use super::*;
use crate::bench::pg_wal::{self, WalCount};

/// One run: a store, a number of nodes.
struct Run {
    store: &'static str,
    nodes: usize,
}

/// What one run measured.
struct Measured {
    submit_rate: f64,
    e2e_rate: f64,
    /// What the end-to-end run cost, per task.
    cpu: Cpu,
    /// One node only: the batch submit and drain rates.
    queue: Option<Queued>,
    /// PostgreSQL only: statements (or transactions) of the database per
    /// task over the end-to-end run, the bench's `/metrics` polls included.
    statements: Option<(f64, Counted)>,
    /// PostgreSQL only: what the run's schema wrote to the WAL over the
    /// end-to-end run (or why it was not counted).
    wal: Option<Result<WalCount, String>>,
}

/// A WAL figure of one node: its key, its name, its target (at most, per
/// task) and what of the count it reads.
type WalFigure = (&'static str, &'static str, f64, fn(&WalCount) -> u64);

/// A PostgreSQL run's figures that the scale-out targets compare.
struct ScaleOut {
    nodes: usize,
    e2e_rate: f64,
    statements: Option<(f64, Counted)>,
}

/// A backlog queued in batches while its destination was paused, then
/// drained.
struct Queued {
    batch_rate: f64,
    /// What the batches cost, per task queued.
    batch_cpu: Cpu,
    drain_rate: f64,
    tasks: u64,
    /// What the drain alone cost, per drained task (PostgreSQL's 0 on
    /// SQLite); a drain that leaves cores idle is bound by waits, not by CPU.
    drain_cpu: Cpu,
}

impl Bench {
    pub(super) async fn nodes(&mut self) -> Result<(), String> {
        let db = TestDatabase::connect()
            .await
            .map_err(|skip| format!("{skip}: --store postgres needs PostgreSQL"))?;
        let runs = [
            Run {
                store: "sqlite",
                nodes: 1,
            },
            Run {
                store: "postgres",
                nodes: 1,
            },
            Run {
                store: "postgres",
                nodes: 2,
            },
            Run {
                store: "postgres",
                nodes: 3,
            },
        ];
        let mut sqlite = None;
        let mut sqlite_queue = None;
        // PostgreSQL's one node and three: end to end, statements per task.
        let mut postgres_nodes: Vec<ScaleOut> = Vec::new();
        for run in runs {
            let measured = self.nodes_run(&db, &run).await;
            db.cleanup().await?;
            let m = measured?;
            let label = format!("{} × {}", run.store, run.nodes);
            self.progress(&format!(
                "{label}: submit {:.0}/s, end to end {:.0}/s, CPU per task {:.2} ms in the \
                 nodes + {:.2} ms in PostgreSQL",
                m.submit_rate, m.e2e_rate, m.cpu.node_ms, m.cpu.postgres_ms
            ));
            let key = format!("nodes_{}_{}", run.store, run.nodes);
            let (sqlite_submit, sqlite_e2e) = *sqlite.get_or_insert((m.submit_rate, m.e2e_rate));
            // The targets compare PostgreSQL's one node with SQLite's.
            let one_postgres = run.store == "postgres" && run.nodes == 1;
            if run.store == "postgres" {
                postgres_nodes.push(ScaleOut {
                    nodes: run.nodes,
                    e2e_rate: m.e2e_rate,
                    statements: m.statements,
                });
            }
            let cpu = m.cpu.node_ms + m.cpu.postgres_ms;
            let per_core = if cpu > 0.0 { 1000.0 / cpu } else { 0.0 };
            self.push(
                Figure::new(
                    &format!("{key}_submit"),
                    &format!("7 submits/s, {label} node(s)"),
                    m.submit_rate,
                    "/s",
                )
                .beside(sqlite_submit, "sqlite × 1"),
            );
            let e2e = Figure::new(
                &format!("{key}_e2e"),
                &format!("7 end to end tasks/s, {label} node(s)"),
                m.e2e_rate,
                "/s",
            )
            .beside(sqlite_e2e, "sqlite × 1");
            self.push(
                if one_postgres {
                    e2e.target(Target::RatioAtLeast(0.7))
                } else {
                    e2e
                }
                .note(format!(
                    "CPU per task {:.2} ms (nodes {:.2} + PostgreSQL {:.2}): ~{per_core:.0} \
                     tasks/s per core; {}{}",
                    cpu,
                    m.cpu.node_ms,
                    m.cpu.postgres_ms,
                    busy_words(m.cpu.busy),
                    m.statements
                        .map_or(String::new(), |(per_task, counted)| format!(
                            "; {per_task:.2} {} per task",
                            counted.as_str()
                        ))
                )),
            );
            if let Some(q) = &m.queue {
                let (sqlite_batch, sqlite_drain) =
                    *sqlite_queue.get_or_insert((q.batch_rate, q.drain_rate));
                self.push(
                    Figure::new(
                        &format!("{key}_batch"),
                        &format!("7 batch-of-{BATCH} tasks/s, {label} node"),
                        q.batch_rate,
                        "/s",
                    )
                    .beside(sqlite_batch, "sqlite × 1")
                    .target(Target::RatioAtLeast(1.0))
                    .note(format!(
                        "random UUIDv4 keys, 8 connections, destination paused; {}",
                        q.batch_cpu.words()
                    )),
                );
                self.push(
                    Figure::new(
                        &format!("{key}_drain"),
                        &format!(
                            "7 drain of {} queued tasks/s, {label} node",
                            thousands(q.tasks)
                        ),
                        q.drain_rate,
                        "/s",
                    )
                    .beside(sqlite_drain, "sqlite × 1")
                    .target(Target::RatioAtLeast(0.7))
                    .note(format!(
                        "the batches above, then the destination resumed; CPU per task {:.2} ms \
                         in the node + {:.2} ms in PostgreSQL; {}",
                        q.drain_cpu.node_ms,
                        q.drain_cpu.postgres_ms,
                        busy_words(q.drain_cpu.busy)
                    )),
                );
            }
            if one_postgres {
                self.postgres_figures(&key, &m);
            }
            self.detail(
                &key,
                json!({
                    "store": run.store,
                    "nodes": run.nodes,
                    "submit_rate": m.submit_rate,
                    "e2e_rate": m.e2e_rate,
                    "node_cpu_ms_per_task": m.cpu.node_ms,
                    "postgres_cpu_ms_per_task": m.cpu.postgres_ms,
                    "batch_rate": m.queue.as_ref().map(|q| q.batch_rate),
                    "drain_rate": m.queue.as_ref().map(|q| q.drain_rate),
                    "drain_tasks": m.queue.as_ref().map(|q| q.tasks),
                    "drain_node_cpu_ms_per_task": m.queue.as_ref().map(|q| q.drain_cpu.node_ms),
                    "drain_postgres_cpu_ms_per_task":
                        m.queue.as_ref().map(|q| q.drain_cpu.postgres_ms),
                    "busy_cores": m.cpu.busy.map(|(cores, _)| cores),
                    "drain_busy_cores": m.queue.as_ref().and_then(|q| q.drain_cpu.busy)
                        .map(|(cores, _)| cores),
                    "statements_per_task": m.statements.map(|(n, _)| n),
                    "wal_records_per_task": m.wal.as_ref().and_then(|w| w.as_ref().ok())
                        .map(|w| w.records as f64 / self.plan.e2e_tasks as f64),
                    "btree_entries_per_task": m.wal.as_ref().and_then(|w| w.as_ref().ok())
                        .map(|w| w.btree_entries as f64 / self.plan.e2e_tasks as f64),
                    "statements_counted": m.statements.map(|(_, c)| c.as_str()),
                }),
            );
        }
        self.scale_out_figures(&postgres_nodes);
        Ok(())
    }

    /// The layout's figures of one PostgreSQL node: its CPU per drained task
    /// and what the end-to-end run wrote to the WAL per task.
    fn postgres_figures(&mut self, key: &str, m: &Measured) {
        if let Some(q) = &m.queue {
            self.push(
                Figure::new(
                    &format!("{key}_drain_cpu"),
                    "7 PostgreSQL CPU per drained task, postgres × 1 node",
                    q.drain_cpu.postgres_ms,
                    "ms",
                )
                .target(Target::AtMost(0.12))
                .note(
                    "every process named postgres on the machine, over the drain alone".to_owned(),
                ),
            );
        }
        let tasks = self.plan.e2e_tasks as f64;
        let figures: [WalFigure; 2] = [
            (
                "wal_records",
                "7 WAL records per task, postgres × 1 node",
                15.0,
                |wal| wal.records,
            ),
            (
                "btree_entries",
                "7 B-tree entries per task, postgres × 1 node",
                10.0,
                |wal| wal.btree_entries,
            ),
        ];
        for (what, name, most, counted) in figures {
            let key = format!("{key}_{what}");
            let figure = match &m.wal {
                Some(Ok(wal)) => {
                    let n = counted(wal);
                    Figure::new(&key, name, n as f64 / tasks, "per task")
                        .target(Target::AtMost(most))
                        .note(
                            "the run's schema's relations, from pg_waldump over the end-to-end \
                             run (submits, claims, ends; commit records not counted)"
                                .to_owned(),
                        )
                }
                Some(Err(why)) => Figure::failed(&key, name, "per task", why.clone()),
                None => continue,
            };
            self.push(figure);
        }
    }

    /// The scale-out figures: three PostgreSQL nodes against one,
    /// end to end and in statements (or transactions) per task.
    fn scale_out_figures(&mut self, postgres_nodes: &[ScaleOut]) {
        let of = |nodes: usize| postgres_nodes.iter().find(|run| run.nodes == nodes);
        let (Some(one), Some(three)) = (of(1), of(3)) else {
            return;
        };
        let (one_e2e, one_statements) = (one.e2e_rate, one.statements);
        let (three_e2e, three_statements) = (three.e2e_rate, three.statements);
        self.push(
            Figure::new(
                "nodes_postgres_3_over_1_e2e",
                "7 end to end tasks/s, postgres × 3 nodes against × 1",
                three_e2e,
                "/s",
            )
            .beside(one_e2e, "postgres × 1")
            .target(Target::RatioAtLeast(1.0)),
        );
        if let (Some((one, counted)), Some((three, three_counted))) =
            (one_statements, three_statements)
            && counted == three_counted
        {
            self.push(
                Figure::new(
                    "nodes_postgres_3_over_1_per_task",
                    &format!(
                        "7 {} per task, postgres × 3 nodes against × 1",
                        counted.as_str()
                    ),
                    three,
                    "per task",
                )
                .beside(one, "postgres × 1")
                .target(Target::RatioAtMost(1.2)),
            );
        }
    }

    async fn nodes_run(&self, db: &TestDatabase, run: &Run) -> Result<Measured, String> {
        let n = self.plan.e2e_tasks;
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let name = format!("{}-{}", run.store, run.nodes);
        let mut schema = None;
        let target = match run.store {
            "postgres" => {
                let fresh = db.fresh_schema();
                db.execute(&format!("CREATE SCHEMA {fresh}")).await?;
                let sep = if db.url().contains('?') { '&' } else { '?' };
                let url = format!("{}{sep}options=-csearch_path%3D{fresh}", db.url());
                schema = Some(fresh);
                url
            }
            _ => self.db(&name).display().to_string(),
        };
        // The same total concurrency whatever the number of nodes.
        let per_node = (self.plan.connections / run.nodes).max(1);
        let mut nodes = Vec::new();
        for i in 0..run.nodes {
            let mut command = Command::new(&self.tc_server);
            command
                .args(["--listen", "127.0.0.1:0", "--db", &target])
                .args(["--log-format", "json", "--sync", "full"])
                .args(["--concurrency", &per_node.to_string()])
                .env_remove("RUST_LOG");
            nodes.push(ServerProcess::start(
                &format!("tc-server ({name} #{i})"),
                command,
            )?);
        }
        let mark = CpuMark::take(&nodes)?;
        let statements_before = match run.store {
            "postgres" => statements_so_far(db).await,
            _ => None,
        };
        let wal_before = match &schema {
            Some(_) => Some(pg_wal::position(db).await),
            None => None,
        };
        let started = Instant::now();
        let mut submits = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            let endpoint = Endpoint::new(node.addr);
            let url = down.url();
            let share = n / run.nodes as u64 + u64::from((i as u64) < n % run.nodes as u64);
            let load = Load {
                connections: per_node,
                max_requests: share,
                max_duration: self.plan.patience,
            };
            let prefix = format!("{name}-{i}-{}", self.clock.elapsed().as_nanos());
            submits.push(tokio::spawn(async move {
                load::run(
                    &endpoint,
                    load,
                    load::submits(url, prefix, ""),
                    load::created,
                )
                .await
            }));
        }
        let mut submitted = 0;
        for submit in submits {
            let outcome = submit.await.map_err(|e| format!("submit task: {e}"))??;
            submitted += outcome.ok;
        }
        let submit_elapsed = started.elapsed();
        if submitted != n {
            return Err(format!("{name}: only {submitted} of {n} submits"));
        }
        // /metrics counts come from the shared database: any node sees all.
        let endpoint = Endpoint::new(nodes[0].addr);
        let (_, done) = self
            .wait_terminal(&endpoint, n, started + self.plan.patience)
            .await?;
        let e2e_elapsed = done - started;
        let cpu = mark.per_task(&nodes, n, e2e_elapsed)?;
        let statements = match statements_before {
            Some((before, counted)) => statements_so_far(db)
                .await
                .filter(|&(_, now_counted)| now_counted == counted)
                .map(|(after, _)| (after.saturating_sub(before) as f64 / n as f64, counted)),
            None => None,
        };
        let wal = match (&schema, wal_before) {
            (Some(schema), Some(before)) => Some(match (before, pg_wal::position(db).await) {
                (Ok(start), Ok(end)) => pg_wal::count(db, schema, start, end).await,
                (Err(e), _) | (_, Err(e)) => Err(e),
            }),
            _ => None,
        };
        let queue = match nodes.as_slice() {
            [node] => Some(self.queue_and_drain(node, &down, n).await?),
            _ => None,
        };
        for node in nodes {
            node.stop();
        }
        Ok(Measured {
            queue,
            statements,
            wal,
            submit_rate: stats::rate(n, submit_elapsed),
            e2e_rate: stats::rate(n, e2e_elapsed),
            cpu,
        })
    }
}

impl Bench {
    /// Queues `n` tasks (batches of [`BATCH`]) behind the downstream's paused
    /// destination on a node that has run `done` tasks to the end, then
    /// resumes it and waits until all are terminal.
    async fn queue_and_drain(
        &self,
        node: &ServerProcess,
        down: &HttpDownstream,
        done: u64,
    ) -> Result<Queued, String> {
        let endpoint = Endpoint::new(node.addr);
        let destination = down.destination();
        post(&endpoint, &format!("/destinations/{destination}/pause")).await?;
        let node = std::slice::from_ref(node);
        let mark = CpuMark::take(node)?;
        let started = Instant::now();
        let queued = self
            .batches(
                &endpoint,
                &down.url(),
                done.div_ceil(BATCH),
                self.plan.patience,
            )
            .await?;
        let batch_elapsed = started.elapsed();
        let tasks = queued.ok * BATCH;
        if tasks == 0 {
            return Err(format!("no batch was accepted: {}", queued.problems()));
        }
        let batch_cpu = mark.per_task(node, tasks, batch_elapsed)?;
        let mark = CpuMark::take(node)?;
        let started = Instant::now();
        post(&endpoint, &format!("/destinations/{destination}/resume")).await?;
        let (_, drained) = self
            .wait_terminal(&endpoint, done + tasks, started + self.plan.patience)
            .await?;
        let drain_cpu = mark.per_task(node, tasks, drained - started)?;
        Ok(Queued {
            batch_cpu,
            batch_rate: stats::rate(tasks, batch_elapsed),
            drain_rate: stats::rate(tasks, drained - started),
            tasks,
            drain_cpu,
        })
    }
}

/// What [`statements_so_far`] counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// Top-level statements of this database (`pg_stat_statements`).
    Statements,
    /// Transactions of this database (`pg_stat_database`; updated by each
    /// backend at most once a second, so a reading right after a run can
    /// miss the last second's).
    Transactions,
}

impl Counted {
    fn as_str(self) -> &'static str {
        match self {
            Counted::Statements => "statements",
            Counted::Transactions => "transactions",
        }
    }
}

/// How many statements this database has run so far, where the server
/// counts them (`pg_stat_statements`, when loaded and created in it), else
/// how many transactions it has committed or rolled back.
async fn statements_so_far(db: &TestDatabase) -> Option<(i64, Counted)> {
    let statements = db
        .query_i64(
            "SELECT sum(calls)::bigint FROM pg_stat_statements \
             WHERE toplevel AND dbid = (SELECT oid FROM pg_database \
                                        WHERE datname = current_database())",
        )
        .await;
    if let Ok(Some(n)) = statements {
        return Some((n, Counted::Statements));
    }
    let transactions = db
        .query_i64(
            "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database \
             WHERE datname = current_database()",
        )
        .await;
    transactions
        .ok()
        .flatten()
        .map(|n| (n, Counted::Transactions))
}

/// `sysconf(_SC_CLK_TCK)` on Linux, which /proc reports times in.
pub(super) const CLOCK_TICKS_PER_S: f64 = 100.0;

/// utime + stime of a process, in clock ticks (fields 14 and 15 of
/// /proc/<pid>/stat, counted after the parenthesised command name).
pub(super) fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // after ')': state is field 3, so utime (14) and stime (15) are 11, 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn nodes_cpu_ticks(nodes: &[ServerProcess]) -> Result<u64, String> {
    nodes
        .iter()
        .map(|n| cpu_ticks(n.pid()).ok_or_else(|| format!("{}: no /proc stat", n.name)))
        .sum()
}

/// CPU of every process named `postgres` on the machine: the server and its
/// backends (other users of the same server count too; the bench says so).
fn postgres_cpu_ticks() -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "postgres")
        })
        .filter_map(cpu_ticks)
        .sum()
}

/// Where a stretch of a run starts: the CPU its nodes, PostgreSQL and the
/// machine have used so far.
struct CpuMark {
    nodes: u64,
    postgres: u64,
    machine: Option<MachineTicks>,
}

impl CpuMark {
    fn take(nodes: &[ServerProcess]) -> Result<CpuMark, String> {
        Ok(CpuMark {
            nodes: nodes_cpu_ticks(nodes)?,
            postgres: postgres_cpu_ticks(),
            machine: machine_ticks(),
        })
    }

    /// What the stretch since the mark cost per task, `tasks` done by the
    /// same `nodes` over `elapsed`.
    fn per_task(
        &self,
        nodes: &[ServerProcess],
        tasks: u64,
        elapsed: Duration,
    ) -> Result<Cpu, String> {
        let ms_per_task = |ticks: u64| ticks as f64 * 1000.0 / CLOCK_TICKS_PER_S / tasks as f64;
        Ok(Cpu {
            node_ms: ms_per_task(nodes_cpu_ticks(nodes)?.saturating_sub(self.nodes)),
            // A backend that ended meanwhile takes its ticks with it: saturate.
            postgres_ms: ms_per_task(postgres_cpu_ticks().saturating_sub(self.postgres)),
            busy: match (self.machine, machine_ticks()) {
                (Some(before), Some(after)) => Some(after.busy_cores_since(before, elapsed)),
                _ => None,
            },
        })
    }
}

/// CPU per task over a stretch of a run: the nodes' and PostgreSQL's
/// processes, in ms, and the machine's busy cores (of how many).
struct Cpu {
    node_ms: f64,
    postgres_ms: f64,
    busy: Option<(f64, usize)>,
}

impl Cpu {
    fn words(&self) -> String {
        format!(
            "CPU per task {:.3} ms in the node + {:.3} ms in PostgreSQL; {}",
            self.node_ms,
            self.postgres_ms,
            busy_words(self.busy)
        )
    }
}

/// The machine's CPU time so far (`/proc/stat`'s first line), in clock
/// ticks, and its number of cores.
#[derive(Debug, Clone, Copy, PartialEq)]
struct MachineTicks {
    busy: u64,
    cores: usize,
}

impl MachineTicks {
    /// Reads `/proc/stat`'s text: the `cpu` line's fields (user, nice,
    /// system, idle, iowait, irq, softirq, steal, …); idle and iowait are
    /// not busy. Guest time is inside user already and is not added again.
    fn parse(stat: &str) -> Option<MachineTicks> {
        let mut lines = stat.lines();
        let fields: Vec<u64> = lines
            .next()?
            .strip_prefix("cpu ")?
            .split_whitespace()
            .take(8)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
        let cores = lines
            .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
            .count();
        Some(MachineTicks {
            busy: fields.iter().sum::<u64>().saturating_sub(idle),
            cores,
        })
    }

    /// Busy cores on average since `before`, over `elapsed`, and how many
    /// the machine has.
    fn busy_cores_since(self, before: MachineTicks, elapsed: Duration) -> (f64, usize) {
        let ticks = self.busy.saturating_sub(before.busy) as f64;
        let seconds = elapsed.as_secs_f64().max(f64::EPSILON);
        (ticks / CLOCK_TICKS_PER_S / seconds, self.cores)
    }
}

fn machine_ticks() -> Option<MachineTicks> {
    MachineTicks::parse(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// How busy the machine was, in words for a figure's note.
fn busy_words(busy: Option<(f64, usize)>) -> String {
    match busy {
        Some((cores, of)) => format!("the machine {cores:.2} of {of} cores busy"),
        None => "the machine's busy cores not read (no /proc/stat)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_machine_s_busy_ticks_and_cores() {
        fn check(stat: &str, want: Option<MachineTicks>) {
            assert_eq!(MachineTicks::parse(stat), want, "{stat}");
        }
        check(
            "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\n\
             cpu1 50 3 25 400 10 2 1 5 0 0\nintr 1 2\n",
            Some(MachineTicks {
                busy: 170,
                cores: 2,
            }),
        );
        check("intr 1 2\n", None);
        check("cpu  1 2 x\n", None);
    }

    #[test]
    fn busy_cores_are_busy_ticks_over_the_elapsed_time() {
        let before = MachineTicks {
            busy: 100,
            cores: 2,
        };
        let after = MachineTicks {
            busy: 250,
            cores: 2,
        };
        let (cores, of) = after.busy_cores_since(before, Duration::from_secs(1));
        assert!((cores - 150.0 / CLOCK_TICKS_PER_S).abs() < 1e-9, "{cores}");
        assert_eq!(of, 2);
    }

    #[test]
    fn this_process_has_cpu_ticks() {
        assert!(cpu_ticks(std::process::id()).is_some());
    }
}
