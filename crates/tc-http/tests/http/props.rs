//! Property tests: arbitrary bytes, headers and JSON shapes against the
//! submit and list handlers never panic and never answer 5xx; every refusal
//! is the JSON error shape.

use proptest::prelude::*;
use serde_json::{Map, Value};
use tc_http::HttpConfig;

use crate::support::{Harness, Reply, harness};

/// One harness and runtime for all cases of a property: a fresh store per
/// case would cost more than the handler under test.
fn rig() -> (tokio::runtime::Runtime, Harness) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let h = rt.block_on(harness(HttpConfig {
        max_body_bytes: 4096,
        ..HttpConfig::default()
    }));
    (rt, h)
}

fn check_answer(reply: &Reply, what: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        reply.status < 500,
        "{what}: answered {} {:?}",
        reply.status,
        String::from_utf8_lossy(&reply.body)
    );
    if reply.status >= 400 {
        let code = reply.error_code();
        prop_assert!(
            code.is_some(),
            "{what}: {} without an error code",
            reply.status
        );
    }
    Ok(())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((".{0,6}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A submission-shaped object: the real field names (and some others) with
/// values of any shape, some well-formed.
fn submission() -> impl Strategy<Value = Value> {
    let field = prop_oneof![
        Just("url"),
        Just("json"),
        Just("idempotency_key"),
        Just("max_attempts"),
        Just("timeout_ms"),
        Just("run_at"),
        Just("delay_ms"),
        Just("extra"),
    ];
    let value = prop_oneof![
        json_value(),
        Just(Value::from("http://127.0.0.1:9/hook")),
        Just(Value::from("https://h.test/a/../b")),
        Just(Value::from("k")),
        (0u64..700_000).prop_map(Value::from),
    ];
    prop::collection::vec((field, value), 0..7)
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

fn content_type() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(Some("application/json".to_owned())),
        Just(Some("application/json; charset=utf-8".to_owned())),
        Just(Some("APPLICATION/JSON".to_owned())),
        Just(Some("text/plain".to_owned())),
        Just(None),
        "[ -~]{0,40}".prop_map(Some),
    ]
}

/// Extra headers with printable values (the only ones a request can carry).
fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let name = prop_oneof![
        Just("expect".to_owned()),
        Just("authorization".to_owned()),
        Just("content-length".to_owned()),
        Just("transfer-encoding".to_owned()),
        Just("x-anything".to_owned()),
    ];
    prop::collection::vec((name, "[ -~]{0,30}"), 0..3)
}

async fn post(h: &Harness, ct: &Option<String>, extra: &[(String, String)], body: &[u8]) -> Reply {
    let mut all: Vec<(&str, &str)> = extra
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    if let Some(ct) = ct {
        all.push(("content-type", ct.as_str()));
    }
    h.call("POST", "/tasks", &all, body).await
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn arbitrary_bytes_and_headers_never_make_submit_fail_5xx(
        body in prop::collection::vec(any::<u8>(), 0..600),
        ct in content_type(),
        extra in headers(),
    ) {
        let (rt, h) = rig();
        let reply = rt.block_on(post(&h, &ct, &extra, &body));
        check_answer(&reply, "submit of arbitrary bytes")?;
    }

    #[test]
    fn arbitrary_json_shapes_never_make_submit_fail_5xx(
        body in prop_oneof![submission(), json_value()],
        ct in content_type(),
    ) {
        let (rt, h) = rig();
        let bytes = body.to_string().into_bytes();
        let reply = rt.block_on(post(&h, &ct, &[], &bytes));
        check_answer(&reply, &format!("submit of {body}"))?;
        // A resubmit of the same bytes answers the same way or 200/409.
        let again = rt.block_on(post(&h, &ct, &[], &bytes));
        check_answer(&again, &format!("resubmit of {body}"))?;
    }

    #[test]
    fn arbitrary_list_queries_never_fail_5xx(
        query in "[ -~]{0,60}",
        encoded in prop::collection::vec(any::<u8>(), 0..20),
    ) {
        let (rt, h) = rig();
        // Printable text, percent-escaped where a URI needs it, plus raw
        // escapes of arbitrary bytes.
        let mut q: String = query
            .bytes()
            .map(|b| match b {
                b' ' | b'"' | b'#' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}' => {
                    format!("%{b:02X}")
                }
                _ => char::from(b).to_string(),
            })
            .collect();
        for b in encoded {
            q.push_str(&format!("%{b:02X}"));
        }
        let path = format!("/tasks?{q}");
        if path.parse::<http::Uri>().is_ok() {
            let reply = rt.block_on(h.call("GET", &path, &[], b""));
            check_answer(&reply, &path)?;
        }
    }
}
