//! The document schemathesis reads: docs/openapi.yaml as it is, but for the
//! values whose validity depends on this run rather than on the document,
//! narrowed to what this run's server takes, and kept short.
//!
//! - A task's `url` (and `callback_url`) is only accepted under the server's allow-list, which
//!   here is the loopback sink's origin: the fuzz copy's pattern is the
//!   document's own path and query pattern behind that origin, and the
//!   examples' origin (`http://127.0.0.1:9000`) becomes the sink's. So every
//!   generated task can be delivered, and every delivery stays on loopback.
//! - `run_at` may be at most 365 days ahead of the server's clock: the fuzz
//!   copy's years end before this decade, so a generated time is never
//!   refused for being too far ahead.
//! - A task id names a task of this run's server: each operation on a task
//!   gets, as the example of its `{id}`, a task the harness made in the
//!   state that operation needs ([`super::seed`]), so the examples phase
//!   reaches every operation's 2xx; the other phases still draw ids at
//!   random and follow the document's links.
//! - A schedule name names a schedule of this run's server: each operation on
//!   a schedule gets a seeded one as its `{name}`'s example (the delete its
//!   own), as task ids do; so does each operation on a tenant, and the
//!   key's revoke gets a seeded key's id; each operation on a topic names a
//!   seeded topic, on a subscription a seeded subscription (the deletes
//!   their own), and the event's read a seeded event.
//! - A subscriber's `url` is held to the allow-list as a task's is: the
//!   fuzz copy gives it the task url's narrowed schema.
//! - `GET /tasks/{id}?wait_ms=` may hold a request 60 s on a pending task:
//!   the fuzz copy waits at most [`MAX_WAIT_MS`], so a run's length does
//!   not depend on how many generated waits meet a pending task.
//!
//! - `POST /admin/backup` is left out: it writes files wherever the server
//!   may (a generated `/x` as root), which a fuzz run must not do. Its
//!   bounds are held by spec_bounds.rs and its answers by the black-box
//!   tests (tests/blackbox/backup.rs).
//!
//! - A destination's `client_cert`, `client_key` and `ca_certs` are left out
//!   of its settings: they are PEM whose validity (X.509, a key that is the
//!   certificate's) no schema says, so every generated one is refused and
//!   schemathesis would see the whole operation as mismatched. Their
//!   refusals are held by spec_bounds.rs and tc-http's unit table, their
//!   use by the black-box tests (tests/blackbox/client_certs.rs).
//!
//! Everything else (lengths, ranges, enums, the dot-segment rule, closed
//! objects) is the document's own, so the server is fuzzed against what it
//! publishes; the narrowed bounds themselves are held to the server by
//! tc-http's tests/http/spec_bounds.rs.

use serde_json::Value;

use super::seed::Seeds;

/// The origin of the document's example urls.
pub(crate) const EXAMPLE_ORIGIN: &str = "http://127.0.0.1:9000";

/// Where the url pattern's origin part ends: the close of its optional port.
/// What follows is the path and the query.
const URL_PORT_END: &str = "6553[0-5]))?";

/// The longest `wait_ms` the fuzz copy generates.
pub(crate) const MAX_WAIT_MS: u64 = 1000;

/// The years of the document's time pattern, and the ones the fuzz copy
/// uses for `run_at`: all in the past, wherever the clock stands.
const YEARS: &str = "(19[7-9][0-9]|[2-9][0-9]{3})";
const PAST_YEARS: &str = "(19[7-9][0-9]|20[01][0-9])";

/// The fuzz copy of `yaml` (docs/openapi.yaml) for a server whose allow-list
/// is `origin` (`http://127.0.0.1:PORT`).
pub(crate) fn fuzz_copy(yaml: &str, origin: &str, seeds: &Seeds) -> Result<Value, String> {
    let mut doc: Value =
        serde_norway::from_str(yaml).map_err(|e| format!("docs/openapi.yaml: {e}"))?;
    let submit = "/components/schemas/SubmitRequest/properties";

    // A callback's url is held to the same allow-list as the task's.
    for field in ["url", "callback_url"] {
        let url_pattern = string_at(&doc, &format!("{submit}/{field}/pattern"))?;
        let path_and_query = split_once_exactly(url_pattern, URL_PORT_END)?.1;
        let narrowed = format!("^{}{path_and_query}", regex_escape(origin));
        *pointer_mut(&mut doc, &format!("{submit}/{field}/pattern"))? = Value::String(narrowed);
    }
    // So is a subscriber's: its url is a task's url.
    let task_url = pointer_mut(&mut doc, &format!("{submit}/url"))?.clone();
    for schema in ["SubscriptionCreate", "SubscriptionPatch"] {
        *pointer_mut(
            &mut doc,
            &format!("/components/schemas/{schema}/properties/url"),
        )? = task_url.clone();
    }

    let time = string_at(&doc, "/components/schemas/UtcTime/pattern")?;
    let (before, after) = split_once_exactly(time, YEARS)?;
    let past = format!("{before}{PAST_YEARS}{after}");
    // An event's `run_at` is a task's.
    for schema in ["SubmitRequest", "EventCreate"] {
        *pointer_mut(
            &mut doc,
            &format!("/components/schemas/{schema}/properties/run_at"),
        )? = serde_json::json!({
            "type": "string",
            "format": "date-time",
            "pattern": past,
        });
    }

    let get = pointer_mut(&mut doc, "/paths/~1tasks~1{id}/get/parameters")?;
    let wait = get
        .as_array_mut()
        .and_then(|ps| ps.iter_mut().find(|p| p["name"] == "wait_ms"))
        .ok_or("docs/openapi.yaml: GET /tasks/{id} has no wait_ms")?;
    *pointer_mut(wait, "/schema/maximum")? = MAX_WAIT_MS.into();

    let task_id = doc
        .pointer("/components/parameters/TaskId")
        .cloned()
        .ok_or("docs/openapi.yaml has no TaskId parameter")?;
    let mut seeded = 0;
    for item in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        for operation in item
            .as_object_mut()
            .into_iter()
            .flat_map(|i| i.values_mut())
        {
            let Some(id) = operation["operationId"]
                .as_str()
                .and_then(|o| seeds.for_operation(o))
            else {
                continue;
            };
            let mut parameter = task_id.clone();
            parameter["example"] = Value::String(id.to_owned());
            for p in operation["parameters"].as_array_mut().into_iter().flatten() {
                if p["$ref"] == "#/components/parameters/TaskId" {
                    *p = parameter.clone();
                    seeded += 1;
                }
            }
        }
    }
    if seeded != 5 {
        return Err(format!(
            "docs/openapi.yaml: expected 5 operations on a task id, found {seeded}"
        ));
    }

    // Each operation on a schedule names a schedule the harness made; each
    // on a tenant a seeded tenant, and the key's revoke a seeded key.
    seed_parameter(&mut doc, "ScheduleName", 6, |o| {
        super::seed::schedule_for_operation(o).map(str::to_owned)
    })?;
    seed_parameter(&mut doc, "TenantNamePath", 5, |o| {
        super::seed::tenant_for_operation(o).map(str::to_owned)
    })?;
    seed_parameter(&mut doc, "KeyId", 1, |o| {
        (o == "revokeTenantKey").then(|| seeds.key_id.clone())
    })?;
    // Each operation on a topic names a seeded topic (the delete an empty
    // one), each on a subscription a seeded subscription (the delete its
    // own), and the event's read a seeded event.
    seed_parameter(&mut doc, "TopicName", 11, |o| {
        super::seed::topic_for_operation(o).map(str::to_owned)
    })?;
    seed_parameter(&mut doc, "SubscriptionId", 4, |o| {
        seeds.subscription_for_operation(o)
    })?;
    seed_parameter(&mut doc, "EventId", 1, |o| {
        (o == "getEvent").then(|| seeds.event.clone())
    })?;
    // Each operation on a flow key names a seeded key (the delete its own).
    seed_parameter(&mut doc, "FlowKeyName", 3, |o| {
        super::seed::flow_key_for_operation(o).map(str::to_owned)
    })?;

    let settings = pointer_mut(
        &mut doc,
        "/components/schemas/DestinationSettings/properties",
    )?
    .as_object_mut()
    .ok_or("docs/openapi.yaml: DestinationSettings has no properties")?;
    for pem in ["client_cert", "client_key", "ca_certs"] {
        if settings.remove(pem).is_none() {
            return Err(format!(
                "docs/openapi.yaml: DestinationSettings has no {pem}"
            ));
        }
    }

    let paths = doc["paths"]
        .as_object_mut()
        .ok_or("docs/openapi.yaml has no paths")?;
    if paths.remove("/admin/backup").is_none() {
        return Err("docs/openapi.yaml: no /admin/backup to leave out".into());
    }

    let rewritten = rewrite_origin(&mut doc, EXAMPLE_ORIGIN, origin);
    if rewritten == 0 {
        return Err(format!(
            "docs/openapi.yaml: no example url starts with {EXAMPLE_ORIGIN}"
        ));
    }
    Ok(doc)
}

/// Gives each operation that `example_for` names the example it answers as
/// the one of its path parameter `#/components/parameters/{parameter}`;
/// `expected` such parameters must be found (a document that moved them is
/// refused rather than fuzzed without its seeds).
fn seed_parameter(
    doc: &mut Value,
    parameter: &str,
    expected: usize,
    example_for: impl Fn(&str) -> Option<String>,
) -> Result<(), String> {
    let reference = format!("#/components/parameters/{parameter}");
    let declared = doc
        .pointer(&format!("/components/parameters/{parameter}"))
        .cloned()
        .ok_or_else(|| format!("docs/openapi.yaml has no {parameter} parameter"))?;
    let mut named = 0;
    for operation in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
        .flat_map(|i| i.as_object_mut().into_iter().flat_map(|i| i.values_mut()))
    {
        let Some(example) = operation["operationId"].as_str().and_then(&example_for) else {
            continue;
        };
        let mut seeded = declared.clone();
        seeded["example"] = Value::String(example);
        for p in operation["parameters"].as_array_mut().into_iter().flatten() {
            if p["$ref"] == reference.as_str() {
                *p = seeded.clone();
                named += 1;
            }
        }
    }
    if named != expected {
        return Err(format!(
            "docs/openapi.yaml: expected {expected} operations on {parameter}, found {named}"
        ));
    }
    Ok(())
}

fn string_at<'a>(doc: &'a Value, pointer: &str) -> Result<&'a str, String> {
    doc.pointer(pointer)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("docs/openapi.yaml has no string at {pointer}"))
}

fn pointer_mut<'a>(doc: &'a mut Value, pointer: &str) -> Result<&'a mut Value, String> {
    doc.pointer_mut(pointer)
        .ok_or_else(|| format!("docs/openapi.yaml has nothing at {pointer}"))
}

/// `text` split around its one occurrence of `marker`.
fn split_once_exactly<'a>(text: &'a str, marker: &str) -> Result<(&'a str, &'a str), String> {
    if text.matches(marker).count() != 1 {
        return Err(format!(
            "docs/openapi.yaml: expected {marker:?} exactly once in {text:?}"
        ));
    }
    text.split_once(marker)
        .ok_or_else(|| format!("{marker:?} not in {text:?}"))
}

fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Replaces `from` with `to` at the start of every string in `value`;
/// returns how many it changed.
fn rewrite_origin(value: &mut Value, from: &str, to: &str) -> usize {
    match value {
        Value::String(s) => match s.strip_prefix(from) {
            Some(rest) => {
                *s = format!("{to}{rest}");
                1
            }
            None => 0,
        },
        Value::Array(items) => items.iter_mut().map(|v| rewrite_origin(v, from, to)).sum(),
        Value::Object(map) => map.values_mut().map(|v| rewrite_origin(v, from, to)).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds() -> Seeds {
        Seeds {
            succeeded: "s".into(),
            failed: "f".into(),
            finished: "d".into(),
            pending: "p".into(),
            key_id: "key_0011223344556677".into(),
            subscription: "sub-kept".into(),
            subscription_to_delete: "sub-gone".into(),
            event: "ev-seed".into(),
        }
    }

    fn document() -> String {
        let path = crate::harness::workspace_root()
            .join("docs")
            .join("openapi.yaml");
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn the_copy_narrows_what_the_run_decides_and_keeps_the_rest() {
        let yaml = document();
        let original: Value = serde_norway::from_str(&yaml).unwrap();
        let copy = fuzz_copy(&yaml, "http://127.0.0.1:4567", &seeds()).unwrap();
        assert!(copy["paths"].get("/admin/backup").is_none(), "writes files");
        assert!(original["paths"].get("/admin/backup").is_some());
        let url = "/components/schemas/SubmitRequest/properties/url";
        let pattern = copy.pointer(&format!("{url}/pattern")).unwrap();
        let pattern = pattern.as_str().unwrap();
        assert!(
            pattern.starts_with(r"^http://127\.0\.0\.1:4567(/"),
            "{pattern}"
        );
        let original_pattern = original.pointer(&format!("{url}/pattern")).unwrap();
        assert!(
            original_pattern
                .as_str()
                .unwrap()
                .ends_with(pattern.strip_prefix(r"^http://127\.0\.0\.1:4567").unwrap())
        );
        // The url's other rules stay as published.
        for rule in ["maxLength", "not"] {
            assert_eq!(
                copy.pointer(&format!("{url}/{rule}")),
                original.pointer(&format!("{url}/{rule}")),
                "{rule}"
            );
        }
        // A callback's url is narrowed as the task's is.
        let callback = "/components/schemas/SubmitRequest/properties/callback_url/pattern";
        assert_eq!(copy.pointer(callback).unwrap().as_str(), Some(pattern));
        // So is a subscriber's, with the task url's other rules.
        for schema in ["SubscriptionCreate", "SubscriptionPatch"] {
            let sub = format!("/components/schemas/{schema}/properties/url");
            assert_eq!(copy.pointer(&sub), copy.pointer(url), "{schema}");
        }
        let run_at = copy
            .pointer("/components/schemas/SubmitRequest/properties/run_at/pattern")
            .unwrap();
        assert!(
            run_at
                .as_str()
                .unwrap()
                .starts_with(&format!("^{PAST_YEARS}-"))
        );
        let example = copy
            .pointer("/paths/~1tasks/post/requestBody/content/application~1json/example/url")
            .unwrap();
        assert_eq!(example, "http://127.0.0.1:4567/hook");
        // Nothing else changed: the two schemas put back, the copies agree.
        let wait = "/paths/~1tasks~1{id}/get/parameters/1/schema/maximum";
        assert_eq!(original.pointer(wait).unwrap(), 60000);
        assert_eq!(copy.pointer(wait).unwrap(), MAX_WAIT_MS);
        let mut restored = copy.clone();
        for field in ["url", "callback_url", "run_at"] {
            let pointer = format!("/components/schemas/SubmitRequest/properties/{field}");
            *restored.pointer_mut(&pointer).unwrap() = original.pointer(&pointer).unwrap().clone();
        }
        *restored.pointer_mut(wait).unwrap() = original.pointer(wait).unwrap().clone();
        // Each operation on a task has its seeded task as the id's example.
        for (path, method, id) in [
            ("/tasks~1{id}", "get", "s"),
            ("/tasks~1{id}", "delete", "d"),
            ("/tasks~1{id}~1result", "get", "s"),
            ("/tasks~1{id}~1cancel", "post", "p"),
            ("/tasks~1{id}~1retry", "post", "f"),
        ] {
            let pointer = format!("/paths/~1{}/{method}/parameters/0", &path[1..]);
            let parameter = restored.pointer_mut(&pointer).unwrap();
            assert_eq!(parameter["example"], id, "{pointer}");
            assert_eq!(parameter["name"], "id");
            *parameter = serde_json::json!({"$ref": "#/components/parameters/TaskId"});
        }
        // Each operation on a schedule has a seeded schedule as its name's
        // example, the delete its own.
        for (path, method, name) in [
            ("/schedules~1{name}", "get", "seed-schedule"),
            ("/schedules~1{name}", "put", "seed-schedule"),
            ("/schedules~1{name}", "delete", "seed-schedule-delete"),
            ("/schedules~1{name}~1pause", "post", "seed-schedule"),
            ("/schedules~1{name}~1resume", "post", "seed-schedule"),
            ("/schedules~1{name}~1trigger", "post", "seed-schedule"),
        ] {
            let pointer = format!("/paths/~1{}/{method}/parameters/0", &path[1..]);
            let parameter = restored.pointer_mut(&pointer).unwrap();
            assert_eq!(parameter["example"], name, "{pointer}");
            assert_eq!(parameter["name"], "name");
            *parameter = serde_json::json!({"$ref": "#/components/parameters/ScheduleName"});
        }
        // Each operation on a tenant likewise, and the key's revoke its key.
        for (path, method, index, name, param, example) in [
            (
                "/tenants~1{name}",
                "get",
                0,
                "name",
                "TenantNamePath",
                "seed-tenant",
            ),
            (
                "/tenants~1{name}",
                "put",
                0,
                "name",
                "TenantNamePath",
                "seed-tenant",
            ),
            (
                "/tenants~1{name}",
                "delete",
                0,
                "name",
                "TenantNamePath",
                "seed-tenant-delete",
            ),
            (
                "/tenants~1{name}~1keys",
                "post",
                0,
                "name",
                "TenantNamePath",
                "seed-tenant",
            ),
            (
                "/tenants~1{name}~1keys~1{id}",
                "delete",
                0,
                "name",
                "TenantNamePath",
                "seed-tenant",
            ),
            (
                "/tenants~1{name}~1keys~1{id}",
                "delete",
                1,
                "id",
                "KeyId",
                "key_0011223344556677",
            ),
        ] {
            let pointer = format!("/paths/~1{}/{method}/parameters/{index}", &path[1..]);
            let parameter = restored.pointer_mut(&pointer).unwrap();
            assert_eq!(parameter["example"], example, "{pointer}");
            assert_eq!(parameter["name"], name);
            *parameter = serde_json::json!({"$ref": format!("#/components/parameters/{param}")});
        }
        // Each operation on a topic names a seeded topic (the delete an empty
        // one), on a subscription a seeded one (the delete its own), and the
        // event's read a seeded event.
        let topic = |path: &'static str, method: &'static str, name: &'static str| {
            (path, method, 0, "name", "TopicName", name)
        };
        for (path, method, index, name, param, example) in [
            (
                "/flow-keys~1{key}",
                "put",
                0,
                "key",
                "FlowKeyName",
                "seed-flow-key",
            ),
            (
                "/flow-keys~1{key}",
                "get",
                0,
                "key",
                "FlowKeyName",
                "seed-flow-key",
            ),
            (
                "/flow-keys~1{key}",
                "delete",
                0,
                "key",
                "FlowKeyName",
                "seed-flow-key-delete",
            ),
            topic("/topics~1{name}", "put", "seed-topic"),
            topic("/topics~1{name}", "get", "seed-topic"),
            topic("/topics~1{name}", "delete", "seed-topic-delete"),
            topic("/topics~1{name}~1subscriptions", "post", "seed-topic"),
            topic("/topics~1{name}~1subscriptions", "get", "seed-topic"),
            topic("/topics~1{name}~1subscriptions~1{id}", "get", "seed-topic"),
            topic(
                "/topics~1{name}~1subscriptions~1{id}",
                "patch",
                "seed-topic",
            ),
            topic(
                "/topics~1{name}~1subscriptions~1{id}",
                "delete",
                "seed-topic",
            ),
            topic(
                "/topics~1{name}~1subscriptions~1{id}~1replay",
                "post",
                "seed-topic",
            ),
            topic("/topics~1{name}~1events", "post", "seed-topic"),
            topic("/topics~1{name}~1events~1{id}", "get", "seed-topic"),
            (
                "/topics~1{name}~1subscriptions~1{id}",
                "get",
                1,
                "id",
                "SubscriptionId",
                "sub-kept",
            ),
            (
                "/topics~1{name}~1subscriptions~1{id}",
                "patch",
                1,
                "id",
                "SubscriptionId",
                "sub-kept",
            ),
            (
                "/topics~1{name}~1subscriptions~1{id}",
                "delete",
                1,
                "id",
                "SubscriptionId",
                "sub-gone",
            ),
            (
                "/topics~1{name}~1subscriptions~1{id}~1replay",
                "post",
                1,
                "id",
                "SubscriptionId",
                "sub-kept",
            ),
            (
                "/topics~1{name}~1events~1{id}",
                "get",
                1,
                "id",
                "EventId",
                "ev-seed",
            ),
        ] {
            let pointer = format!("/paths/~1{}/{method}/parameters/{index}", &path[1..]);
            let parameter = restored.pointer_mut(&pointer).unwrap();
            assert_eq!(parameter["example"], example, "{pointer}");
            assert_eq!(parameter["name"], name);
            *parameter = serde_json::json!({"$ref": format!("#/components/parameters/{param}")});
        }
        for narrowed in [
            "/components/schemas/SubscriptionCreate/properties/url",
            "/components/schemas/SubscriptionPatch/properties/url",
            "/components/schemas/EventCreate/properties/run_at",
        ] {
            *restored.pointer_mut(narrowed).unwrap() = original.pointer(narrowed).unwrap().clone();
        }
        rewrite_origin(&mut restored, "http://127.0.0.1:4567", EXAMPLE_ORIGIN);
        restored["paths"]["/admin/backup"] = original["paths"]["/admin/backup"].clone();
        let settings = "/components/schemas/DestinationSettings/properties";
        for pem in ["client_cert", "client_key", "ca_certs"] {
            let pointer = format!("{settings}/{pem}");
            assert!(copy.pointer(&pointer).is_none(), "{pem} left out");
            restored.pointer_mut(settings).unwrap()[pem] =
                original.pointer(&pointer).unwrap().clone();
        }
        assert_eq!(restored, original);
    }

    #[test]
    fn a_document_without_the_expected_patterns_is_refused() {
        let yaml = document();
        let broken = yaml.replace("6553[0-5]))?(/", "6553[0-5]))(/");
        assert!(fuzz_copy(&broken, "http://127.0.0.1:1", &seeds()).is_err());
        let no_examples = yaml.replace(EXAMPLE_ORIGIN, "http://127.0.0.1:9001");
        assert!(fuzz_copy(&no_examples, "http://127.0.0.1:1", &seeds()).is_err());
    }

    #[test]
    fn origins_are_escaped_for_a_pattern() {
        assert_eq!(
            regex_escape("http://127.0.0.1:80"),
            r"http://127\.0\.0\.1:80"
        );
        assert_eq!(regex_escape("a+b(c)"), r"a\+b\(c\)");
    }
}
