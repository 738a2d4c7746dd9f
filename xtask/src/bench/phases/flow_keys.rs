//! Phase 18, flow keys: key `B`'s end-to-end latency beside key `A`'s
//! 10,000-task backlog on the same instant destination, against `B` alone
//! in the same run (target: at most 3×). Every task is the admin's (no
//! tenants): the claim shares the destination's slots between its due
//! keys, so `A`'s older backlog cannot hold `B`'s tasks.
//!
//! Two runs of phase 13's shape ([`Bench::tenant_run`]) on fresh servers:
//! **alone** (`B` at its pace for one window) and **beside** (`A`'s
//! backlog queued while the destination is paused, then resumed while `B`
//! submits at the same pace). Phase 13's **blind** run (no keys, no
//! tenants: oldest due first) is what the share is compared with in its
//! note. The backlog is 10,000 in `--quick` too (the figure), which
//! drains in a few seconds.

use super::tenants::Shape;
use super::*;

/// `A`'s backlog.
const BACKLOG: u64 = 10_000;

impl Bench {
    pub(super) async fn flow_keys(&mut self) -> Result<(), String> {
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let shape = |name, flow_keys, backlog| Shape {
            name,
            tenants: false,
            flow_keys,
            backlog,
            b: true,
        };
        let alone = self
            .tenant_run(shape("flow-keys-alone", true, 0), &down)
            .await?;
        let beside = match self
            .tenant_run(shape("flow-keys-beside", true, BACKLOG), &down)
            .await
        {
            Ok(run) => run,
            // A's backlog crawls while B's tasks arrive (docs/performance.md,
            // phase 18): that is the figure, a miss, not a failure to run.
            Err(e) => {
                self.push(
                    Figure::new(
                        "flow_key_b_p99",
                        "18 flow key B's end-to-end p99 beside key A's 10k backlog",
                        f64::INFINITY,
                        "ms",
                    )
                    .beside(alone.p99(), "B alone")
                    .target(Target::RatioAtMost(3.0))
                    .note(format!("not measured to its end: {e}")),
                );
                return Ok(());
            }
        };
        let blind = self
            .tenant_run(shape("flow-keys-blind", false, BACKLOG), &down)
            .await?;
        self.push(
            Figure::new(
                "flow_key_b_p99",
                "18 flow key B's end-to-end p99 beside key A's 10k backlog",
                beside.p99(),
                "ms",
            )
            .beside(alone.p99(), "B alone")
            .target(Target::RatioAtMost(3.0))
            .note(format!(
                "{} of B's tasks beside the backlog, {} alone. Without keys (the claim \
                 oldest due first) B's p99 beside the same backlog was {:.1} ms over {} \
                 tasks. {}{}",
                beside.b_tasks,
                alone.b_tasks,
                blind.p99(),
                blind.b_tasks,
                beside.warnings,
                blind.warnings
            )),
        );
        self.detail(
            "flow_keys",
            json!({
                "backlog": BACKLOG,
                "concurrency": self.plan.connections,
                "alone": alone.json(0),
                "beside": beside.json(BACKLOG),
                "blind": blind.json(BACKLOG),
            }),
        );
        Ok(())
    }
}
