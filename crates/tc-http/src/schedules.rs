//! The `/schedules` routes: tasks submitted on a cron pattern.
//! A schedule's `task` is a submit body without `idempotency_key`, checked
//! by the very parser `POST /tasks` uses (its refusals name
//! `task.<field>`); each firing's key is set by the firing loop
//! (tc-worker) or, for a trigger, here.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tc_model::schedule::{
    CatchUp, CronPattern, Overlap, Recurrence, Schedule, ScheduleChange, ScheduleSpec,
    TaskTemplate, Zone, check_name, trigger_key,
};
use tc_model::store::{StoreError, TaskStore};
use tc_model::{FirstRun, Timestamp};

use crate::app::App;
use crate::config::HttpConfig;
use crate::dto::{TaskView, parse_submit, rfc3339};
use crate::error::{About, ApiError, json_type};
use crate::reply::{Answer, json};
use crate::worker_port::Control;
use tc_model::view::HeadersView;

/// A schedule's task as its view shows it: what each firing submits, its
/// header values redacted like a task's.
#[derive(Debug, Serialize)]
struct TemplateView<'a> {
    url: &'a str,
    method: &'static str,
    headers: HeadersView<'a>,
    /// The JSON each call sends (absent when the call sends no body).
    #[serde(skip_serializing_if = "Option::is_none")]
    json: Option<&'a RawValue>,
    max_attempts: u32,
    timeout_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    callback_url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    callback_on: Option<Vec<&'static str>>,
    /// Each firing's task's priority (0 to 9).
    priority: u8,
    /// Each firing's task's flow key (the schedule owner's), or `null`.
    flow_key: Option<&'a str>,
}

/// Why the schedule's latest firing created no task.
#[derive(Debug, Serialize)]
struct FiringErrorView<'a> {
    code: &'a str,
    message: &'a str,
    /// The refused firing's fire time, RFC 3339 UTC.
    at: String,
}

/// A schedule as the API shows it.
#[derive(Debug, Serialize)]
pub(crate) struct ScheduleView<'a> {
    name: &'a str,
    cron: &'a str,
    timezone: &'static str,
    task: TemplateView<'a>,
    paused: bool,
    overlap: &'static str,
    catch_up: &'static str,
    last_run_at: Option<String>,
    last_task_id: Option<String>,
    /// Why the latest firing since the last that submitted a task created
    /// none (`url_not_allowed`); `null` once a firing submits one.
    last_error: Option<FiringErrorView<'a>>,
    /// The next firings, RFC 3339 UTC (paused or not: what resuming
    /// brings).
    next_runs: Vec<String>,
    created_at: String,
    updated_at: String,
}

impl<'a> ScheduleView<'a> {
    pub(crate) fn new(s: &'a Schedule, body: &'a Option<Box<RawValue>>, now: Timestamp) -> Self {
        let task = s.spec.task.new_task();
        let (delay_ms, run_at) = match task.first_run() {
            FirstRun::Now => (None, None),
            FirstRun::After(d) => (Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)), None),
            FirstRun::At(at) => (None, Some(rfc3339(at))),
        };
        ScheduleView {
            name: &s.spec.name,
            cron: s.spec.when.cron.as_str(),
            timezone: s.spec.when.zone.name(),
            task: TemplateView {
                url: task.url(),
                method: task.method().as_str(),
                headers: HeadersView::new(task.headers()),
                json: body.as_deref(),
                max_attempts: task.max_attempts(),
                timeout_ms: u64::try_from(task.timeout().as_millis()).unwrap_or(u64::MAX),
                delay_ms,
                run_at,
                callback_url: task.callback().map(tc_model::callback::Callback::url),
                callback_on: task.callback().map(|c| c.on().names()),
                priority: task.priority(),
                flow_key: task.flow_key(),
            },
            paused: s.spec.paused,
            overlap: s.spec.overlap.as_str(),
            catch_up: s.spec.catch_up.as_str(),
            last_run_at: s.last_run_at.map(rfc3339),
            last_task_id: s.last_task_id.map(|id| id.to_string()),
            last_error: s.last_error.as_ref().map(|e| FiringErrorView {
                code: &e.code,
                message: &e.message,
                at: rfc3339(e.at),
            }),
            next_runs: s.next_runs(now).into_iter().map(rfc3339).collect(),
            created_at: rfc3339(s.created_at),
            updated_at: rfc3339(s.updated_at),
        }
    }
}

/// A template's body as JSON text for its view, when it is JSON.
fn body_of(s: &Schedule) -> Option<Box<RawValue>> {
    let body = s.spec.task.new_task().body();
    if body.is_empty() {
        return None;
    }
    std::str::from_utf8(body)
        .ok()
        .and_then(|text| RawValue::from_string(text.to_owned()).ok())
}

/// Renders `s` with `status`.
fn answer(status: StatusCode, s: &Schedule, now: Timestamp) -> Answer {
    let body = body_of(s);
    json(status, &ScheduleView::new(s, &body, now))
}

/// The `{name}` path segment: one that is not a valid name names no
/// schedule.
pub(crate) fn schedule_name(segment: Option<&str>) -> Result<String, ApiError> {
    let name = segment.unwrap_or_default();
    match check_name(name) {
        Ok(()) => Ok(name.to_owned()),
        Err(_) => Err(not_found(name)),
    }
}

fn not_found(name: &str) -> ApiError {
    ApiError::from_store(StoreError::NotFound, About::Schedule(name))
}

/// A store error about the schedule `name`.
fn store_error(name: &str, e: StoreError) -> ApiError {
    ApiError::from_store(e, About::Schedule(name))
}

/// The fields of a schedule body.
const FIELDS: [&str; 7] = [
    "name", "cron", "timezone", "task", "paused", "overlap", "catch_up",
];

fn string_field(field: &str, value: &Value) -> Result<String, ApiError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        other => Err(ApiError::InvalidRequest(format!(
            "{field}: must be a string, got {}",
            json_type(other)
        ))),
    }
}

/// Parses a `POST /schedules` body, or a `PUT /schedules/{name}` one
/// (`path_name`: `name` may then be left out, or must match).
pub(crate) fn parse_spec(
    bytes: &[u8],
    config: &HttpConfig,
    now: Timestamp,
    path_name: Option<&str>,
) -> Result<ScheduleSpec, ApiError> {
    let invalid = ApiError::InvalidRequest;
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(match serde_json::from_slice::<Value>(bytes) {
            Ok(_) => invalid("body: must be a JSON object".into()),
            Err(e) => invalid(format!("body: not valid JSON: {e}")),
        });
    }
    let fields: BTreeMap<String, Box<RawValue>> =
        serde_json::from_slice(bytes).map_err(|e| invalid(format!("body: not valid JSON: {e}")))?;
    let (mut name, mut cron, mut timezone, mut task) = (None, None, None, None);
    let (mut paused, mut overlap, mut catch_up) = (false, Overlap::Allow, CatchUp::None);
    for (field, raw) in &fields {
        let value: Value = serde_json::from_str(raw.get())
            .map_err(|e| invalid(format!("body: not valid JSON: {e}")))?;
        match field.as_str() {
            "name" => name = Some(string_field(field, &value)?),
            "cron" => cron = Some(string_field(field, &value)?),
            "timezone" => timezone = Some(string_field(field, &value)?),
            "task" => task = Some(raw),
            "paused" => match value {
                Value::Bool(b) => paused = b,
                other => {
                    return Err(invalid(format!(
                        "paused: must be a boolean, got {}",
                        json_type(&other)
                    )));
                }
            },
            "overlap" => {
                overlap = Overlap::parse(&string_field(field, &value)?)
                    .map_err(|e| invalid(e.to_string()))?;
            }
            "catch_up" => {
                catch_up = CatchUp::parse(&string_field(field, &value)?)
                    .map_err(|e| invalid(e.to_string()))?;
            }
            other => return Err(crate::error::unknown_field(other, &FIELDS)),
        }
    }
    let name = match (name, path_name) {
        (Some(given), Some(path)) if given != path => {
            return Err(invalid(format!(
                "name: must be the path's name {path:?} (a schedule is not renamed), got {given:?}"
            )));
        }
        (Some(given), _) => given,
        (None, Some(path)) => path.to_owned(),
        (None, None) => return Err(invalid("name: required".into())),
    };
    check_name(&name).map_err(|e| invalid(e.to_string()))?;
    let cron = cron.ok_or_else(|| invalid("cron: required".into()))?;
    let cron = CronPattern::parse(&cron).map_err(|e| invalid(e.to_string()))?;
    let zone = match timezone {
        None => Zone::UTC,
        Some(name) => Zone::parse(&name).map_err(|e| invalid(e.to_string()))?,
    };
    let when = Recurrence { cron, zone };
    if when.next_after(now).is_none() {
        return Err(invalid(format!(
            "cron: {:?} never fires (no such date)",
            when.cron.as_str()
        )));
    }
    let task = task.ok_or_else(|| invalid("task: required".into()))?;
    let task = parse_task(task, config, now)?;
    Ok(ScheduleSpec {
        name,
        when,
        task,
        paused,
        overlap,
        catch_up,
    })
}

/// A schedule's `task`: a submit body without `idempotency_key`, parsed by
/// `POST /tasks`'s own parser under a placeholder key; every refusal names
/// `task.<field>`.
fn parse_task(
    raw: &RawValue,
    config: &HttpConfig,
    now: Timestamp,
) -> Result<TaskTemplate, ApiError> {
    let invalid = ApiError::InvalidRequest;
    let text = raw.get().trim_start();
    let Some(members) = text.strip_prefix('{') else {
        return Err(invalid("task: must be a JSON object".into()));
    };
    let fields: BTreeMap<String, &RawValue> =
        serde_json::from_str(text).map_err(|e| invalid(format!("task: not valid JSON: {e}")))?;
    if fields.contains_key("idempotency_key") {
        return Err(invalid(
            "task.idempotency_key: set by the schedule for each firing \
             (schedule:{name}:{time}); leave it out"
                .into(),
        ));
    }
    let keyed = if fields.is_empty() {
        r#"{"idempotency_key":"schedule-template"}"#.to_owned()
    } else {
        format!(r#"{{"idempotency_key":"schedule-template",{members}"#)
    };
    let task = parse_submit(keyed.as_bytes(), config, now).map_err(|e| match e {
        ApiError::InvalidRequest(m) if m.starts_with("body: ") => {
            ApiError::InvalidRequest(format!("task: {}", &m["body: ".len()..]))
        }
        ApiError::InvalidRequest(m) => ApiError::InvalidRequest(format!("task.{m}")),
        other => other,
    })?;
    check_task_urls(&task, &config.allow_url_prefixes)?;
    Ok(TaskTemplate::of(task))
}

/// A schedule's task under the allow-list as a submit's is (both its urls),
/// a refusal naming `task.<field>`.
fn check_task_urls(task: &tc_model::NewTask, prefixes: &[String]) -> Result<(), ApiError> {
    crate::tasks::check_urls_allowed(task, prefixes).map_err(|e| match e {
        ApiError::UrlNotAllowed(m) => ApiError::UrlNotAllowed(format!("task.{m}")),
        other => other,
    })
}

/// `POST /schedules`.
pub(crate) async fn create<S: TaskStore, C: Control>(app: &App<S, C>, bytes: &[u8]) -> Answer {
    let now = app.control().now();
    let spec = parse_spec(bytes, app.config(), now, None)?;
    let name = spec.name.clone();
    let created = app
        .store()
        .create_schedule(spec, now)
        .await
        .map_err(|e| store_error(&name, e))?;
    app.control().schedules_changed();
    tracing::info!(schedule = %name, "schedule_created");
    answer(StatusCode::CREATED, &created, now)
}

/// The list's envelope.
#[derive(Debug, Serialize)]
struct ScheduleList<'a> {
    schedules: Vec<ScheduleView<'a>>,
}

/// `GET /schedules`.
pub(crate) async fn list<S: TaskStore, C: Control>(app: &App<S, C>) -> Answer {
    let now = app.control().now();
    let schedules = app.store().schedules().await?;
    let bodies: Vec<Option<Box<RawValue>>> = schedules.iter().map(body_of).collect();
    let views = schedules
        .iter()
        .zip(&bodies)
        .map(|(s, body)| ScheduleView::new(s, body, now))
        .collect();
    json(StatusCode::OK, &ScheduleList { schedules: views })
}

/// `GET /schedules/{name}`.
pub(crate) async fn get<S: TaskStore, C: Control>(app: &App<S, C>, name: String) -> Answer {
    let s = app
        .store()
        .schedule(name.clone())
        .await
        .map_err(|e| store_error(&name, e))?;
    answer(StatusCode::OK, &s, app.control().now())
}

/// `PUT /schedules/{name}` (every field anew), `…/pause`, `…/resume`.
pub(crate) async fn change<S: TaskStore, C: Control>(
    app: &App<S, C>,
    name: String,
    change: Result<ScheduleChange, ApiError>,
) -> Answer {
    let change = change?;
    let now = app.control().now();
    let s = app
        .store()
        .update_schedule(name.clone(), change, now)
        .await
        .map_err(|e| store_error(&name, e))?;
    app.control().schedules_changed();
    tracing::info!(schedule = %name, paused = s.spec.paused, "schedule_changed");
    answer(StatusCode::OK, &s, now)
}

/// `DELETE /schedules/{name}`: its tasks stay.
pub(crate) async fn delete<S: TaskStore, C: Control>(app: &App<S, C>, name: String) -> Answer {
    app.store()
        .delete_schedule(name.clone())
        .await
        .map_err(|e| store_error(&name, e))?;
    app.control().schedules_changed();
    tracing::info!(schedule = %name, "schedule_deleted");
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

/// `POST /schedules/{name}/trigger`: fires now, paused or not, keyed
/// `schedule:{name}:manual:{now}`; answers the task.
pub(crate) async fn trigger<S: TaskStore, C: Control>(app: &App<S, C>, name: String) -> Answer {
    let control = app.control();
    let s = app
        .store()
        .schedule(name.clone())
        .await
        .map_err(|e| store_error(&name, e))?;
    let now = control.now();
    let task = s
        .spec
        .task
        .task(trigger_key(&name, now))
        .map_err(|e| ApiError::Internal(format!("the schedule's task: {e}")))?;
    check_task_urls(&task, &app.config().allow_url_prefixes)?;
    let submitted = app.store().submit(task, now).await?;
    app.store()
        .record_firing(name.clone(), now, submitted.task.id)
        .await?;
    if submitted.created {
        control.task_submitted();
    }
    tracing::info!(schedule = %name, task_id = %submitted.task.id, "schedule_triggered");
    json(StatusCode::OK, &TaskView::new(&submitted.task))
}
