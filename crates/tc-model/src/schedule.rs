//! Schedules: a task submitted on a cron pattern in an IANA time zone
//! ([`Schedule`], the API's `schedules`). A task's own first due time is
//! [`crate::FirstRun`], a word apart.
//!
//! Everything here is pure: the times come from the caller. The cron
//! grammar is croner's (five POSIX fields, ranges, lists, steps, `MON`,
//! `JAN`, `@hourly`…) and the zones chrono-tz's; what croner leaves open
//! at daylight-saving changes is decided here, on wall-clock candidates
//! ([`Recurrence::next_after`]): a wall time the zone skips fires once, at
//! the first valid minute after the gap; a wall time the zone repeats fires
//! once, at its first occurrence.

use std::str::FromStr;

use chrono::{DateTime, NaiveDateTime, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde_json::{Value, json};

use crate::{FirstRun, Headers, Method, NewTask, TaskId, Timestamp, ValidationError};

/// The longest schedule name, in bytes: its firings' idempotency keys
/// (`schedule:{name}:manual:{time}`) stay within [`crate::Limits::MAX_KEY_BYTES`].
pub const MAX_NAME_BYTES: usize = 128;

/// How many upcoming times a schedule's view shows.
pub const NEXT_RUNS: usize = 5;

/// Why a schedule's field is refused; the message starts with the field's
/// name as the API spells it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The name is empty, too long, or has a character other than ASCII
    /// letters, digits, `.`, `_` and `-`.
    #[error("name: {0}")]
    Name(String),
    /// The cron pattern is not five valid fields (or a nickname), or never
    /// fires.
    #[error("cron: {0}")]
    Cron(String),
    /// Not an IANA time zone name.
    #[error("timezone: {0}")]
    Timezone(String),
    /// Neither `allow` nor `skip`.
    #[error("overlap: must be \"allow\" or \"skip\", got {0:?}")]
    Overlap(String),
    /// Neither `none` nor `latest`.
    #[error("catch_up: must be \"none\" or \"latest\", got {0:?}")]
    CatchUp(String),
}

/// Checks a schedule's name: 1 to [`MAX_NAME_BYTES`] bytes of ASCII
/// letters, digits, `.`, `_` and `-` (it is a path segment and part of
/// idempotency keys).
pub fn check_name(name: &str) -> Result<(), ScheduleError> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(ScheduleError::Name(format!(
            "must be 1 to {MAX_NAME_BYTES} bytes, got {}",
            name.len()
        )));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(ScheduleError::Name(
            "must be ASCII letters, digits, `.`, `_` and `-`".into(),
        ));
    }
    Ok(())
}

/// A parsed cron pattern with its text as given.
#[derive(Clone)]
pub struct CronPattern {
    text: String,
    cron: Cron,
}

impl std::fmt::Debug for CronPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // croner's own Debug prints every bit of every field.
        f.debug_tuple("CronPattern").field(&self.text).finish()
    }
}

impl PartialEq for CronPattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for CronPattern {}

/// The fields of a pattern, in order, with what each takes; a six-field
/// pattern has seconds first.
const CRON_FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day of month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day of week", "0-7 or SUN-SAT, 0 and 7 both Sunday"),
];
const NICKNAMES: &str = "@hourly, @daily, @weekly, @monthly, @yearly";

/// Why croner refused `text`, in our words: the first field that is wrong
/// on its own (found by parsing it with every other field `*`), with its
/// range; never croner's own text, which speaks of its internals.
fn refusal<E>(text: &str, parse: &dyn Fn(&str) -> Result<Cron, E>) -> String {
    if text.trim_start().starts_with('@') {
        return format!("unknown nickname {:?} (expected {NICKNAMES})", text.trim());
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    let names: Vec<(&str, &str)> = if fields.len() == 6 {
        std::iter::once(("second", "0-59"))
            .chain(CRON_FIELDS)
            .collect()
    } else {
        CRON_FIELDS.to_vec()
    };
    for (i, ((name, range), field)) in names.iter().zip(&fields).enumerate() {
        let probe: Vec<&str> = (0..fields.len())
            .map(|j| if j == i { *field } else { "*" })
            .collect();
        if parse(&probe.join(" ")).is_err() {
            return format!(
                "the {name} field {field:?} is not valid: it takes {range}, `*`, \
                 ranges (a-b), lists (a,b) and steps (*/n, a-b/n)"
            );
        }
    }
    format!(
        "{text:?} is not a valid pattern (minute hour day-of-month month day-of-week, \
         or {NICKNAMES})"
    )
}

impl CronPattern {
    /// Five fields (minute hour day-of-month month day-of-week) or a
    /// nickname (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`):
    /// what the API takes.
    pub fn parse(text: &str) -> Result<CronPattern, ScheduleError> {
        CronPattern::with(text, Seconds::Disallowed)
    }

    /// Six fields, seconds first. The API never takes this: tests that
    /// must see several firings in real time (several nodes on one
    /// PostgreSQL) use it, and the stores keep whichever pattern they are
    /// given.
    pub fn parse_with_seconds(text: &str) -> Result<CronPattern, ScheduleError> {
        CronPattern::with(text, Seconds::Required)
    }

    /// A pattern as a store kept it: five fields, or six.
    pub fn from_stored(text: &str) -> Result<CronPattern, ScheduleError> {
        CronPattern::with(text, Seconds::Optional)
    }

    fn with(text: &str, seconds: Seconds) -> Result<CronPattern, ScheduleError> {
        // croner also reads a sixth and seventh field (seconds, year) when
        // allowed; the count is checked first so a wrong count is named.
        let fields = text.split_whitespace().count();
        let nickname = text.trim_start().starts_with('@');
        let wanted = if seconds.is_required() { 6 } else { 5 };
        if !nickname && !seconds.is_optional() && fields != wanted {
            return Err(ScheduleError::Cron(format!(
                "must have {wanted} fields (minute hour day-of-month month day-of-week), got {fields}"
            )));
        }
        if text.len() > 256 {
            return Err(ScheduleError::Cron("must be at most 256 bytes".into()));
        }
        // croner reads an empty list item as matching nothing: a minute
        // field of nothing sends its search, minute by minute, to the year
        // 5000 (about a minute of CPU) before it says "never".
        if text
            .split_whitespace()
            .any(|field| field.split(',').any(str::is_empty))
        {
            return Err(ScheduleError::Cron(format!(
                "an empty item in a list: {text:?}"
            )));
        }
        let parse = |pattern: &str| {
            CronParser::builder()
                .seconds(seconds)
                .year(Year::Disallowed)
                .build()
                .parse(pattern)
        };
        let cron = parse(text).map_err(|_| ScheduleError::Cron(refusal(text, &parse)))?;
        Ok(CronPattern {
            text: text.to_owned(),
            cron,
        })
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The first wall-clock time matching the pattern strictly after
    /// `after` (times read on a clock without daylight saving).
    fn next_wall(&self, after: NaiveDateTime) -> Option<NaiveDateTime> {
        let at = Utc.from_utc_datetime(&after);
        self.cron
            .find_next_occurrence(&at, false)
            .ok()
            .map(|t| t.naive_utc())
    }
}

/// An IANA time zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zone(Tz);

impl Zone {
    /// UTC, the default.
    pub const UTC: Zone = Zone(Tz::UTC);

    /// A zone by its IANA name (`Europe/Berlin`, `UTC`).
    pub fn parse(name: &str) -> Result<Zone, ScheduleError> {
        Tz::from_str(name)
            .map(Zone)
            .map_err(|_| ScheduleError::Timezone(format!("not an IANA time zone name: {name:?}")))
    }

    /// Its IANA name.
    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    /// `t` as this zone's wall-clock time, RFC 3339 with the offset in
    /// force then (`2026-01-05T02:30:00+01:00`); what a person reading a
    /// schedule's next runs expects beside UTC.
    pub fn local_rfc3339(&self, t: Timestamp) -> String {
        match to_utc(t) {
            Some(at) => at
                .with_timezone(&self.0)
                .format("%Y-%m-%dT%H:%M:%S%:z")
                .to_string(),
            None => rfc3339_utc(t),
        }
    }
}

/// A cron pattern read in a time zone: when a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recurrence {
    /// The pattern.
    pub cron: CronPattern,
    /// The zone its wall-clock times are in.
    pub zone: Zone,
}

/// How many wall-clock candidates one search looks at before it gives up
/// (a pattern that matches in no year croner searches gives up earlier):
/// enough to step over an hour the zone repeats, second by second.
const SEARCH_STEPS: usize = 10_000;

fn to_utc(t: Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(t.as_millis())
}

fn from_utc(t: DateTime<Utc>) -> Timestamp {
    Timestamp::from_millis(t.timestamp_millis())
}

impl Recurrence {
    /// When a wall-clock time happens in the zone: its single instant; the
    /// first of two when the zone repeats it; the first valid whole minute
    /// after it when the zone skips it (the instant the gap ends).
    fn instant(&self, wall: NaiveDateTime) -> Option<Timestamp> {
        if let Some(t) = self.earliest(wall) {
            return Some(t);
        }
        let mut minute = wall.with_second(0)?.with_nanosecond(0)?;
        // Gaps are at most a day long in the tz database.
        for _ in 0..(26 * 60) {
            minute = minute.checked_add_signed(TimeDelta::minutes(1))?;
            if let Some(t) = self.earliest(minute) {
                return Some(t);
            }
        }
        None
    }

    fn earliest(&self, wall: NaiveDateTime) -> Option<Timestamp> {
        self.zone
            .0
            .from_local_datetime(&wall)
            .earliest()
            .map(|t| from_utc(t.with_timezone(&Utc)))
    }

    /// The first firing strictly after `after`. A wall time the zone skips
    /// fires once at the end of the gap (with the gap's own first minute,
    /// should the pattern name it too); a repeated wall time fires at its
    /// first occurrence only. `None` when the pattern never fires again.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        // croner keeps a start's fraction of a second in what it answers:
        // search from the whole second (the answer is still after `after`).
        let local = to_utc(after)?
            .with_timezone(&self.zone.0)
            .naive_local()
            .with_nanosecond(0)?;
        let mut wall = local;
        for _ in 0..SEARCH_STEPS {
            wall = self.cron.next_wall(wall)?;
            let at = self.instant(wall)?;
            // In the second pass of a repeated hour, candidates map to
            // their first occurrence, already past.
            if at > after {
                return Some(at);
            }
        }
        None
    }

    /// The next `n` firings after `after`.
    pub fn next_runs(&self, after: Timestamp, n: usize) -> Vec<Timestamp> {
        let mut out = Vec::with_capacity(n);
        let mut t = after;
        while out.len() < n {
            match self.next_after(t) {
                Some(next) => {
                    out.push(next);
                    t = next;
                }
                None => break,
            }
        }
        out
    }

    /// The latest firing `f` with `after < f <= now`, if any. Looks back at
    /// most five years (a downtime longer than that catches up nothing).
    pub fn latest_between(&self, after: Timestamp, now: Timestamp) -> Option<Timestamp> {
        const HOUR_MS: i64 = 3_600_000;
        // Widening windows: a frequent pattern is found in the last hour
        // without walking days of firings.
        for window in [
            HOUR_MS,
            24 * HOUR_MS,
            32 * 24 * HOUR_MS,
            5 * 366 * 24 * HOUR_MS,
        ] {
            let start = after.max(Timestamp::from_millis(
                now.as_millis().saturating_sub(window),
            ));
            let mut latest = None;
            let mut t = start;
            for _ in 0..1_000_000 {
                match self.next_after(t) {
                    Some(f) if f <= now => {
                        latest = Some(f);
                        t = f;
                    }
                    _ => break,
                }
            }
            if latest.is_some() || start == after {
                return latest;
            }
        }
        None
    }
}

/// Whether a firing waits for the previous firing's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// Fire whatever the previous task is doing.
    #[default]
    Allow,
    /// Do not fire while the previous firing's task is not terminal.
    Skip,
}

impl Overlap {
    /// The API's (and the stores') word.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
        }
    }

    /// The value of the word.
    pub fn parse(s: &str) -> Result<Overlap, ScheduleError> {
        match s {
            "allow" => Ok(Overlap::Allow),
            "skip" => Ok(Overlap::Skip),
            other => Err(ScheduleError::Overlap(other.to_owned())),
        }
    }
}

/// What a firing loop does with the times it missed (a downtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    /// Skip them: the next firing is the next time after the loop started.
    #[default]
    None,
    /// Fire once, for the most recent missed time.
    Latest,
}

impl CatchUp {
    /// The API's (and the stores') word.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::None => "none",
            CatchUp::Latest => "latest",
        }
    }

    /// The value of the word.
    pub fn parse(s: &str) -> Result<CatchUp, ScheduleError> {
        match s {
            "none" => Ok(CatchUp::None),
            "latest" => Ok(CatchUp::Latest),
            other => Err(ScheduleError::CatchUp(other.to_owned())),
        }
    }
}

/// The idempotency key a template's tasks carry until a firing names
/// them: never submitted.
const TEMPLATE_KEY: &str = "schedule-template";

/// The task a schedule submits at each firing: a valid submission whose
/// idempotency key the firing sets ([`TaskTemplate::task`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTemplate(NewTask);

/// A stored template that does not read back (a store's corruption).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt schedule task template")]
pub struct CorruptTemplate;

impl TaskTemplate {
    /// The template of `task` (its idempotency key becomes a
    /// placeholder; its trace is dropped: each firing is a trace of its own).
    pub fn of(task: NewTask) -> TaskTemplate {
        match task.clone().rekeyed(TEMPLATE_KEY.to_owned()) {
            Ok(t) => TaskTemplate(t),
            // The placeholder is a valid key.
            Err(_) => TaskTemplate(task),
        }
    }

    /// The submission of one firing, keyed `key`.
    pub fn task(&self, key: String) -> Result<NewTask, ValidationError> {
        self.0.clone().rekeyed(key)
    }

    /// The submission (its key is a placeholder).
    pub fn new_task(&self) -> &NewTask {
        &self.0
    }

    /// The text form both SQL stores keep (JSON; the body in base64).
    pub fn to_stored(&self) -> String {
        use base64::Engine as _;
        let t = &self.0;
        let (at_ms, delay_ms) = t.first_run().to_parts();
        json!({
            "url": t.url(),
            "body": base64::engine::general_purpose::STANDARD.encode(t.body()),
            "method": t.method().as_str(),
            "headers": t.headers().to_stored(),
            "max_attempts": t.max_attempts(),
            "timeout_ms": u64::try_from(t.timeout().as_millis()).unwrap_or(u64::MAX),
            "run_at_ms": at_ms,
            "delay_ms": delay_ms,
            "callback_url": t.callback().map(crate::callback::Callback::url),
            "callback_on": t.callback().map(|c| c.on().to_stored()),
            "priority": t.priority(),
            "flow_key": t.flow_key(),
        })
        .to_string()
    }

    /// The template [`TaskTemplate::to_stored`] wrote.
    pub fn from_stored(text: &str) -> Result<TaskTemplate, CorruptTemplate> {
        use base64::Engine as _;
        let v: Value = serde_json::from_str(text).map_err(|_| CorruptTemplate)?;
        let str_of = |k: &str| v.get(k).and_then(Value::as_str).ok_or(CorruptTemplate);
        let int_of = |k: &str| v.get(k).and_then(Value::as_i64);
        let body = base64::engine::general_purpose::STANDARD
            .decode(str_of("body")?)
            .map_err(|_| CorruptTemplate)?;
        let method = Method::from_str(str_of("method")?).map_err(|_| CorruptTemplate)?;
        let headers = Headers::from_stored(v.get("headers").and_then(Value::as_str))
            .map_err(|_| CorruptTemplate)?;
        let max_attempts = int_of("max_attempts")
            .and_then(|n| u32::try_from(n).ok())
            .ok_or(CorruptTemplate)?;
        let timeout = int_of("timeout_ms")
            .and_then(|n| u64::try_from(n).ok())
            .map(std::time::Duration::from_millis)
            .ok_or(CorruptTemplate)?;
        let schedule =
            FirstRun::from_parts(int_of("run_at_ms"), int_of("delay_ms")).ok_or(CorruptTemplate)?;
        let text_of = |k: &str| v.get(k).and_then(Value::as_str);
        let priority = u8::try_from(int_of("priority").unwrap_or(0)).unwrap_or(u8::MAX);
        let flow_key = text_of("flow_key").map(str::to_owned);
        let callback = match (text_of("callback_url"), text_of("callback_on")) {
            (Some(url), Some(on)) => Some(
                crate::callback::CallbackOn::from_stored(on)
                    .and_then(|on| crate::callback::Callback::new(url.to_owned(), on).ok())
                    .ok_or(CorruptTemplate)?,
            ),
            (None, None) => None,
            _ => return Err(CorruptTemplate),
        };
        NewTask::new(
            str_of("url")?.to_owned(),
            body,
            TEMPLATE_KEY.to_owned(),
            max_attempts,
            timeout,
            &crate::Limits {
                max_body_bytes: usize::MAX,
            },
        )
        .and_then(|n| n.with_first_run(schedule))
        .and_then(|n| n.with_method(method))
        .and_then(|n| n.with_priority(priority)?.with_flow_key(flow_key))
        .map(|n| {
            let n = n.with_headers(headers);
            TaskTemplate(match callback {
                Some(callback) => n.with_callback(callback),
                None => n,
            })
        })
        .map_err(|_| CorruptTemplate)
    }
}

/// A schedule as an operator gives it (`POST`/`PUT /schedules`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleSpec {
    /// Its name, unique, checked by [`check_name`].
    pub name: String,
    /// When it fires.
    pub when: Recurrence,
    /// What it submits.
    pub task: TaskTemplate,
    /// A paused schedule does not fire (a trigger still does).
    pub paused: bool,
    /// Whether a firing waits for the previous one's task.
    pub overlap: Overlap,
    /// What happens to times missed during a downtime.
    pub catch_up: CatchUp,
}

/// A change to a stored schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleChange {
    /// Every field anew (the name stays); its firing record stays.
    Replace(Box<ScheduleSpec>),
    /// Pause (`true`) or resume (`false`).
    Paused(bool),
}

/// Why a firing of a schedule created no task, kept on the schedule as
/// its `last_error` until a later firing creates one (a url the
/// allow-list no longer admits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiringError {
    /// The error code, as the API's (`url_not_allowed`).
    pub code: String,
    /// What was refused, starting with the field's name (`url: …`).
    pub message: String,
    /// The fire time of the firing refused.
    pub at: Timestamp,
}

impl FiringError {
    /// The allow-list's refusal of the firing at `at`.
    pub fn url_not_allowed(refusal: crate::UrlNotAllowed, at: Timestamp) -> FiringError {
        FiringError {
            code: crate::UrlNotAllowed::CODE.to_owned(),
            message: refusal.to_string(),
            at,
        }
    }
}

/// A stored schedule: the spec, its firing record and its times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// As given.
    pub spec: ScheduleSpec,
    /// The fire time of its latest firing (a trigger's: the time it was
    /// triggered); never moves backwards.
    pub last_run_at: Option<Timestamp>,
    /// The task that firing submitted.
    pub last_task_id: Option<TaskId>,
    /// Why the latest firing refused since the last one that submitted a
    /// task created none; `None` once a later firing submits one.
    pub last_error: Option<FiringError>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it was last created, replaced, paused or resumed: no time at or
    /// before it is caught up.
    pub updated_at: Timestamp,
}

impl Schedule {
    /// A new schedule, never fired.
    pub fn new(spec: ScheduleSpec, now: Timestamp) -> Schedule {
        Schedule {
            spec,
            last_run_at: None,
            last_task_id: None,
            last_error: None,
            created_at: now,
            updated_at: now,
        }
    }

    /// `change` applied at `now`.
    pub fn changed(mut self, change: ScheduleChange, now: Timestamp) -> Schedule {
        match change {
            ScheduleChange::Replace(spec) => self.spec = *spec,
            ScheduleChange::Paused(paused) => self.spec.paused = paused,
        }
        self.updated_at = now;
        self
    }

    /// The fire time a loop should fire at `now`, if any: the latest
    /// firing after the later of `last_run_at`, `updated_at` and
    /// `handled` (the last time this loop dealt with, fired or skipped),
    /// and not after `now`. With [`CatchUp::None`] only one at or after
    /// `up_since` (when the loop started: earlier ones were missed during a
    /// downtime). A paused schedule fires nothing.
    pub fn due(
        &self,
        now: Timestamp,
        handled: Option<Timestamp>,
        up_since: Timestamp,
    ) -> Option<Timestamp> {
        if self.spec.paused {
            return None;
        }
        let after = self
            .last_run_at
            .into_iter()
            .chain(handled)
            .fold(self.updated_at, Timestamp::max);
        let latest = self.spec.when.latest_between(after, now)?;
        match self.spec.catch_up {
            CatchUp::Latest => Some(latest),
            CatchUp::None => (latest >= up_since).then_some(latest),
        }
    }

    /// The next firing after `now` (none when paused or never again).
    pub fn next_after(&self, now: Timestamp) -> Option<Timestamp> {
        if self.spec.paused {
            return None;
        }
        self.spec.when.next_after(now)
    }

    /// The view's `next_runs`: the next [`NEXT_RUNS`] times after `now`,
    /// paused or not (what resuming would bring).
    pub fn next_runs(&self, now: Timestamp) -> Vec<Timestamp> {
        self.spec.when.next_runs(now, NEXT_RUNS)
    }
}

/// A time as RFC 3339 in UTC, whole seconds unless it has milliseconds.
pub fn rfc3339_utc(t: Timestamp) -> String {
    match to_utc(t) {
        Some(at) if at.timestamp_subsec_millis() == 0 => {
            at.format("%Y-%m-%dT%H:%M:%SZ").to_string()
        }
        Some(at) => at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => t.as_millis().to_string(),
    }
}

/// The idempotency key of the firing of `name` at `at`: the same on every
/// node, so nodes firing the same time create one task.
pub fn firing_key(name: &str, at: Timestamp) -> String {
    format!("schedule:{name}:{}", rfc3339_utc(at))
}

/// The idempotency key of a trigger of `name` at `now`.
pub fn trigger_key(name: &str, now: Timestamp) -> String {
    format!("schedule:{name}:manual:{}", rfc3339_utc(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        let t = DateTime::parse_from_rfc3339(text).expect("a test time");
        Timestamp::from_millis(t.timestamp_millis())
    }

    fn recurrence(cron: &str, zone: &str) -> Recurrence {
        Recurrence {
            cron: CronPattern::parse(cron).expect("a valid pattern"),
            zone: Zone::parse(zone).expect("a zone"),
        }
    }

    #[test]
    fn a_time_reads_in_a_zone_with_its_offset_then() {
        let check = |zone: &str, utc: &str, expected: &str| {
            let t = Timestamp::from_millis(
                DateTime::parse_from_rfc3339(utc)
                    .unwrap()
                    .timestamp_millis(),
            );
            assert_eq!(
                Zone::parse(zone).unwrap().local_rfc3339(t),
                expected,
                "{zone} {utc}"
            );
        };
        check(
            "Europe/Berlin",
            "2026-01-05T01:30:00Z",
            "2026-01-05T02:30:00+01:00",
        );
        check(
            "Europe/Berlin",
            "2026-07-05T00:30:00Z",
            "2026-07-05T02:30:00+02:00",
        );
        check(
            "America/New_York",
            "2026-01-05T01:30:00Z",
            "2026-01-04T20:30:00-05:00",
        );
        check("UTC", "2026-01-05T01:30:00Z", "2026-01-05T01:30:00+00:00");
    }

    fn check_parse(cron: &str, expected: Result<(), &str>) {
        match (CronPattern::parse(cron), expected) {
            (Ok(_), Ok(())) => {}
            (Err(e), Err(part)) => {
                let message = e.to_string();
                assert!(message.starts_with("cron: "), "{cron:?}: {message}");
                // croner's own words ("Position", "pattern") never show.
                assert!(
                    !message.contains("Position") && !message.contains("Invalid"),
                    "{cron:?}: {message}"
                );
                assert!(message.contains(part), "{cron:?}: {message} lacks {part:?}");
            }
            (got, want) => panic!("{cron:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn patterns_are_five_fields_names_ranges_lists_steps_or_nicknames() {
        check_parse("* * * * *", Ok(()));
        check_parse("*/15 9-17 * * MON-FRI", Ok(()));
        check_parse("0 0 1 JAN,JUL *", Ok(()));
        check_parse("5,10,20-25/2 0 * * sun", Ok(()));
        check_parse("@hourly", Ok(()));
        check_parse("@daily", Ok(()));
        check_parse("@weekly", Ok(()));
        check_parse("@monthly", Ok(()));
        check_parse("", Err("fields"));
        check_parse("* * * *", Err("must have 5 fields"));
        check_parse("* * * * * *", Err("must have 5 fields"));
        // A refusal names the field and what it takes, in our words.
        let minute = "the minute field";
        check_parse(
            "60 * * * *",
            Err("the minute field \"60\" is not valid: it takes 0-59,"),
        );
        check_parse(
            "* 24 * * *",
            Err("the hour field \"24\" is not valid: it takes 0-23,"),
        );
        check_parse(
            "* * 32 * *",
            Err("the day of month field \"32\" is not valid: it takes 1-31,"),
        );
        check_parse(
            "* * * 13 *",
            Err("the month field \"13\" is not valid: it takes 1-12 or JAN-DEC,"),
        );
        check_parse(
            "* * * * 8",
            Err("the day of week field \"8\" is not valid: it takes 0-7 or SUN-SAT"),
        );
        check_parse("* * * * MONDAY", Err("the day of week field"));
        check_parse("*/0 * * * *", Err(minute));
        check_parse("a b c d e", Err(minute));
        check_parse("0 9 * * 1-5/x", Err("the day of week field \"1-5/x\""));
        check_parse(
            "@reboot",
            Err("unknown nickname \"@reboot\" (expected @hourly,"),
        );
        // Malformed numbers, ranges and steps are refused, never a panic.
        for odd in [
            "99999999999999999999 * * * *",
            "*/99999999999 * * * *",
            "1-99999999999 * * * *",
            "- * * * *",
            ", * * * *",
            "/ * * * *",
            "*/ * * * *",
            "1- * * * *",
            "5/0 * * * *",
            "0-59/0 * * * *",
            "59-0 * * * *",
            "* * * * MON-",
            "* * * * #",
            "* * * * 1#9",
            "\u{0} * * * *",
            "@",
        ] {
            check_parse(odd, Err(""));
        }
        check_parse(", * * * *", Err("an empty item"));
        check_parse("1,,2 * * * *", Err("an empty item"));
        assert!(CronPattern::parse_with_seconds("* * * * * *").is_ok());
        assert!(CronPattern::parse_with_seconds("* * * * *").is_err());
        assert!(CronPattern::from_stored("*/2 * * * * *").is_ok());
    }

    fn check_next(cron: &str, zone: &str, after: &str, expected: &[&str]) {
        let r = recurrence(cron, zone);
        let got: Vec<String> = r
            .next_runs(at(after), expected.len())
            .into_iter()
            .map(rfc3339_utc)
            .collect();
        assert_eq!(got, expected, "{cron:?} in {zone} after {after}");
    }

    #[test]
    fn next_times_in_utc() {
        check_next(
            "@hourly",
            "UTC",
            "2026-01-01T00:10:00Z",
            &["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"],
        );
        // From within a second: whole fire times still.
        check_next(
            "0 * * * *",
            "UTC",
            "2026-01-01T00:59:59.500Z",
            &["2026-01-01T01:00:00Z"],
        );
        // Strictly after: a fire time itself is not next.
        check_next(
            "0 * * * *",
            "UTC",
            "2026-01-01T01:00:00Z",
            &["2026-01-01T02:00:00Z"],
        );
        // 2026-01-02 is a Friday.
        check_next(
            "0 9 * * MON-FRI",
            "UTC",
            "2026-01-02T10:00:00Z",
            &["2026-01-05T09:00:00Z", "2026-01-06T09:00:00Z"],
        );
        check_next(
            "0 0 1 JAN *",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2027-01-01T00:00:00Z"],
        );
        check_next(
            "@weekly",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"],
        );
        check_next(
            "@monthly",
            "UTC",
            "2026-01-15T00:00:00Z",
            &["2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"],
        );
        check_next(
            "*/20 9-10 * * *",
            "UTC",
            "2026-01-01T10:30:00Z",
            &["2026-01-01T10:40:00Z", "2026-01-02T09:00:00Z"],
        );
        // Day of month or day of week (POSIX): the 13th and every Friday.
        check_next(
            "0 0 13 * FRI",
            "UTC",
            "2026-02-01T00:00:00Z",
            &[
                "2026-02-06T00:00:00Z",
                "2026-02-13T00:00:00Z",
                "2026-02-20T00:00:00Z",
            ],
        );
        // A wall time in a zone without daylight saving this year.
        check_next(
            "0 9 * * *",
            "Asia/Tokyo",
            "2026-06-01T00:00:00Z",
            &["2026-06-02T00:00:00Z"],
        );
    }

    #[test]
    fn daylight_saving_gaps_fire_once_at_the_next_valid_minute() {
        // Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00Z).
        check_next(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T12:00:00Z",
            &["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
        );
        // Every half hour: 02:00 and 02:30 do not exist and 03:00 does:
        // one firing at 03:00 CEST for the three.
        check_next(
            "*/30 * * * *",
            "Europe/Berlin",
            "2026-03-29T00:00:00Z",
            &[
                "2026-03-29T00:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T01:30:00Z",
            ],
        );
        // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00Z).
        check_next(
            "30 2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            &["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"],
        );
        check_next(
            "0 * * * *",
            "America/New_York",
            "2026-03-08T06:30:00Z",
            &["2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"],
        );
    }

    #[test]
    fn daylight_saving_repeats_fire_once_at_the_first_occurrence() {
        // Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00Z), so
        // 02:00–02:59 happen twice.
        check_next(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T12:00:00Z",
            &["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
        );
        check_next(
            "*/30 * * * *",
            "Europe/Berlin",
            "2026-10-24T23:45:00Z",
            &[
                "2026-10-25T00:00:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-25T02:00:00Z",
            ],
        );
        // From inside the second pass: its wall times already fired.
        check_next(
            "*/30 * * * *",
            "Europe/Berlin",
            "2026-10-25T01:10:00Z",
            &["2026-10-25T02:00:00Z"],
        );
        // New York, 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00Z).
        check_next(
            "30 1 * * *",
            "America/New_York",
            "2026-10-31T12:00:00Z",
            &["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"],
        );
        check_next(
            "0 * * * *",
            "America/New_York",
            "2026-11-01T04:30:00Z",
            &["2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z"],
        );
    }

    #[test]
    fn a_pattern_that_never_matches_has_no_next_time() {
        let r = recurrence("0 0 30 2 *", "UTC");
        assert_eq!(r.next_after(at("2026-01-01T00:00:00Z")), None);
    }

    #[test]
    fn zones_are_iana_names() {
        assert_eq!(Zone::parse("UTC").map(|z| z.name()), Ok("UTC"));
        assert_eq!(
            Zone::parse("Europe/Berlin").map(|z| z.name()),
            Ok("Europe/Berlin")
        );
        let e = Zone::parse("Mars/Olympus").unwrap_err().to_string();
        assert!(e.starts_with("timezone: "), "{e}");
    }

    #[test]
    fn the_latest_firing_between_two_times() {
        let r = recurrence("0 * * * *", "UTC");
        let check = |after: &str, now: &str, expected: Option<&str>| {
            assert_eq!(
                r.latest_between(at(after), at(now)),
                expected.map(at),
                "{after} .. {now}"
            );
        };
        check("2026-01-01T00:00:00Z", "2026-01-01T00:59:59Z", None);
        check(
            "2026-01-01T00:00:00Z",
            "2026-01-01T01:00:00Z",
            Some("2026-01-01T01:00:00Z"),
        );
        check(
            "2026-01-01T00:00:00Z",
            "2026-01-03T05:30:00Z",
            Some("2026-01-03T05:00:00Z"),
        );
        check(
            "2025-01-01T00:00:00Z",
            "2026-01-03T05:30:00Z",
            Some("2026-01-03T05:00:00Z"),
        );
        let yearly = recurrence("0 0 1 JAN *", "UTC");
        assert_eq!(
            yearly.latest_between(at("2020-06-01T00:00:00Z"), at("2026-06-01T00:00:00Z")),
            Some(at("2026-01-01T00:00:00Z"))
        );
    }

    fn spec(catch_up: CatchUp, paused: bool) -> ScheduleSpec {
        let task = NewTask::new(
            "http://example.com/hook".into(),
            b"{}".to_vec(),
            "k".into(),
            3,
            std::time::Duration::from_secs(10),
            &crate::Limits::default(),
        )
        .expect("a valid task");
        ScheduleSpec {
            name: "hourly".into(),
            when: recurrence("0 * * * *", "UTC"),
            task: TaskTemplate::of(task),
            paused,
            overlap: Overlap::Allow,
            catch_up,
        }
    }

    #[test]
    fn what_is_due_depends_on_the_record_the_loop_and_catch_up() {
        let created = at("2026-01-01T00:30:00Z");
        let check = |catch_up: CatchUp,
                     last_run: Option<&str>,
                     handled: Option<&str>,
                     up_since: &str,
                     now: &str,
                     expected: Option<&str>| {
            let mut r = Schedule::new(spec(catch_up, false), created);
            r.last_run_at = last_run.map(at);
            assert_eq!(
                r.due(at(now), handled.map(at), at(up_since)),
                expected.map(at),
                "{catch_up:?} last {last_run:?} handled {handled:?} up {up_since} now {now}"
            );
        };
        let (none, latest) = (CatchUp::None, CatchUp::Latest);
        let up = "2026-01-01T00:00:00Z";
        // On time: the loop was up.
        check(none, None, None, up, "2026-01-01T00:59:00Z", None);
        check(
            none,
            None,
            None,
            up,
            "2026-01-01T01:00:00Z",
            Some("2026-01-01T01:00:00Z"),
        );
        // Already fired, or already handled by this loop.
        check(
            none,
            Some("2026-01-01T01:00:00Z"),
            None,
            up,
            "2026-01-01T01:00:05Z",
            None,
        );
        check(
            none,
            None,
            Some("2026-01-01T01:00:00Z"),
            up,
            "2026-01-01T01:00:05Z",
            None,
        );
        // After a downtime (the loop started at 05:10): none skips 02:00 to
        // 05:00, latest fires 05:00 once.
        let restarted = "2026-01-01T05:10:00Z";
        check(
            none,
            Some("2026-01-01T01:00:00Z"),
            None,
            restarted,
            restarted,
            None,
        );
        check(
            latest,
            Some("2026-01-01T01:00:00Z"),
            None,
            restarted,
            restarted,
            Some("2026-01-01T05:00:00Z"),
        );
        // Nothing from before the schedule existed.
        check(latest, None, None, up, "2026-01-01T00:45:00Z", None);
        // Paused: nothing.
        let paused = Schedule::new(spec(latest, true), created);
        assert_eq!(paused.due(at("2026-01-01T05:00:00Z"), None, at(up)), None);
        assert_eq!(paused.next_after(at(up)), None);
        assert_eq!(paused.next_runs(at(up)).len(), NEXT_RUNS);
    }

    #[test]
    fn a_template_reads_back_as_stored_and_keys_each_firing() {
        let task = NewTask::new(
            "http://example.com/hook".into(),
            br#"{"a":1}"#.to_vec(),
            "k".into(),
            7,
            std::time::Duration::from_millis(1500),
            &crate::Limits::default(),
        )
        .and_then(|t| t.with_first_run(FirstRun::After(std::time::Duration::from_secs(5))))
        .and_then(|t| t.with_method(Method::Put))
        .and_then(|t| t.with_priority(7))
        .and_then(|t| t.with_flow_key(Some("customer-42".into())))
        .expect("a valid task");
        let callback = crate::callback::Callback::new(
            "http://example.com/done".into(),
            crate::callback::CallbackOn::default(),
        )
        .expect("a valid callback");
        let template = TaskTemplate::of(task.with_callback(callback));
        let back = TaskTemplate::from_stored(&template.to_stored()).expect("reads back");
        assert_eq!(
            back, template,
            "every field, the callback's too, reads back"
        );
        let fired = back
            .task(firing_key("nightly", at("2026-01-01T02:00:00Z")))
            .expect("a valid submission");
        assert_eq!(
            fired.idempotency_key(),
            "schedule:nightly:2026-01-01T02:00:00Z"
        );
        assert!(fired.same_work_as(&crate::Task::submitted(
            TaskId::new(Timestamp::from_millis(0), [0; 10]),
            template.new_task(),
            Timestamp::from_millis(0)
        )));
        assert_eq!(fired.priority(), 7);
        assert_eq!(fired.flow_key(), Some("customer-42"));
        assert_eq!(TaskTemplate::from_stored("{}"), Err(CorruptTemplate));
        // A template stored before it took a priority and a flow key.
        let mut older: Value = serde_json::from_str(&template.to_stored()).expect("JSON");
        if let Some(fields) = older.as_object_mut() {
            fields.remove("priority");
            fields.remove("flow_key");
        }
        let older = TaskTemplate::from_stored(&older.to_string()).expect("reads back");
        assert_eq!(
            (older.new_task().priority(), older.new_task().flow_key()),
            (0, None)
        );
        assert_eq!(
            trigger_key("nightly", Timestamp::from_millis(1_767_232_800_123)),
            "schedule:nightly:manual:2026-01-01T02:00:00.123Z"
        );
    }

    #[test]
    fn names_are_path_segments_of_bounded_length() {
        assert!(check_name("nightly-report_v2.1").is_ok());
        for bad in ["", "a/b", "a b", "ü", &"x".repeat(MAX_NAME_BYTES + 1)] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.starts_with("name: "), "{bad:?}: {e}");
        }
    }
}
