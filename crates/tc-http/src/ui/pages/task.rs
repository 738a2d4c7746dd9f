//! One task: every field (its headers as the API shows them, credentials
//! redacted), the request body, the attempts as a timeline, the result, and
//! the buttons (cancel, retry, delete) that call the JSON API.

use maud::{Markup, html};
use tc_model::store::TaskStore;
use tc_model::{AttemptRecord, State, Task, TaskId, Timestamp};

use super::{Nav, Rendered, badge, duration_text, layout, size_text, when};
use crate::error::ApiError;
use crate::ui::Ctx;
use crate::ui::Source;
use crate::worker_port::Control;

/// The most result bytes shown inline; the rest is behind the download link.
const SHOWN_RESULT_BYTES: usize = 64 * 1024;

pub(crate) async fn render<S: TaskStore, C: Control>(
    app: &Source<'_, S, C>,
    ctx: &Ctx,
    id: &str,
    fragment: bool,
) -> Rendered {
    let Ok(id) = id.parse::<TaskId>() else {
        return Rendered::not_found(ctx, "No task has this id.");
    };
    let now = app.control().now();
    // Another tenant's task is as unknown as one that never was: the
    // store answers NotFound.
    let task = match app.store().get(id, ctx.scope.clone()).await {
        Ok(task) => task,
        Err(e) => {
            let e = ApiError::from(e);
            return if fragment {
                Rendered::error_fragment(&e)
            } else {
                Rendered::error(ctx, &e, false)
            };
        }
    };
    let live = details(&task, now);
    if fragment {
        return Rendered::ok(live);
    }
    Rendered::ok(layout(
        ctx,
        "Task",
        Nav::Tasks,
        html! {
            p.crumbs { a href="/ui/tasks" { "Tasks" } " / " span.mono { (task.id) } }
            div #answer.answer aria-live="polite" hidden {}
            div #live data-live={ "/ui/fragment/tasks/" (task.id) } { (live) }
            section.panel {
                h2 { "Request body" }
                (body_block(&task))
            }
        },
    ))
}

/// The buttons that apply to the task's state; each asks first and shows
/// the API's answer in `#answer`.
fn buttons(task: &Task) -> Markup {
    let id = task.id;
    html! {
        div.buttons {
            @if matches!(task.state, State::Pending | State::Running) {
                button.danger #cancel type="button" data-method="POST" data-url={ "/tasks/" (id) "/cancel" }
                    data-confirm={ "Cancel this task? "
                        @if task.state == State::Running { "Its call in flight is dropped and the connection closed." }
                        @else { "It will not be called." } } { "Cancel" }
            }
            @if matches!(task.state, State::Failed | State::Canceled) {
                button #retry type="button" data-method="POST" data-url={ "/tasks/" (id) "/retry" }
                    data-confirm="Retry this task now, with a fresh budget of tries?" { "Retry" }
            }
            @if task.state.is_terminal() {
                button.danger.secondary #delete type="button" data-method="DELETE" data-url={ "/tasks/" (id) }
                    data-confirm="Delete this task, its history and its result? This cannot be undone."
                    data-after="/ui/tasks" { "Delete" }
            }
        }
    }
}

fn details(task: &Task, now: Timestamp) -> Markup {
    let tries_this_round = task.attempt.saturating_sub(task.attempts_before_retry);
    html! {
        div.task-head {
            h1 { "Task " span.mono #task-id { (task.id) } }
            span #task-state data-state=(task.state.as_str()) { (badge(task.state)) }
            (buttons(task))
        }
        p.story { (story(task, now)) }
        section.panels {
            div.panel {
                h2 { "Fields" }
                dl.fields {
                    dt { "state" } dd { (task.state.as_str()) }
                    dt { "method" } dd.mono #task-method { (task.method.as_str()) }
                    dt { "url" } dd.mono.break { (task.url) }
                    dt { "headers" } dd #task-headers {
                        @if task.headers.is_empty() { span.muted { "none of its own" } }
                        @else {
                            ul.headers {
                                @for (name, value) in task.headers.redacted() {
                                    li.mono.break { (name) ": " (value) }
                                }
                            }
                        }
                    }
                    dt { "destination" } dd.mono { a href={ "/ui/tasks?destination=" (super::encode(&task.destination)) } { (task.destination) } }
                    dt { "idempotency key" } dd.mono.break { (task.idempotency_key) }
                    dt { "priority" } dd #task-priority { (task.priority) }
                    @if let Some(trace) = &task.trace {
                        dt { "trace id" } dd.mono { (trace.trace_id_hex()) }
                    }
                    @if let Some(callback) = &task.callback {
                        dt { "callback" } dd.mono.break #task-callback {
                            (callback.url()) " on " (callback.on().names().join(", "))
                        }
                    }
                    @if let Some(id) = task.callback_task_id {
                        dt { "callback task" } dd.mono #task-callback-task { a href={ "/ui/tasks/" (id) } { (id) } }
                    }
                    @if let Some(id) = task.callback_of {
                        dt { "callback of" } dd.mono #task-callback-of { a href={ "/ui/tasks/" (id) } { (id) } }
                    }
                    dt { "tries" } dd {
                        (tries_this_round) " of " (task.max_attempts)
                        @if task.attempts_before_retry > 0 { " this round (" (task.attempt) " in all, retried by hand)" }
                    }
                    dt { "timeout per try" } dd { (duration_text(task.timeout)) }
                    dt { "http status" } dd { @if let Some(s) = task.http_status { (s) } @else { "—" } }
                    dt { "error" } dd { @if let Some(e) = &task.error { span.err { (e) } } @else { "—" } }
                    dt { "created" } dd { (when(task.created_at, now)) }
                    dt { "updated" } dd { (when(task.updated_at, now)) }
                    dt { "run at" } dd { @if let Some(t) = task.first_run.run_at(task.created_at) { (when(t, now)) } @else { "at once" } }
                    dt { "started" } dd { @if let Some(t) = task.started_at { (when(t, now)) } @else { "—" } }
                    dt { "finished" } dd { @if let Some(t) = task.finished_at { (when(t, now)) } @else { "—" } }
                    dt { "next try due" } dd { @if let (State::Pending, Some(t)) = (task.state, task.next_run_at) { (when(t, now)) } @else { "—" } }
                    dt { "lease until" } dd { @if let Some(t) = task.lease_until { (when(t, now)) } @else { "—" } }
                }
            }
            div.panel {
                h2 { "Attempts" }
                (timeline(task, now))
            }
        }
        section.panel {
            h2 { "Result" }
            (result_block(task))
        }
    }
}

/// One sentence a person reads first.
fn story(task: &Task, now: Timestamp) -> String {
    let tries = task.attempts.len();
    let plural = if tries == 1 { "try" } else { "tries" };
    match task.state {
        State::Pending if tries == 0 => "Waiting for its first try.".into(),
        State::Pending => match task.next_run_at {
            Some(t) if t > now => format!(
                "{tries} {plural} so far; the next is due {}.",
                super::relative(t, now)
            ),
            _ => format!("{tries} {plural} so far; the next is due now."),
        },
        State::Running => format!("Try {} is calling the downstream now.", task.attempt),
        State::Success => format!(
            "Succeeded after {tries} {plural}{}.",
            task.http_status
                .map(|s| format!(" with HTTP {s}"))
                .unwrap_or_default()
        ),
        State::Failed => format!(
            "Failed after {tries} {plural}: {}.",
            task.error.as_deref().unwrap_or("no reason recorded")
        ),
        State::Canceled => format!("Canceled after {tries} {plural}."),
    }
}

fn outcome_class(a: &AttemptRecord) -> &'static str {
    match (a.finished_at, &a.error, a.http_status) {
        (None, _, _) => "running",
        (Some(_), None, _) => "ok",
        (Some(_), Some(e), _) if e == "canceled" || e == "interrupted" => "stopped",
        _ => "error",
    }
}

/// The tries in order, each a row with its start (after the submit), a bar
/// as long as its duration against the longest, its status and error.
fn timeline(task: &Task, now: Timestamp) -> Markup {
    let longest = task
        .attempts
        .iter()
        .map(|a| {
            a.duration_ms
                .unwrap_or_else(|| ms(now.duration_since(a.started_at)))
        })
        .max()
        .unwrap_or(1)
        .max(1);
    html! {
        @if task.attempts.is_empty() {
            p.muted { "No try yet." }
        } @else {
            ol.timeline #attempts {
                @for a in &task.attempts {
                    @let class = outcome_class(a);
                    @let duration = a.duration_ms.unwrap_or_else(|| ms(now.duration_since(a.started_at)));
                    li class={ "attempt outcome-" (class) } data-attempt=(a.n) {
                        div.when {
                            strong { "#" (a.n) }
                            " started " (when(a.started_at, now))
                            span.muted { " (+" (duration_text(a.started_at.duration_since(task.created_at))) " after submit)" }
                        }
                        svg.bar width="200" height="8" viewBox="0 0 200 8" aria-hidden="true" {
                            rect class={ "bar-" (class) } x="0" y="0" height="8" rx="2"
                                width=(format!("{:.1}", (duration as f64 / longest as f64 * 200.0).max(2.0))) {}
                        }
                        div.what {
                            @if a.finished_at.is_none() { "running for " (duration_text(std::time::Duration::from_millis(duration))) }
                            @else {
                                (duration_text(std::time::Duration::from_millis(duration)))
                                @if let Some(s) = a.http_status { " · HTTP " (s) }
                                @if let Some(e) = &a.error { " · " span.err { (e) } }
                                @else { " · ok" }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whether a content type names text a page can show (escaped).
fn is_text(content_type: Option<&str>) -> bool {
    let essence = content_type
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase())
        .unwrap_or_default();
    essence.starts_with("text/")
        || essence == "application/json"
        || essence.ends_with("+json")
        || essence == "application/xml"
        || essence.ends_with("+xml")
        || essence == "application/javascript"
}

fn result_block(task: &Task) -> Markup {
    let Some(bytes) = &task.result else {
        return html! { p.muted { "No result" @if !task.state.is_terminal() { " yet" } "." } };
    };
    let content_type = task.result_content_type.as_deref();
    let text = std::str::from_utf8(bytes)
        .ok()
        .filter(|_| is_text(content_type) || content_type.is_none());
    html! {
        p.meta {
            "Content-Type " code #result-type { (content_type.unwrap_or("none given")) }
            " · " (size_text(bytes.len()))
            " · " a #result-download href={ "/tasks/" (task.id) "/result" } download { "download as sent" }
        }
        @match text {
            Some(text) => {
                @let shown = pretty_json(text).unwrap_or_else(|| text.to_owned());
                @let cut = shown.len() > SHOWN_RESULT_BYTES;
                pre.code #result-text { (cut_at(&shown, SHOWN_RESULT_BYTES)) }
                @if cut { p.muted { "Shown up to " (size_text(SHOWN_RESULT_BYTES)) "; download for the rest." } }
            }
            None => { p #result-binary { "Binary result of " (size_text(bytes.len())) ": not shown." } }
        }
    }
}

fn body_block(task: &Task) -> Markup {
    let body = &task.body;
    if body.is_empty() {
        return html! { p.muted #request-body { "None: its " (task.method.as_str()) " sends no body." } };
    }
    let text = String::from_utf8_lossy(body);
    let shown = pretty_json(&text).unwrap_or_else(|| text.into_owned());
    html! {
        p.meta { (size_text(body.len())) ", sent with its " (task.method.as_str()) " as application/json" }
        pre.code #request-body { (cut_at(&shown, SHOWN_RESULT_BYTES)) }
    }
}

fn pretty_json(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    serde_json::to_string_pretty(&value).ok()
}

/// `text` up to `max` bytes, on a character boundary.
fn cut_at(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_types_are_shown_and_others_are_not() {
        for (ct, expected) in [
            (Some("text/html"), true),
            (Some("text/plain; charset=utf-8"), true),
            (Some("application/json"), true),
            (Some("application/problem+json"), true),
            (Some("Application/JSON"), true),
            (Some("application/octet-stream"), false),
            (Some("image/png"), false),
            (None, false),
        ] {
            assert_eq!(is_text(ct), expected, "{ct:?}");
        }
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        assert_eq!(cut_at("héllo", 2), "h");
        assert_eq!(cut_at("héllo", 3), "hé");
        assert_eq!(cut_at("abc", 10), "abc");
    }
}
