//! docs/openapi.yaml against the server's validation, field by field. For
//! every request body field and query or path parameter the document
//! constrains, a value just inside each bound it states is accepted and a
//! value just outside is refused with a 400 that names the field, through
//! the real handlers.
//!
//! The bounds are read from the document (`type`, `minimum`, `maximum`,
//! `exclusiveMinimum`, `minLength`, `maxLength`, `minItems`, `maxItems`,
//! `enum`, `required`, `additionalProperties: false`, `not`); what a pattern
//! admits is shown by samples, each checked against the document's pattern
//! and against the server. A rule the document can only state in words (a
//! time at most 365 days ahead) is a sample the schema admits, the server
//! refuses and the field's description names; a leniency of the server the
//! pattern leaves out is the reverse.
//!
//! Every field the document describes has a row in [`fields`], and every
//! row a field in the document: a new field is one row.

use std::collections::BTreeSet;

use regex::Regex;
use serde_json::{Map, Value, json};
use tc_http::HttpConfig;
use tc_model::destination::parse_destination;

use crate::support::{Harness, harness};

/// Where a field's value goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    /// A property of `POST /tasks`'s body.
    Submit,
    /// A property of one task in `POST /tasks/batch` (refused alone, in
    /// the batch's 200 answer).
    BatchTask,
    /// A property of `POST /tasks/batch`'s body.
    Batch,
    /// A property of `POST /tasks/{id}/retry`'s body.
    Retry,
    /// A property of `POST /tasks/bulk`'s body.
    Bulk,
    /// A property of `POST /tasks/bulk`'s `filter`.
    BulkFilter,
    /// A property of `PUT /destinations/{destination}`'s body.
    Destination,
    /// A query parameter of `GET /tasks`.
    ListQuery,
    /// A query parameter of `GET /tasks/{id}`.
    GetQuery,
    /// The `{destination}` of `POST /destinations/{destination}/pause`.
    DestinationPath,
    /// A property of `POST /schedules`'s body.
    Schedule,
    /// A property of `POST /schedules`'s `task`.
    ScheduleTask,
}

impl Place {
    /// The schema (or parameter list) the document describes it with.
    fn pointer(self) -> &'static str {
        match self {
            Place::Submit | Place::BatchTask => "/components/schemas/SubmitRequest",
            Place::Batch => {
                "/paths/~1tasks~1batch/post/requestBody/content/application~1json/schema"
            }
            Place::Retry => {
                "/paths/~1tasks~1{id}~1retry/post/requestBody/content/application~1json/schema"
            }
            Place::Bulk => "/components/schemas/BulkRequest",
            Place::BulkFilter => "/components/schemas/TaskFilter",
            Place::Destination => "/components/schemas/DestinationSettings",
            Place::ListQuery => "/paths/~1tasks/get/parameters",
            Place::GetQuery => "/paths/~1tasks~1{id}/get/parameters",
            Place::DestinationPath => "/paths/~1destinations~1{destination}~1pause/post/parameters",
            Place::Schedule => "/components/schemas/ScheduleRequest",
            Place::ScheduleTask => "/components/schemas/ScheduleTask",
        }
    }

    fn is_body(self) -> bool {
        !matches!(
            self,
            Place::ListQuery | Place::GetQuery | Place::DestinationPath
        )
    }

    /// How a refusal's message names field `name`.
    fn prefix(self, name: &str) -> String {
        match self {
            Place::BulkFilter => format!("filter.{name}"),
            Place::ScheduleTask => format!("task.{name}"),
            _ => name.to_owned(),
        }
    }
}

/// What a sample shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// The document admits it and the server accepts it.
    Accepted,
    /// The document refuses it and the server refuses it.
    Refused,
    /// The schema admits it, the server refuses it, and the field's
    /// description states the rule, with these words.
    RefusedAsDescribed(&'static str),
    /// The schema refuses it, the server takes it, and the description
    /// says so, with these words.
    ToleratedAsDescribed(&'static str),
}

/// One field of a request: a row of the table.
struct Field {
    place: Place,
    name: &'static str,
    /// A value of `n` characters that the field's pattern admits, for a
    /// field with a length bound.
    fill: Option<fn(usize) -> String>,
    /// An item of `n`-th position, for an array field with a size bound.
    item: Option<fn(usize) -> Value>,
    samples: Vec<(Value, Expect)>,
}

fn field(place: Place, name: &'static str) -> Field {
    Field {
        place,
        name,
        fill: None,
        item: None,
        samples: Vec::new(),
    }
}

impl Field {
    fn fill(mut self, fill: fn(usize) -> String) -> Field {
        self.fill = Some(fill);
        self
    }

    fn item(mut self, item: fn(usize) -> Value) -> Field {
        self.item = Some(item);
        self
    }

    fn samples(mut self, expect: Expect, values: &[Value]) -> Field {
        self.samples
            .extend(values.iter().map(|v| (v.clone(), expect)));
        self
    }
}

use Expect::{Accepted, Refused, RefusedAsDescribed, ToleratedAsDescribed};

fn strings(values: &[&str]) -> Vec<Value> {
    values.iter().map(|v| json!(v)).collect()
}

/// `host:port` values, and what the destination rule makes of them.
fn destinations(expect: Expect) -> Vec<Value> {
    let long_host = |n: usize| format!("{}:1", "h".repeat(n));
    match expect {
        Accepted => {
            let mut v = strings(&[
                "api.example.com:443",
                "API.Example.com:0443",
                "h:0",
                "a_b-c.d:65535",
                "127.0.0.1:9000",
                "[::1]:8080",
                "[::]:1",
                "[1:2:3:4:5:6:7:8]:1",
                "[1::]:1",
                "[1:2:3:4:5:6:7::]:1",
                "[::2:3:4:5:6:7:8]:1",
                "[::ffff:1.2.3.4]:1",
                "[1:2:3:4:5:6:1.2.3.4]:1",
                "[1:2:3:4:5::1.2.3.4]:1",
                "[FFFF::abcd]:1",
            ]);
            v.push(json!(long_host(253)));
            v
        }
        _ => {
            let mut v = strings(&[
                "api.example.com",
                "h:",
                ":80",
                "h:65536",
                "h:+80",
                "a b:80",
                "a~b:80",
                "a/b:80",
                "[zz]:1",
                "[::1]",
                "::1:80",
                "[1:2:3:4:5:6:7:8:9]:1",
                "[1:2:3:4:5:6:7:8::]:1",
                "[1:2:3:4:5:1.2.3.4]:1",
                "[1:2:3:4:5:6::1.2.3.4]:1",
                "[1.2.3.4::]:1",
                "[::1.2.3.04]:1",
                "[::1.2.3]:1",
                "[::12345]:1",
                "[1:::2]:1",
                "[::1%eth0]:1",
            ]);
            v.push(json!(long_host(254)));
            v
        }
    }
}

/// Times in UTC, and what the time rule makes of them.
fn times(expect: Expect) -> Vec<Value> {
    match expect {
        Accepted => strings(&[
            "2026-01-02T03:04:05Z",
            "1970-01-01T00:00:00Z",
            "2024-02-29T00:00:00Z",
            "2000-02-29T23:59:59.999Z",
            "2026-01-02T03:04:05.1234567891Z",
            "2026-01-02T03:04:05+00:00",
        ]),
        _ => strings(&[
            "2026-01-02T03:04:05+01:00",
            "2026-01-02 03:04:05Z",
            "2026-01-02t03:04:05z",
            "2026-01-02T03:04:05",
            "1969-12-31T23:59:59Z",
            "2023-02-29T00:00:00Z",
            "2100-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-01-02T24:00:00Z",
            "2026-01-02T03:04Z",
            "2026-01-02",
            "tomorrow",
        ]),
    }
}

/// Every field of every request the document constrains.
fn fields() -> Vec<Field> {
    let mut rows = Vec::new();
    for place in [Place::Submit, Place::BatchTask, Place::ScheduleTask] {
        rows.extend([
            field(place, "url")
                .fill(|n| format!("http://h/{}", "a".repeat(n - 9)))
                .samples(
                    Accepted,
                    &strings(&[
                        "http://127.0.0.1:9/hook",
                        "https://API.example.com",
                        "HTTP://h:080/a/b?c=d&e=/f?g",
                        "http://h?x",
                        "http://[::1]:8080/x",
                        "http://[::ffff:1.2.3.4]/",
                        "http://a_b.c-d:65535/%41~!$&'()*+,;=:@",
                        "http://h/a..b/.c/..d/%2e%2ex",
                        "http://h/a?x=/../y",
                    ]),
                )
                .samples(
                    Refused,
                    &strings(&[
                        "",
                        "ftp://h/x",
                        "http://",
                        "http:///x",
                        "/relative",
                        "h/x",
                        "http://h:0/",
                        "http://h:65536/",
                        "http://h:/",
                        "http://user@h/",
                        "http://a~b/",
                        "http://[v1.x]/",
                        "http://[zz]/",
                        "http://h/a b",
                        "http://h/../x",
                        "http://h/a/./x",
                        "http://h/a/%2e%2E",
                        "http://h/a/.%2E/b",
                        "http://h/a%2F..%2Fb",
                        "http://h/a%5C..",
                        "http://h/..?x",
                    ]),
                )
                .samples(Refused, &[json!(format!("http://{}/", "h".repeat(254)))])
                .samples(
                    ToleratedAsDescribed("`\"{}|\\^[]`"),
                    &strings(&["http://h/a{b}", "http://h/a|b^c"]),
                )
                .samples(ToleratedAsDescribed("non-ASCII"), &strings(&["http://h/é"]))
                .samples(
                    ToleratedAsDescribed("`#fragment`"),
                    &strings(&["http://h/x#frag"]),
                ),
            field(place, "json").samples(
                Accepted,
                &[json!({"a": [1, 2]}), json!(null), json!("text"), json!(1.5)],
            ),
            field(place, "idempotency_key")
                .fill(|n| "k".repeat(n))
                .samples(Accepted, &strings(&["a b", "~!#\"'", "order-42", "K"]))
                .samples(
                    Refused,
                    &strings(&[" k", "k ", " ", "naïve", "a\nb", "a\tb", "a\u{7f}"]),
                ),
            field(place, "max_attempts").samples(Accepted, &[json!(3.0), json!(5e0)]),
            // The enum's members and its refusals come from the document;
            // a GET with `json` is the HTTP contract's row.
            field(place, "method"),
            // Each refused name and malformed value is a row of the HTTP
            // contract (`outbound_rows`); here the shapes the type admits.
            field(place, "headers").samples(
                Accepted,
                &[
                    json!({}),
                    json!({"X-Tenant": "acme", "authorization": "Bearer t"}),
                    Value::Object((0..32).map(|i| (format!("x-{i}"), json!("v"))).collect()),
                ],
            ),
            field(place, "callback_url")
                .fill(|n| format!("http://h/{}", "a".repeat(n - 9)))
                .samples(
                    Accepted,
                    &strings(&["http://127.0.0.1:9/done", "https://API.example.com/cb?x=1"]),
                )
                .samples(
                    Refused,
                    &strings(&[
                        "",
                        "ftp://h/x",
                        "/relative",
                        "http://user@h/",
                        "http://h/../x",
                    ]),
                ),
            // A state given twice, an unknown one: rows of dto.rs's tests.
            field(place, "callback_on").item(|i| json!(["success", "failed", "canceled"][i % 3])),
            field(place, "timeout_ms"),
            field(place, "delay_ms"),
            field(place, "run_at")
                .samples(Accepted, &times(Accepted))
                .samples(Refused, &times(Refused))
                // The harness's clock is 2026-01-02T03:04:05.678Z.
                .samples(Accepted, &strings(&["2027-01-02T03:04:05.678Z"]))
                .samples(
                    RefusedAsDescribed("at most 365 days"),
                    &strings(&["2027-01-02T03:04:05.679Z", "9999-12-31T23:59:59Z"]),
                ),
        ]);
    }
    // A schedule's template takes a priority and a flow key as a submit
    // does: its tasks carry them.
    for place in [Place::Submit, Place::BatchTask, Place::ScheduleTask] {
        rows.push(field(place, "priority").samples(Accepted, &[json!(9.0), json!(0)]));
        rows.push(
            field(place, "flow_key")
                .fill(|n| "k".repeat(n))
                .samples(Accepted, &strings(&[" ", "a/b ~?%"]))
                .samples(Refused, &strings(&["\t", "é", "\u{7f}"])),
        );
    }
    rows.extend([
        field(Place::Batch, "tasks").item(
            |i| json!({"url": "http://127.0.0.1:9/hook", "idempotency_key": format!("batch-{i}")}),
        ),
        field(Place::Retry, "delay_ms"),
        field(Place::Bulk, "action"),
        field(Place::Bulk, "filter").samples(Accepted, &[json!({})]),
        field(Place::Bulk, "dry_run"),
        field(Place::Destination, "max_in_flight"),
        field(Place::Destination, "rate_per_s").samples(Accepted, &[json!(0.5), json!(1e6)]),
        field(Place::Destination, "burst"),
        field(Place::Destination, "paused"),
        field(Place::Destination, "headers")
            .samples(Accepted, &[json!({}), json!({"Authorization": "Bearer t"})]),
        field(Place::Destination, "signing_secrets").item(|i| {
            json!(
                [
                    "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
                    "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
                ][i % 2]
            )
        }),
        field(Place::Destination, "share_with_tenants")
            .item(|i| json!(format!("t{i}")))
            .samples(
                Accepted,
                &[
                    json!(["*"]),
                    json!([]),
                    json!(["b", "a", "b"]),
                    json!(["*", "*"]),
                ],
            )
            .samples(RefusedAsDescribed("stands alone"), &[json!(["*", "a"])]),
        // PEM is read by the host's TlsCheck (none in this app: only null,
        // the clearing, is taken here; tc-server's black-box tests take PEM).
        field(Place::Destination, "client_cert").samples(
            RefusedAsDescribed("given with"),
            &[json!("-----BEGIN CERTIFICATE-----\n")],
        ),
        field(Place::Destination, "client_key").samples(
            RefusedAsDescribed("given with it"),
            &[json!("-----BEGIN PRIVATE KEY-----\n")],
        ),
        field(Place::Destination, "ca_certs")
            .samples(RefusedAsDescribed("Invalid PEM"), &[json!("not pem")]),
        // One of three shapes, read member by member (auth.rs's
        // table in tc-model holds every refusal); jwt needs --issuer.
        field(Place::Destination, "auth")
            .samples(
                Accepted,
                &[
                    Value::Null,
                    json!({"type": "basic", "username": "u", "password": "p"}),
                    json!({"type": "oauth2_client_credentials", "token_url": "https://i.example/t",
                        "client_id": "i", "client_secret": "s", "scope": "a b"}),
                ],
            )
            // The document states the three shapes as a oneOf, which this
            // table's reading of bounds does not evaluate.
            .samples(
                RefusedAsDescribed("naming the field"),
                &[
                    json!({"type": "digest"}),
                    json!({"type": "basic", "username": "a:b", "password": "p"}),
                    json!({"type": "jwt", "audience": "a", "lifetime_s": 59}),
                    json!("basic"),
                ],
            ),
        field(Place::DestinationPath, "destination")
            .samples(Accepted, &destinations(Accepted))
            .samples(Refused, &destinations(Refused)),
        field(Place::GetQuery, "wait_ms"),
        field(Place::Schedule, "name")
            .fill(|n| "n".repeat(n))
            .samples(Accepted, &strings(&["nightly-report_v2.1", "A"]))
            .samples(Refused, &strings(&["a b", "a/b", "naïve", "a:b"])),
        field(Place::Schedule, "cron")
            // Extra spaces between fields are insignificant.
            .fill(|n| format!("0{} 0 * * *", " ".repeat(n - 9)))
            .samples(
                Accepted,
                &strings(&[
                    "*/15 9-17 * * MON-FRI",
                    "0 0 1 JAN,JUL *",
                    "@hourly",
                    "@monthly",
                ]),
            )
            .samples(
                RefusedAsDescribed("Five fields"),
                &strings(&["* * * *", "* * * * * *", "60 * * * *", "whenever"]),
            )
            .samples(RefusedAsDescribed("never fires"), &strings(&["0 0 30 2 *"])),
        field(Place::Schedule, "timezone")
            .samples(
                Accepted,
                &strings(&["UTC", "Europe/Berlin", "America/New_York"]),
            )
            .samples(
                RefusedAsDescribed("IANA"),
                &strings(&["Mars/Olympus", "", "+01:00"]),
            ),
        field(Place::Schedule, "task").samples(Accepted, &[json!({"url": "http://h/x"})]),
        field(Place::Schedule, "paused"),
        field(Place::Schedule, "overlap"),
        field(Place::Schedule, "catch_up"),
    ]);
    // A schedule's task has every field of a submit but the key, which
    // each firing sets.
    rows.retain(|r| !(r.place == Place::ScheduleTask && r.name == "idempotency_key"));
    for place in [Place::BulkFilter, Place::ListQuery] {
        rows.extend([
            field(place, "state"),
            field(place, "destination")
                .samples(Accepted, &destinations(Accepted))
                .samples(Refused, &destinations(Refused)),
            field(place, "error").fill(|n| "é".repeat(n)),
            field(place, "created_after")
                .samples(Accepted, &times(Accepted))
                .samples(Refused, &times(Refused)),
            field(place, "created_before")
                .samples(Accepted, &times(Accepted))
                .samples(Refused, &times(Refused)),
            field(place, "idempotency_key").fill(|n| "é".repeat(n)),
            field(place, "topic").fill(|n| "é".repeat(n)),
            field(place, "event_id").fill(|n| "é".repeat(n)),
            field(place, "subscription").fill(|n| "é".repeat(n)),
            field(place, "tenant")
                .samples(Accepted, &strings(&["a", "0", "team-1_x", &"a".repeat(63)]))
                .samples(
                    Refused,
                    &strings(&["", "-a", "_a", "A", "a b", "a.b", &"a".repeat(64)]),
                ),
            field(place, "priority"),
            field(place, "flow_key").fill(|n| "k".repeat(n)),
        ]);
    }
    rows.extend([
        field(Place::ListQuery, "limit"),
        field(Place::ListQuery, "after")
            .samples(
                Accepted,
                &strings(&["0", "7", "9223372036854775807", "999999999999999999"]),
            )
            .samples(
                Refused,
                &strings(&[
                    "",
                    "01",
                    "-1",
                    "+1",
                    "1.0",
                    "x",
                    "9223372036854775808",
                    "10000000000000000000",
                ]),
            ),
    ]);
    rows
}

fn document() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::from_str(&text).unwrap()
}

/// `v` with a local `$ref` followed, the referring object's own keywords
/// (a description beside the `$ref`) kept over the referred ones.
fn resolve(doc: &Value, v: &Value) -> Value {
    let Some(r) = v.get("$ref").and_then(Value::as_str) else {
        return v.clone();
    };
    let mut target = resolve(doc, doc.pointer(r.strip_prefix('#').unwrap()).unwrap());
    if let (Some(target), Some(own)) = (target.as_object_mut(), v.as_object()) {
        for (k, value) in own {
            if k != "$ref" {
                target.insert(k.clone(), value.clone());
            }
        }
    }
    target
}

/// The schema of `field` in the document.
fn schema_of(doc: &Value, place: Place, name: &str) -> Value {
    let at = resolve(doc, doc.pointer(place.pointer()).unwrap());
    if place.is_body() {
        let property = at["properties"]
            .get(name)
            .unwrap_or_else(|| panic!("{place:?}: the document has no field {name}"));
        resolve(doc, property)
    } else {
        let parameter = at
            .as_array()
            .unwrap()
            .iter()
            .map(|p| resolve(doc, p))
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{place:?}: the document has no parameter {name}"));
        resolve(doc, &parameter["schema"])
    }
}

/// The field names the document gives a place.
fn documented(doc: &Value, place: Place) -> BTreeSet<String> {
    let at = resolve(doc, doc.pointer(place.pointer()).unwrap());
    if place.is_body() {
        at["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    } else {
        let wanted = if place == Place::DestinationPath {
            "path"
        } else {
            "query"
        };
        at.as_array()
            .unwrap()
            .iter()
            .map(|p| resolve(doc, p))
            .filter(|p| p["in"] == wanted)
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// Whether the document's schema admits `value` as far as its string rules
/// go: `pattern`, a `not` pattern, and `format: date-time`'s calendar.
fn pattern_admits(schema: &Value, value: &str) -> bool {
    let matches = |pattern: &Value| {
        pattern
            .as_str()
            .map(|p| Regex::new(p).unwrap().is_match(value))
    };
    matches(&schema["pattern"]).unwrap_or(true)
        && !matches(&schema["not"]["pattern"]).unwrap_or(false)
        && (schema["format"] != "date-time" || real_date(value))
}

/// Whether `YYYY-MM-DD…` names a day of the calendar (`format: date-time`).
fn real_date(value: &str) -> bool {
    let number = |range: std::ops::Range<usize>| value.get(range)?.parse::<u32>().ok();
    let (Some(year), Some(month), Some(day)) = (number(0..4), number(5..7), number(8..10)) else {
        return false;
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        1..=12 => 31,
        _ => return false,
    };
    (1..=days).contains(&day)
}

/// What the server did with one request.
enum Outcome {
    Accepted,
    /// 400 `invalid_request`, with its message.
    Refused(String),
    /// Anything else: its status and body.
    Other(u16, String),
}

/// Sends `fields` at `place`, merged into a valid request, on a fresh
/// server.
async fn send(place: Place, fields: Map<String, Value>) -> Outcome {
    let h = harness(HttpConfig::default()).await;
    let json = ("content-type", "application/json");
    let body_with = |mut base: Map<String, Value>| {
        for (k, v) in &fields {
            if v == ABSENT {
                base.remove(k);
            } else {
                base.insert(k.clone(), v.clone());
            }
        }
        Value::Object(base)
    };
    let post = |path: String, body: Value| {
        let h = &h;
        async move {
            h.call("POST", &path, &[json], body.to_string().as_bytes())
                .await
        }
    };
    let reply = match place {
        Place::Submit => h.submit(&body_with(submit_base())).await,
        Place::BatchTask => {
            let batch = json!({ "tasks": [body_with(submit_base())] });
            let reply = post("/tasks/batch".into(), batch.clone()).await;
            assert_eq!(reply.status, 200, "{batch}: {reply:?}");
            // The task's own answer, as a request's would be.
            let item = reply.json()["results"][0].clone();
            let status = u16::try_from(item["status"].as_u64().unwrap()).unwrap();
            return outcome(status, item.to_string().as_bytes());
        }
        Place::Batch => {
            let mut base = Map::new();
            base.insert("tasks".into(), json!([submit_base()]));
            post("/tasks/batch".into(), body_with(base)).await
        }
        Place::Retry => {
            let id = canceled_task(&h).await;
            post(format!("/tasks/{id}/retry"), body_with(Map::new())).await
        }
        Place::Bulk | Place::BulkFilter => {
            let mut base = Map::new();
            base.insert("action".into(), json!("delete"));
            base.insert("filter".into(), json!({}));
            base.insert("dry_run".into(), json!(true));
            let body = if place == Place::Bulk {
                body_with(base)
            } else {
                base.insert("filter".into(), Value::Object(fields.clone()));
                Value::Object(base)
            };
            post("/tasks/bulk".into(), body).await
        }
        Place::Destination => {
            let body = Value::Object(fields.clone());
            h.call(
                "PUT",
                "/destinations/api.example.com:443",
                &[json],
                body.to_string().as_bytes(),
            )
            .await
        }
        Place::ListQuery | Place::GetQuery => {
            let query: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{}={}", encode(k), encode(&text_of(v))))
                .collect();
            let path = if place == Place::ListQuery {
                "/tasks".to_owned()
            } else {
                format!("/tasks/{}", canceled_task(&h).await)
            };
            h.call("GET", &format!("{path}?{}", query.join("&")), &[], b"")
                .await
        }
        Place::Schedule => post("/schedules".into(), body_with(schedule_base())).await,
        Place::ScheduleTask => {
            let mut task = Map::new();
            task.insert("url".into(), json!("http://127.0.0.1:9/hook"));
            let mut base = schedule_base();
            base.insert("task".into(), body_with(task));
            post("/schedules".into(), Value::Object(base)).await
        }
        Place::DestinationPath => {
            let name = text_of(&fields["destination"]);
            let path = format!("/destinations/{}/pause", encode(&name));
            h.call("POST", &path, &[], b"").await
        }
    };
    outcome(reply.status, &reply.body)
}

fn outcome(status: u16, body: &[u8]) -> Outcome {
    let text = String::from_utf8_lossy(body).into_owned();
    if (200..300).contains(&status) {
        return Outcome::Accepted;
    }
    let parsed: Value = serde_json::from_str(&text).unwrap_or_default();
    match (status, parsed["error"]["code"].as_str()) {
        (400, Some("invalid_request")) => {
            Outcome::Refused(parsed["error"]["message"].as_str().unwrap().to_owned())
        }
        _ => Outcome::Other(status, text),
    }
}

/// A task that can be retried and need not be waited for.
async fn canceled_task(h: &Harness) -> String {
    let reply = h
        .submit(&json!({"url": "http://127.0.0.1:9/hook", "idempotency_key": "to-cancel"}))
        .await;
    let id = reply.json()["id"].as_str().unwrap().to_owned();
    let canceled = h
        .call("POST", &format!("/tasks/{id}/cancel"), &[], b"")
        .await;
    assert_eq!(canceled.json()["state"], "canceled");
    id
}

fn schedule_base() -> Map<String, Value> {
    let mut base = Map::new();
    base.insert("name".into(), json!("nightly"));
    base.insert("cron".into(), json!("@hourly"));
    base.insert("task".into(), json!({"url": "http://127.0.0.1:9/hook"}));
    base
}

fn submit_base() -> Map<String, Value> {
    let mut base = Map::new();
    base.insert("url".into(), json!("http://127.0.0.1:9/hook"));
    base.insert("idempotency_key".into(), json!("key-1"));
    base
}

/// The marker for "leave this field out" in a request's fields.
const ABSENT: &str = "\u{0}absent";

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One request to make and the outcome the document promises.
struct Case {
    place: Place,
    /// The field whose rule is checked.
    name: String,
    fields: Map<String, Value>,
    accepted: bool,
    /// What the message of a refusal starts with.
    prefix: String,
    why: String,
}

fn one(name: &str, value: Value) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert(name.to_owned(), value);
    fields
}

/// The cases the document's keywords imply for one field.
fn cases_from_schema(place: Place, row: &Field, schema: &Value) -> Vec<Case> {
    let mut cases = Vec::new();
    let name = row.name;
    let prefix = place.prefix(name);
    let mut add = |value: Value, accepted: bool, why: String| {
        cases.push(Case {
            place,
            name: name.to_owned(),
            fields: one(name, value),
            accepted,
            prefix: prefix.clone(),
            why,
        });
    };
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    // In a query or a path every value is text: a number is its digits.
    let wire = |v: Value| {
        if place.is_body() {
            v
        } else {
            json!(text_of(&v))
        }
    };
    if types.contains(&"integer") {
        let min = schema["minimum"].as_i64();
        let max = schema["maximum"].as_i64();
        if let Some(min) = min {
            add(wire(json!(min)), true, format!("minimum {min}"));
            add(wire(json!(min - 1)), false, format!("minimum {min}"));
        }
        if let Some(max) = max {
            add(wire(json!(max)), true, format!("maximum {max}"));
            add(wire(json!(max + 1)), false, format!("maximum {max}"));
        }
        let inside = min.or(max).unwrap_or(0);
        add(
            wire(json!(inside as f64 + 0.5)),
            false,
            "integer: a fraction".into(),
        );
    }
    if types.contains(&"number") {
        if let Some(min) = schema["exclusiveMinimum"].as_f64() {
            add(json!(min), false, format!("exclusiveMinimum {min}"));
            add(
                json!(min.next_up()),
                true,
                format!("exclusiveMinimum {min}"),
            );
        }
        if let Some(max) = schema["maximum"].as_f64() {
            add(json!(max), true, format!("maximum {max}"));
            // Past the largest double is a number JSON can still write.
            let over: Value = if max == f64::MAX {
                serde_json::from_str("1e309").unwrap()
            } else {
                json!(max.next_up())
            };
            add(over, false, format!("maximum {max}"));
        }
    }
    if let Some(values) = schema["enum"].as_array() {
        for v in values {
            add(wire(v.clone()), true, format!("enum member {v}"));
        }
        add(wire(json!("not-a-member")), false, "enum".into());
    }
    if place.is_body() && !types.is_empty() {
        let wrong = if !types.contains(&"string") {
            json!("1")
        } else if !types.contains(&"boolean") {
            json!(true)
        } else {
            json!(1)
        };
        add(wrong, false, format!("type {types:?}"));
        add(
            json!(null),
            types.contains(&"null"),
            format!("type {types:?} and null"),
        );
    }
    if let Some(fill) = row.fill {
        let min = schema["minLength"].as_u64().map(|n| n as usize);
        let max = schema["maxLength"].as_u64().map(|n| n as usize);
        assert!(
            min.is_some() || max.is_some(),
            "{place:?} {name}: fill without a length bound"
        );
        if let Some(min) = min {
            add(wire(json!(fill(min))), true, format!("minLength {min}"));
            if min > 0 {
                let under = if min == 1 {
                    String::new()
                } else {
                    fill(min - 1)
                };
                add(wire(json!(under)), false, format!("minLength {min}"));
            }
        }
        if let Some(max) = max {
            add(wire(json!(fill(max))), true, format!("maxLength {max}"));
            add(
                wire(json!(fill(max + 1))),
                false,
                format!("maxLength {max}"),
            );
        }
    }
    if let Some(item) = row.item {
        let min = schema["minItems"].as_u64().unwrap() as usize;
        let max = schema["maxItems"].as_u64().unwrap() as usize;
        let items = |n: usize| Value::Array((0..n).map(item).collect());
        add(items(min), true, format!("minItems {min}"));
        add(items(max), true, format!("maxItems {max}"));
        if min > 0 {
            add(items(min - 1), false, format!("minItems {min}"));
        }
        add(items(max + 1), false, format!("maxItems {max}"));
    }
    cases
}

/// The cases of a body's object rules: each required field left out, an
/// unknown field, and the fields that exclude each other.
fn cases_from_object(doc: &Value, place: Place) -> Vec<Case> {
    let object = resolve(doc, doc.pointer(place.pointer()).unwrap());
    let mut cases = Vec::new();
    for required in object["required"].as_array().into_iter().flatten() {
        let name = required.as_str().unwrap();
        cases.push(Case {
            place,
            name: name.to_owned(),
            fields: one(name, json!(ABSENT)),
            accepted: false,
            prefix: place.prefix(name),
            why: "required".into(),
        });
    }
    assert_eq!(
        object["additionalProperties"],
        json!(false),
        "{place:?}: a request body is closed"
    );
    cases.push(Case {
        place,
        name: "colour".into(),
        fields: one("colour", json!("blue")),
        accepted: false,
        prefix: String::new(),
        why: "additionalProperties: false".into(),
    });
    if let Some(both) = object["not"]["required"].as_array() {
        let names: Vec<&str> = both.iter().map(|n| n.as_str().unwrap()).collect();
        let mut fields = Map::new();
        fields.insert(names[0].into(), json!("2026-01-02T03:04:05Z"));
        fields.insert(names[1].into(), json!(5));
        cases.push(Case {
            place,
            name: names[0].to_owned(),
            fields,
            accepted: false,
            prefix: place.prefix(names[0]),
            why: format!("not both of {names:?}"),
        });
    }
    cases
}

async fn check(case: &Case) -> Result<(), String> {
    let outcome = send(case.place, case.fields.clone()).await;
    let what = format!(
        "{:?} {} = {} ({})",
        case.place,
        case.name,
        Value::Object(case.fields.clone()),
        case.why
    );
    match (outcome, case.accepted) {
        (Outcome::Accepted, true) => Ok(()),
        (Outcome::Refused(message), false) => {
            let names_it = if case.prefix.is_empty() {
                message.contains(&case.name)
            } else {
                message.starts_with(&case.prefix)
            };
            if names_it {
                Ok(())
            } else {
                Err(format!(
                    "{what}: refused, but the message does not name it: {message:?}"
                ))
            }
        }
        (outcome, accepted) => {
            let answer = match outcome {
                Outcome::Accepted => "2xx".to_owned(),
                Outcome::Refused(message) => format!("400 {message:?}"),
                Outcome::Other(status, body) => format!("{status} {body}"),
            };
            Err(format!(
                "{what}: the document says {}, the server answered {answer}",
                if accepted { "accepted" } else { "refused" }
            ))
        }
    }
}

#[tokio::test]
async fn the_server_accepts_what_the_document_admits_and_refuses_the_rest() {
    let doc = document();
    let rows = fields();
    let mut failures = Vec::new();

    // Every documented field has a row, and every row a documented field.
    let places: BTreeSet<Place> = rows.iter().map(|r| r.place).collect();
    for &place in &places {
        let in_rows: BTreeSet<String> = rows
            .iter()
            .filter(|r| r.place == place)
            .map(|r| r.name.to_owned())
            .collect();
        assert_eq!(
            in_rows,
            documented(&doc, place),
            "{place:?}: rows vs document"
        );
    }

    let mut cases = Vec::new();
    for &place in places.iter().filter(|p| p.is_body()) {
        cases.extend(cases_from_object(&doc, place));
    }
    for row in &rows {
        let schema = schema_of(&doc, row.place, row.name);
        let description = schema["description"].as_str().unwrap_or_default();
        cases.extend(cases_from_schema(row.place, row, &schema));
        if let Some(fill) = row.fill {
            // The values at the length bounds are what the pattern admits.
            for bound in ["minLength", "maxLength"] {
                let Some(n) = schema[bound].as_u64() else {
                    continue;
                };
                let value = fill(n as usize);
                if value.chars().count() != n as usize || !pattern_admits(&schema, &value) {
                    failures.push(format!(
                        "{:?} {}: fill({n}) = {value:?} is not {n} characters the pattern admits",
                        row.place, row.name
                    ));
                }
            }
        }
        for (value, expect) in &row.samples {
            let admitted = value.as_str().is_none_or(|s| pattern_admits(&schema, s));
            let (doc_says, server_must) = match expect {
                Accepted => (true, true),
                Refused => (false, false),
                RefusedAsDescribed(words) | ToleratedAsDescribed(words) => {
                    if !description.contains(words) {
                        failures.push(format!(
                            "{:?} {}: the description does not say {words:?}",
                            row.place, row.name
                        ));
                    }
                    let refused = matches!(expect, RefusedAsDescribed(_));
                    (refused, !refused)
                }
            };
            if admitted != doc_says {
                failures.push(format!(
                    "{:?} {} = {value}: the document's pattern {} it, the table says {expect:?}",
                    row.place,
                    row.name,
                    if admitted { "admits" } else { "refuses" }
                ));
            }
            let value = if row.place.is_body() {
                value.clone()
            } else {
                json!(text_of(value))
            };
            cases.push(Case {
                place: row.place,
                name: row.name.to_owned(),
                fields: one(row.name, value),
                accepted: server_must,
                prefix: row.place.prefix(row.name),
                why: format!("sample, {expect:?}"),
            });
        }
    }
    assert!(cases.len() > 300, "{} cases", cases.len());
    for case in &cases {
        if let Err(e) = check(case).await {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The document's destination pattern and the domain's parser agree on
/// every IPv6 text form, not only the samples: hosts built from groups,
/// `::` and embedded IPv4 addresses, well formed or not.
#[test]
fn the_destination_pattern_is_the_ipv6_parser() {
    use proptest::prelude::*;
    let doc = document();
    let pattern = Regex::new(
        doc["components"]["schemas"]["Destination"]["pattern"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let token = prop_oneof![
        Just("0"),
        Just("1"),
        Just("ab"),
        Just("FFFF"),
        Just("12345"),
        Just(":"),
        Just("::"),
        Just("1.2.3.4"),
        Just("255.255.255.255"),
        Just("256.1.1.1"),
        Just("1.2.3.04"),
        Just("."),
        Just("g"),
        Just("0000"),
    ];
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 4_000,
        ..proptest::test_runner::Config::default()
    });
    runner
        .run(&proptest::collection::vec(token, 1..12), |tokens| {
            let text = format!("[{}]:1", tokens.concat());
            prop_assert_eq!(
                pattern.is_match(&text),
                parse_destination(&text).is_ok(),
                "{}",
                text
            );
            Ok(())
        })
        .unwrap();
}

/// Every route that reads a body documents what reading one can answer:
/// over the limit (413) also means it may time out (408); a route that
/// checks the content type documents 415. Found by asking each route.
#[tokio::test]
async fn routes_that_read_a_body_document_its_errors() {
    let doc = document();
    let config = HttpConfig {
        max_body_bytes: 64,
        max_batch_body_bytes: 64,
        ..HttpConfig::default()
    };
    let mut failures = Vec::new();
    for route in tc_http::ROUTES {
        let h = harness(config.clone()).await;
        let id = canceled_task(&h).await;
        let path = route
            .path
            .replace("{id}", &id)
            .replace("{destination}", "api.example.com:443")
            .replace("{name}", "nightly");
        let operation = &doc["paths"][route.path][route.method.to_lowercase()];
        let documents = |status: &str| operation["responses"].get(status).is_some();
        let big = vec![b' '; 65];
        let over = h
            .call(
                route.method,
                &path,
                &[("content-type", "application/json")],
                &big,
            )
            .await;
        if over.status == 413 && !(documents("413") && documents("408")) {
            failures.push(format!(
                "{} {}: reads a body, documents no 413 and 408",
                route.method, route.path
            ));
        }
        if over.status != 413 && documents("413") {
            failures.push(format!(
                "{} {}: documents 413, answered {}",
                route.method, route.path, over.status
            ));
        }
        let text = h
            .call(
                route.method,
                &path,
                &[("content-type", "text/plain")],
                b"{}",
            )
            .await;
        if (text.status == 415) != documents("415") {
            failures.push(format!(
                "{} {}: a text/plain body is {}, 415 documented: {}",
                route.method,
                route.path,
                text.status,
                documents("415")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
