//! `tc-server schedule …`: create, list, get, pause, resume, trigger,
//! delete.

use std::time::Duration;

use http::Method;
use serde_json::{Map, Value};

use super::args::CreateScheduleArgs;
use super::error::ClientError;
use super::format::{Cell, Table};
use super::http::{Api, escape};
use super::output::{Out, note};
use super::view::{self, field, text};

fn path(name: &str) -> String {
    format!("/schedules/{}", escape(name))
}

/// `schedule create`.
pub(crate) async fn create(
    api: &Api,
    out: &Out,
    args: &CreateScheduleArgs,
) -> Result<(), ClientError> {
    let answer = api
        .json(Method::POST, "/schedules", Some(create_body(args)?))
        .await?;
    show(out, &answer)
}

/// `POST /schedules`'s body: the flags given; the task as written.
fn create_body(args: &CreateScheduleArgs) -> Result<String, ClientError> {
    let task: Value = serde_json::from_str(args.task.0.get())
        .map_err(|e| ClientError::Usage(format!("--task: not valid JSON: {e}")))?;
    let mut body = Map::new();
    body.insert("name".into(), args.name.clone().into());
    body.insert("cron".into(), args.cron.clone().into());
    if let Some(zone) = &args.timezone {
        body.insert("timezone".into(), zone.clone().into());
    }
    body.insert("task".into(), task);
    if args.paused {
        body.insert("paused".into(), true.into());
    }
    if let Some(overlap) = &args.overlap {
        body.insert("overlap".into(), overlap.clone().into());
    }
    if let Some(catch_up) = &args.catch_up {
        body.insert("catch_up".into(), catch_up.clone().into());
    }
    // The task's `json` is re-encoded here; the server reads it as a
    // JSON value, digits kept (serde_json's arbitrary precision).
    Ok(Value::Object(body).to_string())
}

/// `schedule list`.
pub(crate) async fn list(api: &Api, out: &Out) -> Result<(), ClientError> {
    let answer = api.json(Method::GET, "/schedules", None).await?;
    let schedules = field(&answer, "schedules").as_array().ok_or_else(|| {
        ClientError::Protocol(format!("a schedule list without schedules: {answer}"))
    })?;
    if out.json {
        for s in schedules {
            out.json_line(s)?;
        }
        return Ok(());
    }
    if schedules.is_empty() {
        note("no schedules");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = schedules.iter().map(row).collect();
    out.text(
        &Table::new(&[
            "NAME",
            "CRON",
            "TIMEZONE",
            "PAUSED",
            "NEXT RUN",
            "LAST RUN (UTC)",
            "LAST TASK",
            "LAST ERROR",
        ])
        .render(&rows, out.colour),
    )
}

fn row(s: &Value) -> Vec<Cell> {
    vec![
        Cell::new(&text(field(s, "name"))),
        Cell::new(&text(field(s, "cron"))),
        Cell::new(&text(field(s, "timezone"))),
        Cell::new(paused(s)),
        Cell::new(&next_run(s, &field(s, "next_runs")[0])),
        Cell::new(&text(field(s, "last_run_at"))),
        Cell::new(&text(field(s, "last_task_id"))),
        Cell::new(&text(field(field(s, "last_error"), "code"))),
    ]
}

/// Whether a schedule is paused, as `schedule get` and `schedule list`
/// both say it.
fn paused(s: &Value) -> &'static str {
    if field(s, "paused").as_bool() == Some(true) {
        "yes"
    } else {
        "no"
    }
}

/// One of a schedule's next runs (the API's UTC time) in the schedule's
/// zone and in UTC: `2026-01-05T02:30:00+01:00 (2026-01-05T01:30:00Z)`;
/// once when the zone is UTC, as given when it cannot be read.
fn next_run(s: &Value, run: &Value) -> String {
    let utc = text(run);
    let zone = field(s, "timezone")
        .as_str()
        .and_then(|z| tc_model::schedule::Zone::parse(z).ok());
    let at = humantime::parse_rfc3339(&utc)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_millis()).ok());
    match (zone, at) {
        (Some(zone), Some(millis)) if zone != tc_model::schedule::Zone::UTC => format!(
            "{} ({utc})",
            zone.local_rfc3339(tc_model::Timestamp::from_millis(millis))
        ),
        _ => utc,
    }
}

/// A schedule's `last_error` (why its latest firing created no task) as
/// one line, `code at time: message`, or the mark of none.
fn last_error(s: &Value) -> String {
    let error = field(s, "last_error");
    if error.is_null() {
        return text(error);
    }
    format!(
        "{} at {}: {}",
        text(field(error, "code")),
        text(field(error, "at")),
        text(field(error, "message"))
    )
}

/// `schedule get`.
pub(crate) async fn get(api: &Api, out: &Out, name: &str) -> Result<(), ClientError> {
    let answer = api.json(Method::GET, &path(name), None).await?;
    show(out, &answer)
}

/// `schedule pause` and `schedule resume`.
pub(crate) async fn act(api: &Api, out: &Out, name: &str, action: &str) -> Result<(), ClientError> {
    let answer = api
        .json(Method::POST, &format!("{}/{action}", path(name)), None)
        .await?;
    show(out, &answer)
}

/// `schedule trigger`: the task it submitted.
pub(crate) async fn trigger(api: &Api, out: &Out, name: &str) -> Result<(), ClientError> {
    let task = api
        .json(Method::POST, &format!("{}/trigger", path(name)), None)
        .await?;
    if out.json {
        return out.json_line(&task);
    }
    out.text(&Table::plain().render(&view::task_fields(&task, out.now), out.colour))
}

/// `schedule delete`.
pub(crate) async fn delete(api: &Api, out: &Out, name: &str) -> Result<(), ClientError> {
    api.send(Method::DELETE, &path(name), None, Duration::ZERO)
        .await?;
    if out.json {
        return Ok(());
    }
    out.text(&format!(
        "schedule {} deleted (its tasks stay)\n",
        super::format::sanitize(name)
    ))
}

fn show(out: &Out, s: &Value) -> Result<(), ClientError> {
    if out.json {
        return out.json_line(s);
    }
    let line = |label: &str, value: String| vec![Cell::new(label), Cell::new(&value)];
    let task = field(s, "task");
    let next: Vec<String> = field(s, "next_runs")
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|run| next_run(s, run))
        .collect();
    let rows = vec![
        line("name", text(field(s, "name"))),
        line("cron", text(field(s, "cron"))),
        line("timezone", text(field(s, "timezone"))),
        line("paused", paused(s).to_owned()),
        line("overlap", text(field(s, "overlap"))),
        line("catch up", text(field(s, "catch_up"))),
        line(
            "task",
            format!(
                "{} {}",
                text(field(task, "method")),
                text(field(task, "url"))
            ),
        ),
        line("next runs", next.join(", ")),
        line("last run", text(field(s, "last_run_at"))),
        line("last task", text(field(s, "last_task_id"))),
        line("last error", last_error(s)),
    ];
    out.text(&Table::plain().render(&rows, out.colour))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::args::Payload;

    /// `get` and `list` say paused the same way; next runs show
    /// in the schedule's zone and in UTC.
    #[test]
    fn get_and_list_say_paused_and_next_runs_alike() {
        let check = |paused_flag: Value, zone: &str, expected_paused: &str, expected_next: &str| {
            let s = serde_json::json!({
                "name": "n", "cron": "30 2 * * *", "timezone": zone, "paused": paused_flag,
                "next_runs": ["2026-01-05T01:30:00Z"], "last_error": null,
                "task": {"method": "POST", "url": "http://a/"}
            });
            let listed = row(&s);
            assert_eq!(listed[3], Cell::new(expected_paused), "{s}");
            assert_eq!(listed[4], Cell::new(expected_next), "{s}");
            assert_eq!(paused(&s), expected_paused);
            assert_eq!(next_run(&s, &field(&s, "next_runs")[0]), expected_next);
        };
        let berlin = "2026-01-05T02:30:00+01:00 (2026-01-05T01:30:00Z)";
        check(Value::Bool(true), "Europe/Berlin", "yes", berlin);
        check(Value::Bool(false), "Europe/Berlin", "no", berlin);
        check(Value::Bool(false), "UTC", "no", "2026-01-05T01:30:00Z");
        check(Value::Null, "Nowhere/Else", "no", "2026-01-05T01:30:00Z");
    }

    /// A refused firing shows in `schedule get` (code, time and
    /// message) and `schedule list` (the code).
    #[test]
    fn a_schedule_s_last_error_is_shown() {
        let check = |error: Value, line: &str, code: &str| {
            let s = serde_json::json!({"name": "n", "next_runs": [], "last_error": error});
            assert_eq!(last_error(&s), line, "{s}");
            assert_eq!(text(field(field(&s, "last_error"), "code")), code, "{s}");
        };
        check(Value::Null, "-", "-");
        check(
            serde_json::json!({
                "code": "url_not_allowed",
                "message": "url: not under any allowed prefix of this server",
                "at": "2026-01-01T00:01:00Z"
            }),
            "url_not_allowed at 2026-01-01T00:01:00Z: url: not under any allowed prefix of this server",
            "url_not_allowed",
        );
    }

    #[test]
    fn a_create_sends_the_flags_given_and_the_task_as_json() {
        let args = |timezone: Option<&str>, paused: bool| CreateScheduleArgs {
            name: "nightly".into(),
            cron: "30 2 * * *".into(),
            timezone: timezone.map(str::to_owned),
            task: Payload(
                serde_json::value::RawValue::from_string(
                    r#"{"url":"http://h/x","json":{"n":1.50}}"#.into(),
                )
                .unwrap(),
            ),
            paused,
            overlap: None,
            catch_up: Some("latest".into()),
            output: Default::default(),
        };
        let body: Value = serde_json::from_str(&create_body(&args(None, false)).unwrap()).unwrap();
        // The task's digits as written (1.50, not 1.5).
        let want: Value = serde_json::from_str(
            r#"{"name": "nightly", "cron": "30 2 * * *", "catch_up": "latest",
                "task": {"url": "http://h/x", "json": {"n": 1.50}}}"#,
        )
        .unwrap();
        assert_eq!(body, want);
        let body: Value =
            serde_json::from_str(&create_body(&args(Some("Europe/Berlin"), true)).unwrap())
                .unwrap();
        assert_eq!(
            (&body["timezone"], &body["paused"]),
            (
                &serde_json::json!("Europe/Berlin"),
                &serde_json::json!(true)
            )
        );
    }
}
