//! `task watch`: each state change and attempt of a task until it is
//! finished.
//!
//! It long-polls `GET /tasks/{id}?wait_ms=N`: the server answers at once
//! when the task becomes terminal, else after N ms with the task as it is,
//! and the client prints what changed since the last answer. The API has no
//! wait for "any change" (only for the end), so a change short of the end is
//! seen within one window ([`WINDOW_MS`]); every attempt is still printed,
//! since each one stays in the task's history.

use serde_json::Value;

use super::error::ClientError;
use super::format::{self, Style};
use super::http::Api;
use super::output::Out;
use super::task::view_waiting;
use super::view::{field, is_terminal, text};

/// How long each request asks the server to wait for the end.
const WINDOW_MS: u64 = 1_000;

/// One thing that happened to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    /// The task entered a state.
    State { at: String, state: String },
    /// An attempt started.
    Started { at: String, n: String },
    /// An attempt ended.
    Ended {
        at: String,
        n: String,
        status: String,
        error: String,
        duration: Option<u64>,
    },
}

/// `task watch`.
pub(crate) async fn watch(api: &Api, out: &Out, id: &str) -> Result<(), ClientError> {
    let mut last: Option<Value> = None;
    // The first read does not wait: the task as it is now comes first.
    let mut wait_ms = 0;
    loop {
        let task = view_waiting(api, id, wait_ms).await?;
        wait_ms = WINDOW_MS;
        if last.as_ref() != Some(&task) {
            print_changes(out, last.as_ref(), &task)?;
        }
        if is_terminal(&task) {
            return Ok(());
        }
        last = Some(task);
    }
}

fn print_changes(out: &Out, before: Option<&Value>, now: &Value) -> Result<(), ClientError> {
    if out.json {
        return out.json_line(now);
    }
    let lines: String = changes(before, now)
        .iter()
        .map(|event| line(out, event))
        .collect();
    out.text(&lines)
}

/// What happened between two views of one task (`before` none: the first
/// view), attempts first, in their order, then the state.
fn changes(before: Option<&Value>, now: &Value) -> Vec<Event> {
    let empty = Vec::new();
    let attempts = |task: &Value| field(task, "attempts").as_array().unwrap_or(&empty).clone();
    let seen = before.map(attempts).unwrap_or_default();
    let mut events = Vec::new();
    for (i, attempt) in attempts(now).iter().enumerate() {
        let earlier = seen.get(i);
        let at = |name: &str| text(field(attempt, name));
        let n = text(field(attempt, "n"));
        if earlier.is_none() {
            events.push(Event::Started {
                at: at("started_at"),
                n: n.clone(),
            });
        }
        let ended = !field(attempt, "finished_at").is_null();
        let ended_before = earlier.is_some_and(|e| !field(e, "finished_at").is_null());
        if ended && !ended_before {
            events.push(Event::Ended {
                at: at("finished_at"),
                n,
                status: text(field(attempt, "http_status")),
                error: text(field(attempt, "error")),
                duration: field(attempt, "duration_ms").as_u64(),
            });
        }
    }
    let state = text(field(now, "state"));
    if before.is_none_or(|b| text(field(b, "state")) != state) {
        events.push(Event::State {
            at: text(field(now, "updated_at")),
            state,
        });
    }
    events
}

fn line(out: &Out, event: &Event) -> String {
    match event {
        Event::State { at, state } => format!(
            "{}  state      {}\n",
            format::clock(at),
            out.paint_state(state)
        ),
        Event::Started { at, n } => format!(
            "{}  attempt {}  started\n",
            format::clock(at),
            format::sanitize(n)
        ),
        Event::Ended {
            at,
            n,
            status,
            error,
            duration,
        } => {
            let style = if error == "-" {
                Style::Green
            } else {
                Style::Red
            };
            let outcome = match error.as_str() {
                "-" => format!("HTTP {status}"),
                _ => format!("HTTP {status}, {error}"),
            };
            let took = duration.map(|ms| format!(" in {}", format::millis(ms)));
            format!(
                "{}  attempt {}  {}{}\n",
                format::clock(at),
                format::sanitize(n),
                out.paint(&format::sanitize(&outcome), style),
                took.unwrap_or_default()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use serde_json::json;

    use super::*;

    fn task(state: &str, attempts: Value) -> Value {
        json!({"id": "t", "state": state, "updated_at": "2026-01-02T03:04:05.000Z",
               "attempts": attempts})
    }

    fn running(n: u32, at: &str) -> Value {
        json!({"n": n, "started_at": at, "finished_at": null, "http_status": null,
               "error": null, "duration_ms": null})
    }

    fn ended(n: u32, at: &str, end: &str, status: u16, error: Value) -> Value {
        json!({"n": n, "started_at": at, "finished_at": end, "http_status": status,
               "error": error, "duration_ms": 60})
    }

    fn state(state: &str) -> Event {
        Event::State {
            at: "2026-01-02T03:04:05.000Z".into(),
            state: state.into(),
        }
    }

    #[test]
    fn each_state_change_and_attempt_is_told_once() {
        let pending = task("pending", json!([]));
        let first = running(1, "T1");
        let first_failed = ended(1, "T1", "T2", 503, json!("http_503"));
        let second_ok = ended(2, "T3", "T4", 200, json!(null));
        let check = |before: Option<&Value>, now: &Value, expected: Vec<Event>| {
            assert_eq!(changes(before, now), expected, "{before:?} -> {now}");
        };
        check(None, &pending, vec![state("pending")]);
        check(Some(&pending), &pending, vec![]);
        let running_task = task("running", json!([first]));
        check(
            Some(&pending),
            &running_task,
            vec![
                Event::Started {
                    at: "T1".into(),
                    n: "1".into(),
                },
                state("running"),
            ],
        );
        // Between two looks the first try failed, the task waited, and the
        // second try succeeded: every step is told, the state once.
        let done = task("success", json!([first_failed, second_ok]));
        check(
            Some(&running_task),
            &done,
            vec![
                Event::Ended {
                    at: "T2".into(),
                    n: "1".into(),
                    status: "503".into(),
                    error: "http_503".into(),
                    duration: Some(60),
                },
                Event::Started {
                    at: "T3".into(),
                    n: "2".into(),
                },
                Event::Ended {
                    at: "T4".into(),
                    n: "2".into(),
                    status: "200".into(),
                    error: "-".into(),
                    duration: Some(60),
                },
                state("success"),
            ],
        );
    }

    #[test]
    fn lines_are_readable_and_escaped() {
        let out = Out {
            json: false,
            colour: false,
            terminal: false,
            now: SystemTime::UNIX_EPOCH,
        };
        let ended = Event::Ended {
            at: "2026-01-02T03:04:05.678Z".into(),
            n: "1".into(),
            status: "503".into(),
            error: "http_503\x1b[2J".into(),
            duration: Some(60),
        };
        assert_eq!(
            line(&out, &ended),
            "03:04:05.678  attempt 1  HTTP 503, http_503\\u{1b}[2J in 60ms\n"
        );
        assert_eq!(
            line(&out, &state("canceled")),
            "03:04:05.000  state      canceled\n"
        );
    }
}
