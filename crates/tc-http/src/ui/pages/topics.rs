//! The topic pages, a tenant's own as its key sees them (the
//! admin's for the admin token): every topic with its subscription count;
//! one topic with its subscriptions and their health (failing since when,
//! disabled and why; their secrets counted, never shown); one event with
//! its deliveries, each a link to its task. The same data as the
//! `/topics` routes.

use maud::html;
use tc_model::store::{StoreError, TaskStore};
use tc_model::topic::TopicRef;

use super::{Nav, Rendered, badge, layout, when};
use crate::error::{About, ApiError};
use crate::ui::{Ctx, Source};
use crate::worker_port::Control;

/// `/ui/topics`.
pub(crate) async fn page<S: TaskStore, C: Control>(app: &Source<'_, S, C>, ctx: &Ctx) -> Rendered {
    let live = fragment(app, ctx).await;
    Rendered {
        status: live.status,
        markup: layout(
            ctx,
            "Topics",
            Nav::Topics,
            html! {
                h1 { "Topics" }
                div #live data-live="/ui/fragment/topics" { (live.markup) }
            },
        ),
    }
}

/// `/ui/fragment/topics`: the caller's topics.
pub(crate) async fn fragment<S: TaskStore, C: Control>(
    app: &Source<'_, S, C>,
    ctx: &Ctx,
) -> Rendered {
    let tenant = ctx.scope.tenant().map(str::to_owned);
    let topics = match app.store().topics(tenant).await {
        Ok(t) => t,
        Err(e) => return Rendered::error_fragment(&ApiError::from(e)),
    };
    Rendered::ok(html! {
        @if topics.is_empty() {
            p.hint { "No topics. Create one with " code { "PUT /topics/{name}" } " or "
                code { "tc-server topic put" } "." }
        } @else {
            table.list.topics {
                thead { tr {
                    th { "Name" } th { "Subscriptions" } th { "Disable after" } th { "Description" }
                } }
                tbody {
                    @for t in &topics {
                        tr {
                            td { a href={ "/ui/topics/" (t.at.name) } { (t.at.name) } }
                            td { (t.subscriptions) }
                            td { (t.spec.disable_after.as_secs()) " s" }
                            td { (t.spec.description) }
                        }
                    }
                }
            }
        }
    })
}

/// The caller's topic `name`, or the not-found page.
fn topic_at(ctx: &Ctx, name: &str) -> Result<TopicRef, Rendered> {
    TopicRef::new(ctx.scope.tenant().map(str::to_owned), name)
        .map_err(|_| Rendered::not_found(ctx, "No such topic."))
}

fn store_error(ctx: &Ctx, e: StoreError, about: About<'_>) -> Rendered {
    Rendered::error(ctx, &ApiError::from_store(e, about), false)
}

/// `/ui/topics/{name}`: the topic's subscriptions with their health.
pub(crate) async fn topic<S: TaskStore, C: Control>(
    app: &Source<'_, S, C>,
    ctx: &Ctx,
    name: &str,
) -> Rendered {
    let at = match topic_at(ctx, name) {
        Ok(at) => at,
        Err(page) => return page,
    };
    let now = app.control().now();
    let subs = match app.store().subscriptions(at).await {
        Ok(s) => s,
        Err(e) => return store_error(ctx, e, About::Topic(name)),
    };
    let body = html! {
        h1 { "Topic " (name) }
        @if subs.is_empty() {
            p.hint { "No subscriptions. Add one with " code { "POST /topics/" (name) "/subscriptions" }
                " or " code { "tc-server topic subscribe" } "." }
        } @else {
            table.list.subscriptions {
                thead { tr {
                    th { "Id" } th { "Url" } th { "Event types" } th { "Health" } th { "Secrets" }
                    th { "Tasks" }
                } }
                tbody {
                    @for s in &subs {
                        tr {
                            td { code { (s.id) } }
                            td { (s.spec.url) }
                            td { @match s.spec.event_types.list() {
                                Some(list) => (list.join(", ")),
                                None => "every event",
                            } }
                            td {
                                @if !s.spec.enabled {
                                    span.badge { "disabled" }
                                    @if let Some(reason) = &s.disabled_reason { " " (reason) }
                                } @else if let Some(since) = s.failing_since {
                                    span.badge.state-failed { "failing" } " since " (when(since, now))
                                } @else {
                                    "healthy"
                                }
                            }
                            td { (s.spec.signing_secrets.len()) }
                            td { a href={ "/ui/tasks?subscription=" (s.id) } { "tasks" } }
                        }
                    }
                }
            }
        }
    };
    Rendered::ok(layout(ctx, name, Nav::Topics, body))
}

/// `/ui/topics/{name}/events/{id}`: an event with its deliveries.
pub(crate) async fn event<S: TaskStore, C: Control>(
    app: &Source<'_, S, C>,
    ctx: &Ctx,
    name: &str,
    id: &str,
) -> Rendered {
    let at = match topic_at(ctx, name) {
        Ok(at) => at,
        Err(page) => return page,
    };
    let now = app.control().now();
    let event = match app.store().event(at, id.to_owned()).await {
        Ok(e) => e,
        Err(e) => return store_error(ctx, e, About::Event(id)),
    };
    let body = html! {
        h1 { "Event " code { (event.id) } }
        p { (event.event_type) " on " a href={ "/ui/topics/" (name) } { (name) } ", published "
            (when(event.created_at, now)) }
        table.list.deliveries {
            thead { tr { th { "Subscription" } th { "Task" } th { "State" } } }
            tbody {
                @for d in &event.tasks {
                    tr {
                        td { code { (d.subscription) } }
                        td { a href={ "/ui/tasks/" (d.task_id) } { (d.task_id) } }
                        td { (badge(d.state)) }
                    }
                }
            }
        }
    };
    Rendered::ok(layout(ctx, "Event", Nav::Topics, body))
}
