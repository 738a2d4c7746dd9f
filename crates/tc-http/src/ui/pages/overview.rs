//! The overview: tasks per state, the last 15 minutes per second, latency,
//! the oldest due pending task, calls in flight, destinations.

use maud::{Markup, html};
use tc_model::store::{StateCounts, TaskStore};
use tc_model::{State, Timestamp};

use super::{Nav, Rendered, duration_text, layout};
use crate::ui::Ctx;
use crate::ui::Source;
use crate::ui::activity::{Buckets, Series, WINDOW_SECONDS, quantile};
use crate::worker_port::Control;

/// The histogram the latency comes from (the worker's, in the shared
/// registry).
const CALL_DURATION: &str = "taskcenter_downstream_call_duration_seconds_bucket";
/// The worker's in-flight gauge.
const IN_FLIGHT: &str = "taskcenter_calls_in_flight";

/// Seconds per point of the chart: 5 s averages read better than 900
/// jagged points.
const STEP: usize = 5;

pub(crate) async fn page<S: TaskStore, C: Control>(app: &Source<'_, S, C>, ctx: &Ctx) -> Rendered {
    let live = fragment(app).await;
    Rendered {
        status: live.status,
        markup: layout(
            ctx,
            "Overview",
            Nav::Overview,
            html! {
                h1 { "Overview" }
                div #live data-live="/ui/fragment/overview" { (live.markup) }
            },
        ),
    }
}

pub(crate) async fn fragment<S: TaskStore, C: Control>(app: &Source<'_, S, C>) -> Rendered {
    let now = app.control().now();
    let counts = match app.store().count_by_state().await {
        Ok(c) => c,
        Err(e) => {
            let e = crate::error::ApiError::from(e);
            return Rendered {
                status: e.status(),
                markup: super::error_box(&e),
            };
        }
    };
    // The earliest due time of a pending task: in the past, it is how long
    // the oldest due task has waited (the port's next_due, no scan).
    let next_due = app.store().next_due().await.ok().flatten();
    let metrics = read_metrics(app);
    let ui = app.ui();
    let series = ui.activity.series(now);
    let (window, window_s) = ui.activity.latency_window(metrics.buckets, now);
    let right_now = RightNow {
        p50: quantile(&window, 0.5),
        p99: quantile(&window, 0.99),
        calls: window.last().map_or(0, |b| b.1),
        window_s,
        next_due,
        now,
        in_flight: metrics.in_flight,
        concurrency: ui.sources.concurrency,
    };
    let destinations = super::destinations::section(app, now).await;
    Rendered::ok(html! {
        (state_cards(&counts))
        section.panels {
            div.panel.wide {
                h2 { "Last 15 minutes, per second" }
                (chart(&series))
            }
            (right_now.panel())
        }
        (destinations)
    })
}

/// A card per state with its count, each a link to its tasks, and the way
/// to the failed ones.
fn state_cards(counts: &StateCounts) -> Markup {
    let states = [
        State::Pending,
        State::Running,
        State::Success,
        State::Failed,
        State::Canceled,
    ];
    html! {
        section.cards aria-label="Tasks per state" {
            @for state in states {
                @let n = counts.get(state);
                a class={ "card state-" (state.as_str()) }
                    id={ "count-" (state.as_str()) }
                    data-count=(n)
                    href={ "/ui/tasks?state=" (state.as_str()) } {
                    span.label { (state.as_str()) }
                    span.num { (n) }
                }
            }
        }
        @if counts.get(State::Failed) > 0 {
            p.hint {
                a href="/ui/tasks?state=failed" { "See the " (counts.get(State::Failed)) " failed tasks" }
                " · "
                a href="/ui/bulk?state=failed" { "retry them all" }
            }
        }
    }
}

/// The "Right now" panel's figures.
struct RightNow {
    /// The downstream's latency quantiles over the window, in seconds.
    p50: Option<f64>,
    p99: Option<f64>,
    /// The calls the window holds.
    calls: u64,
    /// How long the window is (`None`: since start).
    window_s: Option<i64>,
    /// The earliest due time of a pending task.
    next_due: Option<Timestamp>,
    now: Timestamp,
    in_flight: u64,
    /// `--concurrency`, when known.
    concurrency: Option<usize>,
}

impl RightNow {
    fn panel(&self) -> Markup {
        let (now, calls) = (self.now, self.calls);
        html! {
            div.panel {
                h2 { "Right now" }
                dl.stats {
                    dt { "Downstream latency p50 / p99" }
                    dd #latency {
                        @match (self.p50, self.p99) {
                            (Some(a), Some(b)) => {
                                (ms_text(a)) " / " (ms_text(b))
                                small { " over " (calls) @if calls == 1 { " call" } @else { " calls" }
                                    @if let Some(s) = self.window_s { " in the last " (duration_text(std::time::Duration::from_secs(s.unsigned_abs()))) } @else { " since start" } }
                            }
                            _ => { "no calls yet" }
                        }
                    }
                    dt { "Oldest due pending task" }
                    dd #oldest-due {
                        @match self.next_due {
                            Some(t) if t <= now => {
                                "waiting " (duration_text(now.duration_since(t)))
                            }
                            Some(t) => { "none due; next in " (duration_text(t.duration_since(now))) }
                            None => { "none pending" }
                        }
                    }
                    dt { "Calls in flight" }
                    dd #in-flight data-in-flight=(self.in_flight) {
                        @match self.concurrency {
                            Some(c) => {
                                (self.in_flight) " of " (c) " (--concurrency)"
                                (meter(self.in_flight, c))
                            }
                            None => { (self.in_flight) }
                        }
                    }
                }
            }
        }
    }
}

fn ms_text(seconds: f64) -> String {
    let ms = seconds * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

struct Metrics {
    buckets: Buckets,
    in_flight: u64,
}

/// The call-duration histogram and the in-flight gauge, read from the
/// registry's text encoding (the registry is what `/metrics` serves; the
/// histogram type has no accessor for its buckets).
fn read_metrics<S: TaskStore, C: Control>(app: &Source<'_, S, C>) -> Metrics {
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, app.registry()).is_err() {
        text.clear();
    }
    parse_metrics(&text)
}

fn parse_metrics(text: &str) -> Metrics {
    let mut metrics = Metrics {
        buckets: Vec::new(),
        in_flight: 0,
    };
    for line in text.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        if let Some(labels) = name.strip_prefix(CALL_DURATION) {
            let le = labels
                .split_once("le=\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(le, _)| le);
            let le = match le {
                Some("+Inf") => Some(f64::INFINITY),
                Some(le) => le.parse().ok(),
                None => None,
            };
            if let (Some(le), Ok(n)) = (le, value.parse::<u64>()) {
                metrics.buckets.push((le, n));
            }
        } else if name == IN_FLIGHT {
            metrics.in_flight = value.parse::<i64>().map_or(0, |v| v.max(0).unsigned_abs());
        }
    }
    metrics
}

/// A horizontal bar: `used` of `capacity`.
fn meter(used: u64, capacity: usize) -> Markup {
    let capacity = capacity.max(1) as f64;
    let width = (used as f64 / capacity).clamp(0.0, 1.0) * 200.0;
    html! {
        svg.meter width="200" height="10" viewBox="0 0 200 10" role="img" aria-label="calls in flight against the limit" {
            rect.meter-bg x="0" y="0" width="200" height="10" rx="3" {}
            rect.meter-fg x="0" y="0" width=(format!("{width:.1}")) height="10" rx="3" {}
        }
    }
}

/// Averages per [`STEP`] seconds.
fn averaged(values: &[u64]) -> Vec<f64> {
    values
        .chunks(STEP)
        .map(|c| c.iter().sum::<u64>() as f64 / c.len().max(1) as f64)
        .collect()
}

/// The three series as lines in one inline SVG (no script, no style
/// attribute: colours come from the stylesheet's classes).
fn chart(series: &Series) -> Markup {
    const W: f64 = 900.0;
    const H: f64 = 160.0;
    let lines = [
        (
            "submitted",
            "submits",
            averaged(&series.submitted),
            &series.submitted,
        ),
        (
            "completed",
            "completions",
            averaged(&series.completed),
            &series.completed,
        ),
        (
            "failed",
            "failures",
            averaged(&series.failed),
            &series.failed,
        ),
    ];
    let top = lines
        .iter()
        .flat_map(|(_, _, v, _)| v.iter().copied())
        .fold(0.0f64, f64::max);
    // A round ceiling so the gridline labels are plain numbers.
    let ceiling = nice_ceiling(top);
    let points = |values: &[f64]| -> String {
        let n = values.len().max(2) - 1;
        values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let x = i as f64 * W / n as f64;
                let y = H - v / ceiling * (H - 4.0);
                format!("{x:.1},{y:.1}")
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let last10 = |v: &Vec<u64>| v[v.len().saturating_sub(10)..].iter().sum::<u64>() as f64 / 10.0;
    html! {
        svg.chart viewBox=(format!("0 0 {W} {}", H + 18.0)) preserveAspectRatio="none" role="img"
            aria-label="submits, completions and failures per second over the last 15 minutes" {
            @for frac in [0.0, 0.5, 1.0] {
                @let y = H - frac * (H - 4.0);
                line.grid x1="0" x2=(W) y1=(format!("{y:.1}")) y2=(format!("{y:.1}")) {}
                text.axis x="4" y=(format!("{:.1}", (y - 3.0).max(10.0))) { (format_rate(ceiling * frac)) "/s" }
            }
            @for (class, _, values, _) in &lines {
                polyline class={ "line line-" (class) } points=(points(values)) {}
            }
            text.axis x="0" y=(H + 14.0) { "15 min ago" }
            text.axis.end x=(W) y=(H + 14.0) text-anchor="end" { "now" }
        }
        ul.legend {
            @for (class, label, _, raw) in &lines {
                li {
                    span class={ "swatch line-" (class) } {}
                    (label) ": "
                    strong id={ "rate-" (class) } { (format_rate(last10(raw))) "/s" }
                    " now, "
                    span id={ "total-" (class) } { (raw.iter().sum::<u64>()) }
                    " in 15 min"
                }
            }
            li.muted { (STEP) " s averages over " (WINDOW_SECONDS / 60) " minutes; kept in memory since this process started" }
        }
    }
}

fn format_rate(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v < 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

fn nice_ceiling(top: f64) -> f64 {
    if top <= 1.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(top.log10().floor());
    for step in [1.0, 2.0, 5.0, 10.0] {
        if top <= step * magnitude {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_and_gauge_are_read_from_the_registry_text() {
        let text = "# TYPE x histogram\n\
            taskcenter_downstream_call_duration_seconds_bucket{le=\"0.001\"} 2\n\
            taskcenter_downstream_call_duration_seconds_bucket{le=\"0.002\"} 5\n\
            taskcenter_downstream_call_duration_seconds_bucket{le=\"+Inf\"} 6\n\
            taskcenter_downstream_call_duration_seconds_sum 0.01\n\
            taskcenter_calls_in_flight 3\n";
        let m = parse_metrics(text);
        assert_eq!(m.buckets, vec![(0.001, 2), (0.002, 5), (f64::INFINITY, 6)]);
        assert_eq!(m.in_flight, 3);
    }

    #[test]
    fn ceilings_are_round() {
        for (top, expected) in [
            (0.0, 1.0),
            (0.4, 1.0),
            (1.5, 2.0),
            (3.0, 5.0),
            (7.0, 10.0),
            (42.0, 50.0),
            (180.0, 200.0),
        ] {
            assert_eq!(nice_ceiling(top), expected, "{top}");
        }
    }
}
