//! The API's task and destination views as rows for people. Every value is
//! read leniently (a field missing or of another type shows as `-`): the
//! server is the contract's judge, the client only shows what came.

use std::time::SystemTime;

use serde_json::Value;

use super::error::ClientError;
use super::format::{self, Cell, Style};

/// The text shown for a value that is absent or null.
const NONE: &str = "-";

/// `value[name]`, `Null` when absent.
pub(crate) fn field<'a>(value: &'a Value, name: &str) -> &'a Value {
    value.get(name).unwrap_or(&Value::Null)
}

/// A value as short text: strings as they are, numbers and booleans
/// written, null as `-`.
pub(crate) fn text(value: &Value) -> String {
    match value {
        Value::Null => NONE.to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A task view's id.
pub(crate) fn task_id(task: &Value) -> Result<String, ClientError> {
    field(task, "id")
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| ClientError::Protocol(format!("a task without an id: {task}")))
}

/// Whether a task view is in a terminal state.
pub(crate) fn is_terminal(task: &Value) -> bool {
    matches!(
        field(task, "state").as_str(),
        Some("success" | "failed" | "canceled")
    )
}

/// The task's state, coloured by what it means.
pub(crate) fn state_cell(task: &Value) -> Cell {
    let state = field(task, "state").as_str().unwrap_or(NONE);
    Cell::styled(state, format::state_style(state))
}

/// `attempt 2 of 5`.
fn attempts_text(task: &Value) -> String {
    format!(
        "{} of {}",
        text(field(task, "attempt")),
        text(field(task, "max_attempts"))
    )
}

/// How a finished task ended, in one line, its state coloured.
pub(crate) fn outcome_line(task: &Value, colour: bool) -> String {
    let state = text(field(task, "state"));
    let mut rest = format!(" after attempt {}", attempts_text(task));
    if let Some(status) = field(task, "http_status").as_u64() {
        rest.push_str(&format!(", HTTP {status}"));
    }
    if let Some(error) = field(task, "error").as_str() {
        rest.push_str(&format!(", error {error}"));
    }
    format!(
        "ended {}{}\n",
        format::paint_state(&state, colour),
        format::sanitize(&rest)
    )
}

/// A time as `3s ago (2026-01-02T03:04:05.678Z)`, or `-`.
fn when(value: &Value, now: SystemTime) -> String {
    match value.as_str() {
        Some(time) => format!("{} ({time})", format::relative_rfc3339(time, now)),
        None => NONE.to_owned(),
    }
}

/// Every field of a task view, as label and value rows.
pub(crate) fn task_fields(task: &Value, now: SystemTime) -> Vec<Vec<Cell>> {
    let row = |label: &str, value: String| vec![Cell::new(label), Cell::new(&value)];
    let mut rows = vec![
        row("id", text(field(task, "id"))),
        vec![Cell::new("state"), state_cell(task)],
        row("method", text(field(task, "method"))),
        row("url", text(field(task, "url"))),
    ];
    // As the API shows them: credentials already `[redacted]`.
    if let Some(headers) = field(task, "headers").as_object()
        && !headers.is_empty()
    {
        let list: Vec<String> = headers
            .iter()
            .map(|(name, value)| format!("{name}: {}", text(value)))
            .collect();
        rows.push(row("headers", list.join(", ")));
    }
    rows.extend([
        row("destination", text(field(task, "destination"))),
        row("key", text(field(task, "idempotency_key"))),
    ]);
    // The W3C trace id, to find the task's spans (absent from older
    // servers' views, null for tasks stored before traces were kept).
    if !field(task, "trace_id").is_null() {
        rows.push(row("trace", text(field(task, "trace_id"))));
    }
    // Absent from older servers' views.
    if !field(task, "priority").is_null() {
        rows.push(row("priority", text(field(task, "priority"))));
    }
    if !field(task, "flow_key").is_null() {
        rows.push(row("flow_key", text(field(task, "flow_key"))));
    }
    rows.extend([
        row("attempt", attempts_text(task)),
        row("http status", text(field(task, "http_status"))),
        row("error", text(field(task, "error"))),
        row("created", when(field(task, "created_at"), now)),
        row("updated", when(field(task, "updated_at"), now)),
    ]);
    let optional = [
        ("run at", "run_at"),
        ("started", "started_at"),
        ("finished", "finished_at"),
    ];
    for (label, name) in optional {
        if !field(task, name).is_null() {
            rows.push(row(label, when(field(task, name), now)));
        }
    }
    if let Some(ms) = field(task, "duration_ms").as_u64() {
        rows.push(row("duration", format::millis(ms)));
    }
    if let Some(result) = field(task, "result").as_str() {
        rows.push(row("result", result_preview(result)));
    }
    rows
}

/// The start of a result: `17 bytes: {"received":true}`.
fn result_preview(result: &str) -> String {
    format!("{} bytes: {}", result.len(), format::truncate(result, 120))
}

/// One attempt of a task view as a table row.
pub(crate) fn attempt_row(attempt: &Value) -> Vec<Cell> {
    let started = field(attempt, "started_at")
        .as_str()
        .map_or_else(|| NONE.to_owned(), format::clock);
    let duration = match field(attempt, "duration_ms").as_u64() {
        Some(ms) => format::millis(ms),
        None if field(attempt, "finished_at").is_null() => "running".to_owned(),
        None => NONE.to_owned(),
    };
    let status = field(attempt, "http_status");
    let style = match (status.as_u64(), field(attempt, "error").is_null()) {
        (Some(200..=299), true) => Style::Green,
        (_, false) => Style::Red,
        _ => Style::Plain,
    };
    vec![
        Cell::new(&text(field(attempt, "n"))),
        Cell::new(&started),
        Cell::new(&duration),
        Cell::styled(&text(status), style),
        Cell::new(&text(field(attempt, "error"))),
    ]
}

/// One task of a list as a table row: ID, STATE, ATTEMPT, CREATED, ERROR,
/// DESTINATION.
pub(crate) fn list_row(task: &Value, now: SystemTime, with_tenant: bool) -> Vec<Cell> {
    let created = field(task, "created_at")
        .as_str()
        .map_or_else(|| NONE.to_owned(), |t| format::relative_rfc3339(t, now));
    let mut row = vec![Cell::new(&text(field(task, "id")))];
    if with_tenant {
        row.push(Cell::new(&text(field(task, "tenant"))));
    }
    row.extend([
        state_cell(task),
        Cell::new(&format!(
            "{}/{}",
            text(field(task, "attempt")),
            text(field(task, "max_attempts"))
        )),
        Cell::new(&created),
        Cell::new(&text(field(task, "error"))),
        Cell::new(&text(field(task, "destination"))),
    ]);
    row
}

/// The task list's header; with a TENANT column when any task listed
/// belongs to a tenant (the admin's listing once tenants exist).
pub(crate) fn list_header(with_tenant: bool) -> Vec<&'static str> {
    let mut header = vec!["ID"];
    if with_tenant {
        header.push("TENANT");
    }
    header.extend(["STATE", "ATTEMPT", "CREATED", "ERROR", "DESTINATION"]);
    header
}

/// Whether any of `tasks` belongs to a tenant.
pub(crate) fn any_tenant(tasks: &[Value]) -> bool {
    tasks.iter().any(|t| field(t, "tenant").is_string())
}

/// The destination list's header.
pub(crate) const DESTINATION_HEADER: [&str; 9] = [
    "DESTINATION",
    "PAUSED",
    "IN FLIGHT",
    "PENDING",
    "MAX IN FLIGHT",
    "RATE/S",
    "BURST",
    "BREAKER",
    "LAST OUTCOME",
];

/// One destination as a table row.
pub(crate) fn destination_row(d: &Value) -> Vec<Cell> {
    let paused = field(d, "paused").as_bool() == Some(true);
    vec![
        Cell::new(&text(field(d, "destination"))),
        Cell::styled(
            if paused { "paused" } else { "no" },
            if paused { Style::Yellow } else { Style::Plain },
        ),
        Cell::new(&text(field(d, "in_flight"))),
        Cell::new(&text(field(d, "pending"))),
        Cell::new(&text(field(d, "max_in_flight"))),
        Cell::new(&text(field(d, "rate_per_s"))),
        Cell::new(&text(field(d, "burst"))),
        breaker_cell(d),
        Cell::new(&last_outcome(d)),
    ]
}

fn breaker_cell(d: &Value) -> Cell {
    let breaker = field(d, "breaker").as_str().unwrap_or(NONE);
    let style = match breaker {
        "open" => Style::Red,
        "half_open" => Style::Yellow,
        _ => Style::Plain,
    };
    Cell::styled(breaker, style)
}

/// The last call's error and status, or its status alone when it had no
/// error (a 200 is an outcome, not an error).
fn last_outcome(d: &Value) -> String {
    match (
        field(d, "last_error").as_str(),
        field(d, "last_status").as_u64(),
    ) {
        (Some(error), Some(status)) => format!("{error} ({status})"),
        (Some(error), None) => error.to_owned(),
        (None, Some(status)) => format!("HTTP {status}"),
        (None, None) => NONE.to_owned(),
    }
}

/// A destination's default headers: their names (the API never shows the
/// values).
fn header_names(d: &Value) -> String {
    let names: Vec<&str> = field(d, "header_names")
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if names.is_empty() {
        NONE.to_owned()
    } else {
        names.join(", ")
    }
}

/// How many secrets sign its calls.
fn signing(d: &Value) -> String {
    match field(d, "signing_secrets").as_u64() {
        None | Some(0) => NONE.to_owned(),
        Some(1) => "signed (1 secret)".to_owned(),
        Some(n) => format!("signed ({n} secrets, rotating)"),
    }
}

/// The tenants its headers and secrets are lent to: their names, `*` for
/// every tenant, or none.
fn shared_with(d: &Value) -> String {
    let names: Vec<&str> = field(d, "share_with_tenants")
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if names.is_empty() {
        NONE.to_owned()
    } else {
        names.join(", ")
    }
}

/// Its `auth`: the type and the non-secret fields the view has.
fn auth(d: &Value) -> String {
    let Some(auth) = field(d, "auth").as_object() else {
        return NONE.to_owned();
    };
    let kind = auth.get("type").and_then(Value::as_str).unwrap_or("?");
    let fields: Vec<String> = auth
        .iter()
        .filter(|(name, value)| *name != "type" && !value.is_null())
        .map(|(name, value)| match value.as_str() {
            Some(text) => format!("{name}={text}"),
            None => format!("{name}={value}"),
        })
        .collect();
    format!("{kind} ({})", fields.join(", "))
}

/// Its client certificate's subject and expiry (the key is never shown).
fn client_cert(d: &Value) -> String {
    let cert = field(d, "client_cert");
    match (cert["subject"].as_str(), cert["not_after"].as_str()) {
        (Some(subject), Some(not_after)) => format!("{subject} (expires {not_after})"),
        _ => NONE.to_owned(),
    }
}

/// Every field of a destination view, as label and value rows.
pub(crate) fn destination_fields(d: &Value, now: SystemTime) -> Vec<Vec<Cell>> {
    let row = |label: &str, value: String| vec![Cell::new(label), Cell::new(&value)];
    let paused = field(d, "paused").as_bool() == Some(true);
    vec![
        row("destination", text(field(d, "destination"))),
        vec![
            Cell::new("paused"),
            Cell::styled(
                if paused { "yes" } else { "no" },
                if paused { Style::Yellow } else { Style::Plain },
            ),
        ],
        row("max in flight", text(field(d, "max_in_flight"))),
        row("rate/s", text(field(d, "rate_per_s"))),
        row("burst", text(field(d, "burst"))),
        row("headers", header_names(d)),
        row("signing", signing(d)),
        row("shared with", shared_with(d)),
        row("auth", auth(d)),
        row("client cert", client_cert(d)),
        row("own CAs", text(field(d, "ca_certs"))),
        row("in flight", text(field(d, "in_flight"))),
        row("pending", text(field(d, "pending"))),
        vec![Cell::new("breaker"), breaker_cell(d)],
        row("backoff until", when(field(d, "backoff_until"), now)),
        row("last outcome", last_outcome(d)),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::client::format::Table;

    fn now() -> SystemTime {
        humantime::parse_rfc3339("2026-01-02T03:04:10Z").unwrap()
    }

    fn task() -> Value {
        json!({
            "id": "0194d1c2-7a3e-7c41-9a8b-5d2f1e0c3b4a",
            "state": "success",
            "url": "http://127.0.0.1:9000/hook",
            "method": "PUT",
            "headers": {"authorization": "[redacted]", "x-tenant": "acme"},
            "destination": "127.0.0.1:9000",
            "idempotency_key": "order-42",
            "trace_id": "0af7651916cd43dd8448eb211c80319c",
            "attempt": 2, "max_attempts": 5,
            "http_status": 200, "error": null,
            "result": "{\"received\":true}",
            "created_at": "2026-01-02T03:04:05.678Z",
            "updated_at": "2026-01-02T03:04:06.120Z",
            "started_at": "2026-01-02T03:04:05.990Z",
            "finished_at": "2026-01-02T03:04:06.120Z",
            "run_at": null,
            "duration_ms": 130,
            "attempts": [
                {"n": 1, "started_at": "2026-01-02T03:04:05.700Z",
                 "finished_at": "2026-01-02T03:04:05.760Z",
                 "http_status": 503, "error": "http_503", "duration_ms": 60},
                {"n": 2, "started_at": "2026-01-02T03:04:05.990Z", "finished_at": null,
                 "http_status": null, "error": null, "duration_ms": null}
            ]
        })
    }

    #[test]
    fn a_task_shows_every_field_it_has() {
        let text = Table::plain().render(&task_fields(&task(), now()), false);
        assert_eq!(
            text,
            "id           0194d1c2-7a3e-7c41-9a8b-5d2f1e0c3b4a\n\
             state        success\n\
             method       PUT\n\
             url          http://127.0.0.1:9000/hook\n\
             headers      authorization: [redacted], x-tenant: acme\n\
             destination  127.0.0.1:9000\n\
             key          order-42\n\
             trace        0af7651916cd43dd8448eb211c80319c\n\
             attempt      2 of 5\n\
             http status  200\n\
             error        -\n\
             created      4s ago (2026-01-02T03:04:05.678Z)\n\
             updated      3s ago (2026-01-02T03:04:06.120Z)\n\
             started      4s ago (2026-01-02T03:04:05.990Z)\n\
             finished     3s ago (2026-01-02T03:04:06.120Z)\n\
             duration     130ms\n\
             result       17 bytes: {\"received\":true}\n"
        );
    }

    #[test]
    fn attempts_show_their_outcome_and_running_ones_say_so() {
        let t = task();
        let attempts = t["attempts"].as_array().unwrap();
        let rows: Vec<Vec<Cell>> = attempts.iter().map(attempt_row).collect();
        assert_eq!(rows[0][3], Cell::styled("503", Style::Red));
        let text =
            Table::new(&["N", "STARTED", "DURATION", "STATUS", "ERROR"]).render(&rows, false);
        assert_eq!(
            text,
            "N  STARTED       DURATION  STATUS  ERROR\n\
             1  03:04:05.700  60ms      503     http_503\n\
             2  03:04:05.990  running   -       -\n"
        );
    }

    #[test]
    fn list_rows_are_short() {
        let row = list_row(&task(), now(), false);
        let texts: Vec<String> = row
            .iter()
            .map(|c| Table::plain().render(&[vec![c.clone()]], false))
            .collect();
        assert_eq!(
            texts.concat(),
            "0194d1c2-7a3e-7c41-9a8b-5d2f1e0c3b4a\nsuccess\n2/5\n4s ago\n-\n127.0.0.1:9000\n"
        );
        assert_eq!(row[1], Cell::styled("success", Style::Green));
    }

    #[test]
    fn the_list_has_a_tenant_column_when_a_task_has_a_tenant() {
        let check = |tenants: &[Option<&str>], expected: &str| {
            let tasks: Vec<Value> = tenants
                .iter()
                .map(|tenant| {
                    let mut t = task();
                    t["tenant"] = tenant.map_or(Value::Null, Value::from);
                    t
                })
                .collect();
            let with_tenant = any_tenant(&tasks);
            let rows: Vec<Vec<Cell>> = tasks
                .iter()
                .map(|t| list_row(t, now(), with_tenant))
                .collect();
            let text = Table::new(&list_header(with_tenant)).render(&rows, false);
            let header = text.lines().next().unwrap_or_default();
            assert_eq!(
                header.split_whitespace().collect::<Vec<_>>().join(" "),
                expected,
                "{tenants:?}"
            );
        };
        check(&[None, None], "ID STATE ATTEMPT CREATED ERROR DESTINATION");
        check(
            &[None, Some("acme")],
            "ID TENANT STATE ATTEMPT CREATED ERROR DESTINATION",
        );
    }

    #[test]
    fn outcome_lines_say_how_a_task_ended() {
        assert_eq!(
            outcome_line(&task(), false),
            "ended success after attempt 2 of 5, HTTP 200\n"
        );
        assert_eq!(
            outcome_line(&task(), true),
            "ended \x1b[32msuccess\x1b[0m after attempt 2 of 5, HTTP 200\n"
        );
        let failed = json!({"state": "failed", "attempt": 3, "max_attempts": 3,
            "http_status": 503, "error": "http_503"});
        assert_eq!(
            outcome_line(&failed, false),
            "ended failed after attempt 3 of 3, HTTP 503, error http_503\n"
        );
        assert!(is_terminal(&failed));
        assert!(!is_terminal(&json!({"state": "running"})));
        assert!(!is_terminal(&json!({})));
    }

    #[test]
    fn destinations_show_settings_load_and_breaker() {
        let d = json!({"destination": "127.0.0.1:9000", "max_in_flight": 4,
            "rate_per_s": 2.5, "burst": 3, "paused": true, "in_flight": 1, "pending": 7,
            "breaker": "open", "backoff_until": null, "last_error": "http_503",
            "last_status": 503, "header_names": ["authorization", "x-region"],
            "signing_secrets": 2});
        let mut table = Table::new(&DESTINATION_HEADER);
        assert_eq!(
            table.render(&[destination_row(&d)], false),
            "DESTINATION     PAUSED  IN FLIGHT  PENDING  MAX IN FLIGHT  RATE/S  BURST  BREAKER  LAST OUTCOME\n\
             127.0.0.1:9000  paused  1          7        4              2.5     3      open     http_503 (503)\n"
        );
        let fields = Table::plain().render(&destination_fields(&d, now()), false);
        assert!(fields.contains("paused         yes\n"), "{fields}");
        assert!(fields.contains("backoff until  -\n"), "{fields}");
        assert!(
            fields.contains("headers        authorization, x-region\n"),
            "{fields}"
        );
        assert!(
            fields.contains("signing        signed (2 secrets, rotating)\n"),
            "{fields}"
        );
    }
}
