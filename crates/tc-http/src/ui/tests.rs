//! The dashboard through [`crate::handle`], on the in-memory store: escaping,
//! the security headers, the login flow, the cookie standing in for the
//! bearer token, and what each page shows.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use prometheus_client::registry::Registry;
use tc_model::destination::{ClaimGate, DestinationUpdate};
use tc_model::store::{Completion, StoreError};
use tc_model::store::{Destinations, Schedules, Tasks, Tenants, Work};
use tc_model::tenant::Scope;
use tc_model::{Limits, NewTask, State, Task, TaskId, Timestamp};
use tc_testkit::memory_store::MemoryStore;

use super::CSP;
use crate::{App, Control, HttpConfig};
use tc_testkit::ClaimDue;

const NOW: Timestamp = Timestamp::from_millis(1_767_323_045_678);

struct StillControl {
    store: Arc<MemoryStore>,
    changes: tokio::sync::broadcast::Sender<(TaskId, State)>,
    /// Destinations whose breaker the worker would report open.
    open_breakers: std::sync::Mutex<Vec<String>>,
}

impl Control for StillControl {
    fn task_submitted(&self) {}
    async fn cancel(&self, id: TaskId, scope: Scope) -> Result<Task, StoreError> {
        self.store.cancel(id, scope, NOW).await
    }
    fn canceled_in_store(&self, _: TaskId) {}
    fn now(&self) -> Timestamp {
        NOW
    }
    fn changes(&self) -> tokio::sync::broadcast::Receiver<(TaskId, State)> {
        self.changes.subscribe()
    }
    fn destinations_changed(&self) {}
    fn schedules_changed(&self) {}
    fn destination_state(&self, destination: &str) -> crate::DestinationRuntime {
        let open = self
            .open_breakers
            .lock()
            .unwrap()
            .iter()
            .any(|d| d == destination);
        crate::DestinationRuntime {
            breaker: if open { "open" } else { "closed" },
            ..Default::default()
        }
    }
}

struct Fixture {
    app: App<MemoryStore, StillControl>,
    store: Arc<MemoryStore>,
}

fn fixture(token: Option<&str>) -> Fixture {
    fixture_with(HttpConfig {
        api_token: token.map(str::to_owned),
        ..HttpConfig::default()
    })
}

fn fixture_with(config: HttpConfig) -> Fixture {
    let store = Arc::new(MemoryStore::new());
    let control = StillControl {
        store: Arc::clone(&store),
        changes: tokio::sync::broadcast::channel(8).0,
        open_breakers: std::sync::Mutex::default(),
    };
    let app = App::new(Arc::clone(&store), control, config, Registry::default()).with_dashboard(
        crate::DashboardSources {
            concurrency: Some(8),
            signs_by_default: false,
        },
    );
    Fixture { app, store }
}

struct Reply {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Fixture {
    async fn call(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        self.call_from(None, method, path, headers, body).await
    }

    /// [`Fixture::call`] as if on a connection from `peer`.
    async fn call_from(
        &self,
        peer: Option<&str>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(path);
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        if let Some(peer) = peer {
            req = req.extension(crate::ConnectionInfo {
                peer: peer.parse().unwrap(),
                local: "127.0.0.1:8080".parse().unwrap(),
            });
        }
        let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
        let response = crate::handle(&self.app, req).await;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    /// A pending task for `url`.
    async fn pending(&self, url: &str, key: &str) -> TaskId {
        let new = NewTask::new(
            url.into(),
            b"{}".to_vec(),
            key.into(),
            1,
            Duration::from_secs(1),
            &Limits::default(),
        )
        .unwrap();
        self.store.submit(new, NOW).await.unwrap().task.id
    }

    /// Applies a settings change to a destination.
    async fn set(&self, destination: &str, update: DestinationUpdate) {
        self.store
            .update_destination(destination.into(), update, NOW)
            .await
            .unwrap();
    }

    /// A finished task whose result (and key) is `<script>`-laden.
    async fn task_with_result(&self, key: &str, result: &str, content_type: &str) -> TaskId {
        let new = NewTask::new(
            "http://127.0.0.1:9/hook".into(),
            br#"{"note":"<img src=x onerror=alert(2)>"}"#.to_vec(),
            key.into(),
            1,
            Duration::from_secs(1),
            &Limits::default(),
        )
        .unwrap();
        let id = self.store.submit(new, NOW).await.unwrap().task.id;
        let claimed = self
            .store
            .claim_due(
                1,
                NOW,
                Duration::from_secs(10),
                tc_model::destination::ClaimGate::default(),
            )
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        let outcome = Completion::Success {
            http_status: 200,
            result: result.as_bytes().to_vec(),
            content_type: Some(content_type.into()),
        };
        self.store.complete(id, 1, outcome, NOW).await.unwrap();
        id
    }

    /// Logs in with `token`; the cookie and the CSRF token on success.
    async fn login(&self, token: &str) -> Option<(String, String)> {
        let reply = self
            .call(
                "POST",
                "/ui/login",
                &[("content-type", "application/x-www-form-urlencoded")],
                &format!("token={}", super::pages::encode(token)),
            )
            .await;
        if reply.status != 303 {
            return None;
        }
        let set = reply.headers.get("set-cookie")?.to_str().ok()?;
        let cookie = set.split(';').next()?.to_owned();
        let page = self.call("GET", "/ui/", &[("cookie", &cookie)], "").await;
        assert_eq!(page.status, 200, "{}", page.body);
        let csrf = page
            .body
            .split("name=\"csrf-token\" content=\"")
            .nth(1)?
            .split('"')
            .next()?
            .to_owned();
        Some((cookie, csrf))
    }
}

#[tokio::test]
async fn a_script_result_and_key_render_as_text() {
    let f = fixture(None);
    let key = "<script>alert('key')</script>";
    let id = f
        .task_with_result(key, "<script>alert(1)</script>", "text/html")
        .await;
    for path in [
        format!("/ui/tasks/{id}"),
        format!("/ui/fragment/tasks/{id}"),
        "/ui/tasks".into(),
    ] {
        let reply = f.call("GET", &path, &[], "").await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        assert!(
            !reply.body.contains("<script>alert"),
            "{path}: unescaped: {}",
            reply.body
        );
        assert!(!reply.body.contains("<img src=x"), "{path}: unescaped body");
    }
    let page = f
        .call("GET", &format!("/ui/tasks/{id}"), &[], "")
        .await
        .body;
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(page.contains("&lt;script&gt;alert('key')&lt;/script&gt;"));
    assert!(page.contains("&lt;img src=x onerror=alert(2)&gt;"));
    // The only script element is the page's own asset.
    assert_eq!(page.matches("<script").count(), 1);
    assert!(page.contains(r#"<script src="/ui/assets/app.js" defer></script>"#));
}

#[tokio::test]
async fn binary_results_show_a_size_and_a_download_link() {
    let f = fixture(None);
    let id = f
        .task_with_result("bin", "\u{1}\u{2}abc", "application/octet-stream")
        .await;
    let page = f
        .call("GET", &format!("/ui/tasks/{id}"), &[], "")
        .await
        .body;
    assert!(page.contains("Binary result of 5 B"), "{page}");
    assert!(page.contains(&format!("href=\"/tasks/{id}/result\"")));
}

#[tokio::test]
async fn a_task_page_shows_its_trace_id() {
    let f = fixture(None);
    let traced = NewTask::new(
        "http://127.0.0.1:9/hook".into(),
        b"{}".to_vec(),
        "traced".into(),
        1,
        Duration::from_secs(1),
        &Limits::default(),
    )
    .unwrap()
    .with_trace(
        tc_model::TraceContext::from_headers(
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            None,
        )
        .unwrap(),
    );
    let id = f.store.submit(traced, NOW).await.unwrap().task.id;
    let page = f
        .call("GET", &format!("/ui/tasks/{id}"), &[], "")
        .await
        .body;
    assert!(
        page.contains("<dt>trace id</dt><dd class=\"mono\">0af7651916cd43dd8448eb211c80319c</dd>"),
        "{page}"
    );
}

#[tokio::test]
async fn a_task_page_links_its_callback_and_its_parent() {
    let f = fixture(None);
    let with_callback = NewTask::new(
        "http://127.0.0.1:9/hook".into(),
        b"{}".to_vec(),
        "parent".into(),
        1,
        Duration::from_secs(1),
        &Limits::default(),
    )
    .unwrap()
    .with_callback(
        tc_model::callback::Callback::new(
            "http://127.0.0.1:9/done".into(),
            tc_model::callback::CallbackOn::parse(["canceled"]).unwrap(),
        )
        .unwrap(),
    );
    let parent = f.store.submit(with_callback, NOW).await.unwrap().task.id;
    let canceled = f.store.cancel(parent, Scope::Admin, NOW).await.unwrap();
    let callback = canceled.callback_task_id.unwrap();
    let page = f
        .call("GET", &format!("/ui/tasks/{parent}"), &[], "")
        .await
        .body;
    assert!(
        page.contains("http://127.0.0.1:9/done on canceled"),
        "{page}"
    );
    assert!(
        page.contains(&format!("<a href=\"/ui/tasks/{callback}\">{callback}</a>")),
        "{page}"
    );
    let page = f
        .call("GET", &format!("/ui/tasks/{callback}"), &[], "")
        .await
        .body;
    assert!(
        page.contains(&format!("<a href=\"/ui/tasks/{parent}\">{parent}</a>")),
        "{page}"
    );
}

#[tokio::test]
async fn every_ui_answer_carries_the_csp_and_nosniff() {
    for token in [None, Some("s3cret")] {
        let f = fixture(token);
        for path in [
            "/ui/",
            "/ui/tasks",
            "/ui/bulk",
            "/ui/login",
            "/ui/assets/app.css",
            "/ui/assets/app.js",
            "/ui/nope",
            "/ui",
        ] {
            let reply = f.call("GET", path, &[], "").await;
            let csp = reply
                .headers
                .get("content-security-policy")
                .map(|v| v.to_str().unwrap());
            assert_eq!(csp, Some(CSP), "{token:?} {path}");
            assert_eq!(
                reply
                    .headers
                    .get("x-content-type-options")
                    .map(|v| v.to_str().unwrap()),
                Some("nosniff"),
                "{token:?} {path}"
            );
            // Not `no-referrer`: browsers would send `Origin: null` on the
            // pages' own posts, and the cross-origin rule refuse them.
            assert_eq!(
                reply
                    .headers
                    .get("referrer-policy")
                    .map(|v| v.to_str().unwrap()),
                Some("same-origin"),
                "{token:?} {path}"
            );
        }
    }
    assert!(CSP.contains("default-src 'none'") && CSP.contains("script-src 'self'"));
    assert!(!CSP.contains("unsafe-inline"));
}

#[tokio::test]
async fn without_a_token_there_is_no_login() {
    let f = fixture(None);
    let overview = f.call("GET", "/ui/", &[], "").await;
    assert_eq!(overview.status, 200);
    assert!(overview.body.contains("id=\"count-pending\""));
    assert!(!overview.body.contains("Log out"));
    let login = f.call("GET", "/ui/login", &[], "").await;
    assert_eq!(login.status, 303);
}

#[tokio::test]
async fn with_a_token_only_the_login_page_is_served_until_the_right_token() {
    let f = fixture(Some("s3cret"));
    for path in [
        "/ui/",
        "/ui/tasks",
        "/ui/bulk",
        "/ui/fragment/overview",
        "/ui/tasks/x",
    ] {
        let reply = f.call("GET", path, &[], "").await;
        assert_eq!(reply.status, 401, "{path}");
        assert!(reply.body.contains("id=\"login\""), "{path}");
        // The page says a tenant's key logs in too.
        assert!(
            reply.body.contains("a tenant&#39;s API key")
                || reply.body.contains("a tenant's API key"),
            "{path}: {}",
            reply.body
        );
        assert!(!reply.body.contains("count-pending"), "{path}");
    }
    assert!(f.login("wrong").await.is_none());
    let wrong = f.call("POST", "/ui/login", &[], "token=wrong").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("not right"));
    assert!(wrong.headers.get("set-cookie").is_none());
    let (cookie, _) = f.login("s3cret").await.unwrap();
    let overview = f.call("GET", "/ui/", &[("cookie", &cookie)], "").await;
    assert_eq!(overview.status, 200);
    assert!(overview.body.contains("Log out"));
    // A made-up cookie is worth nothing.
    let forged = f
        .call("GET", "/ui/", &[("cookie", "tc_session=00")], "")
        .await;
    assert_eq!(forged.status, 401);
}

/// Served over https (a trusted proxy says so), the session cookie is
/// `Secure`: a browser never sends it over plain http. A peer that is not
/// a trusted proxy cannot claim https.
#[tokio::test]
async fn the_cookie_is_secure_when_the_dashboard_is_served_over_https() {
    let f = fixture_with(HttpConfig {
        api_token: Some("s3cret".into()),
        trusted_proxies: vec!["10.0.0.0/8".parse().unwrap()],
        ..HttpConfig::default()
    });
    // (peer, whether it says X-Forwarded-Proto: https, Secure expected)
    let cases = [
        ("10.0.0.1:4000", true, true),
        ("10.0.0.1:4000", false, false),
        ("192.0.2.1:4000", true, false),
        ("127.0.0.1:4000", true, false),
    ];
    for (peer, says_https, secure) in cases {
        let mut headers = vec![("content-type", "application/x-www-form-urlencoded")];
        if says_https {
            headers.push(("x-forwarded-proto", "https"));
        }
        let reply = f
            .call_from(Some(peer), "POST", "/ui/login", &headers, "token=s3cret")
            .await;
        assert_eq!(reply.status, 303, "{peer} {headers:?}");
        let set = reply.headers["set-cookie"].to_str().unwrap();
        assert_eq!(
            set.split("; ").any(|p| p == "Secure"),
            secure,
            "{peer} {headers:?}: {set}"
        );
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"));
    }
}

/// Ten failed logins from one client address within a minute, then `429`
/// with `Retry-After` (even for the right token) until the oldest failure
/// is a minute old; other addresses are not held.
#[tokio::test(start_paused = true)]
async fn failed_logins_are_throttled_per_client_address() {
    let f = fixture(Some("s3cret"));
    let form = [("content-type", "application/x-www-form-urlencoded")];
    let login = |peer: &'static str, token: &'static str| {
        let f = &f;
        async move {
            f.call_from(
                Some(peer),
                "POST",
                "/ui/login",
                &form,
                &format!("token={token}"),
            )
            .await
        }
    };
    for i in 0..10 {
        let reply = login("192.0.2.1:1000", "wrong").await;
        assert_eq!(reply.status, 401, "failure {}", i + 1);
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    for token in ["wrong", "s3cret"] {
        let held = login("192.0.2.1:1001", token).await;
        assert_eq!(held.status, 429, "{token}: {}", held.body);
        let retry_after: u64 = held.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        // The first failure was 10 s ago: it leaves the window in 50 s.
        assert_eq!(retry_after, 50, "{token}");
        assert!(held.headers.get("set-cookie").is_none());
    }
    // Another address is not held, and the form itself is still served.
    assert_eq!(login("192.0.2.2:1000", "s3cret").await.status, 303);
    assert_eq!(
        f.call_from(Some("192.0.2.1:1000"), "GET", "/ui/login", &[], "")
            .await
            .status,
        200
    );
    tokio::time::advance(Duration::from_secs(50)).await;
    assert_eq!(login("192.0.2.1:1000", "s3cret").await.status, 303);
}

#[tokio::test]
async fn the_cookie_stands_in_for_the_bearer_token_with_its_csrf_token() {
    let f = fixture(Some("s3cret"));
    let id = f.task_with_result("k1", "ok", "text/plain").await;
    let (cookie, csrf) = f.login("s3cret").await.unwrap();
    let retry = format!("/tasks/{id}/retry");
    let check = |status: u16, reply: &Reply, what: &str| {
        assert_eq!(reply.status, status, "{what}: {}", reply.body)
    };
    check(
        401,
        &f.call("GET", &format!("/tasks/{id}"), &[], "").await,
        "no credentials",
    );
    check(
        200,
        &f.call("GET", &format!("/tasks/{id}"), &[("cookie", &cookie)], "")
            .await,
        "read with the cookie",
    );
    check(
        200,
        &f.call(
            "GET",
            &format!("/tasks/{id}/result"),
            &[("cookie", &cookie)],
            "",
        )
        .await,
        "download with the cookie",
    );
    check(
        401,
        &f.call("POST", &retry, &[("cookie", &cookie)], "").await,
        "write without CSRF",
    );
    check(
        401,
        &f.call(
            "POST",
            &retry,
            &[("cookie", &cookie), ("x-csrf-token", "nope")],
            "",
        )
        .await,
        "wrong CSRF",
    );
    check(
        401,
        &f.call("POST", &retry, &[("x-csrf-token", &csrf)], "").await,
        "CSRF without the cookie",
    );
    // A success cannot be retried: the API's own answer, past the auth.
    check(
        409,
        &f.call(
            "POST",
            &retry,
            &[("cookie", &cookie), ("x-csrf-token", &csrf)],
            "",
        )
        .await,
        "write with both",
    );
    // Logging out needs the form's CSRF field; then the cookie is dead.
    let logout = f
        .call("POST", "/ui/logout", &[("cookie", &cookie)], "csrf=nope")
        .await;
    assert_eq!(logout.status, 403);
    let logout = f
        .call(
            "POST",
            "/ui/logout",
            &[("cookie", &cookie)],
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(logout.status, 303);
    check(
        401,
        &f.call("GET", &format!("/tasks/{id}"), &[("cookie", &cookie)], "")
            .await,
        "after logout",
    );
}

#[tokio::test]
async fn the_overview_counts_states_and_charts_submits() {
    let f = fixture(None);
    f.task_with_result("a", "ok", "text/plain").await;
    let submit = r#"{"url":"http://127.0.0.1:9/x","idempotency_key":"b"}"#;
    let reply = f
        .call(
            "POST",
            "/tasks",
            &[("content-type", "application/json")],
            submit,
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    f.app.activity().attempt_ended(State::Failed, NOW);
    let body = f.call("GET", "/ui/fragment/overview", &[], "").await.body;
    assert!(
        body.contains(r#"id="count-pending" data-count="1""#),
        "{body}"
    );
    assert!(
        body.contains(r#"id="count-success" data-count="1""#),
        "{body}"
    );
    assert!(body.contains(r#"id="total-submitted">1<"#), "{body}");
    assert!(body.contains(r#"id="total-failed">1<"#), "{body}");
    assert!(body.contains("of 8 (--concurrency)"), "{body}");
    assert!(body.contains("waiting "), "the pending task is due: {body}");
}

/// The overview's destinations: the busiest 20 by pending tasks, each with
/// its breaker, in flight against its cap, pending and why it is held; the
/// rest counted.
#[tokio::test]
async fn the_overview_lists_the_busiest_destinations_with_breaker_and_holds() {
    let f = fixture(None);
    let section = |body: &str| {
        body.split(r#"id="destinations""#)
            .nth(1)
            .unwrap_or_else(|| panic!("no destinations section: {body}"))
            .to_owned()
    };
    let body = f.call("GET", "/ui/fragment/overview", &[], "").await.body;
    assert!(section(&body).contains("No destination yet"), "{body}");

    // busy: 6 tasks, 2 of them running, at its cap of 2.
    for i in 0..6 {
        f.pending("http://busy.test/x", &format!("busy-{i}")).await;
    }
    let claimed = f
        .store
        .claim_due(2, NOW, Duration::from_secs(60), ClaimGate::default())
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    f.set(
        "busy.test:80",
        DestinationUpdate {
            max_in_flight: Some(Some(2)),
            rate_per_s: Some(Some(2.5)),
            burst: Some(Some(7)),
            ..Default::default()
        },
    )
    .await;
    // paused: 3 pending; broken: 2 pending behind an open breaker.
    for i in 0..3 {
        f.pending("http://paused.test/x", &format!("paused-{i}"))
            .await;
    }
    f.set(
        "paused.test:80",
        DestinationUpdate {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await;
    for i in 0..2 {
        f.pending("https://broken.test/x", &format!("broken-{i}"))
            .await;
    }
    f.app
        .control()
        .open_breakers
        .lock()
        .unwrap()
        .push("broken.test:443".into());
    // 22 quiet ones with one task each: 25 destinations in all.
    for i in 0..22 {
        f.pending(&format!("http://quiet{i:02}.test/x"), &format!("q-{i}"))
            .await;
    }

    let body = section(&f.call("GET", "/ui/fragment/overview", &[], "").await.body);
    let rows: Vec<&str> = body.split("<tr data-destination=").skip(1).collect();
    assert_eq!(rows.len(), super::pages::destinations::SHOWN, "{body}");
    let row = |name: &str| {
        rows.iter()
            .find(|r| r.starts_with(&format!("\"{name}\"")))
            .unwrap_or_else(|| panic!("no row for {name}: {body}"))
    };
    // Most pending first.
    for (i, name) in ["busy.test:80", "paused.test:80", "broken.test:443"]
        .iter()
        .enumerate()
    {
        assert!(
            rows[i].starts_with(&format!("\"{name}\"")),
            "row {i}: {body}"
        );
    }
    let busy = row("busy.test:80");
    assert!(
        busy.contains(r#"class="num in-flight">2<span class="muted"> / 2</span>"#),
        "{busy}"
    );
    assert!(busy.contains(r#"class="num pending">4<"#), "{busy}");
    assert!(busy.contains("at its cap"), "{busy}");
    assert!(busy.contains("2.5/s, burst 7"), "{busy}");
    assert!(busy.contains("badge breaker-closed"), "{busy}");
    let paused = row("paused.test:80");
    assert!(paused.contains(r#"class="held">paused<"#), "{paused}");
    let broken = row("broken.test:443");
    assert!(broken.contains("badge breaker-open"), "{broken}");
    assert!(broken.contains("breaker open"), "{broken}");
    assert!(
        broken.contains(r#"href="/ui/tasks?destination=broken.test%3A443""#),
        "{broken}"
    );
    // 25 destinations, 20 shown.
    assert!(body.contains(r#"id="destinations-more">5 more"#), "{body}");
}

#[tokio::test]
async fn the_list_filters_searches_and_pages() {
    let f = fixture(None);
    let a = f.task_with_result("key-a", "ok", "text/plain").await;
    let b = f.task_with_result("key-b", "ok", "text/plain").await;
    let rows = |body: &str| body.matches("data-task-id=").count();
    let body = f.call("GET", "/ui/tasks?limit=1", &[], "").await.body;
    assert_eq!(rows(&body), 1);
    let next = body
        .split("after=")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    let body = f
        .call("GET", &format!("/ui/tasks?limit=1&after={next}"), &[], "")
        .await
        .body;
    assert!(
        body.contains(&b.to_string()) && !body.contains(&format!("data-task-id=\"{a}\"")),
        "{body}"
    );
    let body = f
        .call("GET", "/ui/tasks?q=key-b&state=", &[], "")
        .await
        .body;
    assert_eq!(rows(&body), 1);
    assert!(body.contains(&b.to_string()));
    let body = f
        .call("GET", &format!("/ui/tasks?q={a}"), &[], "")
        .await
        .body;
    assert_eq!(rows(&body), 1);
    let body = f
        .call(
            "GET",
            "/ui/tasks?q=http%3A%2F%2F127.0.0.1%3A9%2Fho",
            &[],
            "",
        )
        .await
        .body;
    assert_eq!(rows(&body), 2, "{body}");
    let body = f
        .call(
            "GET",
            "/ui/tasks?q=http%3A%2F%2F127.0.0.1%3A9%2Fother",
            &[],
            "",
        )
        .await
        .body;
    assert_eq!(rows(&body), 0);
    assert_eq!(
        rows(&f.call("GET", "/ui/tasks?state=failed", &[], "").await.body),
        0
    );
    let bad = f.call("GET", "/ui/tasks?state=done", &[], "").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("state: must be one of"));
}

/// The task page shows the method and the task's headers as the API does,
/// credentials redacted; the overview's destination row names the default
/// headers and says the calls are signed; no value of either shows.
#[tokio::test]
async fn method_headers_and_signing_show_without_any_secret() {
    let f = fixture(None);
    let headers = tc_model::Headers::parse([
        ("Authorization".to_owned(), "Bearer task-s3cr3t".to_owned()),
        ("X-Tenant".to_owned(), "acme".to_owned()),
    ])
    .unwrap();
    let new = NewTask::new(
        "http://api.test/items/7".into(),
        Vec::new(),
        "get-1".into(),
        1,
        Duration::from_secs(1),
        &Limits::default(),
    )
    .unwrap()
    .with_method(tc_model::Method::Get)
    .unwrap()
    .with_priority(3)
    .unwrap()
    .with_headers(headers);
    let id = f.store.submit(new, NOW).await.unwrap().task.id;
    f.set(
        "api.test:80",
        DestinationUpdate {
            headers: Some(
                tc_model::Headers::parse([(
                    "authorization".to_owned(),
                    "Bearer destination-s3cr3t".to_owned(),
                )])
                .unwrap(),
            ),
            signing_secrets: Some(
                tc_model::signing::SigningSecrets::parse(&[
                    "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
                ])
                .unwrap(),
            ),
            ..Default::default()
        },
    )
    .await;

    let page = f
        .call("GET", &format!("/ui/tasks/{id}"), &[], "")
        .await
        .body;
    assert!(page.contains(r#"id="task-method">GET<"#), "{page}");
    assert!(page.contains(r#"id="task-priority">3<"#), "{page}");
    assert!(page.contains("authorization: [redacted]"), "{page}");
    assert!(page.contains("x-tenant: acme"), "{page}");
    assert!(page.contains("sends no body"), "{page}");
    let overview = f.call("GET", "/ui/fragment/overview", &[], "").await.body;
    let row = overview
        .split(r#"<tr data-destination="api.test:80""#)
        .nth(1)
        .unwrap_or_else(|| panic!("no row: {overview}"));
    assert!(row.contains(">signed<"), "{row}");
    assert!(row.contains(">authorization<"), "{row}");
    for body in [&page, &overview] {
        for secret in ["s3cr3t", "whsec_", "C2FVsBQ"] {
            assert!(!body.contains(secret), "{secret} shown: {body}");
        }
    }
}

#[tokio::test]
async fn the_schedules_page_lists_next_runs_and_the_last_task_escaped() {
    let f = fixture(None);
    let empty = f.call("GET", "/ui/schedules", &[], "").await;
    assert_eq!(empty.status, 200);
    assert!(empty.body.contains("No schedules"), "{}", empty.body);
    let body = r#"{"name":"nightly","cron":"30 2 * * *","timezone":"Europe/Berlin",
        "task":{"url":"http://127.0.0.1:9/x","headers":{"authorization":"Bearer s3cr3t"}}}"#;
    let created = f
        .call(
            "POST",
            "/schedules",
            &[("content-type", "application/json")],
            body,
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let fired = f.call("POST", "/schedules/nightly/trigger", &[], "").await;
    assert_eq!(fired.status, 200, "{}", fired.body);
    let task: serde_json::Value = serde_json::from_str(&fired.body).unwrap();
    let page = f.call("GET", "/ui/schedules", &[], "").await;
    assert_eq!(page.status, 200);
    for expected in [
        "nightly",
        "30 2 * * *",
        "Europe/Berlin",
        "data-live=\"/ui/fragment/schedules\"",
        &format!("/ui/tasks/{}", task["id"].as_str().unwrap()),
    ] {
        assert!(page.body.contains(expected), "{expected}: {}", page.body);
    }
    assert!(!page.body.contains("s3cr3t"));
    // A later firing the allow-list refused shows as the last
    // error, its message escaped.
    let fired_at = f
        .store
        .schedule("nightly".into())
        .await
        .unwrap()
        .last_run_at
        .unwrap();
    let refused = tc_model::schedule::FiringError {
        code: "url_not_allowed".into(),
        message: "url: <b>not</b> allowed".into(),
        at: fired_at.saturating_add(std::time::Duration::from_secs(60)),
    };
    assert!(
        f.store
            .record_firing_error("nightly".into(), refused)
            .await
            .unwrap()
    );
    let page = f.call("GET", "/ui/schedules", &[], "").await;
    for expected in [
        "Last error",
        "url_not_allowed at ",
        "url: &lt;b&gt;not&lt;/b&gt; allowed",
    ] {
        assert!(page.body.contains(expected), "{expected}: {}", page.body);
    }
    assert!(!page.body.contains("<b>not"), "{}", page.body);
    let fragment = f.call("GET", "/ui/fragment/schedules", &[], "").await;
    assert_eq!(fragment.status, 200);
    assert!(fragment.body.contains("<time"), "{}", fragment.body);
    assert!(!fragment.body.contains("<html"));
}

/// A tenant's key logs in too: its session sees its own tasks and none of
/// the admin's pages, acts through the API as its key would, and ends when
/// the key is revoked.
#[tokio::test]
async fn a_tenant_key_s_session_sees_only_its_tenant() {
    use tc_model::tenant::TenantUpdate;
    use tc_model::tenant::key::KeyHash;

    let f = fixture(Some("s3cret"));
    let key = format!("tck_{}", "k".repeat(43));
    f.store
        .create_tenant("acme".into(), TenantUpdate::default(), NOW)
        .await
        .unwrap();
    f.store
        .create_api_key("acme".into(), "key_01".into(), KeyHash::of(&key), NOW)
        .await
        .unwrap();
    let admins = f.pending("http://127.0.0.1:9/admin", "admin-task").await;
    let new = NewTask::new(
        "http://127.0.0.1:9/acme".into(),
        b"{}".to_vec(),
        "acme-task".into(),
        1,
        Duration::from_secs(1),
        &Limits::default(),
    )
    .unwrap()
    .with_tenant(Some("acme".into()), None);
    let own = f.store.submit(new, NOW).await.unwrap().task.id;

    let wrong = f
        .call(
            "POST",
            "/ui/login",
            &[("content-type", "application/x-www-form-urlencoded")],
            &format!("token=tck_{}", "x".repeat(43)),
        )
        .await;
    assert_eq!(wrong.status, 401, "an unknown key is a wrong token");
    let login = f
        .call(
            "POST",
            "/ui/login",
            &[("content-type", "application/x-www-form-urlencoded")],
            &format!("token={key}"),
        )
        .await;
    assert_eq!(login.status, 303, "{}", login.body);
    let set = login.headers["set-cookie"].to_str().unwrap();
    let cookie = set.split(';').next().unwrap().to_owned();
    let get = |path: String| {
        let cookie = cookie.clone();
        let f = &f;
        async move { f.call("GET", &path, &[("cookie", &cookie)], "").await }
    };

    let home = get("/ui/".into()).await;
    assert_eq!(home.status, 303);
    assert_eq!(home.headers["location"], "/ui/tasks");
    let list = get("/ui/tasks".into()).await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(list.body.contains(&own.to_string()), "its task is listed");
    assert!(!list.body.contains(&admins.to_string()), "{}", list.body);
    assert!(!list.body.contains(&key), "the key is never shown");
    assert!(!list.body.contains("/ui/schedules"), "no admin tab");
    let cases = [
        (format!("/ui/tasks/{own}"), 200),
        (format!("/ui/tasks/{admins}"), 404),
        (format!("/ui/fragment/tasks/{admins}"), 404),
        // A search by another's id finds nothing, as for an unknown id.
        (format!("/ui/tasks?q={admins}"), 404),
        ("/ui/schedules".into(), 403),
        ("/ui/fragment/overview".into(), 403),
        (format!("/tasks/{admins}"), 404),
        (format!("/tasks/{own}"), 200),
        ("/destinations".into(), 403),
    ];
    for (path, status) in cases {
        let reply = get(path.clone()).await;
        assert_eq!(reply.status, status, "{path}: {}", reply.body);
    }
    let searched = get(format!("/ui/fragment/tasks?q={admins}")).await;
    assert!(
        !searched.body.contains(&format!("/ui/tasks/{admins}")),
        "{}",
        searched.body
    );

    f.store
        .revoke_api_key("acme".into(), "key_01".into())
        .await
        .unwrap();
    assert_eq!(get("/ui/tasks".into()).await.status, 401);
    assert_eq!(get(format!("/tasks/{own}")).await.status, 401);
}

/// (peer, the headers a proxy adds, whether the login passes)
type ProxyCase<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);

/// Behind a TLS-terminating proxy the browser's `Origin` is `https://…`
/// while the server sees http: the login passes when a trusted proxy says
/// so (`X-Forwarded-*` or `Forwarded`), never when anyone else claims it;
/// a refusal on `/ui/` is a page that names the flags to set.
#[tokio::test]
async fn a_login_through_a_trusted_tls_proxy_passes_and_a_refusal_says_what_to_set() {
    let f = fixture_with(HttpConfig {
        api_token: Some("s3cret".into()),
        trusted_proxies: vec!["10.0.0.0/8".parse().unwrap()],
        allowed_hosts: vec!["tc.example".into()],
        ..HttpConfig::default()
    });
    let form = ("content-type", "application/x-www-form-urlencoded");
    let browser = [
        form,
        ("host", "tc.example"),
        ("origin", "https://tc.example"),
    ];
    let x_forwarded = [
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "tc.example"),
    ];
    let forwarded = [("forwarded", "for=192.0.2.9;proto=https;host=tc.example")];
    // (peer, what the proxy adds, logged in)
    let cases: [ProxyCase; 6] = [
        ("10.0.0.1:4000", &x_forwarded, true),
        ("10.0.0.1:4000", &forwarded, true),
        // A proxy that does not say https: the origins differ.
        ("10.0.0.1:4000", &[], false),
        ("10.0.0.1:4000", &[("x-forwarded-proto", "http")], false),
        // Anyone else's word counts for nothing.
        ("192.0.2.1:4000", &x_forwarded, false),
        ("127.0.0.1:4000", &forwarded, false),
    ];
    for (peer, proxy, passes) in cases {
        let headers: Vec<(&str, &str)> = browser.iter().chain(proxy).copied().collect();
        let reply = f
            .call_from(Some(peer), "POST", "/ui/login", &headers, "token=s3cret")
            .await;
        if passes {
            assert_eq!(reply.status, 303, "{peer} {proxy:?}: {}", reply.body);
            let cookie = reply.headers["set-cookie"].to_str().unwrap();
            assert!(cookie.contains("Secure"), "{cookie}");
            continue;
        }
        assert_eq!(reply.status, 403, "{peer} {proxy:?}");
        assert!(!reply.headers.contains_key("set-cookie"));
        assert_eq!(reply.headers["content-type"], "text/html; charset=utf-8");
        assert_eq!(reply.headers["content-security-policy"], CSP);
        for said in [
            "403 cross_origin",
            "--trusted-proxy",
            "--allowed-host",
            "X-Forwarded-Proto",
        ] {
            assert!(reply.body.contains(said), "{said:?} in {}", reply.body);
        }
        assert!(reply.body.contains("https://tc.example"), "{}", reply.body);
    }
    // A host the server is not known by: a page too, naming the host to
    // allow, styled (the assets are served to any host).
    let misdirected = f
        .call_from(
            Some("10.0.0.1:4000"),
            "GET",
            "/ui/login",
            &[("host", "tasks.internal")],
            "",
        )
        .await;
    assert_eq!(misdirected.status, 421);
    assert_eq!(
        misdirected.headers["content-type"],
        "text/html; charset=utf-8"
    );
    for said in [
        "421 misdirected_request",
        "--allowed-host tasks.internal",
        "--trusted-proxy",
    ] {
        assert!(
            misdirected.body.contains(said),
            "{said:?} in {}",
            misdirected.body
        );
    }
    let css = f
        .call_from(
            Some("10.0.0.1:4000"),
            "GET",
            "/ui/assets/app.css",
            &[("host", "tasks.internal")],
            "",
        )
        .await;
    assert_eq!(css.status, 200);
    assert!(css.body.contains("section.refused"));
    // The API's refusals stay JSON, with the same hint.
    let api = f
        .call_from(
            Some("192.0.2.1:4000"),
            "POST",
            "/tasks/bulk",
            &[
                ("host", "tc.example"),
                ("origin", "https://tc.example"),
                ("authorization", "Bearer s3cret"),
            ],
            "",
        )
        .await;
    assert_eq!(api.status, 403);
    let error: serde_json::Value = serde_json::from_str(&api.body).unwrap();
    assert_eq!(error["error"]["code"], "cross_origin");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("(http://tc.example as it sees the request)")
            && message.ends_with(
                "; behind a proxy, start the server with --trusted-proxy <proxy address> (and --allowed-host <host>)"
            ),
        "{message}"
    );
    let api = f
        .call_from(
            Some("10.0.0.1:4000"),
            "GET",
            "/healthz",
            &[("host", "tasks.internal")],
            "",
        )
        .await;
    assert_eq!(api.status, 421);
    assert!(
        api.body
            .contains("--allowed-host tasks.internal; behind a proxy"),
        "{}",
        api.body
    );
}

#[tokio::test]
async fn the_topic_pages_show_subscriptions_health_and_an_event_s_tasks() {
    let f = fixture(None);
    let json = [("content-type", "application/json")];
    let empty = f.call("GET", "/ui/topics", &[], "").await;
    assert_eq!(empty.status, 200);
    assert!(empty.body.contains("No topics"), "{}", empty.body);
    assert_eq!(
        f.call("PUT", "/topics/billing", &json, "{}").await.status,
        201
    );
    let sub = r#"{"url":"http://127.0.0.1:9/in","event_types":["invoice.*"],
        "headers":{"authorization":"Bearer s3cr3t"},
        "signing_secrets":["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"]}"#;
    let made = f
        .call("POST", "/topics/billing/subscriptions", &json, sub)
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let sub: serde_json::Value = serde_json::from_str(&made.body).unwrap();
    let event = r#"{"event_type":"invoice.paid","idempotency_key":"e1"}"#;
    let published = f.call("POST", "/topics/billing/events", &json, event).await;
    assert_eq!(published.status, 201, "{}", published.body);
    let event: serde_json::Value = serde_json::from_str(&published.body).unwrap();

    let list = f.call("GET", "/ui/topics", &[], "").await;
    assert!(
        list.body.contains("href=\"/ui/topics/billing\""),
        "{}",
        list.body
    );
    let topic = f.call("GET", "/ui/topics/billing", &[], "").await;
    assert_eq!(topic.status, 200, "{}", topic.body);
    for expected in [sub["id"].as_str().unwrap(), "invoice.*", "healthy"] {
        assert!(topic.body.contains(expected), "{expected}: {}", topic.body);
    }
    let path = format!(
        "/ui/topics/billing/events/{}",
        event["id"].as_str().unwrap()
    );
    let page = f.call("GET", &path, &[], "").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let task = event["tasks"][0]["task_id"].as_str().unwrap();
    assert!(
        page.body.contains(&format!("/ui/tasks/{task}")),
        "{}",
        page.body
    );
    for body in [&list.body, &topic.body, &page.body] {
        for secret in ["s3cr3t", "whsec_", "C2FVsBQ"] {
            assert!(!body.contains(secret), "{secret} shown: {body}");
        }
    }
    for (path, status) in [
        ("/ui/topics/nope", 404),
        ("/ui/topics/Bad", 404),
        ("/ui/topics/billing/events/nope", 404),
    ] {
        assert_eq!(f.call("GET", path, &[], "").await.status, status, "{path}");
    }
}
