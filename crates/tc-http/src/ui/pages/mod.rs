//! The pages: each renders its live part as a fragment (what the script
//! swaps in every 2 s) and the page around it.

pub(crate) mod bulk;
pub(crate) mod destinations;
pub(crate) mod flow_keys;
pub(crate) mod login;
pub(crate) mod overview;
pub(crate) mod refused;
pub(crate) mod schedules;
pub(crate) mod task;
pub(crate) mod tasks;
pub(crate) mod topics;

use http::StatusCode;
use maud::{DOCTYPE, Markup, html};
use tc_model::{State, Timestamp};

use super::Ctx;
use crate::error::ApiError;

/// A rendered page or fragment and its status.
pub(crate) struct Rendered {
    pub(crate) status: StatusCode,
    pub(crate) markup: Markup,
}

impl Rendered {
    pub(crate) fn ok(markup: Markup) -> Rendered {
        Rendered {
            status: StatusCode::OK,
            markup,
        }
    }

    pub(crate) fn not_found(ctx: &Ctx, message: &str) -> Rendered {
        Rendered {
            status: StatusCode::NOT_FOUND,
            markup: layout(
                ctx,
                "Not found",
                Nav::None,
                html! {
                    div.notice.error { (message) } p { a href="/ui/" { "Back to the overview" } }
                },
            ),
        }
    }

    /// An error inside a page's live part.
    pub(crate) fn error_fragment(e: &ApiError) -> Rendered {
        Rendered {
            status: e.status(),
            markup: error_box(e),
        }
    }

    /// A store or validation error, shown as a page (or a fragment).
    pub(crate) fn error(ctx: &Ctx, e: &ApiError, fragment: bool) -> Rendered {
        let body = error_box(e);
        Rendered {
            status: e.status(),
            markup: if fragment {
                body
            } else {
                layout(ctx, "Error", Nav::None, body)
            },
        }
    }
}

pub(crate) fn error_box(e: &ApiError) -> Markup {
    html! {
        div.notice.error role="alert" {
            strong { (e.status().as_u16()) " " (e.code()) } ": " (e.message())
        }
    }
}

/// Which tab is current.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Overview,
    Tasks,
    Bulk,
    Schedules,
    Topics,
    FlowKeys,
    None,
}

/// The page around `body`: the head with the CSRF meta tag, the tabs.
pub(crate) fn layout(ctx: &Ctx, title: &str, nav: Nav, body: Markup) -> Markup {
    let tab = |which: Nav, href: &str, label: &str| {
        html! {
            a.tab.current[nav == which] href=(href) aria-current=[(nav == which).then_some("page")] { (label) }
        }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(csrf) = &ctx.csrf {
                    meta name="csrf-token" content=(csrf);
                }
                title { (title) " · taskcenter" }
                link rel="stylesheet" href="/ui/assets/app.css";
                script src="/ui/assets/app.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/ui/" { "taskcenter" }
                    nav {
                        @if ctx.scope.is_admin() {
                            (tab(Nav::Overview, "/ui/", "Overview"))
                        }
                        (tab(Nav::Tasks, "/ui/tasks", "Tasks"))
                        (tab(Nav::Bulk, "/ui/bulk", "Bulk actions"))
                        (tab(Nav::Topics, "/ui/topics", "Topics"))
                        (tab(Nav::FlowKeys, "/ui/flow-keys", "Flow keys"))
                        @if ctx.scope.is_admin() {
                            (tab(Nav::Schedules, "/ui/schedules", "Schedules"))
                        }
                    }
                    span.spacer {}
                    @if let Some(tenant) = ctx.scope.tenant() {
                        span.tenant title="Logged in with this tenant's key" { "tenant " (tenant) }
                    }
                    span #live-status.live-status title="Refreshes every 2 s" {}
                    @if ctx.auth {
                        form.logout method="post" action="/ui/logout" {
                            input type="hidden" name="csrf" value=(ctx.csrf.as_deref().unwrap_or(""));
                            button.link type="submit" { "Log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A state as a coloured badge.
pub(crate) fn badge(state: State) -> Markup {
    html! { span class={ "badge state-" (state.as_str()) } { (state.as_str()) } }
}

/// `2026-01-02T03:04:05.678Z` with how long ago (or until) it is.
pub(crate) fn when(t: Timestamp, now: Timestamp) -> Markup {
    let absolute = crate::dto::rfc3339(t);
    html! {
        time datetime=(absolute) title=(absolute) {
            (relative(t, now))
        }
    }
}

/// "12 s ago", "in 3 min", "now".
pub(crate) fn relative(t: Timestamp, now: Timestamp) -> String {
    let ms = now.as_millis().saturating_sub(t.as_millis());
    let (span, past) = (ms.unsigned_abs(), ms >= 0);
    if span < 1000 {
        return "just now".into();
    }
    let text = duration_text(std::time::Duration::from_millis(span));
    if past {
        format!("{text} ago")
    } else {
        format!("in {text}")
    }
}

/// A duration rounded for a person: `850 ms`, `12.3 s`, `4 min 10 s`, `3 h 5 min`, `2 d 4 h`.
pub(crate) fn duration_text(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    if ms < 1000 {
        format!("{ms} ms")
    } else if s < 60 {
        format!("{:.1} s", d.as_secs_f64())
    } else if s < 3600 {
        format!("{} min {} s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{} h {} min", s / 3600, (s % 3600) / 60)
    } else {
        format!("{} d {} h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// Bytes for a person: `512 B`, `1.5 KiB`, `3.2 MiB`.
pub(crate) fn size_text(n: usize) -> String {
    let n = n as f64;
    if n < 1024.0 {
        format!("{n} B")
    } else if n < 1024.0 * 1024.0 {
        format!("{:.1} KiB", n / 1024.0)
    } else {
        format!("{:.1} MiB", n / (1024.0 * 1024.0))
    }
}

/// Percent-encodes a query value.
pub(crate) fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `a=1&b=2` from pairs, encoded.
pub(crate) fn query_string(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(n, v)| format!("{}={}", encode(n), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}
