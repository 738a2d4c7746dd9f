//! Bulk actions: retry, cancel or delete every task a filter covers, the
//! dry-run count shown and confirmed first. The page's script posts
//! `/tasks/bulk` twice: `dry_run: true`, then, after confirm(), `false`.

use maud::html;

use super::tasks::{Asked, filter_form};
use super::{Nav, Rendered, layout};
use crate::ui::Ctx;

pub(crate) fn page(ctx: &Ctx, query: Option<&str>) -> Rendered {
    let asked = Asked::from_query(query);
    let problem = asked.filter().err();
    let listed = asked.query_without(&["action"]);
    let action = asked.get("action").unwrap_or("retry");
    Rendered::ok(layout(
        ctx,
        "Bulk actions",
        Nav::Bulk,
        html! {
            h1 { "Bulk actions" }
            p.lead {
                "Choose the tasks with a filter, count them (nothing changes), then apply. "
                "Only the tasks that exist when you apply are touched; each action skips the tasks it does not apply to "
                "(retry: failed or canceled; cancel: pending or running; delete: finished)."
            }
            (filter_form(&asked, "/ui/bulk", false))
            @if let Some(e) = &problem { (super::error_box(e)) }
            section.panel #bulk {
                h2 { "Action" }
                div.bulk-row {
                    label {
                        span { "Do" }
                        select #bulk-action name="action" {
                            @for (value, label) in [("retry", "Retry all matching"), ("cancel", "Cancel all matching"), ("delete", "Delete all matching")] {
                                option value=(value) selected[action == value] { (label) }
                            }
                        }
                    }
                    button #bulk-count type="button" { "1. Count matching (dry run)" }
                    button.danger #bulk-apply type="button" disabled { "2. Apply…" }
                    a.button.secondary href={ "/ui/tasks?" (listed) } { "See them in the list" }
                }
                div #bulk-answer.answer aria-live="polite" hidden {}
            }
        },
    ))
}
