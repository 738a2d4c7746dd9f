//! The command-line client (`tc-server task …`, `destination …`, `schedule …`),
//! run as its own process against a real server and a loopback downstream.

use serde_json::{Value, json};

use crate::support::cli::{Cli, Run};
use crate::support::{self, Setup};

/// The client for `s`'s server (through `TC_SERVER_URL`).
fn cli(s: &Setup) -> Cli {
    Cli::new(&s.server.base_url())
}

/// Submits through the API a task that will fail on its one try (400):
/// its id.
async fn failing_task(s: &Setup, key: &str) -> String {
    let reply = s
        .api
        .post_json(
            "/tasks",
            &json!({"url": s.down.url("/status/400"), "idempotency_key": key, "max_attempts": 1}),
        )
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.json());
    reply.id()
}

/// One expected run: the arguments, the exit code, and a piece of stdout
/// and of stderr each must contain.
struct Case<'a> {
    args: Vec<&'a str>,
    code: i32,
    stdout: &'a str,
    stderr: &'a str,
}

fn case<'a>(args: &[&'a str], code: i32, stdout: &'a str, stderr: &'a str) -> Case<'a> {
    Case {
        args: args.to_vec(),
        code,
        stdout,
        stderr,
    }
}

/// Runs every case and checks it.
async fn check(cli: &Cli, cases: &[Case<'_>]) {
    for c in cases {
        let run = cli.run(&c.args).await;
        assert_eq!(
            run.code,
            Some(c.code),
            "{:?}: exit code; stdout:\n{}\nstderr:\n{}",
            c.args,
            run.out(),
            run.stderr
        );
        assert!(
            run.out().contains(c.stdout),
            "{:?}: stdout lacks {:?}:\n{}",
            c.args,
            c.stdout,
            run.out()
        );
        assert!(
            run.stderr.contains(c.stderr),
            "{:?}: stderr lacks {:?}:\n{}",
            c.args,
            c.stderr,
            run.stderr
        );
    }
}

#[tokio::test]
async fn submit_generates_and_prints_a_key_and_sends_the_json_as_written() {
    let mut s = support::start().await;
    let url = s.down.url("/ok");
    let run = cli(&s)
        .run(&[
            "task",
            "submit",
            "--url",
            &url,
            "--json",
            r#"{"b": 1, "a": 2.50}"#,
        ])
        .await;
    run.expect(0);
    let id = run.field("task");
    let key = run.field("key");
    assert!(run.out().contains("(generated)"), "{}", run.out());
    assert!(run.out().contains("created"), "{}", run.out());
    let view = s.api.task(&id).await;
    assert_eq!(view["idempotency_key"], key.as_str(), "{view}");
    // The downstream receives the payload with its key order and digits.
    let received = s.down.request_with_key(&key).await;
    assert_eq!(received.body, br#"{"b":1,"a":2.50}"#);

    // A given key is used as is; the same key with another payload is the
    // API's 409, exit 1 with its code and message.
    let again = [
        "task", "submit", "--url", &url, "--key", "mine", "--json", "{}",
    ];
    let run = cli(&s).run(&again).await;
    run.expect(0);
    assert_eq!(run.field("key"), "mine");
    assert!(!run.out().contains("(generated)"), "{}", run.out());
    let run = cli(&s).run(&again).await;
    run.expect(0);
    assert!(run.out().contains("existing"), "{}", run.out());
    let conflict = [
        "task", "submit", "--url", &url, "--key", "mine", "--json", "[]",
    ];
    let run = cli(&s).run(&conflict).await;
    run.expect(1);
    assert!(
        run.stderr.contains("409 idempotency_conflict") && run.stderr.contains("idempotency_key:"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn submit_wait_ends_with_the_terminal_state() {
    let s = support::start().await;
    // 503 on the first call, then 200: the wait sees the retry through.
    let flaky = s.down.url("/flaky/1");
    let run = cli(&s)
        .run(&["task", "submit", "--url", &flaky, "--json", "{}", "--wait"])
        .await;
    run.expect(0);
    // The id, key and state at submit come first, then how it ended.
    assert_eq!(run.field("state"), "pending", "{}", run.out());
    assert!(
        run.out().lines().next().unwrap().starts_with("task "),
        "{}",
        run.out()
    );
    assert!(
        run.out()
            .ends_with("ended success after attempt 2 of 3, HTTP 200\n"),
        "{}",
        run.out()
    );

    // JSON output is asked before `submit` (there --json is the payload):
    // the final view, one line.
    let refused = s.down.url("/status/400");
    let run = cli(&s)
        .run(&[
            "task",
            "--json",
            "submit",
            "--url",
            &refused,
            "--json",
            r#"{"n":1}"#,
            "--max-attempts",
            "2",
            "--timeout-ms",
            "1000",
            "--wait",
        ])
        .await;
    run.expect(0);
    let view = run.json();
    assert_eq!(view["state"], "failed", "{view}");
    assert_eq!(view["error"], "http_400", "{view}");
    assert_eq!(view["max_attempts"], 2, "{view}");
    // The generated key and the id are told on stderr, stdout stays JSON.
    let key = view["idempotency_key"].as_str().unwrap();
    let id = view["id"].as_str().unwrap();
    assert!(run.stderr.contains(key), "{}", run.stderr);
    assert!(run.stderr.contains(id), "{}", run.stderr);
}

#[tokio::test]
async fn submit_asks_for_a_callback() {
    let mut s = support::start().await;
    let url = s.down.url("/ok");
    let done = s.down.url("/ok?done");
    let run = cli(&s)
        .run(&[
            "task",
            "--json",
            "submit",
            "--url",
            &url,
            "--json",
            "{}",
            "--callback-url",
            &done,
            "--callback-on",
            "success,canceled",
            "--wait",
        ])
        .await;
    run.expect(0);
    let view = run.json();
    assert_eq!(view["callback_url"], done.as_str(), "{view}");
    assert_eq!(
        view["callback_on"],
        json!(["success", "canceled"]),
        "{view}"
    );
    let id = view["id"].as_str().unwrap();
    let received = s.down.request_with_key(&format!("callback:{id}")).await;
    let body: Value = serde_json::from_slice(&received.body).unwrap();
    assert_eq!(body["id"], id);
    let run = cli(&s)
        .run(&["task", "submit", "--url", &url, "--callback-on", "pending"])
        .await;
    run.expect(2);
}

#[tokio::test]
async fn get_shows_the_task_and_result_writes_the_raw_bytes() {
    let s = support::start().await;
    let id = s.api.submit_new(&s.down.url("/bytes"), "raw").await;
    let view = s.api.wait_terminal(&id).await;
    assert_eq!(view["state"], "success", "{view}");

    let run = cli(&s).run(&["task", "get", &id]).await;
    run.expect(0);
    let out = run.out();
    assert_eq!(run.field("id"), id);
    assert_eq!(run.field("state"), "success");
    assert_eq!(run.field("key"), "raw");
    assert!(out.contains("attempt      1 of 3"), "{out}");
    assert!(out.contains("ATTEMPT  STARTED (UTC)"), "{out}");
    assert!(out.contains(" ago ("), "relative times: {out}");
    assert!(
        !out.contains('\x1b'),
        "no colours without a terminal: {out:?}"
    );

    let run = cli(&s).run(&["task", "get", &id, "--json"]).await;
    run.expect(0);
    assert_eq!(run.json(), s.api.task(&id).await);

    let run = cli(&s).run(&["task", "result", &id]).await;
    run.expect(0);
    assert_eq!(run.stdout, [0xff, 0x00, b'b', b'i', b'n']);
}

/// A result on a terminal cannot drive it (OSC 52 would write the
/// clipboard): control characters are escaped unless `--raw`; into a pipe
/// the bytes go as received.
#[tokio::test]
async fn result_escapes_control_characters_on_a_terminal_unless_raw() {
    use crate::support::downstream::TERMINAL_ESCAPES;
    let s = support::start().await;
    let id = s.api.submit_new(&s.down.url("/terminal"), "osc52").await;
    assert_eq!(s.api.wait_terminal(&id).await["state"], "success");
    let c = cli(&s);

    let piped = c.run(&["task", "result", &id]).await;
    piped.expect(0);
    assert_eq!(piped.stdout, TERMINAL_ESCAPES, "a pipe gets the bytes");

    let shown = c.run_on_terminal(&["task", "result", &id], "").await;
    shown.expect(0);
    let out = shown.out();
    // The terminal turns the kept line feeds into \r\n: count only
    // carriage returns that are not part of one.
    let without_line_ends = out.replace("\r\n", "\n");
    for raw in ['\x1b', '\x07', '\r'] {
        assert!(
            !without_line_ends.contains(raw),
            "{raw:?} reached the terminal: {out:?}"
        );
    }
    for escaped in [
        "\\u{1b}]52;c;cm0gLXJmIH4=\\u{7}",
        "\\u{1b}[31mred\\rover\\xff\tend",
    ] {
        assert!(out.contains(escaped), "{escaped:?} not in {out:?}");
    }
    assert!(
        out.starts_with("line 1\r\n"),
        "line feeds are kept: {out:?}"
    );

    let raw = c
        .run_on_terminal(&["task", "result", &id, "--raw"], "")
        .await;
    raw.expect(0);
    assert!(
        raw.out().contains("\x1b]52;c;cm0gLXJmIH4=\x07"),
        "--raw writes the bytes: {:?}",
        raw.out()
    );
}

#[tokio::test]
async fn list_filters_and_follows_every_page() {
    let s = support::start().await;
    let mut ok = Vec::new();
    for i in 0..5 {
        ok.push(
            s.api
                .submit_new(&s.down.url("/ok"), &format!("ok-{i}"))
                .await,
        );
    }
    let failed = [
        failing_task(&s, "bad-0").await,
        failing_task(&s, "bad-1").await,
    ];
    for id in ok.iter().chain(&failed) {
        s.api.wait_terminal(id).await;
    }
    let every: Vec<&String> = ok.iter().chain(&failed).collect();
    let dest = s.down.destination();
    let c = cli(&s);

    // (arguments, the ids listed in order)
    let cases: Vec<(Vec<&str>, Vec<&String>)> = vec![
        (vec!["--state", "failed"], failed.iter().collect()),
        (vec!["--error", "http_400"], failed.iter().collect()),
        (
            vec!["--state", "success", "--limit", "2"],
            ok[..2].iter().collect(),
        ),
        (vec!["--limit", "2", "--all"], every.clone()),
        (
            vec!["--destination", &dest, "--limit", "3", "--all"],
            every.clone(),
        ),
        (
            vec!["--state", "success", "--limit", "1", "--all"],
            ok.iter().collect(),
        ),
        (vec!["--key", "ok-3"], vec![&ok[3]]),
        (vec!["--state", "canceled", "--all"], vec![]),
    ];
    for (filters, expected) in cases {
        let mut args = vec!["task", "list", "--json"];
        args.extend(&filters);
        let run = c.run(&args).await;
        run.expect(0);
        let ids: Vec<String> = run
            .json_lines()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            ids,
            expected.iter().map(|id| id.as_str()).collect::<Vec<_>>(),
            "{filters:?}"
        );
    }

    // Without --all, more pages are told on stderr with the cursor.
    let run = c.run(&["task", "list", "--limit", "2", "--json"]).await;
    run.expect(0);
    assert_eq!(run.json_lines().len(), 2);
    assert!(run.stderr.contains("--after "), "{}", run.stderr);
    let cursor = run
        .stderr
        .split("--after ")
        .nth(1)
        .unwrap()
        .trim()
        .to_owned();
    let run = c
        .run(&["task", "list", "--limit", "2", "--json", "--after", &cursor])
        .await;
    run.expect(0);
    let third = run.json_lines()[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(&third, every[2]);

    // People get an aligned table with relative times, no colours on a pipe.
    let run = c.run(&["task", "list", "--all", "--limit", "3"]).await;
    run.expect(0);
    let out = run.out();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1 + every.len(), "{out}");
    assert!(lines[0].starts_with("ID  "), "{out}");
    let state_column = lines[0].find("STATE").unwrap();
    for (line, id) in lines[1..].iter().zip(&every) {
        assert!(line.starts_with(id.as_str()), "{out}");
        let state = &line[state_column..];
        assert!(
            state.starts_with("success") || state.starts_with("failed"),
            "{out}"
        );
        assert!(line.contains(" ago  "), "relative time: {out}");
    }
    assert!(!out.contains('\x1b'), "{out:?}");
}

/// A server whose page after cursor 7 comes back empty with cursor 7 (the
/// tasks after it still being written) `stalls` times, then with the last
/// task: `task list --all` asks again rather than failing at once, follows
/// a cursor that moves on to the end, and stops with exit 1 and the cursor
/// to go on from when it never does.
#[tokio::test]
async fn list_all_survives_a_cursor_that_does_not_advance() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tc_downstream::fake::{FakeServer, Reply, Script, Step};

    let run = async |stalls: usize| {
        let asked = Arc::new(AtomicUsize::new(0));
        let script = Script::with_rule({
            let asked = Arc::clone(&asked);
            move |call, _| {
                let page = if !call.path.contains("after=7") {
                    json!({"tasks": [{"id": "first"}], "next": "7"})
                } else if asked.fetch_add(1, Ordering::SeqCst) < stalls {
                    json!({"tasks": [], "next": "7"})
                } else {
                    json!({"tasks": [{"id": "last"}], "next": null})
                };
                Step::Reply(Reply::json(200, page.to_string()))
            }
        });
        let server = FakeServer::start(script).await.unwrap();
        let run = Cli::new(&server.url())
            .run(&["task", "list", "--all", "--json"])
            .await;
        (run, asked.load(Ordering::SeqCst))
    };

    let (moved_on, asked) = run(2).await;
    moved_on.expect(0);
    let ids: Vec<Value> = moved_on
        .json_lines()
        .iter()
        .map(|t| t["id"].clone())
        .collect();
    assert_eq!(ids, [json!("first"), json!("last")]);
    assert_eq!(asked, 3, "asked again until the cursor moved");

    let (stuck, asked) = run(usize::MAX).await;
    stuck.expect(1);
    assert_eq!(stuck.json_lines().len(), 1, "the first page was shown");
    assert!(
        stuck.stderr.contains("stayed at cursor 7") && stuck.stderr.contains("--after 7"),
        "{}",
        stuck.stderr
    );
    assert_eq!(asked, 5, "asked again four times, then stopped");
}

#[tokio::test]
async fn cancel_retry_and_delete_change_the_task() {
    let mut s = support::start().await;
    let id = s.api.submit_new(&s.down.url("/gate"), "held").await;
    s.down.request_with_key("held").await;
    let c = cli(&s);

    let run = c.run(&["task", "cancel", &id]).await;
    run.expect(0);
    assert!(run.out().contains("is canceled"), "{}", run.out());
    s.down.closed_while_held("held", 1).await;
    assert_eq!(s.api.task(&id).await["state"], "canceled");
    // Canceling again says the task had already finished; JSON is the API's.
    let run = c.run(&["task", "cancel", &id, "--json"]).await;
    run.expect(0);
    assert_eq!(run.json(), json!({"id": id, "state": "canceled"}));

    s.down.open_gate();
    let run = c.run(&["task", "retry", &id]).await;
    run.expect(0);
    assert!(run.out().contains("is pending again"), "{}", run.out());
    let done = s.api.wait_terminal(&id).await;
    assert_eq!(done["state"], "success", "{done}");

    check(
        &c,
        &[
            case(&["task", "retry", &id], 1, "", "409 task_not_retryable"),
            case(&["task", "delete", &id], 0, "deleted", ""),
            case(&["task", "get", &id], 1, "", "404 not_found"),
            case(&["task", "delete", &id], 1, "", "404 not_found"),
        ],
    )
    .await;
    assert_eq!(s.api.get(&format!("/tasks/{id}")).await.status, 404);

    // --json on a delete prints nothing (the API answers 204 without a
    // body); the exit code says it.
    let other = failing_task(&s, "gone").await;
    s.api.wait_terminal(&other).await;
    let run = c.run(&["task", "delete", &other, "--json"]).await;
    run.expect(0);
    assert!(run.stdout.is_empty(), "{}", run.out());
    // A task still running is not deleted.
    let running = s.api.submit_new(&s.down.url("/slow"), "busy").await;
    s.down.request_with_key("busy").await;
    let run = c.run(&["task", "delete", &running]).await;
    run.expect(1);
    assert!(
        run.stderr.contains("409 task_not_terminal"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn watch_prints_each_attempt_and_state_until_the_end() {
    let mut s = support::start().await;
    // Two 503s, then a 200.
    let id = s.api.submit_new(&s.down.url("/flaky/2"), "watched").await;
    let run = cli(&s).run(&["task", "watch", &id]).await;
    run.expect(0);
    let out = run.out();
    for expected in [
        "attempt 1  started",
        "attempt 1  HTTP 503, http_503",
        "attempt 2  HTTP 503, http_503",
        "attempt 3  HTTP 200",
    ] {
        assert!(out.contains(expected), "{expected:?} in:\n{out}");
    }
    let last = out.lines().last().unwrap();
    assert!(last.ends_with("state      success"), "{out}");
    // Each attempt told once.
    assert_eq!(out.matches("attempt 2  started").count(), 1, "{out}");

    // JSON: the task view at each change, one per line, the last final.
    let run = cli(&s).run(&["task", "watch", &id, "--json"]).await;
    run.expect(0);
    let views = run.json_lines();
    assert_eq!(views.last().unwrap(), &s.api.task(&id).await);

    // A canceled task ends the watch too.
    let held = s.api.submit_new(&s.down.url("/slow"), "watch-cancel").await;
    let watch = {
        let c = cli(&s);
        let id = held.clone();
        tokio::spawn(async move { c.run(&["task", "watch", &id]).await })
    };
    s.down.request_with_key("watch-cancel").await;
    assert_eq!(s.api.cancel(&held).await.status, 200);
    let run = watch.await.unwrap();
    run.expect(0);
    assert!(run.out().trim_end().ends_with("canceled"), "{}", run.out());
}

#[tokio::test]
async fn bulk_shows_the_count_and_refuses_without_a_terminal_or_yes() {
    let s = support::start().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(failing_task(&s, &format!("bulk-{i}")).await);
    }
    for id in &ids {
        s.api.wait_terminal(id).await;
    }
    let c = cli(&s);

    // No terminal, no --yes: refused (exit 2) after telling the count;
    // nothing changed.
    let run = c.run(&["task", "bulk", "retry", "--state", "failed"]).await;
    run.expect(2);
    assert!(
        run.stderr.contains("3 tasks match state=failed"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("--yes"), "{}", run.stderr);
    for id in &ids {
        assert_eq!(s.api.task(id).await["state"], "failed");
    }

    let run = c
        .run(&["task", "bulk", "cancel", "--error", "http_400", "--yes"])
        .await;
    run.expect(0);
    assert!(
        run.out().contains("cancel: 0 of 3 matching tasks changed"),
        "{}",
        run.out()
    );

    // --yes applies; --json prints the API's answer.
    let run = c
        .run(&[
            "task", "bulk", "delete", "--state", "failed", "--key", "bulk-0", "--yes", "--json",
        ])
        .await;
    run.expect(0);
    let answer = run.json();
    assert_eq!(
        (answer["matched"].clone(), answer["applied"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(answer["sample"], json!([ids[0]]));
    assert_eq!(s.api.get(&format!("/tasks/{}", ids[0])).await.status, 404);

    let run = c
        .run(&["task", "bulk", "retry", "--state", "failed", "-y"])
        .await;
    run.expect(0);
    assert!(
        run.out().contains("retry: 2 of 2 matching tasks changed"),
        "{}",
        run.out()
    );
    for id in &ids[1..] {
        // Retried: they run (and fail) again.
        let view = s.api.wait_terminal(id).await;
        assert_eq!(view["attempts"].as_array().map(Vec::len), Some(2), "{view}");
    }

    // A filter the server refuses is its 400.
    let run = c
        .run(&["task", "bulk", "retry", "--destination", "no-port", "--yes"])
        .await;
    run.expect(1);
    assert!(run.stderr.contains("400 invalid_request"), "{}", run.stderr);
}

#[tokio::test]
async fn bulk_on_a_terminal_asks_and_acts_only_on_yes() {
    let s = support::start().await;
    let id = failing_task(&s, "ask").await;
    s.api.wait_terminal(&id).await;
    let c = cli(&s);
    let args = ["task", "bulk", "delete", "--state", "failed"];

    let declined = c.run_on_terminal(&args, "n\n").await;
    declined.expect(0);
    let shown = declined.out();
    assert!(shown.contains("1 task matches state=failed"), "{shown}");
    assert!(shown.contains("delete 1 task? [y/N]"), "{shown}");
    assert!(shown.contains("nothing changed"), "{shown}");
    assert_eq!(s.api.task(&id).await["state"], "failed");

    let accepted = c.run_on_terminal(&args, "y\n").await;
    accepted.expect(0);
    assert!(
        accepted
            .out()
            .contains("delete: 1 of 1 matching task changed"),
        "{}",
        accepted.out()
    );
    assert_eq!(s.api.get(&format!("/tasks/{id}")).await.status, 404);
}

#[tokio::test]
async fn colours_only_on_a_terminal_and_never_with_no_color() {
    let s = support::start().await;
    let id = failing_task(&s, "red").await;
    s.api.wait_terminal(&id).await;
    let c = cli(&s);
    let on_terminal = c.run_on_terminal(&["task", "list"], "").await;
    on_terminal.expect(0);
    assert!(
        on_terminal.out().contains("\x1b[31mfailed\x1b[0m"),
        "{:?}",
        on_terminal.out()
    );
    let no_color = c
        .env("NO_COLOR", "1")
        .run_on_terminal(&["task", "list"], "")
        .await;
    no_color.expect(0);
    assert!(no_color.out().contains("failed"), "{:?}", no_color.out());
    assert!(!no_color.out().contains('\x1b'), "{:?}", no_color.out());
}

#[tokio::test]
async fn destinations_are_listed_set_paused_and_resumed() {
    let s = support::start().await;
    let id = s.api.submit_new(&s.down.url("/ok"), "to-dest").await;
    s.api.wait_terminal(&id).await;
    let dest = s.down.destination();
    let c = cli(&s);
    let api_view = |s: &Setup| {
        let api = s.api.clone();
        let path = format!("/destinations/{dest}");
        async move { api.get(&path).await.json() }
    };

    let run = c.run(&["destination", "list", "--json"]).await;
    run.expect(0);
    let listed = run.json_lines();
    assert_eq!(listed.len(), 1, "{}", run.out());
    assert_eq!(listed[0]["destination"], dest.as_str());
    assert_eq!(listed[0], api_view(&s).await);
    let run = c.run(&["destination", "list"]).await;
    run.expect(0);
    assert!(run.out().starts_with("DESTINATION  "), "{}", run.out());
    assert!(
        run.out().lines().nth(1).unwrap().starts_with(&dest),
        "{}",
        run.out()
    );

    let run = c
        .run(&[
            "destination",
            "set",
            &dest,
            "--max-in-flight",
            "2",
            "--rate",
            "5",
            "--burst",
            "3",
        ])
        .await;
    run.expect(0);
    assert_eq!(run.field("max in flight"), "2", "{}", run.out());
    let view = api_view(&s).await;
    assert_eq!(
        (view["max_in_flight"].clone(), view["burst"].clone()),
        (json!(2), json!(3)),
        "{view}"
    );
    assert_eq!(view["rate_per_s"].as_f64(), Some(5.0), "{view}");

    // `none` clears; a flag left out is kept.
    let run = c
        .run(&["destination", "set", &dest, "--rate", "none", "--json"])
        .await;
    run.expect(0);
    let view = run.json();
    assert_eq!(
        (view["rate_per_s"].clone(), view["max_in_flight"].clone()),
        (Value::Null, json!(2))
    );

    let run = c.run(&["destination", "pause", &dest]).await;
    run.expect(0);
    assert_eq!(run.field("paused"), "yes");
    assert_eq!(api_view(&s).await["paused"], true);
    let run = c.run(&["destination", "resume", &dest, "--json"]).await;
    run.expect(0);
    assert_eq!(run.json()["paused"], false);
    assert_eq!(api_view(&s).await["paused"], false);

    check(
        &c,
        &[
            // The server's own checks: exit 1 with its message.
            case(
                &["destination", "set", &dest, "--max-in-flight", "0"],
                1,
                "",
                "max_in_flight",
            ),
            case(
                &["destination", "pause", "no-port"],
                1,
                "",
                "400 invalid_request",
            ),
            // No setting at all: usage.
            case(&["destination", "set", &dest], 2, "", "--max-in-flight"),
        ],
    )
    .await;
}

#[tokio::test]
async fn exit_codes_say_refused_usage_or_unreachable() {
    let s = support::start().await;
    // A port nothing listens on: bound, then let go.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let nowhere = format!("http://{closed}");
    // https:// to a server that speaks plain HTTP: the TLS handshake fails.
    let tls_to_plain = format!("https://{}", s.server.addr);
    let unknown = "0190b8d0-0000-7000-8000-000000000000";
    let pending = s.api.submit_new(&s.down.url("/slow"), "no-result").await;
    check(
        &cli(&s),
        &[
            case(&["task", "get", unknown], 1, "", "404 not_found"),
            case(&["task", "get", "not-an-id"], 1, "", "404 not_found"),
            case(&["task", "result", &pending], 1, "", "404 not_found"),
            case(&["task", "cancel", unknown], 1, "", "404 not_found"),
            case(
                &["task", "list", "--created-after", "yesterday"],
                1,
                "",
                "created_after",
            ),
            case(
                &["task", "submit", "--url", "ftp://x/", "--json", "{}"],
                1,
                "",
                "400 invalid_request",
            ),
            case(
                &["task", "list", "--server", &nowhere],
                3,
                "",
                "cannot reach the server",
            ),
            case(
                &["task", "--server", &nowhere, "get", unknown],
                3,
                "",
                "onnection refused",
            ),
            case(
                &["destination", "list", "--server", &nowhere],
                3,
                "",
                &nowhere,
            ),
            case(
                &["task", "list", "--server", &tls_to_plain],
                3,
                "",
                &tls_to_plain,
            ),
            case(&["task", "list", "--limit", "0"], 2, "", "--limit"),
            case(&["task", "frobnicate"], 2, "", "frobnicate"),
            // Without --json, as the API: a POST of `{}` (exit 0).
            case(&["task", "submit", "--url", "http://x/"], 0, "created", ""),
            case(
                &["task", "submit", "--url", "http://x/", "--json", "{"],
                2,
                "",
                "JSON",
            ),
            case(
                &["task", "list", "--server", "localhost:8080"],
                2,
                "",
                "--server",
            ),
            case(&["destination", "nothing"], 2, "", "nothing"),
        ],
    )
    .await;
    // The server URL comes from TC_SERVER_URL too.
    let run = Cli::new(&nowhere).run(&["task", "list"]).await;
    run.expect(3);
}

#[tokio::test]
async fn the_token_goes_by_flag_or_environment() {
    let s = support::start_with(|c, _| {
        c.flag("--api-token", "s3cret");
    })
    .await;
    let c = cli(&s);
    check(
        &c,
        &[
            case(&["task", "list"], 1, "", "401 unauthorized"),
            // A 401 says how to give the credential.
            case(
                &["task", "list"],
                1,
                "",
                "no credential given; this route needs the header Authorization: Bearer <token> \
                 (the API token or a tenant key); pass --token or set TC_API_TOKEN",
            ),
            case(
                &["task", "list", "--token", "wrong"],
                1,
                "",
                "the credential was not accepted",
            ),
            case(&["task", "list", "--token", "s3cret", "--json"], 0, "", ""),
            case(&["task", "--token", "s3cret", "list"], 0, "", ""),
            case(&["destination", "list", "--token", "s3cret"], 0, "", ""),
            case(&["destination", "list"], 1, "", "401 unauthorized"),
        ],
    )
    .await;
    let with_env = c.env("TC_API_TOKEN", "s3cret");
    check(
        &with_env,
        &[
            case(&["task", "list"], 0, "", ""),
            case(&["destination", "list", "--json"], 0, "", ""),
            // The flag wins over the environment.
            case(&["task", "list", "--token", "wrong"], 1, "", "401"),
        ],
    )
    .await;
    // Submitting with the token works end to end.
    let url = s.down.url("/ok");
    let run = with_env
        .run(&["task", "submit", "--url", &url, "--json", "{}", "--wait"])
        .await;
    run.expect(0);
    assert!(run.out().contains("ended success"), "{}", run.out());
}

#[tokio::test]
async fn healthcheck_exits_zero_only_on_a_healthy_answer() {
    // A token on the server: /healthz stays open, the probe needs none.
    let s = support::start_with(|c, _| {
        c.flag("--api-token", "s3cret");
    })
    .await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let nowhere = format!("http://{closed}");
    let c = cli(&s);
    check(
        &c,
        &[
            case(&["healthcheck"], 0, "ok", ""),
            case(
                &["healthcheck", "--server", &nowhere],
                3,
                "",
                "cannot reach the server",
            ),
            case(&["healthcheck", "--timeout-ms", "0"], 2, "", "timeout-ms"),
        ],
    )
    .await;
    // The store cannot write (another writer holds the lock): /healthz is
    // 503 and the probe fails, though HTTP answers.
    let blocker = rusqlite::Connection::open(s.config.db()).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    check(&c, &[case(&["healthcheck"], 1, "", "503")]).await;
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);
    check(&c, &[case(&["healthcheck"], 0, "ok", "")]).await;
}

/// Helper check: a run's JSON lines are what [`Run::json_lines`] reads.
#[test]
fn json_lines_reject_what_is_not_one_object_per_line() {
    let run = |out: &str| Run {
        code: Some(0),
        stdout: out.as_bytes().to_vec(),
        stderr: String::new(),
    };
    assert_eq!(run("{\"a\":1}\n{\"b\":2}\n").json_lines().len(), 2);
    for bad in ["[1]\n", "{\"a\":1}\n\n", "{\"a\":\n1}\n"] {
        let result = std::panic::catch_unwind(|| run(bad).json_lines());
        assert!(result.is_err(), "{bad:?} accepted");
    }
}

/// `destination set --header --signing-secret` puts a credential and a
/// secret on a destination (shown back as a name and a count), and
/// `task submit --method --header` sends a call that carries the task's
/// header, the destination's credential and a signature; `--clear-*`
/// remove them.
#[tokio::test]
async fn headers_and_signing_secrets_from_the_command_line() {
    let mut s = support::start().await;
    let c = cli(&s);
    let dest = s.down.destination();
    let secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let run = c
        .run(&[
            "destination",
            "set",
            &dest,
            "--header",
            "Authorization: Bearer cli-t0ken",
            "--signing-secret",
            secret,
        ])
        .await;
    run.expect(0);
    assert_eq!(run.field("headers"), "authorization");
    assert!(run.out().contains("signed (1 secret)"), "{}", run.out());
    assert!(!run.out().contains("cli-t0ken") && !run.out().contains(secret));

    let url = s.down.url("/ok");
    let run = c
        .run(&[
            "task",
            "submit",
            "--url",
            &url,
            "--key",
            "cli-put",
            "--method",
            "put",
            "--header",
            "X-Tenant: acme",
            "--json",
            "{\"n\":1}",
        ])
        .await;
    run.expect(0);
    let received = s.down.request_with_key("cli-put").await;
    assert_eq!(received.header("x-tenant"), Some("acme"));
    assert_eq!(received.header("authorization"), Some("Bearer cli-t0ken"));
    assert!(
        received
            .header("webhook-signature")
            .is_some_and(|s| s.starts_with("v1,"))
    );
    let run = c.run(&["task", "get", &run.field("task")]).await;
    run.expect(0);
    assert_eq!(run.field("method"), "PUT");
    assert!(run.out().contains("x-tenant: acme"), "{}", run.out());

    // A GET needs no --json; the cleared destination adds nothing.
    let run = c
        .run(&[
            "destination",
            "set",
            &dest,
            "--clear-headers",
            "--clear-signing",
        ])
        .await;
    run.expect(0);
    assert_eq!(
        (run.field("headers"), run.field("signing")),
        ("-".into(), "-".into())
    );
    let run = c
        .run(&[
            "task", "submit", "--url", &url, "--key", "cli-get", "--method", "GET",
        ])
        .await;
    run.expect(0);
    let received = s.down.request_with_key("cli-get").await;
    assert!(received.body.is_empty());
    assert_eq!(received.header("authorization"), None);
    assert_eq!(received.header("webhook-signature"), None);
}

#[tokio::test]
async fn schedules_are_created_listed_paused_triggered_and_deleted() {
    let s = support::start().await;
    let c = cli(&s);
    let task = json!({"url": s.down.url("/ok"), "json": {"report": "nightly"}}).to_string();
    let run = c
        .run(&[
            "schedule",
            "create",
            "nightly",
            "--cron",
            "30 2 * * MON-FRI",
            "--timezone",
            "Europe/Berlin",
            "--task",
            &task,
            "--overlap",
            "skip",
        ])
        .await;
    run.expect(0);
    assert_eq!(run.field("name"), "nightly", "{}", run.out());
    assert_eq!(run.field("overlap"), "skip", "{}", run.out());
    let api_view = s.api.get("/schedules/nightly").await.json();
    assert_eq!(api_view["timezone"], "Europe/Berlin");
    assert_eq!(api_view["next_runs"].as_array().map(Vec::len), Some(5));

    let run = c.run(&["schedule", "list", "--json"]).await;
    run.expect(0);
    assert_eq!(run.json_lines(), vec![api_view.clone()]);
    let run = c.run(&["schedule", "list"]).await;
    run.expect(0);
    assert!(run.out().starts_with("NAME  "), "{}", run.out());
    let run = c.run(&["schedule", "get", "nightly", "--json"]).await;
    run.expect(0);
    assert_eq!(run.json(), api_view);

    let run = c.run(&["schedule", "pause", "nightly"]).await;
    run.expect(0);
    assert_eq!(run.field("paused"), "yes", "{}", run.out());
    let run = c.run(&["schedule", "resume", "nightly", "--json"]).await;
    run.expect(0);
    assert_eq!(run.json()["paused"], false);

    // A trigger submits now; the task runs like any other.
    let run = c.run(&["schedule", "trigger", "nightly", "--json"]).await;
    run.expect(0);
    let fired = run.json();
    let key = fired["idempotency_key"].as_str().unwrap();
    assert!(key.starts_with("schedule:nightly:manual:"), "{key}");
    let id = fired["id"].as_str().unwrap().to_owned();
    assert_eq!(s.api.wait_terminal(&id).await["state"], "success");
    let view = s.api.get("/schedules/nightly").await.json();
    assert_eq!(view["last_task_id"], fired["id"]);

    let run = c.run(&["schedule", "delete", "nightly"]).await;
    run.expect(0);
    assert_eq!(s.api.get("/schedules/nightly").await.status, 404);
    assert_eq!(s.api.get(&format!("/tasks/{id}")).await.status, 200);

    check(
        &c,
        &[
            // The server's own checks: exit 1 with its message.
            case(
                &[
                    "schedule",
                    "create",
                    "bad",
                    "--cron",
                    "61 * * * *",
                    "--task",
                    &task,
                ],
                1,
                "",
                "cron",
            ),
            case(&["schedule", "get", "nightly"], 1, "", "404 not_found"),
            // No --cron: usage.
            case(
                &["schedule", "create", "x", "--task", &task],
                2,
                "",
                "--cron",
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn tenants_and_their_keys_are_managed_and_a_key_is_a_token() {
    let s = support::start_with(|c, _| {
        c.flag("--api-token", "s3cret");
    })
    .await;
    let admin = cli(&s).env("TC_API_TOKEN", "s3cret");
    let run = admin
        .run(&[
            "tenant",
            "create",
            "acme",
            "--weight",
            "3",
            "--max-pending",
            "10",
            "--submit-rate-per-s",
            "2.5",
            "--signing-secret",
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
        ])
        .await;
    run.expect(0);
    assert_eq!(run.field("name"), "acme", "{}", run.out());
    assert_eq!(run.field("weight"), "3", "{}", run.out());
    // The secret's count, never the secret.
    assert_eq!(run.field("signing secrets"), "1", "{}", run.out());
    assert!(!run.out().contains("C2FVsBQ"), "{}", run.out());
    let run = admin
        .run(&["tenant", "set", "acme", "--clear-signing", "--json"])
        .await;
    run.expect(0);
    assert_eq!(run.json()["signing_secrets"], 0);
    let run = admin
        .run(&[
            "destination",
            "set",
            "127.0.0.1:9",
            "--share-with-tenant",
            "acme",
            "--share-with-tenant",
            "zeta",
        ])
        .await;
    run.expect(0);
    assert!(
        run.out()
            .lines()
            .any(|l| l.starts_with("shared with") && l.contains("acme, zeta")),
        "{}",
        run.out()
    );
    let run = admin
        .run(&[
            "destination",
            "set",
            "127.0.0.1:9",
            "--share-with-none",
            "--json",
        ])
        .await;
    run.expect(0);
    assert_eq!(run.json()["share_with_tenants"], json!([]));
    let run = admin
        .run(&["tenant", "set", "acme", "--max-pending", "none", "--json"])
        .await;
    run.expect(0);
    assert_eq!(run.json()["max_pending"], Value::Null);
    assert_eq!(run.json()["submit_rate_per_s"], 2.5);

    // The key alone on stdout, its id on stderr.
    let run = admin.run(&["tenant", "key", "create", "acme"]).await;
    run.expect(0);
    let key = run.out().trim().to_owned();
    assert!(key.starts_with("tck_") && !key.contains('\n'), "{key}");
    assert!(run.stderr.contains("key_"), "{}", run.stderr);
    let listed = admin.run(&["tenant", "get", "acme", "--json"]).await;
    listed.expect(0);
    let key_id = listed.json()["keys"][0]["id"].as_str().unwrap().to_owned();
    assert!(!listed.out().contains(&key), "a key is never shown again");
    let run = admin.run(&["tenant", "list"]).await;
    run.expect(0);
    assert!(run.out().starts_with("NAME  "), "{}", run.out());

    // The key as --token: its own tasks, not the admin's routes.
    let url = s.down.url("/ok");
    let tenant = cli(&s).env("TC_API_TOKEN", &key);
    let run = tenant
        .run(&["task", "--json", "submit", "--url", &url, "--json", "{}"])
        .await;
    run.expect(0);
    assert_eq!(run.json()["tenant"], "acme");
    // The admin's filter by tenant.
    let run = admin
        .run(&["task", "list", "--tenant", "acme", "--json"])
        .await;
    run.expect(0);
    assert_eq!(run.json_lines().len(), 1, "{}", run.out());
    // The admin's table names each task's tenant once tenants have tasks.
    let run = admin.run(&["task", "list"]).await;
    run.expect(0);
    let table = run.out();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[..3], ["ID", "TENANT", "STATE"], "{table}");
    assert!(table.contains("acme"), "{table}");
    check(
        &tenant,
        &[
            case(&["task", "list"], 0, "", ""),
            case(&["destination", "list"], 1, "", "403 forbidden"),
            case(&["tenant", "list"], 1, "", "403 forbidden"),
        ],
    )
    .await;
    check(
        &admin,
        &[
            case(&["tenant", "create", "acme"], 1, "", "409 tenant_exists"),
            case(&["tenant", "create", "Bad"], 1, "", "name"),
            case(&["tenant", "set", "acme"], 2, "", "--weight"),
            case(&["tenant", "delete", "acme"], 1, "", "409 tenant_not_empty"),
            case(
                &["tenant", "key", "revoke", "acme", &key_id],
                0,
                "revoked",
                "",
            ),
        ],
    )
    .await;
    // A revoked key reads as any credential not accepted.
    check(
        &tenant,
        &[case(
            &["task", "list"],
            1,
            "",
            "401 unauthorized): Authorization: the credential was not accepted",
        )],
    )
    .await;
}

/// A usage error names the argument (a `--header` by its
/// position), never the value given: a malformed header, token or JSON
/// body may hold a credential. Every run is refused before any request
/// (exit 2), so no server is needed.
#[tokio::test]
async fn usage_errors_never_show_a_credential() {
    const SECRET: &str = "SECRET-7f3a";
    let bearer = format!("Authorization Bearer {SECRET}");
    let empty_name = format!(": {SECRET}");
    let spaced = format!("Bearer {SECRET}");
    let task = format!(r#"{{"url":"http://x/","headers":{{"Authorization":"Bearer {SECRET}"}}"#);
    let json = format!(r#"{{"password":"{SECRET}""#);
    let cli = Cli::new("http://127.0.0.1:9");
    let submit = ["task", "submit", "--url", "http://x/", "--json", "{}"];
    let runs: Vec<(Vec<&str>, &str)> = vec![
        (
            [&submit[..], &["--header", &bearer]].concat(),
            "--header #1",
        ),
        (
            [
                &submit[..],
                &["--header", "X-A: 1", "--header", &empty_name],
            ]
            .concat(),
            "--header #2",
        ),
        (
            vec!["destination", "set", "127.0.0.1:9", "--header", &bearer],
            "--header #1",
        ),
        (vec!["task", "list", "--token", &spaced], "--token"),
        (
            vec!["task", "submit", "--url", "http://x/", "--json", &json],
            "--json",
        ),
        (
            vec![
                "schedule", "create", "s", "--cron", "@daily", "--task", &task,
            ],
            "--task",
        ),
    ];
    for (args, names) in &runs {
        let run = cli.run(args).await;
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(names), "{args:?}: {}", run.stderr);
        assert!(!run.stderr.contains(SECRET), "{args:?}: {}", run.stderr);
        assert!(!run.out().contains(SECRET), "{args:?}: {}", run.out());
    }
    // The token from the environment likewise.
    let run = cli
        .env("TC_API_TOKEN", &spaced)
        .run(&["task", "list"])
        .await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("--token"), "{}", run.stderr);
    assert!(!run.stderr.contains(SECRET), "{}", run.stderr);
}
