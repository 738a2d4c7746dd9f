//! A small client for the server's HTTP API (hyper-util's pooled client).

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// Failure guard for one request, and for waiting on a task's state.
const GUARD: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub(crate) struct Api {
    base: String,
    token: Option<String>,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// An answer, fully read.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} answered a body that is not JSON ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The error envelope's code, checking the envelope's shape on the way.
    pub(crate) fn error_code(&self) -> String {
        let v = self.json();
        let error = &v["error"];
        assert!(error["message"].is_string(), "error without message: {v}");
        error["code"]
            .as_str()
            .unwrap_or_else(|| panic!("not an error envelope: {v}"))
            .to_owned()
    }

    pub(crate) fn error_message(&self) -> String {
        self.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The task id of a task view or cancel answer.
    pub(crate) fn id(&self) -> String {
        self.json()["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no id in {}", self.json()))
            .to_owned()
    }
}

impl Api {
    pub(crate) fn new(base: String) -> Api {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Api {
            base,
            token: None,
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// The same client, sending `Authorization: Bearer <token>`.
    pub(crate) fn with_token(&self, token: &str) -> Api {
        Api {
            token: Some(token.to_owned()),
            ..self.clone()
        }
    }

    /// Sends one request; `headers` are added as given.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        self.try_send(method, path, headers, body)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// Like [`Api::send`], but a connection failure is an `Err`.
    pub(crate) async fn try_send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<Reply, String> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder.body(Full::new(body.into())).unwrap();
        let response = tokio::time::timeout(GUARD, self.client.request(request))
            .await
            .map_err(|_| "no answer within 30 s".to_owned())?
            .map_err(|e| format!("request failed: {e:?}"))?;
        let (parts, body) = response.into_parts();
        let body = tokio::time::timeout(GUARD, body.collect())
            .await
            .map_err(|_| "no body within 30 s".to_owned())?
            .map_err(|e| format!("reading the body failed: {e:?}"))?
            .to_bytes();
        Ok(Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    }

    pub(crate) async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, &[], Bytes::new()).await
    }

    pub(crate) async fn post_json(&self, path: &str, body: &Value) -> Reply {
        self.send(
            Method::POST,
            path,
            &[("content-type", "application/json")],
            body.to_string(),
        )
        .await
    }

    pub(crate) async fn put_json(&self, path: &str, body: &Value) -> Reply {
        self.send(
            Method::PUT,
            path,
            &[("content-type", "application/json")],
            body.to_string(),
        )
        .await
    }

    /// Sends `body` as JSON to each of `routes`, expecting every one refused
    /// with `401 unauthorized` (this client's token missing or wrong).
    pub(crate) async fn expect_unauthorized(&self, routes: &[(Method, String)], body: &str) {
        for (method, path) in routes {
            let reply = self
                .send(
                    method.clone(),
                    path,
                    &[("content-type", "application/json")],
                    body.to_owned(),
                )
                .await;
            assert_eq!(reply.status, 401, "{method} {path}");
            assert_eq!(reply.error_code(), "unauthorized");
        }
    }

    /// `POST /tasks` with `url`, `key` and `json`.
    pub(crate) async fn submit(&self, url: &str, key: &str, payload: Value) -> Reply {
        self.post_json(
            "/tasks",
            &json!({ "url": url, "idempotency_key": key, "json": payload }),
        )
        .await
    }

    /// `POST /tasks`, or `None` if the request failed on the connection.
    pub(crate) async fn try_submit(&self, url: &str, key: &str, payload: Value) -> Option<Reply> {
        let task = json!({ "url": url, "idempotency_key": key, "json": payload });
        self.try_send(
            Method::POST,
            "/tasks",
            &[("content-type", "application/json")],
            task.to_string(),
        )
        .await
        .ok()
    }

    /// Submits and expects a new task: its id.
    pub(crate) async fn submit_new(&self, url: &str, key: &str) -> String {
        let reply = self.submit(url, key, json!({ "key": key })).await;
        assert_eq!(reply.status, 201, "{:?}", reply.json());
        reply.id()
    }

    pub(crate) async fn task(&self, id: &str) -> Value {
        let reply = self.get(&format!("/tasks/{id}")).await;
        assert_eq!(reply.status, 200, "GET /tasks/{id}: {:?}", reply.body);
        reply.json()
    }

    pub(crate) async fn cancel(&self, id: &str) -> Reply {
        self.send(
            Method::POST,
            &format!("/tasks/{id}/cancel"),
            &[],
            Bytes::new(),
        )
        .await
    }

    /// Every task `GET /tasks` lists under `filter` (query pairs such as
    /// `destination=…`, or empty), following `next` through every page of
    /// 500, at most 1000 pages.
    pub(crate) async fn list_all(&self, filter: &str) -> Vec<Value> {
        let first = match filter {
            "" => "/tasks?limit=500".to_owned(),
            _ => format!("/tasks?{filter}&limit=500"),
        };
        let mut path = first.clone();
        let mut tasks = Vec::new();
        for _ in 0..1000 {
            let page = self.get(&path).await;
            assert_eq!(page.status, 200, "{path}: {:?}", page.body);
            let page = page.json();
            tasks.extend(page["tasks"].as_array().cloned().unwrap());
            match page["next"].as_str() {
                Some(next) => path = format!("{first}&after={next}"),
                None => return tasks,
            }
        }
        panic!("more than 1000 pages of {first}")
    }

    /// Polls the task until it is in a terminal state (bounded in rounds
    /// and time: [`super::poll`]).
    pub(crate) async fn wait_terminal(&self, id: &str) -> Value {
        let terminal = async || {
            let task = self.task(id).await;
            match task["state"].as_str() {
                Some("success" | "failed" | "canceled") => Ok(task),
                _ => Err(task.to_string()),
            }
        };
        super::poll(
            &format!("task {id} terminal"),
            GUARD,
            Duration::from_millis(20),
            terminal,
        )
        .await
    }
}
