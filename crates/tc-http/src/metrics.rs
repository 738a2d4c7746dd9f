//! The metrics the HTTP layer owns. The worker registers its own into the
//! same registry; `GET /metrics` encodes them all.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use tc_model::store::StateCounts;
use tc_model::tenant::TenantDetail;
use tc_model::tenant::quota::QuotaLimit;

use crate::error::ApiError;

/// `taskcenter_tasks{state}`: tasks in each state, read from the store at
/// every scrape.
pub(crate) const TASKS: &str = "taskcenter_tasks";
/// `taskcenter_submits_total{result}`: `POST /tasks` by outcome.
pub(crate) const SUBMITS: &str = "taskcenter_submits";
/// `taskcenter_http_requests_total{route,status}`: every answered request.
pub(crate) const HTTP_REQUESTS: &str = "taskcenter_http_requests";
/// `taskcenter_http_waiters`: requests waiting for a task (`wait_ms`) now.
pub(crate) const HTTP_WAITERS: &str = "taskcenter_http_waiters";
/// `taskcenter_tenant_pending{tenant}`: each tenant's pending tasks, read
/// from the store at every scrape.
pub(crate) const TENANT_PENDING: &str = "taskcenter_tenant_pending";
/// `taskcenter_tenant_in_flight{tenant}`: each tenant's running tasks on
/// every node, read from the store at every scrape.
pub(crate) const TENANT_IN_FLIGHT: &str = "taskcenter_tenant_in_flight";
/// `taskcenter_quota_rejections_total{tenant,limit}`: submits refused for
/// a tenant's quota, by the limit (`max_pending`, `submit_rate_per_s`).
pub(crate) const QUOTA_REJECTIONS: &str = "taskcenter_quota_rejections";

/// The most tenants the tenant labels name. The labels are bounded: a
/// `tenant` label is only ever the name of a tenant that exists (the
/// gauges are rebuilt from the store's tenants at each scrape, a deleted
/// tenant's series dropped; a rejection is counted for the tenant whose
/// key was just looked up), and at most this many names: the gauges show
/// the first `MAX_TENANT_LABELS` tenants in name order, and rejections of
/// tenants past this many distinct names are counted under
/// [`OTHER_TENANTS`]. With `limit` two values, the families hold at most
/// 1000 and 2 × 1001 series.
pub(crate) const MAX_TENANT_LABELS: usize = 1000;
/// The `tenant` label of the rejections past [`MAX_TENANT_LABELS`] names
/// (never a tenant's name: names start with a letter or digit).
pub(crate) const OTHER_TENANTS: &str = "_other";

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct QuotaLabel {
    tenant: String,
    limit: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SubmitLabel {
    result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabel {
    /// The route template (`/tasks/{id}`), never the raw path, so that the
    /// label set stays small.
    route: &'static str,
    status: u16,
}

/// The `route` label of requests that matched no route.
pub(crate) const UNMATCHED: &str = "unmatched";

/// How a `POST /tasks` ended, as the submits counter labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubmitResult {
    /// 201.
    Created,
    /// 200: same key, same payload.
    Existing,
    /// 409.
    Conflict,
    /// 400, 403, 408, 413, 415.
    Invalid,
    /// 5xx from the store.
    Error,
}

impl SubmitResult {
    /// How a submit (alone or as a batch's item) ended: whether it created
    /// its task, or why it was refused. The one classification both routes
    /// count with.
    pub(crate) fn of(outcome: Result<bool, &ApiError>) -> SubmitResult {
        match outcome {
            Ok(true) => SubmitResult::Created,
            Ok(false) => SubmitResult::Existing,
            Err(ApiError::IdempotencyConflict(_)) => SubmitResult::Conflict,
            Err(e) if e.status().is_server_error() => SubmitResult::Error,
            Err(_) => SubmitResult::Invalid,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            SubmitResult::Created => "created",
            SubmitResult::Existing => "existing",
            SubmitResult::Conflict => "conflict",
            SubmitResult::Invalid => "invalid",
            SubmitResult::Error => "error",
        }
    }
}

/// The HTTP layer's metric handles (cheap clones of shared atomics).
#[derive(Debug, Clone)]
pub(crate) struct HttpMetrics {
    tasks: Family<StateLabel, Gauge>,
    submits: Family<SubmitLabel, Counter>,
    requests: Family<RequestLabel, Counter>,
    /// Requests waiting for a task now.
    pub(crate) waiters: Gauge,
    tenant_pending: Family<TenantLabel, Gauge>,
    tenant_in_flight: Family<TenantLabel, Gauge>,
    quota_rejections: Family<QuotaLabel, Counter>,
    /// The tenant names the rejections counter labels (bounded).
    rejected_tenants: std::sync::Arc<Mutex<BTreeSet<String>>>,
}

impl HttpMetrics {
    pub(crate) fn register(registry: &mut Registry) -> HttpMetrics {
        let metrics = HttpMetrics {
            tasks: Family::default(),
            submits: Family::default(),
            requests: Family::default(),
            waiters: Gauge::default(),
            tenant_pending: Family::default(),
            tenant_in_flight: Family::default(),
            quota_rejections: Family::default(),
            rejected_tenants: std::sync::Arc::default(),
        };
        registry.register(
            TENANT_PENDING,
            "Each tenant's pending tasks, read from the store at scrape time",
            metrics.tenant_pending.clone(),
        );
        registry.register(
            TENANT_IN_FLIGHT,
            "Each tenant's running tasks on every node, read from the store at scrape time",
            metrics.tenant_in_flight.clone(),
        );
        registry.register(
            QUOTA_REJECTIONS,
            "Submits refused for a tenant's quota, by tenant and limit",
            metrics.quota_rejections.clone(),
        );
        registry.register(
            TASKS,
            "Tasks in each state, read from the store at scrape time",
            metrics.tasks.clone(),
        );
        registry.register(
            SUBMITS,
            "Task submissions (POST /tasks) by result",
            metrics.submits.clone(),
        );
        registry.register(
            HTTP_REQUESTS,
            "HTTP requests answered, by route template and status",
            metrics.requests.clone(),
        );
        registry.register(
            HTTP_WAITERS,
            "Requests waiting for a task to end (GET /tasks/{id}?wait_ms=)",
            metrics.waiters.clone(),
        );
        metrics
    }

    pub(crate) fn set_task_counts(&self, counts: &StateCounts) {
        for (state, n) in counts.iter() {
            self.tasks
                .get_or_create(&StateLabel {
                    state: state.as_str(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// The tenant gauges from the store's tenants now: the first
    /// [`MAX_TENANT_LABELS`] in name order, nothing of a deleted tenant.
    pub(crate) fn set_tenants(&self, tenants: &[TenantDetail]) {
        self.tenant_pending.clear();
        self.tenant_in_flight.clear();
        for t in tenants.iter().take(MAX_TENANT_LABELS) {
            let label = TenantLabel {
                tenant: t.tenant.name.clone(),
            };
            let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            self.tenant_pending
                .get_or_create(&label)
                .set(gauge(t.pending));
            self.tenant_in_flight
                .get_or_create(&label)
                .set(gauge(t.running));
        }
        // A deleted tenant's rejections go with it.
        let live: BTreeSet<&str> = tenants.iter().map(|t| t.tenant.name.as_str()).collect();
        let mut named = self
            .rejected_tenants
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        named.retain(|name| {
            let keep = live.contains(name.as_str());
            if !keep {
                for limit in [QuotaLimit::MaxPending, QuotaLimit::SubmitRate] {
                    self.quota_rejections.remove(&QuotaLabel {
                        tenant: name.clone(),
                        limit: limit.as_str(),
                    });
                }
            }
            keep
        });
    }

    /// A submit of `tenant` refused for `limit`.
    pub(crate) fn quota_rejected(&self, tenant: &str, limit: QuotaLimit) {
        let tenant = {
            let mut named = self
                .rejected_tenants
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if named.contains(tenant) {
                tenant.to_owned()
            } else if named.len() < MAX_TENANT_LABELS {
                named.insert(tenant.to_owned());
                tenant.to_owned()
            } else {
                OTHER_TENANTS.to_owned()
            }
        };
        self.quota_rejections
            .get_or_create(&QuotaLabel {
                tenant,
                limit: limit.as_str(),
            })
            .inc();
    }

    pub(crate) fn submitted(&self, result: SubmitResult) {
        self.submits
            .get_or_create(&SubmitLabel {
                result: result.as_str(),
            })
            .inc();
    }

    pub(crate) fn answered(&self, route: &'static str, status: u16) {
        self.requests
            .get_or_create(&RequestLabel { route, status })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A submit's outcome and the label it is counted under.
    fn check(outcome: Result<bool, ApiError>, expected: SubmitResult) {
        assert_eq!(
            SubmitResult::of(outcome.as_ref().copied()),
            expected,
            "{outcome:?}"
        );
    }

    #[test]
    fn each_submit_outcome_has_one_label() {
        check(Ok(true), SubmitResult::Created);
        check(Ok(false), SubmitResult::Existing);
        check(
            Err(ApiError::IdempotencyConflict("k".into())),
            SubmitResult::Conflict,
        );
        check(
            Err(ApiError::InvalidRequest("url".into())),
            SubmitResult::Invalid,
        );
        check(
            Err(ApiError::UrlNotAllowed("url".into())),
            SubmitResult::Invalid,
        );
        check(
            Err(ApiError::RequestTimeout("body".into())),
            SubmitResult::Invalid,
        );
        check(
            Err(ApiError::PayloadTooLarge { limit: 1 }),
            SubmitResult::Invalid,
        );
        check(
            Err(ApiError::UnsupportedMediaType("Content-Type".into())),
            SubmitResult::Invalid,
        );
        check(
            Err(ApiError::Unavailable("disk".into())),
            SubmitResult::Error,
        );
        check(Err(ApiError::Internal("bug".into())), SubmitResult::Error);
    }
}
