//! Where a drained or streamed task's time goes in the worker's claim loop,
//! from tc-server's own counters (`taskcenter_claims_total`,
//! `taskcenter_claim_slots_total`, `taskcenter_claim_tasks_total`,
//! `taskcenter_claim_seconds_total`, `taskcenter_claim_slot_wait_seconds_total`)
//! read before and after a window: how many claims, how many tasks each got
//! of the free slots it asked for, how long each spent in the store (the
//! writer's queue, the claim's walk and its write round), and what share of
//! the window the loop spent claiming and waiting for a free slot.

use super::*;

/// The claim loop's counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct ClaimCounters {
    claims: f64,
    slots: f64,
    tasks: f64,
    seconds: f64,
    slot_wait_seconds: f64,
}

impl ClaimCounters {
    /// The counters in a `/metrics` text (zero where one is missing).
    pub(super) fn parse(text: &str) -> ClaimCounters {
        let value = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        ClaimCounters {
            claims: value("taskcenter_claims_total"),
            slots: value("taskcenter_claim_slots_total"),
            tasks: value("taskcenter_claim_tasks_total"),
            seconds: value("taskcenter_claim_seconds_total"),
            slot_wait_seconds: value("taskcenter_claim_slot_wait_seconds_total"),
        }
    }

    /// The counters of tc-server at `endpoint` now.
    pub(super) async fn read(endpoint: &Endpoint) -> Result<ClaimCounters, String> {
        let mut conn = Conn::open(endpoint.addr).await?;
        let reply = conn
            .send(endpoint.request(Method::GET, "/metrics", None)?)
            .await?;
        if reply.status != StatusCode::OK {
            return Err(format!("/metrics: status {}", reply.status));
        }
        Ok(ClaimCounters::parse(&String::from_utf8_lossy(&reply.body)))
    }

    /// What the counters grew by since `before`, over `elapsed`.
    pub(super) fn since(&self, before: &ClaimCounters, elapsed: Duration) -> ClaimSplit {
        ClaimSplit {
            claims: self.claims - before.claims,
            slots: self.slots - before.slots,
            tasks: self.tasks - before.tasks,
            seconds: self.seconds - before.seconds,
            slot_wait_seconds: self.slot_wait_seconds - before.slot_wait_seconds,
            elapsed: elapsed.as_secs_f64(),
        }
    }
}

/// The claim loop's share of one window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct ClaimSplit {
    claims: f64,
    slots: f64,
    tasks: f64,
    seconds: f64,
    slot_wait_seconds: f64,
    elapsed: f64,
}

impl ClaimSplit {
    fn per_claim(&self, x: f64) -> f64 {
        if self.claims > 0.0 {
            x / self.claims
        } else {
            0.0
        }
    }

    fn share(&self, x: f64) -> f64 {
        if self.elapsed > 0.0 {
            x / self.elapsed
        } else {
            0.0
        }
    }

    /// One line: claims/s, tasks and slots per claim, ms in the store per
    /// claim, the loop's share of the window claiming and waiting for slots.
    pub(super) fn line(&self) -> String {
        format!(
            "{:.0} claims/s, {:.1} tasks of {:.1} free slots per claim, {:.2} ms in the store \
             per claim; the claim loop claiming {:.0}% of the time, waiting for a free slot {:.0}%",
            self.share(self.claims),
            self.per_claim(self.tasks),
            self.per_claim(self.slots),
            self.per_claim(self.seconds) * 1000.0,
            self.share(self.seconds) * 100.0,
            self.share(self.slot_wait_seconds) * 100.0,
        )
    }

    pub(super) fn json(&self) -> Value {
        json!({
            "claims": self.claims,
            "claims_per_second": self.share(self.claims),
            "tasks_per_claim": self.per_claim(self.tasks),
            "slots_per_claim": self.per_claim(self.slots),
            "store_ms_per_claim": self.per_claim(self.seconds) * 1000.0,
            "claiming_share": self.share(self.seconds),
            "slot_wait_share": self.share(self.slot_wait_seconds),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counters_are_read_from_the_metrics_text_and_split_per_claim() {
        let text = |claims: u32, tasks: u32, seconds: f64| {
            format!(
                "# TYPE taskcenter_claims counter\ntaskcenter_claims_total {claims}\n\
                 taskcenter_claim_slots_total {}\ntaskcenter_claim_tasks_total {tasks}\n\
                 taskcenter_claim_seconds_total {seconds}\n\
                 taskcenter_claim_slot_wait_seconds_total 0.5\n",
                claims * 64
            )
        };
        let before = ClaimCounters::parse(&text(10, 100, 0.25));
        let after = ClaimCounters::parse(&text(110, 3_300, 0.75));
        let split = after.since(&before, Duration::from_secs(2));
        let got = split.json();
        for (key, want) in [
            ("claims_per_second", 50.0),
            ("tasks_per_claim", 32.0),
            ("slots_per_claim", 64.0),
            ("store_ms_per_claim", 5.0),
            ("claiming_share", 0.25),
            ("slot_wait_share", 0.0),
        ] {
            let value = got[key].as_f64().unwrap_or(f64::NAN);
            assert!((value - want).abs() < 1e-9, "{key}: {value} != {want}");
        }
        assert_eq!(ClaimCounters::parse(""), ClaimCounters::default());
    }
}
