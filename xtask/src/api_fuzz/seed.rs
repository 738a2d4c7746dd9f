//! Tasks made through the API before schemathesis starts, one per state an
//! operation on a task needs to succeed: a succeeded task (its result), a
//! failed one (a retry), a finished one to delete, a pending one to cancel.
//! Their ids become the examples of the fuzz document's `{id}` parameters
//! ([`super::document`]), so every operation on a task reaches its 2xx in
//! the examples phase, whatever the stateful phase's links happen to follow.
//! Two schedules likewise: one every operation on a schedule uses, one the
//! delete deletes; two tenants the same way, and a key of the first for
//! the revoke; two flow keys with limits, one the delete removes.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode};

use super::sink;
use crate::harness::client::{Conn, Endpoint};

/// The ids of the seeded tasks, by the operation each is for.
#[derive(Debug, Clone)]
pub(crate) struct Seeds {
    /// Succeeded: `GET /tasks/{id}` and its result.
    pub(crate) succeeded: String,
    /// Failed (the sink answered 400): a retry.
    pub(crate) failed: String,
    /// Succeeded too: deleted.
    pub(crate) finished: String,
    /// Due in a day: canceled.
    pub(crate) pending: String,
    /// A key of [`TENANT`]: revoked.
    pub(crate) key_id: String,
    /// A subscription of [`TOPIC`]: read, patched and replayed.
    pub(crate) subscription: String,
    /// A subscription of [`TOPIC`]: deleted.
    pub(crate) subscription_to_delete: String,
    /// An event published on [`TOPIC`]: read.
    pub(crate) event: String,
}

/// The seeded topic every operation on a topic but the delete uses; it has
/// subscriptions, so a delete of it is refused.
pub(crate) const TOPIC: &str = "seed-topic";
/// The seeded topic (without subscriptions) the delete's example deletes.
pub(crate) const TOPIC_TO_DELETE: &str = "seed-topic-delete";

/// The seeded topic the examples of `operation_id` use.
pub(crate) fn topic_for_operation(operation_id: &str) -> Option<&'static str> {
    match operation_id {
        "deleteTopic" => Some(TOPIC_TO_DELETE),
        "putTopic" | "getTopic" | "subscribe" | "listSubscriptions" | "getSubscription"
        | "patchSubscription" | "unsubscribe" | "replaySubscription" | "publishEvent"
        | "getEvent" => Some(TOPIC),
        _ => None,
    }
}

/// The seeded flow key every operation on a key but the delete uses (with
/// a limit high enough to hold nothing back); its task keeps it known.
pub(crate) const FLOW_KEY: &str = "seed-flow-key";
/// The seeded flow key whose limits the delete's example removes.
pub(crate) const FLOW_KEY_TO_DELETE: &str = "seed-flow-key-delete";

/// The seeded flow key the examples of `operation_id` use.
pub(crate) fn flow_key_for_operation(operation_id: &str) -> Option<&'static str> {
    match operation_id {
        "deleteFlowKey" => Some(FLOW_KEY_TO_DELETE),
        "putFlowKey" | "getFlowKey" => Some(FLOW_KEY),
        _ => None,
    }
}

/// The seeded schedule every operation on a schedule but the delete uses
/// (paused, yearly: it never fires by itself during a run).
pub(crate) const SCHEDULE: &str = "seed-schedule";
/// The seeded schedule the delete's example deletes.
pub(crate) const SCHEDULE_TO_DELETE: &str = "seed-schedule-delete";

/// The seeded schedule the examples of `operation_id` use.
pub(crate) fn schedule_for_operation(operation_id: &str) -> Option<&'static str> {
    match operation_id {
        "deleteSchedule" => Some(SCHEDULE_TO_DELETE),
        "getSchedule" | "replaceSchedule" | "pauseSchedule" | "resumeSchedule"
        | "triggerSchedule" => Some(SCHEDULE),
        _ => None,
    }
}

/// The seeded tenant every operation on a tenant but the delete uses; it
/// has a task, so a delete of it is refused.
pub(crate) const TENANT: &str = "seed-tenant";
/// The seeded tenant (without tasks) the delete's example deletes.
pub(crate) const TENANT_TO_DELETE: &str = "seed-tenant-delete";

/// The seeded tenant the examples of `operation_id` use.
pub(crate) fn tenant_for_operation(operation_id: &str) -> Option<&'static str> {
    match operation_id {
        "deleteTenant" => Some(TENANT_TO_DELETE),
        "getTenant" | "updateTenant" | "createTenantKey" | "revokeTenantKey" => Some(TENANT),
        _ => None,
    }
}

impl Seeds {
    /// The seeded id the examples of `operation_id` use.
    pub(crate) fn for_operation(&self, operation_id: &str) -> Option<&str> {
        Some(match operation_id {
            "getTask" | "getTaskResult" => &self.succeeded,
            "retryTask" => &self.failed,
            "deleteTask" => &self.finished,
            "cancelTask" => &self.pending,
            _ => return None,
        })
    }

    /// The seeded subscription the examples of `operation_id` use.
    pub(crate) fn subscription_for_operation(&self, operation_id: &str) -> Option<String> {
        match operation_id {
            "unsubscribe" => Some(self.subscription_to_delete.clone()),
            "getSubscription" | "patchSubscription" | "replaySubscription" => {
                Some(self.subscription.clone())
            }
            _ => None,
        }
    }
}

/// How long a seeded task may take to end (the sink answers at once).
const WAIT_MS: u32 = 10_000;

/// Submits the seed tasks to the server at `addr` (tasks POST under
/// `origin`, the sink) and waits for the finished ones to end.
pub(crate) async fn seed(addr: SocketAddr, token: &str, origin: &str) -> Result<Seeds, String> {
    let mut client = Client::open(addr, token).await?;
    let ok_key = |n: usize| format!("seed-ok-{n}");
    let ok_keys: Vec<String> = (0..)
        .map(ok_key)
        .filter(|k| sink::succeeds(k))
        .take(2)
        .collect();
    let fail_key = (0..)
        .map(|n| format!("seed-fail-{n}"))
        .find(|k| !sink::succeeds(k))
        .ok_or("no failing key")?;
    let url = format!("{origin}/seed");
    let succeeded = client.submit(&url, &ok_keys[0], "").await?;
    let finished = client.submit(&url, &ok_keys[1], "").await?;
    let failed = client
        .submit(&url, &fail_key, r#","max_attempts":1"#)
        .await?;
    let pending = client
        .submit(&url, "seed-pending", r#","delay_ms":86400000"#)
        .await?;
    for name in [SCHEDULE, SCHEDULE_TO_DELETE] {
        // The one every operation uses keeps a priority and a flow key in
        // its template, so reads and replacements meet both.
        let keyed = if name == SCHEDULE {
            format!(r#","priority":3,"flow_key":"{FLOW_KEY}""#)
        } else {
            String::new()
        };
        let body = format!(
            r#"{{"name":"{name}","cron":"@yearly","paused":true,"task":{{"url":"{url}"{keyed}}}}}"#
        );
        client.send(Method::POST, "/schedules", Some(body)).await?;
    }
    for name in [FLOW_KEY, FLOW_KEY_TO_DELETE] {
        let body = r#"{"max_in_flight":1000}"#.to_owned();
        client
            .send(Method::PUT, &format!("/flow-keys/{name}"), Some(body))
            .await?;
    }
    let keyed = format!(r#","delay_ms":86400000,"flow_key":"{FLOW_KEY}""#);
    client.submit(&url, "seed-flow-key-task", &keyed).await?;
    for name in [TENANT, TENANT_TO_DELETE] {
        let body = format!(r#"{{"name":"{name}"}}"#);
        client.send(Method::POST, "/tenants", Some(body)).await?;
    }
    let made = client
        .send(Method::POST, &format!("/tenants/{TENANT}/keys"), None)
        .await?;
    let field = |name: &str| {
        made[name]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("POST /tenants/{TENANT}/keys: no {name} in {made}"))
    };
    let key_id = field("id")?;
    // A task of the tenant, submitted with its key: the tenant is never
    // empty, so no delete of it (the examples try every name they know)
    // takes the key away before the revoke's example runs.
    Client::open(addr, &field("key")?)
        .await?
        .submit(&url, "seed-tenant-task", r#","delay_ms":86400000"#)
        .await?;
    let (subscription, subscription_to_delete, event) = seed_topics(&mut client, &url).await?;
    for (id, state) in [
        (&succeeded, "success"),
        (&finished, "success"),
        (&failed, "failed"),
    ] {
        let ended = client.wait(id).await?;
        if ended != state {
            return Err(format!("seed task {id} ended {ended:?}, not {state}"));
        }
    }
    Ok(Seeds {
        succeeded,
        failed,
        finished,
        pending,
        key_id,
        subscription,
        subscription_to_delete,
        event,
    })
}

/// Makes [`TOPIC`] with two subscriptions to `url` and one event, and the
/// empty [`TOPIC_TO_DELETE`]; answers the subscriptions' ids and the event's.
async fn seed_topics(client: &mut Client, url: &str) -> Result<(String, String, String), String> {
    for name in [TOPIC, TOPIC_TO_DELETE] {
        let body = r#"{"description":"seeded"}"#.to_owned();
        client
            .send(Method::PUT, &format!("/topics/{name}"), Some(body))
            .await?;
    }
    let mut ids = Vec::new();
    for _ in 0..2 {
        let body = format!(r#"{{"url":"{url}"}}"#);
        let made = client
            .send(
                Method::POST,
                &format!("/topics/{TOPIC}/subscriptions"),
                Some(body),
            )
            .await?;
        ids.push(
            made["id"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("a subscribe answered no id: {made}"))?,
        );
    }
    let body = r#"{"event_type":"seed.made","json":{},"idempotency_key":"seed-event"}"#.to_owned();
    let event = client
        .send(Method::POST, &format!("/topics/{TOPIC}/events"), Some(body))
        .await?;
    let event = event["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("a publish answered no id: {event}"))?;
    let to_delete = ids.pop().ok_or("no subscription made")?;
    let kept = ids.pop().ok_or("no subscription made")?;
    Ok((kept, to_delete, event))
}

struct Client {
    conn: Conn,
    endpoint: Endpoint,
    authorization: HeaderValue,
}

impl Client {
    async fn open(addr: SocketAddr, token: &str) -> Result<Client, String> {
        Ok(Client {
            conn: Conn::open(addr).await?,
            endpoint: Endpoint::new(addr),
            authorization: HeaderValue::try_from(format!("Bearer {token}"))
                .map_err(|e| format!("token: {e}"))?,
        })
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<serde_json::Value, String> {
        let mut request = self.endpoint.request(method, path, body.map(Bytes::from))?;
        request
            .headers_mut()
            .insert(http::header::AUTHORIZATION, self.authorization.clone());
        let reply = self.conn.send(request).await?;
        if !matches!(reply.status, StatusCode::OK | StatusCode::CREATED) {
            return Err(format!(
                "{path}: {} {}",
                reply.status,
                String::from_utf8_lossy(&reply.body)
            ));
        }
        serde_json::from_slice(&reply.body).map_err(|e| format!("{path}: {e}"))
    }

    /// Submits a task; returns its id.
    async fn submit(&mut self, url: &str, key: &str, extra: &str) -> Result<String, String> {
        let body = format!(r#"{{"url":"{url}","idempotency_key":"{key}"{extra}}}"#);
        let task = self.send(Method::POST, "/tasks", Some(body)).await?;
        task["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("a submit answered no id: {task}"))
    }

    /// Waits for the task to end; returns its state.
    async fn wait(&mut self, id: &str) -> Result<String, String> {
        let path = format!("/tasks/{id}?wait_ms={WAIT_MS}");
        let task = self.send(Method::GET, &path, None).await?;
        Ok(task["state"].as_str().unwrap_or_default().to_owned())
    }
}
