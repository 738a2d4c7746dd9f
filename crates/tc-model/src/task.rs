//! A stored task as every adapter returns it ([`Task`], with its
//! [`AttemptRecord`]s), its id ([`TaskId`], UUID v7) and the time type
//! ([`Timestamp`]).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::headers::Headers;
use crate::{FirstRun, Method, State};

/// A task's identity: a UUID v7, so that ids sort by creation millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(uuid::Uuid);

impl TaskId {
    /// The id of a task created at `created`: a UUID v7 whose time field is
    /// `created` (times before the epoch count as the epoch) and whose other
    /// bits come from `random`. The caller brings both, so this crate reads
    /// neither a clock nor an entropy source.
    pub fn new(created: Timestamp, random: [u8; 10]) -> TaskId {
        let millis = u64::try_from(created.as_millis()).unwrap_or(0);
        TaskId(uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid())
    }

    /// The id as a UUID.
    pub fn as_uuid(&self) -> &uuid::Uuid {
        &self.0
    }

    /// The 16 bytes of the UUID, the form stores keep.
    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }

    /// An id from the 16 bytes written by [`TaskId::as_bytes`].
    pub fn from_bytes(bytes: [u8; 16]) -> TaskId {
        TaskId(uuid::Uuid::from_bytes(bytes))
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// A string that is not a task id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a task id: {0:?}")]
pub struct UnknownTaskId(pub String);

impl FromStr for TaskId {
    type Err = UnknownTaskId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Only the canonical hyphenated form, so one task has one spelling.
        if s.len() != 36 {
            return Err(UnknownTaskId(s.to_owned()));
        }
        uuid::Uuid::try_parse(s)
            .map(TaskId)
            .map_err(|_| UnknownTaskId(s.to_owned()))
    }
}

/// A point in time: milliseconds since the Unix epoch, UTC.
///
/// The store and the worker pass time explicitly as this value, so tests can
/// drive a clock of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The time `ms` milliseconds after the Unix epoch.
    pub const fn from_millis(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// `self + d`, saturating at the far future.
    pub fn saturating_add(self, d: Duration) -> Timestamp {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_add(ms))
    }

    /// The duration from `earlier` to `self`, zero if `earlier` is later.
    pub fn duration_since(self, earlier: Timestamp) -> Duration {
        let ms = self.0.saturating_sub(earlier.0).max(0);
        Duration::from_millis(ms.unsigned_abs())
    }
}

/// One try of a task's downstream call, as the attempt history keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// The task's attempt counter when this try started (1 for the first).
    pub n: u32,
    /// When the try was claimed.
    pub started_at: Timestamp,
    /// When its outcome was written; `None` while it runs.
    pub finished_at: Option<Timestamp>,
    /// The downstream's status, if it answered.
    pub http_status: Option<u16>,
    /// Why the try did not succeed (`http_503`, `timeout`, `interrupted`, …).
    pub error: Option<String>,
    /// `finished_at - started_at`, once finished.
    pub duration_ms: Option<u64>,
}

impl AttemptRecord {
    /// Ends this try at `now` with its status and error; its duration is
    /// `now - started_at`, never negative.
    pub fn close(&mut self, now: Timestamp, http_status: Option<u16>, error: Option<String>) {
        self.finished_at = Some(now);
        self.http_status = http_status;
        self.error = error;
        self.duration_ms = Some(
            u64::try_from(now.duration_since(self.started_at).as_millis()).unwrap_or(u64::MAX),
        );
    }
}

/// A task as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The task's identity.
    pub id: TaskId,
    /// Its current state.
    pub state: State,
    /// Where the worker sends the call.
    pub url: String,
    /// The call's method.
    pub method: Method,
    /// The task's own headers, sent as given (over its destination's).
    pub headers: Headers,
    /// The url's `host:port` ([`crate::destination_of`]): what listings
    /// filter on.
    pub destination: String,
    /// The bytes sent downstream (JSON; empty: no body).
    pub body: Vec<u8>,
    /// The client's key; the store keeps one task per key.
    pub idempotency_key: String,
    /// How many tries have been claimed in all; numbers go on across
    /// manual retries.
    pub attempt: u32,
    /// How many of those were made before the latest manual retry: the
    /// current round's tries are `attempt - attempts_before_retry`, out of
    /// `max_attempts`. 0 for a task never retried by hand.
    pub attempts_before_retry: u32,
    /// The most tries this task may use.
    pub max_attempts: u32,
    /// Per-try timeout of the downstream call.
    pub timeout: Duration,
    /// When the task was asked to run first (part of its payload).
    pub first_run: FirstRun,
    /// The downstream's status on the last answered try.
    pub http_status: Option<u16>,
    /// The downstream's body on success.
    pub result: Option<Vec<u8>>,
    /// The downstream's `Content-Type` on success.
    pub result_content_type: Option<String>,
    /// Why the last try did not succeed.
    pub error: Option<String>,
    /// When the task was submitted.
    pub created_at: Timestamp,
    /// When the task last changed.
    pub updated_at: Timestamp,
    /// When the last try was claimed.
    pub started_at: Option<Timestamp>,
    /// When the task reached a terminal state.
    pub finished_at: Option<Timestamp>,
    /// When a pending task becomes due.
    pub next_run_at: Option<Timestamp>,
    /// Until when the running task's worker holds it.
    pub lease_until: Option<Timestamp>,
    /// Every try so far, oldest first.
    pub attempts: Vec<AttemptRecord>,
    /// The trace its calls belong to (`None` for tasks stored before
    /// traces were kept).
    pub trace: Option<crate::TraceContext>,
    /// Where to POST its view when it ends, and on which ends.
    pub callback: Option<crate::callback::Callback>,
    /// The task this one is the callback of.
    pub callback_of: Option<TaskId>,
    /// The callback made at its latest end, once made.
    pub callback_task_id: Option<TaskId>,
    /// How many times it reached a terminal state (a retry by hand lets it
    /// end again): the n of its n-th callback's key.
    pub ends: u32,
    /// The tenant it belongs to ([`crate::tenant`]); `None`: the admin's.
    pub tenant: Option<String>,
    /// The topic's event and subscription it is a task of ([`crate::topic`]).
    pub topic: Option<crate::topic::TopicLink>,
    /// Higher first within its destination ([`crate::priority`]); 0 to 9.
    pub priority: u8,
    /// Its flow key ([`crate::flow_key`]); `None`: none.
    pub flow_key: Option<String>,
}

impl Task {
    /// Whether another try is allowed after the current one.
    pub fn can_retry(&self) -> bool {
        self.attempt_in_round() < self.max_attempts
    }

    /// The current try's number within its round (1 for the first try
    /// after a submit or a manual retry): what backoff and the attempt
    /// budget count.
    pub fn attempt_in_round(&self) -> u32 {
        self.attempt.saturating_sub(self.attempts_before_retry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_round_trip_and_sort_by_creation() {
        let a = TaskId::new(Timestamp::from_millis(1_000), [0xff; 10]);
        let b = TaskId::new(Timestamp::from_millis(1_001), [0x00; 10]);
        assert!(a < b, "the time field sorts before the random bits");
        assert_eq!(a.as_uuid().get_version_num(), 7);
        assert_eq!(
            a.as_uuid().get_timestamp().map(|t| t.to_unix()),
            Some((1, 0))
        );
        assert_eq!(a.to_string().parse::<TaskId>(), Ok(a));
        assert_eq!(TaskId::from_bytes(*a.as_bytes()), a);
        assert_ne!(a, TaskId::new(Timestamp::from_millis(1_000), [0xfe; 10]));
        assert_eq!(
            TaskId::new(Timestamp::from_millis(-5), [1; 10]),
            TaskId::new(Timestamp::from_millis(0), [1; 10]),
        );
    }

    #[test]
    fn malformed_task_ids_are_refused() {
        let good = TaskId::new(Timestamp::from_millis(7), [7; 10]).to_string();
        for bad in [
            "",
            "x",
            &good[..35],
            &good.replace('-', ""),
            &format!("{{{good}}}"),
            "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz",
        ] {
            assert!(bad.parse::<TaskId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn timestamps_saturate() {
        let t = Timestamp::from_millis(i64::MAX - 1);
        assert_eq!(
            t.saturating_add(Duration::from_secs(10)).as_millis(),
            i64::MAX
        );
        assert_eq!(
            Timestamp::from_millis(5).duration_since(Timestamp::from_millis(9)),
            Duration::ZERO
        );
        assert_eq!(
            Timestamp::from_millis(9).duration_since(Timestamp::from_millis(5)),
            Duration::from_millis(4)
        );
    }

    #[test]
    fn can_retry_until_attempts_are_used() {
        let mut task = Task {
            topic: None,
            id: TaskId::new(Timestamp::from_millis(0), [0; 10]),
            state: State::Running,
            url: "http://example.test/".into(),
            method: Method::Post,
            headers: Headers::default(),
            destination: "example.test:80".into(),
            body: b"{}".to_vec(),
            idempotency_key: "k".into(),
            attempt: 1,
            attempts_before_retry: 0,
            max_attempts: 2,
            timeout: Duration::from_secs(1),
            first_run: FirstRun::Now,
            http_status: None,
            result: None,
            result_content_type: None,
            error: None,
            created_at: Timestamp::default(),
            updated_at: Timestamp::default(),
            started_at: None,
            finished_at: None,
            next_run_at: None,
            lease_until: None,
            attempts: Vec::new(),
            trace: None,
            callback: None,
            callback_of: None,
            callback_task_id: None,
            ends: 0,
            tenant: None,
            priority: 0,
            flow_key: None,
        };
        assert!(task.can_retry());
        task.attempt = 2;
        assert!(!task.can_retry());
        // A retry by hand after attempt 2 gives two more tries: 3 and 4.
        task.attempts_before_retry = 2;
        task.attempt = 3;
        assert_eq!(task.attempt_in_round(), 1);
        assert!(task.can_retry());
        task.attempt = 4;
        assert!(!task.can_retry());
    }
}
