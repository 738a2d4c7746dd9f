//! What the run reached, read from schemathesis's NDJSON event log: every
//! case it sent, by operation, with the status it got; and the verdict on it.
//! A run that never reached an operation's logic (no 2xx), or whose
//! generated submits were mostly refused, proves little however many cases
//! passed.

use std::collections::BTreeMap;
use std::io::BufRead;

use serde_json::Value;

/// The operation whose accepted share is held to [`MIN_SUBMIT_SHARE`].
pub(crate) const SUBMIT: &str = "POST /tasks";

/// The least share of generated valid submits the server must accept.
pub(crate) const MIN_SUBMIT_SHARE: f64 = 0.30;

/// Cases of one operation.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Every case sent (that got an answer).
    pub(crate) cases: u64,
    /// Those answered 2xx.
    pub(crate) ok: u64,
    /// Cases generated to be valid (schemathesis's positive mode).
    pub(crate) positive: u64,
    /// Those answered 2xx.
    pub(crate) positive_ok: u64,
    /// The others, by status.
    pub(crate) positive_refused: BTreeMap<u16, u64>,
}

/// Every operation's counts, by `METHOD /path/template`.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) operations: BTreeMap<String, Counts>,
}

impl Tally {
    /// Reads schemathesis's `--report ndjson` events. Each finished
    /// scenario carries its cases (operation, generation mode) and the
    /// response each got.
    pub(crate) fn read(events: impl BufRead) -> Result<Tally, String> {
        let mut tally = Tally::default();
        for (n, line) in events.lines().enumerate() {
            let line = line.map_err(|e| format!("reading the event log: {e}"))?;
            if line.trim().is_empty() {
                continue;
            }
            let event: Value = serde_json::from_str(&line)
                .map_err(|e| format!("event log line {}: {e}", n + 1))?;
            if let Some(recorder) = event.pointer("/ScenarioFinished/recorder") {
                tally.add_scenario(recorder);
            }
        }
        Ok(tally)
    }

    fn add_scenario(&mut self, recorder: &Value) {
        let (Some(cases), Some(interactions)) = (
            recorder.get("cases").and_then(Value::as_object),
            recorder.get("interactions").and_then(Value::as_object),
        ) else {
            return;
        };
        for (id, interaction) in interactions {
            let Some(status) = interaction
                .pointer("/response/status_code")
                .and_then(Value::as_u64)
            else {
                continue;
            };
            let Some(case) = cases.get(id).and_then(|c| c.get("value")) else {
                continue;
            };
            let (Some(method), Some(path)) = (
                case.get("method").and_then(Value::as_str),
                case.get("path").and_then(Value::as_str),
            ) else {
                continue;
            };
            let positive = case
                .pointer("/meta/generation/mode")
                .and_then(Value::as_str)
                == Some("positive");
            let ok = (200..300).contains(&status);
            let counts = self
                .operations
                .entry(format!("{} {path}", method.to_uppercase()))
                .or_default();
            counts.cases += 1;
            counts.ok += u64::from(ok);
            counts.positive += u64::from(positive);
            counts.positive_ok += u64::from(positive && ok);
            if positive && !ok {
                let status = u16::try_from(status).unwrap_or(u16::MAX);
                *counts.positive_refused.entry(status).or_default() += 1;
            }
        }
    }

    /// Why the run does not count, if it does not: an operation of
    /// `expected` that never got a 2xx, or too few accepted submits.
    pub(crate) fn shortfalls(&self, expected: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for operation in expected {
            match self.operations.get(operation) {
                None => out.push(format!("{operation}: never called")),
                Some(c) if c.ok == 0 => {
                    out.push(format!("{operation}: no 2xx in {} cases", c.cases));
                }
                Some(_) => {}
            }
        }
        let submits = self.operations.get(SUBMIT).cloned().unwrap_or_default();
        let share = share(submits.positive_ok, submits.positive);
        if share < MIN_SUBMIT_SHARE {
            out.push(format!(
                "{SUBMIT}: {} of {} generated valid submits accepted ({:.0}%), under {:.0}%",
                submits.positive_ok,
                submits.positive,
                share * 100.0,
                MIN_SUBMIT_SHARE * 100.0
            ));
        }
        out
    }

    /// The table the run prints: each of the `expected` operations' cases
    /// and 2xx share, and the same for its generated valid cases; then the
    /// probes with methods the document does not have, in one line.
    pub(crate) fn table(&self, expected: &[String]) -> String {
        let mut out = format!(
            "{:<40} {:>6} {:>6} {:>6}   {:>8} {:>6} {:>6}\n",
            "operation", "cases", "2xx", "share", "positive", "2xx", "share"
        );
        let empty = Counts::default();
        for operation in expected {
            let c = self.operations.get(operation).unwrap_or(&empty);
            out.push_str(&format!(
                "{operation:<40} {:>6} {:>6} {:>5.0}%   {:>8} {:>6} {:>5.0}%\n",
                c.cases,
                c.ok,
                share(c.ok, c.cases) * 100.0,
                c.positive,
                c.positive_ok,
                share(c.positive_ok, c.positive) * 100.0,
            ));
        }
        let others = self
            .operations
            .iter()
            .filter(|(operation, _)| !expected.contains(operation));
        let (count, cases, ok) = others.fold((0, 0, 0), |(n, cases, ok), (_, c)| {
            (n + 1, cases + c.cases, ok + c.ok)
        });
        if count > 0 {
            out.push_str(&format!(
                "and {count} method/path pairs the document does not have: {cases} cases, {ok} 2xx\n"
            ));
        }
        out
    }
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One finished scenario with the given (method, path, mode, status)
    /// cases, as schemathesis writes it.
    fn scenario(cases: &[(&str, &str, &str, Option<u16>)]) -> String {
        let mut case_map = serde_json::Map::new();
        let mut interactions = serde_json::Map::new();
        for (i, (method, path, mode, status)) in cases.iter().enumerate() {
            let id = format!("c{i}");
            case_map.insert(
                id.clone(),
                serde_json::json!({"value": {"method": method, "path": path,
                    "meta": {"generation": {"mode": mode}}}}),
            );
            let response = status.map(|s| serde_json::json!({"status_code": s}));
            interactions.insert(id, serde_json::json!({"request": {}, "response": response}));
        }
        serde_json::json!({"ScenarioFinished": {"phase": "fuzzing",
            "recorder": {"label": "x", "cases": case_map, "interactions": interactions}}})
        .to_string()
    }

    fn tally(lines: &[String]) -> Tally {
        let text = lines.join("\n");
        Tally::read(text.as_bytes()).unwrap()
    }

    #[test]
    fn cases_are_counted_by_operation_mode_and_status() {
        let t = tally(&[
            r#"{"Initialize":{}}"#.to_owned(),
            scenario(&[
                ("POST", "/tasks", "positive", Some(201)),
                ("POST", "/tasks", "positive", Some(400)),
                ("POST", "/tasks", "negative", Some(400)),
                ("POST", "/tasks", "negative", Some(200)),
                ("POST", "/tasks", "positive", None),
            ]),
            scenario(&[
                ("get", "/tasks/{id}", "positive", Some(404)),
                ("GET", "/tasks/{id}", "negative", Some(200)),
            ]),
        ]);
        assert_eq!(
            t.operations[SUBMIT],
            Counts {
                cases: 4,
                ok: 2,
                positive: 2,
                positive_ok: 1,
                positive_refused: BTreeMap::from([(400, 1)]),
            }
        );
        assert_eq!(
            t.operations["GET /tasks/{id}"],
            Counts {
                cases: 2,
                ok: 1,
                positive: 1,
                positive_ok: 0,
                positive_refused: BTreeMap::from([(404, 1)]),
            }
        );
    }

    #[test]
    fn a_run_falls_short_without_a_2xx_or_enough_accepted_submits() {
        let expected = |ops: &[&str]| ops.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let good = tally(&[scenario(&[
            ("POST", "/tasks", "positive", Some(201)),
            ("POST", "/tasks", "positive", Some(201)),
            ("POST", "/tasks", "positive", Some(400)),
            ("GET", "/healthz", "positive", Some(200)),
        ])]);
        assert_eq!(
            good.shortfalls(&expected(&["POST /tasks", "GET /healthz"])),
            Vec::<String>::new()
        );
        let short = good.shortfalls(&expected(&["POST /tasks", "GET /metrics"]));
        assert_eq!(short, vec!["GET /metrics: never called".to_owned()]);

        let refused = tally(&[scenario(&[
            ("POST", "/tasks", "positive", Some(201)),
            ("POST", "/tasks", "positive", Some(400)),
            ("POST", "/tasks", "positive", Some(403)),
            ("POST", "/tasks", "positive", Some(400)),
            ("DELETE", "/tasks/{id}", "positive", Some(404)),
        ])]);
        let short = refused.shortfalls(&expected(&["POST /tasks", "DELETE /tasks/{id}"]));
        assert_eq!(short.len(), 2, "{short:?}");
        assert!(short[0].starts_with("DELETE /tasks/{id}: no 2xx in 1 cases"));
        assert!(short[1].contains("1 of 4 generated valid submits accepted (25%)"));
    }

    #[test]
    fn a_broken_log_is_an_error() {
        assert!(Tally::read("not json\n".as_bytes()).is_err());
    }
}
