//! `tc-server task …`: submit, get, result, list, cancel, retry, delete,
//! bulk (watch is in watch.rs).

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::{Duration, SystemTime};

use http::{Method, StatusCode};
use serde_json::{Map, Value};
use tc_model::{TaskId, Timestamp};

use super::args::{BulkArgs, FilterArgs, ListArgs, RetryArgs, SubmitArgs};
use super::error::ClientError;
use super::format::{self, Cell, Table};
use super::http::{Api, escape};
use super::output::{Out, note};
use super::view::{self, field, task_fields};

/// How long one `wait_ms` request of `submit --wait` asks the server to
/// hold its answer (the API's most).
const WAIT_MS: u64 = 60_000;

/// `task submit`.
pub(crate) async fn submit(api: &Api, out: &Out, args: &SubmitArgs) -> Result<(), ClientError> {
    let (key, generated) = match &args.key {
        Some(key) => (key.clone(), false),
        None => (new_key()?, true),
    };
    let reply = api
        .send(
            Method::POST,
            "/tasks",
            Some(submit_body(args, &key)?),
            Duration::ZERO,
        )
        .await?;
    let task = reply.json()?;
    let id = view::task_id(&task)?;
    if out.json {
        if generated {
            note(&format!("generated idempotency key: {key}"));
        }
        if !args.wait {
            return out.json_line(&task);
        }
        note(&format!("task {id} submitted; waiting for it to finish"));
        return out.json_line(&wait_terminal(api, &id).await?);
    }
    // The id and key come first, before any wait: interrupting the wait
    // must not lose them.
    let how = match reply.status {
        StatusCode::CREATED => "created",
        _ => "existing (same key and payload)",
    };
    let key_note = if generated { " (generated)" } else { "" };
    let rows = vec![
        vec![Cell::new("task"), Cell::new(&format!("{id}  {how}"))],
        vec![Cell::new("key"), Cell::new(&format!("{key}{key_note}"))],
        vec![Cell::new("state"), view::state_cell(&task)],
    ];
    out.text(&Table::plain().render(&rows, out.colour))?;
    if args.wait {
        let finished = wait_terminal(api, &id).await?;
        out.text(&view::outcome_line(&finished, out.colour))?;
    }
    Ok(())
}

/// A new idempotency key: a UUID v7 made as task ids are ([`TaskId::new`]),
/// time-ordered, so keys sort by when they were made.
fn new_key() -> Result<String, ClientError> {
    let mut random = [0u8; 10];
    getrandom::fill(&mut random)
        .map_err(|e| ClientError::Local(format!("cannot generate a key: no entropy: {e}")))?;
    let millis = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Ok(TaskId::new(Timestamp::from_millis(millis), random).to_string())
}

/// `POST /tasks`'s body. The payload goes in as written (serde_json's map
/// would sort its keys, and the downstream receives them in the user's
/// order).
fn submit_body(args: &SubmitArgs, key: &str) -> Result<String, ClientError> {
    let mut body = format!(
        "{{\"url\":{},\"idempotency_key\":{}",
        Value::from(args.url.as_str()),
        Value::from(key),
    );
    if let Some(payload) = &args.payload {
        let _ = write!(body, ",\"json\":{}", payload.0.get());
    }
    if let Some(method) = &args.method {
        let _ = write!(body, ",\"method\":{}", Value::from(method.as_str()));
    }
    if !args.headers.is_empty() {
        let headers = super::destination::headers_object(&args.headers)?;
        let _ = write!(body, ",\"headers\":{headers}");
    }
    if let Some(url) = &args.callback_url {
        let _ = write!(body, ",\"callback_url\":{}", Value::from(url.as_str()));
    }
    if let Some(key) = &args.flow_key {
        let _ = write!(body, ",\"flow_key\":{}", Value::from(key.as_str()));
    }
    if !args.callback_on.is_empty() {
        let _ = write!(
            body,
            ",\"callback_on\":{}",
            Value::from(args.callback_on.clone())
        );
    }
    let numbers = [
        ("max_attempts", args.max_attempts.map(u64::from)),
        ("timeout_ms", args.timeout_ms),
        ("delay_ms", args.delay_ms),
        ("priority", args.priority.map(u64::from)),
    ];
    for (name, value) in numbers {
        if let Some(value) = value {
            let _ = write!(body, ",\"{name}\":{value}");
        }
    }
    body.push('}');
    Ok(body)
}

/// Long-polls the task until it is finished: its final view.
pub(crate) async fn wait_terminal(api: &Api, id: &str) -> Result<Value, ClientError> {
    loop {
        let task = view_waiting(api, id, WAIT_MS).await?;
        if view::is_terminal(&task) {
            return Ok(task);
        }
    }
}

/// `GET /tasks/{id}?wait_ms=N`: answered when the task is finished or after
/// N ms.
pub(crate) async fn view_waiting(api: &Api, id: &str, wait_ms: u64) -> Result<Value, ClientError> {
    api.send(
        Method::GET,
        &format!("/tasks/{}?wait_ms={wait_ms}", escape(id)),
        None,
        Duration::from_millis(wait_ms),
    )
    .await?
    .json()
}

/// `task get`.
pub(crate) async fn get(api: &Api, out: &Out, id: &str) -> Result<(), ClientError> {
    let task = api
        .json(Method::GET, &format!("/tasks/{}", escape(id)), None)
        .await?;
    if out.json {
        return out.json_line(&task);
    }
    let mut text = Table::plain().render(&task_fields(&task, out.now), out.colour);
    let attempts = field(&task, "attempts")
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    if !attempts.is_empty() {
        text.push('\n');
        let rows: Vec<Vec<Cell>> = attempts.iter().map(view::attempt_row).collect();
        text.push_str(
            &Table::new(&["ATTEMPT", "STARTED (UTC)", "DURATION", "STATUS", "ERROR"])
                .render(&rows, out.colour),
        );
    }
    out.text(&text)
}

/// `task result`: the bytes as the downstream sent them; to a terminal,
/// unless `raw`, with control characters escaped.
pub(crate) async fn result(api: &Api, out: &Out, id: &str, raw: bool) -> Result<(), ClientError> {
    let reply = api
        .send(
            Method::GET,
            &format!("/tasks/{}/result", escape(id)),
            None,
            Duration::ZERO,
        )
        .await?;
    if raw || !out.terminal {
        out.bytes(&reply.body)
    } else {
        out.text(&format::sanitize_bytes(&reply.body))
    }
}

/// How often `task list --all` asks again for a page that did not move past
/// its cursor, and the first pause (doubled each time).
const STALLED_RETRIES: u32 = 4;
const STALLED_PAUSE: Duration = Duration::from_millis(250);

/// `task list`.
///
/// With `--all` it follows `next` page by page. A page that comes back
/// empty with the cursor it was asked for means tasks after it are still
/// being written (the server held them back): it is asked for again a few
/// times, then the command stops with exit 1 and the cursor to go on from.
pub(crate) async fn list(api: &Api, out: &Out, args: &ListArgs) -> Result<(), ClientError> {
    // Made with the first page that has tasks: its header has a TENANT
    // column when one of them belongs to a tenant.
    let mut table: Option<(Table, bool)> = None;
    let mut after = args.after.clone();
    let mut shown = 0usize;
    let mut stalled = 0u32;
    loop {
        let page = api
            .json(Method::GET, &list_path(args, after.as_deref()), None)
            .await?;
        let tasks = field(&page, "tasks")
            .as_array()
            .ok_or_else(|| ClientError::Protocol(format!("a page without tasks: {page}")))?;
        print_page(out, &mut table, tasks)?;
        shown += tasks.len();
        let next = field(&page, "next").as_str().map(str::to_owned);
        match next {
            Some(cursor) if args.all => {
                if after.as_deref() == Some(cursor.as_str()) {
                    if stalled == STALLED_RETRIES {
                        return Err(ClientError::Incomplete(format!(
                            "the listing stayed at cursor {cursor}: tasks after it are still \
                             being written; go on later with --after {cursor}"
                        )));
                    }
                    tokio::time::sleep(STALLED_PAUSE * 2u32.pow(stalled)).await;
                    stalled += 1;
                } else {
                    stalled = 0;
                }
                after = Some(cursor);
            }
            Some(cursor) => {
                note(&format!(
                    "more tasks follow: --all for every page, or --after {cursor}"
                ));
                break;
            }
            None => break,
        }
    }
    if shown == 0 && !out.json {
        note("no tasks");
    }
    Ok(())
}

fn print_page(
    out: &Out,
    table: &mut Option<(Table, bool)>,
    tasks: &[Value],
) -> Result<(), ClientError> {
    if out.json {
        for task in tasks {
            out.json_line(task)?;
        }
        return Ok(());
    }
    if tasks.is_empty() {
        return Ok(());
    }
    let (table, with_tenant) = table.get_or_insert_with(|| {
        let with_tenant = view::any_tenant(tasks);
        (Table::new(&view::list_header(with_tenant)), with_tenant)
    });
    let rows: Vec<Vec<Cell>> = tasks
        .iter()
        .map(|t| view::list_row(t, out.now, *with_tenant))
        .collect();
    out.text(&table.render(&rows, out.colour))
}

/// `GET /tasks` with the filters, the limit and the cursor.
fn list_path(args: &ListArgs, after: Option<&str>) -> String {
    let mut params = query_pairs(&args.filter);
    if let Some(limit) = args.limit {
        params.push(("limit", limit.to_string()));
    }
    if let Some(after) = after {
        params.push(("after", after.to_owned()));
    }
    let query: Vec<String> = params
        .iter()
        .map(|(name, value)| format!("{name}={}", escape(value)))
        .collect();
    if query.is_empty() {
        "/tasks".to_owned()
    } else {
        format!("/tasks?{}", query.join("&"))
    }
}

fn query_pairs(filter: &FilterArgs) -> Vec<(&'static str, String)> {
    filter
        .fields()
        .into_iter()
        .map(|(name, value)| (name, value.to_owned()))
        .collect()
}

/// `task cancel`.
pub(crate) async fn cancel(api: &Api, out: &Out, id: &str) -> Result<(), ClientError> {
    let answer = api
        .json(Method::POST, &format!("/tasks/{}/cancel", escape(id)), None)
        .await?;
    if out.json {
        return out.json_line(&answer);
    }
    let state = field(&answer, "state").as_str().unwrap_or("unknown");
    let painted = out.paint_state(state);
    let id = format::sanitize(id);
    match state {
        "canceled" => out.text(&format!("task {id} is {painted}\n")),
        _ => out.text(&format!(
            "task {id} had already finished: {painted} (nothing to cancel)\n"
        )),
    }
}

/// `task retry`.
pub(crate) async fn retry(api: &Api, out: &Out, args: &RetryArgs) -> Result<(), ClientError> {
    let body = args.delay_ms.map(|ms| format!("{{\"delay_ms\":{ms}}}"));
    let task = api
        .json(
            Method::POST,
            &format!("/tasks/{}/retry", escape(&args.id)),
            body,
        )
        .await?;
    if out.json {
        return out.json_line(&task);
    }
    let state = field(&task, "state").as_str().unwrap_or("unknown");
    let mut text = format!(
        "task {} is {} again",
        format::sanitize(&args.id),
        out.paint_state(state)
    );
    if let Some(run_at) = field(&task, "run_at").as_str() {
        let _ = write!(text, ", due {}", format::relative_rfc3339(run_at, out.now));
    }
    text.push('\n');
    out.text(&text)
}

/// `task delete`. The API answers 204 with no body, so `--json` prints
/// nothing: the exit status says it.
pub(crate) async fn delete(api: &Api, out: &Out, id: &str) -> Result<(), ClientError> {
    api.send(
        Method::DELETE,
        &format!("/tasks/{}", escape(id)),
        None,
        Duration::ZERO,
    )
    .await?;
    if out.json {
        return Ok(());
    }
    out.text(&format!("task {} deleted\n", format::sanitize(id)))
}

/// `task bulk`: the dry run's count, a confirmation, then the action.
pub(crate) async fn bulk(api: &Api, out: &Out, args: &BulkArgs) -> Result<(), ClientError> {
    let action = args.action.as_str();
    let dry = api
        .json(Method::POST, "/tasks/bulk", Some(bulk_body(args, true)))
        .await?;
    let matched = field(&dry, "matched")
        .as_u64()
        .ok_or_else(|| ClientError::Protocol(format!("a dry run without matched: {dry}")))?;
    let what = describe_filter(&args.filter);
    let count = if matched == 1 {
        "1 task matches".to_owned()
    } else {
        format!("{matched} tasks match")
    };
    note(&format!(
        "{count} {what}; {action} applies to those it fits"
    ));
    if !args.yes && !std::io::stdin().is_terminal() {
        return Err(ClientError::Usage(format!(
            "not confirmed: stdin is not a terminal to ask on; pass --yes to {action} them"
        )));
    }
    if matched == 0 {
        note("nothing to do");
        return if out.json {
            out.json_line(&dry)
        } else {
            Ok(())
        };
    }
    if !args.yes && !confirm(&format!("{action} {matched} task{}?", plural(matched)))? {
        note("nothing changed");
        return Ok(());
    }
    let done = api
        .json(Method::POST, "/tasks/bulk", Some(bulk_body(args, false)))
        .await?;
    if out.json {
        return out.json_line(&done);
    }
    out.text(&bulk_summary(action, &done))
}

/// A bulk answer as one line: how many changed of how many matched, and
/// how many a retry left alone because the server's allow-list no longer
/// admits their urls or their tenant's quotas were reached.
fn bulk_summary(action: &str, done: &Value) -> String {
    let count = |name: &str| field(done, name).as_u64().unwrap_or(0);
    let (applied, matched) = (count("applied"), count("matched"));
    let mut line = format!(
        "{action}: {applied} of {matched} matching task{} changed",
        plural(matched)
    );
    let refused_url = count("refused_url");
    if refused_url > 0 {
        line.push_str(&format!(
            "; {refused_url} not retried: url or callback_url no longer allowed by the server's \
             --allow-url-prefix"
        ));
    }
    let refused_quota = count("refused_quota");
    if refused_quota > 0 {
        line.push_str(&format!(
            "; {refused_quota} left for their tenant's max_pending or submit rate"
        ));
    }
    line.push('\n');
    line
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `POST /tasks/bulk`'s body.
fn bulk_body(args: &BulkArgs, dry_run: bool) -> String {
    let filter: Map<String, Value> = args
        .filter
        .fields()
        .into_iter()
        .map(|(name, value)| {
            // The API's one numeric filter field.
            let value = match (name, value.parse::<u8>()) {
                ("priority", Ok(p)) => Value::from(p),
                _ => Value::from(value),
            };
            (name.to_owned(), value)
        })
        .collect();
    serde_json::json!({
        "action": args.action.as_str(),
        "filter": filter,
        "dry_run": dry_run,
    })
    .to_string()
}

/// The filter in words, for the confirmation.
fn describe_filter(filter: &FilterArgs) -> String {
    let fields = filter.fields();
    if fields.is_empty() {
        return "(no filter: every task)".to_owned();
    }
    let parts: Vec<String> = fields
        .iter()
        .map(|(name, value)| format!("{name}={}", format::sanitize(value)))
        .collect();
    parts.join(" ")
}

/// Asks on stderr, reads one line from stdin: yes only for `y` or `yes`.
fn confirm(question: &str) -> Result<bool, ClientError> {
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| ClientError::Local(format!("cannot read the answer: {e}")))?;
    Ok(is_yes(&answer))
}

fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::args::{BulkAction, Payload, StateArg};

    fn submit_args(payload: &str) -> SubmitArgs {
        SubmitArgs {
            url: "http://127.0.0.1:9000/hook".into(),
            payload: Some(Payload(
                serde_json::value::RawValue::from_string(payload.to_owned()).unwrap(),
            )),
            method: None,
            headers: Vec::new(),
            key: None,
            max_attempts: None,
            timeout_ms: None,
            delay_ms: None,
            callback_url: None,
            callback_on: Vec::new(),
            priority: None,
            flow_key: None,
            wait: false,
        }
    }

    #[test]
    fn the_submit_body_keeps_the_payload_as_written() {
        let mut args = submit_args(r#"{"b":1,"a":1.0,"b":2}"#);
        assert_eq!(
            submit_body(&args, "k\"1").unwrap(),
            r#"{"url":"http://127.0.0.1:9000/hook","idempotency_key":"k\"1","json":{"b":1,"a":1.0,"b":2}}"#
        );
        args.max_attempts = Some(5);
        args.timeout_ms = Some(2000);
        args.delay_ms = Some(0);
        args.priority = Some(7);
        let body = submit_body(&args, "k").unwrap();
        assert!(
            body.ends_with(r#","max_attempts":5,"timeout_ms":2000,"delay_ms":0,"priority":7}"#),
            "{body}"
        );
        let parsed: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(parsed["idempotency_key"], "k");
        args.flow_key = Some("acct \"1\"".into());
        let parsed: Value = serde_json::from_str(&submit_body(&args, "k").unwrap()).unwrap();
        assert_eq!(parsed["flow_key"], "acct \"1\"");
    }

    #[test]
    fn the_submit_body_carries_the_method_and_the_headers() {
        let mut args = submit_args("{}");
        args.payload = None;
        args.method = Some("GET".into());
        args.headers = vec!["X-Tenant: acme".into(), "Authorization:  Bearer t ".into()];
        let body: Value = serde_json::from_str(&submit_body(&args, "k").unwrap()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "url": "http://127.0.0.1:9000/hook",
                "idempotency_key": "k",
                "method": "GET",
                "headers": {"X-Tenant": "acme", "Authorization": "Bearer t"},
            })
        );
        args.headers.push("x-tenant: other".into());
        assert!(matches!(
            submit_body(&args, "k"),
            Err(ClientError::Usage(m)) if m.contains("x-tenant")
        ));
    }

    #[test]
    fn the_submit_body_carries_the_callback() {
        let mut args = submit_args("{}");
        args.callback_url = Some("http://127.0.0.1:9000/done".into());
        args.callback_on = vec!["failed".into(), "canceled".into()];
        let body: Value = serde_json::from_str(&submit_body(&args, "k").unwrap()).unwrap();
        assert_eq!(body["callback_url"], "http://127.0.0.1:9000/done");
        assert_eq!(
            body["callback_on"],
            serde_json::json!(["failed", "canceled"])
        );
        args.callback_on.clear();
        let body: Value = serde_json::from_str(&submit_body(&args, "k").unwrap()).unwrap();
        assert!(body.get("callback_on").is_none(), "the server's default");
    }

    #[test]
    fn generated_keys_are_fresh_uuid_v7() {
        let a = new_key().unwrap();
        let b = new_key().unwrap();
        assert_ne!(a, b);
        let id: TaskId = a.parse().unwrap();
        assert_eq!(id.as_uuid().get_version_num(), 7);
    }

    #[test]
    fn list_paths_carry_every_filter_escaped() {
        let check = |args: ListArgs, after: Option<&str>, expected: &str| {
            assert_eq!(list_path(&args, after), expected);
        };
        let plain = || ListArgs {
            filter: FilterArgs::default(),
            limit: None,
            all: false,
            after: None,
            output: Default::default(),
        };
        check(plain(), None, "/tasks");
        check(plain(), Some("12"), "/tasks?after=12");
        let mut args = plain();
        args.filter.state = Some(StateArg::Failed);
        args.filter.destination = Some("[::1]:80".into());
        args.filter.error = Some("http_503".into());
        args.filter.created_after = Some("2026-01-02T03:04:05Z".into());
        args.filter.key = Some("a&b".into());
        args.limit = Some(2);
        check(
            args,
            Some("7"),
            "/tasks?state=failed&destination=%5B::1%5D:80&error=http_503\
             &created_after=2026-01-02T03:04:05Z&idempotency_key=a%26b&limit=2&after=7",
        );
    }

    #[test]
    fn a_bulk_summary_counts_the_tasks_refused_by_the_allow_list() {
        let check = |done: serde_json::Value, line: &str| {
            assert_eq!(bulk_summary("retry", &done), line, "{done}");
        };
        check(
            serde_json::json!({"matched": 3, "applied": 3, "refused_url": 0}),
            "retry: 3 of 3 matching tasks changed\n",
        );
        check(
            serde_json::json!({"matched": 1, "applied": 1}),
            "retry: 1 of 1 matching task changed\n",
        );
        check(
            serde_json::json!({"matched": 3, "applied": 1, "refused_url": 2}),
            "retry: 1 of 3 matching tasks changed; 2 not retried: url or callback_url no \
             longer allowed by the server's --allow-url-prefix\n",
        );
        check(
            serde_json::json!({"matched": 5, "applied": 2, "refused_url": 0, "refused_quota": 3}),
            "retry: 2 of 5 matching tasks changed; 3 left for their tenant's max_pending or \
             submit rate\n",
        );
    }

    #[test]
    fn bulk_bodies_name_the_action_and_filter() {
        let mut args = BulkArgs {
            action: BulkAction::Retry,
            filter: FilterArgs::default(),
            yes: false,
            output: Default::default(),
        };
        let body: Value = serde_json::from_str(&bulk_body(&args, true)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"action": "retry", "filter": {}, "dry_run": true})
        );
        assert_eq!(describe_filter(&args.filter), "(no filter: every task)");
        args.action = BulkAction::Delete;
        args.filter.state = Some(StateArg::Canceled);
        args.filter.error = Some("timeout".into());
        let body: Value = serde_json::from_str(&bulk_body(&args, false)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"action": "delete",
                "filter": {"state": "canceled", "error": "timeout"}, "dry_run": false})
        );
        assert_eq!(
            describe_filter(&args.filter),
            "state=canceled error=timeout"
        );
    }

    #[test]
    fn only_y_or_yes_confirms() {
        for (answer, expected) in [
            ("y\n", true),
            ("YES\n", true),
            (" yes ", true),
            ("\n", false),
            ("n\n", false),
            ("yep\n", false),
            ("", false),
        ] {
            assert_eq!(is_yes(answer), expected, "{answer:?}");
        }
    }
}
