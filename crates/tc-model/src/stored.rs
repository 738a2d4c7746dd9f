//! A task and a try as the SQL stores keep them, and the one reading of
//! those columns back into the model: ids as 16 bytes, states, methods and
//! headers as text, counters and times as integers, a schedule as two
//! nullable parts, a trace context as its stored text. Each adapter only
//! copies its row's columns into [`TaskRow`] or [`AttemptRow`] (its driver
//! knows the column types); what a valid value is, and which column a bad
//! one names, is decided here once.

use std::time::Duration;

use crate::callback::{Callback, CallbackOn};
use crate::{AttemptRecord, FirstRun, Headers, Task, TaskId, Timestamp, TraceContext};

/// A stored value that is not what the model allows: the column it was in.
/// A store answers it as unavailable (a corrupt row), never as a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("corrupt row: bad {0}")]
pub struct CorruptColumn(pub &'static str);

/// The columns of a tenant row, in their stored types; each
/// field is the column of the same name.
#[allow(missing_docs)]
#[derive(Debug, Clone, Default)]
pub struct TenantRow {
    pub name: String,
    pub weight: i64,
    pub max_pending: Option<i64>,
    pub submit_rate_per_s: Option<f64>,
    pub submit_burst: Option<i64>,
    pub signing_secrets: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl TenantRow {
    /// The tenant this row holds.
    pub fn into_tenant(self) -> Result<crate::tenant::Tenant, CorruptColumn> {
        let number = |value: i64, column| u32::try_from(value).map_err(|_| CorruptColumn(column));
        Ok(crate::tenant::Tenant {
            name: self.name,
            settings: crate::tenant::TenantSettings {
                weight: number(self.weight, "weight")?,
                max_pending: self
                    .max_pending
                    .map(|m| u64::try_from(m).map_err(|_| CorruptColumn("max_pending")))
                    .transpose()?,
                submit_rate_per_s: self.submit_rate_per_s,
                submit_burst: self
                    .submit_burst
                    .map(|b| number(b, "submit_burst"))
                    .transpose()?,
                signing_secrets: crate::signing::SigningSecrets::from_stored(
                    self.signing_secrets.as_deref(),
                )
                .map_err(|_| CorruptColumn("signing_secrets"))?,
            },
            created_at: Timestamp::from_millis(self.created_at),
            updated_at: Timestamp::from_millis(self.updated_at),
        })
    }
}

/// The columns of a schedule row, in their stored types; each field is the
/// column of the same name (`paused` read as a boolean by either driver).
#[allow(missing_docs)]
#[derive(Debug, Clone, Default)]
pub struct ScheduleRow {
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub task: String,
    pub paused: bool,
    pub overlap: String,
    pub catch_up: String,
    pub last_run_at: Option<i64>,
    pub last_task_id: Option<Vec<u8>>,
    pub created_at: i64,
    pub updated_at: i64,
    pub last_error_code: Option<String>,
    pub last_error_message: Option<String>,
    pub last_error_at: Option<i64>,
}

impl ScheduleRow {
    /// The schedule this row holds; a bad column is named (the three
    /// `last_error` columns are set together or not at all).
    pub fn into_schedule(self) -> Result<crate::schedule::Schedule, CorruptColumn> {
        use crate::schedule::{
            CatchUp, CronPattern, FiringError, Overlap, Recurrence, Schedule, ScheduleSpec,
            TaskTemplate, Zone,
        };
        let last_task_id = optional_id(self.last_task_id, "last_task_id")?;
        let last_error = match (
            self.last_error_code,
            self.last_error_message,
            self.last_error_at,
        ) {
            (Some(code), Some(message), Some(at)) => Some(FiringError {
                code,
                message,
                at: Timestamp::from_millis(at),
            }),
            (None, None, None) => None,
            _ => return Err(CorruptColumn("last_error")),
        };
        Ok(Schedule {
            spec: ScheduleSpec {
                when: Recurrence {
                    cron: CronPattern::from_stored(&self.cron)
                        .map_err(|_| CorruptColumn("cron"))?,
                    zone: Zone::parse(&self.timezone).map_err(|_| CorruptColumn("timezone"))?,
                },
                task: TaskTemplate::from_stored(&self.task).map_err(|_| CorruptColumn("task"))?,
                paused: self.paused,
                overlap: Overlap::parse(&self.overlap).map_err(|_| CorruptColumn("overlap"))?,
                catch_up: CatchUp::parse(&self.catch_up).map_err(|_| CorruptColumn("catch_up"))?,
                name: self.name,
            },
            last_run_at: self.last_run_at.map(Timestamp::from_millis),
            last_task_id,
            last_error,
            created_at: Timestamp::from_millis(self.created_at),
            updated_at: Timestamp::from_millis(self.updated_at),
        })
    }
}

/// The columns of a task row, in their stored types; each field is the
/// column of the same name. Integers are `i64` whatever width the store uses
/// for them.
#[allow(missing_docs)]
#[derive(Debug, Clone, Default)]
pub struct TaskRow {
    pub id: Vec<u8>,
    pub state: String,
    pub url: String,
    pub method: String,
    pub headers: Option<String>,
    pub destination: String,
    pub body: Vec<u8>,
    pub idempotency_key: String,
    pub attempt: i64,
    pub max_attempts: i64,
    pub timeout_ns: i64,
    pub http_status: Option<i64>,
    pub result: Option<Vec<u8>>,
    pub result_content_type: Option<String>,
    pub error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub next_run_at: Option<i64>,
    pub lease_until: Option<i64>,
    pub attempts_before_retry: i64,
    pub schedule_at: Option<i64>,
    pub schedule_delay_ms: Option<i64>,
    pub trace_context: Option<String>,
    pub callback_url: Option<String>,
    pub callback_on: Option<String>,
    pub callback_of: Option<Vec<u8>>,
    pub callback_task_id: Option<Vec<u8>>,
    pub ends: i64,
    /// `''` for none ([`crate::tenant::stored_tenant`]).
    pub tenant: String,
    /// A topic's task: its topic, event and subscription (all or none).
    pub topic: Option<String>,
    /// See `topic`.
    pub event_id: Option<String>,
    /// See `topic`.
    pub subscription: Option<String>,
    pub priority: i64,
    /// `''` for none ([`crate::flow_key::stored_key`]).
    pub flow_key: String,
}

impl TaskRow {
    /// The task this row holds, with an empty attempt history (the tries are
    /// rows of their own: [`AttemptRow`]).
    pub fn into_task(self) -> Result<Task, CorruptColumn> {
        Ok(Task {
            id: task_id(self.id, "id")?,
            state: self.state.parse().map_err(|_| CorruptColumn("state"))?,
            url: self.url,
            method: self.method.parse().map_err(|_| CorruptColumn("method"))?,
            headers: Headers::from_stored(self.headers.as_deref())
                .map_err(|_| CorruptColumn("headers"))?,
            destination: self.destination,
            body: self.body,
            idempotency_key: self.idempotency_key,
            attempt: count(self.attempt, "attempt")?,
            max_attempts: count(self.max_attempts, "max_attempts")?,
            attempts_before_retry: count(self.attempts_before_retry, "attempts_before_retry")?,
            timeout: Duration::from_nanos(
                u64::try_from(self.timeout_ns).map_err(|_| CorruptColumn("timeout"))?,
            ),
            first_run: FirstRun::from_parts(self.schedule_at, self.schedule_delay_ms)
                .ok_or(CorruptColumn("schedule"))?,
            http_status: status(self.http_status)?,
            result: self.result,
            result_content_type: self.result_content_type,
            error: self.error,
            created_at: Timestamp::from_millis(self.created_at),
            updated_at: Timestamp::from_millis(self.updated_at),
            started_at: self.started_at.map(Timestamp::from_millis),
            finished_at: self.finished_at.map(Timestamp::from_millis),
            next_run_at: self.next_run_at.map(Timestamp::from_millis),
            lease_until: self.lease_until.map(Timestamp::from_millis),
            attempts: Vec::new(),
            trace: self
                .trace_context
                .map(|text| TraceContext::from_stored(&text).ok_or(CorruptColumn("trace_context")))
                .transpose()?,
            callback: match (self.callback_url, self.callback_on) {
                (Some(url), Some(on)) => Some(
                    Callback::new(
                        url,
                        CallbackOn::from_stored(&on).ok_or(CorruptColumn("callback_on"))?,
                    )
                    .map_err(|_| CorruptColumn("callback_url"))?,
                ),
                (None, None) => None,
                _ => return Err(CorruptColumn("callback")),
            },
            callback_of: optional_id(self.callback_of, "callback_of")?,
            callback_task_id: optional_id(self.callback_task_id, "callback_task_id")?,
            ends: count(self.ends, "ends")?,
            tenant: crate::tenant::tenant_from_stored(self.tenant),
            topic: topic_link(self.topic, self.event_id, self.subscription)?,
            priority: u8::try_from(self.priority)
                .ok()
                .filter(|p| *p <= crate::priority::MAX_PRIORITY)
                .ok_or(CorruptColumn("priority"))?,
            flow_key: crate::flow_key::key_from_stored(self.flow_key),
        })
    }
}

/// The columns of a try's history row, in their stored types; each field
/// is the column of the same name.
#[allow(missing_docs)]
#[derive(Debug, Clone, Default)]
pub struct AttemptRow {
    pub task_id: Vec<u8>,
    pub n: i64,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub http_status: Option<i64>,
    pub error: Option<String>,
    pub duration_ms: Option<i64>,
}

impl AttemptRow {
    /// The task the try belongs to, and the try.
    pub fn into_attempt(self) -> Result<(TaskId, AttemptRecord), CorruptColumn> {
        Ok((
            task_id(self.task_id, "attempt task_id")?,
            AttemptRecord {
                n: count(self.n, "attempt n")?,
                started_at: Timestamp::from_millis(self.started_at),
                finished_at: self.finished_at.map(Timestamp::from_millis),
                http_status: status(self.http_status)?,
                error: self.error,
                duration_ms: self
                    .duration_ms
                    .map(|ms| u64::try_from(ms).map_err(|_| CorruptColumn("duration_ms")))
                    .transpose()?,
            },
        ))
    }
}

/// A task's link to the event that made it, from its three stored
/// columns: all or none.
fn topic_link(
    topic: Option<String>,
    event_id: Option<String>,
    subscription: Option<String>,
) -> Result<Option<crate::topic::TopicLink>, CorruptColumn> {
    match (topic, event_id, subscription) {
        (None, None, None) => Ok(None),
        (Some(topic), Some(event_id), Some(subscription)) => Ok(Some(crate::topic::TopicLink {
            topic,
            event_id,
            subscription,
        })),
        _ => Err(CorruptColumn("topic")),
    }
}

/// An id column (16 bytes) as a [`TaskId`].
pub fn task_id(bytes: Vec<u8>, column: &'static str) -> Result<TaskId, CorruptColumn> {
    let bytes: [u8; 16] = bytes.try_into().map_err(|_| CorruptColumn(column))?;
    Ok(TaskId::from_bytes(bytes))
}

fn optional_id(
    bytes: Option<Vec<u8>>,
    column: &'static str,
) -> Result<Option<TaskId>, CorruptColumn> {
    bytes.map(|b| task_id(b, column)).transpose()
}

fn count(v: i64, column: &'static str) -> Result<u32, CorruptColumn> {
    u32::try_from(v).map_err(|_| CorruptColumn(column))
}

fn status(v: Option<i64>) -> Result<Option<u16>, CorruptColumn> {
    v.map(|s| u16::try_from(s).map_err(|_| CorruptColumn("http_status")))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row: a tenant row broken in one column, and the column named.
    #[test]
    fn a_bad_tenant_column_is_named() {
        let good = || TenantRow {
            name: "acme".into(),
            weight: 3,
            max_pending: Some(10),
            submit_rate_per_s: Some(2.5),
            submit_burst: Some(4),
            signing_secrets: None,
            created_at: 1,
            updated_at: 2,
        };
        let tenant = good().into_tenant().unwrap();
        assert_eq!(tenant.settings.weight, 3);
        assert_eq!(tenant.settings.max_pending, Some(10));
        assert_eq!(tenant.settings.submit_burst, Some(4));
        assert_eq!(tenant.updated_at, Timestamp::from_millis(2));
        let check = |broken: TenantRow, column: &'static str| {
            assert_eq!(broken.into_tenant().err(), Some(CorruptColumn(column)));
        };
        check(
            TenantRow {
                weight: -1,
                ..good()
            },
            "weight",
        );
        check(
            TenantRow {
                weight: i64::from(u32::MAX) + 1,
                ..good()
            },
            "weight",
        );
        check(
            TenantRow {
                max_pending: Some(-5),
                ..good()
            },
            "max_pending",
        );
        check(
            TenantRow {
                submit_burst: Some(-1),
                ..good()
            },
            "submit_burst",
        );
        check(
            TenantRow {
                signing_secrets: Some("whsec_x".into()),
                ..good()
            },
            "signing_secrets",
        );
    }
    use crate::State;

    fn good() -> TaskRow {
        TaskRow {
            id: vec![7; 16],
            state: "pending".into(),
            url: "http://127.0.0.1:9/x".into(),
            method: "POST".into(),
            destination: "127.0.0.1:9".into(),
            idempotency_key: "k".into(),
            attempt: 1,
            max_attempts: 5,
            timeout_ns: 1_000_000_000,
            http_status: Some(503),
            created_at: 10,
            updated_at: 20,
            next_run_at: Some(30),
            ..TaskRow::default()
        }
    }

    /// Breaks one column of a good row and checks which column the reading
    /// names (`None`: the row still reads).
    fn check(break_it: impl FnOnce(&mut TaskRow), expected: Option<&str>) {
        let mut row = good();
        break_it(&mut row);
        let got = row.into_task().err().map(|CorruptColumn(column)| column);
        assert_eq!(got, expected);
    }

    #[test]
    fn each_bad_column_is_named() {
        check(|_| {}, None);
        check(|r| r.id = vec![1; 15], Some("id"));
        check(|r| r.state = "done".into(), Some("state"));
        check(|r| r.method = "BREW".into(), Some("method"));
        check(|r| r.headers = Some("not json".into()), Some("headers"));
        check(|r| r.attempt = -1, Some("attempt"));
        check(|r| r.max_attempts = i64::MAX, Some("max_attempts"));
        check(
            |r| r.attempts_before_retry = -3,
            Some("attempts_before_retry"),
        );
        check(|r| r.timeout_ns = -1, Some("timeout"));
        check(|r| r.http_status = Some(70_000), Some("http_status"));
        check(|r| r.schedule_at = Some(1), None);
        check(|r| r.schedule_delay_ms = Some(5), None);
        check(
            |r| (r.schedule_at, r.schedule_delay_ms) = (Some(1), Some(5)),
            Some("schedule"),
        );
        check(
            |r| r.trace_context = Some("garbage".into()),
            Some("trace_context"),
        );
    }

    #[test]
    fn a_good_row_reads_as_its_task() {
        let task = good().into_task().unwrap();
        assert_eq!(task.state, State::Pending);
        assert_eq!(task.id, TaskId::from_bytes([7; 16]));
        assert_eq!(task.timeout, Duration::from_secs(1));
        assert_eq!(task.http_status, Some(503));
        assert_eq!(task.next_run_at, Some(Timestamp::from_millis(30)));
        assert!(task.attempts.is_empty() && task.trace.is_none());
    }

    #[test]
    fn an_attempt_row_names_its_bad_column() {
        let row = AttemptRow {
            task_id: vec![1; 16],
            n: 2,
            started_at: 5,
            finished_at: Some(9),
            duration_ms: Some(4),
            ..AttemptRow::default()
        };
        let (id, attempt) = row.clone().into_attempt().unwrap();
        assert_eq!(
            (id, attempt.n, attempt.duration_ms),
            (TaskId::from_bytes([1; 16]), 2, Some(4))
        );
        let bad = AttemptRow {
            duration_ms: Some(-1),
            ..row
        };
        assert_eq!(
            bad.into_attempt().unwrap_err(),
            CorruptColumn("duration_ms")
        );
    }
}
