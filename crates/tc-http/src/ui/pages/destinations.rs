//! The overview's destinations section: the destinations with the most
//! pending tasks, each with its breaker, calls in flight against its cap,
//! pending tasks and why they are held. The same data as
//! `GET /destinations`: the store's settings and counts, the worker's
//! breaker and backoff through the [`Control`] port.

use maud::{Markup, html};
use tc_model::Timestamp;
use tc_model::destination::{DESTINATIONS_LIMIT, Destination};
use tc_model::store::TaskStore;

use super::duration_text;
use crate::ui::Source;
use crate::worker_port::{Control, DestinationRuntime};

/// Destinations shown; the rest are counted ("N more").
pub(crate) const SHOWN: usize = 20;

/// One destination as the section shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) name: String,
    pub(crate) breaker: &'static str,
    pub(crate) in_flight: u64,
    pub(crate) max_in_flight: Option<u32>,
    pub(crate) pending: u64,
    /// Why its pending tasks wait, most telling first; empty when nothing
    /// holds them.
    pub(crate) held: Vec<String>,
    /// Its rate limit, as `2.5/s, burst 7`.
    pub(crate) rate: Option<String>,
    /// The names of its default headers (never their values).
    pub(crate) header_names: Vec<String>,
    /// How its calls are signed: `signed`, `signed ×2` while rotating,
    /// `signed (server; …)` with the server's secret, which signs only the
    /// tasks without a tenant; `None`: not signed.
    pub(crate) signed: Option<&'static str>,
    /// Its `auth`: the type and the non-secret fields, as
    /// `jwt (audience=…, lifetime_s=300)`; `None`: none.
    pub(crate) auth: Option<String>,
    /// Its client certificate's subject and expiry (RFC 3339), never the
    /// key.
    pub(crate) client_cert: Option<(String, String)>,
}

/// An `auth`'s type and non-secret fields, as one line (never a secret:
/// it is written from the view, which has none).
fn auth_line(auth: &tc_model::auth::DestinationAuth) -> String {
    let view = auth.view();
    let fields: Vec<String> = view
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(name, value)| *name != "type" && !value.is_null())
        .map(|(name, value)| match value.as_str() {
            Some(text) => format!("{name}={text}"),
            None => format!("{name}={value}"),
        })
        .collect();
    format!("{} ({})", auth.type_name(), fields.join(", "))
}

impl Row {
    pub(crate) fn new(
        d: &Destination,
        runtime: &DestinationRuntime,
        now: Timestamp,
        signs_by_default: bool,
    ) -> Row {
        let signed = match d.settings.signing_secrets.len() {
            0 if signs_by_default => Some("signed (server; tasks without a tenant)"),
            0 => None,
            1 => Some("signed"),
            _ => Some("signed ×2"),
        };
        Row {
            header_names: d.settings.headers.names().map(str::to_owned).collect(),
            signed,
            auth: d.settings.auth.as_ref().map(auth_line),
            client_cert: d.settings.client_tls.as_ref().map(|tls| {
                let facts = &tls.cert.facts;
                (facts.subject.clone(), crate::dto::rfc3339(facts.not_after))
            }),
            held: held_reasons(d, runtime, now),
            rate: d.settings.rate_per_s.map(|rate| {
                let burst = d.settings.bucket_size().unwrap_or(1.0);
                format!("{rate}/s, burst {burst}")
            }),
            name: d.name.clone(),
            breaker: runtime.breaker,
            in_flight: d.running,
            max_in_flight: d.settings.max_in_flight,
            pending: d.pending,
        }
    }
}

/// What holds a destination's tasks, as far as the store's settings and
/// this node's worker tell. A rate limit out of tokens is not among them:
/// the worker's buckets are not read here, so the rate is shown as a
/// setting instead.
fn held_reasons(d: &Destination, runtime: &DestinationRuntime, now: Timestamp) -> Vec<String> {
    let mut reasons = Vec::new();
    if d.settings.paused {
        reasons.push("paused".to_owned());
    }
    match runtime.breaker {
        "open" => reasons.push("breaker open".to_owned()),
        "half_open" => reasons.push("breaker probing".to_owned()),
        _ => {}
    }
    if let Some(until) = runtime.backoff_until.filter(|until| *until > now) {
        reasons.push(format!(
            "Retry-After, {} left",
            duration_text(until.duration_since(now))
        ));
    }
    if let Some(cap) = d.settings.max_in_flight
        && d.pending > 0
        && d.running >= u64::from(cap)
    {
        reasons.push("at its cap".to_owned());
    }
    reasons
}

/// The destinations to show: most pending first (then by name), at most
/// [`SHOWN`]; and how many more there are.
pub(crate) fn busiest(mut rows: Vec<Row>) -> (Vec<Row>, usize) {
    rows.sort_by(|a, b| b.pending.cmp(&a.pending).then_with(|| a.name.cmp(&b.name)));
    let more = rows.len().saturating_sub(SHOWN);
    rows.truncate(SHOWN);
    (rows, more)
}

/// The section, read now. A store that cannot list destinations costs this
/// section only, not the overview.
pub(crate) async fn section<S: TaskStore, C: Control>(
    app: &Source<'_, S, C>,
    now: Timestamp,
) -> Markup {
    let listed = app.store().destinations().await;
    let holds = crate::destinations::cluster_holds(app.store(), app.control()).await;
    let body = match listed {
        Ok(all) => {
            let total = all.len();
            let rows = all
                .iter()
                .map(|d| {
                    let runtime = app
                        .control()
                        .destination_state(&d.name)
                        .with_cluster(holds.get(&d.name), now);
                    Row::new(d, &runtime, now, app.ui().sources.signs_by_default)
                })
                .collect();
            let (rows, more) = busiest(rows);
            table(&rows, more, total >= DESTINATIONS_LIMIT)
        }
        Err(e) => html! {
            p.muted #destinations-error { "Destinations could not be read: " (e.to_string()) }
        },
    };
    html! {
        section.panel #destinations {
            h2 { "Destinations" }
            (body)
        }
    }
}

fn table(rows: &[Row], more: usize, capped: bool) -> Markup {
    html! {
        @if rows.is_empty() {
            p.muted { "No destination yet: one appears with its first task or its first setting." }
        } @else {
            table.list.destinations {
                thead { tr {
                    th { "destination" } th { "breaker" } th.num { "in flight" }
                    th.num { "pending" } th { "held" } th { "rate" } th { "calls" }
                } }
                tbody {
                    @for r in rows {
                        tr data-destination=(r.name) {
                            td { a href={ "/ui/tasks?destination=" (super::encode(&r.name)) } { (r.name) } }
                            td { span class={ "badge breaker-" (r.breaker) } { (r.breaker.replace('_', "-")) } }
                            td.num.in-flight {
                                (r.in_flight)
                                @if let Some(cap) = r.max_in_flight { span.muted { " / " (cap) } }
                            }
                            td.num.pending { (r.pending) }
                            td.held {
                                @if r.held.is_empty() { span.muted { "—" } }
                                @else { (r.held.join(", ")) }
                            }
                            td.rate {
                                @match &r.rate { Some(rate) => { (rate) } None => { span.muted { "—" } } }
                            }
                            td.calls {
                                @if let Some(auth) = &r.auth { span.badge.auth title="auth (secrets hidden)" { (auth) } " " }
                                @if let Some(signed) = r.signed { span.badge.signed { (signed) } " " }
                                @if !r.header_names.is_empty() {
                                    span.mono.header-names title="default headers (values hidden)" { (r.header_names.join(", ")) }
                                }
                                @if let Some((subject, not_after)) = &r.client_cert {
                                    " " span.badge.client-cert title={ "client certificate, expires " (not_after) } {
                                        "client cert " (subject) " (expires " (not_after) ")"
                                    }
                                }
                                @if r.signed.is_none() && r.header_names.is_empty() && r.auth.is_none() && r.client_cert.is_none() { span.muted { "—" } }
                            }
                        }
                    }
                }
            }
            @if more > 0 {
                p.muted #destinations-more {
                    (more) " more"
                    @if capped { " (the list stops at " (DESTINATIONS_LIMIT) ")" }
                    "; " code { "GET /destinations" } " lists every one."
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tc_model::destination::DestinationSettings;

    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_767_323_045_678);

    fn destination(
        name: &str,
        settings: DestinationSettings,
        pending: u64,
        running: u64,
    ) -> Destination {
        Destination {
            name: name.to_owned(),
            settings,
            pending,
            running,
        }
    }

    #[test]
    fn held_reasons_say_what_holds_the_pending_tasks() {
        let check = |settings: DestinationSettings,
                     (pending, running): (u64, u64),
                     runtime: DestinationRuntime,
                     want: &[&str]| {
            let d = destination("a:1", settings.clone(), pending, running);
            assert_eq!(
                held_reasons(&d, &runtime, NOW),
                want,
                "{settings:?} {pending}/{running} {runtime:?}"
            );
        };
        let free = DestinationRuntime::default();
        let capped = DestinationSettings {
            max_in_flight: Some(2),
            ..Default::default()
        };
        let paused = DestinationSettings {
            paused: true,
            ..Default::default()
        };
        check(DestinationSettings::default(), (5, 3), free.clone(), &[]);
        check(capped.clone(), (5, 2), free.clone(), &["at its cap"]);
        check(capped.clone(), (5, 1), free.clone(), &[]);
        // Nothing waits: the cap holds nothing back.
        check(capped.clone(), (0, 2), free.clone(), &[]);
        check(paused.clone(), (0, 0), free.clone(), &["paused"]);
        let open = DestinationRuntime {
            breaker: "open",
            ..Default::default()
        };
        check(paused, (3, 0), open.clone(), &["paused", "breaker open"]);
        let probing = DestinationRuntime {
            breaker: "half_open",
            ..Default::default()
        };
        check(capped, (3, 2), probing, &["breaker probing", "at its cap"]);
        let backing_off = |until_ms: i64| DestinationRuntime {
            backoff_until: Some(Timestamp::from_millis(NOW.as_millis() + until_ms)),
            ..Default::default()
        };
        check(
            DestinationSettings::default(),
            (1, 0),
            backing_off(30_000),
            &["Retry-After, 30.0 s left"],
        );
        check(DestinationSettings::default(), (1, 0), backing_off(0), &[]);
    }

    #[test]
    fn the_busiest_come_first_and_the_rest_are_counted() {
        let row = |name: &str, pending: u64| {
            Row::new(
                &destination(name, DestinationSettings::default(), pending, 0),
                &DestinationRuntime::default(),
                NOW,
                false,
            )
        };
        let mut rows: Vec<Row> = (0..30).map(|i| row(&format!("h{i:02}:80"), i)).collect();
        rows.push(row("b:80", 29));
        let (shown, more) = busiest(rows);
        assert_eq!(shown.len(), SHOWN);
        assert_eq!(more, 31 - SHOWN);
        let names: Vec<&str> = shown.iter().take(3).map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["b:80", "h29:80", "h28:80"]);
        assert!(shown.windows(2).all(|w| w[0].pending >= w[1].pending));
        let (few, none) = busiest(vec![row("a:1", 0)]);
        assert_eq!((few.len(), none), (1, 0));
    }

    #[test]
    fn a_rate_shows_with_its_bucket() {
        let settings = DestinationSettings {
            rate_per_s: Some(2.5),
            burst: Some(7),
            ..Default::default()
        };
        let r = Row::new(
            &destination("a:1", settings, 0, 0),
            &DestinationRuntime::default(),
            NOW,
            false,
        );
        assert_eq!(r.rate.as_deref(), Some("2.5/s, burst 7"));
        let settings = DestinationSettings {
            rate_per_s: Some(2.5),
            ..Default::default()
        };
        let r = Row::new(
            &destination("a:1", settings, 0, 0),
            &DestinationRuntime::default(),
            NOW,
            false,
        );
        assert_eq!(r.rate.as_deref(), Some("2.5/s, burst 3"));
    }

    #[test]
    fn header_names_and_how_calls_are_signed_show_never_a_value() {
        let headers = tc_model::Headers::parse([
            ("X-Tenant".to_owned(), "acme".to_owned()),
            ("Authorization".to_owned(), "Bearer s3cr3t".to_owned()),
        ])
        .unwrap();
        let secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
        let secrets =
            |n: usize| tc_model::signing::SigningSecrets::parse(&vec![secret; n]).unwrap();
        let row = |signing_secrets, signs_by_default| {
            let settings = DestinationSettings {
                headers: headers.clone(),
                signing_secrets,
                ..Default::default()
            };
            Row::new(
                &destination("a:1", settings, 0, 0),
                &DestinationRuntime::default(),
                NOW,
                signs_by_default,
            )
        };
        let signed = |r: Row| r.signed;
        assert_eq!(signed(row(secrets(0), false)), None);
        assert_eq!(
            signed(row(secrets(0), true)),
            Some("signed (server; tasks without a tenant)")
        );
        assert_eq!(signed(row(secrets(1), true)), Some("signed"));
        assert_eq!(signed(row(secrets(2), false)), Some("signed ×2"));
        let r = row(secrets(1), false);
        assert_eq!(r.header_names, ["authorization", "x-tenant"]);
        let html = table(&[r], 0, false).into_string();
        assert!(html.contains("authorization, x-tenant"), "{html}");
        assert!(html.contains(">signed<"), "{html}");
        for secret in ["s3cr3t", "acme", "whsec_", "C2FVsBQ"] {
            assert!(!html.contains(secret), "{secret} in {html}");
        }
    }

    #[test]
    fn auth_shows_its_type_and_public_fields_only() {
        let auth = tc_model::auth::DestinationAuth::from_json(&serde_json::json!({
            "type": "oauth2_client_credentials", "token_url": "https://idp.example/token",
            "client_id": "tc-client", "client_secret": "cl1ent-S3CRET", "scope": "send"}))
        .unwrap();
        let settings = DestinationSettings {
            auth,
            ..Default::default()
        };
        let r = Row::new(
            &destination("a:1", settings, 0, 0),
            &DestinationRuntime::default(),
            NOW,
            false,
        );
        let html = table(&[r], 0, false).into_string();
        for shown in [
            "oauth2_client_credentials",
            "token_url=https://idp.example/token",
            "client_id=tc-client",
            "scope=send",
        ] {
            assert!(html.contains(shown), "{shown} in {html}");
        }
        assert!(!html.contains("S3CRET"), "{html}");
    }
}
