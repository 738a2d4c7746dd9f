//! The worker's Prometheus metrics: attempts by outcome, the claim loop's
//! claims (how many, their size, their time in the store) and the
//! per-destination gauges, with a bounded set of destination labels.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The label of `taskcenter_attempts_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OutcomeLabel {
    /// `success`, `retry`, `failed`, `canceled`, `interrupted` or `lost`.
    pub(crate) outcome: &'static str,
}

/// The label of the per-destination gauges.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DestinationLabel {
    pub(crate) destination: String,
}

/// The labels of `taskcenter_destination_held`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct HeldLabel {
    pub(crate) destination: String,
    /// `paused`, `in_flight`, `rate`, `backoff` or `breaker`.
    pub(crate) reason: &'static str,
}

/// Why a destination is held now, for the `held` metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum HoldReason {
    Paused,
    InFlight,
    Rate,
    Backoff,
    Breaker,
}

impl HoldReason {
    pub(crate) const ALL: [HoldReason; 5] = [
        HoldReason::Paused,
        HoldReason::InFlight,
        HoldReason::Rate,
        HoldReason::Backoff,
        HoldReason::Breaker,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HoldReason::Paused => "paused",
            HoldReason::InFlight => "in_flight",
            HoldReason::Rate => "rate",
            HoldReason::Backoff => "backoff",
            HoldReason::Breaker => "breaker",
        }
    }
}

/// The most destinations that get a label of their own; the others share
/// the label `destination="_other"`, so a task center that calls thousands
/// of hosts still exports a bounded number of series.
pub const DESTINATION_LABELS_LIMIT: usize = 100;

/// The label shared by destinations past [`DESTINATION_LABELS_LIMIT`].
pub const OTHER_DESTINATIONS: &str = "_other";

/// The per-destination gauges, with their label budget.
#[derive(Debug, Clone, Default)]
pub(crate) struct DestinationMetrics {
    pub(crate) in_flight: Family<DestinationLabel, Gauge>,
    pub(crate) held: Family<HeldLabel, Gauge>,
    pub(crate) breaker_open: Family<DestinationLabel, Gauge>,
    pub(crate) paced: Family<HeldLabel, Counter>,
    /// When each destination's client certificate expires, Unix seconds
    /// (only destinations with one: an operator's setting, so bounded).
    pub(crate) client_cert_expiry: Family<DestinationLabel, Gauge>,
    /// Destinations given a label of their own, first come first served.
    labelled: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl DestinationMetrics {
    /// The label `destination` is counted under.
    fn label(&self, destination: &str) -> String {
        let mut labelled = self
            .labelled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if labelled.contains(destination) {
            return destination.to_owned();
        }
        if labelled.len() < DESTINATION_LABELS_LIMIT {
            labelled.insert(destination.to_owned());
            // Its breaker's series exists from now on, at 0 until it opens:
            // alerting rules expect a series for every labelled destination.
            drop(self.breaker_open.get_or_create(&DestinationLabel {
                destination: destination.to_owned(),
            }));
            return destination.to_owned();
        }
        OTHER_DESTINATIONS.to_owned()
    }

    /// Whether `destination` has a label of its own (or could get one).
    fn own_label(&self, destination: &str) -> bool {
        self.label(destination) != OTHER_DESTINATIONS
    }

    pub(crate) fn set_in_flight(&self, destination: &str, n: u64) {
        // Past the budget the shared series cannot be set from one
        // destination's count: only labelled destinations are exported.
        if self.own_label(destination) {
            let destination = destination.to_owned();
            self.in_flight
                .get_or_create(&DestinationLabel { destination })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    pub(crate) fn set_breaker_open(&self, destination: &str, open: bool) {
        if self.own_label(destination) {
            let destination = destination.to_owned();
            self.breaker_open
                .get_or_create(&DestinationLabel { destination })
                .set(i64::from(open));
        }
    }

    /// Counts a pacing change of `destination` (`reason`: `ratelimit`,
    /// `throttled` or `slow_start`).
    pub(crate) fn count_paced(&self, destination: &str, reason: &'static str) {
        let destination = self.label(destination);
        self.paced
            .get_or_create(&HeldLabel {
                destination,
                reason,
            })
            .inc();
    }

    /// Sets the client certificate gauges to `expiries` (destination, its
    /// certificate's `notAfter` in Unix seconds): a destination whose
    /// certificate was removed loses its series.
    pub(crate) fn set_client_cert_expiry(&self, expiries: &[(String, i64)]) {
        self.client_cert_expiry.clear();
        for (destination, not_after) in expiries {
            self.client_cert_expiry
                .get_or_create(&DestinationLabel {
                    destination: destination.clone(),
                })
                .set(*not_after);
        }
    }

    /// Sets the held gauges from totals per (label, reason) computed by the
    /// caller over all destinations; reasons not given drop to 0.
    pub(crate) fn set_held(&self, held: &[(String, &'static str, u64)]) {
        let mut totals: std::collections::HashMap<(String, &'static str), u64> =
            std::collections::HashMap::new();
        for (destination, reason, n) in held {
            *totals.entry((self.label(destination), reason)).or_default() += n;
        }
        // Reset what was set before, then set the new totals.
        let labelled: Vec<String> = self
            .labelled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .chain(std::iter::once(OTHER_DESTINATIONS.to_owned()))
            .collect();
        for destination in labelled {
            for reason in HoldReason::ALL {
                let key = (destination.clone(), reason.as_str());
                let n = totals.remove(&key).unwrap_or(0);
                let label = HeldLabel {
                    destination: destination.clone(),
                    reason: reason.as_str(),
                };
                if n > 0 {
                    self.held
                        .get_or_create(&label)
                        .set(i64::try_from(n).unwrap_or(i64::MAX));
                } else if let Some(gauge) = self.held.get(&label) {
                    gauge.set(0);
                }
            }
        }
    }
}

/// The claim loop's steps: each claim, the free slots it asked tasks for,
/// the tasks it got, its time in the store (from the call to the answer:
/// the writer's queue, the claim's walk and its write round), and the
/// loop's waits for a free slot. Read beside each other they split a
/// drain's or a stream's time per task (`cargo xtask bench`, phase 14).
#[derive(Debug, Clone, Default)]
pub(crate) struct ClaimMetrics {
    pub(crate) claims: Counter,
    pub(crate) slots: Counter,
    pub(crate) tasks: Counter,
    pub(crate) seconds: Counter<f64, AtomicU64>,
    pub(crate) slot_wait_seconds: Counter<f64, AtomicU64>,
}

impl ClaimMetrics {
    /// One claim that answered: `slots` asked for, `tasks` got, `took` in
    /// the store.
    pub(crate) fn claimed(&self, slots: usize, tasks: usize, took: Duration) {
        self.claims.inc();
        self.slots.inc_by(u64::try_from(slots).unwrap_or(u64::MAX));
        self.tasks.inc_by(u64::try_from(tasks).unwrap_or(u64::MAX));
        self.seconds.inc_by(took.as_secs_f64());
    }

    /// The loop waited `waited` for a free slot before a claim.
    pub(crate) fn waited_for_slots(&self, waited: Duration) {
        self.slot_wait_seconds.inc_by(waited.as_secs_f64());
    }
}

/// The worker's metrics. Cheap to clone: every clone updates the same values.
#[derive(Debug, Clone)]
pub struct WorkerMetrics {
    pub(crate) attempts: Family<OutcomeLabel, Counter>,
    pub(crate) claims: ClaimMetrics,
    pub(crate) call_duration: Histogram,
    pub(crate) in_flight: Gauge,
    pub(crate) destinations: DestinationMetrics,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        WorkerMetrics {
            attempts: Family::default(),
            claims: ClaimMetrics::default(),
            // 1 ms .. ~33 s: downstream calls live between a loopback echo and a
            // timeout of several seconds.
            call_duration: Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 16),
            ),
            in_flight: Gauge::default(),
            destinations: DestinationMetrics::default(),
        }
    }
}

impl WorkerMetrics {
    /// Adds the worker's metrics to `registry` (prefix `taskcenter_`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "taskcenter_attempts",
            "Downstream attempts by outcome",
            self.attempts.clone(),
        );
        registry.register(
            "taskcenter_claims",
            "Claims of due tasks made by the worker (those the store answered)",
            self.claims.claims.clone(),
        );
        registry.register(
            "taskcenter_claim_slots",
            "Free slots the worker's claims asked tasks for",
            self.claims.slots.clone(),
        );
        registry.register(
            "taskcenter_claim_tasks",
            "Tasks the worker's claims got",
            self.claims.tasks.clone(),
        );
        registry.register(
            "taskcenter_claim_seconds",
            "Time the worker's claims spent in the store, from the call to the answer",
            self.claims.seconds.clone(),
        );
        registry.register(
            "taskcenter_claim_slot_wait_seconds",
            "Time the claim loop waited for a free slot before a claim",
            self.claims.slot_wait_seconds.clone(),
        );
        registry.register(
            "taskcenter_downstream_call_duration_seconds",
            "Duration of downstream calls",
            self.call_duration.clone(),
        );
        registry.register(
            "taskcenter_calls_in_flight",
            "Downstream calls in flight",
            self.in_flight.clone(),
        );
        registry.register(
            "taskcenter_destination_in_flight",
            "Downstream calls in flight on this node, by destination",
            self.destinations.in_flight.clone(),
        );
        registry.register(
            "taskcenter_destination_held",
            "Pending tasks of a destination while it is held, by reason",
            self.destinations.held.clone(),
        );
        registry.register(
            "taskcenter_destination_breaker_open",
            "1 while a destination's circuit breaker is open or half-open",
            self.destinations.breaker_open.clone(),
        );
        registry.register(
            "taskcenter_destination_paced",
            "Pacing changes by the destination's own signals, by reason: its rate-limit fields said no call is left (ratelimit), a 429 or 503 without them halved its calls in flight (throttled), calls started again from one (slow_start)",
            self.destinations.paced.clone(),
        );
        registry.register(
            "taskcenter_destination_client_cert_expiry_seconds",
            "When a destination's client certificate expires (its notAfter), Unix seconds",
            self.destinations.client_cert_expiry.clone(),
        );
    }

    /// The downstream calls in flight now, as the gauge reads.
    pub fn in_flight_calls(&self) -> i64 {
        self.in_flight.get()
    }

    pub(crate) fn count(&self, outcome: &'static str) {
        self.attempts.get_or_create(&OutcomeLabel { outcome }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exported(metrics: &WorkerMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        text
    }

    /// Prometheus alerting on `breaker_open == 1` needs the series at 0
    /// before it ever opened: every destination given a label exports it.
    #[test]
    fn claims_are_exported_with_their_slots_tasks_and_time() {
        let metrics = WorkerMetrics::default();
        metrics.claims.claimed(64, 10, Duration::from_millis(500));
        metrics.claims.claimed(16, 16, Duration::from_millis(250));
        metrics.claims.waited_for_slots(Duration::from_millis(125));
        let text = exported(&metrics);
        for line in [
            "taskcenter_claims_total 2",
            "taskcenter_claim_slots_total 80",
            "taskcenter_claim_tasks_total 26",
            "taskcenter_claim_seconds_total 0.75",
            "taskcenter_claim_slot_wait_seconds_total 0.125",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[test]
    fn every_labelled_destination_exports_its_breaker_at_zero() {
        let metrics = WorkerMetrics::default();
        let d = &metrics.destinations;
        d.set_in_flight("a.example:443", 1);
        d.set_held(&[("b.example:443".to_owned(), "paused", 3)]);
        d.set_breaker_open("c.example:443", true);
        let text = exported(&metrics);
        let check = |destination: &str, value: u8| {
            let line = format!(
                "taskcenter_destination_breaker_open{{destination=\"{destination}\"}} {value}"
            );
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        };
        check("a.example:443", 0);
        check("b.example:443", 0);
        check("c.example:443", 1);
        d.set_breaker_open("c.example:443", false);
        let text = exported(&metrics);
        assert!(
            text.contains("taskcenter_destination_breaker_open{destination=\"c.example:443\"} 0"),
            "{text}"
        );
    }
}
