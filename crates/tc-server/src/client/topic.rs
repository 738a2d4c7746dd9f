//! `tc-server topic …`: topics, subscriptions, publishing and
//! replays over the `/topics` routes. Text for people (a table for lists,
//! one field a line otherwise), or the API's JSON with `--json`. A
//! subscription's secrets go to the server and never come back: its
//! view counts them.

use std::time::Duration;

use http::Method;
use serde_json::{Map, Value, json};

use super::args::{PublishArgs, PutTopicArgs, ReplayArgs, SubscribeArgs, TopicArgs, TopicCommand};
use super::error::ClientError;
use super::format::{Cell, Table, sanitize};
use super::http::{Api, escape};
use super::output::{Out, note};
use super::view::{field, text};

fn path(topic: &str) -> String {
    format!("/topics/{}", escape(topic))
}

fn sub_path(topic: &str, id: &str) -> String {
    format!("{}/subscriptions/{}", path(topic), escape(id))
}

/// Runs one `topic` subcommand.
pub(crate) async fn run(args: &TopicArgs) -> Result<(), ClientError> {
    let api = Api::new(&args.connection)?;
    let out = |leaf: super::args::Output| Out::new(args.output.json || leaf.json);
    match &args.command {
        TopicCommand::Put(a) => put(&api, &out(a.output), a).await,
        TopicCommand::List(a) => list(&api, &out(a.output)).await,
        TopicCommand::Get(a) => read(&api, &out(a.output), &path(&a.topic)).await,
        TopicCommand::Delete(a) => delete(&api, &out(a.output), &path(&a.topic)).await,
        TopicCommand::Subscribe(a) => subscribe(&api, &out(a.output), a).await,
        TopicCommand::Subscriptions(a) => subscriptions(&api, &out(a.output), &a.topic).await,
        TopicCommand::Enable(a) | TopicCommand::Disable(a) => {
            let enabled = matches!(args.command, TopicCommand::Enable(_));
            let body = json!({ "enabled": enabled }).to_string();
            let answer = api
                .json(Method::PATCH, &sub_path(&a.topic, &a.id), Some(body))
                .await?;
            show(&out(a.output), &answer)
        }
        TopicCommand::Unsubscribe(a) => {
            delete(&api, &out(a.output), &sub_path(&a.topic, &a.id)).await
        }
        TopicCommand::Publish(a) => publish(&api, &Out::new(args.output.json), a).await,
        TopicCommand::Event(a) => {
            let event = format!("{}/events/{}", path(&a.topic), escape(&a.id));
            read(&api, &out(a.output), &event).await
        }
        TopicCommand::Replay(a) => replay(&api, &out(a.output), a).await,
    }
}

/// Prints one object: its JSON, or one `field: value` a line.
fn show(out: &Out, value: &Value) -> Result<(), ClientError> {
    if out.json {
        return out.json_line(value);
    }
    let Some(object) = value.as_object() else {
        return out.json_line(value);
    };
    let mut text_out = String::new();
    for (name, v) in object {
        let shown = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        text_out.push_str(&format!("{name}: {}\n", sanitize(&shown)));
    }
    out.text(&text_out)
}

async fn read(api: &Api, out: &Out, path: &str) -> Result<(), ClientError> {
    let answer = api.json(Method::GET, path, None).await?;
    show(out, &answer)
}

async fn delete(api: &Api, out: &Out, path: &str) -> Result<(), ClientError> {
    api.send(Method::DELETE, path, None, Duration::ZERO).await?;
    if !out.json {
        note(&format!("deleted {}", sanitize(path)));
    }
    Ok(())
}

async fn put(api: &Api, out: &Out, a: &PutTopicArgs) -> Result<(), ClientError> {
    let mut body = Map::new();
    if let Some(d) = &a.description {
        body.insert("description".into(), d.clone().into());
    }
    if let Some(u) = &a.callback_url {
        body.insert("callback_url".into(), u.clone().into());
    }
    if let Some(s) = a.disable_after_s {
        body.insert("disable_after_s".into(), s.into());
    }
    let body = Value::Object(body).to_string();
    let answer = api.json(Method::PUT, &path(&a.topic), Some(body)).await?;
    show(out, &answer)
}

/// Prints the objects of `list` under `key`: JSON lines, or a table of
/// `columns` (header, field).
fn table(
    out: &Out,
    answer: &Value,
    key: &str,
    columns: &[(&str, &str)],
) -> Result<(), ClientError> {
    let items = field(answer, key)
        .as_array()
        .ok_or_else(|| ClientError::Protocol(format!("an answer without {key}: {answer}")))?;
    if out.json {
        for item in items {
            out.json_line(item)?;
        }
        return Ok(());
    }
    if items.is_empty() {
        note(&format!("no {key}"));
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = items
        .iter()
        .map(|item| {
            columns
                .iter()
                .map(|(_, f)| Cell::new(&text(field(item, f))))
                .collect()
        })
        .collect();
    let headers: Vec<&str> = columns.iter().map(|(h, _)| *h).collect();
    out.text(&Table::new(&headers).render(&rows, out.colour))
}

async fn list(api: &Api, out: &Out) -> Result<(), ClientError> {
    let answer = api.json(Method::GET, "/topics", None).await?;
    let columns = [
        ("NAME", "name"),
        ("SUBSCRIPTIONS", "subscriptions"),
        ("DISABLE AFTER S", "disable_after_s"),
        ("DESCRIPTION", "description"),
    ];
    table(out, &answer, "topics", &columns)
}

async fn subscriptions(api: &Api, out: &Out, topic: &str) -> Result<(), ClientError> {
    let path = format!("{}/subscriptions", path(topic));
    let answer = api.json(Method::GET, &path, None).await?;
    let columns = [
        ("ID", "id"),
        ("URL", "url"),
        ("ENABLED", "enabled"),
        ("FAILING SINCE", "failing_since"),
        ("SECRETS", "signing_secrets"),
    ];
    table(out, &answer, "subscriptions", &columns)
}

/// `Name: value` as a header pair.
fn header(text: &str) -> Result<(String, String), ClientError> {
    let (name, value) = text.split_once(':').ok_or_else(|| {
        ClientError::Usage(format!("--header {text:?}: write it as `Name: value`"))
    })?;
    Ok((name.trim().to_owned(), value.trim().to_owned()))
}

async fn subscribe(api: &Api, out: &Out, a: &SubscribeArgs) -> Result<(), ClientError> {
    let mut body = Map::new();
    body.insert("url".into(), a.url.clone().into());
    if !a.event_types.is_empty() {
        body.insert("event_types".into(), a.event_types.clone().into());
    }
    if !a.headers.is_empty() {
        let mut headers = Map::new();
        for h in &a.headers {
            let (name, value) = header(h)?;
            headers.insert(name, value.into());
        }
        body.insert("headers".into(), Value::Object(headers));
    }
    if !a.signing_secrets.is_empty() {
        body.insert("signing_secrets".into(), a.signing_secrets.clone().into());
    }
    if a.disabled {
        body.insert("enabled".into(), false.into());
    }
    let path = format!("{}/subscriptions", path(&a.topic));
    let answer = api
        .json(Method::POST, &path, Some(Value::Object(body).to_string()))
        .await?;
    show(out, &answer)
}

async fn publish(api: &Api, out: &Out, a: &PublishArgs) -> Result<(), ClientError> {
    let json = a.payload.as_ref().map_or("{}", |p| p.0.get());
    let body = format!(
        "{{\"event_type\":{},\"idempotency_key\":{},\"json\":{json}}}",
        Value::from(a.event_type.clone()),
        Value::from(a.key.clone())
    );
    let path = format!("{}/events", path(&a.topic));
    let answer = api.json(Method::POST, &path, Some(body)).await?;
    if out.json {
        return out.json_line(&answer);
    }
    let tasks = field(&answer, "tasks").as_array().map_or(0, Vec::len);
    note(&format!(
        "event {}: {tasks} tasks",
        sanitize(&text(field(&answer, "id")))
    ));
    table(
        out,
        &answer,
        "tasks",
        &[
            ("SUBSCRIPTION", "subscription"),
            ("TASK", "task_id"),
            ("STATE", "state"),
        ],
    )
}

async fn replay(api: &Api, out: &Out, a: &ReplayArgs) -> Result<(), ClientError> {
    let body = json!({ "since": a.since }).to_string();
    let path = format!("{}/replay", sub_path(&a.topic, &a.id));
    let answer = api.json(Method::POST, &path, Some(body)).await?;
    table(
        out,
        &answer,
        "tasks",
        &[
            ("SUBSCRIPTION", "subscription"),
            ("TASK", "task_id"),
            ("STATE", "state"),
        ],
    )
}
