//! docs/openapi.yaml against the code: every route the router serves is
//! documented and nothing else is, the document is structurally sound, and its
//! schemas, error codes and statuses are the ones the code produces.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;
use tc_model::store::{Cursor, Page};
use tc_model::{AttemptRecord, State, Task, TaskId, Timestamp};

use crate::config::HttpConfig;
use crate::dto::{CancelView, TaskView, parse_submit};
use crate::error::ApiError;
use crate::router::ROUTES;
use crate::tasks::encode_page;

const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn document() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::from_str(&text).unwrap()
}

/// Every operation as (METHOD, path) → operation object.
fn operations(doc: &Value) -> BTreeMap<(String, String), &Value> {
    let mut ops = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (key, op) in item.as_object().unwrap() {
            if METHODS.contains(&key.as_str()) {
                ops.insert((key.to_uppercase(), path.clone()), op);
            }
        }
    }
    ops
}

/// Follows a local `$ref` (`#/components/...`).
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v["$ref"].as_str() {
        Some(r) => {
            let pointer = r.strip_prefix('#').unwrap();
            doc.pointer(pointer)
                .unwrap_or_else(|| panic!("dangling $ref {r}"))
        }
        None => v,
    }
}

fn all_refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                if k == "$ref" {
                    out.push(child.as_str().unwrap());
                } else {
                    all_refs(child, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| all_refs(i, out)),
        _ => {}
    }
}

#[test]
fn the_document_is_structurally_sound() {
    let doc = document();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));
    assert!(doc["info"]["title"].is_string());
    assert!(doc["info"]["version"].is_string());
    for section in ["schemas", "responses", "parameters", "securitySchemes"] {
        assert!(
            doc["components"][section].is_object(),
            "components.{section}"
        );
    }
    let mut refs = Vec::new();
    all_refs(&doc, &mut refs);
    assert!(refs.len() > 20, "the document uses components");
    for r in refs {
        assert!(r.starts_with("#/components/"), "{r}");
        resolve(&doc, &serde_json::json!({ "$ref": r }));
    }
    for ((method, path), op) in operations(&doc) {
        let what = format!("{method} {path}");
        assert!(op["operationId"].is_string(), "{what}: operationId");
        let responses = op["responses"].as_object().unwrap();
        assert!(
            responses.keys().any(|s| s.starts_with('2')),
            "{what}: a success response"
        );
        for (status, response) in responses {
            assert!(
                status.len() == 3 && status.parse::<u16>().is_ok_and(|s| (100..600).contains(&s)),
                "{what}: status {status}"
            );
            assert!(
                resolve(&doc, response)["description"].is_string(),
                "{what} {status}: description"
            );
        }
        // Every `{param}` in the path is declared as a path parameter.
        let declared: BTreeSet<&str> = op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| resolve(&doc, p))
            .filter(|p| p["in"] == "path")
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        let in_template: BTreeSet<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        assert_eq!(declared, in_template, "{what}: path parameters");
    }
}

#[test]
fn every_route_is_documented_and_nothing_else() {
    let doc = document();
    let documented: BTreeSet<(String, String)> = operations(&doc).into_keys().collect();
    let served: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|r| (r.method.to_owned(), r.path.to_owned()))
        .collect();
    assert_eq!(documented, served);
}

#[test]
fn documented_security_matches_the_token_check() {
    let doc = document();
    let ops = operations(&doc);
    for route in ROUTES {
        let op = ops[&(route.method.to_owned(), route.path.to_owned())];
        let expected = if route.needs_token {
            serde_json::json!([{ "bearer": [] }])
        } else {
            serde_json::json!([])
        };
        assert_eq!(op["security"], expected, "{} {}", route.method, route.path);
        let documents_401 = op["responses"].get("401").is_some();
        assert_eq!(
            documents_401, route.needs_token,
            "{} {}",
            route.method, route.path
        );
    }
}

#[test]
fn error_codes_and_their_statuses_match_the_code() {
    let doc = document();
    let documented: Vec<&str> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let codes: Vec<&str> = ApiError::one_of_each().iter().map(ApiError::code).collect();
    assert_eq!(documented, codes);

    // Each code has one response component whose example carries it; the
    // status an operation files it under is the status the code answers.
    let status_of: BTreeMap<&str, u16> = ApiError::one_of_each()
        .iter()
        .map(|e| (e.code(), e.status().as_u16()))
        .collect();
    let mut component_code = BTreeMap::new();
    for (name, response) in doc["components"]["responses"].as_object().unwrap() {
        let content = &response["content"]["application/json"];
        assert_eq!(
            content["schema"]["$ref"], "#/components/schemas/Error",
            "{name}"
        );
        let code = content["example"]["error"]["code"].as_str().unwrap();
        assert!(codes.contains(&code), "{name}: {code}");
        component_code.insert(format!("#/components/responses/{name}"), code);
    }
    let covered: BTreeSet<&str> = component_code.values().copied().collect();
    assert_eq!(covered, codes.iter().copied().collect());

    for ((method, path), op) in operations(&doc) {
        for (status, response) in op["responses"].as_object().unwrap() {
            if let Some(r) = response["$ref"].as_str() {
                let code = component_code[r];
                assert_eq!(
                    status.parse::<u16>().unwrap(),
                    status_of[code],
                    "{method} {path}: {code} filed under {status}"
                );
            } else if (path.as_str(), status.as_str()) == ("/healthz", "503") {
                // A probe's answer, not an error body: its own shape.
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/HealthUnavailable"
                );
                assert_eq!(
                    schema_fields(&doc, "HealthUnavailable"),
                    BTreeSet::from(["status".to_owned(), "reason".to_owned()])
                );
            } else {
                assert!(
                    status.starts_with('2'),
                    "{method} {path} {status}: errors use a shared response"
                );
            }
        }
    }
}

/// The refusals that come before any route (`Host`, `Origin`) are on every
/// operation they can answer, and the waiter limit on the waiting read.
#[test]
fn refusals_before_routing_are_documented_where_they_apply() {
    let doc = document();
    let ops = operations(&doc);
    let reference =
        |op: &Value, status: &str| op["responses"][status]["$ref"].as_str().map(str::to_owned);
    for route in ROUTES {
        let what = format!("{} {}", route.method, route.path);
        let op = ops[&(route.method.to_owned(), route.path.to_owned())];
        assert_eq!(
            reference(op, "421").as_deref(),
            Some("#/components/responses/MisdirectedRequest"),
            "{what}"
        );
        let forbidden = reference(op, "403");
        if route.method == "GET" {
            // A read is never cross_origin; a tenant's key is refused the
            // admin's reads.
            let expected = route
                .admin_only()
                .then_some("#/components/responses/AdminOnly");
            assert_eq!(forbidden.as_deref(), expected, "{what}");
        } else if route.admin_only() {
            assert!(
                matches!(
                    forbidden.as_deref(),
                    Some(
                        "#/components/responses/Forbidden"
                            | "#/components/responses/BackupForbidden"
                            | "#/components/responses/TenantsForbidden"
                    )
                ),
                "{what}: {forbidden:?} must name `forbidden`"
            );
        } else {
            assert!(
                matches!(
                    forbidden.as_deref(),
                    Some(
                        "#/components/responses/CrossOrigin"
                            | "#/components/responses/Forbidden"
                            | "#/components/responses/BackupForbidden"
                    )
                ),
                "{what}: {forbidden:?}"
            );
        }
        let too_many = match (route.method, route.path) {
            ("GET", "/tasks/{id}") => Some("#/components/responses/TooManyWaiters"),
            // A batch answers a quota per item, inside its 200.
            ("POST", "/tasks") => Some("#/components/responses/QuotaExceeded"),
            // A retry is a submit for the tenant's quotas; a bulk retry
            // counts the refused in its 200.
            ("POST", "/tasks/{id}/retry") => Some("#/components/responses/QuotaExceeded"),
            // An event's tasks and a replay's count against the quotas.
            ("POST", "/topics/{name}/events" | "/topics/{name}/subscriptions/{id}/replay") => {
                Some("#/components/responses/QuotaExceeded")
            }
            _ => None,
        };
        assert_eq!(reference(op, "429").as_deref(), too_many, "{what}");
    }
    // The shared 403 names both codes.
    let forbidden = doc["components"]["responses"]["Forbidden"]["description"]
        .as_str()
        .unwrap();
    assert!(forbidden.contains("`url_not_allowed`") && forbidden.contains("`cross_origin`"));
    assert!(forbidden.contains("`forbidden`"));
    for name in ["BackupForbidden", "TenantsForbidden"] {
        let described = doc["components"]["responses"][name]["description"]
            .as_str()
            .unwrap();
        assert!(described.contains("`forbidden`"), "{name}");
        assert!(described.contains("`cross_origin`"), "{name}");
    }
}

/// The property names of a component schema, and whether all are required.
fn schema_fields(doc: &Value, name: &str) -> BTreeSet<String> {
    let schema = &doc["components"]["schemas"][name];
    assert_eq!(
        schema["additionalProperties"],
        Value::Bool(false),
        "{name} is closed"
    );
    schema["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("{name} has properties"))
        .keys()
        .cloned()
        .collect()
}

fn required(doc: &Value, name: &str) -> BTreeSet<String> {
    doc["components"]["schemas"][name]["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect()
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

fn sample_task() -> Task {
    let t = Timestamp::from_millis(1_767_323_045_678);
    Task {
        topic: None,
        id: TaskId::new(Timestamp::from_millis(0), [0xee; 10]),
        state: State::Success,
        url: "http://127.0.0.1:9/hook".into(),
        method: tc_model::Method::Put,
        headers: tc_model::Headers::parse([("x-tenant".to_owned(), "acme".to_owned())]).unwrap(),
        destination: "127.0.0.1:9".into(),
        body: b"{}".to_vec(),
        idempotency_key: "k".into(),
        attempt: 1,
        attempts_before_retry: 0,
        max_attempts: 3,
        timeout: Duration::from_secs(5),
        first_run: tc_model::FirstRun::Now,
        http_status: Some(200),
        result: Some(b"ok".to_vec()),
        result_content_type: None,
        error: None,
        created_at: t,
        updated_at: t,
        started_at: Some(t),
        finished_at: Some(t),
        next_run_at: None,
        lease_until: None,
        attempts: vec![AttemptRecord {
            n: 1,
            started_at: t,
            finished_at: Some(t),
            http_status: Some(200),
            error: None,
            duration_ms: Some(0),
        }],
        trace: tc_model::TraceContext::from_headers(
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            None,
        ),
        callback: Some(
            tc_model::callback::Callback::new(
                "http://127.0.0.1:9/done".into(),
                tc_model::callback::CallbackOn::default(),
            )
            .unwrap(),
        ),
        callback_of: None,
        callback_task_id: Some(TaskId::new(Timestamp::from_millis(1), [0xdd; 10])),
        ends: 1,
        tenant: Some("acme".into()),
        priority: 7,
        flow_key: Some("acct 1".into()),
    }
}

#[test]
fn response_schemas_have_the_fields_the_views_serialize() {
    let doc = document();
    let task = sample_task();
    let view = serde_json::to_value(TaskView::new(&task)).unwrap();
    assert_eq!(schema_fields(&doc, "Task"), keys(&view));
    assert_eq!(required(&doc, "Task"), keys(&view));
    assert_eq!(schema_fields(&doc, "Attempt"), keys(&view["attempts"][0]));
    assert_eq!(required(&doc, "Attempt"), keys(&view["attempts"][0]));

    let page = Page {
        tasks: vec![task.clone()],
        next: Some(Cursor::from_position(1)),
    };
    let list: Value = serde_json::from_slice(&encode_page(page).unwrap()).unwrap();
    assert_eq!(schema_fields(&doc, "TaskPage"), keys(&list));
    let cancel = serde_json::to_value(CancelView::new(task.id, task.state)).unwrap();
    assert_eq!(schema_fields(&doc, "CancelResult"), keys(&cancel));
    assert_eq!(schema_fields(&doc, "Health"), ["status".to_owned()].into());

    let states: Vec<&str> = doc["components"]["schemas"]["State"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let expected: Vec<&str> = State::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(states, expected);
}

#[test]
fn the_submit_schema_has_the_fields_the_parser_accepts() {
    let doc = document();
    // serde names every accepted field when it refuses an unknown one.
    let Err(ApiError::InvalidRequest(message)) = parse_submit(
        br#"{"__probe__":1}"#,
        &HttpConfig::default(),
        tc_model::Timestamp::from_millis(0),
    ) else {
        panic!("an unknown field is refused");
    };
    let accepted: BTreeSet<String> = message
        .split_once("(expected ")
        .unwrap()
        .1
        .trim_end_matches(')')
        .split(", ")
        .map(str::to_owned)
        .collect();
    assert_eq!(accepted.len(), 13, "{message}");
    assert_eq!(schema_fields(&doc, "SubmitRequest"), accepted);
    assert_eq!(
        required(&doc, "SubmitRequest"),
        ["idempotency_key".to_owned(), "url".to_owned()].into()
    );
}

/// A schedule's view has exactly the Schedule schema's fields (all
/// required), its task the ScheduleTaskView's; a schedule's task takes
/// the submit's fields but the key.
#[test]
fn the_schedule_schemas_have_the_fields_the_code_reads_and_shows() {
    let doc = document();
    let now = Timestamp::from_millis(1_767_323_045_678);
    let body = br#"{"name":"n","cron":"@daily","timezone":"Europe/Berlin","paused":true,
        "overlap":"skip","catch_up":"latest","task":{"url":"http://h/x","json":{"a":1},
        "method":"PUT","headers":{"x-a":"b"},"max_attempts":2,"timeout_ms":5,"delay_ms":7,
        "callback_url":"http://h/cb","callback_on":["failed"],"priority":3,"flow_key":"k"}}"#;
    let spec = crate::schedules::parse_spec(body, &HttpConfig::default(), now, None).unwrap();
    let mut schedule = tc_model::schedule::Schedule::new(spec, now);
    schedule.last_run_at = Some(now);
    schedule.last_task_id = Some(TaskId::new(now, [1; 10]));
    let json_body = serde_json::value::RawValue::from_string(r#"{"a":1}"#.into()).ok();
    let view = serde_json::to_value(crate::schedules::ScheduleView::new(
        &schedule, &json_body, now,
    ))
    .unwrap();
    assert_eq!(schema_fields(&doc, "Schedule"), keys(&view));
    assert_eq!(required(&doc, "Schedule"), keys(&view));
    let task_fields = schema_fields(&doc, "ScheduleTaskView");
    let shown = keys(&view["task"]);
    // `delay_ms` or `run_at`, never both.
    let mut expected = shown.clone();
    expected.insert("run_at".to_owned());
    assert_eq!(task_fields, expected);
    assert!(required(&doc, "ScheduleTaskView").is_subset(&shown));

    let mut submit = schema_fields(&doc, "SubmitRequest");
    submit.remove("idempotency_key");
    assert_eq!(schema_fields(&doc, "ScheduleTask"), submit);
    let request = schema_fields(&doc, "ScheduleRequest");
    assert_eq!(schema_fields(&doc, "ScheduleReplacement"), request);
    assert_eq!(
        request,
        [
            "name", "cron", "timezone", "task", "paused", "overlap", "catch_up"
        ]
        .map(str::to_owned)
        .into()
    );
}

/// The operations a link from `from` (its 2xx answers) leads to, by
/// operationId, and the parameters each link fills.
fn links_from(doc: &Value, from: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (status, response) in from["responses"].as_object().unwrap() {
        if !status.starts_with('2') {
            continue;
        }
        for link in resolve(doc, response)["links"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(_, l)| resolve(doc, l))
        {
            let target = link["operationId"].as_str().unwrap().to_owned();
            let filled = link["parameters"].as_object().unwrap().keys().cloned();
            out.entry(target).or_default().extend(filled);
        }
    }
    out
}

#[test]
fn links_carry_real_ids_to_every_operation_that_takes_one() {
    let doc = document();
    let ops = operations(&doc);
    let by_id: BTreeMap<&str, &Value> = ops
        .values()
        .map(|op| (op["operationId"].as_str().unwrap(), *op))
        .collect();
    // The operations with a path parameter, by the parameter they take.
    let takes = |param: &str| -> BTreeSet<String> {
        ops.iter()
            .filter(|((_, path), _)| path.contains(&format!("{{{param}}}")))
            .map(|(_, op)| op["operationId"].as_str().unwrap().to_owned())
            .collect()
    };
    // `{id}` is a task's id under /tasks (a key's under /tenants, a
    // subscription's or an event's under /topics).
    let task_ops: BTreeSet<String> = ops
        .iter()
        .filter(|((_, path), _)| path.starts_with("/tasks/{id}"))
        .map(|(_, op)| op["operationId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(task_ops.len(), 5, "{task_ops:?}");
    for producer in ["submitTask", "submitBatch"] {
        let links = links_from(&doc, by_id[producer]);
        for target in &task_ops {
            assert!(
                links.get(target).is_some_and(|p| p.contains("id")),
                "{producer} has no link filling {target}'s id: {links:?}"
            );
        }
    }
    let destination_ops = takes("destination");
    assert_eq!(destination_ops.len(), 4, "{destination_ops:?}");
    let links = links_from(&doc, by_id["listDestinations"]);
    for target in &destination_ops {
        assert!(
            links.get(target).is_some_and(|p| p.contains("destination")),
            "listDestinations has no link filling {target}'s destination: {links:?}"
        );
    }
    // Every link names an operation that exists and only its parameters.
    for (key, op) in &ops {
        for (target, filled) in links_from(&doc, op) {
            let target_op = by_id
                .get(target.as_str())
                .unwrap_or_else(|| panic!("{key:?} links to unknown {target}"));
            let declared: BTreeSet<String> = target_op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| resolve(&doc, p)["name"].as_str().unwrap().to_owned())
                .collect();
            assert!(
                filled.is_subset(&declared),
                "{key:?} -> {target}: {filled:?} vs {declared:?}"
            );
        }
    }
}

#[test]
fn the_destination_schemas_have_the_fields_the_code_reads_and_shows() {
    use tc_model::destination::{Destination, DestinationSettings};

    let doc = document();
    let settings = DestinationSettings {
        headers: tc_model::Headers::parse([("authorization".to_owned(), "Bearer t".to_owned())])
            .unwrap(),
        signing_secrets: tc_model::signing::SigningSecrets::parse(&[
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
        ])
        .unwrap(),
        ..DestinationSettings::default()
    };
    let view = crate::destinations::DestinationView::new(
        Destination {
            name: "api.example.com:443".into(),
            settings,
            pending: 0,
            running: 0,
        },
        crate::worker_port::DestinationRuntime::default(),
    );
    let view = serde_json::to_value(view).unwrap();
    let info = &doc["components"]["schemas"]["DestinationInfo"];
    assert_eq!(keys(&info["properties"]), keys(&view));
    assert_eq!(required(&doc, "DestinationInfo"), keys(&view));
    assert_eq!(view["header_names"], serde_json::json!(["authorization"]));
    assert_eq!(view["signing_secrets"], 1);

    // Every settings field the parser takes is documented, and no other:
    // the parser names them all when it refuses an unknown one.
    let Err(ApiError::InvalidRequest(message)) =
        crate::destinations::parse_update(br#"{"__probe__":1}"#, None)
    else {
        panic!("an unknown field is refused");
    };
    let accepted: BTreeSet<String> = message
        .split_once("(expected ")
        .unwrap()
        .1
        .trim_end_matches(')')
        .split(", ")
        .map(str::to_owned)
        .collect();
    assert_eq!(
        schema_fields(&doc, "DestinationSettings"),
        accepted,
        "{message}"
    );
}

/// A tenant's view has exactly the Tenant schema's fields (all required),
/// its keys the TenantKey's; the bodies take the settings the parser reads.
#[test]
fn the_tenant_schemas_have_the_fields_the_code_reads_and_shows() {
    let doc = document();
    let now = Timestamp::from_millis(1_767_323_045_678);
    let detail = tc_model::tenant::TenantDetail {
        tenant: tc_model::tenant::Tenant {
            name: "acme".into(),
            settings: tc_model::tenant::TenantSettings::default(),
            created_at: now,
            updated_at: now,
        },
        pending: 1,
        running: 2,
        keys: vec![tc_model::tenant::key::ApiKey {
            id: "key_0011223344556677".into(),
            created_at: now,
            last_used_at: None,
        }],
    };
    let view = serde_json::to_value(crate::tenants::TenantView::new(&detail)).unwrap();
    assert_eq!(schema_fields(&doc, "Tenant"), keys(&view));
    assert_eq!(required(&doc, "Tenant"), keys(&view));
    assert_eq!(schema_fields(&doc, "TenantKey"), keys(&view["keys"][0]));
    assert_eq!(required(&doc, "TenantKey"), keys(&view["keys"][0]));
    let settings: BTreeSet<String> = crate::tenants::SETTINGS
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let mut named = settings.clone();
    named.insert("name".to_owned());
    assert_eq!(schema_fields(&doc, "TenantRequest"), named);
    // A tenant is named by its path: an update is its settings alone.
    assert_eq!(schema_fields(&doc, "TenantUpdate"), settings);
    assert_eq!(
        schema_fields(&doc, "NewTenantKey"),
        ["id", "key", "created_at"].map(str::to_owned).into()
    );
}

/// The document's pattern for a signing secret admits exactly what the
/// server takes (`SigningSecrets::parse`): schemathesis, generating from a
/// looser pattern, met mostly refusals on `PUT /tenants/{name}`.
#[test]
fn the_signing_secret_pattern_is_the_server_s_rule() {
    let doc = document();
    let pattern = doc["components"]["schemas"]["SigningSecret"]["pattern"]
        .as_str()
        .unwrap();
    let re = regex::Regex::new(pattern).unwrap();
    let check = |secret: String, taken: bool| {
        assert_eq!(re.is_match(&secret), taken, "the pattern on {secret}");
        assert_eq!(
            tc_model::signing::SigningSecrets::parse(&[&secret]).is_ok(),
            taken,
            "the server on {secret}"
        );
    };
    let a = |n: usize| "A".repeat(n);
    check("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".to_owned(), true);
    check(format!("whsec_{}", a(32)), true); // 24 bytes
    check(format!("whsec_{}Ag==", a(32)), true); // 25
    check(format!("whsec_{}AAE=", a(32)), true); // 26
    check(format!("whsec_{}", a(84)), true); // 63
    check(format!("whsec_{}AQ==", a(84)), true); // 64
    check(format!("whsec_{}", a(28)), false); // 21
    check(format!("whsec_{}AAE=", a(28)), false); // 23
    check(format!("whsec_{}AAE=", a(84)), false); // 65
    check(format!("whsec_{}", a(88)), false); // 66
    check(format!("whsec_{}0==", "0".repeat(85)), false); // bits left over
    check(format!("whsec_{}AAB=", a(32)), false); // bits left over
    check(format!("whsec_{}A", a(32)), false); // not a whole group
    check(a(38), false);
}
