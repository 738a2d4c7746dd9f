//! The metrics the HTTP layer owns. The worker registers its own into the
//! same registry; `GET /metrics` encodes them all.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tc_model::store::StateCounts;

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

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
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
}

impl HttpMetrics {
    pub(crate) fn register(registry: &mut Registry) -> HttpMetrics {
        let metrics = HttpMetrics {
            tasks: Family::default(),
            submits: Family::default(),
            requests: Family::default(),
            waiters: Gauge::default(),
        };
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
