//! The schedules page: every schedule with its pattern and zone,
//! whether it is paused, its next runs, its last firing's task (a link
//! to the task's page) and why a later firing created none (its
//! `last_error`). The same data as `GET /schedules`.

use maud::html;
use tc_model::store::TaskStore;

use super::{Nav, Rendered, layout, when};
use crate::error::ApiError;
use crate::ui::{Ctx, Source};
use crate::worker_port::Control;

/// Next runs shown per schedule.
const NEXT_SHOWN: usize = 3;

pub(crate) async fn page<S: TaskStore, C: Control>(app: &Source<'_, S, C>, ctx: &Ctx) -> Rendered {
    let live = fragment(app).await;
    Rendered {
        status: live.status,
        markup: layout(
            ctx,
            "Schedules",
            Nav::Schedules,
            html! {
                h1 { "Schedules" }
                div #live data-live="/ui/fragment/schedules" { (live.markup) }
            },
        ),
    }
}

pub(crate) async fn fragment<S: TaskStore, C: Control>(app: &Source<'_, S, C>) -> Rendered {
    let now = app.control().now();
    let schedules = match app.store().schedules().await {
        Ok(s) => s,
        Err(e) => return Rendered::error_fragment(&ApiError::from(e)),
    };
    Rendered::ok(html! {
        @if schedules.is_empty() {
            p.hint { "No schedules. Create one with " code { "POST /schedules" } " or "
                code { "tc-server schedule create" } "." }
        } @else {
            table.list.schedules {
                thead { tr {
                    th { "Name" } th { "Cron" } th { "Time zone" } th { "State" }
                    th { "Next runs" } th { "Last run" } th { "Last task" } th { "Last error" }
                } }
                tbody {
                    @for s in &schedules {
                        tr {
                            td { (s.spec.name) }
                            td { code { (s.spec.when.cron.as_str()) } }
                            td { (s.spec.when.zone.name()) }
                            td { @if s.spec.paused { span.badge { "paused" } } @else { "active" } }
                            td {
                                @for (i, t) in s.next_runs(now).into_iter().take(NEXT_SHOWN).enumerate() {
                                    @if i > 0 { br; }
                                    (when(t, now))
                                }
                            }
                            td { @match s.last_run_at { Some(t) => (when(t, now)), None => "never" } }
                            td {
                                @match s.last_task_id {
                                    Some(id) => a href={ "/ui/tasks/" (id) } { (id) },
                                    None => "-",
                                }
                            }
                            // Why the latest firing created no task.
                            td {
                                @match &s.last_error {
                                    Some(e) => span title=(e.message) {
                                        (e.code) " at " (when(e.at, now))
                                    },
                                    None => "-",
                                }
                            }
                        }
                    }
                }
            }
        }
    })
}
