//! Traces through the real binary: the W3C trace context of a
//! submit reaches the downstream on every try, with spans exported or not;
//! with `--otlp-endpoint` a loopback collector (support/collector.rs,
//! decoding OTLP protobuf with the OpenTelemetry proto types) receives the
//! server span of each API request and one client span per try, with their
//! parents and attributes; a collector that never answers slows nothing and
//! costs bounded memory.

use http::Method;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::support::collector::{Collector, Exported};
use crate::support::{self, Api};

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";
const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const STATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

/// `POST /tasks` with these headers besides the content type.
async fn submit(api: &Api, task: &Value, headers: &[(&str, &str)]) -> Value {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    let reply = api
        .send(Method::POST, "/tasks", &all, task.to_string())
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    reply.json()
}

/// `00-<trace>-<span>-<flags>` split in its fields.
fn fields(traceparent: &str) -> Vec<&str> {
    traceparent.split('-').collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_downstream_sees_the_submit_s_trace_on_every_try_without_export() {
    let mut s = support::start().await;
    let task =
        json!({"url": s.down.url("/flaky/2"), "idempotency_key": "traced", "max_attempts": 3});
    let view = submit(
        &s.api,
        &task,
        &[("traceparent", PARENT), ("tracestate", STATE)],
    )
    .await;
    assert_eq!(view["trace_id"], TRACE_ID);
    let id = view["id"].as_str().unwrap().to_owned();
    assert_eq!(s.api.wait_terminal(&id).await["state"], "success");

    let tries: Vec<_> = s
        .down
        .requests()
        .into_iter()
        .filter(|r| r.key() == "traced")
        .collect();
    assert_eq!(tries.len(), 3, "two 503s, then 200");
    for call in &tries {
        // Spans are not exported: the parent is the caller's own span.
        assert_eq!(call.header("traceparent"), Some(PARENT));
        assert_eq!(call.header("tracestate"), Some(STATE));
    }

    // Without a traceparent, or with an invalid one: a new trace, the same
    // on every try, and never an error.
    for (key, headers) in [
        ("fresh", vec![]),
        (
            "invalid",
            vec![("traceparent", "00-nonsense-01"), ("tracestate", "x=1")],
        ),
    ] {
        let task =
            json!({"url": s.down.url("/flaky/1"), "idempotency_key": key, "max_attempts": 2});
        let view = submit(&s.api, &task, &headers).await;
        let trace_id = view["trace_id"].as_str().unwrap().to_owned();
        assert_ne!(trace_id, TRACE_ID);
        s.api.wait_terminal(view["id"].as_str().unwrap()).await;
        let parents: Vec<String> = s
            .down
            .requests()
            .iter()
            .filter(|r| r.key() == key)
            .map(|r| r.header("traceparent").unwrap().to_owned())
            .collect();
        assert_eq!(parents.len(), 2);
        assert!(
            parents.iter().all(|p| fields(p)[1] == trace_id),
            "{parents:?}"
        );
        assert_eq!(parents[0], parents[1]);
        assert!(
            s.down
                .requests()
                .iter()
                .filter(|r| r.key() == key)
                .all(|r| r.header("tracestate").is_none())
        );
    }

    // The task's log lines carry its trace id.
    let done = s
        .server
        .logged_where(
            |l| l["message"] == "task_done" && l["task_id"] == id.as_str(),
            "the traced task's task_done",
        )
        .await;
    assert_eq!(done["trace_id"], TRACE_ID);
    assert!(
        done.get("span_id").is_none(),
        "no span without export: {done}"
    );
}

/// The spans of one trace id, by kind (2: server, 3: client).
fn of_kind<'a>(spans: &'a [Exported], trace_id: &str, kind: i32) -> Vec<&'a Exported> {
    spans
        .iter()
        .filter(|s| s.trace_id() == trace_id && s.span.kind == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_with_their_parents_and_attributes() {
    let mut collector = Collector::start().await;
    let endpoint = collector.endpoint().to_owned();
    let mut s = support::start_with(|c, _| {
        // The endpoint from OpenTelemetry's own variable, the name by flag.
        c.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .flag("--otlp-service-name", "tc-under-test")
            .env(
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=blackbox",
            );
    })
    .await;
    let destination = s.down.destination();
    let port = destination.rsplit_once(':').unwrap().1.to_owned();
    // The start line says where spans go: the base endpoint's /v1/traces.
    let listening = s.server.logged("listening").await;
    assert_eq!(
        listening["spans"].as_str(),
        Some(format!("{endpoint}/v1/traces").as_str()),
        "{listening}"
    );
    // Scrapes and probes make no span (checked once the others arrived).
    assert_eq!(s.api.get("/healthz").await.status, 200);
    assert_eq!(s.api.get("/metrics").await.status, 200);

    // Success after a 503, submitted in the caller's trace.
    let flaky = json!({"url": s.down.url("/flaky/1?secret=q"), "idempotency_key": "flaky", "max_attempts": 3});
    let view = submit(
        &s.api,
        &flaky,
        &[("traceparent", PARENT), ("tracestate", STATE)],
    )
    .await;
    assert_eq!(view["trace_id"], TRACE_ID);
    let flaky_id = view["id"].as_str().unwrap().to_owned();
    assert_eq!(s.api.wait_terminal(&flaky_id).await["state"], "success");
    // A 400, in a new trace.
    let bad = json!({"url": s.down.url("/status/400"), "idempotency_key": "bad"});
    let view = submit(&s.api, &bad, &[]).await;
    let (bad_id, bad_trace) = (
        view["id"].as_str().unwrap().to_owned(),
        view["trace_id"].as_str().unwrap().to_owned(),
    );
    assert_eq!(s.api.wait_terminal(&bad_id).await["state"], "failed");
    // A call canceled in flight.
    let slow = json!({"url": s.down.url("/slow"), "idempotency_key": "slow"});
    let view = submit(&s.api, &slow, &[]).await;
    let (slow_id, slow_trace) = (
        view["id"].as_str().unwrap().to_owned(),
        view["trace_id"].as_str().unwrap().to_owned(),
    );
    s.down.request_with_key("slow").await;
    assert_eq!(s.api.cancel(&slow_id).await.status, 200);
    s.down.closed_while_held("slow", 1).await;

    let spans = collector
        .wait_for("every span", |spans| {
            of_kind(spans, TRACE_ID, 3).len() == 2
                && of_kind(spans, &bad_trace, 3).len() == 1
                && of_kind(spans, &slow_trace, 3).len() == 1
        })
        .await;

    let probes: Vec<_> = spans
        .iter()
        .filter(|s| matches!(s.attr("url.path").as_deref(), Some("/healthz" | "/metrics")))
        .collect();
    assert!(probes.is_empty(), "{probes:#?}");
    assert_eq!(
        spans[0].resource.get("service.version").map(String::as_str),
        Some(env!("CARGO_PKG_VERSION"))
    );

    // The submit's server span: a child of the caller's span.
    let server = of_kind(&spans, TRACE_ID, 2);
    assert_eq!(server.len(), 1, "{server:#?}");
    let server = server[0];
    assert_eq!(server.parent_span_id(), CALLER_SPAN);
    assert_eq!(server.name(), "POST /tasks");
    for (key, value) in [
        ("http.request.method", "POST"),
        ("http.route", "/tasks"),
        ("http.response.status_code", "201"),
    ] {
        assert_eq!(server.attr(key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(
        server.resource.get("service.name").map(String::as_str),
        Some("tc-under-test")
    );
    assert_eq!(
        server
            .resource
            .get("deployment.environment")
            .map(String::as_str),
        Some("blackbox")
    );

    // One client span per try, children of the submit's span, each the
    // parent the downstream saw in that try's traceparent.
    let mut tries = of_kind(&spans, TRACE_ID, 3);
    tries.sort_by_key(|s| s.attr("taskcenter.attempt"));
    let calls: Vec<_> = s
        .down
        .requests()
        .into_iter()
        .filter(|r| r.key() == "flaky")
        .collect();
    assert_eq!(calls.len(), 2);
    for (n, (span, call)) in tries.iter().zip(&calls).enumerate() {
        assert_eq!(span.name(), "POST");
        assert_eq!(span.parent_span_id(), server.span_id());
        let traceparent = call.header("traceparent").unwrap();
        assert_eq!(
            fields(traceparent)[1..3],
            [TRACE_ID, span.span_id().as_str()]
        );
        assert_eq!(call.header("tracestate"), Some(STATE));
        let attempt = (n + 1).to_string();
        let resends = n.to_string();
        let status = if n == 0 { "503" } else { "200" };
        // The query's names stay, their values never leave the server.
        let url = format!("{}?secret=REDACTED", s.down.url("/flaky/1"));
        for (key, value) in [
            ("http.request.method", "POST"),
            ("url.full", url.as_str()),
            ("server.address", "127.0.0.1"),
            ("server.port", port.as_str()),
            ("http.response.status_code", status),
            ("http.request.resend_count", resends.as_str()),
            ("taskcenter.task.id", flaky_id.as_str()),
            ("taskcenter.attempt", attempt.as_str()),
            ("taskcenter.destination", destination.as_str()),
        ] {
            assert_eq!(
                span.attr(key).as_deref(),
                Some(value),
                "try {attempt}: {key}"
            );
        }
        assert_eq!(
            span.attr("error.type").as_deref(),
            (n == 0).then_some("503")
        );
        assert_eq!(span.is_error(), n == 0);
    }

    // The 400: a failed try, under its submit's server span.
    let bad_call = of_kind(&spans, &bad_trace, 3)[0];
    let bad_server = of_kind(&spans, &bad_trace, 2);
    assert_eq!(bad_call.parent_span_id(), bad_server[0].span_id());
    assert_eq!(
        bad_server[0].parent_span_id(),
        "",
        "a root: no caller's context"
    );
    assert_eq!(
        bad_call.attr("http.response.status_code").as_deref(),
        Some("400")
    );
    assert_eq!(bad_call.attr("error.type").as_deref(), Some("400"));
    assert!(bad_call.is_error());

    // The canceled call: an error, `canceled`, no status.
    let slow_call = of_kind(&spans, &slow_trace, 3)[0];
    assert_eq!(slow_call.attr("error.type").as_deref(), Some("canceled"));
    assert_eq!(slow_call.attr("http.response.status_code"), None);
    assert!(slow_call.is_error());

    // Log lines inside the try's span carry both ids.
    let done = s
        .server
        .logged_where(
            |l| l["message"] == "task_done" && l["task_id"] == flaky_id.as_str(),
            "the traced task's task_done",
        )
        .await;
    assert_eq!(done["trace_id"], TRACE_ID);
    assert_eq!(done["span_id"].as_str(), Some(tries[1].span_id().as_str()));
}

/// Rounds of 1100 tasks.
const ROUNDS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_slows_nothing_and_costs_bounded_memory() {
    // Accepts connections (the kernel's backlog) and never reads a byte:
    // every export waits for its timeout.
    let black_hole = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", black_hole.local_addr().unwrap());
    let s = support::start_with(|c, _| {
        c.flag("--otlp-endpoint", &endpoint)
            .flag("--concurrency", "32")
            .flag("--sync", "normal");
    })
    .await;
    let pid = s.server.pid();
    let rss = |what| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(what)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
    };
    // Each round: a batch of 1000 in the caller's trace and 100 single
    // submits, every one answered and every task delivered.
    let round = async |n: usize| {
        let tasks: Vec<Value> = (0..1000)
            .map(|i| json!({"url": s.down.url("/ok"), "idempotency_key": format!("r{n}-{i}")}))
            .collect();
        let reply = s
            .api
            .send(
                Method::POST,
                "/tasks/batch",
                &[
                    ("content-type", "application/json"),
                    ("traceparent", PARENT),
                ],
                json!({ "tasks": tasks }).to_string(),
            )
            .await;
        assert_eq!(reply.status, 200);
        let mut ids = Vec::new();
        for result in reply.json()["results"].as_array().unwrap() {
            assert_eq!(result["status"], 201);
            ids.push(result["task"]["id"].as_str().unwrap().to_owned());
        }
        for i in 0..100 {
            let task = json!({"url": s.down.url("/ok"), "idempotency_key": format!("s{n}-{i}")});
            ids.push(
                submit(&s.api, &task, &[]).await["id"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
        for id in &ids {
            assert_eq!(s.api.wait_terminal(id).await["state"], "success");
        }
        ids.len()
    };
    // The first round fills the span queue (2048) and warms every pool.
    let mut delivered = round(0).await;
    let before = rss("VmRSS");
    for n in 1..ROUNDS {
        delivered += round(n).await;
    }
    // Thousands more spans ended while the queue was full: they were
    // dropped, not kept.
    let grown = rss("VmRSS").saturating_sub(before);
    assert!(grown < 64 * 1024, "RSS grew by {grown} KiB");
    assert_eq!(delivered, ROUNDS * 1100);
    drop(black_hole);
}
