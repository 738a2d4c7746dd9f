//! `tc-server demo`: the product in four steps, on a temporary database and
//! a built-in downstream, talking to the real HTTP API over a socket.
//!
//! The walk-through is the output, so this module prints to stdout.
#![allow(clippy::print_stdout)]

mod downstream;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tc_model::{State, TaskId};
use tc_worker::{AttemptEnded, WorkerConfig};
use tokio::sync::broadcast;

use self::downstream::DemoDownstream;
use crate::serve::{self, ServeError, Settings};

/// The longest any one step may take before the demo gives up.
const STEP_GUARD: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
enum DemoError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Serve(#[from] ServeError),
    #[error("calling the API: {0}")]
    Api(String),
    #[error("unexpected: {0}")]
    Unexpected(String),
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
}

/// Runs the walk-through; exit code 0 when every step showed what it should.
pub(crate) async fn run() -> ExitCode {
    match walk_through().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tc-server demo: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn walk_through() -> Result<(), DemoError> {
    let dir = tempfile::tempdir()?;
    let downstream = DemoDownstream::start().await?;
    let settings = settings(dir.path().join("demo.db").into());
    let running = serve::start(settings).await?;
    let mut demo = Demo {
        api: ApiClient::new(running.addr()),
        ended: running.control().subscribe(),
        printed: 0,
    };

    println!("taskcenter demo");
    println!("===============");
    println!("taskcenter is running on http://{}", running.addr());
    println!("with a temporary database in {}.", dir.path().display());
    println!(
        "A small downstream service is running on {}:",
        downstream.url("")
    );
    println!("  /flaky  answers 503 (busy) the first time, then 200");
    println!("  /reject answers 400 (bad request)");
    println!("  /slow   never answers");
    println!();

    demo.retried_until_success(&downstream).await?;
    demo.failed_on_4xx(&downstream).await?;
    demo.canceled_in_flight(&downstream).await?;

    running.shutdown().await?;
    println!("Done: taskcenter shut down gracefully and the temporary database is gone.");
    println!(
        "Run it for real with `cargo run --release -p tc-server`; the README shows the curl commands."
    );
    Ok(())
}

fn settings(db: crate::store::DbTarget) -> Settings {
    Settings {
        db,
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        admin_listen: None,
        store: tc_store::StoreConfig::default(),
        worker: WorkerConfig {
            concurrency: 4,
            shutdown_grace: Duration::from_secs(1),
            // A short backoff keeps the demo quick; the production default
            // starts at 200 ms and doubles.
            retry: tc_retry::Policy {
                base: Duration::from_millis(300),
                cap: Duration::from_secs(1),
                ..tc_retry::Policy::default()
            },
            ..WorkerConfig::default()
        },
        http: tc_http::HttpConfig {
            shutdown_grace: Duration::from_secs(1),
            ..tc_http::HttpConfig::default()
        },
        downstream_ca_file: None,
        // The demo's downstream is on 127.0.0.1.
        deny_private_destinations: false,
        retention: tc_worker::Retention::default(),
        // The demo runs on SQLite.
        postgres: tc_store_pg::PgConfig::default(),
        otlp: None,
        jwt: crate::jwt::JwtSetup::default(),
        secret_key_files: Vec::new(),
    }
}

struct Demo {
    api: ApiClient,
    ended: broadcast::Receiver<AttemptEnded>,
    /// How many of the downstream's calls were printed so far.
    printed: usize,
}

impl Demo {
    async fn retried_until_success(
        &mut self,
        downstream: &DemoDownstream,
    ) -> Result<(), DemoError> {
        println!("1. A task whose downstream is busy at first");
        let task = json!({
            "url": downstream.url("/flaky"),
            "json": {"order": 1001, "item": "coffee beans"},
            "idempotency_key": "order-1001",
        });
        let id = self.submit(&task, StatusCode::CREATED).await?;
        println!("   The answer came at once; the worker calls the downstream in the background.");
        self.task_finished(id).await?;
        self.print_downstream_calls(downstream);
        let view = self.show(id).await?;
        expect(&view, "state", "success")?;
        expect(&view, "attempt", 2)?;
        println!("   -> success on attempt 2: the 503 was retried after a short backoff,");
        println!(
            "      with the same Idempotency-Key, so the downstream can tell it is the same order."
        );
        println!();

        println!("2. The same request again (a client retrying after a timeout, say)");
        let again = self.submit(&task, StatusCode::OK).await?;
        if again != id {
            return Err(DemoError::Unexpected(format!(
                "resubmit gave {again}, not {id}"
            )));
        }
        let quiet = downstream.script.read(|r| r.count()) == self.printed;
        println!(
            "   -> the same task {id}: nothing new was created{}.",
            if quiet {
                " and the downstream was not called again"
            } else {
                ""
            }
        );
        println!();
        Ok(())
    }

    async fn failed_on_4xx(&mut self, downstream: &DemoDownstream) -> Result<(), DemoError> {
        println!("3. A task the downstream refuses");
        let task = json!({
            "url": downstream.url("/reject"),
            "json": {"order": 1002, "item": "unicorn"},
            "idempotency_key": "order-1002",
            "max_attempts": 5,
        });
        let id = self.submit(&task, StatusCode::CREATED).await?;
        self.task_finished(id).await?;
        self.print_downstream_calls(downstream);
        let view = self.show(id).await?;
        expect(&view, "state", "failed")?;
        expect(&view, "attempt", 1)?;
        println!("   -> failed after one call although 5 attempts were allowed: a 400 means the");
        println!("      request itself is wrong, and sending it again would not help.");
        println!();
        Ok(())
    }

    async fn canceled_in_flight(&mut self, downstream: &DemoDownstream) -> Result<(), DemoError> {
        println!("4. Canceling a task while its call is in flight");
        let task = json!({
            "url": downstream.url("/slow"),
            "json": {"report": "yearly"},
            "idempotency_key": "report-2024",
            "timeout_ms": 60000,
        });
        let id = self.submit(&task, StatusCode::CREATED).await?;
        let on_slow = |r: &tc_downstream::fake::Record| r.calls().iter().any(|c| c.path == "/slow");
        wait_on(downstream, "the call to /slow", move |r| {
            on_slow(r).then_some(())
        })
        .await?;
        println!("   downstream: call received on /slow; it is holding the connection open");
        println!("   POST /tasks/{id}/cancel");
        let (status, answer) = self
            .api
            .call(Method::POST, &format!("/tasks/{id}/cancel"), None)
            .await?;
        println!("   <- {status} {answer}");
        wait_on(downstream, "the downstream connection to close", |r| {
            r.abandoned().any(|(c, _)| c.path == "/slow").then_some(())
        })
        .await?;
        println!("   downstream: the connection for /slow was closed by taskcenter");
        let view = self.show(id).await?;
        expect(&view, "state", "canceled")?;
        println!(
            "   -> canceled, and the call really stopped: its connection is gone, not left running."
        );
        println!();
        Ok(())
    }

    /// POSTs the task, prints the exchange, checks the status; the task id.
    async fn submit(&mut self, task: &Value, expected: StatusCode) -> Result<TaskId, DemoError> {
        println!("   POST /tasks {task}");
        let (status, view) = self.api.call(Method::POST, "/tasks", Some(task)).await?;
        let id = view["id"]
            .as_str()
            .and_then(|id| id.parse::<TaskId>().ok())
            .ok_or_else(|| DemoError::Unexpected(format!("no task id in {view}")))?;
        println!("   <- {status}: task {id}, state {}", plain(&view["state"]));
        if status != expected {
            return Err(DemoError::Unexpected(format!(
                "expected {expected}, got {status}"
            )));
        }
        Ok(id)
    }

    /// GETs the task and prints what a client would look at.
    async fn show(&mut self, id: TaskId) -> Result<Value, DemoError> {
        let (_, view) = self
            .api
            .call(Method::GET, &format!("/tasks/{id}"), None)
            .await?;
        println!("   GET /tasks/{id}");
        println!(
            "   <- state {}, attempt {} of {}, http_status {}, error {}, result {}",
            plain(&view["state"]),
            plain(&view["attempt"]),
            plain(&view["max_attempts"]),
            plain(&view["http_status"]),
            plain(&view["error"]),
            plain(&view["result"])
        );
        for attempt in view["attempts"].as_array().into_iter().flatten() {
            println!(
                "      attempt {}: http_status {}, error {}, {} ms",
                plain(&attempt["n"]),
                plain(&attempt["http_status"]),
                plain(&attempt["error"]),
                plain(&attempt["duration_ms"])
            );
        }
        Ok(view)
    }

    /// Waits until the worker reports the task's final state.
    async fn task_finished(&mut self, id: TaskId) -> Result<State, DemoError> {
        let wait = async {
            loop {
                match self.ended.recv().await {
                    Ok(e) if e.task_id == id && e.state.is_terminal() => return Ok(e.state),
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => {
                        return Err(DemoError::Unexpected("the worker stopped".into()));
                    }
                }
            }
        };
        tokio::time::timeout(STEP_GUARD, wait)
            .await
            .map_err(|_| DemoError::Timeout("the task to finish"))?
    }

    /// Prints the calls the downstream answered since the last print.
    fn print_downstream_calls(&mut self, downstream: &DemoDownstream) {
        let lines: Vec<String> = downstream.script.read(|r| {
            (self.printed..r.calls().len())
                .filter_map(|i| {
                    let (call, status) = (&r.calls()[i], r.status_of(i)?);
                    let header = |name| call.header(name).unwrap_or("-");
                    Some(format!(
                        "   downstream: {} called (X-Task-Attempt {}, Idempotency-Key {}) -> answered {status}",
                        call.path,
                        header("x-task-attempt"),
                        header("idempotency-key"),
                    ))
                })
                .collect()
        });
        self.printed = downstream.script.read(|r| r.calls().len());
        for line in lines {
            println!("{line}");
        }
    }
}

/// Waits (within the step guard) until the downstream's record shows `what`.
async fn wait_on(
    downstream: &DemoDownstream,
    what: &'static str,
    found: impl Fn(&tc_downstream::fake::Record) -> Option<()>,
) -> Result<(), DemoError> {
    tokio::time::timeout(STEP_GUARD, downstream.script.wait_for(found))
        .await
        .map_err(|_| DemoError::Timeout(what))
}

/// A JSON value as a person reads it: strings without their quotes.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn expect(view: &Value, field: &str, wanted: impl Into<Value>) -> Result<(), DemoError> {
    let wanted = wanted.into();
    if view[field] == wanted {
        Ok(())
    } else {
        Err(DemoError::Unexpected(format!(
            "{field} is {}, expected {wanted}",
            view[field]
        )))
    }
}

/// A JSON client for the demo's own server.
struct ApiClient {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl ApiClient {
    fn new(addr: SocketAddr) -> ApiClient {
        ApiClient {
            base: format!("http://{addr}"),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), DemoError> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        let body = match body {
            Some(json) => {
                request = request.header(http::header::CONTENT_TYPE, "application/json");
                Bytes::from(json.to_string())
            }
            None => Bytes::new(),
        };
        let request = request
            .body(Full::new(body))
            .map_err(|e| DemoError::Api(e.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| DemoError::Api(e.to_string()))?;
            let status = response.status();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|e| DemoError::Api(e.to_string()))?
                .to_bytes();
            let json = serde_json::from_slice(&bytes)
                .map_err(|e| DemoError::Api(format!("{status}: not JSON: {e}")))?;
            Ok((status, json))
        };
        tokio::time::timeout(STEP_GUARD, exchange)
            .await
            .map_err(|_| DemoError::Timeout("an API answer"))?
    }
}
