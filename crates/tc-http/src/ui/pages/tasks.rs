//! The task list: every filter of `GET /tasks`, keyset paging, and a search
//! box for a task id, an idempotency key or a URL prefix.

use maud::{Markup, html};
use tc_model::store::{Cursor, ListQuery, Page, TaskFilter, TaskStore};
use tc_model::{State, Task, TaskId, Timestamp};

use super::{Nav, Rendered, badge, layout, query_string, when};
use crate::error::ApiError;
use crate::query::FilterFields;
use crate::ui::Source;
use crate::ui::{Ctx, form_pairs};
use crate::worker_port::Control;

/// The filter fields a form may carry (the API's names).
pub(crate) const FIELDS: [(&str, &str, &str); 5] = [
    ("destination", "Destination", "host:port"),
    ("error", "Error", "http_500, timeout, …"),
    ("created_after", "Created after", "2026-01-02T03:04:05Z"),
    ("created_before", "Created before", "2026-01-02T03:04:05Z"),
    ("idempotency_key", "Idempotency key", "order-1001"),
];

/// What the form asked for: the non-empty fields as given (to fill the form
/// again and build links), and what they mean.
pub(crate) struct Asked {
    pub(crate) pairs: Vec<(String, String)>,
}

impl Asked {
    pub(crate) fn from_query(query: Option<&str>) -> Asked {
        let mut pairs: Vec<(String, String)> = form_pairs(query.unwrap_or(""))
            .into_iter()
            .map(|(n, v)| (n, v.trim().to_owned()))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        // The first of a repeated field wins: a form sends each once.
        let mut seen = std::collections::HashSet::new();
        pairs.retain(|(n, _)| seen.insert(n.clone()));
        Asked { pairs }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The pairs but `skip`, as a query string.
    pub(crate) fn query_without(&self, skip: &[&str]) -> String {
        let kept: Vec<(&str, &str)> = self
            .pairs
            .iter()
            .filter(|(n, _)| !skip.contains(&n.as_str()))
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        query_string(&kept)
    }

    /// The filter the fields make, checked as the API checks it.
    pub(crate) fn filter(&self) -> Result<TaskFilter, ApiError> {
        let mut fields = FilterFields::default();
        for (name, value) in &self.pairs {
            if let Some(slot) = fields.slot(name) {
                *slot = Some(value.clone());
            }
        }
        fields.parse()
    }
}

/// How the search box was read.
#[derive(Debug, PartialEq, Eq)]
enum Search {
    None,
    Id(TaskId),
    Key(String),
    /// A URL prefix: the store filters on its destination, the page on the
    /// prefix (the store has no URL index).
    UrlPrefix(String),
}

fn read_search(q: Option<&str>) -> Search {
    match q {
        None => Search::None,
        Some(q) => {
            if let Ok(id) = q.parse::<TaskId>() {
                Search::Id(id)
            } else if q.starts_with("http://") || q.starts_with("https://") {
                Search::UrlPrefix(q.to_owned())
            } else {
                Search::Key(q.to_owned())
            }
        }
    }
}

pub(crate) async fn render<S: TaskStore, C: Control>(
    app: &Source<'_, S, C>,
    ctx: &Ctx,
    query: Option<&str>,
    fragment: bool,
) -> Rendered {
    let asked = Asked::from_query(query);
    let live = results(app, &ctx.scope, &asked).await;
    if fragment {
        return live;
    }
    let live_url = format!("/ui/fragment/tasks?{}", asked.query_without(&[]));
    Rendered {
        status: live.status,
        markup: layout(
            ctx,
            "Tasks",
            Nav::Tasks,
            html! {
                h1 { "Tasks" }
                (filter_form(&asked, "/ui/tasks", true))
                div #live data-live=(live_url) { (live.markup) }
            },
        ),
    }
}

/// The filter form, shared with the bulk page.
pub(crate) fn filter_form(asked: &Asked, action: &str, search: bool) -> Markup {
    let state = asked.get("state").unwrap_or("");
    html! {
        form.filters #filters method="get" action=(action) {
            @if search {
                label.search {
                    span { "Search" }
                    input type="search" name="q" value=(asked.get("q").unwrap_or(""))
                        placeholder="task id, idempotency key or URL prefix (https://host/path)";
                }
            }
            label {
                span { "State" }
                select name="state" {
                    option value="" selected[state.is_empty()] { "any" }
                    @for s in ["pending", "running", "success", "failed", "canceled"] {
                        option value=(s) selected[state == s] { (s) }
                    }
                }
            }
            @for (name, label, placeholder) in FIELDS {
                label {
                    span { (label) }
                    input type="text" name=(name) value=(asked.get(name).unwrap_or("")) placeholder=(placeholder);
                }
            }
            @if search {
                label.narrow {
                    span { "Per page" }
                    input type="number" name="limit" min="1" max="500" value=(asked.get("limit").unwrap_or("50"));
                }
            }
            div.actions {
                button type="submit" { @if search { "Filter" } @else { "Use this filter" } }
                a.button.secondary href=(action) { "Clear" }
            }
        }
    }
}

/// A page's size (`limit`, 50 unless asked, 1 to 500) and where it starts
/// (`after`, a cursor from a previous page).
fn page_bounds(asked: &Asked) -> Result<(usize, Option<Cursor>), ApiError> {
    let limit = match asked.get("limit").map(str::parse::<usize>) {
        None => 50,
        Some(Ok(n)) if (1..=500).contains(&n) => n,
        Some(_) => {
            return Err(ApiError::InvalidRequest(
                "Per page: must be a number from 1 to 500".into(),
            ));
        }
    };
    let after = match asked.get("after").map(str::parse::<Cursor>) {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(_)) => {
            return Err(ApiError::InvalidRequest(
                "after: not a cursor from a previous page".into(),
            ));
        }
    };
    Ok((limit, after))
}

/// A search by URL prefix: the listing narrowed to the prefix's
/// destination (each page's tasks then checked one by one), and the note
/// that says so.
fn narrow_to_url_prefix(prefix: &str, filter: &mut TaskFilter) -> Result<Markup, ApiError> {
    let destination = tc_model::destination_of(prefix);
    if destination == "invalid" {
        return Err(ApiError::InvalidRequest(format!(
            "search: {prefix:?} is not a URL"
        )));
    }
    filter.destination = Some(destination.clone());
    Ok(html! {
        p.note {
            "URLs starting with " code { (prefix) } ": the tasks for " code { (destination) }
            " on each page, checked one by one (there is no URL index, so a page may show fewer than asked)."
        }
    })
}

async fn results<S: TaskStore, C: Control>(
    app: &Source<'_, S, C>,
    scope: &tc_model::tenant::Scope,
    asked: &Asked,
) -> Rendered {
    let now = app.control().now();
    let mut filter = match asked.filter() {
        Ok(f) => f,
        Err(e) => return Rendered::error_fragment(&e),
    };
    let (limit, after) = match page_bounds(asked) {
        Ok(bounds) => bounds,
        Err(e) => return Rendered::error_fragment(&e),
    };
    let search = read_search(asked.get("q"));
    let mut note = None;
    match &search {
        Search::None => {}
        Search::Id(id) => {
            return match app.store().get(*id, scope.clone()).await {
                Ok(task) => Rendered::ok(table(
                    &[task],
                    now,
                    None,
                    asked,
                    html! {
                        p.note { "The task with id " code { (id) } "." }
                    },
                )),
                Err(e) => Rendered::error_fragment(&ApiError::from(e)),
            };
        }
        Search::Key(key) => filter.idempotency_key = Some(key.clone()),
        Search::UrlPrefix(prefix) => match narrow_to_url_prefix(prefix, &mut filter) {
            Ok(said) => note = Some(said),
            Err(e) => return Rendered::error_fragment(&e),
        },
    }
    let query = ListQuery {
        filter,
        limit,
        after,
        // A page of the dashboard shows no results: read no more than the
        // API's page budget of them.
        max_result_bytes: Some(8 * 1024 * 1024),
        ..ListQuery::default()
    };
    let Page { mut tasks, next } = match app.store().list(query, scope.clone()).await {
        Ok(page) => page,
        Err(e) => return Rendered::error_fragment(&ApiError::from(e)),
    };
    if let Search::UrlPrefix(prefix) = &search {
        tasks.retain(|t| t.url.starts_with(prefix.as_str()));
    }
    Rendered::ok(table(&tasks, now, next, asked, note.unwrap_or_default()))
}

fn table(
    tasks: &[Task],
    now: Timestamp,
    next: Option<Cursor>,
    asked: &Asked,
    note: Markup,
) -> Markup {
    let bulk = asked.query_without(&["after", "limit", "q"]);
    html! {
        (note)
        div.toolbar {
            span #result-count { (tasks.len()) @if tasks.len() == 1 { " task" } @else { " tasks" } " on this page" }
            span.spacer {}
            a.button.secondary href={ "/ui/bulk?" (bulk) } { "Bulk action on this filter…" }
        }
        @if tasks.is_empty() {
            p.empty { "No task matches." }
        } @else {
            table.list #tasks {
                thead {
                    tr {
                        th { "task" } th { "state" } th { "destination / path" } th { "tries" }
                        th { "last outcome" } th { "created" } th { "finished / due" }
                    }
                }
                tbody {
                    @for t in tasks {
                        tr data-task-id=(t.id) data-state=(t.state.as_str()) {
                            td.mono {
                                a href={ "/ui/tasks/" (t.id) } title=(t.id) { (short_id(&t.id)) }
                                span.key title="idempotency key" { (t.idempotency_key) }
                            }
                            td { (badge(t.state)) }
                            td.url {
                                span.dest { (t.destination) }
                                span.path { (tc_model::origin_and_path(&t.url).1) }
                            }
                            td { (t.attempt.saturating_sub(t.attempts_before_retry)) " / " (t.max_attempts) }
                            td {
                                @if let Some(e) = &t.error { span.err { (e) } }
                                @else if let Some(s) = t.http_status { "HTTP " (s) }
                                @else { span.muted { "—" } }
                            }
                            td { (when(t.created_at, now)) }
                            td {
                                @if let Some(f) = t.finished_at { (when(f, now)) }
                                @else if t.state == State::Pending {
                                    @if let Some(n) = t.next_run_at { "due " (when(n, now)) }
                                }
                                @else if t.state == State::Running { "running" }
                            }
                        }
                    }
                }
            }
        }
        nav.pager {
            @if asked.get("after").is_some() {
                a.button.secondary href={ "/ui/tasks?" (asked.query_without(&["after"])) } { "← First page" }
            }
            @if let Some(next) = next {
                @let rest = asked.query_without(&["after"]);
                a.button #next-page href={ "/ui/tasks?" (rest) @if !rest.is_empty() { "&" } "after=" (next) } { "Next page →" }
            }
        }
    }
}

/// The first and last groups of a UUID: enough to tell tasks apart on a
/// page; the full id is the link's title and on the task's page.
fn short_id(id: &TaskId) -> String {
    let s = id.to_string();
    match (s.get(..8), s.get(s.len().saturating_sub(4)..)) {
        (Some(a), Some(b)) => format!("{a}…{b}"),
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_box_reads_ids_keys_and_url_prefixes() {
        let id = "01890a5d-ac96-774b-bcce-b302099a8057";
        let check =
            |q: Option<&str>, expected: Search| assert_eq!(read_search(q), expected, "{q:?}");
        check(None, Search::None);
        check(Some(id), Search::Id(id.parse().unwrap()));
        check(Some("order-1001"), Search::Key("order-1001".into()));
        check(
            Some("https://a.test/hooks"),
            Search::UrlPrefix("https://a.test/hooks".into()),
        );
        check(
            Some("http://a.test"),
            Search::UrlPrefix("http://a.test".into()),
        );
    }

    #[test]
    fn empty_form_fields_are_dropped_and_the_rest_kept_for_links() {
        let asked = Asked::from_query(Some("q=&state=failed&destination=&error=http_500&after=7"));
        assert_eq!(asked.get("state"), Some("failed"));
        assert_eq!(asked.get("q"), None);
        assert_eq!(
            asked.query_without(&["after"]),
            "state=failed&error=http_500"
        );
        let filter = asked.filter().unwrap();
        assert_eq!(filter.state, Some(State::Failed));
        assert_eq!(filter.error.as_deref(), Some("http_500"));
        assert!(Asked::from_query(Some("state=done")).filter().is_err());
    }
}
