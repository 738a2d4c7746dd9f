//! The flow keys page, the caller's own keys (a tenant's key: its
//! tenant's; the admin token: the admin's): each key with limits, its
//! `max_in_flight`, rate and burst, and its running and pending tasks, a
//! link to its tasks. The same data as `GET /flow-keys`.

use maud::html;
use tc_model::store::TaskStore;

use super::{Nav, Rendered, layout};
use crate::error::ApiError;
use crate::ui::{Ctx, Source};
use crate::worker_port::Control;

/// `/ui/flow-keys`.
pub(crate) async fn page<S: TaskStore, C: Control>(app: &Source<'_, S, C>, ctx: &Ctx) -> Rendered {
    let live = fragment(app, ctx).await;
    Rendered {
        status: live.status,
        markup: layout(
            ctx,
            "Flow keys",
            Nav::FlowKeys,
            html! {
                h1 { "Flow keys" }
                div #live data-live="/ui/fragment/flow-keys" { (live.markup) }
            },
        ),
    }
}

fn limit<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| v.to_string())
}

/// `/ui/fragment/flow-keys`: the caller's keys with limits.
pub(crate) async fn fragment<S: TaskStore, C: Control>(
    app: &Source<'_, S, C>,
    ctx: &Ctx,
) -> Rendered {
    let tenant = ctx.scope.tenant().map(str::to_owned);
    let keys = match app.store().flow_keys(tenant).await {
        Ok(k) => k,
        Err(e) => return Rendered::error_fragment(&ApiError::from(e)),
    };
    Rendered::ok(html! {
        @if keys.is_empty() {
            p.hint { "No flow keys have limits. Set some with " code { "PUT /flow-keys/{key}" }
                " or " code { "tc-server flow-key set" } "." }
        } @else {
            table.list.flow-keys {
                thead { tr {
                    th { "Key" } th { "Max in flight" } th { "Rate /s" } th { "Burst" }
                    th { "Running" } th { "Pending" }
                } }
                tbody {
                    @for k in &keys {
                        tr {
                            td.mono { a href={ "/ui/tasks?flow_key=" (super::encode(&k.key)) } { (k.key) } }
                            td { (limit(k.settings.max_in_flight)) }
                            td { (limit(k.settings.rate_per_s)) }
                            td { (limit(k.settings.burst)) }
                            td { (k.in_flight) }
                            td { (k.pending) }
                        }
                    }
                }
            }
        }
    })
}
