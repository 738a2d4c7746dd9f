//! `cargo xtask ui-test`: the dashboard in a real browser. Starts a release
//! tc-server on a temporary database and a loopback downstream (tc-downstream's
//! fake: `/ok` answers JSON, `/script` answers `<script>alert(1)</script>` as
//! text/html, `/fail` answers 500, `/hang` never answers and records when its
//! connection closes), drives Debian's headless Chromium through chromedriver
//! (fantoccini), and checks what a person would: the counts, the destinations
//! with their in-flight calls, cap, breaker and holds, a filtered list,
//! a task's attempts, a cancel in flight, a bulk retry with its dry-run count,
//! a `<script>` result shown as text, the token flow, a tenant's key
//! logging in to see only its tasks, and the login through a TLS-terminating
//! proxy (ui_test_proxy.rs). Screenshots go to
//! `<target>/ui/{overview,list,task,bulk,tenant,proxy-refused}.png` (and `failure.png` when a check
//! fails). Every wait polls a condition until a deadline.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use fantoccini::{Client, ClientBuilder, Locator};
use http::Method;
use serde_json::{Value, json};
use tc_downstream::fake::{FakeServer, Reply, Script, Step};
use tokio::time::Instant;

use crate::browser::{
    POLL, WAIT, accept_dialog, attr_of, check, click, dialog_open, goto, screenshot, text_of, until,
};
use crate::harness::client::{Conn, Endpoint};
use crate::harness::server::{ServerProcess, tc_server};

const USAGE: &str = "usage: cargo xtask ui-test";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const SCRIPT_RESULT: &str = "<script>alert(1)</script>";
const TOKEN: &str = "ui-test-token";

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    if let Some(arg) = args.first() {
        if arg == "-h" || arg == "--help" {
            println!("{USAGE}");
            return Ok(());
        }
        return Err(format!("unknown argument {arg:?}\n{USAGE}"));
    }
    for binary in [CHROMIUM, CHROMEDRIVER] {
        if !Path::new(binary).exists() {
            return Err(format!(
                "{binary} is missing: apt-get install -y chromium chromium-driver"
            ));
        }
    }
    let root = crate::harness::workspace_root();
    crate::harness::build(&root, crate::harness::RELEASE_PACKAGES)?;
    let target = crate::harness::target_dir(&root);
    let binary = target.join("release").join("tc-server");
    let shots = target.join("ui");
    std::fs::create_dir_all(&shots).map_err(|e| format!("{}: {e}", shots.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    runtime.block_on(ui_test(&binary, &shots))
}

/// chromedriver on a free loopback port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start() -> Result<Driver, String> {
        // A port the kernel just handed out and we let go: chromedriver
        // cannot be asked for port 0 and tell which it took.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("a free port: {e}"))?
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {CHROMEDRIVER}: {e}"))?;
        Ok(Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        })
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless Chromium session, retried until chromedriver listens.
async fn browser(driver: &Driver) -> Result<Client, String> {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            // Root in a container: no sandbox; /dev/shm is small there.
            // The proxy path's loopback proxy presents a self-signed
            // certificate for localhost.
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1000", "--hide-scrollbars", "--force-device-scale-factor=1",
                     "--ignore-certificate-errors"],
        }),
    );
    // Dialogs stay open until the test answers them: an alert() a result
    // smuggled in would be seen, not dismissed by the driver.
    caps.insert("unhandledPromptBehavior".into(), json!("ignore"));
    let deadline = Instant::now() + WAIT;
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&driver.url)
            .await
        {
            Ok(client) => return Ok(client),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("no browser session from chromedriver: {e}"));
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// The downstream's rules by path.
fn downstream_script() -> Arc<Script> {
    Script::with_rule(|call, _| {
        let path = call.path.split('?').next().unwrap_or("");
        match path {
            "/script" => Step::Reply(Reply::with_body(200, "text/html", SCRIPT_RESULT)),
            "/fail" => Step::Reply(Reply::json(500, Bytes::from_static(br#"{"error":"boom"}"#))),
            "/hang" => Step::Hang,
            _ => Step::Reply(Reply::json(
                200,
                Bytes::from_static(br#"{"ok":true,"note":"a JSON answer"}"#),
            )),
        }
    })
}

/// A small JSON client of the API.
struct Api {
    endpoint: Endpoint,
    conn: Conn,
    token: Option<String>,
}

impl Api {
    async fn new(addr: SocketAddr, token: Option<&str>) -> Result<Api, String> {
        Ok(Api {
            endpoint: Endpoint::new(addr),
            conn: Conn::open(addr).await?,
            token: token.map(str::to_owned),
        })
    }

    async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        let body = body.map(|b| Bytes::from(b.to_string()));
        let mut request = self.endpoint.request(method, path, body)?;
        if let Some(token) = &self.token {
            let value = http::HeaderValue::try_from(format!("Bearer {token}"))
                .map_err(|e| format!("token header: {e}"))?;
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, value);
        }
        let reply = self.conn.send(request).await?;
        let json = if reply.body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&reply.body).unwrap_or(Value::Null)
        };
        Ok((reply.status.as_u16(), json))
    }

    async fn submit(
        &mut self,
        base: &str,
        path: &str,
        key: &str,
        extra: Value,
    ) -> Result<String, String> {
        let mut body = json!({ "url": format!("{base}{path}"), "json": { "key": key }, "idempotency_key": key });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let (status, task) = self.call(Method::POST, "/tasks", Some(body)).await?;
        if status != 201 {
            return Err(format!("submit {key}: HTTP {status} {task}"));
        }
        task["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or(format!("submit {key}: no id in {task}"))
    }

    async fn task(&mut self, id: &str) -> Result<Value, String> {
        let (status, task) = self
            .call(Method::GET, &format!("/tasks/{id}"), None)
            .await?;
        if status != 200 {
            return Err(format!("GET /tasks/{id}: HTTP {status} {task}"));
        }
        Ok(task)
    }

    /// Polls the task until `done` holds, or fails at the deadline.
    async fn wait_task(
        &mut self,
        id: &str,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value, String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let task = self.task(id).await?;
            if done(&task) {
                return Ok(task);
            }
            if Instant::now() >= deadline {
                return Err(format!("task {id} never {what}: {task}"));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// How many tasks are in `state`, counted by listing them.
    async fn count(&mut self, state: &str) -> Result<u64, String> {
        let (status, page) = self
            .call(
                Method::GET,
                &format!("/tasks?state={state}&limit=500"),
                None,
            )
            .await?;
        if status != 200 {
            return Err(format!("list {state}: HTTP {status}"));
        }
        Ok(page["tasks"].as_array().map_or(0, |t| t.len() as u64))
    }
}

async fn ui_test(binary: &Path, shots: &Path) -> Result<(), String> {
    let script = downstream_script();
    let downstream = FakeServer::start(Arc::clone(&script))
        .await
        .map_err(|e| format!("downstream: {e}"))?;
    let driver = Driver::start()?;
    let browser = browser(&driver).await?;
    let outcome = checks(&browser, binary, shots, &script, &downstream.url()).await;
    if outcome.is_err() {
        // What the page looked like when the check failed.
        let _ = screenshot(&browser, shots, "failure").await;
    }
    let _ = browser.close().await;
    outcome?;
    println!(
        "ui-test: 12 checks passed, 0 failed; screenshots in {}",
        shots.display()
    );
    Ok(())
}

async fn checks(
    browser: &Client,
    binary: &Path,
    shots: &Path,
    script: &Script,
    down: &str,
) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let server = ServerProcess::start(
        "tc-server",
        tc_server(
            binary,
            &dir.path().join("ui.db"),
            &["--concurrency", "4", "--max-attempts", "3"],
        ),
    )?;
    let base = format!("http://{}", server.addr);
    let mut api = Api::new(server.addr, None).await?;

    // Tasks with every ending a person looks for.
    let mut ok = Vec::new();
    for i in 0..3 {
        ok.push(
            api.submit(down, "/ok", &format!("order-{i}"), json!({}))
                .await?,
        );
    }
    let scripted = api
        .submit(down, "/script", "script-result", json!({}))
        .await?;
    let mut failed = Vec::new();
    for i in 0..2 {
        failed.push(
            api.submit(
                down,
                "/fail",
                &format!("fail-{i}"),
                json!({ "max_attempts": 1 }),
            )
            .await?,
        );
    }
    let hanging = api
        .submit(down, "/hang", "hang-1", json!({ "timeout_ms": 120_000 }))
        .await?;
    for id in ok.iter().chain([&scripted]) {
        api.wait_task(id, "succeeded", |t| t["state"] == "success")
            .await?;
    }
    for id in &failed {
        api.wait_task(id, "failed", |t| t["state"] == "failed")
            .await?;
    }
    api.wait_task(&hanging, "ran", |t| t["state"] == "running")
        .await?;

    // 1. The overview shows the counts the API reports, and refreshes
    // itself without a reload.
    goto(browser, &format!("{base}/ui/")).await?;
    for state in ["pending", "running", "success", "failed", "canceled"] {
        let expected = api.count(state).await?.to_string();
        let css = format!("#count-{state}");
        until(&format!("{css} to show {expected}"), || async {
            Ok(
                (attr_of(browser, &css, "data-count").await?.as_deref() == Some(expected.as_str()))
                    .then_some(()),
            )
        })
        .await?;
    }
    browser
        .execute("window.__sameDocument = true; return true;", vec![])
        .await
        .map_err(|e| format!("marking the page: {e}"))?;
    api.submit(down, "/ok", "order-live", json!({})).await?;
    until(
        "the overview to count the new success without a reload",
        || async {
            let shown = attr_of(browser, "#count-success", "data-count").await?;
            Ok((shown.as_deref() == Some("5")).then_some(()))
        },
    )
    .await?;
    let same = browser
        .execute("return window.__sameDocument === true;", vec![])
        .await
        .map_err(|e| format!("reading the mark: {e}"))?;
    check(same == Value::Bool(true), || {
        "the overview reloaded instead of refreshing in place".into()
    })?;
    let submitted = text_of(browser, "#total-submitted").await?;
    check(submitted.as_deref() == Some("8"), || {
        format!("the chart counts 8 submits, shows {submitted:?}")
    })?;
    eprintln!("[ui-test] ok: overview counts match the API and refresh live");

    // 2. The destinations: the downstream's own with its call in flight
    // against the cap set over the API, and a paused one without tasks.
    let own = down.trim_start_matches("http://").to_owned();
    for (name, settings) in [
        (own.as_str(), json!({ "max_in_flight": 4 })),
        ("paused.example:443", json!({ "paused": true })),
    ] {
        let (status, view) = api
            .call(
                Method::PUT,
                &format!("/destinations/{name}"),
                Some(settings),
            )
            .await?;
        check(status == 200, || {
            format!("PUT /destinations/{name}: {status} {view}")
        })?;
    }
    let row =
        |name: &str, cell: &str| format!("#destinations tr[data-destination=\"{name}\"] {cell}");
    for (css, expected) in [
        (row(&own, "td.in-flight"), "1 / 4"),
        (row(&own, "td.pending"), "0"),
        (row(&own, ".badge"), "closed"),
        (row("paused.example:443", "td.held"), "paused"),
    ] {
        until(&format!("{css} to show {expected:?}"), || async {
            let shown = text_of(browser, &css).await?;
            Ok((shown.as_deref().map(str::trim) == Some(expected)).then_some(()))
        })
        .await?;
    }
    eprintln!("[ui-test] ok: overview lists destinations with in flight, cap, breaker, held");
    screenshot(browser, shots, "overview").await?;

    // 3. A filtered list (state=failed) finds the failed tasks.
    goto(browser, &format!("{base}/ui/tasks")).await?;
    let select = browser
        .find(Locator::Css("select[name=state]"))
        .await
        .map_err(|e| format!("the state filter: {e}"))?;
    select
        .select_by_value("failed")
        .await
        .map_err(|e| format!("choosing failed: {e}"))?;
    click(browser, "#filters button[type=submit]").await?;
    let mut listed: Vec<String> = until("the failed tasks to be listed", || async {
        let rows = browser
            .find_all(Locator::Css("tr[data-task-id]"))
            .await
            .map_err(|e| format!("rows: {e}"))?;
        let mut ids = Vec::new();
        for row in rows {
            if let Ok(Some(id)) = row.attr("data-task-id").await {
                ids.push(id);
            }
        }
        Ok((ids.len() == failed.len()).then_some(ids))
    })
    .await?;
    listed.sort();
    let mut want = failed.clone();
    want.sort();
    check(listed == want, || {
        format!("the failed filter listed {listed:?}, not {want:?}")
    })?;
    let url = browser
        .current_url()
        .await
        .map_err(|e| format!("url: {e}"))?;
    check(url.as_str().contains("state=failed"), || {
        format!("the filter is not in the url: {url}")
    })?;
    eprintln!("[ui-test] ok: state=failed lists exactly the failed tasks");
    screenshot(browser, shots, "list").await?;

    // 4. The task page shows its attempts.
    click(browser, &format!("tr[data-task-id=\"{}\"] a", failed[0])).await?;
    let attempts = until("the failed task's attempts", || async {
        text_of(browser, "#attempts").await
    })
    .await?;
    check(
        attempts.contains("#1") && attempts.contains("HTTP 500") && attempts.contains("http_500"),
        || format!("the attempt timeline does not show try #1 with HTTP 500: {attempts:?}"),
    )?;
    let story = text_of(browser, ".story").await?.unwrap_or_default();
    check(story.contains("Failed after 1 try"), || {
        format!("the story says {story:?}")
    })?;
    eprintln!("[ui-test] ok: the task page shows the attempt and why it failed");
    screenshot(browser, shots, "task").await?;

    // 5. A `<script>` result is shown as text, and never runs.
    goto(browser, &format!("{base}/ui/tasks/{scripted}")).await?;
    let shown = until("the script result", || async {
        text_of(browser, "#result-text").await
    })
    .await?;
    check(shown == SCRIPT_RESULT, || {
        format!("the result shows {shown:?}")
    })?;
    check(!dialog_open(browser).await, || {
        "an alert() ran from the result".into()
    })?;
    let scripts = browser
        .execute("return document.querySelectorAll('script').length;", vec![])
        .await
        .map_err(|e| format!("counting scripts: {e}"))?;
    check(scripts == json!(1), || {
        format!("the page has {scripts} script elements, not only its own")
    })?;
    eprintln!("[ui-test] ok: the <script> result is visible text and ran nothing");

    // 6. Cancel on an in-flight task: confirmed, the API says canceled, the
    // downstream saw its connection close.
    until("the hanging call to reach the downstream", || async {
        Ok(script
            .read(|r| {
                r.calls()
                    .iter()
                    .any(|c| c.task_id.as_deref() == Some(hanging.as_str()))
            })
            .then_some(()))
    })
    .await?;
    goto(browser, &format!("{base}/ui/tasks/{hanging}")).await?;
    click(browser, "#cancel").await?;
    let question = accept_dialog(browser).await?;
    check(question.contains("Cancel"), || {
        format!("the cancel dialog asks {question:?}")
    })?;
    let answer = until("the cancel's answer on the page", || async {
        Ok(text_of(browser, "#answer").await?.filter(|t| !t.is_empty()))
    })
    .await?;
    check(answer.contains("canceled"), || {
        format!("the page shows {answer:?}")
    })?;
    api.wait_task(&hanging, "was canceled", |t| t["state"] == "canceled")
        .await?;
    until(
        "the downstream to see the call's connection close",
        || async {
            Ok(script
                .read(|r| {
                    r.abandoned()
                        .any(|(c, _)| c.task_id.as_deref() == Some(hanging.as_str()))
                })
                .then_some(()))
        },
    )
    .await?;
    eprintln!("[ui-test] ok: cancel in flight: the API says canceled, the connection closed");

    // 7. Bulk retry of the failed tasks: the dry-run count first, then applied.
    goto(browser, &format!("{base}/ui/bulk?state=failed")).await?;
    browser
        .find(Locator::Css("#bulk-action"))
        .await
        .map_err(|e| format!("the action: {e}"))?
        .select_by_value("retry")
        .await
        .map_err(|e| format!("choosing retry: {e}"))?;
    click(browser, "#bulk-count").await?;
    let matched = until("the dry-run count", || async {
        attr_of(browser, "#bulk-answer", "data-matched").await
    })
    .await?;
    check(matched == failed.len().to_string(), || {
        format!("the dry run counted {matched}, not {}", failed.len())
    })?;
    for id in &failed {
        let task = api.task(id).await?;
        check(task["state"] == "failed", || {
            format!("the dry run changed {id}: {task}")
        })?;
    }
    screenshot(browser, shots, "bulk").await?;
    click(browser, "#bulk-apply").await?;
    accept_dialog(browser).await?;
    let applied = until("the bulk retry's answer", || async {
        attr_of(browser, "#bulk-answer", "data-applied").await
    })
    .await?;
    check(applied == failed.len().to_string(), || {
        format!("the bulk retry applied {applied}")
    })?;
    for id in &failed {
        // Retried: a second try was made (and failed again on the 500).
        api.wait_task(id, "was tried again", |t| {
            t["attempts"].as_array().is_some_and(|a| a.len() == 2)
        })
        .await?;
    }
    eprintln!("[ui-test] ok: bulk retry showed its dry-run count, then retried both");
    check(!dialog_open(browser).await, || {
        "a dialog is left open".into()
    })?;
    drop(server);

    // 8 and 9. The token flow: only the login page without the token, a
    // wrong token refused, the right one gets in; the cookie is HttpOnly.
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let server = ServerProcess::start(
        "tc-server (token)",
        tc_server(
            binary,
            &dir.path().join("ui-token.db"),
            &["--api-token", TOKEN],
        ),
    )?;
    let base = format!("http://{}", server.addr);
    let mut api = Api::new(server.addr, Some(TOKEN)).await?;
    let id = api.submit(down, "/ok", "token-1", json!({})).await?;
    api.wait_task(&id, "succeeded", |t| t["state"] == "success")
        .await?;
    goto(browser, &format!("{base}/ui/tasks")).await?;
    browser
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#login"))
        .await
        .map_err(|e| format!("the login page: {e}"))?;
    check(text_of(browser, "table").await?.is_none(), || {
        "a page behind the login showed".into()
    })?;
    let login = |token: &'static str| async move {
        let field = browser
            .find(Locator::Css("#token"))
            .await
            .map_err(|e| format!("the token field: {e}"))?;
        field.clear().await.map_err(|e| format!("clearing: {e}"))?;
        field
            .send_keys(token)
            .await
            .map_err(|e| format!("typing: {e}"))?;
        click(browser, "#login button[type=submit]").await
    };
    login("wrong-token").await?;
    let refused = until("the wrong token to be refused", || async {
        text_of(browser, "#login-error").await
    })
    .await?;
    check(refused.contains("not right"), || {
        format!("the refusal says {refused:?}")
    })?;
    eprintln!("[ui-test] ok: with --api-token only the login page shows, a wrong token is refused");
    login(TOKEN).await?;
    until("the overview after logging in", || async {
        Ok(attr_of(browser, "#count-success", "data-count")
            .await?
            .filter(|n| n == "1"))
    })
    .await?;
    let cookies = browser
        .execute("return document.cookie;", vec![])
        .await
        .map_err(|e| format!("document.cookie: {e}"))?;
    check(!cookies.to_string().contains("tc_session"), || {
        format!("the session cookie is readable by scripts: {cookies}")
    })?;
    // The session works for the buttons too: retry through the page is
    // refused by the API as not retryable (a success), past the auth.
    goto(browser, &format!("{base}/ui/tasks/{id}")).await?;
    click(browser, "#delete").await?;
    accept_dialog(browser).await?;
    let answer = until("the delete's answer", || async {
        Ok(text_of(browser, "#answer").await?.filter(|t| !t.is_empty()))
    })
    .await?;
    check(answer.contains("Deleted"), || {
        format!("the delete answered {answer:?}")
    })?;
    let (status, _) = api.call(Method::GET, &format!("/tasks/{id}"), None).await?;
    check(status == 404, || {
        format!("the deleted task answers {status}")
    })?;
    eprintln!("[ui-test] ok: the right token gets in; the page's buttons act with the session");

    // 10. A tenant's key logs in too and its session sees only
    // the tenant's tasks: not the admin's, not the overview.
    let (status, _) = api
        .call(Method::POST, "/tenants", Some(json!({"name": "acme"})))
        .await?;
    check(status == 201, || format!("POST /tenants answered {status}"))?;
    let (status, made) = api.call(Method::POST, "/tenants/acme/keys", None).await?;
    let key = made["key"]
        .as_str()
        .filter(|_| status == 201)
        .ok_or(format!("POST /tenants/acme/keys answered {status} {made}"))?
        .to_owned();
    let admin_task = api.submit(down, "/ok", "admin-task", json!({})).await?;
    let mut tenant = Api::new(server.addr, Some(&key)).await?;
    let tenant_task = tenant.submit(down, "/ok", "acme-task", json!({})).await?;
    for id in [&admin_task, &tenant_task] {
        api.wait_task(id, "succeeded", |t| t["state"] == "success")
            .await?;
    }
    browser
        .delete_all_cookies()
        .await
        .map_err(|e| format!("deleting the admin's session: {e}"))?;
    goto(browser, &format!("{base}/ui/tasks")).await?;
    browser
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#login"))
        .await
        .map_err(|e| format!("the login page again: {e}"))?;
    let field = browser
        .find(Locator::Css("#token"))
        .await
        .map_err(|e| format!("the token field: {e}"))?;
    field
        .send_keys(&key)
        .await
        .map_err(|e| format!("typing the key: {e}"))?;
    click(browser, "#login button[type=submit]").await?;
    goto(browser, &format!("{base}/ui/tasks")).await?;
    let listed = until("the tenant's task list", || async {
        Ok(text_of(browser, "table")
            .await?
            .filter(|t| t.contains("acme-task")))
    })
    .await?;
    check(!listed.contains("admin-task"), || {
        format!("the tenant's session lists the admin's task: {listed:?}")
    })?;
    goto(browser, &format!("{base}/ui/tasks/{admin_task}")).await?;
    let page = until("the admin's task page answered", || async {
        text_of(browser, "body").await
    })
    .await?;
    check(!page.contains("admin-task"), || {
        format!("the tenant's session shows the admin's task: {page:?}")
    })?;
    screenshot(browser, shots, "tenant").await?;
    eprintln!("[ui-test] ok: a tenant's key logs in and sees only its own tasks");
    drop(server);

    // 11 and 12. Behind a TLS-terminating proxy.
    crate::ui_test_proxy::behind_a_tls_proxy(browser, binary, shots, TOKEN).await
}
