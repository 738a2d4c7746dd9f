//! Phase 16, topics: tasks created per second through topics
//! (each event to 100 subscriptions: its 100 tasks in one transaction)
//! beside batch submits of 100 tasks, on the same server in the same run.
//! The subscriptions' destination is paused, so the worker claims nothing
//! and only creation is timed; every key is new.

use super::*;

/// Subscriptions of the topic, and tasks per batch: one event and one
/// batch each make this many tasks.
const FAN_OUT: u64 = 100;
/// Connections of both loads.
const CONNECTIONS: usize = 8;
/// Where the tasks would call: a destination paused before the loads.
const URL: &str = "http://127.0.0.1:9/topic-bench";

/// `method path` with a JSON body, expecting 2xx.
async fn send(endpoint: &Endpoint, method: Method, path: &str, body: Value) -> Result<(), String> {
    let mut conn = Conn::open(endpoint.addr).await?;
    let body = Bytes::from(body.to_string());
    let reply = conn
        .send(endpoint.request(method.clone(), path, Some(body))?)
        .await?;
    if reply.status.is_success() {
        Ok(())
    } else {
        Err(format!("{method} {path}: {}", reply.status))
    }
}

/// `POST /topics/bench/events`, each with a new key.
fn publishes() -> MakeRequest {
    Arc::new(move |endpoint: &Endpoint, i| {
        let body = format!(
            r#"{{"event_type":"order.placed","json":{{"n":{i}}},"idempotency_key":"event-{i}"}}"#
        );
        endpoint.request(
            Method::POST,
            "/topics/bench/events",
            Some(Bytes::from(body)),
        )
    })
}

/// `POST /tasks/batch` with [`FAN_OUT`] tasks, each with a new key.
fn batches() -> MakeRequest {
    Arc::new(move |endpoint: &Endpoint, i| {
        let mut body = String::from(r#"{"tasks":["#);
        for j in 0..FAN_OUT {
            if j > 0 {
                body.push(',');
            }
            body.push_str(&format!(
                r#"{{"url":"{URL}","json":{{"n":{i}}},"idempotency_key":"batch-{i}-{j}"}}"#
            ));
        }
        body.push_str("]}");
        endpoint.request(Method::POST, "/tasks/batch", Some(Bytes::from(body)))
    })
}

impl Bench {
    pub(super) async fn topics(&mut self) -> Result<(), String> {
        let plan = self.plan;
        let tc = self.start_tc_full("topics")?;
        let endpoint = Endpoint::new(tc.addr);
        let paused = json!({"paused": true});
        send(&endpoint, Method::PUT, "/destinations/127.0.0.1:9", paused).await?;
        send(&endpoint, Method::PUT, "/topics/bench", json!({})).await?;
        for n in 0..FAN_OUT {
            let sub = json!({"url": format!("{URL}/{n}"), "event_types": ["order.*"]});
            send(&endpoint, Method::POST, "/topics/bench/subscriptions", sub).await?;
        }
        let load = Load {
            connections: CONNECTIONS,
            max_requests: plan.max_requests,
            max_duration: plan.node_window,
        };
        let events = load::run(&endpoint, load, publishes(), load::created).await?;
        let batches = load::run(&endpoint, load, batches(), load::success).await?;
        let warnings = self.server_warnings(&tc);
        tc.stop();
        let per = FAN_OUT as f64;
        let (topic_rate, batch_rate) = (events.per_second() * per, batches.per_second() * per);
        self.progress(&format!(
            "  {:.0} tasks/s through topics ({:.0} events/s of {FAN_OUT}), {:.0} tasks/s in \
             batches of {FAN_OUT}",
            topic_rate,
            events.per_second(),
            batch_rate
        ));
        self.push(
            Figure::new(
                "topic_tasks",
                &format!("16 tasks/s through topics, events to {FAN_OUT} subscriptions"),
                topic_rate,
                "/s",
            )
            .beside(
                batch_rate,
                &format!("batch submits of {FAN_OUT}, same server"),
            )
            .target(Target::RatioAtLeast(1.0))
            .note(format!(
                "{CONNECTIONS} connections, {:.0} s each, destination paused. {} {} {warnings}",
                plan.node_window.as_secs_f64(),
                events.problems(),
                batches.problems()
            )),
        );
        self.detail(
            "topics",
            json!({
                "fan_out": FAN_OUT,
                "events_per_second": events.per_second(),
                "topic_tasks_per_second": topic_rate,
                "batches_per_second": batches.per_second(),
                "batch_tasks_per_second": batch_rate,
            }),
        );
        Ok(())
    }
}
