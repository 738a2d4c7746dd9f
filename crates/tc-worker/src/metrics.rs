use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The label of `taskcenter_attempts_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OutcomeLabel {
    /// `success`, `retry`, `failed`, `canceled`, `interrupted` or `lost`.
    pub(crate) outcome: &'static str,
}

/// The worker's metrics. Cheap to clone: every clone updates the same values.
#[derive(Debug, Clone)]
pub struct WorkerMetrics {
    pub(crate) attempts: Family<OutcomeLabel, Counter>,
    pub(crate) call_duration: Histogram,
    pub(crate) in_flight: Gauge,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        WorkerMetrics {
            attempts: Family::default(),
            // 1 ms .. ~33 s: downstream calls live between a loopback echo and a
            // timeout of several seconds.
            call_duration: Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 16),
            ),
            in_flight: Gauge::default(),
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
            "taskcenter_downstream_call_duration_seconds",
            "Duration of downstream calls",
            self.call_duration.clone(),
        );
        registry.register(
            "taskcenter_in_flight_calls",
            "Downstream calls in flight",
            self.in_flight.clone(),
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
