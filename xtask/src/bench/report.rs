//! The figures of a run, their ceilings and targets, as a table for people
//! and JSON for tools. Targets are reported, never asserted.

use std::fmt::Write;

use serde_json::{Value, json};

/// A goal for one figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Target {
    /// value / ceiling ≥ this.
    RatioAtLeast(f64),
    /// value / ceiling ≤ this (the "ceiling" is a reference to stay near).
    RatioAtMost(f64),
    /// value ≤ this, in the figure's unit.
    AtMost(f64),
    /// value ≥ this, in the figure's unit.
    AtLeast(f64),
}

impl Target {
    fn describe(self, unit: &str) -> String {
        match self {
            Target::RatioAtLeast(r) => format!("≥ {:.0}%", r * 100.0),
            Target::RatioAtMost(r) => format!("≤ {r}×"),
            Target::AtMost(v) => format!("≤ {v} {unit}"),
            Target::AtLeast(v) => format!("≥ {v} {unit}"),
        }
    }
}

/// What a figure is compared with, measured in the same run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ceiling {
    pub(crate) value: f64,
    pub(crate) what: String,
}

/// One measured figure.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Figure {
    /// Stable key in results.json.
    pub(crate) key: String,
    /// Label in the table.
    pub(crate) name: String,
    /// `None` when the measurement failed (see `note`).
    pub(crate) value: Option<f64>,
    pub(crate) unit: &'static str,
    pub(crate) ceiling: Option<Ceiling>,
    pub(crate) target: Option<Target>,
    /// How it was measured, or why it failed.
    pub(crate) note: String,
}

impl Figure {
    pub(crate) fn new(key: &str, name: &str, value: f64, unit: &'static str) -> Figure {
        Figure {
            key: key.to_owned(),
            name: name.to_owned(),
            value: Some(value),
            unit,
            ceiling: None,
            target: None,
            note: String::new(),
        }
    }

    pub(crate) fn failed(key: &str, name: &str, unit: &'static str, why: String) -> Figure {
        Figure {
            value: None,
            note: why,
            ..Figure::new(key, name, 0.0, unit)
        }
    }

    pub(crate) fn beside(mut self, value: f64, what: &str) -> Figure {
        self.ceiling = Some(Ceiling {
            value,
            what: what.to_owned(),
        });
        self
    }

    pub(crate) fn target(mut self, target: Target) -> Figure {
        self.target = Some(target);
        self
    }

    pub(crate) fn note(mut self, note: impl Into<String>) -> Figure {
        // Notes are often joined from parts that may be empty.
        self.note = note.into().trim().to_owned();
        self
    }

    pub(crate) fn ratio(&self) -> Option<f64> {
        let ceiling = self.ceiling.as_ref()?.value;
        (ceiling > 0.0)
            .then(|| self.value.map(|v| v / ceiling))
            .flatten()
    }

    pub(crate) fn met(&self) -> Option<bool> {
        let value = self.value?;
        match self.target? {
            Target::RatioAtLeast(r) => self.ratio().map(|x| x >= r),
            Target::RatioAtMost(r) => self.ratio().map(|x| x <= r),
            Target::AtMost(limit) => Some(value <= limit),
            Target::AtLeast(floor) => Some(value >= floor),
        }
    }
}

/// A value in its unit, with the precision that unit deserves.
pub(crate) fn format_value(value: f64, unit: &str) -> String {
    match unit {
        "/s" => format!("{value:.0} /s"),
        "ms" if value < 10.0 => format!("{value:.2} ms"),
        "ms" => format!("{value:.1} ms"),
        "µs" => format!("{value:.1} µs"),
        "MiB" => format!("{value:.1} MiB"),
        _ => format!("{value:.2} {unit}"),
    }
}

/// The table: figure, value, ceiling (and what it is), ratio, target, met.
pub(crate) fn table(figures: &[Figure]) -> String {
    let rows: Vec<[String; 6]> = figures
        .iter()
        .map(|f| {
            let value = match f.value {
                Some(v) => format_value(v, f.unit),
                None => "FAILED".into(),
            };
            let ceiling = f.ceiling.as_ref().map_or(String::new(), |c| {
                format!("{} ({})", format_value(c.value, f.unit), c.what)
            });
            let ratio = f.ratio().map_or(String::new(), |r| format!("{r:.2}"));
            let target = f.target.map_or(String::new(), |t| t.describe(f.unit));
            let met = match f.met() {
                Some(true) => "yes",
                Some(false) => "NO",
                None if f.target.is_some() => "?",
                None => "",
            };
            [f.name.clone(), value, ceiling, ratio, target, met.into()]
        })
        .collect();
    let header = ["figure", "value", "ceiling", "ratio", "target", "met"].map(String::from);
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            let pad = w - cell.chars().count();
            // Numbers right-aligned, words left-aligned.
            if matches!(i, 1 | 3) {
                let _ = write!(line, "{}{cell}  ", " ".repeat(pad));
            } else {
                let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One figure as results.json holds it.
pub(crate) fn to_json(f: &Figure) -> Value {
    json!({
        "key": f.key,
        "name": f.name,
        "value": f.value,
        "unit": f.unit,
        "ceiling": f.ceiling.as_ref().map(|c| c.value),
        "ceiling_what": f.ceiling.as_ref().map(|c| c.what.clone()),
        "ratio": f.ratio(),
        "target": f.target.map(|t| t.describe(f.unit)),
        "met": f.met(),
        "note": f.note,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_judged_on_value_or_ratio() {
        let check = |f: Figure, ratio: Option<f64>, met: Option<bool>| {
            assert_eq!(f.ratio(), ratio, "{}", f.name);
            assert_eq!(f.met(), met, "{}", f.name);
        };
        let rate = || Figure::new("a", "rate", 600.0, "/s");
        check(rate(), None, None);
        check(rate().beside(1000.0, "noop"), Some(0.6), None);
        check(
            rate()
                .beside(1000.0, "noop")
                .target(Target::RatioAtLeast(0.5)),
            Some(0.6),
            Some(true),
        );
        check(
            rate()
                .beside(1000.0, "noop")
                .target(Target::RatioAtLeast(0.7)),
            Some(0.6),
            Some(false),
        );
        check(rate().target(Target::RatioAtLeast(0.5)), None, None);
        check(
            rate().beside(0.0, "zero").target(Target::RatioAtLeast(0.5)),
            None,
            None,
        );
        let p99 = || Figure::new("p", "p99", 4.0, "ms");
        check(p99().target(Target::AtMost(5.0)), None, Some(true));
        check(p99().target(Target::AtMost(3.0)), None, Some(false));
        check(
            p99().beside(1.0, "idle").target(Target::RatioAtMost(2.0)),
            Some(4.0),
            Some(false),
        );
        check(
            Figure::failed("x", "x", "ms", "boom".into()).target(Target::AtMost(1.0)),
            None,
            None,
        );
    }

    #[test]
    fn the_table_lines_up() {
        let figures = [
            Figure::new("a", "submit", 1234.4, "/s")
                .beside(2468.8, "no-op")
                .target(Target::RatioAtLeast(0.5)),
            Figure::new("b", "p99", 7.25, "ms").target(Target::AtMost(5.0)),
            Figure::failed("c", "cancel p99", "ms", "no close seen".into()),
        ];
        let text = table(&figures);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("figure"), "{text}");
        assert!(lines[1].contains("1234 /s") && lines[1].contains("2469 /s (no-op)"));
        assert!(
            lines[1].contains("0.50") && lines[1].contains("≥ 50%") && lines[1].ends_with("yes")
        );
        assert!(
            lines[2].contains("7.25 ms") && lines[2].ends_with("NO"),
            "{text}"
        );
        assert!(lines[3].contains("FAILED"), "{text}");
        let ratio_col = lines[0].find("ratio").unwrap();
        assert_eq!(
            lines[1].find("0.50").map(|i| i + 4),
            Some(ratio_col + 5),
            "{text}"
        );
    }

    #[test]
    fn values_in_their_units() {
        assert_eq!(format_value(12345.6, "/s"), "12346 /s");
        assert_eq!(format_value(1.234, "ms"), "1.23 ms");
        assert_eq!(format_value(12.34, "ms"), "12.3 ms");
        assert_eq!(format_value(31.25, "MiB"), "31.2 MiB");
        assert_eq!(format_value(1.5, "×"), "1.50 ×");
    }

    #[test]
    fn json_carries_ratio_and_verdict() {
        let f = Figure::new("a", "rate", 600.0, "/s")
            .beside(1000.0, "noop")
            .target(Target::RatioAtLeast(0.5));
        let v = to_json(&f);
        assert_eq!(v["ratio"], 0.6);
        assert_eq!(v["met"], true);
        assert_eq!(v["target"], "≥ 50%");
        assert_eq!(
            to_json(&Figure::failed("x", "x", "ms", "e".into()))["value"],
            Value::Null
        );
    }
}
