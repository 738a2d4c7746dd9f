//! `GET /metrics` as scrapers read it: each text format through a parser
//! of that format alone, as strict as the ecosystem's (a sample a `# TYPE`
//! does not cover is a family of its own, as Python's `prometheus_client`
//! reads it), and both formats to the same families.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tc_http::HttpConfig;

use crate::support::{Harness, harness_with_registry};

/// One metric family as a scraper sees it.
#[derive(Debug, Clone, PartialEq)]
struct Family {
    /// The family's name, without a counter's `_total` (as both formats'
    /// parsers name it).
    name: String,
    kind: String,
    /// (sample name, label set as written, value)
    samples: Vec<(String, String, f64)>,
}

/// The suffixes a family's samples may add to its name, by type, in
/// OpenMetrics.
fn openmetrics_suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" => &["_total", "_created"],
        "histogram" => &["_bucket", "_count", "_sum", "_created"],
        "info" => &["_info"],
        _ => &[""],
    }
}

/// The same in the Prometheus text format, where a counter's `# TYPE`
/// already names its samples (`x_total`).
fn prometheus_suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "histogram" => &["_bucket", "_count", "_sum"],
        "summary" => &["", "_count", "_sum"],
        _ => &[""],
    }
}

/// A label set as written, `le` compared as the number it is (`1` and
/// `1.0` are one bucket bound, as Prometheus reads them).
fn labels(written: &str) -> String {
    let inside = written
        .strip_prefix('{')
        .and_then(|l| l.strip_suffix('}'))
        .unwrap_or(written);
    let pairs: Vec<String> = inside
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap();
            let value = value.trim_matches('"');
            match value.parse::<f64>() {
                Ok(bound) if name == "le" => format!("{name}={bound:?}"),
                _ => format!("{name}={value}"),
            }
        })
        .collect();
    pairs.join(",")
}

/// `name{labels} value` as (name, labels, value).
fn sample(line: &str) -> (String, String, f64) {
    let (series, value) = line
        .rsplit_once(' ')
        .unwrap_or_else(|| panic!("no value: {line:?}"));
    let (name, labels) = match series.find('{') {
        Some(i) => (&series[..i], &series[i..]),
        None => (series, ""),
    };
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v
            .parse()
            .unwrap_or_else(|e| panic!("{e}: value of {line:?}")),
    };
    (name.to_owned(), self::labels(labels), value)
}

/// Reads OpenMetrics: `# EOF` last and required; every sample inside its
/// family (a stray sample is a parse error there). `_created` samples are
/// left out: the Prometheus format has no place for them.
fn parse_openmetrics(text: &str) -> Vec<Family> {
    let body = text
        .strip_suffix("# EOF\n")
        .unwrap_or_else(|| panic!("no # EOF at the end:\n{text}"));
    let mut families: Vec<Family> = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            families.push(Family {
                name: name.to_owned(),
                kind: kind.to_owned(),
                samples: Vec::new(),
            });
        } else if line.starts_with("# HELP ") || line.starts_with("# UNIT ") {
        } else {
            assert!(!line.starts_with('#'), "unknown comment {line:?}");
            let (name, labels, value) = sample(line);
            let family = families
                .last_mut()
                .unwrap_or_else(|| panic!("{line:?} before any # TYPE"));
            let suffix = name
                .strip_prefix(family.name.as_str())
                .filter(|s| openmetrics_suffixes(&family.kind).contains(s))
                .unwrap_or_else(|| panic!("{line:?} outside family {}", family.name));
            if suffix != "_created" {
                family.samples.push((name, labels, value));
            }
        }
    }
    sorted(families)
}

/// `families` with each one's samples in one order: the formats write a
/// histogram's `_sum` and `_count` on either side of its buckets.
fn sorted(mut families: Vec<Family>) -> Vec<Family> {
    for family in &mut families {
        family
            .samples
            .sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    }
    families
}

/// Reads the Prometheus text format as its parsers do: a sample that the
/// last `# TYPE` does not name starts an untyped family of its own; any
/// other comment is a comment.
fn parse_prometheus(text: &str) -> Vec<Family> {
    let mut families: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            families.push(Family {
                name: name.to_owned(),
                kind: kind.to_owned(),
                samples: Vec::new(),
            });
        } else if line.starts_with('#') || line.is_empty() {
        } else {
            let (name, labels, value) = sample(line);
            let inside = families.last().is_some_and(|f| {
                name.strip_prefix(f.name.as_str())
                    .is_some_and(|s| prometheus_suffixes(&f.kind).contains(&s))
            });
            if !inside {
                families.push(Family {
                    name: name.clone(),
                    kind: "untyped".into(),
                    samples: Vec::new(),
                });
            }
            if let Some(family) = families.last_mut() {
                family.samples.push((name, labels, value));
            }
        }
    }
    for family in &mut families {
        if family.kind == "counter"
            && let Some(name) = family.name.strip_suffix("_total")
        {
            family.name = name.to_owned();
        }
    }
    sorted(families)
}

/// A server with a counter, a gauge and a histogram registered beside its
/// own, each with a value.
async fn metered() -> Harness {
    let mut registry = Registry::default();
    let attempts = Counter::<u64>::default();
    registry.register(
        "taskcenter_attempts",
        "Downstream attempts",
        attempts.clone(),
    );
    attempts.inc_by(3);
    let calls = Gauge::<i64>::default();
    registry.register("taskcenter_calls_in_flight", "Calls", calls.clone());
    calls.set(2);
    let durations = Histogram::new([0.1, 1.0]);
    registry.register(
        "taskcenter_downstream_call_duration_seconds",
        "Durations",
        durations.clone(),
    );
    durations.observe(0.5);
    let h = harness_with_registry(HttpConfig::default(), registry).await;
    h.submit(&serde_json::json!({"url": "http://127.0.0.1:9/a", "idempotency_key": "a"}))
        .await;
    h.submit(&serde_json::json!({"url": 1})).await;
    h
}

async fn scrape(h: &Harness, accept: Option<&str>) -> (String, String) {
    let headers: Vec<(&str, &str)> = accept.map(|a| ("accept", a)).into_iter().collect();
    let reply = h.call("GET", "/metrics", &headers, b"").await;
    assert_eq!(reply.status, 200);
    let content_type = reply.header("content-type").unwrap().to_owned();
    (
        content_type,
        String::from_utf8(reply.body.to_vec()).unwrap(),
    )
}

/// What Prometheus sends.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

#[tokio::test]
async fn each_scraper_gets_its_format_and_both_read_the_same_families() {
    // Each scrape from a server of its own in the same state: a scrape
    // counts itself once answered.
    let (om_type, om) = scrape(&metered().await, Some(PROMETHEUS_ACCEPT)).await;
    assert_eq!(
        om_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    for accept in [None, Some("*/*"), Some("text/plain")] {
        let (prom_type, prom) = scrape(&metered().await, accept).await;
        assert_eq!(
            prom_type, "text/plain; version=0.0.4; charset=utf-8",
            "{accept:?}"
        );
        for absent in ["# EOF", "# UNIT", "_created", " info\n", " stateset\n"] {
            assert!(!prom.contains(absent), "{absent:?} in\n{prom}");
        }
        assert_eq!(parse_prometheus(&prom), parse_openmetrics(&om), "{prom}");
    }
    let families = parse_openmetrics(&om);
    let kind = |name: &str| {
        families
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.kind.as_str())
    };
    assert_eq!(kind("taskcenter_submits"), Some("counter"));
    assert_eq!(kind("taskcenter_attempts"), Some("counter"));
    assert_eq!(kind("taskcenter_tasks"), Some("gauge"));
    assert_eq!(
        kind("taskcenter_downstream_call_duration_seconds"),
        Some("histogram")
    );
    let submits = families
        .iter()
        .find(|f| f.name == "taskcenter_submits")
        .unwrap();
    assert!(
        submits
            .samples
            .iter()
            .any(|(name, labels, value)| name == "taskcenter_submits_total"
                && labels == "result=created"
                && *value == 1.0),
        "{submits:?}"
    );
    // What the issue saw: OpenMetrics read as the Prometheus format splits
    // every counter and histogram into untyped families.
    let misread = parse_prometheus(&om);
    assert!(misread.len() > families.len(), "{misread:?}");
}
